#!/usr/bin/env bash
# ctest entries of the label `cluster`: Strata across simulated nodes
# (scripts/cluster-sim.sh: network namespaces, Open MPI over TCP between
# them, shared memory only inside a node).
#
#   cluster_test.sh BUILD_DIR mpi NODES SLOTS
#       test_mpi (every collective against its reference, the shared-memory
#       allreduce against MPI's, data parallelism, the hierarchical
#       communicator and dp x pp / pp x tp meshes against single-rank
#       training to 1e-5 per parameter) on NODES nodes x SLOTS processes,
#       launched by mpirun across the nodes
#   cluster_test.sh BUILD_DIR slurm
#       Slurm on 2 nodes (scripts/slurm-sim.sh): test_mpi under
#       srun -N 2 --ntasks-per-node=2 --mpi=pmix, then docs/examples/
#       train.sbatch submitted with sbatch as written
#
# Exit 77 (ctest: skipped, with the reason printed) where the machine cannot
# make network namespaces.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(cd "$here/../.." && pwd)"
build="$1"; what="$2"; shift 2
. "$top/scripts/cluster-common.sh"
cluster_init "$build"

case "$what" in
  mpi)
    nodes="$1"; slots="$2"
    cluster_up "$nodes" "$slots" || exit 1
    log="$work/mpi-${nodes}x${slots}.log"
    cluster_mpirun -np $((nodes * slots)) "$bin/test_mpi" > "$log" 2>&1
    rc=$?
    grep -E '^\[ *(OK|FAILED|SKIPPED|PASSED) *\]|Failure|error' "$log" | sed 's/^/  /'
    [ "$rc" = 0 ] && pass "test_mpi on $nodes nodes x $slots processes" || fail "test_mpi exited $rc (log: $log)"
    ;;
  slurm)
    export SLURM_CONF="$work/slurm.conf"
    "$top/scripts/slurm-sim.sh" up 2 2 > "$work/slurm-up.log" 2>&1 || { cat "$work/slurm-up.log"; exit 1; }
    log="$work/slurm-srun.log"
    OMPI_MCA_btl=tcp,vader,self timeout 300 srun -N 2 --ntasks-per-node=2 --mpi=pmix "$bin/test_mpi" > "$log" 2>&1
    rc=$?
    grep -E '^\[ *(OK|FAILED|SKIPPED|PASSED) *\]|Failure|error' "$log" | sed 's/^/  /'
    [ "$rc" = 0 ] && pass "test_mpi under srun -N 2 --ntasks-per-node=2 --mpi=pmix" || fail "srun test_mpi exited $rc (log: $log)"
    # The documented batch script, as written, from a fresh folder.
    job_dir="$work/sbatch"
    rm -rf "$job_dir" && mkdir -p "$job_dir"
    out="$(cd "$job_dir" && PATH="$bin:$PATH" STRATA_NET_IF=eth0 timeout 300 sbatch --wait --parsable "$top/docs/examples/train.sbatch")"
    rc=$?
    job="${out%%;*}"
    joblog="$job_dir/strata-train-$job.out"
    sed 's/^/  | /' "$joblog" 2>/dev/null | tail -n 12
    if [ "$rc" = 0 ] && grep -q "4 rank(s) (mpi)" "$joblog" && [ -f "$job_dir/checkpoints-$job/ckpt-000000200.strata" ]; then
      pass "sbatch docs/examples/train.sbatch: 4 ranks on 2 nodes, 200 steps, final checkpoint written"
    else
      fail "sbatch docs/examples/train.sbatch (exit $rc, job '$job', log $joblog)"
    fi
    "$top/scripts/slurm-sim.sh" down > /dev/null 2>&1
    ;;
  *) echo "cluster_test: unknown test '$what'" >&2; exit 2 ;;
esac
cluster_result
