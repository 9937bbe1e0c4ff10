#!/usr/bin/env python3
"""PyTorch peer of strata-train's MLP workload, for a speed comparison.

Trains Linear/activation layers (the same widths, activation, loss and
optimizer as `strata-train --dataset synthetic`) on synthetic data that lives
on the device, times the training steps after a warm-up, and prints
samples/s. With --json it also prints one JSON object on the last line.

Example (workload W2):
  python3 benchmarks/peers/torch_mlp.py --layers 784,1024,1024,10 \
      --batch-size 256 --steps 200 --device cuda

Exit codes: 0 done, 2 bad options or the device is not available,
3 PyTorch is not installed.
"""
import argparse
import json
import sys
import time


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", default="784,1024,1024,10",
                   help="layer widths, input first (default: %(default)s)")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--steps", type=int, default=200, help="timed training steps")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps before timing")
    p.add_argument("--device", default="auto", help="cuda, cuda:N, cpu or auto (cuda if available)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64", "bfloat16"])
    p.add_argument("--activation", default="relu", choices=["relu", "gelu", "tanh", "sigmoid"])
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "adam", "adamw"])
    p.add_argument("--lr", type=float, default=None,
                   help="learning rate (default 0.01 for sgd, 0.001 for adam/adamw, as strata-train)")
    p.add_argument("--batches", type=int, default=16,
                   help="distinct synthetic batches kept on the device and cycled")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (cpu)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--json", action="store_true", help="also print a JSON summary line")
    a = p.parse_args(argv)
    try:
        a.widths = [int(w) for w in a.layers.split(",")]
    except ValueError:
        p.error("--layers: expected comma-separated integers, got %r" % a.layers)
    if len(a.widths) < 2 or min(a.widths) < 1:
        p.error("--layers: need at least two positive widths")
    for name in ("batch_size", "steps", "batches"):
        if getattr(a, name) < 1:
            p.error("--%s must be positive" % name.replace("_", "-"))
    if a.warmup < 0:
        p.error("--warmup must be >= 0")
    if a.lr is None:
        a.lr = 0.01 if a.optimizer == "sgd" else 0.001
    return a


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        import torch
        from torch import nn
    except ImportError:
        print("torch_mlp: PyTorch is not installed (python3 -c 'import torch' fails)", file=sys.stderr)
        return 3

    if a.device == "auto":
        a.device = "cuda" if torch.cuda.is_available() else "cpu"
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("torch_mlp: --device %s but torch.cuda.is_available() is False" % a.device, file=sys.stderr)
        return 2
    device = torch.device(a.device)
    dtype = getattr(torch, a.dtype)
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    act = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}[a.activation]
    layers = []
    for i in range(len(a.widths) - 1):
        layers.append(nn.Linear(a.widths[i], a.widths[i + 1]))
        if i + 2 < len(a.widths):
            layers.append(act())
    model = nn.Sequential(*layers).to(device=device, dtype=dtype)
    loss_fn = nn.CrossEntropyLoss()
    opt_cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[a.optimizer]
    opt = opt_cls(model.parameters(), lr=a.lr)

    g = torch.Generator(device="cpu").manual_seed(a.seed)
    xs = torch.randn(a.batches, a.batch_size, a.widths[0], generator=g).to(device=device, dtype=dtype)
    ys = torch.randint(0, a.widths[-1], (a.batches, a.batch_size), generator=g).to(device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def step(i):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xs[i % a.batches]), ys[i % a.batches])
        loss.backward()
        opt.step()
        return loss

    for i in range(a.warmup):
        step(i)
    sync()
    t0 = time.perf_counter()
    for i in range(a.steps):
        loss = step(a.warmup + i)
    sync()
    elapsed = time.perf_counter() - t0
    rate = a.steps * a.batch_size / elapsed
    final_loss = float(loss.item())

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (%d threads)" % torch.get_num_threads()
    params = sum(p.numel() for p in model.parameters())
    print("torch_mlp: torch %s on %s, %s, layers %s, %d parameters, batch %d, %s"
          % (torch.__version__, name, a.dtype, a.layers, params, a.batch_size, a.optimizer))
    print("torch_mlp: %d steps in %.3f s after %d warm-up steps: %.0f samples/s (final loss %.4f)"
          % (a.steps, elapsed, a.warmup, rate, final_loss))
    if a.json:
        print(json.dumps({"peer": "torch", "torch": torch.__version__, "device": name,
                          "layers": a.widths, "batch_size": a.batch_size, "steps": a.steps,
                          "warmup": a.warmup, "dtype": a.dtype, "optimizer": a.optimizer,
                          "seconds": elapsed, "samples_per_sec": rate, "final_loss": final_loss}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
