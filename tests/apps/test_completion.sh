#!/usr/bin/env bash
# The bash completion of Strata's programs (apps/completion/strata.bash),
# called as bash calls it (COMP_WORDS, COMP_CWORD): options as the program's
# --help lists them, subcommands, and model files and profiles by extension.
# The oracle: the programs' --help and the files in the source tree.
# Usage: test_completion.sh SOURCE_DIR BIN_DIR
set -uo pipefail
src="$1" bin="$2"
# shellcheck source=apps/completion/strata.bash
source "$src/apps/completion/strata.bash"
cd "$src"
failed=0
complete_words() {  # the command line so far, the word being completed last
  COMP_WORDS=("$@")
  COMP_CWORD=$(($# - 1))
  _strata 2>/dev/null
  printf '%s\n' "${COMPREPLY[@]}" | sort
}
expect() {  # what, expected (sorted lines), got
  if [ "$2" != "$3" ]; then
    echo "FAILED: $1"
    echo "  expected: $(tr '\n' ' ' <<<"$2")"
    echo "  got:      $(tr '\n' ' ' <<<"$3")"
    failed=1
  fi
}
expect_has() {  # what, a word, got
  grep -qx -- "$2" <<<"$3" || { echo "FAILED: $1: no '$2' in: $(tr '\n' ' ' <<<"$3")"; failed=1; }
}

train="$bin/strata-train"
got="$(complete_words "$train" --tp)"
expect "strata-train --tp" "$(printf '%s\n' --tp --tp-chunk)" "$got"
got="$(complete_words "$train" --)"
# Every long option --help lists as an option line's first word.
for opt in $("$train" --help | grep -oE '^  --[a-z0-9-]+' | tr -d ' '); do
  expect_has "strata-train -- offers each option of --help" "$opt" "$got"
done
expect_has "strata-train -- offers --version" --version "$got"
expect "strata-train --model models/" "$(ls models/*.toml | sort)" \
  "$(complete_words "$train" --model models/)"
expect "strata-plan --profile planner/profiles/" "$(ls planner/profiles/*.json | sort)" \
  "$(complete_words "$bin/strata-plan" --profile planner/profiles/)"
expect "strata-train --dataset s" synthetic "$(complete_words "$train" --dataset s)"
expect "strata-tokenize (subcommands)" "$(printf '%s\n' -h --help --version decode encode train | sort)" \
  "$(complete_words "$bin/strata-tokenize" "")"
expect "strata-tokenize train --" "$(printf '%s\n' --help --input --output --vocab | sort)" \
  "$(complete_words "$bin/strata-tokenize" train --)"
expect "strata-plan cal" calibrate "$(complete_words "$bin/strata-plan" cal)"
expect "strata-plot --" "$(printf '%s\n' --help --output --title --version --x | sort)" \
  "$(complete_words "$src/apps/plot/strata_plot.py" --)"
[ "$failed" = 0 ] && echo passed
exit "$failed"
