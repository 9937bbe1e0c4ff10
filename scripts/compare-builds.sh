#!/usr/bin/env bash
# Host throughput of two builds of Strata, interleaved: for a change that must
# not slow the host (a kernel reshaped for GPUs, a new sum), strata-train of
# each build on W2-W5 (synthetic data, 1 rank), the two builds in turn and in
# alternating order round by round, with the machine's sgemm rate (OpenBLAS
# through strata-bench-micro, W3's 512 x 4096 x 4096 GEMM) measured between
# the rounds as the reference that shows how steady the machine was.
# Prints a Markdown table: samples/s median [min-max] per build, the median of
# the rounds' after/before ratios and each round's ratio; the CPU model and
# the reference first. Run it on a quiet machine (no build beside it).
#
# Usage: scripts/compare-builds.sh [--rounds N] [--threads T] [--workloads LIST]
#                                  BEFORE_BIN AFTER_BIN
#   BEFORE_BIN, AFTER_BIN  the bin/ folders of the two builds (the workloads'
#                          model, loss, batch and optimizer come from
#                          AFTER_BIN/strata-bench-train --print-workload)
#   --rounds N             rounds (default 5)
#   --threads T            threads of the one rank (default 2)
#   --workloads LIST       comma-separated subset of W2,W3,W4,W5 (default all)
# Exit codes: 0 done, 1 a run failed, 2 bad usage.
set -euo pipefail
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
rounds=5 threads=2 list=W2,W3,W4,W5 dirs=()
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds|--threads|--workloads)
      [ $# -ge 2 ] || { echo "compare-builds: $1 needs a value (see --help)" >&2; exit 2; }
      case "$1" in --rounds) rounds="$2" ;; --threads) threads="$2" ;; *) list="$2" ;; esac
      shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "compare-builds: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) dirs+=("$1") ;;
  esac
  shift
done
[ ${#dirs[@]} -eq 2 ] || { echo "compare-builds: give the bin/ folders of two builds (see --help)" >&2; exit 2; }
for d in "${dirs[@]}"; do
  [ -x "$d/strata-train" ] || { echo "compare-builds: no strata-train in '$d'" >&2; exit 2; }
done
[ -x "${dirs[1]}/strata-bench-train" ] || { echo "compare-builds: no strata-bench-train in '${dirs[1]}' (it defines the workloads)" >&2; exit 2; }
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "compare-builds: --rounds '$rounds' is not a positive count" >&2; exit 2; }
IFS=, read -r -a workloads <<<"$list"
args_of() {  # WORKLOAD: strata-train's arguments (steps: about 2-15 s each here)
  local steps
  case "$1" in
    W2) steps="--samples 12800 --steps 40 --warmup-steps 5" ;;
    W3) steps="--samples 4096 --steps 6 --warmup-steps 1" ;;
    W4) steps="--samples 3840 --steps 25 --warmup-steps 5" ;;
    W5) steps="--samples 320 --steps 8 --warmup-steps 2" ;;
    *) echo "compare-builds: unknown workload '$1' (expected W2, W3, W4 or W5)" >&2; exit 2 ;;
  esac
  echo "$(STRATA_MODELS_DIR="$top/models" "${dirs[1]}/strata-bench-train" --print-workload "$1") $steps"
}
for w in "${workloads[@]}"; do args_of "$w" >/dev/null; done

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
rate() {  # BIN WORKLOAD: prints samples/s
  local m="$tmp/metrics.jsonl"
  # shellcheck disable=SC2046
  "$1/strata-train" --dataset synthetic $(args_of "$2") --threads "$threads" --log-every 0 \
    --no-eval --metrics "$m" >"$tmp/log" 2>&1 \
    || { cat "$tmp/log" >&2; echo "compare-builds: $1/strata-train failed on $2" >&2; exit 1; }
  tail -n 1 "$m" | sed -n 's/.*"samples_per_sec":\([0-9.eE+-]*\).*/\1/p'
}
sgemm() {  # the reference: GFLOP/s of one GEMM shape on the same threads
  OMP_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads" "${dirs[1]}/strata-bench-micro" \
    --benchmark_filter='^gemm/vendor/NN/W3/512x4096x4096/' --benchmark_min_time=0.5 \
    --benchmark_format=csv 2>/dev/null \
    | awk -F, '/^"gemm/ { v = $NF } END { printf "%.1f\n", v / 1e9 }'
}
echo "compare-builds: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), $(nproc) cores; $rounds rounds, 1 rank x $threads threads"
declare -A got
refs=()
for ((r = 1; r <= rounds; ++r)); do
  refs+=("$(sgemm)")
  for w in "${workloads[@]}"; do
    order=(0 1)
    [ $((r % 2)) = 0 ] && order=(1 0)
    for side in "${order[@]}"; do got[$w,$side,$r]="$(rate "${dirs[$side]}" "$w")"; done
    printf 'compare-builds: round %d %s: before %.1f, after %.1f samples/s\n' "$r" "$w" \
      "${got[$w,0,$r]}" "${got[$w,1,$r]}" >&2
  done
done
refs+=("$(sgemm)")

stats() {  # VALUES...: median [min-max]
  printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    f = m >= 100 ? "%.0f [%.0f-%.0f]" : "%.1f [%.1f-%.1f]"; printf f, m, v[1], v[NR] }'
}
echo
echo "sgemm reference (512 x 4096 x 4096, OpenBLAS, between the rounds): $(stats "${refs[@]}") GFLOP/s"
echo
echo "| workload | before samples/s | after samples/s | after / before (median) | ratio per round |"
echo "|---|---:|---:|---:|---|"
for w in "${workloads[@]}"; do
  before=() after=() ratios=()
  for ((r = 1; r <= rounds; ++r)); do
    before+=("${got[$w,0,$r]}") after+=("${got[$w,1,$r]}")
    ratios+=("$(awk -v a="${got[$w,1,$r]}" -v b="${got[$w,0,$r]}" 'BEGIN { printf "%.2f", a / b }')")
  done
  med="$(printf '%s\n' "${ratios[@]}" | sort -g | awk '{ v[NR] = $1 } END { printf "%.2f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')"
  echo "| $w | $(stats "${before[@]}") | $(stats "${after[@]}") | $med | ${ratios[*]} |"
done
