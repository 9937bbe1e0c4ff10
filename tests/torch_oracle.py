"""PyTorch as the oracle of Strata's weights in and out (safetensors).

For one model (--case): PyTorch 1.13 initialises it and writes its
state_dict as a safetensors file (this script reads and writes the format
with struct and json: Debian's PyTorch has no safetensors); strata-train
starts from it (--init-from), trains 20 steps on a CSV of seeded random data
(the GPT: windows of a seeded text) in file order (--no-shuffle, --normalize
none) and exports its weights
(--export); PyTorch trains the same model from the same weights on the same
batches with the same optimizer. Then:
  - every step's loss agrees within --tol relative;
  - every parameter and BatchNorm statistic agrees within --tol relative to
    its own magnitude, or to a floor of 0.05 for values near zero (a
    difference of larger values carries their absolute rounding; 0.05 is a
    tenth of these models' initial weight scale), the largest printed;
  - PyTorch, loading Strata's export (load_state_dict, strict), counts the
    same number of correct test samples as strata-train reported.
Exit 0: all agree; 1: a difference (printed); 77: PyTorch is missing (ctest
reports the test as skipped, with the reason).

usage: /usr/bin/python3 tests/torch_oracle.py --train build/bin/strata-train \
           --case mlp|residual|cnn|gpt --work DIR [--steps 20] [--tol 1e-5]
       /usr/bin/python3 tests/torch_oracle.py --evaluate FILE --layers 784,256,128,10 \
           [--idx-dir DIR]
The second form (scripts/check-weights.sh) runs an MLP's weights exported by
strata-train over Fashion-MNIST's test images, normalised as the file's
metadata says (strata.input_mean, strata.input_inv_std), and prints
"correct N of M".
"""
import argparse
import json
import os
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)

# What each case trains: Strata's model options, the data, the optimizer.
# Each optimizer and rate keeps 20 steps where rounding differences (sums in
# another order) stay at rounding size, measured: with SGD momentum 0.9 at
# lr 0.01 the CNN's 2.5e-6 difference in the first BatchNorm mean grows to
# 4e-4 by step 20 (at lr 0.001: 3.7e-6), and Adam on the residual MLP, which
# fits these 180 random samples within 20 steps, turns the rounding noise of
# vanishing gradients into steps of +-lr (1.5e-3; SGD: 6.7e-7); the GPT at
# Adam 1e-3 spikes (steps 6 and 19) and the spikes differ by 0.24, at Adam
# 1e-4 its small weights (std 0.02) move 2e-4 apart, with SGD 0.05 6e-7.
CASES = {
    "mlp": dict(strata=["--layers", "12,16,8,3", "--activation", "relu"], features=12,
                classes=3, optimizer=("adam", 1e-3)),
    "residual": dict(strata=["--model", "models/residual-mlp.toml"], features=784, classes=10,
                     optimizer=("sgd", 0.05)),
    "cnn": dict(strata=["--model", "models/cnn-fashion.toml", "--input-shape", "1,28,28"],
                features=784, classes=10, optimizer=("sgd-momentum", 0.001)),
    # gpt-mini (tied head) on windows of 32 byte tokens of a seeded text.
    "gpt": dict(strata=["--model", "models/gpt-mini.toml", "--seq-len", "32"], text=True,
                optimizer=("sgd", 0.05)),
}
SEQ, TEXT_BATCH = 32, 8
SAMPLES, TEST, BATCH = 220, 20, 20  # the last TEST samples are the test split


# ------------------------------------------------------------ safetensors
def write_safetensors(path, tensors):
    """tensors: list of (name, torch tensor); F32 floats, I64 integers."""
    import torch
    header, blobs, at = {}, [], 0
    for name, t in tensors:
        t = t.detach().contiguous().cpu()
        if t.dtype == torch.int64:
            dtype, raw = "I64", struct.pack("<%dq" % t.numel(), *t.flatten().tolist())
        else:
            dtype, raw = "F32", struct.pack("<%df" % t.numel(), *t.float().flatten().tolist())
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [at, at + len(raw)]}
        blobs.append(raw)
        at += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    """{name: torch tensor} of a file of F32, F64, BF16, F16 or I64 tensors."""
    import torch
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        raw = data[base + b:base + end]
        count = 1
        for d in e["shape"]:
            count *= d
        if e["dtype"] == "F32":
            values = torch.tensor(struct.unpack("<%df" % count, raw), dtype=torch.float32)
        elif e["dtype"] == "F64":
            values = torch.tensor(struct.unpack("<%dd" % count, raw), dtype=torch.float64)
        elif e["dtype"] == "I64":
            values = torch.tensor(struct.unpack("<%dq" % count, raw), dtype=torch.int64)
        elif e["dtype"] in ("BF16", "F16"):
            bits = struct.unpack("<%dH" % count, raw)
            if e["dtype"] == "BF16":
                values = torch.tensor([b << 16 for b in bits], dtype=torch.int32).view(torch.float32)
            else:
                values = torch.tensor(bits, dtype=torch.int16).view(torch.float16).float()
        else:
            raise SystemExit("torch oracle: %s: dtype %s not read here" % (name, e["dtype"]))
        out[name] = values.reshape(e["shape"])
    return out


