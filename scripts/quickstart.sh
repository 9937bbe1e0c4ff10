#!/usr/bin/env bash
# The main job: installs what is missing, builds Strata, then trains the MLP
# 784-256-128-10 on Fashion-MNIST for 10 epochs and prints the test accuracy.
# Extra arguments go to strata-train (they override the defaults below), e.g.
#   scripts/quickstart.sh --epochs 2 --metrics run.jsonl
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
"$here/build.sh"
exec "${BUILD_DIR:-$top/build}/bin/strata-train" --dataset fashion-mnist \
  --layers 784,256,128,10 --epochs 10 --batch-size 128 --optimizer adam --lr 1e-3 \
  --log-every 100 "$@"
