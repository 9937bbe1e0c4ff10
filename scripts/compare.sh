#!/usr/bin/env bash
# Runs Strata's training benchmark (strata-bench-train) and its PyTorch peers
# (benchmarks/peers/torch_mlp.py) back to back on this machine, on the same
# workloads (shapes or model file, global batch, optimizer (SGD lr 0.01; W5
# AdamW lr 1e-3), fp32, synthetic data, steps per repetition, warm-up), then
# prints one table and writes the results, a markdown table and PNG charts
# into the output folder. For W4 (the CNN of models/cnn-fashion.toml) and W5
# (the GPT of models/gpt-mini.toml: samples of 128 tokens) Strata's log also
# holds the per-layer breakdown (strata-bench-train --breakdown), copied to
# breakdown-W4-rN.txt and breakdown-W5-rN.txt.
#
# Usage: scripts/compare.sh [options]
#   --out DIR          output folder (default: BUILD_DIR/compare, BUILD_DIR
#                      defaulting to build/)
#   --workloads LIST   comma-separated subset of W1,W2,W3,W4,W5 (default: all)
#   --reps N           timed repetitions per program and configuration
#                      (default 5; 2 with --quick)
#   --rounds N         run everything N times, interleaved, and pool the
#                      repetitions (default 1): on a shared machine this
#                      spreads slow phases over both sides
#   --quick            smoke test: 2 repetitions of a tenth of the steps,
#                      small collectives
#   --no-collectives   skip strata-bench-collectives (allreduce chart)
#   --no-plots         skip the PNG charts
#   --no-build         use the executables already in BUILD_DIR/bin
#   --strata-env VAR=VALUE  environment for Strata's programs only (repeatable;
#                      e.g. OMP_WAIT_POLICY=PASSIVE, which the 2-thread peer
#                      always gets); recorded with the results
#   -h, --help         this text
#
# Pairs (Strata configuration of strata-bench-train : peer):
#   local-1x1       : PyTorch, one process, 1 thread
#   local-1x2       : PyTorch, one process, 2 threads, OMP_WAIT_POLICY=PASSIVE
#   dp-threads-2x1  : PyTorch DistributedDataParallel, gloo, 2 processes x 1 thread
#   dp-mpi (mpirun -np 2, 1 thread each) : the same DDP peer
# Columns: samples/s median [min-max] over the repetitions (pooled over
# rounds), ratio = Strata median / peer median, and each side's GFLOP/s
# (6 x batch x weights per sample step) as a fraction of the sgemm rate that
# strata-bench-train measures for the step's GEMM shapes on the same threads.
#
# Output (in --out): strata-*.jsonl, peers-*.jsonl, collectives.jsonl, logs/,
# machine.json (load, cores, versions), results.json, results.csv, table.md
# (ready to paste), *.png.
#
# Environment: BUILD_DIR (default build), STRATA_JOBS (build jobs),
# STRATA_PYTHON (default /usr/bin/python3: Debian's interpreter, which has
# python3-torch and python3-matplotlib), STRATA_COMPARE_TIMEOUT (seconds per
# program, default 1800).
# Installs what is missing through scripts/bootstrap.sh --peers (Debian).
# Exit codes: 0 done, 1 a program failed (the rest still ran; see logs/),
# 2 bad options.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
source "$here/common.sh"

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; }
die() { echo "compare.sh: $*" >&2; exit 2; }

