#!/usr/bin/env bash
# Builds the communicator tests with ThreadSanitizer (build-tsan/) and runs
# the thread-rank tests that do not launch Kokkos kernels from their ranks
# (libgomp is not instrumented, so OpenMP-partitioned ranks are left out).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
BUILD_DIR="$top/build-tsan" STRATA_TARGETS=test_comm "$here/build.sh" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="-fsanitize=thread" \
  -DSTRATA_ENABLE_BENCHMARKS=OFF -DSTRATA_ENABLE_MPI=OFF -DSTRATA_ENABLE_NCCL=OFF
build="$top/build-tsan"
echo "check-tsan: running thread-rank communicator tests under ThreadSanitizer"
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" OMP_NUM_THREADS=1 \
  "$build/bin/test_comm" --gtest_filter='-*WithKokkos*' --gtest_brief=1
