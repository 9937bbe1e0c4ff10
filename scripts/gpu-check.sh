#!/usr/bin/env bash
# GPU check, for a machine with an NVIDIA GPU: builds Strata against a
# CUDA-enabled Kokkos in build-gpu/, runs the test suite (ctest, without the
# simulated cluster and the docs commands), trains the workloads W2 (MLP
# 784-1024-1024-10, batch 256), W3 (4 x 4096 wide, batch 512), W4 (the CNN
# of models/cnn-fashion.toml, batch 128) and W5 (models/gpt-mini.toml, 32 x
# 128 tokens, AdamW) on synthetic data in fp32 and bf16 with strata-train
# and prints their samples/s; when python3 has PyTorch with CUDA, runs the
# same workloads in PyTorch (benchmarks/peers/torch_mlp.py) beside. Writes a
# report (build-gpu/gpu-check-report.md). Each step is cut at the time left
# of --budget. Sized for one call of a 16-core GPU machine: it builds only
# the library, strata-train and the kernel tests (labels unit and nccl),
# about 4,300 core-seconds of nvcc 13 as timed on a 2-core AMD EPYC here, so
# about 4.5 minutes on 16 such cores; docs/gpu.md has the budget.
#
# Usage: Kokkos_ROOT=/path/to/kokkos scripts/gpu-check.sh [OPTIONS]
#        scripts/gpu-check.sh --kokkos-source DIR [--deps DIR] [OPTIONS]
#        scripts/gpu-check.sh --kokkos-tarball kokkos-4.6.01.tar.gz [--deps DIR] [OPTIONS]
#        scripts/gpu-check.sh --fetch-deps DIR      (on Debian, before carrying)
#   --kokkos-root DIR    the Kokkos install (else $Kokkos_ROOT): built with
#                        Kokkos_ENABLE_CUDA (and CUDA lambdas), 3.4 or newer
#   --kokkos-source DIR  a Kokkos source tree (a release that supports the
#                        machine's CUDA): built for the GPU into
#                        build-gpu/kokkos-install first (once)
#   --kokkos-tarball F   the Kokkos 4.6.01 release tarball: unpacked and
#                        patched for CUDA 13 (scripts/patches/), then as
#                        --kokkos-source. The GPU machine has no network:
#                        carry it (and --deps) with the working tree
#   --arch NAME          Kokkos arch for --kokkos-source (HOPPER90, AMPERE80,
#                        ...; default: from nvidia-smi's compute capability,
#                        HOPPER90 where there is no GPU)
#   --deps DIR           headers and libraries this machine lacks (toml++,
#                        nlohmann-json, CLI11, GoogleTest), as --fetch-deps
#                        made them
#   --fetch-deps DIR     download those Debian packages into DIR and stop
#                        (apt-get download; for a GPU machine without them)
#   --dry-run            check the set-up and print the steps; needs no GPU,
#                        builds and runs nothing
#   --build-only         configure and build, then stop (needs no GPU)
#   --skip-tests         do not run ctest
#   --skip-torch         do not run the PyTorch comparison
#   --workloads LIST     which of W2,W3,W4,W5 to train (default W3,W4,W5)
#   --budget SECONDS     time for the whole check (default 540)
#   -h, --help
# NCCL: found with the CUDA toolkit, in $NCCL_HOME, or in the nvidia-nccl
# Python wheel of $PYTHON (as PyTorch installs it).
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
kokkos_source="" kokkos_tarball="" arch_opt="" deps="" fetch_deps=""
dry_run=0 build_only=0 skip_tests=0 skip_torch=0 budget=540 workload_list=W3,W4,W5
while [ $# -gt 0 ]; do
  case "$1" in
    --kokkos-root|--kokkos-source|--kokkos-tarball|--arch|--deps|--fetch-deps|--workloads|--budget)
      [ $# -ge 2 ] || { echo "gpu-check: $1 needs a value (see --help)" >&2; exit 2; } ;;
  esac
  case "$1" in
    --kokkos-root) kokkos="$2"; shift ;;
    --kokkos-root=*) kokkos="${1#*=}" ;;
    --kokkos-source) kokkos_source="$2"; shift ;;
    --kokkos-tarball) kokkos_tarball="$2"; shift ;;
    --arch) arch_opt="$2"; shift ;;
    --deps) deps="$2"; shift ;;
    --fetch-deps) fetch_deps="$2"; shift ;;
    --dry-run) dry_run=1 ;;
    --build-only) build_only=1 ;;
    --skip-tests) skip_tests=1 ;;
    --skip-torch) skip_torch=1 ;;
    --workloads) workload_list="$2"; shift ;;
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
IFS=, read -r -a workloads <<<"$workload_list"
for w in "${workloads[@]}"; do
  case "$w" in W2|W3|W4|W5) ;; *) die 2 "--workloads: unknown workload '$w' in '$workload_list' (expected W2, W3, W4 or W5, comma-separated)" ;; esac
