#!/usr/bin/env python3
"""Draws the charts of a scripts/compare.sh output folder (PNG, matplotlib):

  throughput.png      samples/s per workload and configuration, Strata beside
                      its PyTorch peer (bars: median, whiskers: min-max)
  scaling.png         samples/s against the cores used (1 -> 2) for each way
                      of using them: threads in one rank, thread ranks, MPI
                      processes (Strata); threads, DDP processes (PyTorch)
  allreduce_busbw.png allreduce bus bandwidth against message size for each
                      communicator of strata-bench-collectives (median,
                      band: min-max), with the read bound

Reads results.json (written by summarize.py), collectives.jsonl and
logs/collectives.log. Usage: plot.py OUT_DIR
Exit codes: 0 done, 2 bad usage, 3 matplotlib missing (Debian:
python3-matplotlib, for /usr/bin/python3), 4 no results.
"""
import json
import os
import re
import sys

STRATA_COLOR, PEER_COLOR = "#1f77b4", "#ff7f0e"


def load_rows(out):
    path = os.path.join(out, "results.json")
    if not os.path.exists(path):
        return None
    return json.load(open(path))


def stamp(fig, results):
    m = results.get("machine", {})
    loads = [x["load1"] for x in results.get("load", [])]
    load = " load %.1f-%.1f" % (min(loads), max(loads)) if loads else ""
    fig.text(0.01, 0.005, "%s, %s cores%s, Strata %s, torch %s" % (
        m.get("date", ""), m.get("host_cores", "?"), load, m.get("strata_commit", "?"),
        results.get("peer", {}).get("torch", "?")), fontsize=7, color="gray")


def throughput(plt, results, out):
    rows = results["rows"]
    workloads = sorted({r["workload"] for r in rows})
    fig, axes = plt.subplots(1, len(workloads), figsize=(4.2 * len(workloads), 4.2), squeeze=False)
    for ax, w in zip(axes[0], workloads):
        rs = [r for r in rows if r["workload"] == w]
        xs = range(len(rs))
        for k, (key, color, label, dx) in enumerate([("strata", STRATA_COLOR, "Strata", -0.2),
                                                      ("peer_rate", PEER_COLOR, "PyTorch", 0.2)]):
            med = [r[key]["median"] if r[key] else 0 for r in rs]
            lo = [r[key]["median"] - r[key]["min"] if r[key] else 0 for r in rs]
            hi = [r[key]["max"] - r[key]["median"] if r[key] else 0 for r in rs]
            ax.bar([x + dx for x in xs], med, 0.4, yerr=[lo, hi], capsize=3, color=color, label=label)
        for x, r in zip(xs, rs):
            if r["ratio"]:
                top = max(r["strata"]["max"], r["peer_rate"]["max"])
                ax.text(x, top * 1.02, "x%.2f" % r["ratio"], ha="center", va="bottom", fontsize=8)
        ax.set_xticks(list(xs))
        ax.set_xticklabels([r["config"] for r in rs], rotation=25, ha="right", fontsize=8)
        ax.set_title("%s (batch %d)" % (w, rs[0]["batch"]))
        ax.set_ylabel("samples/s")
        ax.set_ylim(0, ax.get_ylim()[1] * 1.08)
        ax.legend(fontsize=8, loc="lower right")
    fig.suptitle("Training throughput, Strata vs PyTorch (median, min-max; label: Strata / PyTorch)")
    stamp(fig, results)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(os.path.join(out, "throughput.png"), dpi=110)
    plt.close(fig)


