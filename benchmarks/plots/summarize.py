#!/usr/bin/env python3
"""Summarises a scripts/compare.sh output folder: one table of Strata against
its PyTorch peers, printed and written as results.csv, results.json and
table.md (markdown, ready to paste into docs/benchmarks.md).

Reads strata-*.jsonl (strata-bench-train --json), peers-*.jsonl
(torch_mlp.py --json), load.jsonl and machine.json. Repetitions of several
rounds are pooled: samples/s median [min-max] over all of them. Ratio =
Strata median / peer median. "of sgemm" = GFLOP/s (the step's GEMM
operations per sample, step_flops_per_sample: 6 x weights less the first
layer's never computed input gradient) / the sgemm rate that
strata-bench-train measured for the step's GEMM shapes on the
configuration's threads just before and after its runs (median over rounds).

Usage: summarize.py OUT_DIR
Exit codes: 0 done, 2 bad usage, 3 no results in OUT_DIR.
"""
import csv
import glob
import json
import os
import statistics
import sys

# Strata configuration -> the peer it is compared with.
PAIRS = [("local-1x1", "torch-1x1"), ("local-1x2", "torch-1x2"),
         ("dp-threads-2x1", "torch-ddp-2x1"), ("dp-mpi-2x1", "torch-ddp-2x1")]
PEER_NAMES = {"torch-1x1": "PyTorch, 1 thread", "torch-1x2": "PyTorch, 2 threads",
              "torch-ddp-2x1": "PyTorch DDP gloo, 2 proc. x 1 thread"}
# Rows whose sides differ in kind, said in the peer's cell: Strata's thread
# ranks share one process, DDP's ranks are two processes.
UNLIKE = {"dp-threads-2x1": " (processes; Strata: threads of one)"}
NOISY = 1.2  # max / min above this: a noisy measurement


def read_jsonl(pattern):
    rows = []
    for path in sorted(glob.glob(pattern)):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    rows.append(json.loads(line))
    return rows


def strata_label(r):
    if r["config"] == "local":
        return "local-1x%d" % r["threads"]
    return "%s-%dx%d" % (r["config"], r["ranks"], r["threads"])


def peer_label(r):
    if r.get("processes", 1) > 1:
        return "torch-ddp-%dx%d" % (r["processes"], r.get("threads") or 1)
    return "torch-1x%d" % (r.get("threads") or 1)


def summary(rates):
    if not rates:
        return None
    return {"median": statistics.median(rates), "min": min(rates), "max": max(rates), "n": len(rates),
            "noisy": max(rates) / min(rates) > NOISY}


def fmt_rate(s):
    if s is None:
        return "-"
    def f(v):
        return "%.0f" % v if v >= 100 else "%.1f" % v
    return "%s [%s-%s]%s" % (f(s["median"]), f(s["min"]), f(s["max"]), " *" if s["noisy"] else "")