build="${BUILD_DIR:-$top/build}"
out=""
workloads="W1,W2,W3,W4,W5"
reps=""
rounds=1
quick=0
collectives=1
plots=1
do_build=1
strata_env=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || die "--out needs a folder"; out="$2"; shift ;;
    --out=*) out="${1#*=}" ;;
    --workloads) [ $# -ge 2 ] || die "--workloads needs a list"; workloads="$2"; shift ;;
    --workloads=*) workloads="${1#*=}" ;;
    --reps) [ $# -ge 2 ] || die "--reps needs a number"; reps="$2"; shift ;;
    --reps=*) reps="${1#*=}" ;;
    --rounds) [ $# -ge 2 ] || die "--rounds needs a number"; rounds="$2"; shift ;;
    --rounds=*) rounds="${1#*=}" ;;
    --quick) quick=1 ;;
    --no-collectives) collectives=0 ;;
    --no-plots) plots=0 ;;
    --no-build) do_build=0 ;;
    --strata-env) [ $# -ge 2 ] && [[ "$2" == *=* ]] || die "--strata-env needs VAR=VALUE"; strata_env+=("$2"); shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
  shift
done
[ -n "$reps" ] || reps=$([ "$quick" = 1 ] && echo 2 || echo 5)
[[ "$reps" =~ ^[1-9][0-9]*$ ]] || die "--reps must be a positive integer, got '$reps'"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer, got '$rounds'"
IFS=, read -r -a wl <<<"$workloads"
[ ${#wl[@]} -gt 0 ] || die "--workloads is empty"
for w in "${wl[@]}"; do
  case "$w" in W1|W2|W3|W4|W5) ;; *) die "--workloads: unknown workload '$w' (W1, W2, W3, W4, W5)" ;; esac
done
out="${out:-$build/compare}"
scale=$([ "$quick" = 1 ] && echo 0.1 || echo 1)
min_warmup=$([ "$quick" = 1 ] && echo 2 || echo 5)
timeout_s="${STRATA_COMPARE_TIMEOUT:-1800}"
py="${STRATA_PYTHON:-/usr/bin/python3}"
[ -x "$py" ] || die "no Python at $py (set STRATA_PYTHON)"

# ------------------------------------------------------------ install, build
"$here/bootstrap.sh" --peers >/dev/null
"$py" -c 'import torch' 2>/dev/null || die "$py cannot import torch (Debian: python3-torch)"
if [ "$do_build" = 1 ]; then
  echo "compare.sh: building strata-bench-train and strata-bench-collectives in $build" >&2
  BUILD_DIR="$build" STRATA_TARGETS="strata-bench-train strata-bench-collectives" "$here/build.sh" >/dev/null \
    || { echo "compare.sh: build failed (re-run scripts/build.sh to see why)" >&2; exit 1; }
fi
bin="$build/bin"
[ -x "$bin/strata-bench-train" ] || die "$bin/strata-bench-train not found (build first, or drop --no-build)"
have_mpi=0
if grep -qs 'define STRATA_HAS_MPI 1' "$build/generated/strata_config.hpp" && command -v mpirun >/dev/null; then
  have_mpi=1
fi
# Open MPI refuses root without these (containers).
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi

mkdir -p "$out/logs"
rm -f "$out"/strata-*.jsonl "$out"/peers-*.jsonl "$out"/collectives.jsonl "$out"/load.jsonl "$out"/*.png
failed=0

# Records the load average (1, 5, 15 minutes) with a label.
load() {
  read -r l1 l5 l15 _ </proc/loadavg
  printf '{"when": "%s", "time": "%s", "load1": %s, "load5": %s, "load15": %s}\n' \
    "$1" "$(date -u +%FT%TZ)" "$l1" "$l5" "$l15" >>"$out/load.jsonl"
  echo "compare.sh: [$1] load average $l1 $l5 $l15" >&2
}

# run NAME LOG COMMAND...: runs one program with a time limit; a failure is
# reported and remembered, and the comparison goes on.
run() {
  local name="$1" log="$2" rc=0
  shift 2
  echo "compare.sh: $name" >&2
  timeout "$timeout_s" "$@" >"$log" 2>&1 || rc=$?
  if [ "$rc" != 0 ]; then
    failed=1
    [ "$rc" = 124 ] && echo "compare.sh: $name: timed out after ${timeout_s}s (log: $log)" >&2 \
                    || echo "compare.sh: $name failed with exit code $rc (log: $log):" >&2
    tail -n 5 "$log" | sed 's/^/    /' >&2
    return 1
  fi
}

# Reads field $2 of the first JSON line of file $1.
field() { "$py" -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())[sys.argv[2]])' "$1" "$2"; }
json_list() { "$py" -c 'import json,sys; print(",".join(map(str, json.loads(open(sys.argv[1]).readline())[sys.argv[2]])))' "$1" "$2"; }

git_commit="$(git -C "$top" rev-parse --short HEAD 2>/dev/null || echo unknown)"
git -C "$top" diff --quiet HEAD -- 2>/dev/null || git_commit="$git_commit+changes"
# The machine and the paths each side takes on it (benchmarks/peers/machine_info.py:
# CPU model and vector flags, Strata's GEMM, PyTorch's BLAS library and the
# oneDNN kernels of a convolution step), with this run's settings.
"$py" "$top/benchmarks/peers/machine_info.py" --strata-train "$bin/strata-train" \
  --json "$out/machine-info.json" >/dev/null || { echo "compare.sh: machine_info.py failed" >&2; exit 1; }
"$py" - "$out/machine.json" "$out/machine-info.json" "$git_commit" "$reps" "$rounds" "$quick" "${strata_env[@]}" <<'EOF'
import json, subprocess, sys
path, info_path, commit, reps, rounds, quick = sys.argv[1:7]
strata_env = sys.argv[7:]
info = json.load(open(info_path))
torch_info = info.pop("torch")
info.update({"date": subprocess.run(["date", "-u", "+%F %H:%M UTC"], capture_output=True, text=True).stdout.strip(),
             "torch": torch_info.get("version"), "torch_paths": torch_info, "strata_commit": commit,
             "reps": int(reps), "rounds": int(rounds), "quick": quick == "1", "strata_env": strata_env})
json.dump(info, open(path, "w"), indent=1)
EOF

# ------------------------------------------------------------ measurements
torch_mlp="$top/benchmarks/peers/torch_mlp.py"
load start
for round in $(seq 1 "$rounds"); do
  for w in "${wl[@]}"; do
    tag="$w-r$round"
    load "$tag"
    # Strata: one rank per process (local, thread ranks), then MPI processes.
    # The warm-up is one repetition's worth of steps (at least 5).
    steps=$("$py" -c "import sys; print(max(1, int({'W1': 2000, 'W2': 20, 'W3': 2, 'W4': 10, 'W5': 4}['$w'] * $scale)))")
    breakdown=()
    case "$w" in W4|W5) breakdown=(--breakdown) ;; esac
    warmup=$(( steps > min_warmup ? steps : min_warmup ))
    sj="$out/strata-$tag.jsonl"
    run "$w round $round: strata-bench-train local-1x1,local-1x2,dp-threads-2x1" "$out/logs/strata-$tag.log" \
      env "${strata_env[@]}" "$bin/strata-bench-train" --workloads "$w" --configs local-1x1,local-1x2,dp-threads-2x1 \
      --reps "$reps" --warmup "$warmup" --scale "$scale" --json "$sj" "${breakdown[@]}" || true
    [ ${#breakdown[@]} = 0 ] || grep -A 100 "^# $w per layer" "$out/logs/strata-$tag.log" >"$out/breakdown-$tag.txt" || true
    if [ "$have_mpi" = 1 ]; then
      run "$w round $round: mpirun -np 2 strata-bench-train dp-mpi" "$out/logs/strata-mpi-$tag.log" \
        env "${strata_env[@]}" mpirun -np 2 "$bin/strata-bench-train" --workloads "$w" --configs dp-mpi \
        --reps "$reps" --warmup "$warmup" --scale "$scale" --json "$out/strata-mpi-$tag.jsonl" || true
    fi
    if [ ! -s "$sj" ]; then
      echo "compare.sh: no Strata result for $w; skipping its peers" >&2
      continue
    fi
    # The peer runs exactly the shapes, loss, batch and steps Strata ran.
    model="$(field "$sj" model)"
    if [ "$model" != None ]; then shape=(--model "$model"); else shape=(--layers "$(json_list "$sj" widths)"); fi
    peer=(--device cpu "${shape[@]}" --loss "$(field "$sj" loss)"
          --batch-size "$(field "$sj" batch)" --steps "$(field "$sj" steps)" --warmup "$warmup"
          --reps "$reps" --optimizer "$(field "$sj" optimizer)" --lr "$(field "$sj" lr)" --json)
    pj="$out/peers-$tag.jsonl"
    for p in torch-1t torch-2t torch-ddp2; do
      log="$out/logs/$p-$tag.log"
      case "$p" in
        torch-1t) run "$w round $round: PyTorch 1 thread" "$log" \
                    env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$py" "$torch_mlp" "${peer[@]}" --threads 1 ;;
        torch-2t) run "$w round $round: PyTorch 2 threads (OMP_WAIT_POLICY=PASSIVE)" "$log" \
                    env OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE \
                    "$py" "$torch_mlp" "${peer[@]}" --threads 2 ;;
        torch-ddp2) run "$w round $round: PyTorch DDP gloo 2 processes x 1 thread" "$log" \
                    env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$py" "$torch_mlp" "${peer[@]}" --threads 1 --ddp 2 ;;
      esac && tail -n 1 "$log" >>"$pj" || true
    done
  done
done

if [ "$collectives" = 1 ]; then
  load collectives
  coll=(--json "$out/collectives.jsonl")
  [ "$quick" = 1 ] && coll+=(--max-bytes $((4 << 20)) --reps 2)
  if [ "$have_mpi" = 1 ]; then
    # --bind-to none: Open MPI binds each of 2 processes to one core, and the
    # thread ranks inside a process would then share that core.
    run "allreduce: mpirun -np 2 --bind-to none strata-bench-collectives (raw MPI, Strata MPI, thread ranks)" \
      "$out/logs/collectives.log" mpirun -np 2 --bind-to none "$bin/strata-bench-collectives" "${coll[@]}" || true
  else
    run "allreduce: strata-bench-collectives (thread ranks)" "$out/logs/collectives.log" \
      "$bin/strata-bench-collectives" "${coll[@]}" || true
  fi
fi
load end

# ------------------------------------------------------------ report
"$py" "$top/benchmarks/plots/summarize.py" "$out" || failed=1
if [ "$plots" = 1 ]; then
  "$py" "$top/benchmarks/plots/plot.py" "$out" || { echo "compare.sh: charts failed (see above)" >&2; failed=1; }
fi
echo "compare.sh: results in $out (results.csv, results.json, table.md$([ "$plots" = 1 ] && echo ", *.png"))" >&2
[ "$failed" = 0 ] || { echo "compare.sh: some programs failed; their rows are missing (logs in $out/logs)" >&2; exit 1; }
