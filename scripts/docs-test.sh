#!/usr/bin/env bash
# Runs the commands that README.md and docs/ say run: every fenced block
# tagged `sh`, and every block tagged `python` as a script of its own with the
# build's Python package on PYTHONPATH (blocks tagged `console` are shown, not
# run: they need a GPU, a cluster, spack, or hours). The blocks of one file run in order, in bash
# with `set -euo pipefail`, in a scratch folder of their own where the
# tree's top-level entries (build/, models/, planner/, ...) are linked, so
# `build/bin/strata-train`, `models/gpt-mini.toml` and the files a block
# writes (ck/, run.jsonl) resolve as in a checkout. On small settings:
# `--epochs N` runs as `--epochs 1`. Under root, Open MPI's run-as-root
# variables are set; mpirun may oversubscribe the cores; `python3` is
# STRATA_PYTHON (default /usr/bin/python3, Debian's, with matplotlib).
# A failing block fails the test, with its file, line, text and output; so
# does a relative link to a file or heading that does not exist
# (scripts/check-doc-links.py).
#
# Every `console` block is listed with why it is not run here (a rule below
# names what it needs: a Slurm cluster, spack, a GPU, an hour); a console
# block no rule explains fails the test, so each one stays accounted for.
# What such a block can still have checked here is dry-run
# (scripts/docs-dry-run.py): each strata-train line after srun, mpirun or an
# sbatch script with `--dry-run` on the processes that launcher would start
# (options, model, layout, data), each `spack install|dev-build|spec strata`
# line's variants and versions against the recipe. A failing dry run fails
# the test like a failing block.
#
# Usage: scripts/docs-test.sh [--list | --console] [FILE.md ...]   (default: README.md docs/**/*.md)
#   --list      print the blocks that would run, and run none
#   --console   print the console blocks and why each is not run, and run none
# Environment: BUILD_DIR (default build/), STRATA_DOCS_TIMEOUT (seconds per
# block, default 600), STRATA_PYTHON.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
list=0
files=()
while [ $# -gt 0 ]; do
  case "$1" in
    --list) list=1 ;;
    --console) list=2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    -*) echo "docs-test: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) [ -f "$1" ] || { echo "docs-test: $1: no such file" >&2; exit 2; }
       files+=("$(cd "$(dirname "$1")" && pwd)/$(basename "$1")") ;;
  esac
  shift
done
if [ "${#files[@]}" = 0 ]; then
  files=("$top/README.md")
  while IFS= read -r f; do files+=("$f"); done < <(find "$top/docs" -name '*.md' | sort)
fi
build="${BUILD_DIR:-$top/build}"
[ "$list" = 1 ] || [ -x "$build/bin/strata-train" ] ||
  { echo "docs-test: no $build/bin/strata-train: build first (scripts/build.sh)" >&2; exit 2; }

work="$(mktemp -d "${TMPDIR:-/tmp}/strata-docs-test.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# python3 for the blocks: the one with matplotlib.
mkdir -p "$work/python"
ln -s "${STRATA_PYTHON:-/usr/bin/python3}" "$work/python/python3"
export PATH="$work/python:$PATH"
export OMPI_MCA_rmaps_base_oversubscribe=1 OMP_WAIT_POLICY=PASSIVE
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

# Why a console block is not run here: the first rule whose pattern (an
# extended regex) matches the block's text.
console_rules=(
  'srun |sbatch |salloc |--mpi=pmix|needs a Slurm cluster (ctest -L cluster runs srun and sbatch on the simulated one)'
  'cluster-sim\.sh|slurm-sim\.sh|starts simulated nodes in network namespaces (root; ctest -L cluster runs them)'
  'spack |check-spack\.sh|needs spack and clingo (not on Debian 12; docs/install.md)'
  'gpu-check\.sh|cuda_arch|--gpus|Kokkos_ENABLE_CUDA|needs an NVIDIA GPU or its toolkit build (scripts/gpu-check.sh on the GPU machine)'
  'module load|dnf |git clone|another system: environment modules, CentOS/RHEL packages, the network'
  'compare\.sh|strata-bench-|a benchmark: minutes to an hour on a quiet machine (its figures are in docs/benchmarks.md)'
  'quickstart\.sh|scripts/test\.sh|scripts/build\.sh|the set-up commands: CI runs them (.ci/run)'
  'ci-checks\.sh|check-asan\.sh|check-tsan\.sh|fuzz\.sh|CI checks: .ci/run runs them'
  'docs-test\.sh|this test itself'
  '--hostfile|--map-by|-np 8|needs the hosts or cores it names'
  '/opt/|-DKokkos_ROOT=|needs a Kokkos installed elsewhere'
  '--epochs 1[0-9]|--steps [0-9]{3,}|a long training run (minutes; the README and docs/benchmarks.md give its figures)'
  'strata-export ck/ckpt-000000800|needs the 800-step checkpoint of the run above it (a long training run)'
)
console_reason() {  # console_reason FILE: the reason of the first matching rule, or nothing
  local rule
  for rule in "${console_rules[@]}"; do
    if grep -qE -- "${rule%|*}" "$1"; then echo "${rule##*|}"; return; fi
  done
}

