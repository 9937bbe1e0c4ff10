#!/usr/bin/env bash
# A simulated cluster on one machine: N "nodes", each a network namespace
# with its own address and host name, joined by veth pairs on a bridge.
# Open MPI runs across them over TCP exactly as across real hosts (its rsh
# launcher starts one daemon per node; shared memory only inside a node).
# Needs root (ip netns, veth, bridge, tc); installs iproute2 and Open MPI
# when missing.
#
# Usage: scripts/cluster-sim.sh COMMAND [ARGS]
#   up N [SLOTS]        create nodes strata-node1..N (SLOTS MPI slots each,
#                       default 2), the head node strata-node0 (where mpirun
#                       runs) and a hostfile; replaces a previous cluster
#   down                remove every node, the bridge and the hosts entries
#                       (processes left in the nodes are killed first)
#   status              the nodes, their addresses and link settings
#   hostfile            print the path of the hostfile (slots per node)
#   mpirun ARGS...      Open MPI's mpirun across the nodes: the launcher, the
#                       interfaces and the transports set (see below); uses
#                       the hostfile unless ARGS name --host or --hostfile
#   exec NODE CMD...    run CMD on NODE (its namespace and host name)
#   kill NODE           SIGKILL every process on NODE (its kernel still resets
#                       their connections; "link NODE down" is a node that
#                       lost power)
#   link NODE up|down   bring NODE's network link up or down
#   shape NODE SETTINGS the link of NODE, both directions, e.g.
#                       "delay 50ms loss 1%" or "rate 1gbit"; "clear" removes
#                       them. Delay needs the kernel's netem; loss and rate
#                       work without it (nftables, tbf)
#   has-netem           exit 0 when the kernel has netem
#   rsh HOST CMD...     the remote shell Open MPI's launcher calls (internal)
#
# On a real cluster the same mpirun options apply with the real interface
# names: --mca btl tcp,vader,self --mca btl_tcp_if_include eth0
# --mca oob_tcp_if_include eth0 (docs/cluster.md).
#
# Environment: STRATA_CLUSTER_NAME (default strata: nodes strata-node1..N,
# bridge strata-br0; another name makes a second, separate cluster),
# STRATA_CLUSTER_NET (first three octets of its addresses, default 10.77.0),
# STRATA_CLUSTER_STATE (state folder, default /run/NAME-cluster),
# STRATA_CLUSTER_TCP_RETRIES2 (the nodes' net.ipv4.tcp_retries2, default 5:
# TCP gives up on a cut-off peer after about 13 s).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
self="$here/$(basename "${BASH_SOURCE[0]}")"
. "$here/common.sh"

