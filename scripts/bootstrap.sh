#!/usr/bin/env bash
# Installs what Strata needs on Debian 12 (bookworm) and, when no Kokkos is
# installed, builds Kokkos 3.4.1 from Debian's trilinos source package into a
# cache prefix that later runs reuse.
#
# Usage: scripts/bootstrap.sh [--print-kokkos-root] [--kokkos-flavour NAME]
#   (--peers, for older callers, changes nothing: its packages are always installed)
#   flavours: openmp (default; Serial + OpenMP), debug (OpenMP with
#   Kokkos_ENABLE_DEBUG and bounds checking), hip (Serial + HIP for gfx908
#   with Debian's hipcc, ROCm 5.2; compile checks only), cuda (Serial + CUDA
#   for sm_80 with Debian's CUDA 11.8 from non-free, nvcc_wrapper and g++-11;
#   about 1.6 GB of packages; compile checks only), cuda13 (Serial + CUDA for
#   sm_90 with NVIDIA's CUDA 13 in $STRATA_CUDA13_ROOT, default /usr/local/cuda,
#   and g++: Kokkos 4.6.01 from its release tarball, $STRATA_KOKKOS_TARBALL or
#   shared/third_party/ beside the checkout, with scripts/patches/
#   kokkos-4.6.01-cuda13.patch applied; Kokkos 3.4 does not know CUDA 13),
#   tsan (Kokkos 4.6.01, Serial only, built with -fsanitize=thread: thread
#   ranks on std::threads over Serial instances, which ThreadSanitizer sees
#   whole; scripts/check-tsan.sh)
#   The hip and cuda flavours install their own Debian packages (and, for
#   cuda, add bookworm's contrib/non-free components in a separate apt
#   sources file); the default flavour never does.
#   PyTorch (python3-torch, 1.13, for Debian's /usr/bin/python3) is always
#   installed: the weights tests use it as their oracle, and scripts/compare.sh
#   runs it as the peer. python3-matplotlib draws strata-plot's and
#   compare.sh's charts; help2man makes the man pages from --help.
#
# Environment:
#   Kokkos_ROOT         use this Kokkos as it is (nothing is built)
#   STRATA_CACHE        cache folder (default: ${XDG_CACHE_HOME:-$HOME/.cache}/strata)
#   STRATA_NO_APT=1     never call apt-get (report what is missing instead)
#
# Idempotent: when everything is present it returns in well under a second.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=scripts/common.sh
source "$here/common.sh"

flavour=openmp
print_root=0
while [ $# -gt 0 ]; do
  case "$1" in
    --print-kokkos-root) print_root=1 ;;
    --kokkos-flavour) flavour="$2"; shift ;;
    --peers) ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "bootstrap.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# ---------------------------------------------------------------- packages
packages=(
  g++ cmake ninja-build ccache pkg-config make
  libopenblas-openmp-dev
  libopenmpi-dev openmpi-bin
  libcli11-dev nlohmann-json3-dev libtomlplusplus-dev zlib1g-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist fortunes   # data: images, and the text corpus of the language models
  python3-torch              # PyTorch as the oracle of the weights tests (tests/torch_oracle.py)
  python3-matplotlib         # strata-plot (and scripts/compare.sh's charts) draw with it
  python3-dev pybind11-dev python3-pybind11 python3-numpy python3-pytest python3-mpi4py
                             # the Python module (python/) and its pytest suite
  help2man man-db            # the man pages, made from each program's --help, and man to read them
  iproute2 util-linux bc     # the simulated cluster (scripts/cluster-sim.sh; Slurm and
                             # nftables are installed by the scripts that use them)
)
strata_apt_install "${packages[@]}"
case "$flavour" in
  openmp|debug) ;;
  tsan) strata_apt_install $(strata_flavour_packages tsan) ;;
  hip)  strata_apt_install $(strata_flavour_packages hip) ;;
  cuda) if ! dpkg-query -W -f='${Status}' nvidia-cuda-toolkit 2>/dev/null | grep -q 'install ok installed' \
           && [ "${STRATA_NO_APT:-0}" != 1 ]; then
          strata_ensure_nonfree
        fi
        strata_apt_install $(strata_flavour_packages cuda) ;;
  cuda13) strata_apt_install $(strata_flavour_packages cuda13)
          [ -x "$STRATA_CUDA13_ROOT/bin/nvcc" ] || {
            echo "bootstrap.sh: the cuda13 flavour needs NVIDIA's CUDA 13 toolkit: no $STRATA_CUDA13_ROOT/bin/nvcc (set STRATA_CUDA13_ROOT)" >&2; exit 1; } ;;
  *) echo "bootstrap.sh: unknown Kokkos flavour '$flavour' (openmp, debug, tsan, hip, cuda, cuda13)" >&2; exit 2 ;;
