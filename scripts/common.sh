# Shared helpers for Strata's scripts (sourced, not executed).

# Cache folder shared by every script and by later runs (Kokkos builds,
# source tarballs).
strata_cache() {
  local c="${STRATA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/strata}"
  mkdir -p "$c"
  echo "$c"
}

# The Kokkos release a flavour builds: 3.4.1 from Debian's trilinos source,
# except cuda13, which needs a Kokkos that knows CUDA 13's runtime API, and
# tsan, whose thread ranks must be std::threads over Serial instances (Kokkos
# 4): 4.6.01 from its release tarball with the project's patch
# (strata_kokkos_source).
strata_kokkos_version() {
  case "$1" in
    cuda13|tsan) echo 4.6.01 ;;
    *)      echo 3.4.1 ;;
  esac
}

strata_kokkos_prefix() {
  echo "$(strata_cache)/kokkos-$(strata_kokkos_version "$1")-$1"
}

# The folder of this file's checkout (scripts/..).
strata_top() {
  (cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
}

# Runs a command as root (directly, or through sudo when available).
strata_as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else
    echo "strata: need root to run: $*" >&2
    return 1
  fi
}

# Installs the Debian packages among "$@" that are not installed yet. Does not
# touch the network when all are present.
strata_apt_install() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "${STRATA_NO_APT:-0}" = 1 ]; then
    echo "strata: missing Debian packages (STRATA_NO_APT=1, not installing): ${missing[*]}" >&2
    return 1
  fi
  echo "strata: installing Debian packages: ${missing[*]}" >&2
  strata_as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive strata_as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Adds a deb-src line for bookworm (main) when apt has none, so that
# `apt-get source` works.
strata_ensure_deb_src() {
  if ! grep -rqsE '^(deb-src|Types:.*deb-src)' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "strata: adding a deb-src entry for bookworm to apt" >&2
    strata_as_root tee /etc/apt/sources.list.d/strata-deb-src.sources >/dev/null <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    strata_as_root apt-get update -qq
  fi
}

# Adds Debian's contrib and non-free components for bookworm in a separate apt
# sources file (nvidia-cuda-toolkit lives in non-free), once.
strata_ensure_nonfree() {
  local f=/etc/apt/sources.list.d/strata-non-free.sources
  [ -f "$f" ] && return 0
  echo "strata: adding Debian's contrib and non-free components for bookworm ($f)" >&2
  strata_as_root tee "$f" >/dev/null <<'EOF2'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF2
  strata_as_root apt-get update -qq
}

# The Debian packages a Kokkos flavour needs on top of the default ones.
strata_flavour_packages() {
  case "$1" in
    hip)  echo hipcc ;;                        # ROCm 5.2: clang-15, HIP runtime, device libs
    cuda) echo nvidia-cuda-toolkit g++-11 ;;   # CUDA 11.8 (non-free); g++-11 as nvcc's host compiler
    cuda13) echo patch ;;                      # CUDA 13 itself is NVIDIA's, not Debian's: STRATA_CUDA13_ROOT
    tsan) echo patch ;;                        # the Kokkos 4.6.01 patch applies to every 4.6 flavour
  esac
}

# Device toolchains. Each device flavour names its compiler and toolkit
# explicitly, so that neither picks whichever nvcc/hipcc comes first on PATH
# (and CUDA 13 in /usr/local/cuda never mixes into the CUDA 11.8 build).
STRATA_CUDA_ROOT="${STRATA_CUDA_ROOT:-/usr/lib/nvidia-cuda-toolkit}"   # Debian's CUDA 11.8: bin/nvcc
# CMake's FindCUDAToolkit root: the toolkit's own folder when it holds the
# headers (NVIDIA's layout), else /usr (Debian's layout: /usr/bin/nvcc,
# /usr/include, /usr/lib/x86_64-linux-gnu).
if [ -z "${STRATA_CUDA_TOOLKIT_ROOT:-}" ]; then
  if [ -f "$STRATA_CUDA_ROOT/include/cuda_runtime.h" ]; then STRATA_CUDA_TOOLKIT_ROOT="$STRATA_CUDA_ROOT"
  else STRATA_CUDA_TOOLKIT_ROOT=/usr; fi
