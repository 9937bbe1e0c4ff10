#!/usr/bin/env bash
# --reproducible across builds: trains the same runs with the strata-train of
# two builds (say the default one and one with -march=x86-64-v3 or -v4 and
# RelWithDebInfo, as spack builds it) and requires their checkpoints to be
# byte for byte identical. Each pair also changes the layout (ranks, threads
# per rank, strategy), which --reproducible allows. What makes it hold is the
# floating-point contract (docs/design-notes.md, "The floating-point
# contract"): no contraction, IEEE arithmetic, whatever the target CPU.
# ci-checks.sh's `march` check runs it; about 30 s on 2 cores.
#
# Usage: scripts/check-reproducible-builds.sh BUILD_A BUILD_B [WORK_DIR]
#   BUILD_A, BUILD_B   build folders (with bin/strata-train)
#   WORK_DIR           where the runs write (default: a temporary folder,
#                      removed at the end)
# Exit 0: every pair identical; 1: a pair differs (named, with the first
# differing byte); 2: bad usage; 3: a run failed (its log's tail printed).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
case "${1:-}" in
  -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
esac
[ $# -ge 2 ] || { echo "check-reproducible-builds: need two build folders (see --help)" >&2; exit 2; }
for d in "$1" "$2"; do
  [ -x "$d/bin/strata-train" ] || { echo "check-reproducible-builds: no $d/bin/strata-train" >&2; exit 2; }
done
# Absolute paths: the runs start in the source tree.
a="$(cd "$1" && pwd)" b="$(cd "$2" && pwd)"
if [ $# -ge 3 ]; then
  mkdir -p "$3" && work="$(cd "$3" && pwd)"
else
  work="$(mktemp -d -t strata-repro-builds.XXXXXX)"
  trap 'rm -rf "$work"' EXIT
fi
export OMP_WAIT_POLICY=PASSIVE

# run NAME BUILD -- ARGS...: one training run into $work/NAME.
run() {
  local name="$1" build="$2"; shift 3
  rm -rf "${work:?}/$name"
  if ! (cd "$top" && "$build/bin/strata-train" "$@" --reproducible --no-eval --seed 3 \
        --checkpoint-dir "$work/$name" --checkpoint-every 1000000) >"$work/$name.log" 2>&1; then
    echo "check-reproducible-builds: FAILED to run $name ($build/bin/strata-train $*):" >&2
    tail -20 "$work/$name.log" >&2
    exit 3
  fi
}

# The newest checkpoint of a run (the file `latest` names).
newest() {
  [ -f "$work/$1/latest" ] || { echo "check-reproducible-builds: run $1 wrote no checkpoint" >&2; exit 3; }
  echo "$work/$1/$(cat "$work/$1/latest")"
}

failed=0 pairs=0
# pair NAME "ARGS A" "ARGS B": the same training in both builds, each with
# its own layout arguments; then a byte comparison of the final checkpoints.
pair() {
  local name="$1" args_a="$2" args_b="$3" common=("${@:4}")
  # shellcheck disable=SC2086
  run "$name-a" "$a" -- "${common[@]}" $args_a
  # shellcheck disable=SC2086
  run "$name-b" "$b" -- "${common[@]}" $args_b
  local fa fb
  fa="$(newest "$name-a")" || exit 3
  fb="$(newest "$name-b")" || exit 3
  pairs=$((pairs + 1))
  # Data-parallel runs and one rank write one file (docs/checkpoints.md).
  if cmp -s "$fa" "$fb"; then
    echo "check-reproducible-builds: identical  $name ($(stat -c %s "$fa") bytes; A: $args_a, B: $args_b)"
  else
    echo "check-reproducible-builds: DIFFERENT  $name: $(cmp "$fa" "$fb" 2>&1 | head -1)"
    failed=$((failed + 1))
  fi
}

echo "check-reproducible-builds: A = $a, B = $b (work folder $work)"
pair mlp "--threads 1" "--ranks 2 --threads 1" \
  --dataset synthetic --layers 64,48,32,10 --batch-size 64 --steps 12 --optimizer adam --lr 1e-3
pair gpt "--threads 2" "--ranks 2 --threads 1" \
  --model models/gpt-mini.toml --dataset fortunes --batch-size 32 --chunk 16 --steps 3 --optimizer adamw --lr 1e-3
pair gpt-bf16 "--threads 1" "--threads 2" \
  --model models/gpt-mini.toml --dataset fortunes --batch-size 32 --chunk 16 --steps 2 --optimizer adamw \
  --lr 1e-3 --precision bf16
echo "check-reproducible-builds: $pairs pairs, $failed different"
[ "$failed" = 0 ]
