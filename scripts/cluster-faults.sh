#!/usr/bin/env bash
# Node failures on the simulated cluster (scripts/cluster-sim.sh), and
# elastic restart. strata-train trains data-parallel across 3 nodes (one
# process each, checkpoints every 40 steps, --collective-timeout 5); after
# the checkpoint of step 80 one of these faults hits node 3:
#   kill        SIGKILL to every process of the node (a node that died),
#               the job launched by mpirun
#   link        the node's network link goes down (a cut cable, a dead switch
#               port, a node that lost power), launched by mpirun
#   netem       50 ms delay and 1% loss on the node's link (a bad link)
#   srun-kill   kill, the job launched by srun --mpi=pmix on the simulated
#               Slurm (scripts/slurm-sim.sh) from its login node
#   srun-link   link, under srun
# Checks, per fault:
#   kill, link, srun-*: every surviving rank's process has exited within
#     twice the timeout of the fault (link, srun-*), the launcher ends
#     non-zero within a bound (the timeout, the liveness probe, and for
#     mpirun TCP giving up on the cut-off node; srun: Slurm's KillWait), no
#     process of the job is left on any node, the surviving ranks' first
#     line names the lost rank and its host, the operation, the step and the
#     checkpoint to resume from (link, srun-*; under mpirun a killed node is
#     named by Open MPI first), the checkpoint folder holds only complete
#     checkpoints and the newest equals the uninterrupted run's checkpoint
#     of that step bitwise; then --resume on 2 nodes finishes, bitwise equal
#     to the same resume done from the uninterrupted run's checkpoint (an
#     elastic restart without a fault).
#   netem: training finishes, bitwise equal to the run without a fault, slower.
# Without the kernel's netem (sch_netem), the bad link is 1% loss and
# 100 Mbit/s (nftables, tbf) and the output says so.
# Prints a table: time from the fault to the surviving ranks' exit and to
# the launcher's (netem: to the end of training), steps lost (rank 0's last
# logged step minus the checkpoint's: a lower bound, output lags), restart
# time (launch on 2 nodes to the checkpoint loaded), and the run's time from
# its start.
#
# Usage: scripts/cluster-faults.sh [--repeat N] [--kinds kill,link,...] [BUILD_DIR]
#   --repeat N   repeat each fault N times (figures: medians with min-max)
#   --kinds K    a comma-separated subset of kill,link,netem,srun-kill,srun-link
# Exit: 0 all checks passed, 1 a check failed, 77 the machine cannot make
# network namespaces (not root, or no permission): nothing was checked.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
. "$here/cluster-common.sh"

repeat=1
kinds="kill,link,netem,srun-kill,srun-link"
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
  case "$kind" in kill|link|netem|srun-kill|srun-link) ;;
    *) echo "cluster-faults: unknown fault kind '$kind' (kill, link, netem, srun-kill, srun-link)" >&2; exit 2 ;;
  esac
done
steps=240
every=40
fault_after=80   # the fault hits half a checkpoint interval after this checkpoint
timeout_s=5
bound_s=60
train=(--dataset synthetic --layers 64,128,128,10 --batch-size 96 --steps "$steps"
       --checkpoint-every "$every" --keep-checkpoints 100 --log-every 10
       --collective-timeout "$timeout_s")
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
# The same under srun, from the login node (strata's node 0, where
# slurmctld runs): slurmctld must reach srun by its host name to tell it
# that a node failed, as on a real cluster's login node.
srun3() { # DIR LOG
  "$cluster" exec "${node}0" env OMPI_MCA_btl=tcp,vader,self \
    srun -N 3 --ntasks-per-node=1 --mpi=pmix "$bin/strata-train" "${train[@]}" --checkpoint-dir "$1" > "$2" 2>&1
}
export SLURM_CONF="$work/slurm.conf"
# The job's processes on node K (strata-train; Slurm's daemons are not the job's).
job_procs() { ip netns pids "${node}$1" 2>/dev/null | xargs -r ps -o comm= -p 2>/dev/null | grep -c '^strata-train' ; }
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

