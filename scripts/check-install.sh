#!/usr/bin/env bash
# Checks Strata's installed CMake package: installs the build tree (build/, or
# BUILD_DIR; brought up to date through scripts/build.sh first) into a
# temporary prefix, checks the programs, man pages and bash completion are
# there, checks that StrataConfig.cmake finds exactly the optional
# dependencies this build uses, then configures, builds and runs the
# downstream project in tests/downstream/ against that prefix with
# find_package(Strata) (no Kokkos_ROOT given: the package must find its own
# Kokkos), runs the installed strata-train for a few steps, and imports the
# installed Python package (where the build made one) for one step.
#
# Usage: scripts/check-install.sh        (STRATA_KEEP_INSTALL=1 keeps the prefix)
# Exit code 0 when everything worked; otherwise 1 with a message saying which
# step failed and its log.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
build="${BUILD_DIR:-$top/build}"

fail() { echo "check-install: FAILED: $*" >&2; exit 1; }
# run LOG CMD...: runs CMD with its output in LOG; prints the log on failure.
run() {
  local log="$1"; shift
  "$@" >"$log" 2>&1 || { cat "$log" >&2; fail "$* (log above)"; }
}

"$here/build.sh"

work="$(mktemp -d "${TMPDIR:-/tmp}/strata-check-install.XXXXXX")"
if [ "${STRATA_KEEP_INSTALL:-0}" = 1 ]; then
  echo "check-install: keeping $work"
else
  trap 'rm -rf "$work"' EXIT
fi
prefix="$work/prefix"

echo "check-install: cmake --install into a temporary prefix"
run "$work/install.log" cmake --install "$build" --prefix "$prefix"
config="$(find "$prefix" -name StrataConfig.cmake -print -quit)"
[ -n "$config" ] || fail "no StrataConfig.cmake under the install prefix"
for f in StrataConfigVersion.cmake StrataTargets.cmake; do
  [ -f "$(dirname "$config")/$f" ] || fail "$f missing next to $config"
done
[ -f "$prefix/include/strata/strata_config.hpp" ] || fail "include/strata/strata_config.hpp not installed"
[ -x "$prefix/bin/strata-train" ] || fail "bin/strata-train not installed"
[ -x "$prefix/bin/strata-plot" ] || fail "bin/strata-plot not installed"
# Man pages (where this build makes them) and bash completion, one per program.
if grep -q "^STRATA_MAN_PAGES:BOOL=ON" "$build/CMakeCache.txt"; then
  for tool in strata-train strata-plan strata-plot; do
    [ -f "$prefix/share/man/man1/$tool.1" ] || fail "share/man/man1/$tool.1 not installed"
  done
  if command -v man >/dev/null; then
    MANPATH="$prefix/share/man" man -P cat strata-train 2>/dev/null | grep -q -- '--batch-size' \
      || fail "MANPATH=$prefix/share/man man strata-train does not show the page"
  fi
fi
[ -f "$prefix/share/bash-completion/completions/strata-train" ] \
  || fail "share/bash-completion/completions/strata-train not installed"

# find_dependency() in StrataConfig.cmake for exactly the dependencies that
# strata_config.hpp says this build has. The private ones (BLAS, ZLIB)
# are needed by consumers of a static library only.
header="$prefix/include/strata/strata_config.hpp"
static=0
ls "$prefix"/lib*/libstrata.a >/dev/null 2>&1 && static=1
has() { grep -q "^#define STRATA_HAS_$1 1" "$header"; }
finds() { grep -q "^find_dependency($1[ )]" "$config"; }
expect() {  # expect PACKAGE WANTED(0|1)
  if [ "$2" = 1 ]; then finds "$1" || fail "StrataConfig.cmake lacks find_dependency($1) ($config)"
  else ! finds "$1" || fail "StrataConfig.cmake has find_dependency($1), which this build does not use ($config)"; fi
}
want() { has "$1" && echo 1 || echo 0; }
expect Kokkos 1
expect Threads 1
expect MPI "$(want MPI)"
# On HIP builds NCCL means RCCL (hip and rccl, found for static consumers).
kokkos_dir="$(sed -n 's/^Kokkos_DIR:[A-Z]*=//p' "$build/CMakeCache.txt")"
hip=0
grep -qsE '^ *(SET|set)\(Kokkos_DEVICES[^)]*HIP' "$kokkos_dir/KokkosConfigCommon.cmake" && hip=1
if has CUBLAS || { has NCCL && [ "$hip" = 0 ]; }; then expect CUDAToolkit 1; else expect CUDAToolkit 0; fi
if [ "$static" = 1 ]; then
  expect BLAS "$(want CBLAS)"
  expect ZLIB "$(want ZLIB)"
  expect hipblas "$(want HIPBLAS)"
  if has NCCL && [ "$hip" = 1 ]; then expect rccl 1; else expect rccl 0; fi
