#!/usr/bin/env bash
# Builds the thread-rank tests with ThreadSanitizer (build-tsan/) and runs
# them: the communicator tests (those that do not launch Kokkos kernels from
# their ranks), and the data-parallel and model-parallel tests, where ranks
# share memory (gradient buckets, pipeline sends, shared buffers). Thread
# ranks are OpenMP partitions; libgomp is not instrumented, so
# backends/ranks.cpp declares the partition's fork and join to TSan, and the
# ranks run one thread each (their kernels then run on the rank's own thread).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
BUILD_DIR="$top/build-tsan" STRATA_TARGETS="test_comm test_data_parallel test_model_parallel" "$here/build.sh" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="-fsanitize=thread" \
  -DSTRATA_ENABLE_BENCHMARKS=OFF -DSTRATA_ENABLE_MPI=OFF -DSTRATA_ENABLE_NCCL=OFF
build="$top/build-tsan"
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
echo "check-tsan: thread-rank communicator tests under ThreadSanitizer"
OMP_NUM_THREADS=1 "$build/bin/test_comm" --gtest_filter='-*WithKokkos*' --gtest_brief=1
for t in test_data_parallel test_model_parallel; do
  echo "check-tsan: $t (thread ranks of one thread) under ThreadSanitizer"
  STRATA_TEST_THREADS=4 "$build/bin/$t" --gtest_brief=1
done
