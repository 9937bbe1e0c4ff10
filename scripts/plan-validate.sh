#!/usr/bin/env bash
# Validates strata-plan on this machine: calibrates it for each model
# (strata-plan calibrate --model ... --ranks 2: the machine and the model's
# layers), then for each layout below measures strata-train's samples/s
# (median of --reps runs, the layouts taking turns round by round) and asks strata-plan for its prediction of the same
# layout, and writes the table (markdown), the errors and a plot of
# predicted against measured samples/s into the output folder. Layouts: the
# MLP of W2 (784-1024-1024-10, batch 256, SGD), the CNN of
# models/cnn-fashion.toml (batch 64, SGD) and gpt-mini (batch 8 of 128
# tokens, AdamW), each on 1 rank x all cores, data-parallel, pipeline and
# tensor-parallel thread ranks, two MPI runs (2 processes), and the layout
# `strata-train --strategy plan` chooses for each model on its profile.
#
# Usage: scripts/plan-validate.sh [--out DIR] [--reps N] [--no-build]
# Run it on a quiet machine (nothing else running): it measures.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
top="$(dirname "$here")"
build="${BUILD_DIR:-$top/build}"
out="$build/plan-validate"
reps=3
do_build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --reps) reps="$2"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "plan-validate: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
# shellcheck source=scripts/common.sh
source "$here/common.sh"
[ "$do_build" = 1 ] && "$here/build.sh" >/dev/null
[ "${STRATA_NO_APT:-0}" = 1 ] || strata_apt_install python3-matplotlib  # the plot
bin="$build/bin"
mkdir -p "$out"
# The plan of each model: its options for strata-plan.
plan_mlp=(--layers 784,1024,1024,10 --batch 256 --optimizer sgd)
plan_cnn=(--model "$top/models/cnn-fashion.toml" --batch 64 --optimizer sgd)
plan_gpt=(--model "$top/models/gpt-mini.toml" --batch 8 --optimizer adamw)
# One profile per model: the machine, and its layers as its 2-rank
# layouts and one rank with every core run them, its optimizer's update,
# and its whole steps on 2 data-parallel ranks and on one.
for model in mlp cnn gpt; do
  declare -n plan="plan_$model"
  echo "plan-validate: calibrating this machine for the $model"
  "$bin/strata-plan" calibrate --output "$out/machine-$model.json" "${plan[@]}" --ranks 2 2>&1 |
    sed 's/^/  /'
done

mlp=(--layers 784,1024,1024,10 --dataset synthetic --batch-size 256 --steps 60 --optimizer sgd --lr 0.01)
cnn=(--model "$top/models/cnn-fashion.toml" --dataset synthetic --batch-size 64 --steps 60 --optimizer sgd --lr 0.01)
gpt=(--model "$top/models/gpt-mini.toml" --dataset fortunes --test-fraction 0.01 --batch-size 8 --steps 25 --optimizer adamw --lr 1e-3)
# name | launcher (thread ranks: "", MPI: "mpi") | model | ranks | layout options
layouts=(
  "mlp 1 rank||mlp|1|"
  "mlp dp2||mlp|2|"
  "mlp dp2 ZeRO-1||mlp|2|--zero 1"
  "mlp dp2 ZeRO-2||mlp|2|--zero 2"
  "mlp dp2 ZeRO-3||mlp|2|--zero 3"
  "mlp pp2 4 micro||mlp|2|--pp 2 --micro-batches 4"
  "mlp pp2 8 micro gpipe||mlp|2|--pp 2 --micro-batches 8 --schedule gpipe"
  "mlp tp2||mlp|2|--tp 2"
  "mlp dp2 (MPI)|mpi|mlp|2|"
  "cnn 1 rank||cnn|1|"
  "cnn dp2||cnn|2|"
  "cnn pp2 4 micro||cnn|2|--pp 2 --micro-batches 4"
  "gpt 1 rank||gpt|1|"
  "gpt dp2||gpt|2|"
  "gpt dp2 ZeRO-3||gpt|2|--zero 3"
  "gpt tp2||gpt|2|--tp 2"
  "gpt tp2 seq-parallel||gpt|2|--tp 2 --sequence-parallel"
  "gpt pp2 4 micro||gpt|2|--pp 2 --micro-batches 4"
  "gpt tp2 (MPI)|mpi|gpt|2|--tp 2"
  # What `strata-train --strategy plan` chooses on the same profile (the
  # whole search, its tie-break included), measured like the others.
  "mlp plan|plan|mlp|2|"
  "cnn plan|plan|cnn|2|"
  "gpt plan|plan|gpt|2|"
)
table="$out/validation.tsv"
printf 'layout\tranks\tmeasured\tpredicted\n' >"$table"
# One run of layout entry $1 (into $log), and its samples/s (into $rate).
run_once() {
  IFS='|' read -r name launcher model ranks opts <<<"$1"
  declare -n args="$model"
  read -r -a layout <<<"$opts"
  if [ "$launcher" = plan ]; then
    log="$("$bin/strata-train" "${args[@]}" --ranks "$ranks" --strategy plan \
      --plan-profile "$out/machine-$model.json" 2>&1)"
  elif [ "$launcher" = mpi ]; then
    log="$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np "$ranks" --bind-to none \
      "$bin/strata-train" "${args[@]}" --threads 1 "${layout[@]}" 2>&1)"
  else
    log="$("$bin/strata-train" "${args[@]}" --ranks "$ranks" "${layout[@]}" 2>&1)"
  fi
  rate="$(grep '^done' <<<"$log" | grep -oE '[0-9]+ samples/s' | cut -d' ' -f1 | tail -1)"
  [ -n "$rate" ] || { echo "plan-validate: $name: no samples/s in strata-train's output:" >&2; tail -5 <<<"$log" >&2; exit 1; }
}
# The repetitions interleaved: every layout once per round, so that a slow
# phase of the machine falls on all of them alike (the planner's choice
# and the same layout's row above all).
declare -A rates logs
for ((r = 0; r < reps; r++)); do
  echo "plan-validate: round $((r + 1)) of $reps over ${#layouts[@]} layouts"
  for i in "${!layouts[@]}"; do
    run_once "${layouts[$i]}"
    rates[$i]+="$rate "
    logs[$i]="$log"
  done
