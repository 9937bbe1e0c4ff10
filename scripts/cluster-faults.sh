#!/usr/bin/env bash
# Node failures on the simulated cluster (scripts/cluster-sim.sh), and
# elastic restart. strata-train trains data-parallel across 3 nodes (one
# process each, checkpoints every 40 steps); after the checkpoint of step 80
# one of these faults hits node 3:
#   kill   SIGKILL to every process of the node (a node that died)
#   link   the node's network link goes down (a cut cable, a dead switch port)
#   netem  50 ms delay and 1% loss on the node's link (a bad link)
# Checks, per fault:
#   kill, link: the job ends non-zero within a bound (STRATA_COMM_TIMEOUT=5:
#     the timeout, the liveness probe, and TCP giving up on the cut-off
#     node), no process is left on any node, the surviving ranks' error names
#     the lost rank (link) or Open MPI names the lost node (kill), the
#     checkpoint folder holds only complete checkpoints and the newest equals
#     the uninterrupted run's checkpoint of that step bitwise; then --resume
#     on 2 nodes finishes, bitwise equal to the same resume done from the
#     uninterrupted run's checkpoint (an elastic restart without a fault).
#   netem: training finishes, bitwise equal to the run without a fault, slower.
# Without the kernel's netem (sch_netem), the bad link is 1% loss and
# 100 Mbit/s (nftables, tbf) and the output says so.
# Prints a table: time from the fault to the last process's exit (netem: to
# the end of training), steps lost (rank 0's last logged step minus the
# checkpoint's: a lower bound, output lags), restart time (launch on 2 nodes
# to the checkpoint loaded), and the run's time from its start.
#
# Usage: scripts/cluster-faults.sh [--repeat N] [--kinds kill,link,netem] [BUILD_DIR]
#   --repeat N   repeat each fault N times (figures: medians with min-max)
# Exit: 0 all checks passed, 1 a check failed, 77 the machine cannot make
# network namespaces (not root, or no permission): nothing was checked.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
. "$here/cluster-common.sh"

repeat=1
kinds="kill,link,netem"
build=""
while [ $# -gt 0 ]; do
  case "$1" in
    --repeat) repeat="${2:-}"; shift; shift || true ;;
    --kinds) kinds="${2:-}"; shift; shift || true ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "cluster-faults: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) build="$1"; shift ;;
  esac
done
[[ "$repeat" =~ ^[1-9][0-9]*$ ]] || { echo "cluster-faults: --repeat needs a positive integer" >&2; exit 2; }
for kind in ${kinds//,/ }; do
  case "$kind" in kill|link|netem) ;; *) echo "cluster-faults: unknown fault kind '$kind' (kill, link, netem)" >&2; exit 2 ;; esac
done
steps=240
every=40
fault_after=80   # the fault hits half a checkpoint interval after this checkpoint
timeout_s=5
bound_s=60
train=(--dataset synthetic --layers 64,128,128,10 --batch-size 96 --steps "$steps"
       --checkpoint-every "$every" --keep-checkpoints 100 --log-every 10)
cluster_init "${build:-$top/build}"
# A bad link: 50 ms delay and 1% loss with the kernel's netem; without it
# (kernels built without sch_netem), 1% loss and 100 Mbit/s.
if "$cluster" has-netem; then bad_link=(delay 50ms loss 1%); else
  bad_link=(loss 1% rate 100mbit)
  strata_apt_install nftables || exit 1   # before the timed runs
fi

run3() { # DIR LOG: 3 nodes, one process each
  cluster_mpirun -np 3 "$bin/strata-train" "${train[@]}" --checkpoint-dir "$1" > "$2" 2>&1
}
resume2() { # DIR LOG: 2 nodes, --resume
  cluster_mpirun -np 2 --host "${node}1,${node}2" "$bin/strata-train" "${train[@]}" \
    --checkpoint-dir "$1" --resume > "$2" 2>&1
}
final_of() { ls "$1"/ckpt-*.strata 2>/dev/null | sort | tail -n 1; }
latest_of() { [ -f "$1/latest" ] && echo "$1/$(cat "$1/latest")"; }