fi
STRATA_CUDA_HOST_CXX="${STRATA_CUDA_HOST_CXX:-g++-11}"
STRATA_HIPCC="${STRATA_HIPCC:-/usr/bin/hipcc}"                          # Debian's ROCm 5.2
STRATA_HIP_ARCH="${STRATA_HIP_ARCH:-VEGA908}"
STRATA_CUDA_ARCH="${STRATA_CUDA_ARCH:-AMPERE80}"
STRATA_CUDA_SM="${STRATA_CUDA_SM:-sm_80}"                                # = STRATA_CUDA_ARCH
# cuda13: NVIDIA's CUDA 13 toolkit (its own layout: bin/, include/, lib64/,
# NCCL beside), with the system's g++ as nvcc's host compiler (CUDA 13 takes
# GCC 6 to 15), for Hopper (the H200 of the GPU machine).
STRATA_CUDA13_ROOT="${STRATA_CUDA13_ROOT:-/usr/local/cuda}"
STRATA_CUDA13_HOST_CXX="${STRATA_CUDA13_HOST_CXX:-g++}"
STRATA_CUDA13_ARCH="${STRATA_CUDA13_ARCH:-HOPPER90}"
STRATA_CUDA13_SM="${STRATA_CUDA13_SM:-sm_90}"                            # = STRATA_CUDA13_ARCH

# A folder of links to the programs that the CUDA toolkit's Debian package
# puts into /usr/bin (ptxas, fatbinary, nvlink, cudafe++, ...): nvcc finds
# them through PATH, where another CUDA's programs (/usr/local/bin,
# /usr/local/cuda/bin) may come first. Put first on PATH by strata_flavour_env.
strata_cuda_tool_links() {
  local d pkg f
  d="$(strata_cache)/cuda-tools-$(basename "$STRATA_CUDA_ROOT")"
  pkg="$(dpkg-query -S "$STRATA_CUDA_ROOT/bin/nvcc" 2>/dev/null | cut -d: -f1 || true)"
  if [ -n "$pkg" ] && [ ! -f "$d/.complete" ]; then
    rm -rf "$d" && mkdir -p "$d"
    for f in $(dpkg-query -L "$pkg" | grep '^/usr/bin/'); do
      [ -x "$f" ] && [ "$(basename "$f")" != nvcc ] && ln -sf "$f" "$d/"
    done
    touch "$d/.complete"
  fi
  echo "$d"
}

# Exports the environment a flavour's compilers need (in the calling shell):
# for cuda, nvcc_wrapper's host compiler and nvcc (through CUDA_ROOT), the
# toolkit root for CMake's FindCUDAToolkit, and a PATH whose CUDA programs
# are the toolkit's own (no /usr/local/cuda, no other ptxas before them).
strata_flavour_env() {
  case "$1" in
    cuda)
      export CUDA_ROOT="$STRATA_CUDA_ROOT" CUDAToolkit_ROOT="$STRATA_CUDA_TOOLKIT_ROOT"
      export NVCC_WRAPPER_DEFAULT_COMPILER="$STRATA_CUDA_HOST_CXX"
      PATH="$(printf '%s' "$PATH" | tr ':' '\n' | grep -v -E '^/usr/local/cuda' | paste -sd: -)"
      PATH="$(strata_cuda_tool_links):$STRATA_CUDA_ROOT/bin:$PATH"
      export PATH
      unset CUDA_HOME CUDA_PATH CUDACXX NVCC_PREPEND_FLAGS NVCC_APPEND_FLAGS
      ;;
    cuda13)
      export CUDA_ROOT="$STRATA_CUDA13_ROOT" CUDAToolkit_ROOT="$STRATA_CUDA13_ROOT"
      export NVCC_WRAPPER_DEFAULT_COMPILER="$STRATA_CUDA13_HOST_CXX"
      PATH="$(printf '%s' "$PATH" | tr ':' '\n' | grep -v -x -F "$STRATA_CUDA13_ROOT/bin" | paste -sd: -)"
      export PATH="$STRATA_CUDA13_ROOT/bin:$PATH"
      unset CUDA_HOME CUDA_PATH CUDACXX NVCC_PREPEND_FLAGS NVCC_APPEND_FLAGS
      ;;
    hip)
      export HCC_AMDGPU_TARGET="${HCC_AMDGPU_TARGET:-gfx908}"   # hipcc: no GPU to enumerate here
      ;;
  esac
}

# The C++ compiler for a flavour, given the Kokkos source or install prefix
# (nvcc_wrapper lives in its bin/).
strata_flavour_cxx() {
  case "$1" in
    cuda|cuda13) echo "$2/bin/nvcc_wrapper" ;;
    hip)  echo "$STRATA_HIPCC" ;;
    *)    echo g++ ;;
  esac
}

# Extra CMake options for configuring a project (Kokkos itself, or Strata
# against that Kokkos) with a flavour's compiler (one per word).
strata_flavour_cmake_args() {
  case "$1" in
    cuda) echo "-DCUDAToolkit_ROOT=$STRATA_CUDA_TOOLKIT_ROOT" ;;
    cuda13) echo "-DCUDAToolkit_ROOT=$STRATA_CUDA13_ROOT" ;;
  esac
}