done
# run_for SECONDS_MAX CMD...: runs CMD under the time left (at most SECONDS_MAX).
run_for() {
  local max="$1" l; shift
  l="$(left)"; [ "$l" -lt "$max" ] && max="$l"
  [ "$max" -gt 5 ] || { echo "gpu-check: out of time (budget ${budget} s)" >&2; return 124; }
  timeout --kill-after=10 "$max" "$@"
}

# ------------------------------------------------------------------ --fetch-deps
if [ -n "$fetch_deps" ]; then
  mkdir -p "$fetch_deps" && fetch_deps="$(cd "$fetch_deps" && pwd)"
  debs="$(mktemp -d)"
  pkgs=(libtomlplusplus-dev nlohmann-json3-dev libcli11-dev libgtest-dev googletest)
  say "apt-get download ${pkgs[*]}"
  (cd "$debs" && apt-get download "${pkgs[@]}" >"$debs/apt.log" 2>&1) \
    || { cat "$debs/apt.log" >&2; die 2 "apt-get download failed (apt-get update first?)"; }
  for f in "$debs"/*.deb; do dpkg -x "$f" "$fetch_deps"; done
  rm -rf "$debs"
  say "dependencies in $fetch_deps ($(du -sh "$fetch_deps" | cut -f1)); pass --deps $fetch_deps"
  exit 0
fi

# ------------------------------------------------------------------ the device
if [ "$dry_run" = 0 ] && [ "$build_only" = 0 ]; then
  command -v nvidia-smi >/dev/null 2>&1 \
    || die 3 "no CUDA device: nvidia-smi not found (this check needs an NVIDIA GPU; --dry-run or --build-only check the set-up without one)"
  gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)"
  [ "${gpus:-0}" -gt 0 ] || die 3 "no CUDA device: nvidia-smi lists no GPU ($(nvidia-smi -L 2>&1 | head -n 1))"
  say "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -n 1)"
fi

build="${BUILD_DIR:-$top/build-gpu}"
jobs="${STRATA_JOBS:-$(nproc)}"
report="$build/gpu-check-report.md"

if [ "$dry_run" = 1 ]; then
  # What the device tool carries: the working tree (tracked and untracked
  # files git does not ignore), within its 64 MiB.
  carry_bytes="$(cd "$top" && git ls-files -z -co --exclude-standard 2>/dev/null | du -cb --files0-from=- 2>/dev/null | tail -n 1 | cut -f1)"
  say "dry run: the working tree that travels to a GPU machine: $(awk -v b="${carry_bytes:-0}" 'BEGIN { printf "%.1f", b / 1048576 }') MiB (the device tool carries at most 64 MiB, with what --kokkos-tarball and --deps add when carried)"
fi

# ------------------------------------------------------------------ Kokkos
if [ -n "$kokkos_tarball" ]; then
  [ -f "$kokkos_tarball" ] || die 2 "--kokkos-tarball $kokkos_tarball: no such file"
  [ -z "$kokkos_source" ] || die 2 "give --kokkos-source or --kokkos-tarball, not both"
  kokkos_source="$(STRATA_KOKKOS_TARBALL="$(cd "$(dirname "$kokkos_tarball")" && pwd)/$(basename "$kokkos_tarball")" \
    strata_kokkos46_source)" || die 2 "--kokkos-tarball $kokkos_tarball: cannot unpack and patch it (above)"
  say "Kokkos source: $kokkos_tarball unpacked and patched ($(basename "$(strata_kokkos46_patch)")) in $kokkos_source"
fi
if [ -n "$kokkos_source" ]; then
  [ -f "$kokkos_source/CMakeLists.txt" ] && [ -d "$kokkos_source/core" ] \
    || die 2 "--kokkos-source $kokkos_source is not a Kokkos source tree (no CMakeLists.txt and core/)"
  kokkos_source="$(cd "$kokkos_source" && pwd)"
  # CUDA 13 changed runtime calls Kokkos makes (cudaGraphAddDependencies,
  # cudaMemPrefetchAsync, cudaMemAdvise): 4.6.01 and the develop branch of
  # June 2025 fail to compile unless patched (--kokkos-tarball applies the
  # project's patch); Kokkos fixed it upstream in 4.7.01.
  kver="$(sed -n 's/^set(Kokkos_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\))$/\2/p' \
    "$kokkos_source/CMakeLists.txt" "$kokkos_source/cmake/kokkos_version.cmake" 2>/dev/null | head -n 3 | paste -sd. -)"
  nvcc_major="$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9]*\)\..*/\1/p')"
  say "Kokkos source: ${kver:-version unknown}; nvcc: ${nvcc_major:-not found}"
  if [ "${nvcc_major:-0}" -ge 13 ] && [ -n "$kver" ] && [ ! -f "$kokkos_source/.strata-patched" ] \
     && [ "$(printf '%s\n4.7.1\n' "$kver" | sort -V | head -n 1)" != 4.7.1 ]; then
    die 2 "Kokkos $kver does not compile with CUDA $nvcc_major as it is: give its release tarball as --kokkos-tarball (patched for CUDA 13), a Kokkos 4.7.01 or newer --kokkos-source, or put an older CUDA first on PATH"
  fi
  arch="$arch_opt"
  if [ -z "$arch" ]; then
    cc="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')"
    case "$cc" in
      70) arch=VOLTA70 ;; 75) arch=TURING75 ;; 80) arch=AMPERE80 ;; 86) arch=AMPERE86 ;;
      89) arch=ADA89 ;; 90) arch=HOPPER90 ;; 100) arch=BLACKWELL100 ;; 120) arch=BLACKWELL120 ;;
      "") arch=HOPPER90; say "no GPU to ask: Kokkos arch HOPPER90 (--arch sets it)" ;;
      *) die 2 "compute capability $cc has no Kokkos arch here; give --arch" ;;
    esac
  fi
  kokkos="$build/kokkos-install"
  kokkos_build="$build/kokkos-build"
  kokkos_cfg=(cmake -S "$kokkos_source" -B "$kokkos_build" -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_INSTALL_PREFIX="$kokkos" -DCMAKE_CXX_STANDARD=17 -DKokkos_ENABLE_SERIAL=ON
    -DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_CUDA_LAMBDA=ON "-DKokkos_ARCH_$arch=ON"
    -DCMAKE_CXX_COMPILER="$kokkos_source/bin/nvcc_wrapper"
    # For CMake's compiler check too: nvcc_wrapper's default arch (sm_70 in
    # Kokkos 4.6) is gone from CUDA 13.
    "-DCMAKE_CXX_FLAGS=-arch=sm_${arch//[!0-9]/}")
  command -v ninja >/dev/null 2>&1 && kokkos_cfg+=(-G Ninja)
  if [ "$dry_run" = 1 ]; then
    say "dry run: Kokkos from $kokkos_source for $arch into ${kokkos#"$top"/}"
    printf '  %q' "${kokkos_cfg[@]}"; echo
    echo "  cmake --build $kokkos_build --parallel $jobs && cmake --install $kokkos_build"
  elif [ -f "$kokkos/include/Kokkos_Core.hpp" ]; then
    say "Kokkos: built before in ${kokkos#"$top"/}"
  else
    mkdir -p "$build"
    say "Kokkos: build $kokkos_source for $arch (log ${kokkos_build#"$top"/}.log)"
    { run_for 300 "${kokkos_cfg[@]}" && run_for "$budget" cmake --build "$kokkos_build" --parallel "$jobs" \
        && cmake --install "$kokkos_build"; } >"$kokkos_build.log" 2>&1 \
      || { tail -n 30 "$kokkos_build.log" >&2; die 1 "Kokkos build failed (log: $kokkos_build.log)"; }
  fi
