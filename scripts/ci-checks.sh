#!/usr/bin/env bash
# Portability checks beyond the default build (CI runs them after
# scripts/test.sh). Each check has its own Kokkos flavour (scripts/bootstrap.sh,
# cached under ~/.cache/strata) and its own build folder build-<name>/ at the
# repository root:
#
#   hip    Kokkos HIP (gfx908) with Debian's hipcc (ROCm 5.2): compiles the
#          whole project (library, apps, tests, benchmarks, examples); nothing
#          runs. hipBLAS and RCCL are not in Debian 12: CMake does not find
#          them, so the portable GEMM is built and no NCCL communicator.
#   cuda   Kokkos CUDA (sm_80) with Debian's CUDA 11.8 (non-free), nvcc_wrapper
#          and g++-11, and cuBLAS: compiles the whole project; nothing runs.
#          CUDA in /usr/local/cuda is kept out of this build.
#   cuda13 Kokkos 4.6.01 CUDA (sm_90, Hopper) with NVIDIA's CUDA 13 in
#          /usr/local/cuda (STRATA_CUDA13_ROOT), nvcc_wrapper and g++, with
#          cuBLAS and NCCL from that toolkit: compiles the whole project;
#          nothing runs. Kokkos 4.6.01 comes from its release tarball
#          (shared/third_party/ or STRATA_KOKKOS_TARBALL) with
#          scripts/patches/kokkos-4.6.01-cuda13.patch.
#   debug  Kokkos with Kokkos_ENABLE_DEBUG and bounds checking, Strata with its
#          contracts (STRATA_EXPECT, assert) on: builds and runs the whole test
#          suite (ctest).
#   march  Strata as spack builds it for a target CPU: -march=x86-64-v4 where
#          the CPU has AVX-512, else x86-64-v3 (AVX2, FMA), -mtune=generic,
#          -O2 -DNDEBUG (RelWithDebInfo's code; its -g changes no instruction
#          and doubles the compile time, so it is left out): builds and runs
#          the whole suite but the simulated cluster, then trains the same
#          --reproducible runs here and in build/ and requires identical
#          checkpoints (scripts/check-reproducible-builds.sh). Also compiles
#          one test file for x86-64-v4 to check, in the object code, that
#          GCC's AVX-512 constant defect is worked around (on any CPU).
#   debug-unit  CMAKE_BUILD_TYPE=Debug (-O0 -g, as developers build) against
#          the debug Kokkos: builds the library and tests, runs the unit tests
#          (ctest -L unit).
#
# Usage: scripts/ci-checks.sh [CHECK...]        (default: hip cuda debug)
#        scripts/ci-checks.sh --list
# Environment:
#   STRATA_CI_CHECKS  checks to run when none are named (space separated)
#   STRATA_JOBS       parallel build jobs (default: number of cores)
#   STRATA_NO_APT=1   never call apt-get (fail when packages are missing)
# Compiles through ccache when it is installed. Exits non-zero when any check
# fails (every requested check still runs); prints a summary with timings.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
# shellcheck source=scripts/common.sh
source "$here/common.sh"

all_checks=(hip cuda cuda13 debug march debug-unit)
default_checks=(hip cuda debug)
case "${1:-}" in
  -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
  --list) printf '%s\n' "${all_checks[@]}"; exit 0 ;;
esac
if [ $# -gt 0 ]; then checks=("$@")
else read -r -a checks <<<"${STRATA_CI_CHECKS:-${default_checks[*]}}"; fi
for c in "${checks[@]}"; do
  case " ${all_checks[*]} " in *" $c "*) ;; *) echo "ci-checks: unknown check '$c' (${all_checks[*]})" >&2; exit 2 ;; esac
done

jobs="${STRATA_JOBS:-$(nproc)}"
have_ccache=0
command -v ccache >/dev/null 2>&1 && have_ccache=1
# Paths under the checkout are hashed relative to it, so that a fresh clone in
# another folder (as CI makes) still hits the cache.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$top}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"

