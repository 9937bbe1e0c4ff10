#!/usr/bin/env python3
"""Training and validation loss against steps for runs that wrote metrics in
strata-train's JSON-lines format (strata-train --metrics, or the PyTorch peer
benchmarks/peers/torch_lm.py --metrics), one curve per run.

  python3 benchmarks/plots/lm_curves.py strata.jsonl:Strata torch.jsonl:PyTorch -o curves.png

Each argument is FILE or FILE:LABEL. Training losses are drawn as logged
(strata-train logs every --log-every steps; points of a run at the same steps
are comparable), validation losses as markers. Prints the final validation
loss of each run. Exit codes: 0 done, 2 bad arguments or files.
"""
import argparse
import json
import sys


def load(path):
    train, test = [], []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                j = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit("lm_curves: %s, line %d: not JSON (%s)" % (path, n, e))
            if "step" in j and "loss" in j:
                train.append((j["step"], j["loss"]))
            if "step" in j and "test_loss" in j:
                test.append((j["step"], j["test_loss"]))
    return train, test


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="FILE or FILE:LABEL")
    p.add_argument("-o", "--output", default="curves.png")
    p.add_argument("--title", default="training and validation loss")
    a = p.parse_args(argv)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 5))
    for i, run in enumerate(a.runs):
        path, _, label = run.partition(":")
        train, test = load(path)
        if not train and not test:
            print("lm_curves: %s holds no losses" % path, file=sys.stderr)
            return 2
        color = "C%d" % i
        label = label or path
        if train:
            ax.plot([s for s, _ in train], [l for _, l in train], color=color, alpha=0.45,
                    linewidth=1, label=label + " (training)")
        if test:
            ax.plot([s for s, _ in test], [l for _, l in test], "o-", color=color,
                    label=label + " (validation)")
            print("%s: final validation loss %.4f at step %d" % (label, test[-1][1], test[-1][0]))
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy per token (nats)")
    ax.set_title(a.title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(a.output, dpi=120)
    print("lm_curves: wrote %s" % a.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
