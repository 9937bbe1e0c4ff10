"""PyTorch as the oracle of Strata's weights in and out (safetensors).

For one model (--case): PyTorch 1.13 initialises it and writes its
state_dict as a safetensors file (this script reads and writes the format
with struct and json: Debian's PyTorch has no safetensors); strata-train
starts from it (--init-from), trains 20 steps on a CSV of seeded random data
in file order (--no-shuffle, --normalize none) and exports its weights
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
           --case mlp|residual|cnn --work DIR [--steps 20] [--tol 1e-5]
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
# vanishing gradients into steps of +-lr (1.5e-3; SGD: 6.7e-7).
CASES = {
    "mlp": dict(strata=["--layers", "12,16,8,3", "--activation", "relu"], features=12,
                classes=3, optimizer=("adam", 1e-3)),
    "residual": dict(strata=["--model", "models/residual-mlp.toml"], features=784, classes=10,
                     optimizer=("sgd", 0.05)),
    "cnn": dict(strata=["--model", "models/cnn-fashion.toml", "--input-shape", "1,28,28"],
                features=784, classes=10, optimizer=("sgd-momentum", 0.001)),
}
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


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train", required=True, help="the strata-train program")
    p.add_argument("--case", required=True, choices=sorted(CASES))
    p.add_argument("--work", required=True, help="a directory for the files")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--tol", type=float, default=1e-5)
    a = p.parse_args()
    try:
        import torch
        from torch import nn
    except ImportError:
        print("torch oracle: SKIPPED: PyTorch is missing (Debian's python3-torch for /usr/bin/python3; "
              "scripts/bootstrap.sh installs it)")
        return 77
    case = CASES[a.case]
    os.makedirs(a.work, exist_ok=True)
    torch.manual_seed(1234)
    torch.set_num_threads(1)

    # Seeded data, written with float32-exact text (9 significant digits).
    g = torch.Generator().manual_seed(99)
    x = torch.randn(SAMPLES, case["features"], generator=g)
    y = torch.randint(0, case["classes"], (SAMPLES,), generator=g)
    csv = os.path.join(a.work, "data.csv")
    with open(csv, "w") as f:
        for i in range(SAMPLES):
            f.write(",".join("%.9g" % v for v in x[i].tolist()) + ",%d\n" % int(y[i]))
    model = torch_model(a.case, torch, nn)
    init = os.path.join(a.work, "init.safetensors")
    write_safetensors(init, list(model.state_dict().items()))

    out = os.path.join(a.work, "strata.safetensors")
    metrics = os.path.join(a.work, "metrics.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    opt_name, lr = case["optimizer"]
    cmd = [a.train] + case["strata"] + [
        "--dataset", "csv:" + csv, "--test-fraction", repr(TEST / SAMPLES), "--normalize", "none",
        "--no-shuffle", "--batch-size", str(BATCH), "--steps", str(a.steps), "--log-every", "1",
        "--init-from", init, "--export", out, "--metrics", metrics, "--seed", "5"] + \
        strata_optimizer(opt_name, lr)
    print("torch oracle: " + " ".join(cmd), flush=True)
    run = subprocess.run(cmd, cwd=TOP, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(run.stdout)
    if run.returncode != 0:
        print("torch oracle: strata-train failed (exit %d)" % run.returncode)
        return 1
    lines = [json.loads(l) for l in open(metrics)]
    strata_losses = [l["loss"] for l in lines if "loss" in l and "step" in l and "test_loss" not in l]
    evals = [l for l in lines if "test_accuracy" in l]

    # PyTorch: the same batches in file order, epoch after epoch.
    train_x, train_y = x[:SAMPLES - TEST], y[:SAMPLES - TEST]
    if a.case == "cnn":
        train_x = train_x.view(-1, 1, 28, 28)
    opt = optimizer_of(opt_name, lr, model.parameters(), torch)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    torch_losses = []
    per_epoch = (SAMPLES - TEST) // BATCH
    for s in range(a.steps):
        b = s % per_epoch
        opt.zero_grad()
        loss = loss_fn(model(train_x[b * BATCH:(b + 1) * BATCH]), train_y[b * BATCH:(b + 1) * BATCH])
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
    fresh.load_state_dict({k: v.to(want[k].dtype) for k, v in exported.items()}, strict=True)
    fresh.eval()
    test_x, test_y = x[SAMPLES - TEST:], y[SAMPLES - TEST:]
    if a.case == "cnn":
        test_x = test_x.view(-1, 1, 28, 28)
    with torch.no_grad():
        correct = int((fresh(test_x).argmax(dim=1) == test_y).sum())
    strata_correct = round(evals[-1]["test_accuracy"] * TEST) if evals else -1
    if correct != strata_correct:
        failures.append("test split: PyTorch counts %d of %d correct with Strata's weights, "
                        "strata-train %d" % (correct, TEST, strata_correct))
    print("torch oracle %s: %d steps, largest loss difference %.3g, largest parameter difference "
          "%.3g (%s), test %d/%d correct in both" %
          (a.case, a.steps, worst_loss, worst_param, worst_name, correct, TEST))
    for f in failures:
        print("torch oracle: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