say() { printf '[ci-checks %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

# ccache's counters (hits, misses) as "H M", to report each check's share.
ccache_counts() {
  [ "$have_ccache" = 1 ] || { echo "0 0"; return; }
  ccache --print-stats 2>/dev/null | awk '
    $1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" { h += $2 }
    $1 == "cache_miss" { m += $2 }
    END { print h + 0, m + 0 }'
}

# Runs "$@" with its output in $log; on failure prints the log's tail.
logged() {
  local log="$1"; shift
  if "$@" >>"$log" 2>&1; then return 0; fi
  echo "---- last lines of $log" >&2
  tail -n 60 "$log" >&2
  return 1
}

# configure_and_build FLAVOUR BUILD_DIR CXX_FLAGS [CMAKE_ARGS...]: bootstraps
# the flavour's Kokkos, configures with its compiler and builds everything.
configure_and_build() {
  local flavour="$1" build="$2" cxx_flags="$3"; shift 3
  local kokkos cxx launcher=() generator=()
  mkdir -p "$build"
  : >"$build/bootstrap.log"
  say "$flavour: Kokkos $(strata_kokkos_version "$flavour") ($flavour flavour; built once into $(strata_kokkos_prefix "$flavour"))"
  kokkos="$(Kokkos_ROOT= "$here/bootstrap.sh" --kokkos-flavour "$flavour" --print-kokkos-root 2>>"$build/bootstrap.log")" \
    || { tail -n 40 "$build/bootstrap.log" >&2; say "$flavour: bootstrap failed"; return 1; }
  strata_flavour_env "$flavour"
  cxx="$(strata_flavour_cxx "$flavour" "$kokkos")"
  [ "$have_ccache" = 1 ] && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  [ -f "$build/CMakeCache.txt" ] || generator=(-G Ninja)
  say "$flavour: configure in ${build#"$top"/}/ (CXX=$cxx)"
  : >"$build/configure.log"
  # shellcheck disable=SC2046
  logged "$build/configure.log" cmake -S "$top" -B "$build" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DKokkos_ROOT="$kokkos" -DCMAKE_CXX_COMPILER="$cxx" \
    "${launcher[@]}" $(strata_flavour_cmake_args "$flavour") \
    "-DCMAKE_CXX_FLAGS=$(strata_flavour_cxx_flags "$flavour")${cxx_flags:+ $cxx_flags}" \
    -DSTRATA_ENABLE_TESTS=ON -DSTRATA_ENABLE_BENCHMARKS=ON -DSTRATA_ENABLE_EXAMPLES=ON "$@" \
    || { say "$flavour: CMake configure failed"; return 1; }
  grep -E '^-- (Strata|  )' "$build/configure.log" | sed 's/^-- /    /'
  say "$flavour: build (${jobs} jobs; log ${build#"$top"/}/build.log)"
  : >"$build/build.log"
  logged "$build/build.log" cmake --build "$build" --parallel "$jobs" \
    || { say "$flavour: build failed; first errors:"; grep -E ': error|^FAILED:' "$build/build.log" | head -n 20 >&2; return 1; }
}

check_hip() {
  local build="$top/build-hip"
  # Nothing runs without a GPU: the tests are listed at ctest time, not
  # after linking (gtest_discover_tests runs the executables).
  # hipcc (clang) rejects host-only calls in kernels by itself.
  configure_and_build hip "$build" "" -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST || return 1
  # The configure output says whether hipBLAS and RCCL were found (here: not).
  grep -q 'hipBLAS' "$build/configure.log" && grep -q 'RCCL' "$build/configure.log" \
    || { say "hip: the configure output does not say whether hipBLAS and RCCL were found"; return 1; }
  grep -q 'blas_none.cpp' "$build/build.ninja" \
    || { say "hip: the portable GEMM (backends/blas_none.cpp) was not compiled"; return 1; }
}

check_cuda() {
  local build="$top/build-cuda"
  # nvcc only warns (#20011-D, #20014-D) when a kernel (a __host__ __device__
  # lambda or function) calls a host-only function, and the program fails at
  # run time on the GPU: make those errors.
  configure_and_build cuda "$build" \
    "-Xcudafe --diag_error=20011 -Xcudafe --diag_error=20014" \
    -DSTRATA_ENABLE_CUBLAS=ON -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST || return 1
  # The CUDA 11.8 toolkit, and nothing from /usr/local/cuda (CUDA 13).
  if grep -rqs '/usr/local/cuda' "$build/CMakeCache.txt" "$build/build.ninja" "$build/CMakeFiles/rules.ninja"; then
    say "cuda: /usr/local/cuda leaked into the CUDA 11.8 build:"
    grep -rhos '[^ ;"]*/usr/local/cuda[^ ;"]*' "$build/CMakeCache.txt" "$build/build.ninja" | sort -u | head >&2
    return 1
  fi
  grep -q 'CUBLAS: ON' "$build/configure.log" && grep -q 'blas_cublas.cpp' "$build/build.ninja" \
    || { say "cuda: cuBLAS (backends/blas_cublas.cpp) was not compiled"; return 1; }
  # nvcc runs ptxas, fatbinary, nvlink, cudafe++ from PATH: they must be the
  # same release as nvcc (strata_flavour_env puts the toolkit's first).
  local nvcc_rel tool tool_rel
  nvcc_rel="$("$STRATA_CUDA_ROOT/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  for tool in ptxas fatbinary nvlink; do
    tool_rel="$("$tool" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
    if [ "$tool_rel" != "$nvcc_rel" ]; then
      say "cuda: $tool on PATH ($(command -v "$tool")) is release '${tool_rel}', nvcc is $nvcc_rel"
      return 1
    fi
  done
  grep -q "CUDA toolkit: $nvcc_rel" "$build/configure.log" \
    || { say "cuda: CMake's FindCUDAToolkit did not find CUDA $nvcc_rel:"; grep 'CUDA toolkit' "$build/configure.log"; return 1; }
  say "cuda: nvcc, ptxas, fatbinary, nvlink: CUDA $nvcc_rel ($STRATA_CUDA_ROOT); $(grep -m1 'CUDA toolkit:' "$build/configure.log" | sed 's/^-- *//')"
}

check_cuda13() {
  local build="$top/build-cuda13" nvcc_rel
  [ -x "$STRATA_CUDA13_ROOT/bin/nvcc" ] \
    || { say "cuda13: no CUDA 13 toolkit: $STRATA_CUDA13_ROOT/bin/nvcc not found (STRATA_CUDA13_ROOT)"; return 1; }
  nvcc_rel="$("$STRATA_CUDA13_ROOT/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
  case "$nvcc_rel" in 13.*) ;; *) say "cuda13: $STRATA_CUDA13_ROOT/bin/nvcc is release '$nvcc_rel', not 13.x"; return 1 ;; esac
  # As for cuda: a host-only call in a kernel is an error, not a warning.
  configure_and_build cuda13 "$build" \
    "-Xcudafe --diag_error=20011 -Xcudafe --diag_error=20014" \
    -DSTRATA_ENABLE_CUBLAS=ON -DSTRATA_ENABLE_NCCL=ON \
    -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST || return 1
  # Debian's CUDA 11.8 must not mix into the CUDA 13 build.
  if grep -rqs 'nvidia-cuda-toolkit\|/usr/lib/cuda' "$build/CMakeCache.txt" "$build/build.ninja"; then
    say "cuda13: Debian's CUDA toolkit leaked into the CUDA 13 build:"
    grep -rhos '[^ ;"]*\(nvidia-cuda-toolkit\|/usr/lib/cuda\)[^ ;"]*' "$build/CMakeCache.txt" "$build/build.ninja" | sort -u | head >&2
    return 1
  fi
  grep -q 'CUBLAS: ON' "$build/configure.log" && grep -q 'blas_cublas.cpp' "$build/build.ninja" \
    || { say "cuda13: cuBLAS (backends/blas_cublas.cpp) was not compiled"; return 1; }
  grep -q 'NCCL: ON' "$build/configure.log" && [ -x "$build/bin/test_nccl" ] \
    || { say "cuda13: the NCCL communicator (test_nccl) was not built"; return 1; }
  grep -q -- "-arch=$STRATA_CUDA13_SM" "$build/build.ninja" \
    || { say "cuda13: no compile line has -arch=$STRATA_CUDA13_SM"; return 1; }
  grep -q "CUDA toolkit: $nvcc_rel" "$build/configure.log" \
    || { say "cuda13: CMake's FindCUDAToolkit did not find CUDA $nvcc_rel:"; grep 'CUDA toolkit' "$build/configure.log"; return 1; }
  say "cuda13: Kokkos $(strata_kokkos_version cuda13) patched, nvcc $nvcc_rel ($STRATA_CUDA13_ROOT), $STRATA_CUDA13_SM; cuBLAS and NCCL compiled"
}