def scaling(plt, results, out):
    rows = results["rows"]
    workloads = sorted({r["workload"] for r in rows})
    fig, axes = plt.subplots(1, len(workloads), figsize=(4.2 * len(workloads), 4.0), squeeze=False)
    for ax, w in zip(axes[0], workloads):
        by = {r["config"]: r for r in rows if r["workload"] == w}
        one = by.get("local-1x1")
        if not one:
            continue
        # (label, 1-core point, 2-core point, style)
        lines = [("Strata: 2 threads, 1 rank", one["strata"], by.get("local-1x2", {}).get("strata"), (STRATA_COLOR, "-")),
                 ("Strata: 2 thread ranks", one["strata"], by.get("dp-threads-2x1", {}).get("strata"), (STRATA_COLOR, "--")),
                 ("Strata: 2 MPI processes", one["strata"], by.get("dp-mpi-2x1", {}).get("strata"), (STRATA_COLOR, ":")),
                 ("PyTorch: 2 threads", one["peer_rate"], by.get("local-1x2", {}).get("peer_rate"), (PEER_COLOR, "-")),
                 ("PyTorch: DDP 2 processes", one["peer_rate"], by.get("dp-threads-2x1", by.get("dp-mpi-2x1", {})).get("peer_rate"), (PEER_COLOR, "--"))]
        for label, a, b, (color, style) in lines:
            if a and b:
                ax.errorbar([1, 2], [a["median"], b["median"]],
                            yerr=[[a["median"] - a["min"], b["median"] - b["min"]],
                                  [a["max"] - a["median"], b["max"] - b["median"]]],
                            color=color, linestyle=style, marker="o", capsize=3, label=label)
        ax.plot([1, 2], [one["strata"]["median"], 2 * one["strata"]["median"]], color="gray", lw=0.8,
                label="ideal (Strata, linear)")
        ax.set_xticks([1, 2])
        ax.set_xlabel("cores used (threads x ranks)")
        ax.set_ylabel("samples/s")
        ax.set_ylim(0, ax.get_ylim()[1])
        ax.set_title(w)
        ax.legend(fontsize=7)
    fig.suptitle("Scaling from 1 to 2 cores (median, min-max)")
    stamp(fig, results)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(os.path.join(out, "scaling.png"), dpi=110)
    plt.close(fig)


def size_label(b):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift:
            return "%g %s" % (b / (1 << shift), unit)
    return "%d B" % b


def allreduce(plt, results, out):
    path = os.path.join(out, "collectives.jsonl")
    if not os.path.exists(path):
        return False
    # This plot and its read bound are the allreduce's (other --op rows and
    # the --touch rows are left out).
    rows = [json.loads(l) for l in open(path) if l.startswith("{")]
    rows = [r for r in rows if r.get("op", "allreduce") == "allreduce"]
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = {"threads": ("#1f77b4", "Strata thread ranks"), "mpi": ("#2ca02c", "Strata MPI communicator"),
              "raw-mpi": ("#d62728", "raw MPI_Allreduce (Open MPI)")}
    for backend in ["threads", "mpi", "raw-mpi"]:
        rs = sorted((r for r in rows if r["backend"] == backend), key=lambda r: r["bytes"])
        if not rs:
            continue
        color, label = styles[backend]
        x = [r["bytes"] for r in rs]
        ax.plot(x, [r["busbw_gbps"] for r in rs], marker="o", ms=3, color=color,
                label="%s, %d ranks" % (label, rs[0]["ranks"]))
        ax.fill_between(x, [r["busbw_min_gbps"] for r in rs], [r["busbw_max_gbps"] for r in rs],
                        color=color, alpha=0.15)
    # Read bound: an allreduce of S bytes on n ranks sharing memory reads
    # each input once (n S bytes) at the n-thread read bandwidth R of that
    # working set at best, so algbw <= R / n and busbw <= 2 R (n - 1) / n^2.
    # The benchmark measures R per size (64 KiB and up) around each timing.
    bounded = sorted((r for r in rows if r["backend"] == "threads" and r.get("read_before_gbps", 0) > 0),
                     key=lambda r: r["bytes"])
    if bounded:
        n = bounded[0]["ranks"]
        ax.plot([r["bytes"] for r in bounded],
                [2 * (r["read_before_gbps"] + r["read_after_gbps"]) / 2 * (n - 1) / n ** 2 for r in bounded],
                color="gray", ls="--", lw=0.8, label="read bound of the working set (%d threads)" % n)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ticks = [1 << k for k in range(2, 40, 4) if min(r["bytes"] for r in rows) <= 1 << k <= max(r["bytes"] for r in rows) * 2]
    ax.set_xticks(ticks)
    ax.set_xticklabels([size_label(t) for t in ticks], fontsize=8)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title("Allreduce (in place, float32 sum): busbw = size / time x 2(n-1)/n")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    stamp(fig, results)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(os.path.join(out, "allreduce_busbw.png"), dpi=110)
    plt.close(fig)
    return True


def main(argv):
    if len(argv) != 1 or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    out = argv[0]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot.py: matplotlib is missing for %s (Debian: apt-get install python3-matplotlib, "
              "or scripts/bootstrap.sh --peers)" % sys.executable, file=sys.stderr)
        return 3
    results = load_rows(out)
    if not results or not results.get("rows"):
        print("plot.py: no results.json in %s (run summarize.py first)" % out, file=sys.stderr)
        return 4
    throughput(plt, results, out)
    scaling(plt, results, out)
    made = ["throughput.png", "scaling.png"]
    if allreduce(plt, results, out):
        made.append("allreduce_busbw.png")
    print("plot.py: wrote %s in %s" % (", ".join(made), out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