# ------------------------------------------------------------------ models
def torch_model(case, torch, nn):
    if case == "mlp":
        return nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 3))
    sys.path.insert(0, os.path.join(TOP, "benchmarks", "peers"))
    import torch_models
    model, _, _ = torch_models.model_from_file(os.path.join(TOP, CASES[case]["strata"][1]))
    return model


def optimizer_of(name, lr, params, torch):
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    return torch.optim.Adam(params, lr=lr)


def strata_optimizer(name, lr):
    if name == "sgd-momentum":
        return ["--optimizer", "sgd", "--momentum", "0.9", "--lr", repr(lr)]
    return ["--optimizer", name, "--lr", repr(lr)]


def read_idx(path, torch):
    """An IDX file (gzip-compressed or not) as a uint8 tensor of its shape."""
    import gzip
    with (gzip.open(path) if path.endswith(".gz") else open(path, "rb")) as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">%dI" % ndim, data[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def evaluate(a, torch, nn):
    """Correct test images of an exported MLP, as strata-train's data path
    prepares them: bytes / 255 in float32, then (x - mean) * inv_std."""
    widths = [int(w) for w in a.layers.split(",")]
    mods = []
    for i in range(len(widths) - 1):
        mods.append(nn.Linear(widths[i], widths[i + 1]))
        if i + 2 < len(widths):
            mods.append(nn.ReLU())
    model = nn.Sequential(*mods)
    model.load_state_dict(read_safetensors(a.evaluate), strict=True)
    model.eval()
    with open(a.evaluate, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        meta = json.loads(f.read(n)).get("__metadata__", {})
    images = read_idx(os.path.join(a.idx_dir, "t10k-images-idx3-ubyte.gz"), torch)
    labels = read_idx(os.path.join(a.idx_dir, "t10k-labels-idx1-ubyte.gz"), torch).long()
    x = images.reshape(images.shape[0], -1).float() / 255.0
    if "strata.input_mean" in meta:
        mean = torch.tensor(json.loads(meta["strata.input_mean"]), dtype=torch.float32)
        inv = torch.tensor(json.loads(meta["strata.input_inv_std"]), dtype=torch.float32)
        x = (x - mean) * inv
    with torch.no_grad():
        correct = int((model(x).argmax(dim=1) == labels).sum())
    print("correct %d of %d" % (correct, labels.shape[0]))
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", help="the strata-train program")
    p.add_argument("--case", choices=sorted(CASES))
    p.add_argument("--work", help="a directory for the files")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--tol", type=float, default=1e-5)
    p.add_argument("--evaluate", help="an MLP's safetensors file to evaluate on Fashion-MNIST")
    p.add_argument("--layers", help="--evaluate: the MLP's widths")
    p.add_argument("--idx-dir", default="/usr/share/datasets/fashion-mnist",
                   help="--evaluate: Fashion-MNIST's IDX files (Debian's dataset-fashion-mnist)")
    a = p.parse_args()
    try:
        import torch
        from torch import nn
    except ImportError:
        print("torch oracle: SKIPPED: PyTorch is missing (Debian's python3-torch for /usr/bin/python3; "
              "scripts/bootstrap.sh installs it)")
        return 77
    if a.evaluate:
        return evaluate(a, torch, nn)
    if not (a.train and a.case and a.work):
        p.error("--train, --case and --work (or --evaluate)")
    case = CASES[a.case]
    os.makedirs(a.work, exist_ok=True)
    torch.manual_seed(1234)
    torch.set_num_threads(1)

    # Seeded data, written with float32-exact text (9 significant digits).
    g = torch.Generator().manual_seed(99)
    if case.get("text"):
        # Seeded text of words; strata-train's windows: the last tenth of the
        # tokens held out, non-overlapping windows of SEQ with the next
        # token as each position's label (data/text.cpp).
        words = "the of a strata kokkos rank shard tensor pipeline weight loss step data model".split()
        picks = torch.randint(0, len(words), (6000,), generator=g).tolist()
        text = " ".join(words[i] + ("\n" if k % 9 == 8 else "") for k, i in enumerate(picks)).encode()
        path = os.path.join(a.work, "text.txt")
        with open(path, "wb") as f:
            f.write(text)
        tokens = torch.tensor(list(text), dtype=torch.long)
        cut = len(tokens) - int(0.1 * len(tokens) + 0.5)

        def windows(begin, end):
            count = (end - begin - 1) // SEQ
            idx = begin + torch.arange(count)[:, None] * SEQ + torch.arange(SEQ)[None, :]
            return tokens[idx], tokens[idx + 1]
        train_x, train_y = windows(0, cut)
        test_x, test_y = windows(cut, len(tokens))
        data_args = ["--dataset", "text:" + path, "--test-fraction", "0.1"]
        batch = TEXT_BATCH
    else:
        x = torch.randn(SAMPLES, case["features"], generator=g)
        y = torch.randint(0, case["classes"], (SAMPLES,), generator=g)
        csv = os.path.join(a.work, "data.csv")
        with open(csv, "w") as f:
            for i in range(SAMPLES):
                f.write(",".join("%.9g" % v for v in x[i].tolist()) + ",%d\n" % int(y[i]))
        train_x, train_y = x[:SAMPLES - TEST], y[:SAMPLES - TEST]
        test_x, test_y = x[SAMPLES - TEST:], y[SAMPLES - TEST:]
        if a.case == "cnn":
            train_x, test_x = train_x.view(-1, 1, 28, 28), test_x.view(-1, 1, 28, 28)
        data_args = ["--dataset", "csv:" + csv, "--test-fraction", repr(TEST / SAMPLES), "--normalize", "none"]
        batch = BATCH
    model = torch_model(a.case, torch, nn)
    init = os.path.join(a.work, "init.safetensors")
    write_safetensors(init, list(model.state_dict().items()))

    out = os.path.join(a.work, "strata.safetensors")
    metrics = os.path.join(a.work, "metrics.jsonl")
    for stale in (out, metrics):  # an earlier run's files must not stand in for this one's
        if os.path.exists(stale):
            os.remove(stale)
    opt_name, lr = case["optimizer"]
    cmd = [a.train] + case["strata"] + data_args + [
        "--no-shuffle", "--batch-size", str(batch), "--steps", str(a.steps), "--log-every", "1",
        "--init-from", init, "--export", out, "--metrics", metrics, "--seed", "5"] + \
        strata_optimizer(opt_name, lr)
    print("torch oracle: " + " ".join(cmd), flush=True)
    run = subprocess.run(cmd, cwd=TOP, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(run.stdout)
    if run.returncode != 0 or not os.path.exists(out) or not os.path.exists(metrics):
        print("torch oracle: strata-train failed (exit %d) or wrote no export or metrics" % run.returncode)
        return 1
    lines = [json.loads(l) for l in open(metrics)]
    strata_losses = [l["loss"] for l in lines if "loss" in l and "step" in l and "test_loss" not in l]
    evals = [l for l in lines if "test_accuracy" in l]

    # PyTorch: the same batches in file order, epoch after epoch (each
    # position of a language model's windows a sample of the mean).
    opt = optimizer_of(opt_name, lr, model.parameters(), torch)
    ce = nn.CrossEntropyLoss()

    def loss_fn(logits, labels):
        return ce(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
    model.train()
    torch_losses = []
    per_epoch = len(train_x) // batch
    for s in range(a.steps):
        b = s % per_epoch
        opt.zero_grad()
        loss = loss_fn(model(train_x[b * batch:(b + 1) * batch]), train_y[b * batch:(b + 1) * batch])
        loss.backward()
        opt.step()
        torch_losses.append(loss.item())

    failures = []
    if len(strata_losses) != a.steps:
        failures.append("strata-train logged %d step losses, not %d" % (len(strata_losses), a.steps))
    worst_loss = 0.0
    for i, (s, t) in enumerate(zip(strata_losses, torch_losses)):
        d = abs(s - t) / abs(t)
        worst_loss = max(worst_loss, d)
        if d > a.tol:
            failures.append("step %d: loss %.9g (Strata) vs %.9g (PyTorch)" % (i + 1, s, t))
    exported = read_safetensors(out)
    want = model.state_dict()
    worst_param, worst_name = 0.0, ""
    for name, t in want.items():
        if name not in exported:
            failures.append("the export lacks %s" % name)
            continue
        e = exported[name]
        if tuple(e.shape) != tuple(t.shape):
            failures.append("%s: shape %s exported, %s in PyTorch" % (name, tuple(e.shape), tuple(t.shape)))
            continue
        if t.dtype == torch.int64:
            if not torch.equal(e, t):
                failures.append("%s: %s exported, %s in PyTorch" % (name, e.tolist(), t.tolist()))
            continue
        rel = ((e.double() - t.double()).abs() / t.double().abs().clamp(min=0.05)).max().item() if t.numel() else 0.0
        if rel > worst_param:
            worst_param, worst_name = rel, name
        if rel > a.tol:
            failures.append("%s: largest relative difference %.3g" % (name, rel))
    for name in exported:
        if name not in want:
            failures.append("the export holds %s, which PyTorch's state_dict lacks" % name)

    # PyTorch evaluates Strata's weights on the test split.
    fresh = torch_model(a.case, torch, nn)
    fresh.load_state_dict({k: v.to(want[k].dtype) for k, v in exported.items() if k in want}, strict=True)
    fresh.eval()
    with torch.no_grad():
        correct = int((fresh(test_x).argmax(dim=-1) == test_y).sum())
    total = test_y.numel()  # labels: one per sample, or per position
    strata_correct = round(evals[-1]["test_accuracy"] * total) if evals else -1
    if correct != strata_correct:
        failures.append("test split: PyTorch counts %d of %d correct with Strata's weights, "
                        "strata-train %d" % (correct, total, strata_correct))
    print("torch oracle %s: %d steps, largest loss difference %.3g, largest parameter difference "
          "%.3g (%s), test %d/%d correct in both" %
          (a.case, a.steps, worst_loss, worst_param, worst_name, correct, total))
    for f in failures:
        print("torch oracle: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