done
for i in "${!layouts[@]}"; do
  IFS='|' read -r name launcher model ranks opts <<<"${layouts[$i]}"
  read -r -a layout <<<"$opts"
  measured="$(tr ' ' '\n' <<<"${rates[$i]}" | grep . | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')"
  declare -n plan="plan_$model"
  if [ "$launcher" = plan ]; then  # "plan: LAYOUT (predicted on ...: N samples/s, ..."
    choice="$(grep -m1 '^plan: ' <<<"${logs[$i]}")"
    predicted="$(grep -oE '[0-9.]+ samples/s' <<<"$choice" | head -1 | cut -d' ' -f1)"
    name="$name: $(sed -E 's/^plan: ([^(]*) \(.*/\1/' <<<"$choice")"
  else
    predicted="$("$bin/strata-plan" "${plan[@]}" --ranks "$ranks" --profile "$out/machine-$model.json" --only \
      "${layout[@]}" | tail -1 | awk '{ print $(NF - 9) }')"
  fi
  printf '%s\t%s\t%s\t%s\n' "$name" "$ranks" "$measured" "$predicted" >>"$table"
  printf '  %-24s measured %8s  predicted %10s samples/s\n' "$name" "$measured" "$predicted"
done
/usr/bin/python3 - "$table" "$out" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter='\t'))
errs = []
lines = ['| layout | measured samples/s | predicted | error |', '|---|---|---|---|']
def chosen(r):
    return ' plan: ' in r['layout']
for r in rows:
    m, p = float(r['measured']), float(r['predicted'])
    e = (p - m) / m
    if not chosen(r):  # the planner's choices repeat a layout: not counted twice
        errs.append(abs(e))
    lines.append(f"| {r['layout']} | {m:,.0f} | {p:,.0f} | {e:+.0%} |")
lines.append('')
lines.append(f"median absolute error {statistics.median(errs):.0%} over {len(errs)} layouts; "
             f"largest {max(errs):.0%}")
# Per model and rank count: the layout `strata-train --strategy plan` chose
# (else the one predicted fastest among these), against the best measured.
for model in dict.fromkeys((r['layout'].split()[0], r['ranks']) for r in rows):
    mine = [r for r in rows if (r['layout'].split()[0], r['ranks']) == model]
    if len(mine) < 2:
        continue
    picks = [r for r in mine if chosen(r)]
    top = picks[0] if picks else max(mine, key=lambda r: float(r['predicted']))
    best = max(mine, key=lambda r: float(r['measured']))
    lines.append(f"{model[0]} on {model[1]} ranks: the planner's choice '{top['layout']}' measures {float(top['measured']):,.0f}, "
                 f"{float(top['measured']) / float(best['measured']):.0%} of the best measured "
                 f"('{best['layout']}', {float(best['measured']):,.0f})")
open(sys.argv[2] + '/validation.md', 'w').write('\n'.join(lines) + '\n')
print('\n'.join(lines))
try:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5.5, 5))
    ms = [float(r['measured']) for r in rows]
    ps = [float(r['predicted']) for r in rows]
    ax.loglog(ms, ps, 'o')
    lo, hi = min(ms + ps) / 1.3, max(ms + ps) * 1.3
    ax.plot([lo, hi], [lo, hi], 'k--', lw=0.8, label='predicted = measured')
    ax.fill_between([lo, hi], [lo * 0.85, hi * 0.85], [lo * 1.15, hi * 1.15], alpha=0.15,
                    label='within 15%')
    for r, m, p in zip(rows, ms, ps):
        ax.annotate(r['layout'], (m, p), fontsize=6, xytext=(3, 3), textcoords='offset points')
    ax.set_xlabel('measured samples/s (strata-train)')
    ax.set_ylabel('predicted samples/s (strata-plan)')
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(sys.argv[2] + '/validation.png', dpi=130)
except ImportError:
    print('plan-validate: no matplotlib; no plot')
PY
echo "plan-validate: wrote $out/validation.md, validation.tsv and validation.png"