ran=0 failed=0 not_run=0 dry_ran=0 t0=$SECONDS
for file in "${files[@]}"; do
  name="${file#"$top"/}"
  blocks="$work/blocks/$name"
  mkdir -p "$blocks"
  # Each `sh` and `python` block into its own file, named by its first line number.
  awk -v out="$blocks" '
    /^```sh[[:space:]]*$/ { inside = 1; n = sprintf("%s/%06d.sh", out, NR + 1); next }
    /^```python[[:space:]]*$/ { inside = 1; n = sprintf("%s/%06d.py", out, NR + 1); next }
    /^```/ && inside { inside = 0; close(n); next }
    inside { print > n }' "$file"
  # The console blocks: each listed with why it is not run.
  awk -v out="$blocks" '
    /^```console[[:space:]]*$/ { inside = 1; n = sprintf("%s/%06d.console", out, NR + 1); next }
    /^```/ && inside { inside = 0; close(n); next }
    inside { print > n }' "$file"
  for c in "$blocks"/*.console; do
    [ -f "$c" ] || continue
    cline=$((10#$(basename "$c" .console)))
    reason="$(console_reason "$c")"
    if [ -z "$reason" ]; then
      echo "docs-test: FAILED $name:$cline: a console block that no rule explains (make it sh, or give" \
           "its reason in docs-test.sh's console_rules):"
      sed 's/^/    /' "$c"
      failed=$((failed + 1))
    elif ! dry="$(python3 "$here/docs-dry-run.py" "$c" "$top" 2>&1)"; then
      echo "docs-test: FAILED $name:$cline: its dry runs cannot be read: $dry"
      failed=$((failed + 1))
    elif [ -n "$dry" ] && [ "$list" = 0 ]; then
      # Not run whole, but checked: each strata-train line with --dry-run on
      # the processes its launcher starts, each spack spec against the recipe.
      scratch="$work/dry/$name/$cline"
      mkdir -p "$scratch"
      for entry in "$top"/*; do ln -s "$entry" "$scratch/"; done
      [ "$build" = "$top/build" ] || ln -sfn "$build" "$scratch/build"
      start=$SECONDS
      if (cd "$scratch" && timeout "${STRATA_DOCS_TIMEOUT:-600}" bash -euo pipefail -c "$dry") \
          >"$c.log" 2>&1; then
        echo "docs-test: dry  $name:$cline ($(wc -l <<<"$dry") dry run(s), $((SECONDS - start)) s; not run whole: $reason)"
        dry_ran=$((dry_ran + 1))
      else
        echo "docs-test: FAILED $name:$cline: a dry run of the block failed (exit $?); the dry runs:"
        sed 's/^/    /' <<<"$dry"
        echo "  their output (last 30 lines):"
        tail -30 "$c.log" | sed 's/^/    /'
        failed=$((failed + 1))
      fi
    else
      [ "$list" = 1 ] || echo "docs-test: not run $name:$cline: $reason${dry:+ (dry runs: $(wc -l <<<"$dry"))}"
      [ -n "$dry" ] && [ "$list" = 2 ] && sed 's/^/    dry run: /' <<<"$dry"
      not_run=$((not_run + 1))
    fi
  done
  [ "$list" = 2 ] && continue
  shopt -s nullglob
  parts=("$blocks"/*.sh "$blocks"/*.py)
  shopt -u nullglob
  [ "${#parts[@]}" = 0 ] && continue
  scratch="$work/run/$name"
  mkdir -p "$scratch"
  for entry in "$top"/*; do ln -s "$entry" "$scratch/"; done
  [ "$build" = "$top/build" ] || ln -sfn "$build" "$scratch/build"
  mapfile -t parts < <(printf '%s\n' "${parts[@]}" | sort)
  for part in "${parts[@]}"; do
    base="$(basename "$part")"
    line=$((10#${base%.*}))
    run=(bash -euo pipefail "$part")
    [ "${part##*.}" = py ] && run=(env PYTHONPATH="$build/python" python3 "$part")
    if [ "$list" = 1 ]; then
      echo "== $name:$line"; cat "$part"; continue
    fi
    # Small settings.
    sed -i -E 's/--epochs [0-9]+/--epochs 1/g' "$part"
    # The programs the block runs, in this build folder (whatever its name).
    missing=""
    for prog in $(grep -oE 'build/bin/strata-[a-z0-9-]+' "$part" | sort -u); do
      [ -x "$build/bin/${prog#build/bin/}" ] || missing+=" ${prog#build/bin/}"
    done
    if [ -n "$missing" ]; then
      echo "docs-test: FAILED $name:$line: this build ($build) has no$missing (the examples and" \
           "benchmarks need STRATA_ENABLE_EXAMPLES=ON and STRATA_ENABLE_BENCHMARKS=ON)"
      failed=$((failed + 1)) ran=$((ran + 1))
      continue
    fi
    start=$SECONDS
    if (cd "$scratch" && timeout "${STRATA_DOCS_TIMEOUT:-600}" "${run[@]}") \
        >"$part.log" 2>&1; then
      echo "docs-test: ok   $name:$line ($((SECONDS - start)) s)"
    else
      echo "docs-test: FAILED $name:$line (exit $?, $((SECONDS - start)) s); the block, as run:"
      sed 's/^/    /' "$part"
      echo "  its output (last 30 lines):"
      tail -30 "$part.log" | sed 's/^/    /'
      failed=$((failed + 1))
    fi
    ran=$((ran + 1))
  done
done
[ "$list" = 1 ] && exit 0
if [ "$list" = 2 ]; then echo "docs-test: $not_run console blocks not run, $failed unexplained"; [ "$failed" = 0 ]; exit; fi
echo "docs-test: $ran blocks run, $dry_ran console blocks checked by dry runs, $failed failed, $not_run console blocks not run (listed above), $((SECONDS - t0)) s"
# The links between the docs, too.
python3 "$here/check-doc-links.py" "${files[@]}" || failed=$((failed + 1))
[ "$failed" = 0 ]