fi
[ -n "$kokkos" ] || die 2 "no Kokkos: set Kokkos_ROOT (or --kokkos-root) to a CUDA-enabled Kokkos install, or give --kokkos-source"
if [ "$dry_run" = 1 ] && [ -n "$kokkos_source" ] && [ ! -d "$kokkos" ]; then
  # Not built yet: what the Kokkos build above installs.
  devices="SERIAL;CUDA" kcxx="$kokkos/bin/nvcc_wrapper" kcxx_id=NVIDIA
else
  common_cfg="$(ls "$kokkos"/lib*/cmake/Kokkos/KokkosConfigCommon.cmake 2>/dev/null | head -n 1)"
  [ -n "$common_cfg" ] || die 2 "$kokkos is not a Kokkos install (no lib*/cmake/Kokkos/KokkosConfigCommon.cmake)"
  kvar() { sed -n "s/^set(Kokkos_$1 \"\{0,1\}\([^\")]*\)\"\{0,1\})\$/\1/Ip" "$common_cfg" | head -n 1; }
  devices="$(kvar DEVICES)" arch="$(kvar ARCH)" kcxx="$(kvar CXX_COMPILER)" kcxx_id="$(kvar CXX_COMPILER_ID)"
  case ";$devices;" in *";CUDA;"*) ;; *) die 2 "Kokkos in $kokkos is not built for CUDA (devices: $devices)" ;; esac
