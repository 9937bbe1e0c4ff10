#!/usr/bin/env bash
# Builds Strata with AddressSanitizer and UndefinedBehaviorSanitizer (g++,
# -fno-sanitize-recover=undefined: any UB report fails) in build-asan/ and
# runs the test suite (ctest) under them, leak checking included. The apps
# that the end-to-end tests start (strata-train, the examples) are built the
# same way and inherit the options, so a report in them fails the test too.
#
#   pass 1  every test except those that launch MPI processes
#   pass 2  the MPI tests: test_mpi at 2 processes (mpi.np2; mpi.np1 and
#           mpi.np4 are left out to bound the time and are listed as not run)
#           and the end-to-end tests that run mpirun. Open MPI does not free
#           what MPI_Init allocates: those leaks are suppressed
#           (scripts/lsan-openmpi.supp), which needs full stack unwinding.
#           The kill-and-resume test under mpirun is left out (listed as not
#           run; its thread-rank twin runs in pass 1).
#   The docs test (label docs) and the simulated cluster (label cluster)
#   are left out and listed as not run: the default build runs them.
#
# Usage: scripts/check-asan.sh [CTEST_ARGS...]     (for pass 1, e.g. -R Checkpoint)
# Environment: STRATA_JOBS (build and ctest parallelism; default: cores),
#   STRATA_ASAN_MPI=0 (leave the MPI tests out; reported as not run).
# Exits non-zero when any test fails or reports.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
build="$top/build-asan"
jobs="${STRATA_JOBS:-$(nproc)}"
flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"

t0=$SECONDS
# Benchmarks are not built: their ctest entries only time things.
BUILD_DIR="$build" "$here/build.sh" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="$flags" \
  -DSTRATA_ENABLE_BENCHMARKS=OFF -DSTRATA_MAN_PAGES=OFF
echo "check-asan: built in $((SECONDS - t0)) s ($flags)"
# A build that is not instrumented would pass everything: refuse it.
# (ldd's whole output first: `ldd | grep -q` fails under pipefail when grep
# quits before ldd has written everything.)
for exe in strata-train test_data; do
  grep -q libasan <<<"$(ldd "$build/bin/$exe")" || { echo "check-asan: $build/bin/$exe is not linked with ASan" >&2; exit 1; }
done

common="halt_on_error=1:detect_leaks=1:check_initialization_order=1:strict_init_order=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

mpi_tests='mpi\.np2|TrainApp\..*Mpi'
kill_mpi='KillAndResume\..*Mpi'
skip_mpi='mpi\.np|Mpi'
cd "$build"
status=0
echo "check-asan: pass 1: all tests but MPI ones (ASAN_OPTIONS=$common)"
ASAN_OPTIONS="$common" ctest --output-on-failure --timeout 600 -j "$jobs" -E "$skip_mpi" -LE 'cluster|docs' "$@" \
  | tee ctest-asan.log | grep -vE '^ *[0-9]+/[0-9]+ Test +#|^ *Start +[0-9]+' || status=1
grep -q '100% tests passed' ctest-asan.log || status=1

# Left out to bound the time: test_mpi at 1 and 4 processes, and the
# kill-and-resume run under mpirun (8 MPI jobs under ASan take minutes; its
# thread-rank twin runs in pass 1).
# The cluster tests (label cluster: the same test_mpi across simulated
# nodes) are left out too.
not_run=$( (ctest -N -R "mpi\\.np[14]|$kill_mpi"; ctest -N -L cluster; ctest -N -L docs) | sed -n 's/^ *Test *#[0-9]*: //p' | tr '\n' ' ')
if ! grep -q 'STRATA_ENABLE_MPI:STRING=OFF' CMakeCache.txt && grep -q 'mpi.np2' <(ctest -N); then
  if [ "${STRATA_ASAN_MPI:-1}" = 0 ]; then
    not_run="$(ctest -N -R "$skip_mpi" | sed -n 's/^ *Test *#[0-9]*: //p' | tr '\n' ' ')"
  else
    echo "check-asan: pass 2: MPI tests (Open MPI's own leaks suppressed: scripts/lsan-openmpi.supp)"
    ASAN_OPTIONS="$common:fast_unwind_on_malloc=0" \
    LSAN_OPTIONS="suppressions=$here/lsan-openmpi.supp:print_suppressions=0" \
      ctest --output-on-failure --timeout 600 -j 1 -R "$mpi_tests" \
      | tee ctest-asan-mpi.log | grep -vE '^ *[0-9]+/[0-9]+ Test +#|^ *Start +[0-9]+' || status=1
    grep -qE '100% tests passed|No tests were found' ctest-asan-mpi.log || status=1
  fi
else
  not_run="MPI is not enabled in this build: no MPI test ran"
fi
echo
echo "check-asan: NOT RUN under ASan: ${not_run:-none}"
echo "check-asan: $([ $status = 0 ] && echo passed || echo FAILED) in $((SECONDS - t0)) s"
exit $status
