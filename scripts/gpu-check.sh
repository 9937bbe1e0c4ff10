#!/usr/bin/env bash
# GPU check, for a machine with an NVIDIA GPU: builds Strata against a
# CUDA-enabled Kokkos in build-gpu/, runs the test suite (ctest), trains the
# workload W2 (MLP 784-1024-1024-10, batch 256, 25,600 synthetic samples,
# 2 epochs) with strata-train and prints its samples/s; when python3 has
# PyTorch with CUDA, runs the same workload in PyTorch
# (benchmarks/peers/torch_mlp.py) and prints its samples/s beside. Sized to
# finish within 8 minutes on one H200 (each step is cut at the time left).
#
# Usage: Kokkos_ROOT=/path/to/kokkos scripts/gpu-check.sh [OPTIONS]
#   --kokkos-root DIR  the Kokkos install (else $Kokkos_ROOT): built with
#                      Kokkos_ENABLE_CUDA (and CUDA lambdas), 3.4 or newer
#   --dry-run          check the set-up and print the steps; needs no GPU,
#                      builds and runs nothing
#   --build-only       configure and build, then stop (needs no GPU)
#   --skip-tests       do not run ctest
#   --skip-torch       do not run the PyTorch comparison
#   --budget SECONDS   time for the whole check (default 480)
#   -h, --help
# Environment: CXX (compiler; default: Kokkos' nvcc_wrapper for a Kokkos
# built with nvcc, else the compiler Kokkos was built with), CUDA_ROOT and
# CUDAToolkit_ROOT (which CUDA toolkit), STRATA_GPU_CXX_FLAGS (default:
# -arch=sm_NN from Kokkos_ARCH when the compiler is nvcc_wrapper),
# STRATA_JOBS, PYTHON (default python3), BUILD_DIR (default build-gpu).
# With the Kokkos of `scripts/bootstrap.sh --kokkos-flavour cuda`, the
# toolchain of that flavour (Debian's CUDA 11.8, g++-11) is used.
#
# Exit codes: 0 passed, 1 a step failed, 2 bad usage or set-up,
# 3 no CUDA device here (nvidia-smi not found or it lists no GPU).
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
# shellcheck source=scripts/common.sh
source "$here/common.sh"

kokkos="${Kokkos_ROOT:-}"
dry_run=0 build_only=0 skip_tests=0 skip_torch=0 budget=480
while [ $# -gt 0 ]; do
  case "$1" in
    --kokkos-root) kokkos="$2"; shift ;;
    --kokkos-root=*) kokkos="${1#*=}" ;;
    --dry-run) dry_run=1 ;;
    --build-only) build_only=1 ;;
    --skip-tests) skip_tests=1 ;;
    --skip-torch) skip_torch=1 ;;
    --budget) budget="$2"; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

t_start=$SECONDS
say() { printf '[gpu-check %4ds] %s\n' $((SECONDS - t_start)) "$*"; }
die() { local code="$1"; shift; echo "gpu-check: $*" >&2; exit "$code"; }
left() { echo $((budget - (SECONDS - t_start))); }
# run_for SECONDS_MAX CMD...: runs CMD under the time left (at most SECONDS_MAX).
run_for() {
  local max="$1" l; shift
  l="$(left)"; [ "$l" -lt "$max" ] && max="$l"
  [ "$max" -gt 5 ] || { echo "gpu-check: out of time (budget ${budget} s)" >&2; return 124; }
  timeout --kill-after=10 "$max" "$@"
}

# ------------------------------------------------------------------ the device
if [ "$dry_run" = 0 ] && [ "$build_only" = 0 ]; then
  command -v nvidia-smi >/dev/null 2>&1 \
    || die 3 "no CUDA device: nvidia-smi not found (this check needs an NVIDIA GPU; --dry-run or --build-only check the set-up without one)"
  gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
  [ "${gpus:-0}" -gt 0 ] || die 3 "no CUDA device: nvidia-smi lists no GPU ($(nvidia-smi -L 2>&1 | head -n 1))"
  say "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -n 1)"
fi

# ------------------------------------------------------------------ Kokkos
[ -n "$kokkos" ] || die 2 "no Kokkos: set Kokkos_ROOT (or --kokkos-root) to a CUDA-enabled Kokkos install"
common_cfg="$(ls "$kokkos"/lib*/cmake/Kokkos/KokkosConfigCommon.cmake 2>/dev/null | head -n 1)"
[ -n "$common_cfg" ] || die 2 "$kokkos is not a Kokkos install (no lib*/cmake/Kokkos/KokkosConfigCommon.cmake)"
kvar() { sed -n "s/^set(Kokkos_$1 \"\{0,1\}\([^\")]*\)\"\{0,1\})\$/\1/Ip" "$common_cfg" | head -n 1; }
devices="$(kvar DEVICES)" arch="$(kvar ARCH)" kcxx="$(kvar CXX_COMPILER)" kcxx_id="$(kvar CXX_COMPILER_ID)"
case ";$devices;" in *";CUDA;"*) ;; *) die 2 "Kokkos in $kokkos is not built for CUDA (devices: $devices)" ;; esac
say "Kokkos: $kokkos (devices $devices, arch ${arch:-?}, compiler ${kcxx_id:-?})"

