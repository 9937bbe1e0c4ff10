#!/usr/bin/env bash
# A soak of node faults on the simulated cluster (scripts/cluster-sim.sh):
# strata-train (data parallel, --reproducible, one process per node) runs on
# 2-4 nodes; at a random moment a random rank's process is killed or a
# random node's link is cut; the job must end (no hang), and the next job
# resumes from the newest checkpoint on another random number of nodes.
# When a training run reaches its last step, its final parameters must be
# bitwise those of an unfaulted run of the same steps (--reproducible makes
# them independent of the node count), and a new run starts.
#
# First, elastic restart both ways: a 2-node run's checkpoint resumes on 3
# nodes and on 1, each bitwise the unfaulted run at the end.
#
# Checks, per fault: the job ends within 60 s (else a hang: counted, the job
# killed); every checkpoint complete before the fault is still there and
# bitwise the unfaulted run's of that step (else a checkpoint lost); the
# checkpoint folder holds nothing else. Prints, at the end: cycles, faults
# injected (per kind), hangs, checkpoints lost, runs finished (each bitwise
# the reference), and the time from the fault to the surviving ranks' exit
# (median and max).
#
# Usage: scripts/cluster-soak.sh [--cycles N] [--seed S] [DURATION] [BUILD_DIR]
#   DURATION     how long to go on injecting faults: 90s, 30m, 2h (default 5m)
#   --cycles N   stop after N faults instead (CI runs 3; a job that ends
#                before its fault is a cycle without one)
#   --seed S     the random choices' seed (default: the time; printed)
# Exit: 0 no hang, no checkpoint lost, every finished run bitwise the
# reference; 1 otherwise; 77 the machine cannot make network namespaces.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
. "$here/cluster-common.sh"

duration="5m" cycles=0 seed="" build=""
while [ $# -gt 0 ]; do
  case "$1" in
    --cycles) cycles="${2:-}"; shift; shift || true ;;
    --seed) seed="${2:-}"; shift; shift || true ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "cluster-soak: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) if [[ "$1" =~ ^[0-9]+[smh]?$ ]]; then duration="$1"; else build="$1"; fi; shift ;;
  esac
done
[[ "$cycles" =~ ^[0-9]+$ ]] || { echo "cluster-soak: --cycles needs a whole number, got '$cycles'" >&2; exit 2; }
case "$duration" in
  *s) limit_s="${duration%s}" ;; *m) limit_s=$(( ${duration%m} * 60 )) ;;
  *h) limit_s=$(( ${duration%h} * 3600 )) ;; *) limit_s="$duration" ;;
esac
[[ "$limit_s" =~ ^[0-9]+$ ]] || { echo "cluster-soak: DURATION '$duration' is not 90s, 30m or 2h" >&2; exit 2; }
seed="${seed:-$(date +%s)}"
[[ "$seed" =~ ^[0-9]+$ ]] || { echo "cluster-soak: --seed needs a whole number, got '$seed'" >&2; exit 2; }
RANDOM=$seed

timeout_s=5
bound_s=60
steps=3000
every=100
nodes_max=4
train=(--dataset synthetic --layers 64,128,128,10 --batch-size 96 --steps "$steps" --reproducible --chunk 8
       --checkpoint-every "$every" --keep-checkpoints 1000 --log-every 10
       --collective-timeout "$timeout_s")
cluster_init "${build:-$top/build}"
work="$work/soak"
rm -rf "$work" && mkdir -p "$work"

hosts_of() { local k h=""; for k in $(seq 1 "$1"); do h+="${h:+,}${node}$k"; done; echo "$h"; }
run_on() { # NODES DIR LOG [ARGS...]: strata-train on nodes 1..NODES, one process each
  local n="$1" dir="$2" log="$3"; shift 3
  cluster_mpirun -np "$n" --host "$(hosts_of "$n")" "$bin/strata-train" "${train[@]}" \
    --checkpoint-dir "$dir" "$@" > "$log" 2>&1
}
final_name="ckpt-$(printf %09d "$steps").strata"
job_procs() { ip netns pids "${node}$1" 2>/dev/null | xargs -r ps -o comm= -p 2>/dev/null | grep -c '^strata-train'; }

echo "cluster-soak: seed $seed; $( [ "$cycles" -gt 0 ] && echo "$cycles fault(s)" || echo "faults for $duration" ),"\
     "2-$nodes_max nodes, --collective-timeout $timeout_s, $steps steps a run, checkpoints every $every"
cluster_up "$nodes_max" 1 || exit 1

# The unfaulted run, on 2 nodes: its checkpoints are the oracle.
ref="$work/reference"
t=$(now)
run_on 2 "$ref" "$work/reference.log" || { tail -20 "$work/reference.log"; fail "the reference run failed"; exit 1; }
ref_s="$(elapsed "$t")"
echo "cluster-soak: reference run, 2 nodes, $steps steps: $ref_s s"
# Faults hit 10-80% of a run's length after its first step.
fault_ms() { echo "$ref_s * 1000 * (10 + $RANDOM % 70) / 100" | bc | cut -d. -f1; }

# Elastic restart both ways: the reference's checkpoint of the middle step
# resumed on 3 nodes and on 1.
half=$(( steps / 2 / every * every ))
half_name="ckpt-$(printf %09d "$half").strata"
for n in 3 1; do
  d="$work/elastic-$n"
  mkdir -p "$d" && cp "$ref/$half_name" "$d/" && echo "$half_name" > "$d/latest"
  if run_on "$n" "$d" "$work/elastic-$n.log" --resume && cmp -s "$d/$final_name" "$ref/$final_name"; then
    pass "elastic: the 2-node checkpoint of step $half resumed on $n node(s), the final parameters bitwise the unfaulted run's"
  else
    tail -5 "$work/elastic-$n.log"; fail "elastic: resuming the 2-node checkpoint of step $half on $n node(s) did not end bitwise the unfaulted run"
  fi