check_debug() {
  local build="$top/build-debug"
  # Strata's own contracts too: STRATA_EXPECT and assert() stay in (no NDEBUG).
  # The docs test and the simulated cluster run in the default build only.
  configure_and_build debug "$build" "" -DCMAKE_CXX_FLAGS_RELEASE=-O2 || return 1
  say "debug: ctest (log build-debug/ctest.log)"
  : >"$build/ctest.log"
  # The cluster tests run in the main suite; here they would repeat its
  # launches with a slower test_mpi. The speed guard (label speed) measures
  # optimized code against sgemm: here it would measure the bounds checks.
  (cd "$build" && logged ctest.log ctest --output-on-failure --timeout 600 -j "$jobs" -LE 'cluster|docs|speed') \
    || { say "debug: tests failed"; return 1; }
  grep -E 'tests passed|Total Test time' "$build/ctest.log" | sed 's/^/    /'
}

check_march() {
  local build="$top/build-march" march=x86-64-v4 f
  # x86-64-v4 needs AVX-512 F, BW, CD, DQ and VL.
  for f in avx512f avx512bw avx512cd avx512dq avx512vl; do
    grep -qw "$f" /proc/cpuinfo || march=x86-64-v3
  done
  [ -x "$top/build/bin/strata-train" ] \
    || { say "march: needs the default build in build/ (scripts/build.sh) to compare with"; return 1; }
  configure_and_build openmp "$build" "-march=$march -mtune=generic" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -DNDEBUG" || return 1
  say "march: ctest, -march=$march (log build-march/ctest.log)"
  : >"$build/ctest.log"
  (cd "$build" && logged ctest.log ctest --output-on-failure --timeout 600 -j "$jobs" -LE cluster) \
    || { say "march: tests failed"; return 1; }
  grep -E 'tests passed|Total Test time' "$build/ctest.log" | sed 's/^/    /'
  say "march: --reproducible checkpoints of build/ and build-march/"
  : >"$build/reproducible-builds.log"
  logged "$build/reproducible-builds.log" "$here/check-reproducible-builds.sh" "$top/build" "$build" \
    || { say "march: check-reproducible-builds.sh failed (a run failed, or checkpoints differ: above)"; return 1; }
  grep -E 'identical|DIFFERENT|pairs' "$build/reproducible-builds.log" | sed 's/^/    /'
  # GCC's AVX-512 constant defect (cmake/StrataFloatingPoint.cmake), checked
  # in the object code of an x86-64-v4 compilation, which needs no AVX-512
  # CPU: whatever GCC this is, the copies of constant arrays in
  # test_floating_point.cpp must not become broadcasts from a general register.
  local v4="$top/build-march-v4" launcher=()
  say "march: x86-64-v4 object code of tests/backends/test_floating_point.cpp (GCC $(g++ -dumpfullversion))"
  rm -rf "$v4" && mkdir -p "$v4"   # one object: always configured afresh (ccache keeps it quick)
  : >"$v4/configure.log"
  : >"$v4/build.log"
  [ "$have_ccache" = 1 ] && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  logged "$v4/configure.log" cmake -S "$top" -B "$v4" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER=g++ -DKokkos_ROOT="$(strata_kokkos_prefix openmp)" \
    "-DCMAKE_CXX_FLAGS=-march=x86-64-v4 -mtune=generic" "${launcher[@]}" \
    || { say "march: v4 configure failed"; return 1; }
  local obj="$v4/tests/CMakeFiles/test_floating_point.dir/backends/test_floating_point.cpp.o"
  logged "$v4/build.log" cmake --build "$v4" --target "${obj#"$v4"/}" || { say "march: v4 compile failed"; return 1; }
  objdump -d -C "$obj" >"$v4/test_floating_point.s" || { say "march: objdump $obj failed"; return 1; }
  # The functions that copy constant arrays, then their broadcasts (files,
  # not a pipe into grep -q, whose early exit would fail the pipeline).
  awk '/^[0-9a-f]+ <.*(copy_floats8|copy_floats16|copy_doubles4|copy_ints8|list_floats8)/ { on = 1; next }
       /^[0-9a-f]+ </ { on = 0 } on' "$v4/test_floating_point.s" >"$v4/copies.s"
  [ -s "$v4/copies.s" ] || { say "march: the constant copies are not in $obj"; return 1; }
  if grep -E 'vpbroadcast[bwdq][[:space:]]+%[re]?[a-z0-9]+,[[:space:]]*%[yz]mm' "$v4/copies.s"; then
    say "march: x86-64-v4 object code broadcasts a constant from a general register (above)"; return 1
  fi
  say "march: x86-64-v4: no constant copy is a broadcast; $(grep -o 'floating point: .*' "$v4/configure.log")"
}

