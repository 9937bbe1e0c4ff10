#!/usr/bin/env python3
"""strata-plot: draws training runs from the JSON-lines metrics that
strata-train --metrics writes (and benchmarks/peers/torch_lm.py --metrics),
one colour per run, into a PNG: training loss with the test loss as markers,
test accuracy (classification runs), and samples/s, against steps or time.

  strata-plot run.jsonl                                  # -> curves.png
  strata-plot dp.jsonl:"2 thread ranks" pp.jsonl:pipeline -o strategies.png
  strata-plot fp32.jsonl bf16.jsonl --x time -o precision.png

Each run is FILE or FILE:LABEL (the label defaults to the file's name).
Prints what it drew from each run. Needs matplotlib (Debian:
python3-matplotlib). Exit codes: 0 done, 2 bad options, 3 bad input data
(a file missing, empty, not JSON lines, or without metrics), 4 matplotlib
missing.
"""
import argparse
import json
import os
import sys

PROG = "strata-plot"


class BadInput(Exception):
    pass


def load(path):
    """The run's training log, evaluations and summary, in file order."""
    if not os.path.exists(path):
        raise BadInput("%s: no such file" % path)
    try:
        text = open(path, encoding="utf-8").read()
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput("%s: cannot read it (%s)" % (path, e))
    run = {"train": [], "test": [], "summary": None}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            j = json.loads(line)
        except json.JSONDecodeError as e:
            raise BadInput("%s, line %d: not JSON (%s)" % (path, n, e.msg))
        if not isinstance(j, dict):
            raise BadInput("%s, line %d: not a JSON object" % (path, n))
        if "step" in j and "loss" in j:
            run["train"].append(j)
        elif "step" in j and ("test_loss" in j or "test_accuracy" in j):
            run["test"].append(j)
        elif "steps" in j:
            run["summary"] = j
    if not run["train"] and not run["test"]:
        what = "is empty" if not text.strip() else "holds no training or evaluation lines"
        raise BadInput("%s %s (write one with strata-train --metrics FILE)" % (path, what))
    return run


def series(points, x, y, path):
    """(xs, ys) of the points that have y; x is 'step' or 'wall_s'."""
    xs, ys = [], []
    for j in points:
        if j.get(y) is None:
            continue
        if j.get(x) is None:
            raise BadInput("%s: a line at step %s has no %s (metrics written before Strata "
                           "logged it; plot with --x step)" % (path, j.get("step"), x))
        xs.append(j[x])
        ys.append(j[y])
    return xs, ys


def main(argv=None):
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", metavar="RUN", help="FILE or FILE:LABEL")
    p.add_argument("-o", "--output", default="curves.png", help="the PNG to write (default: %(default)s)")
    p.add_argument("--x", choices=["step", "time"], default="step",
                   help="the horizontal axis: steps, or seconds since the run began (default: %(default)s)")
    p.add_argument("--title", default="", help="a title above the panels")
    p.add_argument("--version", action="version", version="%(prog)s (Strata)")
    a = p.parse_args(argv)
    x = "step" if a.x == "step" else "wall_s"
    out_dir = os.path.dirname(os.path.abspath(a.output))
    if not os.path.isdir(out_dir):
        print("%s: -o %s: the folder %s does not exist" % (PROG, a.output, out_dir), file=sys.stderr)
        return 2
    runs = []
    try:
        for spec in a.runs:
            # FILE:LABEL, unless the whole argument names a file.
            path, label = spec, ""
            if not os.path.exists(spec) and ":" in spec:
                path, _, label = spec.partition(":")
            run = load(path)
            run["label"] = label or os.path.basename(path)
            run["loss"] = series(run["train"], x, "loss", path)
            run["test_loss"] = series(run["test"], x, "test_loss", path)
            run["accuracy"] = series(run["test"], x, "test_accuracy", path)
            run["rate"] = series(run["train"], x, "samples_per_sec", path)
            runs.append(run)
    except BadInput as e:
        print("%s: %s" % (PROG, e), file=sys.stderr)
        return 3
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("%s: needs matplotlib (Debian: apt-get install python3-matplotlib; "
              "this is %s)" % (PROG, sys.executable), file=sys.stderr)
        return 4
    panels = ["loss"]
    if any(r["accuracy"][0] for r in runs):
        panels.append("accuracy")
    if any(r["rate"][0] for r in runs):
        panels.append("rate")
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False)
    axes = dict(zip(panels, axes[0]))
    for i, r in enumerate(runs):
        c = "C%d" % (i % 10)
        ax = axes["loss"]
        if r["loss"][0]:
            ax.plot(*r["loss"], color=c, linewidth=1, alpha=0.55, label=r["label"] + " (training)")
        if r["test_loss"][0]:  # above the training curves
            ax.plot(*r["test_loss"], "o-", color=c, markersize=4, linewidth=1.8, zorder=3,
                    label=r["label"] + " (test)")
        if "accuracy" in axes and r["accuracy"][0]:
            axes["accuracy"].plot(*r["accuracy"], "o-", color=c, markersize=4, label=r["label"])
        if "rate" in axes and r["rate"][0]:
            axes["rate"].plot(*r["rate"], color=c, linewidth=1.2, label=r["label"])
        # What was drawn, for the log (and the tests).
        parts = ["%d training points" % len(r["loss"][0])]
        if r["loss"][0]:
            parts.append("final loss %.6g at step %s" % (r["loss"][1][-1], r["train"][-1]["step"]))
        if r["test"]:
            parts.append("%d evaluations" % len(r["test"]))
        if r["accuracy"][0]:
            parts.append("final test accuracy %.4g" % r["accuracy"][1][-1])
        if r["test_loss"][0]:
            parts.append("final test loss %.6g" % r["test_loss"][1][-1])
        s = r["summary"]
        if s and s.get("samples_per_sec") is not None:
            parts.append("%.0f samples/s" % s["samples_per_sec"])
        print("%s: %s" % (r["label"], ", ".join(parts)))
    xlabel = "step" if x == "step" else "seconds since the run began"
    titles = {"loss": ("loss", "loss"), "accuracy": ("test accuracy", "accuracy"),
              "rate": ("training throughput (after the warm-up steps)", "samples/s")}
    for name, ax in axes.items():
        ax.set_title(titles[name][0], fontsize=10)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(titles[name][1])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if a.title:
        fig.suptitle(a.title)
    fig.tight_layout()
    try:
        fig.savefig(a.output, dpi=110)
    except OSError as e:
        print("%s: -o %s: cannot write it (%s)" % (PROG, a.output, e), file=sys.stderr)
        return 2
    print("%s: wrote %s (%s)" % (PROG, a.output, ", ".join(titles[n][0] for n in panels)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