else
  expect BLAS 0; expect ZLIB 0
fi
echo "check-install: StrataConfig.cmake finds: $(grep -o '^find_dependency([A-Za-z]*' "$config" | cut -d'(' -f2 | paste -sd' ' -)"

# The downstream project, with the compiler Strata was built with (for GPU
# builds: nvcc_wrapper or hipcc).
cxx="$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")"
generator=()
command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
echo "check-install: configuring tests/downstream with find_package(Strata)"
run "$work/downstream-configure.log" cmake -S "$top/tests/downstream" -B "$work/downstream" \
  "${generator[@]}" -DCMAKE_PREFIX_PATH="$prefix" ${cxx:+-DCMAKE_CXX_COMPILER="$cxx"} \
  -DCMAKE_BUILD_TYPE=Release
grep -q "^Strata_DIR:PATH=$prefix/" "$work/downstream/CMakeCache.txt" \
  || fail "tests/downstream found a Strata other than the one just installed ($(grep '^Strata_DIR' "$work/downstream/CMakeCache.txt"))"
echo "check-install: building tests/downstream"
run "$work/downstream-build.log" cmake --build "$work/downstream"
echo "check-install: running strata-downstream"
OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" "$work/downstream/strata-downstream" \
  || fail "strata-downstream exited with $?"

echo "check-install: running the installed strata-train"
run "$work/version.log" "$prefix/bin/strata-train" --version
sed 's/^/  /' "$work/version.log"
OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" run "$work/train.log" "$prefix/bin/strata-train" \
  --dataset synthetic --layers 10,5,2 --loss mse --batch-size 32 --steps 20 --quiet
tail -n 2 "$work/train.log" | sed 's/^/  /'

# The Python package, where this build made it: imported from the prefix
# (not the build tree) by the interpreter it was built for, and one step.
if [ -n "$(find "$build/python/strata" -name '_strata*.so' -print -quit 2>/dev/null)" ]; then
  py="$(sed -n 's/^STRATA_PYTHON_EXECUTABLE:[A-Z]*=//p' "$build/CMakeCache.txt")"
  pydir="$(sed -n 's/^STRATA_PYTHON_INSTALL_DIR:[A-Z]*=//p' "$build/CMakeCache.txt")"
  case "$pydir" in /*) ;; *) pydir="$prefix/$pydir" ;; esac
  [ -f "$pydir/strata/__init__.py" ] || fail "the Python package is not installed in $pydir/strata"
  echo "check-install: importing the installed Python package ($pydir)"
  OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}" PYTHONPATH="$pydir" run "$work/python.log" "$py" -c '
import numpy as np, strata
assert strata.__file__.startswith("'"$pydir"'"), strata.__file__
t = strata.Trainer(strata.Model.mlp([10, 5, 2]), dataset="synthetic", loss="mse", batch_size=32)
x = np.ones((32, 10), np.float32); y = np.zeros((32, 2), np.float32)
print("  installed strata package:", strata.__file__, "loss", t.step(x, y))'
  cat "$work/python.log"
fi
echo "check-install: OK"