fi
say "Kokkos: $kokkos (devices $devices, arch ${arch:-?}, compiler ${kcxx_id:-?})"

extra_cmake=() auto_flags=""
if [ "$(cd "$kokkos" 2>/dev/null && pwd -P)" = "$(cd "$(strata_kokkos_prefix cuda)" 2>/dev/null && pwd -P)" ]; then
  # Strata's own cuda flavour: its toolchain (Debian's CUDA 11.8, g++-11).
  strata_flavour_env cuda
  read -r -a extra_cmake <<<"$(strata_flavour_cmake_args cuda)"
  auto_flags="$(strata_flavour_cxx_flags cuda)"
  say "toolchain: the cuda flavour of scripts/bootstrap.sh (CUDA_ROOT=$CUDA_ROOT, host compiler $NVCC_WRAPPER_DEFAULT_COMPILER)"
elif [ -n "${CUDAToolkit_ROOT:-${CUDA_ROOT:-}}" ]; then
  extra_cmake+=("-DCUDAToolkit_ROOT=${CUDAToolkit_ROOT:-$CUDA_ROOT}")
fi
if [ -n "${CXX:-}" ]; then cxx="$CXX"
elif [ "$kcxx_id" = NVIDIA ] && { [ -x "$kokkos/bin/nvcc_wrapper" ] || [ "$dry_run" = 1 ]; }; then
  cxx="$kokkos/bin/nvcc_wrapper"
else cxx="$kcxx"; fi
[ -n "$cxx" ] && { command -v "$cxx" >/dev/null 2>&1 || [ "$dry_run" = 1 ]; } \
  || die 2 "C++ compiler '$cxx' not found (set CXX)"