esac

# ---------------------------------------------------------------- Kokkos
if [ -n "${Kokkos_ROOT:-}" ]; then
  [ "$print_root" = 1 ] && echo "$Kokkos_ROOT"
  exit 0
fi

prefix="$(strata_kokkos_prefix "$flavour")"
version="$(strata_kokkos_version "$flavour")"
# A patched Kokkos is rebuilt when its tarball or patch changes: the marker
# holds the name of the source folder it was built from.
built_from=""
if [ "$version" = 4.6.01 ]; then
  src="$(strata_kokkos_source "$flavour")" || exit 1
  built_from="$(basename "$src")"
fi
if [ -f "$prefix/.strata-complete" ] && [ "$(cat "$prefix/.strata-complete")" = "$built_from" ]; then
  [ "$print_root" = 1 ] && echo "$prefix"
  exit 0
fi

case "$flavour" in
  openmp) kokkos_opts=(-DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_OPENMP=ON -DCMAKE_BUILD_TYPE=Release) ;;
  debug)  kokkos_opts=(-DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_OPENMP=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
                       -DKokkos_ENABLE_DEBUG=ON -DKokkos_ENABLE_DEBUG_BOUNDS_CHECK=ON) ;;
  tsan)   kokkos_opts=(-DKokkos_ENABLE_SERIAL=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
                       "-DCMAKE_CXX_FLAGS=-fsanitize=thread") ;;
  hip)    kokkos_opts=(-DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_HIP=ON -DCMAKE_BUILD_TYPE=Release
                       "-DKokkos_ARCH_$STRATA_HIP_ARCH=ON") ;;
  cuda)   kokkos_opts=(-DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_CUDA_LAMBDA=ON
                       -DCMAKE_BUILD_TYPE=Release "-DKokkos_ARCH_$STRATA_CUDA_ARCH=ON"
                       $(strata_flavour_cmake_args cuda) "-DCMAKE_CXX_FLAGS=$(strata_flavour_cxx_flags cuda)") ;;
  cuda13) kokkos_opts=(-DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_CUDA=ON -DCMAKE_BUILD_TYPE=Release
                       "-DKokkos_ARCH_$STRATA_CUDA13_ARCH=ON"
                       $(strata_flavour_cmake_args cuda13) "-DCMAKE_CXX_FLAGS=$(strata_flavour_cxx_flags cuda13)") ;;
esac

[ -n "$built_from" ] || src="$(strata_kokkos_source "$flavour")"
strata_flavour_env "$flavour"
cxx="$(strata_flavour_cxx "$flavour" "$src")"
build="$(strata_cache)/build-kokkos-$flavour"
rm -rf "$build"
echo "bootstrap: building Kokkos $version ($flavour) into $prefix" >&2
rm -f "$prefix/.strata-complete"   # a failed rebuild must not pass for a finished one
cmake -S "$src" -B "$build" -G Ninja \
  -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_CXX_STANDARD=17 \
  -DCMAKE_INSTALL_PREFIX="$prefix" -DBUILD_SHARED_LIBS=OFF \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
  -DKokkos_ENABLE_TESTS=OFF -DKokkos_ENABLE_EXAMPLES=OFF \
  "${kokkos_opts[@]}" >"$build.log" 2>&1 || { tail -30 "$build.log" >&2; exit 1; }
cmake --build "$build" --parallel >>"$build.log" 2>&1 || { tail -30 "$build.log" >&2; exit 1; }
cmake --install "$build" >>"$build.log" 2>&1 || { tail -30 "$build.log" >&2; exit 1; }
printf '%s' "$built_from" >"$prefix/.strata-complete"
rm -rf "$build"
[ "$print_root" = 1 ] && echo "$prefix"
exit 0
