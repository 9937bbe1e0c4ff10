#!/usr/bin/env bash
# Checks Strata's spack package (spack/) against a spack checkout, offline:
# `spack audit packages strata`, then `spack spec` of the default, MPI, CUDA
# (+nccl) and ROCm (with and without +nccl) variants (checking that Kokkos,
# and NCCL, hipBLAS or RCCL, get the same GPU architecture), and that
# impossible combinations fail with Strata's messages.
# Nothing is downloaded or installed: the package repositories are local
# folders, spack's bootstrapping is disabled (clingo must be importable), and
# when `unshare` can make one, spack runs in a network namespace of its own
# with no network at all. (Spack 1.x then warns "Unable to resolve the git
# commit for strata": it asks the git server for the commit of @develop while
# concretising; the namespace stops that request.) A developer script, not
# run by CI (no spack there).
#
# With --dev-build it then builds and tests the committed tree as a site
# would: `spack dev-build --test=root strata@develop ~cuda` (the whole ctest
# suite inside spack's build), with Debian 12's packages and the Kokkos that
# scripts/bootstrap.sh builds as external packages (nothing is built but
# Strata; the clone is of the last commit, not of uncommitted changes).
#
# Usage: scripts/check-spack.sh [--dev-build] [SPACK_ROOT [BUILTIN_REPO]]
#   SPACK_ROOT    a spack checkout (0.2x or 1.x); default: $SPACK_ROOT
#   BUILTIN_REPO  spack 1.x only: a checkout of the spack-packages repository
#                 (the folder holding repos/spack_repo/builtin, or that
#                 builtin folder itself); default: $SPACK_BUILTIN_REPO.
#                 Spack 0.2x has its builtin packages inside SPACK_ROOT.
# Environment:
#   SPACK_PYTHON  the Python that runs spack; it must import clingo (Debian 13
#                 and Ubuntu: apt install python3-clingo; elsewhere pip install
#                 clingo, or PYTHONPATH=<folder of a clingo build's Python
#                 module>). Default: the first of /usr/bin/python3, python3
#                 that imports clingo.
# Exit code 0 when every check passed, 1 otherwise.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"

die() { echo "check-spack: $*" >&2; exit 1; }

dev_build=0
if [ "${1:-}" = "--dev-build" ]; then dev_build=1; shift; fi
spack_root="${1:-${SPACK_ROOT:-}}"
builtin="${2:-${SPACK_BUILTIN_REPO:-}}"
[ -n "$spack_root" ] || die "no spack checkout: pass its path or set SPACK_ROOT (see the comment at the top of $0)"
[ -x "$spack_root/bin/spack" ] || die "$spack_root/bin/spack not found: SPACK_ROOT must be a spack checkout"
spack_root="$(cd "$spack_root" && pwd)"

# ------------------------------------------------------------- Python, clingo
if [ -z "${SPACK_PYTHON:-}" ]; then
  for p in /usr/bin/python3 python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import clingo' 2>/dev/null; then SPACK_PYTHON="$(command -v "$p")"; break; fi
  done
  [ -n "${SPACK_PYTHON:-}" ] || die "no Python that imports clingo (spack's solver); install python3-clingo (Debian 13, Ubuntu) or 'pip install clingo', or set SPACK_PYTHON / PYTHONPATH"
fi
"$SPACK_PYTHON" -c 'import clingo' 2>/dev/null || die "SPACK_PYTHON=$SPACK_PYTHON cannot import clingo"
export SPACK_PYTHON

# ------------------------------------------------- isolated spack configuration
work="$(mktemp -d "${TMPDIR:-/tmp}/strata-check-spack.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# The system scope (/etc/spack) and the user scope (~/.spack) move to empty
# temporary folders; the user scope then gets this check's settings. (Not
# SPACK_DISABLE_LOCAL_CONFIG: it removes the user scope altogether.)
export SPACK_SYSTEM_CONFIG_PATH="$work/system"
export SPACK_USER_CONFIG_PATH="$work/user"
export SPACK_USER_CACHE_PATH="$work/cache"
unset SPACK_DISABLE_LOCAL_CONFIG SPACK_ENV
mkdir -p "$SPACK_SYSTEM_CONFIG_PATH" "$SPACK_USER_CONFIG_PATH"
cat >"$SPACK_USER_CONFIG_PATH/bootstrap.yaml" <<'EOF'
bootstrap:
  enable: false
EOF

# A network namespace with only the loopback interface, brought up (Open MPI's
# tools print errors into their output without one, should spack run them).
net=()
for u in "unshare -n" "unshare -rn"; do
  if $u sh -c 'ip link set lo up' 2>/dev/null; then
    net=($u sh -c 'ip link set lo up; exec "$@"' sh); break
  fi
