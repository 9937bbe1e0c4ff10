#!/usr/bin/env python3
"""PyTorch peer of strata-train on text: the same model file, data, order and schedule.

Trains a language model of a Strata model file (models/gpt-mini.toml) in
PyTorch on the windows strata-train --dataset text:PATH makes, in the order it
visits them, with its learning-rate schedule, and writes metrics in
strata-train's JSON-lines format (--metrics), so that the two runs can be
compared step by step (strata-plot draws both):

  - text: a file, or a directory's regular files in name order (links and
    files holding a NUL byte skipped), as bytes (data/text.cpp);
  - windows: non-overlapping windows of --seq-len tokens with the next token
    as each position's label; the last --test-fraction of the tokens held out
    before windows form;
  - order: the permutation of epoch e is data/loader.cpp's shuffled_order
    (Fisher-Yates on SplitMix64 counters, backends/random.hpp) of --seed;
    batches of --batch-size in that order, the last of an epoch smaller;
  - schedule: linear warm-up for --lr-warmup-steps, then constant or cosine
    to --lr-min over the remaining steps (layers/lr_schedule.cpp);
  - loss: cross-entropy over every position (mean), AdamW (PyTorch's).

The initial weights are PyTorch's draws from the same distributions (not the
same values; issue 20 brings weights across). Example:

  python3 benchmarks/peers/torch_lm.py --model models/gpt-mini.toml \\
      --text /usr/share/games/fortunes --steps 900 --lr 1e-3 --weight-decay 0.1 \\
      --lr-warmup-steps 50 --lr-schedule cosine --lr-min 1e-4 --threads 2 \\
      --eval-every 100 --metrics torch.jsonl

Exit codes: 0 done, 2 bad options, 3 PyTorch missing or unreadable text.
"""
import argparse
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import model_from_file  # noqa: E402

MASK = (1 << 64) - 1


def mix64(z):
    """SplitMix64's finaliser (backends/random.hpp)."""
    z = (z + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def below(seed, stream, index, n):
    bits = mix64((mix64(seed ^ mix64(stream)) + index) & MASK)
    return ((bits >> 32) * n) >> 32


def shuffled_order(n, seed, epoch):
    """data/loader.cpp's permutation of [0, n) for (seed, epoch)."""
    order = list(range(n))
    stream = 1000 + epoch  # random::stream_shuffle + epoch
    for i in range(n, 1, -1):
        j = below(seed, stream, i, i)
        order[i - 1], order[j] = order[j], order[i - 1]
    return order


def read_text(path):
    if os.path.isdir(path):
        out = b""
        for name in sorted(os.listdir(path)):
            p = os.path.join(path, name)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            with open(p, "rb") as f:
                data = f.read()
            if b"\0" not in data:
                out += data
        return out
    with open(path, "rb") as f:
        return f.read()


def scheduled_lr(a, step, total):
    if step < a.lr_warmup_steps:
        return a.lr * (step + 1) / a.lr_warmup_steps
    if a.lr_schedule == "constant":
        return a.lr
    span = total - a.lr_warmup_steps if total > a.lr_warmup_steps else 1
    t = min(1.0, (step - a.lr_warmup_steps) / span)
    return a.lr_min + (a.lr - a.lr_min) * 0.5 * (1.0 + math.cos(math.pi * t))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="a Strata model file (TOML)")
    p.add_argument("--text", default="/usr/share/games/fortunes", help="text file or directory")
    p.add_argument("--seq-len", type=int, default=None, help="tokens per window (default: the model's)")
    p.add_argument("--test-fraction", type=float, default=0.1)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--lr-min", type=float, default=0.0)
    p.add_argument("--lr-warmup-steps", type=int, default=0)
    p.add_argument("--lr-schedule", choices=["constant", "cosine"], default="constant")
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=42, help="the data order's seed (strata-train --seed)")
    p.add_argument("--eval-every", type=int, default=0, help="also evaluate every N steps")
    p.add_argument("--log-every", type=int, default=50)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--metrics", default=None, help="JSON lines, as strata-train --metrics")
    a = p.parse_args(sys.argv[1:] if argv is None else argv)
    if a.steps < 1 or a.batch_size < 1:
        p.error("--steps and --batch-size must be positive")
    if a.threads:
        os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
        os.environ.setdefault("OPENBLAS_NUM_THREADS", str(a.threads))
    try:
        import torch
    except ImportError:
        print("torch_lm: PyTorch is not installed", file=sys.stderr)
        return 3
    import torch.nn.functional as F
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model, in_shape, vocab = model_from_file(a.model, a.seq_len)
    T = in_shape[0]
    try:
        tokens = torch.tensor(list(read_text(a.text)), dtype=torch.long)
    except OSError as e:
        print("torch_lm: %s" % e, file=sys.stderr)
        return 3
    n = len(tokens)
    n_test = int(math.floor(a.test_fraction * n + 0.5)) if a.test_fraction > 0 else 0
    cut = n - n_test

    def windows(begin, end):
        count = (end - begin - 1) // T if end - begin >= T + 1 else 0
        idx = begin + torch.arange(count)[:, None] * T + torch.arange(T)[None, :]
        return tokens[idx], tokens[idx + 1]

    xtr, ytr = windows(0, cut)
    xte, yte = windows(cut, n)
    print("torch_lm: %d tokens, %d training and %d validation windows of %d; %d parameters; "
          "torch %s, %d threads" % (n, len(xtr), len(xte), T,
                                    sum(q.numel() for q in model.parameters()), torch.__version__,
                                    torch.get_num_threads()), flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    out = open(a.metrics, "w") if a.metrics else None

    def evaluate():
        model.eval()
        total = 0.0
        with torch.no_grad():
            for i in range(0, len(xte), a.batch_size):
                logits = model(xte[i:i + a.batch_size])
                total += F.cross_entropy(logits.reshape(-1, vocab), yte[i:i + a.batch_size].reshape(-1),
                                         reduction="sum").item()
        model.train()
        return total / (len(xte) * T)

    per_epoch = (len(xtr) + a.batch_size - 1) // a.batch_size
    step, t0 = 0, time.perf_counter()
    epoch = 0
    while step < a.steps:
        order = torch.tensor(shuffled_order(len(xtr), a.seed, epoch))
        for b in range(per_epoch):
            if step >= a.steps:
                break
            rows = order[b * a.batch_size:(b + 1) * a.batch_size]
            lr = scheduled_lr(a, step, a.steps)
            for g in opt.param_groups:
                g["lr"] = lr
            logits = model(xtr[rows])
            loss = F.cross_entropy(logits.reshape(-1, vocab), ytr[rows].reshape(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if out:
                out.write(json.dumps({"step": step, "epoch": epoch + 1, "loss": loss.item(), "lr": lr}) + "\n")
            if step % a.log_every == 0 or step == a.steps:
                print("torch_lm: step %d/%d loss %.4f (%.0f tokens/s)"
                      % (step, a.steps, loss.item(), step * a.batch_size * T / (time.perf_counter() - t0)),
                      flush=True)
            if (a.eval_every and step % a.eval_every == 0) or step == a.steps:
                v = evaluate()
                print("torch_lm: step %d: test loss %.4f" % (step, v), flush=True)
                if out:
                    out.write(json.dumps({"step": step, "epoch": epoch + 1, "test_loss": v}) + "\n")
                    out.flush()
        epoch += 1
    print("torch_lm: done: %d steps in %.1f s" % (step, time.perf_counter() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