check_debug-unit() {
  local build="$top/build-debug-unit"
  configure_and_build debug "$build" "" -DCMAKE_BUILD_TYPE=Debug \
    -DSTRATA_ENABLE_BENCHMARKS=OFF -DSTRATA_ENABLE_EXAMPLES=OFF || return 1
  say "debug-unit: ctest -L unit (log build-debug-unit/ctest.log)"
  : >"$build/ctest.log"
  (cd "$build" && logged ctest.log ctest --output-on-failure --timeout 600 -j "$jobs" -L unit) \
    || { say "debug-unit: tests failed"; return 1; }
  grep -E 'tests passed|Total Test time' "$build/ctest.log" | sed 's/^/    /'
}

failed=() summary=()
for c in "${checks[@]}"; do
  say "==== $c"
  read -r h0 m0 <<<"$(ccache_counts)"
  t0=$SECONDS
  if ( "check_$c" ); then status=ok; else status=FAILED; failed+=("$c"); fi
  read -r h1 m1 <<<"$(ccache_counts)"
  line="$(printf '%-10s %-6s %4ds' "$c" "$status" $((SECONDS - t0)))"
  [ "$have_ccache" = 1 ] && line+="$(printf '   ccache: %d hits, %d misses' $((h1 - h0)) $((m1 - m0)))"
  summary+=("$line")
  say "==== $c: $status in $((SECONDS - t0)) s"
done

echo
echo "ci-checks summary:"
printf '  %s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "ci-checks: FAILED: ${failed[*]}"
  exit 1
fi
echo "ci-checks: all passed (${checks[*]})"