done
[ ${#net[@]} -gt 0 ] || echo "check-spack: note: unshare cannot make a network namespace here; running spack with the network as it is"
spack() { "${net[@]}" "$spack_root/bin/spack" "$@"; }

version="$(spack --version)" || die "$spack_root/bin/spack --version failed"
echo "check-spack: spack $version ($spack_root), Python $("$SPACK_PYTHON" -c 'import sys; print(sys.version.split()[0])'), clingo $("$SPACK_PYTHON" -c 'import clingo; print(clingo.__version__)')"
case "$version" in
  0.*) ;;
  *)  # spack 1.x: builtin packages live in a separate repository
    [ -n "$builtin" ] || die "spack $version keeps its builtin packages in the spack-packages repository: pass a checkout of it as the second argument or set SPACK_BUILTIN_REPO"
    [ -d "$builtin/repos/spack_repo/builtin" ] && builtin="$builtin/repos/spack_repo/builtin"
    [ -f "$builtin/repo.yaml" ] || die "$builtin is not spack's builtin package repository (no repo.yaml)"
    builtin="$(cd "$builtin" && pwd)"
    cat >"$SPACK_USER_CONFIG_PATH/repos.yaml" <<EOF
repos:
  builtin: $builtin
EOF
    ;;
esac
spack repo add --scope user "$top/spack" >/dev/null
spack compiler find --scope user >/dev/null
echo "check-spack: repositories:"
spack repo list | sed 's/^/  /'

# ------------------------------------------------------------------- checks
passed=0 failed=0
ok() { echo "  ok: $*"; passed=$((passed + 1)); }
bad() { echo "  FAILED: $*"; failed=$((failed + 1)); }

echo "check-spack: spack audit packages strata"
if spack audit packages strata >"$work/audit.log" 2>&1; then ok "audit clean"
else cat "$work/audit.log"; bad "spack audit packages strata"; fi

# spec_ok NAME SPEC [REGEX...]: `spack spec SPEC` concretises and its output
# has a line matching each REGEX (extended grep).
spec_ok() {
  local name="$1" spec="$2" re; shift 2
  echo "check-spack: spack spec $spec"
  # shellcheck disable=SC2086  # SPEC is several words
  if ! spack spec $spec >"$work/$name.log" 2>&1; then
    sed 's/^/    /' "$work/$name.log"; bad "spack spec $spec did not concretise"; return
  fi
  for re in "$@"; do
    if grep -qE "$re" "$work/$name.log"; then ok "$name: $(grep -m1 -oE "$re" "$work/$name.log")"
    else sed 's/^/    /' "$work/$name.log"; bad "$name: no line matching '$re'"; fi
  done
}
# spec_fails NAME SPEC MESSAGE: `spack spec SPEC` is refused with MESSAGE.
spec_fails() {
  local name="$1" spec="$2" msg="$3"
  echo "check-spack: spack spec $spec (must fail)"
  # shellcheck disable=SC2086
  if spack spec $spec >"$work/$name.log" 2>&1; then bad "$name: spack spec $spec concretised"
  elif grep -qF "$msg" "$work/$name.log"; then ok "$name: refused with '$msg'"
  else sed 's/^/    /' "$work/$name.log"; bad "$name: refused without the message '$msg'"; fi
}

# Spack prints a node's boolean variants joined (+a~b+c), then key=value
# pairs; spack 1.x writes multi-valued ones as key:=value.
spec_ok default "strata" \
  'strata@develop[^ ]*\+blas[^ ]*\+openmp[^ ]*\+serial' \
  '\^kokkos@[^ ]*~cuda[^ ]*\+openmp[^ ]*~rocm[^ ]*\+serial' '\^openblas@'
spec_ok mpi "strata+mpi" 'strata@develop[^ ]*\+mpi' '\^(openmpi|mpich|mvapich2?|intel-oneapi-mpi)@'
spec_ok cuda "strata+cuda cuda_arch=90 +nccl" \
  'strata@develop[^ ]*\+cuda[^ ]*\+nccl[^ ]* .*cuda_arch=90' \
  '\^kokkos@[^ ]*\+cuda[^ ]*\+cuda_lambda[^ ]* .*cuda_arch:?=90' \
  '\^nccl@[^ ]*\+cuda .*cuda_arch:?=90'
# With GCC, Kokkos must bring nvcc_wrapper (without a compiler named, the
# solver may pick a clang, which compiles CUDA itself).
spec_ok cuda-gcc "strata+cuda cuda_arch=90 +nccl %gcc" \
  '\^kokkos@[^ ]*\+cuda[^ ]*\+cuda_lambda[^ ]*\+wrapper[^ ]* .*cuda_arch:?=90' \
  '\^kokkos-nvcc-wrapper@'
