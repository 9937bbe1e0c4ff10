#!/usr/bin/env bash
# Installs what is missing (scripts/bootstrap.sh), then configures and builds
# Strata in build/ (executables in build/bin/). Extra arguments go to CMake's
# configure step, e.g. scripts/build.sh -DCMAKE_BUILD_TYPE=Debug.
#
# Environment: Kokkos_ROOT (use your own Kokkos), BUILD_DIR (default: build),
# STRATA_JOBS (parallel build jobs; default: number of cores), STRATA_TARGETS
# (space-separated targets to build; default: all).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
source "$here/common.sh"

kokkos_root="$("$here/bootstrap.sh" --print-kokkos-root)"
build="${BUILD_DIR:-$top/build}"
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# Cache hits across clones in different folders (CI checks out afresh).
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$top}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
generator=()
[ -f "$build/CMakeCache.txt" ] || { command -v ninja >/dev/null 2>&1 && generator=(-G Ninja); }

mkdir -p "$build"
cmake -S "$top" -B "$build" "${generator[@]}" -DKokkos_ROOT="$kokkos_root" "${launcher[@]}" "$@" >"$build/configure.log" 2>&1 \
  || { cat "$build/configure.log" >&2; echo "build.sh: CMake configure failed (log above)" >&2; exit 1; }
targets=()
for t in ${STRATA_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" --parallel "${STRATA_JOBS:-$(nproc)}" "${targets[@]}"
