#!/usr/bin/env python3
"""strata-plot end to end: two short strata-train runs write metrics; the PNG
strata-plot draws from them has the panels' size and each run's colour, and
what it reports drawing equals what the files hold (read here on their own);
bad files get exit code 3 and a message naming the file (and line).

Usage: test_plot.py --train STRATA_TRAIN --plot STRATA_PLOT --work DIR
Exit codes: 0 passed, 1 failed, 77 skipped (matplotlib missing).
"""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAILED: " + what)


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    check(head[:8] == b"\x89PNG\r\n\x1a\n", path + " is a PNG")
    return struct.unpack(">II", head[16:24])


def has_colour(pixels, rgb, x0, x1):
    """Whether a pixel in columns [x0, x1) is within 0.03 of rgb (lines are
    antialiased; their middle keeps the colour)."""
    block = pixels[:, x0:x1, :3]
    return bool((abs(block - rgb).max(axis=2) < 0.03).any())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--train", required=True)
    p.add_argument("--plot", required=True)
    p.add_argument("--work", required=True)
    a = p.parse_args()
    try:
        import matplotlib.image
    except ImportError:
        print("SKIPPED: matplotlib is missing (Debian: python3-matplotlib)")
        return 77
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    w = lambda name: os.path.join(a.work, name)
    plot = [sys.executable, a.plot]

    # Two runs: a classification problem, logged every 5 steps, evaluated every
    # 20 and at each epoch's end.
    for name, lr in (("a", "0.05"), ("b", "0.2")):
        code, out = run([a.train, "--dataset", "synthetic", "--layers", "8,16,3", "--steps", "40",
                         "--log-every", "5", "--eval-every", "20", "--warmup-steps", "2",
                         "--lr", lr, "--threads", "1", "--metrics", w(name + ".jsonl")])
        check(code == 0, "strata-train run %s exits 0:\n%s" % (name, out))
        hint = "plot it: strata-plot %s -o %s" % (w(name + ".jsonl"), w(name + ".png"))
        check(hint in out, "strata-train prints '%s'" % hint)

    code, out = run([a.train, "--dataset", "synthetic", "--layers", "8,16,3", "--steps", "2",
                     "--threads", "1"])
    check(code == 0 and "plot it" not in out, "no plot command without --metrics:\n" + out)

    # The oracle: the files, read here.
    def lines(name):
        return [json.loads(l) for l in open(w(name)) if l.strip()]
    a_lines = lines("a.jsonl")
    train = [j for j in a_lines if "loss" in j and "step" in j]
    evals = [j for j in a_lines if "test_accuracy" in j]
    check(len(train) == 8 and len(evals) >= 2, "a.jsonl: 8 log lines and evaluations")
    check(all("wall_s" in j and "samples_per_sec" in j for j in train), "log lines have wall_s and samples_per_sec")

    code, out = run(plot + [w("a.jsonl") + ":run A", w("b.jsonl"), "-o", w("ab.png")])
    check(code == 0, "strata-plot exits 0:\n" + out)
    check("run A: 8 training points, final loss %.6g at step 40, %d evaluations, final test "
          "accuracy %.4g" % (train[-1]["loss"], len(evals), evals[-1]["test_accuracy"]) in out,
          "strata-plot reports run A's last loss and accuracy as the file holds them:\n" + out)
    check("b.jsonl: 8 training points" in out, "the second run is labelled by its file name")
    width, height = png_size(w("ab.png"))
    # Three panels (loss, accuracy, samples/s) of 5.5 x 4.2 inches at 110 dpi.
    check((width, height) == (1815, 462), "3 panels: 1815 x 462 pixels, got %d x %d" % (width, height))
    pixels = matplotlib.image.imread(w("ab.png"))
    c0, c1 = (0x1f / 255, 0x77 / 255, 0xb4 / 255), (0xff / 255, 0x7f / 255, 0x0e / 255)
    for i, panel in enumerate(("loss", "accuracy", "samples/s")):
        x0, x1 = i * width // 3, (i + 1) * width // 3
        check(has_colour(pixels, c0, x0, x1) and has_colour(pixels, c1, x0, x1),
              "the %s panel holds both runs' colours" % panel)

    code, out = run(plot + [w("a.jsonl"), "--x", "time", "-o", w("time.png")])
    check(code == 0 and os.path.exists(w("time.png")), "--x time:\n" + out)

    # Bad input: exit 3 and the file (and line) named; bad options: exit 2.
    open(w("empty.jsonl"), "w").close()
    open(w("broken.jsonl"), "w").write('{"step": 1, "loss": 2.0}\n{"step": 2, "loss"\n')
    open(w("summary.jsonl"), "w").write('{"steps": 3, "final_loss": 1.0}\n')
    open(w("old.jsonl"), "w").write('{"step": 1, "loss": 2.0, "lr": 0.1}\n')
    for args, code_expected, words in (
            ([w("empty.jsonl")], 3, [w("empty.jsonl"), "is empty"]),
            ([w("broken.jsonl")], 3, [w("broken.jsonl"), "line 2", "not JSON"]),
            ([w("summary.jsonl")], 3, ["holds no training or evaluation lines"]),
            ([w("missing.jsonl")], 3, [w("missing.jsonl"), "no such file"]),
            ([w("old.jsonl"), "--x", "time"], 3, ["has no wall_s", "--x step"]),
            ([w("a.jsonl"), "-o", w("no-dir/x.png")], 2, ["does not exist"]),
            ([w("a.jsonl"), "--x", "epochs"], 2, ["--x"]),
            ([], 2, ["RUN"])):
        code, out = run(plot + args + ([] if "-o" in args else ["-o", w("bad.png")]))
        check(code == code_expected and all(s in out for s in words),
              "strata-plot %s: exit %d naming %s; got exit %d:\n%s" % (
                  " ".join(args), code_expected, words, code, out))
    check(not os.path.exists(w("bad.png")), "no PNG is written for bad input")
    print("%d check(s) failed" % len(failures) if failures else "passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
