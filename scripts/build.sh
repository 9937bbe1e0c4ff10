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

# The Python package: `python3 -c "import strata"` finds this build's, through
# a .pth file in the site-packages of the interpreter it was built for (what
# `pip install -e` does), where that folder is writable. Only for the main
# build folder (build/); STRATA_NO_PTH=1 leaves it out, and the package is
# then PYTHONPATH=build/python.
if [ "$build" = "$top/build" ] && [ "${STRATA_NO_PTH:-0}" != 1 ] &&
   [ -n "$(find "$build/python/strata" -name '_strata*.so' -print -quit 2>/dev/null)" ]; then
  py="$(sed -n 's/^STRATA_PYTHON_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt")"
  site="$("$py" -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null || true)"
  if [ -n "$site" ] && { [ -w "$site" ] || { [ ! -e "$site" ] && mkdir -p "$site" 2>/dev/null; }; }; then
    pth="$site/strata-build.pth"
    if [ "$(cat "$pth" 2>/dev/null)" != "$build/python" ]; then
      echo "$build/python" >"$pth"
      echo "build.sh: $py imports strata from $build/python ($pth; STRATA_NO_PTH=1 skips this)"
    fi
  else
    echo "build.sh: the Python package is in $build/python (PYTHONPATH=$build/python $py)"
  fi
fi
