#!/usr/bin/env bash
# A Slurm cluster on one machine, on top of scripts/cluster-sim.sh: slurmctld
# on the head node (strata-node0), one slurmd on each simulated node, munge
# for authentication, Debian's Slurm 22.05 with its PMIx plugin. Afterwards
# srun, sbatch, squeue and sinfo work from the machine as on a cluster:
#
#   srun -N 2 --ntasks-per-node=2 --mpi=pmix build/bin/strata-train ...
#   sbatch docs/examples/train.sbatch
#
# Needs root; installs slurm-wlm and munge when missing. The configuration
# goes to /etc/slurm/slurm.conf (Debian's default path, so that the client
# commands need no SLURM_CONF), or to $SLURM_CONF when that is set; an
# existing file that this script did not write is left alone and the script
# stops. The daemons run inside the simulated nodes; a real Slurm on this
# machine is not touched.
#
# Usage: scripts/slurm-sim.sh COMMAND
#   up N [CPUS]   start N nodes of CPUS CPUs each (default 2; the machine's
#                 cores are shared, Slurm is told CPUS); replaces a previous
#                 simulated cluster
#   down          stop the daemons (munged only if this script started it),
#                 remove the configuration and the nodes
#   status        sinfo and the daemons
# Environment: as scripts/cluster-sim.sh (STRATA_CLUSTER_NAME, ...).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
self="$here/$(basename "${BASH_SOURCE[0]}")"
. "$here/common.sh"
cluster="$here/cluster-sim.sh"

name="${STRATA_CLUSTER_NAME:-strata}"
net="${STRATA_CLUSTER_NET:-10.77.0}"
state="${STRATA_CLUSTER_STATE:-/run/$name-cluster}"
prefix="$name-node"
conf="${SLURM_CONF:-/etc/slurm/slurm.conf}"
[[ "$conf" = /* ]] || conf="$PWD/$conf"   # the daemons change folder
marker="# written by strata scripts/slurm-sim.sh"

die() { echo "slurm-sim: $*" >&2; exit 1; }

start_munge() {
  if [ -S /run/munge/munge.socket.2 ] && pgrep -x munged >/dev/null; then return 0; fi
  mkdir -p /run/munge && chown munge:munge /run/munge && chmod 0755 /run/munge
  [ -f /etc/munge/munge.key ] || { mungekey --create 2>/dev/null || /usr/sbin/create-munge-key -f; }
  runuser -u munge -- /usr/sbin/munged
  touch /run/munge/.started-by-strata-slurm-sim
  local k
  for k in $(seq 1 50); do [ -S /run/munge/munge.socket.2 ] && return 0; sleep 0.1; done
  die "munged did not start (see /var/log/munge/munged.log)"
}

up() {
  local count="${1:-}" cpus="${2:-2}" k
  [[ "$count" =~ ^[0-9]+$ ]] && [ "$count" -ge 1 ] || die "up needs a node count, got '${count}'"
  [[ "$cpus" =~ ^[0-9]+$ ]] && [ "$cpus" -ge 1 ] || die "CPUS must be a positive integer, got '$cpus'"
  [ "$(id -u)" = 0 ] || die "needs root (daemons, network namespaces); run it with sudo"
  if [ -f "$conf" ] && ! grep -q "^$marker" "$conf"; then
    die "$conf exists and was not written by this script; move it away first"
  fi
  mkdir -p "$(dirname "$conf")"
  strata_apt_install slurm-wlm munge openmpi-bin
  # The daemons live in the nodes' namespaces: taking the nodes down (first
  # thing cluster-sim.sh up does) stops a previous simulated Slurm.
  "$cluster" up "$count" "$cpus"
  start_munge
  local dir="$state/slurm"
  mkdir -p "$dir/ctld" "$dir/spool"
  # Every daemon runs as root and tracks processes by their parent (no
  # cgroups in a container); the configured CPUs stand even when the
  # machine has fewer cores (config_overrides).
  cat > "$conf" <<EOF
$marker; removed by its "down"
ClusterName=$name-sim
SlurmctldHost=${prefix}0($net.254)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$dir/ctld
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
NodeName=${prefix}[1-$count] NodeAddr=$net.[1-$count] CPUs=$cpus State=UNKNOWN
PartitionName=sim Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
  "$cluster" exec "${prefix}0" /usr/sbin/slurmctld -i -f "$conf"
  for k in $(seq 1 "$count"); do
    mkdir -p "$dir/spool/$prefix$k"
    # The PMIx plugin's per-step folders go to /tmp by default, named by job
    # and step only: nodes sharing one /tmp would collide. Each slurmd reads
    # a copy of slurm.conf beside an mpi.conf of its own (Slurm reads
    # mpi.conf from slurm.conf's folder) that moves them.
    local nd="$dir/node/$prefix$k"
    mkdir -p "$nd" "$dir/pmix/$prefix$k"
    cp "$conf" "$nd/slurm.conf"
    echo "PMIxCliTmpDirBase=$dir/pmix/$prefix$k" > "$nd/mpi.conf"
    "$cluster" exec "$prefix$k" /usr/sbin/slurmd -N "$prefix$k" -f "$nd/slurm.conf"
  done
  # Ready when every node is idle.
  local deadline=$((SECONDS + 30))
  while [ "$SECONDS" -lt "$deadline" ]; do
    if [ "$(timeout 5 sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)" -ge "$count" ]; then
      echo "slurm-sim: $count nodes idle (partition sim, $cpus CPUs each); try: srun -N $count hostname"
      return 0
    fi
    sleep 0.2
  done
  timeout 5 sinfo -N >&2 || true
  tail -n 5 "$dir"/*.log >&2 || true
  die "the nodes did not come up within 30 s; logs in $dir"
}

down() {
  [ "$(id -u)" = 0 ] || die "needs root"
  # munged serves the whole machine; stopped only when this script started it.
  if [ -f /run/munge/.started-by-strata-slurm-sim ]; then
    pkill -x munged 2>/dev/null || true
    rm -f /run/munge/.started-by-strata-slurm-sim
  fi
  if [ -f "$conf" ] && grep -q "^$marker" "$conf"; then rm -f "$conf"; fi
  "$cluster" down >/dev/null
  echo "slurm-sim: down"
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  up) up "$@" ;;
  down) down ;;
  status) sinfo -N -l 2>&1 || true; for d in slurmctld slurmd munged; do pgrep -a -x "$d" || true; done ;;
  -h|--help|help|"") sed -n '2,/^set -euo/p' "$self" | sed '$d; s/^# \{0,1\}//' ;;
  *) die "unknown command '$cmd' (see: $0 --help)" ;;
esac