declare -A fault_s survivors_s lost_steps restart_s run_s
for kind in ${kinds//,/ }; do
  for r in $(seq 1 "$repeat"); do
    case "$kind" in
      srun-*) "$here/slurm-sim.sh" up 3 1 > "$work/slurm-up.log" 2>&1 || { cat "$work/slurm-up.log"; exit 1; } ;;
      *) cluster_up 3 1 >/dev/null || exit $? ;;
    esac
    d="$work/$kind-$r"; log="$work/$kind-$r.log"
    rm -rf "$d" "$d.elastic" "$d.restart.log" "$d.elastic.log"
    t0=$(now)
    case "$kind" in srun-*) srun3 "$d" "$log" & ;; *) run3 "$d" "$log" & ;; esac
    pid=$!
    until [ -f "$d/ckpt-$(printf %09d "$fault_after").strata" ] || ! kill -0 "$pid" 2>/dev/null; do sleep 0.02; done
    sleep "$half_interval"
    if ! kill -0 "$pid" 2>/dev/null; then  # the fault must hit a running job
      wait "$pid"; tail -20 "$log"; fail "$kind: the job had ended before the fault (exit $?)"; continue
    fi
    case "$kind" in
      kill|srun-kill) "$cluster" kill "${node}3" ;;
      link|srun-link) "$cluster" link "${node}3" down ;;
      netem) "$cluster" shape "${node}3" "${bad_link[@]}" || fail "netem: the link could not be shaped" ;;
    esac
    t=$(now)
    # The surviving ranks (nodes 1 and 2) must have exited within twice the
    # timeout; the launcher may take longer (TCP, Slurm's KillWait).
    if [ "$kind" != netem ]; then
      until [ "$(( $(job_procs 1) + $(job_procs 2) ))" = 0 ]; do
        (( $(echo "$(elapsed "$t") > $bound_s" | bc) )) && break
        sleep 0.1
      done
      gone="$(elapsed "$t")"
      survivors_s[$kind]+="$gone "
      if [ "$kind" = kill ]; then :  # mpirun ends them as soon as it sees the node's daemon gone
      elif (( $(echo "$gone <= 2 * $timeout_s" | bc) )); then
        pass "$kind: the surviving ranks exited ${gone} s after the fault (at most 2 x ${timeout_s} s)"
      else
        fail "$kind: the surviving ranks took ${gone} s to exit (more than 2 x ${timeout_s} s)"
      fi
    fi
    wait "$pid"; rc=$?
    fault_s[$kind]+="$(elapsed "$t") "
    run_s[$kind]+="$(elapsed "$t0") "
    if [ "$kind" = netem ]; then
      [ "$rc" = 0 ] || { tail -20 "$log"; fail "$kind: training did not finish (exit $rc)"; continue; }
      [ "$(basename "$(final_of "$d")")" = "$(basename "$ref_final")" ] && cmp -s "$(final_of "$d")" "$ref_final" && pass "$kind: finished, final checkpoint bitwise the reference's" \
        || fail "$kind: the final checkpoint differs from the reference run's"
      continue
    fi
    # A cut link ends in Strata's watchdog (exit 4), and so does any fault
    # under srun; a killed node under mpirun in mpirun's own report.
    expect_rc=$([ "$kind" = kill ] && echo "non-zero" || echo 4)
    if { [ "$kind" != kill ] && [ "$rc" = 4 ]; } || { [ "$kind" = kill ] && [ "$rc" != 0 ]; }; then
      pass "$kind: the launcher ended (exit $rc) $(elapsed "$t") s after the fault"
    else
      fail "$kind: the launcher exited $rc, expected $expect_rc"
    fi
    (( $(echo "$(elapsed "$t") <= $bound_s" | bc) )) || fail "$kind: the job took more than $bound_s s to end"
    left=""
    for k in 1 2 3; do
      for i in $(seq 1 100); do [ "$(job_procs "$k")" = 0 ] && break; sleep 0.1; done
      # Under Slurm the daemons stay (slurmd; a cut-off node's slurmstepd
      # waits for its link): only the job's processes count.
      case "$kind" in
        srun-*) p="$(ip netns pids "${node}$k" 2>/dev/null | xargs -r ps -o comm= -p | grep -v '^slurm' | tr '\n' ' ')" ;;
        *) p="$(ip netns pids "${node}$k" 2>/dev/null | xargs -r ps -o comm= -p | tr '\n' ' ')" ;;
      esac
      [ -n "$p" ] && left+="${node}$k: $p; "
    done
    [ -z "$left" ] && pass "$kind: no process left on any node" || fail "$kind: processes left: $left"
    case "$kind" in
      kill) grep -q "on node ${node}3" "$log" && pass "kill: Open MPI names the lost node ${node}3" \
              || fail "kill: the log does not name ${node}3" ;;
      *)
        # Each surviving rank's first line: the lost rank and its host, the
        # operation, the step, the checkpoint to resume from.
        first='^strata: runtime error: lost world rank\(s\) 2 on '"${node}"'3: [a-z_ ()-]+ #[0-9]+ \([0-9.]+ [KMG]?i?B, rank [01] of 3 of its group\) did not complete within [0-9.]+ s on world rank [01] of 3 \('"${node}"'[12]\), at step [0-9]+; resume from '"$d"' \(its latest: step [0-9]+ or newer\)\.$'
        named="$(grep -cE "$first" "$log")"
        [ "$named" = 2 ] && pass "$kind: both surviving ranks' first line names world rank 2 on ${node}3, the operation, the step and the checkpoint" \
          || { grep '^strata:' "$log" | head -3; fail "$kind: $named of 2 surviving ranks printed the first line naming the lost rank"; } ;;
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
    case "$kind" in srun-*) "$here/slurm-sim.sh" down > /dev/null 2>&1; cluster_up 3 1 >/dev/null || exit $? ;; esac
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
case ",$kinds," in *,srun-*) "$here/slurm-sim.sh" down > /dev/null 2>&1 ;; esac
cluster_down

echo
echo "Figures (median [min-max] over $repeat run(s); 3 nodes x 1 process, --collective-timeout $timeout_s, $steps steps;"
echo "fault ${half_interval} s after the checkpoint of step $fault_after, checkpoints every $every; bad link (netem): ${bad_link[*]}):"
printf '  %-10s %-22s %-24s %-12s %-22s %s\n' fault "to survivors' exit (s)" "to the launcher's exit (s)" "steps lost" "restart on 2 nodes (s)" "run, start to exit (s)"
printf '  %-10s %-22s %-24s %-12s %-22s %s\n' none "-" "-" "-" "-" "$ref_s"
for kind in ${kinds//,/ }; do
  printf '  %-10s %-22s %-24s %-12s %-22s %s\n' "$kind" "$(summary ${survivors_s[$kind]:-})" "$(summary ${fault_s[$kind]:-})" \
    "$(summary ${lost_steps[$kind]:-})" "$(summary ${restart_s[$kind]:-})" "$(summary ${run_s[$kind]:-})"
done
cluster_result