cluster_up 3 1 || exit $?
echo "cluster-faults: reference run, 3 nodes, $steps steps"
ref="$work/reference"
rm -rf "$ref"
t=$(now); run3 "$ref" "$work/reference.log" || { tail -20 "$work/reference.log"; fail "the reference run failed"; cluster_down; exit 1; }
ref_s=$(elapsed "$t")
half_interval=$(echo "$ref_s * $every / $steps / 2" | bc -l | xargs printf '%.2f')
ref_final="$(final_of "$ref")"

declare -A fault_s lost_steps restart_s run_s
for kind in ${kinds//,/ }; do
  case "$kind" in kill|link|netem) ;; *) fail "unknown fault kind '$kind'"; continue ;; esac
  for r in $(seq 1 "$repeat"); do
    cluster_up 3 1 >/dev/null || exit $?
    d="$work/$kind-$r"; log="$work/$kind-$r.log"
    rm -rf "$d" "$d.elastic" "$d.restart.log" "$d.elastic.log"
    t0=$(now)
    run3 "$d" "$log" &
    pid=$!
    until [ -f "$d/ckpt-$(printf %09d "$fault_after").strata" ] || ! kill -0 "$pid" 2>/dev/null; do sleep 0.02; done
    sleep "$half_interval"
    if ! kill -0 "$pid" 2>/dev/null; then  # the fault must hit a running job
      wait "$pid"; tail -20 "$log"; fail "$kind: the job had ended before the fault (exit $?)"; continue
    fi
    case "$kind" in
      kill) "$cluster" kill "${node}3" ;;
      link) "$cluster" link "${node}3" down ;;
      netem) "$cluster" shape "${node}3" "${bad_link[@]}" || fail "netem: the link could not be shaped" ;;
    esac
    t=$(now)
    wait "$pid"; rc=$?
    fault_s[$kind]+="$(elapsed "$t") "
    run_s[$kind]+="$(elapsed "$t0") "
    if [ "$kind" = netem ]; then
      [ "$rc" = 0 ] || { tail -20 "$log"; fail "$kind: training did not finish (exit $rc)"; continue; }
      [ "$(basename "$(final_of "$d")")" = "$(basename "$ref_final")" ] && cmp -s "$(final_of "$d")" "$ref_final" && pass "$kind: finished, final checkpoint bitwise the reference's" \
        || fail "$kind: the final checkpoint differs from the reference run's"
      continue
    fi
    # A cut link ends in Strata's watchdog (exit 4); a killed node in mpirun's own report.
    expect_rc=$([ "$kind" = link ] && echo 4 || echo "non-zero")
    if { [ "$kind" = link ] && [ "$rc" = 4 ]; } || { [ "$kind" = kill ] && [ "$rc" != 0 ]; }; then
      pass "$kind: the job failed (exit $rc) in $(elapsed "$t") s"
    else
      fail "$kind: the job exited $rc, expected $expect_rc"
    fi
    (( $(echo "$(elapsed "$t") <= $bound_s" | bc) )) || fail "$kind: the job took more than $bound_s s to end"
    left=""
    for k in 1 2 3; do
      for i in $(seq 1 100); do [ -z "$(ip netns pids "${node}$k" 2>/dev/null)" ] && break; sleep 0.1; done
      p="$(ip netns pids "${node}$k" 2>/dev/null | xargs -r ps -o comm= -p | tr '\n' ' ')"
      [ -n "$p" ] && left+="${node}$k: $p; "
    done
    [ -z "$left" ] && pass "$kind: no process left on any node" || fail "$kind: processes left: $left"
    case "$kind" in
      kill) grep -q "on node ${node}3" "$log" && pass "kill: Open MPI names the lost node ${node}3" \
              || fail "kill: the log does not name ${node}3" ;;
      link) grep -q "lost: world rank(s) 2 did not answer" "$log" && pass "link: the surviving ranks name world rank 2 as lost" \
              || fail "link: no error naming the lost rank 2" ;;
    esac
    junk="$(ls -A "$d" | grep -v -E '^(ckpt-[0-9]{9}\.strata|latest)$' || true)"
    [ -z "$junk" ] && pass "$kind: only complete checkpoints in the folder" || fail "$kind: left in the checkpoint folder: $junk"
    last="$(latest_of "$d")"
    if [ -z "$last" ]; then fail "$kind: no latest checkpoint"; continue; fi
    name="$(basename "$last")"
    cmp -s "$last" "$ref/$name" && pass "$kind: $name is bitwise the reference's" || fail "$kind: $name differs from the reference's"
    step=$((10#$(echo "$name" | sed 's/ckpt-\([0-9]*\).strata/\1/')))
    # Steps lost: how far the job had got past the checkpoint it resumes from
    # (rank 0's last logged step: a lower bound, its output lags a little).
    got="$(grep -o 'step [0-9]*/' "$log" | tail -n 1 | tr -dc 0-9)"
    lost_steps[$kind]+="$(( ${got:-$step} > step ? ${got:-$step} - step : 0 )) "
    # Elastic restart on the 2 surviving nodes, and the same restart from the
    # uninterrupted run's checkpoint of that step.
    "$cluster" link "${node}3" up 2>/dev/null || true
    # Restart time: from the launch to the resumed model loaded (rank 0's
    # "resumed from" line; the training that follows is not counted).
    t=$(now)
    resume2 "$d" "$d.restart.log" &
    pid=$!
    until grep -q "^resumed from" "$d.restart.log" 2>/dev/null || ! kill -0 "$pid" 2>/dev/null; do sleep 0.02; done
    restart_s[$kind]+="$(elapsed "$t") "
    wait "$pid" || { tail -20 "$d.restart.log"; fail "$kind: --resume on 2 nodes failed"; continue; }
    mkdir -p "$d.elastic" && cp "$ref/$name" "$d.elastic/" && echo "$name" > "$d.elastic/latest"
    resume2 "$d.elastic" "$d.elastic.log" || { fail "$kind: the fault-free elastic resume failed"; continue; }
    final_name="ckpt-$(printf %09d "$steps").strata"
    [ -f "$d/$final_name" ] && [ -f "$d.elastic/$final_name" ] \
      || { fail "$kind: a resumed run did not reach step $steps"; continue; }
    cmp -s "$d/$final_name" "$d.elastic/$final_name" \
      && pass "$kind: resumed on 2 nodes from step $step and finished, bitwise the fault-free switch from 3 to 2 nodes at that step" \
      || fail "$kind: the resumed run differs from the fault-free elastic run"
  done
done
cluster_down

echo
echo "Figures (median [min-max] over $repeat run(s); 3 nodes x 1 process, STRATA_COMM_TIMEOUT=$timeout_s, $steps steps;"
echo "fault ${half_interval} s after the checkpoint of step $fault_after, checkpoints every $every; bad link (netem): ${bad_link[*]}):"
printf '  %-6s %-28s %-16s %-24s %s\n' fault "fault to last exit (s)" "steps lost" "restart on 2 nodes (s)" "run, start to exit (s)"
printf '  %-6s %-28s %-16s %-24s %s\n' none "-" "-" "-" "$ref_s"
for kind in ${kinds//,/ }; do
  printf '  %-6s %-28s %-16s %-24s %s\n' "$kind" "$(summary ${fault_s[$kind]:-})" "$(summary ${lost_steps[$kind]:-})" \
    "$(summary ${restart_s[$kind]:-})" "$(summary ${run_s[$kind]:-})"
done
cluster_result