name="${STRATA_CLUSTER_NAME:-strata}"
[[ "$name" =~ ^[a-z][a-z0-9]{0,9}$ ]] || { echo "cluster-sim: STRATA_CLUSTER_NAME must be 1-10 lowercase letters or digits, got '$name'" >&2; exit 1; }
net="${STRATA_CLUSTER_NET:-10.77.0}"
state="${STRATA_CLUSTER_STATE:-/run/$name-cluster}"
bridge="$name-br0"
vethp="$name-v"
prefix="$name-node"
tcp_retries2="${STRATA_CLUSTER_TCP_RETRIES2:-5}"
[[ "$net" =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || { echo "cluster-sim: STRATA_CLUSTER_NET must be three octets (e.g. 10.77.0), got '$net'" >&2; exit 1; }
[[ "$tcp_retries2" =~ ^[0-9]+$ ]] || { echo "cluster-sim: STRATA_CLUSTER_TCP_RETRIES2 must be a number, got '$tcp_retries2'" >&2; exit 1; }
hosts_begin="# $name cluster-sim begin"
hosts_end="# $name cluster-sim end"

die() { echo "cluster-sim: $*" >&2; exit 1; }

node_address() { # node k's address; the head node (0) is .254
  if [ "$1" = 0 ]; then echo "$net.254"; else echo "$net.$1"; fi
}

need_root() {
  [ "$(id -u)" = 0 ] || die "needs root (network namespaces, veth pairs, a bridge); run it with sudo"
}

nodes() { # the nodes that exist, in order
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${prefix}[0-9]+$" | sort -V || true
}

node_index() { # strata-node3 -> 3; refuses other names
  local n="$1"
  [[ "$n" =~ ^${prefix}([0-9]+)$ ]] || die "no such node '$n' (nodes are ${prefix}1..N; see: $0 status)"
  ip netns list | awk '{print $1}' | grep -qx "$n" || die "node '$n' does not exist (see: $0 status)"
  echo "${BASH_REMATCH[1]}"
}

# SIGKILL every process of a node, and wait until they are gone.
kill_node() {
  local n="$1" k
  ip netns pids "$n" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
  for k in $(seq 1 50); do
    [ -z "$(ip netns pids "$n" 2>/dev/null)" ] && return 0
    sleep 0.1
  done
  echo "cluster-sim: warning: processes of $n still alive after 5 s" >&2
}

down() {
  need_root
  local n
  local k
  for n in $(nodes); do kill_node "$n"; done
  for n in $(nodes); do ip netns del "$n"; done
  ip link del "$bridge" 2>/dev/null || true
  # A deleted namespace lives on while sockets of it linger (TCP to a node
  # that was cut off); its veth pair goes with the host's end.
  for k in $(ip -br link show 2>/dev/null | awk '{print $1}' | sed -n "s/^${vethp}\([0-9]*\)@.*/\1/p"); do
    ip link del "$vethp$k" 2>/dev/null || true
  done
  if grep -q "^$hosts_begin" /etc/hosts; then
    # Rewritten in place, not renamed over (in containers /etc/hosts is a
    # bind mount that cannot be replaced).
    local kept
    kept="$(sed "/^$hosts_begin/,/^$hosts_end/d" /etc/hosts)"
    printf '%s\n' "$kept" > /etc/hosts
  fi
  # Only a folder this script made (a user's STRATA_CLUSTER_STATE may name
  # one that holds other things).
  if [ -f "$state/.strata-cluster" ]; then rm -rf "$state"; fi
}

up() {
  local count="${1:-}" slots="${2:-2}" k n
  [[ "$count" =~ ^[0-9]+$ ]] && [ "$count" -ge 1 ] && [ "$count" -le 250 ] || \
    die "up needs a node count from 1 to 250, got '${count}'"
  [[ "$slots" =~ ^[0-9]+$ ]] && [ "$slots" -ge 1 ] || die "slots must be a positive integer, got '$slots'"
  need_root
  strata_apt_install iproute2 openmpi-bin util-linux bc procps
  down
  if [ -e "$state" ] && [ -n "$(ls -A "$state" 2>/dev/null)" ]; then
    die "the state folder $state exists and is not empty (set STRATA_CLUSTER_STATE to another)"
  fi
  if ip -br addr 2>/dev/null | grep -q " $net\."; then
    die "$net.0/24 is already in use on this machine (set STRATA_CLUSTER_NET to a free /24, e.g. 10.79.0)"
  fi
  mkdir -p "$state"
  touch "$state/.strata-cluster"
  ip link add "$bridge" type bridge
  # The machine itself is on the cluster's network too (.253), so that srun,
  # sbatch and ssh-free tools reach the nodes from outside the namespaces.
  ip addr add "$net.253/24" dev "$bridge"
  ip link set "$bridge" up
  echo "$hosts_begin" > "$state/hosts"
  : > "$state/hostfile"
  # Node 0 is the head node (mpirun runs there, as on a login node); nodes
  # 1..N run the ranks.
  for k in $(seq 0 "$count"); do
    n="$prefix$k"
    ip netns add "$n"
    ip link add "$vethp$k" type veth peer name eth0 netns "$n"
    ip link set "$vethp$k" master "$bridge"
    ip link set "$vethp$k" up
    ip -n "$n" addr add "$(node_address "$k")/24" dev eth0
    ip -n "$n" link set eth0 up
    ip -n "$n" link set lo up
    # TCP gives up on an unreachable peer after about 13 s instead of 15
    # minutes (tcp_retries2 15), so that mpirun notices a node cut off.
    ip netns exec "$n" sh -c "echo $tcp_retries2 > /proc/sys/net/ipv4/tcp_retries2"
    echo "$(node_address "$k") $n" >> "$state/hosts"
    [ "$k" -gt 0 ] && echo "$n slots=$slots" >> "$state/hostfile"
  done
  echo "$hosts_end" >> "$state/hosts"
  cat "$state/hosts" >> /etc/hosts
  echo "cluster-sim: $count nodes up (${prefix}1..$count at $net.1-$count, $slots slots each; head node ${prefix}0 at $net.254); hostfile $state/hostfile"
}

status() {
  local n k
  [ -n "$(nodes)" ] || { echo "cluster-sim: no nodes (run: $0 up N)"; return 0; }
  for n in $(nodes); do
    k="${n#"$prefix"}"
    [ "$k" = 0 ] && continue
    printf '%-14s %-12s link %-5s %s procs  %s %s\n' "$n" "$(node_address "$k")" \
      "$(ip -n "$n" -br link show eth0 | awk '{print $2}')" \
      "$(ip netns pids "$n" | wc -l)" \
      "$(tc -n "$n" qdisc show dev eth0 | grep -oE '(netem|tbf) .*' || true)" \
      "$(ip netns exec "$n" nft list table inet strata_shape >/dev/null 2>&1 && echo "(nftables loss)" || true)"
  done
}

# Runs a command "on" a node: in its network namespace, with its host name
# (a UTS namespace: Open MPI's and Slurm's per-node files in /tmp carry the
# host name). The file system is the machine's, shared like a cluster's
# /home. nsenter rather than "ip netns exec": the latter mounts a new /sys
# without the cgroup tree, which slurmd needs.
in_node() {
  local n="$1"; shift
  exec nsenter --net="/run/netns/$n" unshare --uts \
    sh -c 'hostname "$0" && exec "$@"' "$n" "$@"
}

# Open MPI's launcher calls this as its remote shell: "rsh HOST CMD...".
# The command runs on HOST (in_node), so that Open MPI sees one host per
# node.
rsh() {
  local host="$1"; shift
  ip netns list | awk '{print $1}' | grep -qx "$host" || die "rsh: no node '$host'"
  in_node "$host" sh -c "$*"
}

mpirun_across() {
  [ -n "$(nodes)" ] || die "no nodes (run: $0 up N first)"
  local a use_hostfile=1
  for a in "$@"; do
    case "$a" in --host|-host|-H|--hostfile|-hostfile|--machinefile|-machinefile) use_hostfile=0 ;; esac
  done
  local extra=()
  [ "$use_hostfile" = 1 ] && extra+=(--hostfile "$state/hostfile")
  [ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  in_node "${prefix}0" mpirun --mca plm_rsh_agent "$self rsh" --mca plm_rsh_no_tree_spawn 1 \
    --mca oob_tcp_if_include "$net.0/24" --mca btl_tcp_if_include "$net.0/24" \
    --mca btl tcp,vader,self --bind-to none \
    --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3 \
    "${extra[@]}" "$@"
}

# tc/nftables on NODE's link. With the kernel's netem (sch_netem) the
# settings go to netem on both ends of the link; without it (kernels built
# without CONFIG_NET_SCH_NETEM), loss is dropped at random by nftables in the
# node (both directions), rate is a token bucket (tbf) on both ends, and
# delay cannot be simulated (an error says so).
shape() {
  local n="$1"; shift
  local k; k="$(node_index "$n")"
  [ $# -gt 0 ] || die "shape needs settings (e.g. \"delay 50ms loss 1%\", \"rate 1gbit\") or clear"
  tc -n "$n" qdisc del dev eth0 root 2>/dev/null || true
  tc qdisc del dev "$vethp$k" root 2>/dev/null || true
  ip netns exec "$n" nft delete table inet strata_shape 2>/dev/null || true
  # shellcheck disable=SC2048,SC2086
  set -- $*   # "delay 50ms loss 1%" as one argument or as several
  [ "$*" = clear ] && return 0
  if has_netem; then
    # shellcheck disable=SC2068
    tc -n "$n" qdisc add dev eth0 root netem $@ && tc qdisc add dev "$vethp$k" root netem $@
    return
  fi
  local delay="" loss="" rate=""
  while [ $# -gt 0 ]; do
    case "$1" in
      delay) delay="$2"; shift 2 ;;
      loss) loss="${2%\%}"; shift 2 ;;
      rate) rate="$2"; shift 2 ;;
      *) die "shape: '$1' needs the kernel's netem, which this kernel lacks (CONFIG_NET_SCH_NETEM); without it: loss P%, rate R" ;;
    esac
  done
  [ -z "$delay" ] || die "shape: delay needs the kernel's netem (sch_netem), which this kernel lacks; loss and rate work without it"
  if [ -n "$loss" ]; then
    strata_apt_install nftables
    local per10k; per10k="$(echo "$loss * 100 / 1" | bc)"
    printf '%s\n' "table inet strata_shape {" \
      "  chain in { type filter hook input priority 0; numgen random mod 10000 < $per10k drop; }" \
      "  chain out { type filter hook output priority 0; numgen random mod 10000 < $per10k drop; }" \
      "}" | ip netns exec "$n" nft -f -
  fi
  if [ -n "$rate" ]; then
    tc -n "$n" qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 100ms
    tc qdisc add dev "$vethp$k" root tbf rate "$rate" burst 256kb latency 100ms
  fi
}

