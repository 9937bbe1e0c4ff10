#!/usr/bin/env bash
# Data parallelism across simulated nodes (scripts/cluster-sim.sh) against
# two processes on one node: W2 (784-1024-1024-10, global batch 256,
# docs/benchmarks.md) on 2 processes with one thread each,
#   one node        shared memory between the two processes
#   two nodes       TCP over the veth link at full speed, at 10 Gbit/s and at
#                   1 Gbit/s (tc on both ends of each link: netem's rate, or
#                   a token bucket where the kernel has no netem)
# and, on two nodes, gradient buckets of 1 MiB summed while backward runs
# (overlap) against one sum after backward (--no-overlap). The configurations
# are interleaved, each repeated; samples/s is strata-train's own figure
# (steps after the warm-up). Run it on a quiet machine.
#
# Usage: scripts/cluster-bench.sh [--repeat N] [--steps N] [BUILD_DIR]
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
. "$here/cluster-common.sh"

repeat=3
steps=60
build=""
while [ $# -gt 0 ]; do
  case "$1" in
    --repeat) repeat="${2:-}"; shift; shift || true ;;
    --steps) steps="${2:-}"; shift; shift || true ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "cluster-bench: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) build="$1"; shift ;;
  esac
done
[[ "$repeat" =~ ^[1-9][0-9]*$ ]] && [[ "$steps" =~ ^[1-9][0-9]*$ ]] && [ "$steps" -gt 10 ] \
  || { echo "cluster-bench: --repeat needs a positive integer and --steps one above 10 (the warm-up)" >&2; exit 2; }
cluster_init "${build:-$top/build}"
cluster_up 2 2 || exit 1

w2=(--dataset synthetic --layers 784,1024,1024,10 --batch-size 256 --steps "$steps"
    --warmup-steps 10 --log-every 0 --threads 1)
configs=("one-node" "full overlap" "full no-overlap" "10gbit overlap" "10gbit no-overlap"
         "1gbit overlap" "1gbit no-overlap")
declare -A rate
for r in $(seq 1 "$repeat"); do
  for c in "${configs[@]}"; do
    link="${c%% *}"; mode="${c#* }"
    case "$link" in
      one-node) hosts="${node}1:2" ;;
      *) hosts="${node}1:1,${node}2:1" ;;
    esac
    for k in 1 2; do
      case "$link" in
        10gbit) "$cluster" shape "${node}$k" rate 10gbit ;;
        1gbit) "$cluster" shape "${node}$k" rate 1gbit ;;
        *) "$cluster" shape "${node}$k" clear ;;
      esac || { fail "$c: the link of ${node}$k could not be set"; exit 1; }
    done
    extra=(--bucket-mb 1)
    [ "$mode" = no-overlap ] && extra+=(--no-overlap)
    log="$work/bench-${link}-${mode}-$r.log"
    cluster_mpirun -np 2 --host "$hosts" "$bin/strata-train" "${w2[@]}" "${extra[@]}" > "$log" 2>&1 \
      || { tail -5 "$log"; fail "$c (repetition $r)"; continue; }
    s="$(grep -o '[0-9.]* samples/s' "$log" | tail -n 1 | awk '{print $1}')"
    rate[$c]+="$s "
    printf '  %-20s repetition %d: %s samples/s\n' "$c" "$r" "$s"
  done
done
cluster_down

echo
echo "W2, 2 processes x 1 thread, $steps steps (10 warm-up), samples/s median [min-max] of $repeat:"
printf '| %-10s | %-24s | %-24s | %s |\n' link "overlap (1 MiB buckets)" "no overlap" "overlap gain"
printf '|%s|%s|%s|%s|\n' ------------ -------------------------- -------------------------- ---------------
for link in one-node full 10gbit 1gbit; do
  if [ "$link" = one-node ]; then
    printf '| %-10s | %-24s | %-24s | %s |\n' "one node" "$(summary ${rate[one-node]:-})" "-" "-"
    continue
  fi
  o="$(summary ${rate[$link overlap]:-})"; n="$(summary ${rate[$link no-overlap]:-})"
  gain="$(printf '%s\n%s\n' "$o" "$n" | awk 'NR==1{a=$1} NR==2{b=$1} END{if (b > 0) printf "%.2fx", a/b; else print "-"}')"
  printf '| %-10s | %-24s | %-24s | %s |\n' "2 nodes, $link" "$o" "$n" "$gain"
done
cluster_result