done

declare -A injected detect_of
hangs=0 lost=0 finished=0 cycle=0 run=1
detect=()
dir="$work/run-$run"
start=$SECONDS
while :; do
  faults=$(( ${injected[kill]:-0} + ${injected[link]:-0} ))
  if [ "$cycles" -gt 0 ]; then [ "$faults" -ge "$cycles" ] && break
  elif [ $((SECONDS - start)) -ge "$limit_s" ]; then break; fi
  cycle=$((cycle + 1))
  cluster_up "$nodes_max" 1 || exit 1
  n=$(( 2 + RANDOM % (nodes_max - 1) ))
  resume=(); [ -f "$dir/latest" ] && resume=(--resume)
  # What is complete before the fault (must survive it).
  before="$(ls "$dir" 2>/dev/null | grep -E '^ckpt-[0-9]{9}\.strata$' || true)"
  log="$work/cycle-$cycle.log"
  run_on "$n" "$dir" "$log" "${resume[@]}" &
  pid=$!
  # The fault, a random time after the job's first step (resumed or not).
  until grep -q "step [0-9]*/" "$log" 2>/dev/null || ! kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  sleep "$(echo "$(fault_ms) / 1000" | bc -l)"
  victim=$(( 1 + RANDOM % n ))
  if ! kill -0 "$pid" 2>/dev/null; then
    wait "$pid"; rc=$?
    kind="none (the run ended first)"
  elif [ $(( RANDOM % 2 )) = 0 ]; then
    kind="kill"
    ip netns pids "${node}$victim" | xargs -r ps -o pid=,comm= -p | awk '$2 == "strata-train" {print $1}' | xargs -r kill -9
  else
    kind="link"
    "$cluster" link "${node}$victim" down
  fi
  if [ "$kind" != "none (the run ended first)" ]; then
    injected[$kind]=$(( ${injected[$kind]:-0} + 1 ))
    t=$(now)
    # The surviving ranks: every node but the victim.
    while :; do
      left=0
      for k in $(seq 1 "$n"); do [ "$k" = "$victim" ] || left=$(( left + $(job_procs "$k") )); done
      [ "$left" = 0 ] && break
      (( $(echo "$(elapsed "$t") > $bound_s" | bc) )) && break
      sleep 0.1
    done
    gone="$(elapsed "$t")"
    detect+=("$gone")
    detect_of[$kind]+="$gone "
    # The launcher must end too.
    while kill -0 "$pid" 2>/dev/null && (( $(echo "$(elapsed "$t") <= $bound_s" | bc) )); do sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      hangs=$((hangs + 1))
      fail "cycle $cycle: the job had not ended $bound_s s after the fault ($kind, node $victim of $n): a hang"
      pkill -9 -P "$pid" 2>/dev/null; kill -9 "$pid" 2>/dev/null
    fi
    wait "$pid" 2>/dev/null; rc=$?
  fi
  # Every checkpoint complete before the fault is there, bitwise the reference's.
  for c in $before; do
    if ! cmp -s "$dir/$c" "$ref/$c"; then lost=$((lost + 1)); fail "cycle $cycle: checkpoint $c lost or changed"; fi
  done
  junk="$(ls -A "$dir" 2>/dev/null | grep -v -E '^(ckpt-[0-9]{9}\.strata|latest)$' || true)"
  [ -z "$junk" ] || fail "cycle $cycle: left in the checkpoint folder: $junk"
  newest="$( [ -f "$dir/latest" ] && cat "$dir/latest" )"
  if [ -n "$newest" ] && ! cmp -s "$dir/$newest" "$ref/$newest"; then
    lost=$((lost + 1)); fail "cycle $cycle: the newest checkpoint $newest differs from the reference's"
  fi
  echo "  cycle $cycle: $n nodes${resume:+, resumed}, fault: $kind$( [ "$kind" = kill ] || [ "$kind" = link ] && echo " on node $victim, survivors gone in ${gone} s, exit $rc" ), newest checkpoint ${newest:-none}"
  if [ -f "$dir/$final_name" ]; then
    if cmp -s "$dir/$final_name" "$ref/$final_name"; then
      finished=$((finished + 1)); pass "run $run finished, its final parameters bitwise the unfaulted run's"
    else
      fail "run $run finished, but its final parameters differ from the unfaulted run's"
    fi
    run=$((run + 1)); dir="$work/run-$run"
  fi
done
cluster_down

if [ "${#detect[@]}" -gt 0 ]; then
  med="$(summary "${detect[@]}" | cut -d' ' -f1) s"; max="$(printf '%s\n' "${detect[@]}" | sort -g | tail -n 1) s"
else med="-"; max="-"; fi
echo
echo "Soak: $cycle cycle(s) in $((SECONDS - start)) s, seed $seed; faults injected: kill ${injected[kill]:-0}, link ${injected[link]:-0};"
echo "  hangs $hangs, checkpoints lost $lost, runs finished $finished (each bitwise the unfaulted run);"
echo "  fault to the surviving ranks' exit: median $med, max $max (--collective-timeout $timeout_s);"
echo "    per fault: kill $(summary ${detect_of[kill]:-}) s, link $(summary ${detect_of[link]:-}) s (median [min-max])"
cluster_result