# Whether this kernel has netem (delay and loss in tc).
has_netem() {
  local ok=1 probe="$name-netem-probe"
  ip netns add "$probe" 2>/dev/null || return 1
  tc -n "$probe" qdisc add dev lo root netem delay 1ms 2>/dev/null && ok=0
  ip netns del "$probe"
  return $ok
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  up|down|mpirun|exec|rsh|kill|link|shape|has-netem) need_root ;;
esac
case "$cmd" in
  up) up "$@" ;;
  down) down; echo "cluster-sim: down" ;;
  status) status ;;
  hostfile) [ -f "$state/hostfile" ] || die "no cluster (run: $0 up N)"; echo "$state/hostfile" ;;
  mpirun) mpirun_across "$@" ;;
  exec)
    [ $# -ge 2 ] || die "exec needs a node and a command"
    n="$1"; shift; node_index "$n" >/dev/null
    in_node "$n" "$@" ;;
  rsh) [ $# -ge 2 ] || die "rsh needs a host and a command"; rsh "$@" ;;
  kill)
    [ $# -eq 1 ] || die "kill needs a node"
    node_index "$1" >/dev/null
    kill_node "$1" ;;
  link)
    [ $# -eq 2 ] && { [ "$2" = up ] || [ "$2" = down ]; } || die "link needs a node and up|down"
    node_index "$1" >/dev/null
    ip -n "$1" link set eth0 "$2" ;;
  shape) [ $# -ge 2 ] || die "shape needs a node and settings"; shape "$@" ;;
  has-netem) has_netem ;;
  -h|--help|help|"") sed -n '2,/^set -euo/p' "$self" | sed '$d; s/^# \{0,1\}//' ;;
  *) die "unknown command '$cmd' (see: $0 --help)" ;;
esac