if [ -z "$auto_flags" ] && [[ "$cxx" == *nvcc_wrapper ]]; then
  # The flag Kokkos adds for its GPU arch, for CMake's compiler check too:
  # nvcc_wrapper's own default (sm_35 in Kokkos 3.4) is gone from CUDA 12.
  sm="$(printf '%s\n' "${arch//;/ }" | tr ' ' '\n' | sed -n 's/^\(KEPLER\|MAXWELL\|PASCAL\|VOLTA\|TURING\|AMPERE\|ADA\|HOPPER\|BLACKWELL\)\([0-9]*\)$/\2/p' | head -n 1)"
  [ -n "$sm" ] && auto_flags="-arch=sm_$sm"
fi
flags="${STRATA_GPU_CXX_FLAGS-$auto_flags}"
[ -n "$flags" ] && extra_cmake+=("-DCMAKE_CXX_FLAGS=$flags")

launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
generator=()
[ -f "$build/CMakeCache.txt" ] || { command -v ninja >/dev/null 2>&1 && generator=(-G Ninja); }
if [ -n "$deps" ]; then
  [ -d "$deps/usr/include" ] || die 2 "--deps $deps holds no usr/include (make it with --fetch-deps)"
  deps="$(cd "$deps" && pwd)"
  extra_cmake+=("-DCMAKE_PREFIX_PATH=$deps/usr" "-DSTRATA_TOMLPP_INCLUDE_DIR=$deps/usr/include")
fi
# NCCL from PyTorch's wheel when neither the toolkit nor NCCL_HOME has it.
py="${PYTHON:-python3}"
if [ -z "${NCCL_HOME:-}" ] && command -v "$py" >/dev/null 2>&1; then
  wheel="$("$py" -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)"
  lib="$(ls "$wheel"/lib/libnccl.so* 2>/dev/null | head -n 1)"
  if [ -n "$wheel" ] && [ -f "$wheel/include/nccl.h" ] && [ -n "$lib" ]; then
    extra_cmake+=("-DSTRATA_NCCL_INCLUDE_DIR=$wheel/include" "-DSTRATA_NCCL_LIBRARY=$lib")
    say "NCCL: from $py's nvidia-nccl wheel ($lib)"
  fi
fi
configure=(cmake -S "$top" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release
  -DKokkos_ROOT="$kokkos" -DCMAKE_CXX_COMPILER="$cxx" "${launcher[@]}" "${extra_cmake[@]}"
  -DSTRATA_ENABLE_TESTS=ON -DSTRATA_ENABLE_BENCHMARKS=OFF -DSTRATA_ENABLE_EXAMPLES=OFF
  -DCMAKE_GTEST_DISCOVER_TESTS_DISCOVERY_MODE=PRE_TEST)  # tests listed by ctest, not at link time
# What runs on the GPU: the library, strata-train and the kernel tests
# (labels unit and nccl: every layer, loss, optimizer, precision and
# reproducible kernel against its oracle, and the NCCL communicator). The
# rest of the suite (thread ranks, MPI, the simulated cluster, the apps'
# end-to-end runs, the docs' commands) tests host-side code that CI runs:
# the GPU's minutes go to kernels. Building only these saves about a
# quarter of the nvcc time.
ctest_jobs=$(( jobs < 8 ? jobs : 8 ))
ctest_labels="unit|nccl"
build_targets=(strata-train)
for t in test_data test_checkpoint test_blas test_floating_point test_reproducible_kernels \
         test_loader test_layers test_cnn_layers test_transformer_layers test_models \
         test_optimizer test_precision; do build_targets+=("$t"); done
ctest_cmd=(ctest --output-on-failure --timeout 120 -j "$ctest_jobs" -L "$ctest_labels")
# The workloads (../BENCHMARKS.md's W2-W5 shapes, synthetic data), each in
# fp32 and bf16 (strata-train --precision bf16: bf16 compute, fp32 master
# weights; PyTorch under torch.autocast(bfloat16) with fp32 weights), with
# strata-train and the PyTorch peer (benchmarks/peers/torch_mlp.py) on the
# same GPU. strata-train excludes its first 5 steps from samples/s; the peer
# warms up 5 steps.
strata_args() {  # WORKLOAD: strata-train's arguments
  case "$1" in
    W2) echo "--dataset synthetic --layers 784,1024,1024,10 --batch-size 256 --samples 25600 --steps 100" ;;
    W3) echo "--dataset synthetic --layers 4096,4096,4096,4096,4096,10 --batch-size 512 --samples 22756 --steps 40" ;;
    W4) echo "--dataset synthetic --model $top/models/cnn-fashion.toml --batch-size 128 --samples 12800 --steps 60" ;;
    W5) echo "--dataset synthetic --model $top/models/gpt-mini.toml --batch-size 32 --samples 3200 --steps 30 --optimizer adamw" ;;
  esac
}
torch_args_of() {  # WORKLOAD: the peer's arguments
  case "$1" in
    W2) echo "--layers 784,1024,1024,10 --batch-size 256 --steps 95" ;;
    W3) echo "--layers 4096,4096,4096,4096,4096,10 --batch-size 512 --steps 35" ;;
    W4) echo "--model $top/models/cnn-fashion.toml --batch-size 128 --steps 55" ;;
    W5) echo "--model $top/models/gpt-mini.toml --batch-size 32 --steps 25 --optimizer adamw" ;;
  esac
}
describe() {
  case "$1" in
    W2) echo "W2 (784-1024-1024-10, batch 256)" ;;
    W3) echo "W3 (4 x 4096, batch 512)" ;;
    W4) echo "W4 (cnn-fashion, batch 128)" ;;
    W5) echo "W5 (gpt-mini, 32 x 128 tokens, AdamW)" ;;
  esac
}

