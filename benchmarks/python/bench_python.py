#!/usr/bin/env python3
"""The Python binding's overhead: a Python loop over strata.Trainer.step()
against strata-train on the same workload, options and synthetic data,
interleaved (strata-train, Python, strata-train, Python, ...).

    PYTHONPATH=build/python /usr/bin/python3 benchmarks/python/bench_python.py \
        --train build/bin/strata-train [--workloads W2,W4,W5] [--pairs 3]

Both time the steps after the warm-up steps. strata-train's samples/s counts
each step's engine time (its loader prepares the next batch in the
background); the Python loop's counts everything between its first timed step
and its last (slicing the batch out of a NumPy array, the call, the GIL), so
the ratio is what a script pays for driving the steps itself. Prints the
medians [min-max] per workload, the ratio Python / strata-train, and the CPU.
"""
import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve()
SOURCE = HERE.parents[2]

# Workloads of docs/benchmarks.md (W2: MLP, W4: the CNN, W5: gpt-mini).
WORKLOADS = {
    "W2": dict(model=["--layers", "784,1024,1024,10"], batch=256, steps=60, samples=8192,
               options=dict(optimizer="sgd", lr=0.01)),
    "W4": dict(model=["--model", str(SOURCE / "models/cnn-fashion.toml")], batch=128, steps=20,
               samples=3072, options=dict(optimizer="sgd", lr=0.01)),
    "W5": dict(model=["--model", str(SOURCE / "models/gpt-mini.toml")], batch=32, steps=12,
               samples=512, options=dict(optimizer="adamw", lr=3e-4)),
}
WARMUP = 3


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def cli(options):
    out = []
    for k, v in options.items():
        out += ["--" + k.replace("_", "-"), str(v)]
    return out


def run_strata_train(exe, w, work):
    metrics = pathlib.Path(work) / "m.jsonl"
    if metrics.exists():
        metrics.unlink()
    args = [exe, *w["model"], "--dataset", "synthetic", "--samples", str(w["samples"]),
            "--test-fraction", "0", "--no-eval", "--batch-size", str(w["batch"]),
            "--steps", str(w["steps"]), "--warmup-steps", str(WARMUP), "--no-shuffle", "--quiet",
            "--metrics", str(metrics), *cli(w["options"])]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"strata-train failed: {' '.join(args)}\n{r.stderr}")
    final = [json.loads(line) for line in metrics.read_text().splitlines()][-1]
    return final["samples_per_sec"]


def run_python(strata, w, data):
    model_args = w["model"]
    model = (strata.Model.from_file(model_args[1]) if model_args[0] == "--model"
             else strata.Model.mlp([int(v) for v in model_args[1].split(",")]))
    t = strata.Trainer(model, dataset="synthetic", samples=w["samples"], test_fraction=0,
                       batch_size=w["batch"], shuffle=False, **w["options"])
    x, y = data["train_x"], data["train_y"]
    b = w["batch"]
    per_epoch = len(x) // b
    start = None
    for s in range(w["steps"]):
        i = s % per_epoch
        t.step(x[i * b:(i + 1) * b], y[i * b:(i + 1) * b])
        if s + 1 == WARMUP:
            start = time.perf_counter()
    return (w["steps"] - WARMUP) * b / (time.perf_counter() - start)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train", default=str(SOURCE / "build/bin/strata-train"), help="strata-train")
    p.add_argument("--workloads", default="W2,W4,W5", help="comma-separated: W2, W4, W5")
    p.add_argument("--pairs", type=int, default=3, help="interleaved pairs per workload")
    a = p.parse_args()
    import strata
    names = [n.strip() for n in a.workloads.split(",") if n.strip()]
    for n in names:
        if n not in WORKLOADS:
            sys.exit(f"--workloads: unknown workload {n} (known: {', '.join(WORKLOADS)})")
    print(f"# CPU: {cpu_model()}, {os.cpu_count()} cores; {strata.build_info().splitlines()[0]}")
    print(f"# {strata.threads() or os.cpu_count()} host threads in both; {a.pairs} interleaved pairs")
    print("| workload | strata-train samples/s | Python loop samples/s | Python / strata-train |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as work:
        for n in names:
            w = WORKLOADS[n]
            # strata-train's synthetic data for this model (layers= or model=)
            data = strata.datasets.load("synthetic", samples=w["samples"], test_fraction=0,
                                        **{w["model"][0].lstrip("-"): w["model"][1]})
            native, python = [], []
            for i in range(a.pairs):
                native.append(run_strata_train(a.train, w, work))
                python.append(run_python(strata, w, data))
                print(f"#   {n} pair {i + 1}: strata-train {native[-1]:,.0f}, Python {python[-1]:,.0f}",
                      file=sys.stderr, flush=True)
            ratios = [p_ / n_ for p_, n_ in zip(python, native)]

            def fmt(v):
                return f"{statistics.median(v):,.0f} [{min(v):,.0f}-{max(v):,.0f}]"
            print(f"| {n} | {fmt(native)} | {fmt(python)} | {statistics.median(ratios):.3f} "
                  f"[{min(ratios):.3f}-{max(ratios):.3f}] |", flush=True)


if __name__ == "__main__":
    main()