spec_ok rocm "strata+rocm amdgpu_target=gfx90a" \
  'strata@develop[^ ]*\+rocm[^ ]* .*amdgpu_target=gfx90a' \
  '\^kokkos@[^ ]*\+rocm[^ ]* .*amdgpu_target:?=gfx90a' '\^hip@' \
  '\^hipblas@[^ ]* .*amdgpu_target:?=gfx90a'
spec_ok rocm-nccl "strata+rocm amdgpu_target=gfx90a +nccl" \
  'strata@develop[^ ]*\+nccl[^ ]*\+rocm[^ ]* .*amdgpu_target=gfx90a' \
  '\^rccl@[^ ]* .*amdgpu_target:?=gfx90a'

spec_ok python "strata+python" 'strata@develop[^ ]*\+python' '\^py-pybind11@' '\^py-numpy@' '\^python@'
spec_ok man "strata" '\^help2man@'

spec_fails cuda-rocm "strata+cuda cuda_arch=90 +rocm amdgpu_target=gfx90a" "+cuda or +rocm, not both"
spec_fails cuda-noarch "strata+cuda" "+cuda needs a GPU architecture"
spec_fails nccl-nogpu "strata+nccl" "+nccl requires +cuda (NCCL) or +rocm (RCCL)"
spec_fails two-hosts "strata+openmp+threads" "one parallel host backend"

# ------------------------------------------------ dev-build with --test=root
if [ "$dev_build" = 1 ]; then
  kokkos="${STRATA_CACHE:-$HOME/.cache/strata}/kokkos-3.4.1-openmp"
  [ -f "$kokkos/lib/cmake/Kokkos/KokkosConfigVersion.cmake" ] || [ -f "$kokkos/lib64/cmake/Kokkos/KokkosConfigVersion.cmake" ] \
    || die "no Kokkos at $kokkos: run scripts/bootstrap.sh first (or set STRATA_CACHE)"
  deb() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null | sed -E 's/^[0-9]+://; s/[+~-].*//'; }
  for p in cmake make help2man libopenblas-openmp-dev zlib1g-dev libcli11-dev nlohmann-json3-dev libtomlplusplus-dev libgtest-dev; do
    [ -n "$(deb "$p")" ] || die "--dev-build needs Debian's $p (scripts/bootstrap.sh installs it)"
  done
  cat >"$SPACK_USER_CONFIG_PATH/packages.yaml" <<EOF
packages:
  all:
    providers:
      blas: [openblas]
      zlib-api: [zlib]
  cmake: {buildable: false, externals: [{spec: cmake@$(deb cmake), prefix: /usr}]}
  gmake: {buildable: false, externals: [{spec: gmake@$(deb make), prefix: /usr}]}
  help2man: {buildable: false, externals: [{spec: help2man@$(deb help2man), prefix: /usr}]}
  openblas: {buildable: false, externals: [{spec: openblas@$(deb libopenblas-openmp-dev) threads=openmp, prefix: /usr}]}
  zlib: {buildable: false, externals: [{spec: zlib@$(deb zlib1g-dev), prefix: /usr}]}
  cli11: {buildable: false, externals: [{spec: cli11@$(deb libcli11-dev), prefix: /usr}]}
  nlohmann-json: {buildable: false, externals: [{spec: nlohmann-json@$(deb nlohmann-json3-dev), prefix: /usr}]}
  tomlplusplus: {buildable: false, externals: [{spec: tomlplusplus@$(deb libtomlplusplus-dev), prefix: /usr}]}
  googletest: {buildable: false, externals: [{spec: googletest@$(deb libgtest-dev)+gmock, prefix: /usr}]}
  kokkos: {buildable: false, externals: [{spec: kokkos@3.4.01+openmp+serial~threads~cuda~rocm~wrapper, prefix: $kokkos}]}
EOF
  cat >"$SPACK_USER_CONFIG_PATH/config.yaml" <<EOF
config:
  install_tree:
    root: $work/opt
  build_stage: [$work/stage]
  build_jobs: $(nproc)
EOF
  git clone -q "$top" "$work/src"
  log="${TMPDIR:-/tmp}/strata-check-spack-dev-build.log"  # kept after the run
  echo "check-spack: spack dev-build --test=root strata@develop ~cuda (commit $(git -C "$work/src" rev-parse --short HEAD); log $log)"
  if (cd "$work/src" && spack dev-build --test=root strata@develop ~cuda) >"$log" 2>&1; then
    # ctest's summary is in the install-time test log of the installed prefix.
    find "$work/opt" -name 'install-time-test-log.txt' -exec cat {} + >>"$log" 2>/dev/null || true
    tests="$(grep -aoE '[0-9]+% tests passed, [0-9]+ tests failed out of [0-9]+' "$log" | tail -1 || true)"
    ok "dev-build --test=root: ${tests:-passed (no ctest summary found in $log)}"
  else
    tail -40 "$log" | sed 's/^/    /'; bad "spack dev-build --test=root strata@develop ~cuda"
  fi
fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
