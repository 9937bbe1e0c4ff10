#!/usr/bin/env bash
# Builds the communicator tests with ThreadSanitizer (build-tsan/) and runs
# the thread-rank tests that do not launch Kokkos kernels from their ranks.
# The data-parallel and pipeline tests are not run under TSan: their thread
# ranks are Kokkos 3.x OpenMP partitions, and libgomp is not instrumented, so
# TSan misses the fork and join of every parallel region. Tried: with the
# partition's fork and join declared to TSan (__tsan_acquire/release) and
# Kokkos' OpenMP headers suppressed, every Kokkos parallel region outside the
# ranks (View initialisation, deep_copy, the single-rank reference) still
# reports the caller's writes before the fork as races: 216 reports in
# test_data_parallel, every one inspected such a write. They need an OpenMP runtime TSan
# can see (LLVM's libomp with Archer) or thread ranks on std::thread (the
# Kokkos 4 path).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
BUILD_DIR="$top/build-tsan" STRATA_TARGETS=test_comm "$here/build.sh" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="-fsanitize=thread" \
  -DSTRATA_ENABLE_BENCHMARKS=OFF -DSTRATA_ENABLE_MPI=OFF -DSTRATA_ENABLE_NCCL=OFF -DSTRATA_MAN_PAGES=OFF
build="$top/build-tsan"
echo "check-tsan: running thread-rank communicator tests under ThreadSanitizer"
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" OMP_NUM_THREADS=1 \
  "$build/bin/test_comm" --gtest_filter='-*WithKokkos*' --gtest_brief=1
