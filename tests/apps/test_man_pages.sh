#!/usr/bin/env bash
# The man pages made at build time (help2man): one per program, each a man(7)
# page whose OPTIONS hold every long option of the program's --help (the
# oracle), rendered by man itself where man-db is installed.
# Usage: test_man_pages.sh MAN_DIR BIN_DIR PROGRAM...
set -uo pipefail
man_dir="$1" bin="$2"
shift 2
failed=0
for tool in "$@"; do
  page="$man_dir/man1/$tool.1"
  if [ ! -s "$page" ]; then
    echo "FAILED: $page is missing or empty"; failed=1; continue
  fi
  grep -q "^\.TH \"\?${tool^^}\"\? \"\?1\"\?" "$page" || { echo "FAILED: $page has no .TH ${tool^^} 1"; failed=1; }
  program="$bin/$tool"
  for opt in $("$program" --help 2>/dev/null | grep -oE '^  (-[a-zA-Z], ?)?--[a-z0-9-]+' | grep -oE -- '--[a-z0-9-]+'); do
    # help2man writes a dash as \- (or \-\-).
    grep -qF -- "$(sed 's/-/\\-/g' <<<"$opt")" "$page" ||
      { echo "FAILED: $page lacks $opt"; failed=1; }
  done
  if command -v man >/dev/null; then
    text="$(MANPATH="$man_dir" MANWIDTH=100 man -P cat "$tool" 2>&1)"
    grep -q -- "--help" <<<"$text" || { echo "FAILED: man $tool (MANPATH=$man_dir) renders no --help:"; head -5 <<<"$text"; failed=1; }
  fi
done
[ "$failed" = 0 ] && echo "passed: $# man pages"
exit "$failed"
