#!/usr/bin/env bash
# The README quick start's model leaves Strata and is evaluated three ways
# to the same test accuracy (docs/weights.md):
#   1. scripts/quickstart.sh trains the Fashion-MNIST MLP (10 epochs, about
#      10 s on 2 cores), writing a checkpoint and --export model.safetensors;
#   2. strata-predict runs the checkpoint, and the exported weights, over the
#      test images;
#   3. PyTorch 1.13 (Debian's python3-torch) loads the exported weights with
#      load_state_dict(strict=True), normalises the images as the file's
#      metadata says, and counts the correct ones (tests/torch_oracle.py).
# Every count must equal strata-train's. Installs what is missing (through
# quickstart.sh); CI runs it (.ci/run). Exit 0: all equal; 1: they differ.
#
# Usage: scripts/check-weights.sh [WORK_DIR]   (default: a temporary folder)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
bin="${BUILD_DIR:-$top/build}/bin"
work="${1:-$(mktemp -d -t strata-check-weights.XXXXXX)}"
mkdir -p "$work"
py="${STRATA_PYTHON:-/usr/bin/python3}"

echo "check-weights: training the quick start's model (work folder $work)"
"$here/quickstart.sh" -q --metrics "$work/train.jsonl" --checkpoint-dir "$work/ck" \
  --export "$work/model.safetensors"
# strata-train's last test accuracy, as a count of the 10000 test images.
trained="$("$py" -c 'import json, sys
acc = [json.loads(l)["test_accuracy"] for l in open(sys.argv[1]) if "test_accuracy" in l]
print(round(acc[-1] * 10000))' "$work/train.jsonl")"

count_of() {  # "accuracy 0.8889 (8889 of 10000)" -> 8889
  sed -n 's/^accuracy [0-9.]* (\([0-9]*\) of \([0-9]*\))$/\1/p'
}
from_checkpoint="$("$bin/strata-predict" --checkpoint "$work/ck" --output "$work/predictions.csv" 2>&1 | count_of)"
from_weights="$("$bin/strata-predict" --weights "$work/model.safetensors" --layers 784,256,128,10 \
  --output "$work/predictions.jsonl" 2>&1 | count_of)"
by_pytorch="$("$py" "$top/tests/torch_oracle.py" --evaluate "$work/model.safetensors" \
  --layers 784,256,128,10 | sed -n 's/^correct \([0-9]*\) of .*/\1/p')"

echo "check-weights: correct test images of 10000: strata-train $trained, strata-predict (checkpoint)" \
     "${from_checkpoint:-?}, strata-predict (safetensors) ${from_weights:-?}, PyTorch ${by_pytorch:-?}"
if [ "$trained" = "$from_checkpoint" ] && [ "$trained" = "$from_weights" ] && [ "$trained" = "$by_pytorch" ]; then
  echo "check-weights: all equal"
  exit 0
fi
echo "check-weights: FAILED: the counts differ" >&2
exit 1
