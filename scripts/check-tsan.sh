#!/usr/bin/env bash
# ThreadSanitizer over the thread ranks, in two builds:
# 1. build-tsan/: the communicator tests against the default Kokkos (3.4.1,
#    OpenMP), those that launch no Kokkos kernels from their ranks.
# 2. build-tsan-ranks/: the thread-rank data-parallel, pipeline, tensor-
#    parallel and ZeRO tests, and the planner's calibration of a model's
#    layers on thread ranks, against Kokkos 4.6.01 Serial built with
#    -fsanitize=thread (scripts/bootstrap.sh --kokkos-flavour tsan). There
#    every thread rank is a std::thread driving its own Serial instance, so
#    TSan sees every fork, join and kernel. Against Kokkos 3.x OpenMP it
#    cannot: the ranks are OpenMP partitions and libgomp is not
#    instrumented, so every parallel region's fork and join is invisible
#    (tried: 216 false reports in test_data_parallel, every one a write
#    before a fork).
# No suppressions: a report fails the check.
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

# 2. The strategies' thread-rank tests on Kokkos 4.6 Serial under TSan.
kokkos="$("$here/bootstrap.sh" --kokkos-flavour tsan --print-kokkos-root)"
Kokkos_ROOT="$kokkos" BUILD_DIR="$top/build-tsan-ranks" \
  STRATA_TARGETS="test_data_parallel test_model_parallel test_planner" "$here/build.sh" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="-fsanitize=thread" \
  -DSTRATA_ENABLE_BENCHMARKS=OFF -DSTRATA_ENABLE_MPI=OFF -DSTRATA_ENABLE_NCCL=OFF -DSTRATA_MAN_PAGES=OFF
ranks="$top/build-tsan-ranks/bin"
echo "check-tsan: running the thread-rank data-parallel, pipeline, tensor-parallel and ZeRO tests under ThreadSanitizer (Kokkos 4.6 Serial)"
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" OPENBLAS_NUM_THREADS=1
"$ranks/test_data_parallel" --gtest_filter='*DataParallelThreads*' --gtest_brief=1
"$ranks/test_model_parallel" --gtest_filter='Pipeline*:TensorParallel*:Zero1*:Mesh*:Gpt*:VocabParallel*' --gtest_brief=1
"$ranks/test_planner" --gtest_filter='PlannerCalibrate*' --gtest_brief=1