have_torch=0
if [ "$skip_torch" = 0 ] && command -v "$py" >/dev/null 2>&1 \
   && "$py" -c 'import torch' >/dev/null 2>&1; then have_torch=1; fi

if [ "$dry_run" = 1 ]; then
  say "dry run: the steps (nothing is built or run)"
  printf '  %q' "${configure[@]}"; echo
  echo "  cmake --build $build --parallel $jobs$(printf ' --target %s' "${build_targets[@]}") [--target test_nccl where NCCL is found]"
  [ "$skip_tests" = 1 ] || { printf '  (cd %q &&' "$build"; printf ' %q' "${ctest_cmd[@]}"; echo ")"; }
  for w in "${workloads[@]}"; do
    for p in fp32 bf16; do
      echo "  $build/bin/strata-train $(strata_args "$w") --precision $p --log-every 0 --no-eval --metrics $build/$w-$p-metrics.jsonl"
      if [ "$have_torch" = 1 ]; then
        echo "  $py $top/benchmarks/peers/torch_mlp.py $(torch_args_of "$w") --warmup 5 --device cuda --json$([ "$p" = bf16 ] && echo " --autocast bfloat16")"
      fi
    done
  done
  [ "$have_torch" = 1 ] || echo "  (PyTorch comparison skipped: $([ "$skip_torch" = 1 ] && echo --skip-torch || echo "no 'import torch' in $py"))"
  exit 0
fi

# ------------------------------------------------------------------ build
mkdir -p "$build"
say "configure in ${build#"$top"/}/ (CXX=$cxx${extra_cmake[*]:+; ${extra_cmake[*]}})"
run_for 120 "${configure[@]}" >"$build/configure.log" 2>&1 \
  || { tail -n 40 "$build/configure.log" >&2; die 1 "CMake configure failed (log: $build/configure.log)"; }
grep -E '^--   ' "$build/configure.log" | sed 's/^-- /   /'
say "build ($jobs jobs; log ${build#"$top"/}/build.log)"
cmake --build "$build" --target help 2>/dev/null | grep -qw test_nccl && build_targets+=(test_nccl)
targets=()
for t in "${build_targets[@]}"; do targets+=(--target "$t"); done
run_for "$budget" cmake --build "$build" --parallel "$jobs" "${targets[@]}" >"$build/build.log" 2>&1 \
  || { grep -E ': error|^FAILED:' "$build/build.log" | head -n 20 >&2; tail -n 20 "$build/build.log" >&2
       die 1 "build failed (log: $build/build.log)"; }
say "built"
[ "$build_only" = 1 ] && { say "--build-only: done"; exit 0; }

failed=()
# ------------------------------------------------------------------ tests
if [ "$skip_tests" = 0 ]; then
  say "ctest (log ${build#"$top"/}/ctest.log)"
  if (cd "$build" && run_for 200 "${ctest_cmd[@]}") >"$build/ctest.log" 2>&1; then
    say "tests: $(grep -E 'tests passed' "$build/ctest.log" | tail -n 1)"
  else
    grep -E 'tests passed|\(Failed\)|\(Timeout\)|\*\*\*' "$build/ctest.log" | tail -n 20 >&2
    say "tests FAILED (log: $build/ctest.log)"; failed+=(ctest)
  fi
fi

