#!/bin/sh
# The built strata-plot runs with the Python the build found (with
# matplotlib), whatever python3 comes first on PATH: here a python3 that
# only fails is put first. The source script (#!/usr/bin/env python3) run the
# same way must fail, or the test would prove nothing.
#   plot_interpreter_test.sh BUILT_PLOT SOURCE_PLOT STRATA_TRAIN WORK
set -u
plot="$1" source="$2" train="$3" work="$4"
py="$(head -n 1 "$plot" | cut -c3-)"
"$py" -c "import matplotlib" 2>/dev/null \
  || { echo "SKIPPED: the build found no python3 with matplotlib ($py; Debian: apt-get install python3-matplotlib)"; exit 77; }
rm -rf "$work" && mkdir -p "$work/bin" || exit 1
printf '#!/bin/sh\necho "the python3 first on PATH (no matplotlib) ran" >&2\nexit 99\n' > "$work/bin/python3"
chmod +x "$work/bin/python3"
"$train" --dataset synthetic --layers 8,16,2 --steps 5 --metrics "$work/run.jsonl" > "$work/train.log" 2>&1 \
  || { cat "$work/train.log"; echo "FAILED: strata-train"; exit 1; }
PATH="$work/bin:$PATH" "$plot" "$work/run.jsonl" -o "$work/curves.png"
rc=$?
[ "$rc" = 0 ] && [ -s "$work/curves.png" ] || { echo "FAILED: the built strata-plot exited $rc with another python3 first on PATH"; exit 1; }
head -n 1 "$plot"
cp "$source" "$work/strata-plot-source" && chmod +x "$work/strata-plot-source"
PATH="$work/bin:$PATH" "$work/strata-plot-source" "$work/run.jsonl" -o "$work/again.png" 2>/dev/null
[ $? = 99 ] || { echo "FAILED: the source script did not pick up the python3 on PATH: this test proves nothing"; exit 1; }
echo "ok: strata-plot drew with its own interpreter while a python3 without matplotlib came first on PATH"