extra_cmake=() auto_flags=""
if [ "$(cd "$kokkos" && pwd -P)" = "$(cd "$(strata_kokkos_prefix cuda)" 2>/dev/null && pwd -P)" ]; then
  # Strata's own cuda flavour: its toolchain (Debian's CUDA 11.8, g++-11).
  strata_flavour_env cuda
  read -r -a extra_cmake <<<"$(strata_flavour_cmake_args cuda)"
  auto_flags="$(strata_flavour_cxx_flags cuda)"
  say "toolchain: the cuda flavour of scripts/bootstrap.sh (CUDA_ROOT=$CUDA_ROOT, host compiler $NVCC_WRAPPER_DEFAULT_COMPILER)"
elif [ -n "${CUDAToolkit_ROOT:-${CUDA_ROOT:-}}" ]; then
  extra_cmake+=("-DCUDAToolkit_ROOT=${CUDAToolkit_ROOT:-$CUDA_ROOT}")
fi
if [ -n "${CXX:-}" ]; then cxx="$CXX"
elif [ "$kcxx_id" = NVIDIA ] && [ -x "$kokkos/bin/nvcc_wrapper" ]; then cxx="$kokkos/bin/nvcc_wrapper"
else cxx="$kcxx"; fi
[ -n "$cxx" ] && command -v "$cxx" >/dev/null 2>&1 || die 2 "C++ compiler '$cxx' not found (set CXX)"
if [ -z "$auto_flags" ] && [[ "$cxx" == *nvcc_wrapper ]]; then
  # The flag Kokkos adds for its GPU arch, for CMake's compiler check too:
  # nvcc_wrapper's own default (sm_35 in Kokkos 3.4) is gone from CUDA 12.
  sm="$(printf '%s\n' "${arch//;/ }" | tr ' ' '\n' | sed -n 's/^\(KEPLER\|MAXWELL\|PASCAL\|VOLTA\|TURING\|AMPERE\|ADA\|HOPPER\|BLACKWELL\)\([0-9]*\)$/\2/p' | head -n 1)"
  [ -n "$sm" ] && auto_flags="-arch=sm_$sm"
fi
flags="${STRATA_GPU_CXX_FLAGS-$auto_flags}"
[ -n "$flags" ] && extra_cmake+=("-DCMAKE_CXX_FLAGS=$flags")

build="${BUILD_DIR:-$top/build-gpu}"
jobs="${STRATA_JOBS:-$(nproc)}"
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
generator=()
[ -f "$build/CMakeCache.txt" ] || { command -v ninja >/dev/null 2>&1 && generator=(-G Ninja); }
configure=(cmake -S "$top" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release
  -DKokkos_ROOT="$kokkos" -DCMAKE_CXX_COMPILER="$cxx" "${launcher[@]}" "${extra_cmake[@]}"
  -DSTRATA_ENABLE_TESTS=ON -DSTRATA_ENABLE_BENCHMARKS=ON -DSTRATA_ENABLE_EXAMPLES=ON
  -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST)  # tests listed by ctest, not at link time
w2=(--dataset synthetic --layers 784,1024,1024,10 --batch-size 256 --samples 25600 --epochs 2
  --log-every 0 --metrics "$build/w2-metrics.jsonl")
# W2 on the training split: 25,600 samples less the 10% test split, 90 steps
# of 256 per epoch; the first 5 steps are warm-up in strata-train.
torch_args=(--layers 784,1024,1024,10 --batch-size 256 --steps 180 --warmup 20 --device cuda --json)
py="${PYTHON:-python3}"

have_torch=0
if [ "$skip_torch" = 0 ] && command -v "$py" >/dev/null 2>&1 \
   && "$py" -c 'import torch' >/dev/null 2>&1; then have_torch=1; fi

if [ "$dry_run" = 1 ]; then
  say "dry run: the steps (nothing is built or run)"
  printf '  %q' "${configure[@]}"; echo
  echo "  cmake --build $build --parallel $jobs"
  [ "$skip_tests" = 1 ] || echo "  (cd $build && ctest --output-on-failure --timeout 120 -j 4)"
  echo "  $build/bin/strata-train ${w2[*]}"
  if [ "$have_torch" = 1 ]; then echo "  $py $top/benchmarks/peers/torch_mlp.py ${torch_args[*]}"
  else echo "  (PyTorch comparison skipped: $([ "$skip_torch" = 1 ] && echo --skip-torch || echo "no 'import torch' in $py"))"; fi
  exit 0
fi

# ------------------------------------------------------------------ build
mkdir -p "$build"
say "configure in ${build#"$top"/}/ (CXX=$cxx${extra_cmake[*]:+; ${extra_cmake[*]}})"
run_for 120 "${configure[@]}" >"$build/configure.log" 2>&1 \
  || { tail -n 40 "$build/configure.log" >&2; die 1 "CMake configure failed (log: $build/configure.log)"; }
grep -E '^--   ' "$build/configure.log" | sed 's/^-- /   /'
say "build ($jobs jobs; log ${build#"$top"/}/build.log)"
run_for 330 cmake --build "$build" --parallel "$jobs" >"$build/build.log" 2>&1 \
  || { grep -E ': error|^FAILED:' "$build/build.log" | head -n 20 >&2; tail -n 20 "$build/build.log" >&2
       die 1 "build failed (log: $build/build.log)"; }
say "built"
[ "$build_only" = 1 ] && { say "--build-only: done"; exit 0; }

failed=()
# ------------------------------------------------------------------ tests
if [ "$skip_tests" = 0 ]; then
  say "ctest (log ${build#"$top"/}/ctest.log)"
  if (cd "$build" && run_for 200 ctest --output-on-failure --timeout 120 -j 4) >"$build/ctest.log" 2>&1; then
    say "tests: $(grep -E 'tests passed' "$build/ctest.log" | tail -n 1)"
  else
    grep -E 'tests passed|\(Failed\)|\(Timeout\)|\*\*\*' "$build/ctest.log" | tail -n 20 >&2
    say "tests FAILED (log: $build/ctest.log)"; failed+=(ctest)
  fi
fi

# ------------------------------------------------------------------ W2
say "W2: strata-train ${w2[*]}"
rate_strata=""
if run_for 120 "$build/bin/strata-train" "${w2[@]}" >"$build/w2.log" 2>&1; then
  tail -n 1 "$build/w2.log" | sed 's/^/   /'
  rate_strata="$(tail -n 1 "$build/w2-metrics.jsonl" | sed -n 's/.*"samples_per_sec":\([0-9.eE+-]*\).*/\1/p')"
  say "W2 strata-train: $(printf '%.0f' "${rate_strata:-0}") samples/s"
else
  tail -n 20 "$build/w2.log" >&2; say "W2 strata-train FAILED (log: $build/w2.log)"; failed+=(w2)
fi

# ------------------------------------------------------------------ PyTorch
rate_torch=""
if [ "$skip_torch" = 1 ]; then say "PyTorch comparison: skipped (--skip-torch)"
elif [ "$have_torch" = 0 ]; then say "PyTorch comparison: skipped ($py has no torch)"
elif ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  say "PyTorch comparison: skipped (torch in $py sees no CUDA device)"
else
  say "W2 PyTorch: benchmarks/peers/torch_mlp.py ${torch_args[*]}"
  if run_for 120 "$py" "$top/benchmarks/peers/torch_mlp.py" "${torch_args[@]}" >"$build/w2-torch.log" 2>&1; then
    grep '^torch_mlp:' "$build/w2-torch.log" | sed 's/^/   /'
    rate_torch="$(tail -n 1 "$build/w2-torch.log" | sed -n 's/.*"samples_per_sec": \([0-9.eE+-]*\).*/\1/p')"
  else
    tail -n 20 "$build/w2-torch.log" >&2; say "W2 PyTorch FAILED (log: $build/w2-torch.log)"; failed+=(torch)
  fi
fi

echo
echo "gpu-check summary ($((SECONDS - t_start)) s):"
[ -n "$rate_strata" ] && printf '  W2 strata-train: %10.0f samples/s\n' "$rate_strata"
[ -n "$rate_torch" ] && printf '  W2 PyTorch:      %10.0f samples/s\n' "$rate_torch"
if [ -n "$rate_strata" ] && [ -n "$rate_torch" ]; then
  awk -v s="$rate_strata" -v t="$rate_torch" 'BEGIN { printf "  strata / torch:  %10.2f\n", s / t }'
fi
if [ ${#failed[@]} -gt 0 ]; then echo "gpu-check: FAILED: ${failed[*]}"; exit 1; fi
echo "gpu-check: passed"