def collect(out):
    strata = read_jsonl(os.path.join(out, "strata-*.jsonl"))
    peers = read_jsonl(os.path.join(out, "peers-*.jsonl"))
    workloads = []
    by = {}
    for r in strata:
        if r["workload"] not in workloads:
            workloads.append(r["workload"])
        e = by.setdefault((r["workload"], strata_label(r)), {"rates": [], "sgemm": [], "info": r})
        e["rates"] += r.get("rates") or [r["samples_per_sec"]]
        e["sgemm"].append(r["sgemm_gflops"])
    peer_by = {}
    for r in peers:
        # Map the peer's shapes back to a workload through Strata's widths
        # (MLPs) or model file (W4).
        def same_model(x):
            if r.get("model"):
                return os.path.basename(x.get("model") or "") == os.path.basename(r["model"])
            return not x.get("model") and x["widths"] == r["layers"]
        w = next((x["workload"] for x in strata if same_model(x) and x["batch"] == r["batch_size"]), None)
        if w is None:
            continue
        e = peer_by.setdefault((w, peer_label(r)), {"rates": [], "info": r})
        e["rates"] += r.get("rates") or [r["samples_per_sec"]]
    rows = []
    for w in sorted(workloads):
        for config, peer in PAIRS:
            s, p = by.get((w, config)), peer_by.get((w, peer))
            if s is None:
                continue
            info = s["info"]
            # per sample: the GEMM operations a step performs (older files: 6 x weights)
            flops = info["step_flops_per_sample"] if "step_flops_per_sample" in info else 6.0 * info["weights"]
            sgemm = statistics.median(s["sgemm"])
            ss, ps = summary(s["rates"]), summary(p["rates"]) if p else None
            row = {"workload": w, "config": config, "ranks": info["ranks"], "threads": info["threads"],
                   "batch": info["batch"], "widths": info["widths"], "steps": info["steps"],
                   "strata": ss, "peer": PEER_NAMES[peer] + UNLIKE.get(config, ""), "peer_id": peer, "peer_rate": ps,
                   "ratio": ss["median"] / ps["median"] if ps else None,
                   "sgemm_gflops": sgemm,
                   "strata_gflops": ss["median"] * flops / 1e9,
                   "peer_gflops": ps["median"] * flops / 1e9 if ps else None}
            row["strata_of_sgemm"] = row["strata_gflops"] / sgemm if sgemm > 0 else None
            row["peer_of_sgemm"] = row["peer_gflops"] / sgemm if ps and sgemm > 0 else None
            rows.append(row)
    config = strata[0].get("configuration", "") if strata else ""
    peer_info = peers[0] if peers else {}
    return rows, config, peer_info


def pct(v):
    return "-" if v is None else "%.0f%%" % (100 * v)


def ratio(v):
    return "-" if v is None else "%.2f" % v


def load_line(out):
    loads = read_jsonl(os.path.join(out, "load.jsonl"))
    if not loads:
        return "", []
    l1 = [x["load1"] for x in loads]
    return ("load average (1 min) %.2f to %.2f over the run (median %.2f), sampled %d times"
            % (min(l1), max(l1), statistics.median(l1), len(l1))), loads


def machine_kind(machine):
    """The machine kind a figure holds for: CPU, vector flags, the paths each side takes."""
    flags = machine.get("cpu_flags")
    tp = machine.get("torch_paths") or {}
    strata = machine.get("strata") or {}
    parts = ["CPU %s, %s cores, flags %s" % (machine.get("cpu", "?"), machine.get("host_cores", "?"),
                                               " ".join(flags) if flags else "(not recorded)")]
    if strata.get("gemm"):
        parts.append("Strata " + strata["gemm"])
    if tp:
        parts.append("PyTorch %s: ATen %s, BLAS %s, oneDNN %s kernels %s" % (
            tp.get("version", "?"), tp.get("cpu_capability", "?"),
            " ".join(os.path.basename(b) for b in (tp.get("blas_library") or [])) or tp.get("blas_info", "?"),
            tp.get("onednn", "?"),
            " ".join(tp["onednn_kernels"]) if isinstance(tp.get("onednn_kernels"), list) else tp.get("onednn_kernels", "?")))
    return "; ".join(parts)