# C++ flags a flavour's compiler needs. For cuda, the architecture flag
# replaces nvcc_wrapper's default (sm_35 in Kokkos 3.4, which CMake's
# compiler check would use) and equals the one Kokkos adds for
# STRATA_CUDA_ARCH, so that nvcc_wrapper merges the two.
strata_flavour_cxx_flags() {
  case "$1" in
    cuda) echo "-arch=$STRATA_CUDA_SM" ;;
    cuda13) echo "-arch=$STRATA_CUDA13_SM" ;;   # nvcc_wrapper's default, sm_70, is gone from CUDA 13
  esac
}

# Prints the folder holding the sources of a flavour's Kokkos
# (strata_kokkos_version).
strata_kokkos_source() {
  case "$(strata_kokkos_version "${1:-openmp}")" in
    4.6.01) strata_kokkos46_source ;;
    *)      strata_kokkos34_source ;;
  esac
}

# The Kokkos 4.6.01 release tarball: $STRATA_KOKKOS_TARBALL, else the copy in
# shared/third_party/ beside the checkout (as CI and the developers have it).
strata_kokkos46_tarball() {
  echo "${STRATA_KOKKOS_TARBALL:-$(dirname "$(strata_top)")/shared/third_party/kokkos-4.6.01.tar.gz}"
}

# The project's patch for Kokkos 4.6.01 under CUDA 13.
strata_kokkos46_patch() {
  echo "$(strata_top)/scripts/patches/kokkos-4.6.01-cuda13.patch"
}

# Prints the folder holding Kokkos 4.6.01's sources with the project's patch
# applied, extracted once per patch (its checksum names the folder).
strata_kokkos46_source() {
  local tarball patch sum src
  tarball="$(strata_kokkos46_tarball)" patch="$(strata_kokkos46_patch)"
  if [ ! -f "$tarball" ]; then
    echo "strata: Kokkos 4.6.01 source not found: $tarball (set STRATA_KOKKOS_TARBALL to the kokkos-4.6.01.tar.gz release tarball)" >&2
    return 1
  fi
  sum="$(cat "$tarball" "$patch" | sha256sum | cut -c1-12)"
  src="$(strata_cache)/src/kokkos-4.6.01-$sum"
  if [ -f "$src/.strata-patched" ]; then echo "$src"; return 0; fi
  command -v patch >/dev/null 2>&1 \
    || { echo "strata: 'patch' not found: it applies $patch (Debian package patch)" >&2; return 1; }
  rm -rf "$src" "$src.tmp" && mkdir -p "$src.tmp"
  tar -xzf "$tarball" -C "$src.tmp" --strip-components=1 >&2 \
    || { echo "strata: cannot unpack $tarball" >&2; return 1; }
  grep -q 'Kokkos_VERSION_MINOR 6' "$src.tmp/CMakeLists.txt" \
    || { echo "strata: $tarball is not Kokkos 4.6.x" >&2; return 1; }
  (cd "$src.tmp" && patch -p1 --forward --quiet <"$patch") >&2 \
    || { echo "strata: $patch does not apply to $tarball" >&2; return 1; }
  mv "$src.tmp" "$src" && touch "$src/.strata-patched"
  echo "$src"
}

# Prints the folder holding Kokkos 3.4.1's sources, extracted from Debian's
# trilinos source package (only packages/kokkos is unpacked).
strata_kokkos34_source() {
  local cache src tarball
  cache="$(strata_cache)"
  src="$cache/src/kokkos-3.4.1"
  if [ -f "$src/CMakeLists.txt" ]; then echo "$src"; return 0; fi
  strata_apt_install dpkg-dev >&2
  tarball=$(ls "$cache"/src/trilinos_*.orig.tar.* 2>/dev/null | head -n 1 || true)
  if [ -z "$tarball" ]; then
    strata_ensure_deb_src >&2
    mkdir -p "$cache/src"
    echo "strata: downloading Debian's trilinos source package (about 160 MB) for its Kokkos" >&2
    (cd "$cache/src" && apt-get source --download-only -qq trilinos >&2)
    tarball=$(ls "$cache"/src/trilinos_*.orig.tar.* | head -n 1)
  fi
  rm -rf "$cache/src/extract"
  mkdir -p "$cache/src/extract"
  tar -xf "$tarball" -C "$cache/src/extract" --wildcards '*/packages/kokkos/*' >&2
  rm -rf "$src"
  mv "$cache"/src/extract/*/packages/kokkos "$src"
  rm -rf "$cache/src/extract"
  grep -q 'Kokkos_VERSION_MINOR 4' "$src/CMakeLists.txt" || \
    echo "strata: warning: Kokkos in $tarball is not 3.4.x" >&2
  echo "$src"
}
