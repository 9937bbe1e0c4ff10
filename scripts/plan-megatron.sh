#!/usr/bin/env bash
# strata-plan at cluster scale against a published table: the GPT models of
# the Megatron-LM paper's weak-scaling table (Narayanan et al., "Efficient
# Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
# SC 2021, Table 1: 1.7B to 1T parameters on 32 to 3072 A100 GPUs, vocabulary
# 51,200, sequence 2,048, mixed precision), planned on
# planner/profiles/dgx-a100.json with the paper's GPU count and batch. For
# each row it prints the published tensor and pipeline sizes and teraFLOP/s
# per GPU beside the plan's layout and predicted teraFLOP/s per GPU. The
# FLOP of a step are the paper's formula (its eq. 3, counting activation
# recomputation as the paper's runs used it):
#   F = 96 B s l h^2 (1 + s / (6 h) + V / (16 l h))
# Writes a markdown table to the output file (default: stdout only).
#
# Usage: scripts/plan-megatron.sh [--out FILE] [--no-build]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
build="${BUILD_DIR:-$top/build}"
out=""
do_build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "plan-megatron: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ "$do_build" = 1 ] && "$here/build.sh" >/dev/null
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The paper's Table 1: billions of parameters, heads, hidden size, layers,
# tensor size, pipeline size, GPUs, batch, teraFLOP/s per GPU.
rows=(
  "1.7 24 2304 24 1 1 32 512 137"
  "3.6 32 3072 30 2 1 64 512 138"
  "7.5 32 4096 36 4 1 128 512 142"
  "18.4 48 6144 40 8 1 256 1024 135"
  "39.1 64 8192 48 8 2 512 1536 138"
  "76.1 80 10240 60 8 4 1024 1792 140"
  "145.6 96 12288 80 8 8 1536 2304 148"
  "310.1 128 16384 96 8 16 1920 2160 155"
  "529.6 128 20480 105 8 35 2520 2520 163"
  "1008.0 160 25600 128 8 64 3072 3072 163"
)
V=51200
s=2048
table="| parameters | GPUs | batch | published t x p | published TF/s per GPU | planned layout | predicted TF/s per GPU | predicted / published | the published t x p under the model: TF/s per GPU |
|---|---|---|---|---|---|---|---|---|"
for row in "${rows[@]}"; do
  read -r params heads h l t p n B tflops <<<"$row"
  model="$work/gpt-$params.toml"
  cat >"$model" <<TOML
name = "gpt-$params"
input = [$s]
[[layers]]
name = "wte"
type = "embedding"
vocab = $V
dim = $h
[[layers]]
name = "wpe"
type = "position_embedding"
context = $s
[[layers]]
name = "h"
type = "block"
repeat = $l
layers = [
  { type = "residual", layers = [
    { type = "layernorm" },
    { type = "attention", heads = $heads },
  ] },
  { type = "residual", layers = [
    { type = "layernorm" },
    { type = "linear", out = $((4 * h)) },
    { type = "gelu" },
    { type = "linear", out = $h },
  ] },
]
[[layers]]
type = "layernorm"
[[layers]]
name = "lm_head"
type = "linear"
out = $V
bias = false
tie = "wte"
TOML
  log="$("$build/bin/strata-plan" --model "$model" --batch "$B" --ranks "$n" --precision bf16 \
    --optimizer adam --profile "$top/planner/profiles/dgx-a100.json" --all 2>&1)" || {
    echo "plan-megatron: strata-plan failed for $params B:" >&2; tail -3 <<<"$log" >&2; exit 1; }
  best="$(grep '^# best: ' <<<"$log" | sed 's/^# best: //; s/, [0-9.]* samples\/s predicted$//')"
  rate="$(grep '^# best: ' <<<"$log" | grep -oE '[0-9.]+ samples/s' | cut -d' ' -f1)"
  predicted="$(awk -v B="$B" -v s="$s" -v l="$l" -v h="$h" -v V="$V" -v n="$n" -v r="$rate" 'BEGIN {
    F = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
    printf "%.0f", F * (r / B) / n / 1e12 }')"
  ratio="$(awk -v a="$predicted" -v b="$tflops" 'BEGIN { printf "%.2f", a / b }')"
  # The best plan with the published tensor and pipeline sizes (its first row in the ranking).
  mesh="dp $((n / (t * p))) x pp $p x tp $t"
  theirs="$( (grep -E "^ *[0-9]+  $mesh[, ]" <<<"$log" || true) | head -1 | awk '{ print $(NF - 9) }')"
  if [ -n "$theirs" ]; then
    theirs="$(awk -v B="$B" -v s="$s" -v l="$l" -v h="$h" -v V="$V" -v n="$n" -v r="$theirs" 'BEGIN {
      F = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
      printf "%.0f", F * (r / B) / n / 1e12 }')"
  else
    # Rejected in every variant: the one that needs the least memory says by how much.
    theirs="$( (grep -F "$mesh" <<<"$log" || true) | (grep -oE 'rejected: needs [0-9.]+ MiB' || true) |
      sort -t' ' -k3 -g | head -1 | sed 's/rejected: needs \([0-9.]*\) MiB/rejected: needs at least \1 MiB per GPU/')"
  fi
  line="| ${params}B | $n | $B | $t x $p | $tflops | $best | $predicted | $ratio | $theirs |"
  table+=$'\n'"$line"
  echo "$line"
done
[ -z "$out" ] || printf '%s\n' "$table" >"$out"
