# Helpers for the scripts and tests that run on the simulated cluster
# (sourced). They use a cluster of their own (STRATA_CLUSTER_NAME, default
# stratatest, on 10.78.0.0/24), so that a cluster a person brought up with
# scripts/cluster-sim.sh is left alone.

export STRATA_CLUSTER_NAME="${STRATA_CLUSTER_NAME:-stratatest}"
export STRATA_CLUSTER_NET="${STRATA_CLUSTER_NET:-10.78.0}"
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"
cluster="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/cluster-sim.sh"
node="$STRATA_CLUSTER_NAME-node"
failures=0

now() { date +%s.%N; }
elapsed() { echo "$(now) - $1" | bc | xargs printf '%.1f'; }
pass() { echo "  ok: $*"; }
fail() { echo "  FAILED: $*"; failures=$((failures + 1)); }

# Median [min-max] of the arguments.
summary() {
  [ $# -eq 0 ] && { echo "-"; return; }
  printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {m = NR % 2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2;
    if (NR == 1) printf "%g", m; else printf "%g [%g-%g]", m, v[1], v[NR]}'
}

# Exits 77 (skipped) with the reason when this machine cannot run the
# cluster: not root, no ip/nsenter/unshare, namespaces refused.
cluster_can_run() {
  local why=""
  if [ "$(id -u)" != 0 ]; then why="not root (network namespaces need root)"
  elif ! command -v ip >/dev/null || ! command -v nsenter >/dev/null || ! command -v mpirun >/dev/null; then
    why="ip, nsenter or mpirun missing (apt install iproute2 util-linux openmpi-bin)"
  elif ! ip netns add "${STRATA_CLUSTER_NAME}-probe" 2>/dev/null; then
    why="this machine refuses to make network namespaces (a container without CAP_SYS_ADMIN?)"
  else
    ip netns del "${STRATA_CLUSTER_NAME}-probe"
  fi
  if [ -n "$why" ]; then
    echo "SKIPPED: the simulated cluster cannot run here: $why"
    exit 77
  fi
}

# cluster_init BUILD_DIR: checks the machine, sets $bin and $work (a folder
# every node sees: the nodes' /tmp are their own).
cluster_init() {
  cluster_can_run
  local build
  build="$(cd "$1" && pwd)" || exit 1
  bin="$build/bin"
  [ -x "$bin/strata-train" ] || { echo "cluster: no $bin/strata-train (build first)" >&2; exit 1; }
  work="$build/cluster-work"
  mkdir -p "$work"
  export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE STRATA_COMM_TIMEOUT="${timeout_s:-30}"
  trap cluster_down EXIT
}

cluster_up() { "$cluster" up "$@" > "$work/cluster-up.log" 2>&1 || { cat "$work/cluster-up.log"; return 1; }; }
cluster_down() { "$cluster" down >/dev/null 2>&1 || true; }

cluster_mpirun() {
  "$cluster" mpirun -x OMP_NUM_THREADS -x OMP_WAIT_POLICY -x STRATA_COMM_TIMEOUT "$@"
}

cluster_result() {
  if [ "$failures" -gt 0 ]; then echo "cluster: $failures check(s) FAILED (logs in $work)"; return 1; fi
  echo "cluster: every check passed"
}