# ------------------------------------------------------------------ workloads
# strata NAME ARGS...: trains with strata-train; sets rate (samples/s) or "".
strata_rate() {
  local name="$1" metrics="$2"; shift 2
  rate=""
  say "$name: strata-train $*"
  if run_for 120 "$build/bin/strata-train" "$@" >"$build/$name.log" 2>&1; then
    grep -E '^Strata|rank\(s\)' "$build/$name.log" | head -n 1 | sed 's/^/   /'
    tail -n 1 "$build/$name.log" | sed 's/^/   /'
    rate="$(tail -n 1 "$metrics" | sed -n 's/.*"samples_per_sec":\([0-9.eE+-]*\).*/\1/p')"
    say "$name strata-train: $(printf '%.0f' "${rate:-0}") samples/s"
  else
    tail -n 20 "$build/$name.log" >&2; say "$name strata-train FAILED (log: $build/$name.log)"; failed+=("$name")
  fi
}
torch_ok=""
if [ "$skip_torch" = 1 ]; then torch_ok="skipped (--skip-torch)"
elif [ "$have_torch" = 0 ]; then torch_ok="skipped ($py has no torch)"
elif ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
  torch_ok="skipped (torch in $py sees no CUDA device)"
fi
torch_rate() {
  local name="$1"; shift
  rate=""
  [ -z "$torch_ok" ] || { say "$name PyTorch: $torch_ok"; return; }
  say "$name PyTorch: benchmarks/peers/torch_mlp.py $*"
  if run_for 120 "$py" "$top/benchmarks/peers/torch_mlp.py" "$@" >"$build/$name-torch.log" 2>&1; then
    grep '^torch_mlp:' "$build/$name-torch.log" | sed 's/^/   /'
    rate="$(tail -n 1 "$build/$name-torch.log" | sed -n 's/.*"samples_per_sec": \([0-9.eE+-]*\).*/\1/p')"
  else
    tail -n 20 "$build/$name-torch.log" >&2; say "$name PyTorch FAILED (log: $build/$name-torch.log)"; failed+=("$name-torch")
  fi
}
declare -A strata_rates torch_rates
for w in "${workloads[@]}"; do
  for p in fp32 bf16; do
    m="$build/$w-$p-metrics.jsonl"
    # shellcheck disable=SC2046
    strata_rate "$w-$p" "$m" $(strata_args "$w") --precision "$p" --log-every 0 --no-eval --metrics "$m"
    strata_rates[$w-$p]="$rate"
    autocast=()
    [ "$p" = bf16 ] && autocast=(--autocast bfloat16)
    # shellcheck disable=SC2046
    torch_rate "$w-$p" $(torch_args_of "$w") --warmup 5 --device cuda --json "${autocast[@]}"
    torch_rates[$w-$p]="$rate"
  done
done

# ------------------------------------------------------------------ report
row() {  # workload strata torch
  local ratio="-"
  [ -n "$2" ] && [ -n "$3" ] && ratio="$(awk -v s="$2" -v t="$3" 'BEGIN { printf "%.2f", s / t }')"
  printf '| %s | %s | %s | %s |\n' "$1" "${2:+$(printf '%.0f' "$2")}" "${3:+$(printf '%.0f' "$3")}" "$ratio"
}
{
  echo "# gpu-check report"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%MZ); commit $(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "- device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)"
  echo "- Kokkos: $kokkos (devices $devices, arch ${arch:-?}); compiler $cxx"
  echo "- build: $(grep -E '^--   (Kokkos|GEMM|NCCL|CUDA toolkit)' "$build/configure.log" | sed 's/^--   //' | paste -sd ';' -)"
  [ "$skip_tests" = 1 ] || echo "- tests (labels cluster and docs left out): $(grep -E 'tests passed' "$build/ctest.log" | tail -n 1)"
  echo "- PyTorch: $([ -z "$torch_ok" ] && "$py" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo "$torch_ok")"
  echo
  echo "| workload | strata-train samples/s | PyTorch samples/s | strata / PyTorch |"
  echo "|---|---|---|---|"
  for w in "${workloads[@]}"; do
    for p in fp32 bf16; do
      row "$(describe "$w") $p" "${strata_rates[$w-$p]}" "${torch_rates[$w-$p]}"
    done
  done
  if [ ${#failed[@]} -gt 0 ]; then echo; echo "Failed steps: ${failed[*]}"; fi
} >"$report"

echo
echo "gpu-check summary ($((SECONDS - t_start)) s; report ${report#"$top"/}):"
sed -n '/^| workload/,$p' "$report"
if [ ${#failed[@]} -gt 0 ]; then echo "gpu-check: FAILED: ${failed[*]}"; exit 1; fi
echo "gpu-check: passed"
