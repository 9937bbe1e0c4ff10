# Bash completion for Strata's programs (strata-train, strata-plan,
# strata-predict, strata-generate, strata-export, strata-tokenize,
# strata-plot): options as the program's --help lists them, subcommands,
# model files (*.toml) after --model, machine profiles (*.json) after
# --profile, and files elsewhere. Installed once per program into
# share/bash-completion/completions; or source it: . strata.bash

_strata_help() {  # $1: the program (as typed), $2: a subcommand or ""
  "$1" ${2:+"$2"} --help 2>/dev/null
}

_strata_options() {  # the options of the help text on stdin: the names before each option's text
  sed -nE 's/^ +(-[^ ].*)$/\1/p' | sed -E 's/  .*//' |
    grep -oE -- '(^|[ ,])--?[A-Za-z][A-Za-z0-9-]*' | sed 's/^[ ,]//' | sort -u
}

_strata_subcommands() {  # the names under "Subcommands:" in the help text on stdin
  awk '/^Subcommands:/ { on = 1; next } on && /^  [a-z]/ { print $1 } on && /^$/ { on = 0 }'
}

_strata() {
  local cur prev sub="" i
  cur="${COMP_WORDS[COMP_CWORD]}"
  prev="${COMP_WORDS[COMP_CWORD - 1]}"
  COMPREPLY=()
  case "$prev" in
    --model|--config)
      compopt -o filenames 2>/dev/null
      COMPREPLY=($(compgen -f -X '!*.toml' -- "$cur") $(compgen -d -- "$cur"))
      return 0 ;;
    --profile|--plan-profile)
      compopt -o filenames 2>/dev/null
      COMPREPLY=($(compgen -f -X '!*.json' -- "$cur") $(compgen -d -- "$cur"))
      return 0 ;;
    --dataset)
      COMPREPLY=($(compgen -W 'fashion-mnist synthetic fortunes csv: text:' -- "$cur"))
      [ "${#COMPREPLY[@]}" = 1 ] && [[ "${COMPREPLY[0]}" == *: ]] && compopt -o nospace 2>/dev/null
      return 0 ;;
  esac
  local prog="${COMP_WORDS[0]}" subs words
  subs="$(_strata_help "$prog" | _strata_subcommands)"
  for ((i = 1; i < COMP_CWORD; i++)); do
    if [ -n "$subs" ] && grep -qx -- "${COMP_WORDS[i]}" <<<"$subs"; then
      sub="${COMP_WORDS[i]}"
      break
    fi
  done
  if [[ "$cur" == -* ]] || { [ -z "$sub" ] && [ -n "$subs" ]; }; then
    words="$(_strata_help "$prog" "$sub" | _strata_options)"
    [ -z "$sub" ] && words+=$'\n'"$subs"
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
    return 0
  fi
  compopt -o filenames 2>/dev/null
  COMPREPLY=($(compgen -f -- "$cur"))
}

complete -F _strata strata-train strata-plan strata-predict strata-generate strata-export \
  strata-tokenize strata-plot