def main(argv):
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    out = argv[0]
    rows, config, peer_info = collect(out)
    if not rows:
        print("summarize.py: no strata-bench-train results (strata-*.jsonl) in %s" % out, file=sys.stderr)
        return 3
    machine = {}
    if os.path.exists(os.path.join(out, "machine.json")):
        machine = json.load(open(os.path.join(out, "machine.json")))
    load_text, loads = load_line(out)
    noisy = any(r["strata"]["noisy"] or (r["peer_rate"] and r["peer_rate"]["noisy"]) for r in rows)
    reps = "%d repetitions x %d round(s)" % (machine.get("reps", 0), machine.get("rounds", 1)) if machine else ""

    header = ["workload", "config", "Strata samples/s", "peer", "peer samples/s", "ratio",
              "Strata of sgemm", "peer of sgemm"]
    table = [[r["workload"], r["config"], fmt_rate(r["strata"]), r["peer"], fmt_rate(r["peer_rate"]),
              ratio(r["ratio"]), pct(r["strata_of_sgemm"]), pct(r["peer_of_sgemm"])] for r in rows]

    # Console table.
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(header)]
    print("# Strata vs PyTorch: samples/s median [min-max] over %s; ratio = Strata / peer; * = max/min > %.1f"
          % (reps, NOISY))
    print("# %s" % config)
    strata_env = " ".join(machine.get("strata_env") or []) or "none (defaults)"
    print("# Strata's extra environment: %s; the 2-thread peer runs with OMP_WAIT_POLICY=PASSIVE" % strata_env)
    if peer_info:
        print("# peer: torch %s, %s" % (peer_info.get("torch"), sys.executable))
    if machine:
        print("# %s, %s cores (%s), %s" % (machine.get("date"), machine.get("host_cores"), machine.get("cpu"),
                                          load_text))
        print("# %s" % machine_kind(machine))
    print("  ".join(h.ljust(widths[i]) for i, h in enumerate(header)))
    for t in table:
        print("  ".join(c.ljust(widths[i]) if i in (0, 1, 3) else c.rjust(widths[i]) for i, c in enumerate(t)))
    if noisy:
        print("# some rows are noisy (max/min > %.1f): the machine was busy; re-run when it is quiet" % NOISY)

    # CSV and JSON.
    with open(os.path.join(out, "results.csv"), "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["workload", "config", "ranks", "threads", "batch", "steps_per_rep",
                     "strata_median", "strata_min", "strata_max", "strata_n",
                     "peer", "peer_median", "peer_min", "peer_max", "peer_n", "ratio",
                     "sgemm_gflops", "strata_gflops", "peer_gflops", "strata_of_sgemm", "peer_of_sgemm"])
        for r in rows:
            s, p = r["strata"], r["peer_rate"] or {}
            wr.writerow([r["workload"], r["config"], r["ranks"], r["threads"], r["batch"], r["steps"],
                         "%.1f" % s["median"], "%.1f" % s["min"], "%.1f" % s["max"], s["n"], r["peer"],
                         p and "%.1f" % p["median"], p and "%.1f" % p["min"], p and "%.1f" % p["max"],
                         p and p["n"], r["ratio"] and "%.3f" % r["ratio"], "%.2f" % r["sgemm_gflops"],
                         "%.2f" % r["strata_gflops"], r["peer_gflops"] and "%.2f" % r["peer_gflops"],
                         r["strata_of_sgemm"] and "%.3f" % r["strata_of_sgemm"],
                         r["peer_of_sgemm"] and "%.3f" % r["peer_of_sgemm"]])
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"machine": machine, "strata_configuration": config,
                   "peer": {k: peer_info.get(k) for k in ("torch", "dtype", "optimizer")},
                   "load": loads, "rows": rows}, f, indent=1)

    # Markdown, ready to paste.
    md = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    md += ["| " + " | ".join(t) + " |" for t in table]
    notes = ["Measured %s with `scripts/compare.sh` on %s cores (%s); %s." % (
                 machine.get("date", "?"), machine.get("host_cores", "?"), machine.get("cpu", "?"), load_text),
             "Samples/s: median [min-max] over %s; * marks max/min > %.1f (noisy). Ratio: Strata median / "
             "peer median, measured back to back in the same run. \"of sgemm\": GFLOP/s (the GEMM "
             "operations a step performs) over the OpenBLAS sgemm rate of the same GEMM shapes on the same "
             "threads, measured by strata-bench-train just before and after the configuration's runs." % (reps, NOISY),
             machine_kind(machine) + ".",
             "%s; PyTorch %s (Debian), fp32, SGD lr 0.01 (W5: AdamW lr 1e-3, samples of 128 tokens), "
             "synthetic data. Strata's extra environment: %s; "
             "the 2-thread peer runs with OMP_WAIT_POLICY=PASSIVE." % (config, peer_info.get("torch", "?"), strata_env)]
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write("\n".join(md) + "\n\n" + "\n\n".join(notes) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
