#!/usr/bin/env bash
# Installs what is missing, builds Strata and runs every test (ctest).
# Extra arguments go to ctest, e.g. scripts/test.sh -R Linear -V
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
"$here/build.sh"
cd "${BUILD_DIR:-$top/build}"
ctest --output-on-failure --timeout 600 -j "${STRATA_JOBS:-$(nproc)}" "$@"
