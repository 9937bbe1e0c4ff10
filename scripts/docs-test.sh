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
# Usage: scripts/docs-test.sh [--list] [FILE.md ...]   (default: README.md docs/**/*.md)
#   --list   print the blocks that would run, and run none
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

ran=0 failed=0 t0=$SECONDS
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
echo "docs-test: $ran blocks run, $failed failed, $((SECONDS - t0)) s"
# The links between the docs, too.
python3 "$here/check-doc-links.py" "${files[@]}" || failed=$((failed + 1))
[ "$failed" = 0 ]
