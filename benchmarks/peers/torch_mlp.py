#!/usr/bin/env python3
"""PyTorch peer of Strata's workloads, for a speed comparison.

Trains Linear/activation layers (the same widths, activation, loss and
optimizer as `strata-train --dataset synthetic` and `strata-bench-train`), or
with --model the network of a Strata model file (models/*.toml: conv2d,
batchnorm, pooling, flatten, dropout, linear, activations, layernorm; W4 is
models/cnn-fashion.toml), on synthetic data that lives on the device, times
--reps repetitions of --steps training steps after a warm-up, and prints
samples/s (median [min-max] over the repetitions). With --json it also prints
one JSON object on the last line.

With --ddp N it runs DistributedDataParallel on N local processes (gloo on
the CPU, nccl on CUDA devices), started with torch.multiprocessing and a
file:// rendezvous (no network beyond the loopback). --batch-size is then the
global batch: each process trains on its shard, as Strata's data parallelism.

Examples (workload W2; W1 is --layers 10,5,2 --loss mse --batch-size 32):
  python3 benchmarks/peers/torch_mlp.py --layers 784,1024,1024,10 \\
      --batch-size 256 --steps 200 --device cuda
  OMP_WAIT_POLICY=PASSIVE python3 benchmarks/peers/torch_mlp.py --device cpu --threads 2 --reps 5
  python3 benchmarks/peers/torch_mlp.py --device cpu --threads 1 --ddp 2 --reps 5 --json
  python3 benchmarks/peers/torch_mlp.py --model models/cnn-fashion.toml --batch-size 128 \\
      --device cpu --threads 1 --steps 10 --reps 5

Exit codes: 0 done, 2 bad options or the device is not available,
3 PyTorch is not installed, 4 a DDP process failed.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import model_from_file  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", default="784,1024,1024,10",
                   help="layer widths, input first (default: %(default)s)")
    p.add_argument("--model", default=None,
                   help="a Strata model file (TOML) to train instead of the MLP of --layers")
    p.add_argument("--batch-size", type=int, default=256, help="global batch (default: %(default)s)")
    p.add_argument("--steps", type=int, default=200, help="timed training steps per repetition")
    p.add_argument("--reps", type=int, default=1, help="timed repetitions (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps before timing")
    p.add_argument("--device", default="auto", help="cuda, cuda:N, cpu or auto (cuda if available)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64", "bfloat16"])
    p.add_argument("--autocast", default=None, choices=["bfloat16"],
                   help="mixed precision as strata-train --precision bf16: float32 weights and "
                        "optimizer, forward and backward under torch.autocast in this type")
    p.add_argument("--activation", default="relu", choices=["relu", "gelu", "tanh", "sigmoid"])
    p.add_argument("--loss", default="cross-entropy", choices=["cross-entropy", "mse"],
                   help="softmax cross-entropy over class labels, or MSE against values "
                        "(default: %(default)s)")
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "adam", "adamw"])
    p.add_argument("--lr", type=float, default=None,
                   help="learning rate (default 0.01 for sgd, 0.001 for adam/adamw, as strata-train)")
    p.add_argument("--seq-len", type=int, default=None,
                   help="a language model's tokens per sample (default: the model file's input)")
    p.add_argument("--batches", type=int, default=16,
                   help="distinct synthetic batches kept on the device and cycled")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads per process: torch.set_num_threads, and OMP_NUM_THREADS / "
                        "OPENBLAS_NUM_THREADS when they are not set")
    p.add_argument("--ddp", type=int, default=0, metavar="N",
                   help="DistributedDataParallel on N local processes (0: one process, no DDP)")
    p.add_argument("--bucket-mb", type=float, default=25, help="DDP gradient bucket size in MiB")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--json", action="store_true", help="also print a JSON summary line")
    a = p.parse_args(argv)
    try:
        a.widths = [int(w) for w in a.layers.split(",")]
    except ValueError:
        p.error("--layers: expected comma-separated integers, got %r" % a.layers)
    if len(a.widths) < 2 or min(a.widths) < 1:
        p.error("--layers: need at least two positive widths")
    for name in ("batch_size", "steps", "batches", "reps"):
        if getattr(a, name) < 1:
            p.error("--%s must be positive" % name.replace("_", "-"))
    if a.warmup < 0 or a.ddp < 0:
        p.error("--warmup and --ddp must be >= 0")
    if a.threads is not None and a.threads < 1:
        p.error("--threads must be positive")
    if a.ddp and a.batch_size < a.ddp:
        p.error("--batch-size %d is smaller than --ddp %d" % (a.batch_size, a.ddp))
    if a.lr is None:
        a.lr = 0.01 if a.optimizer == "sgd" else 0.001
    return a


def shard(batch, rank, size):
    """(first row, rows) of `rank`'s shard of a global batch, as Strata's BatchLoader."""
    base, extra = divmod(batch, size)
    return rank * base + min(rank, extra), base + (1 if rank < extra else 0)


def train(a, rank=0, size=1):
    """Builds the model and times the training steps; returns the summary (rank 0)."""
    import torch
    from torch import nn

    if a.threads:
        torch.set_num_threads(a.threads)
    device = torch.device(a.device)
    if device.type == "cuda" and size > 1:
        device = torch.device("cuda", rank % torch.cuda.device_count())
    dtype = getattr(torch, a.dtype)
    torch.manual_seed(a.seed)

    if a.model:
        model, in_shape, classes = model_from_file(a.model, a.seq_len)
    else:
        act = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}[a.activation]
        layers = []
        for i in range(len(a.widths) - 1):
            layers.append(nn.Linear(a.widths[i], a.widths[i + 1]))
            if i + 2 < len(a.widths):
                layers.append(act())
        model = nn.Sequential(*layers)
        in_shape, classes = [a.widths[0]], a.widths[-1]
    model = model.to(device=device, dtype=dtype)
    # A language model (an embedding first) takes token ids; decided before DDP wraps it.
    tokens = isinstance(next(iter(model.children()), None), nn.Embedding)
    if size > 1:
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None,
                                        bucket_cap_mb=a.bucket_mb)
    loss_fn = nn.CrossEntropyLoss() if a.loss == "cross-entropy" else nn.MSELoss()
    opt_cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[a.optimizer]
    opt = opt_cls(model.parameters(), lr=a.lr)

    # The same global batches on every rank (same seed); each rank keeps its rows.
    g = torch.Generator(device="cpu").manual_seed(a.seed)
    first, rows = shard(a.batch_size, rank, size)
    xs = torch.randn([a.batches, a.batch_size] + in_shape, generator=g)
    if tokens:  # a language model: token ids in, one label per position
        xs = torch.randint(0, classes, [a.batches, a.batch_size] + in_shape, generator=g)
        ys = torch.randint(0, classes, (a.batches, a.batch_size, in_shape[0]), generator=g)
    elif a.loss == "cross-entropy":
        ys = torch.randint(0, classes, (a.batches, a.batch_size), generator=g)
    else:
        ys = torch.randn(a.batches, a.batch_size, classes, generator=g).to(dtype=dtype)
    xs = xs[:, first:first + rows].contiguous().to(device=device, dtype=torch.long if tokens else dtype)
    ys = ys[:, first:first + rows].contiguous().to(device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if size > 1:
            torch.distributed.barrier()

    def step(i):
        opt.zero_grad(set_to_none=True)
        def forward():
            out = model(xs[i % a.batches])
            return loss_fn(out.reshape(-1, classes) if tokens else out, ys[i % a.batches].reshape(-1) if tokens else ys[i % a.batches])
        if a.autocast:  # the loss under autocast too (it upcasts to float32 there)
            with torch.autocast(device_type=device.type, dtype=getattr(torch, a.autocast)):
                loss = forward()
        else:
            loss = forward()
        loss.backward()
        opt.step()
        return loss

    for i in range(a.warmup):
        step(i)
    sync()
    rates, elapsed_total = [], 0.0
    i = a.warmup
    for _ in range(a.reps):
        sync()
        t0 = time.perf_counter()
        for _ in range(a.steps):
            loss = step(i)
            i += 1
        sync()
        elapsed = time.perf_counter() - t0
        elapsed_total += elapsed
        rates.append(a.steps * a.batch_size / elapsed)
    if rank != 0:
        return None
    final_loss = float(loss.item())
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = "cpu (%d threads%s)" % (torch.get_num_threads(),
                                       " per process, %d processes" % size if size > 1 else "")
    params = sum(p.numel() for p in model.parameters())
    return {"peer": "torch-ddp" if size > 1 else "torch", "torch": torch.__version__, "device": name,
            "processes": size, "threads": torch.get_num_threads() if device.type == "cpu" else None,
            "backend": torch.distributed.get_backend() if size > 1 else None,
            "layers": [] if a.model else a.widths, "model": a.model, "loss": a.loss, "batch_size": a.batch_size, "steps": a.steps,
            "reps": a.reps, "warmup": a.warmup, "dtype": a.dtype, "autocast": a.autocast, "optimizer": a.optimizer,
            "parameters": params, "seconds": elapsed_total,
            "samples_per_sec": statistics.median(rates), "min": min(rates), "max": max(rates),
            "rates": rates, "final_loss": final_loss,
            "tokens_per_sample": in_shape[0] if tokens else None}


def ddp_worker(rank, a, init_method, queue):
    import torch
    import torch.distributed as dist
    backend = "nccl" if a.device.startswith("cuda") else "gloo"
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=a.ddp)
    try:
        result = train(a, rank, a.ddp)
        if rank == 0:
            queue.put(result)
    finally:
        dist.destroy_process_group()


def run_ddp(a):
    import torch.multiprocessing as mp
    # Rendezvous through a file: nothing but the loopback is used.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    with tempfile.TemporaryDirectory(prefix="torch_mlp_ddp") as tmp:
        init_method = "file://" + os.path.join(tmp, "rendezvous")
        ctx = mp.get_context("spawn")
        queue = ctx.SimpleQueue()
        try:
            mp.spawn(ddp_worker, args=(a, init_method, queue), nprocs=a.ddp, join=True)
        except Exception as e:  # torch.multiprocessing.ProcessRaisedException and the like
            print("torch_mlp: a DDP process failed: %s" % e, file=sys.stderr)
            return None
        return queue.get() if not queue.empty() else None


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    if a.threads:
        # Before torch (and its BLAS) start their thread pools.
        os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
        os.environ.setdefault("OPENBLAS_NUM_THREADS", str(a.threads))
    try:
        import torch
    except ImportError:
        print("torch_mlp: PyTorch is not installed (%s -c 'import torch' fails)" % sys.executable,
              file=sys.stderr)
        return 3

    if a.device == "auto":
        a.device = "cuda" if torch.cuda.is_available() else "cpu"
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("torch_mlp: --device %s but torch.cuda.is_available() is False" % a.device, file=sys.stderr)
        return 2
    if a.ddp:
        import torch.distributed as dist
        if not dist.is_available():
            print("torch_mlp: --ddp needs torch.distributed, which this PyTorch lacks", file=sys.stderr)
            return 2
        r = run_ddp(a)
        if r is None:
            return 4
    else:
        r = train(a)

    print("torch_mlp: torch %s on %s, %s, %s, %d parameters, batch %d, %s, %s loss"
          % (r["torch"], r["device"], a.dtype, a.model or "layers " + a.layers, r["parameters"],
             a.batch_size, a.optimizer, a.loss))
    print("torch_mlp: %d x %d steps in %.3f s after %d warm-up steps: %.0f [%.0f-%.0f] samples/s "
          "(median [min-max]; final loss %.4f)"
          % (a.reps, a.steps, r["seconds"], a.warmup, r["samples_per_sec"], r["min"], r["max"],
             r["final_loss"]))
    if r["tokens_per_sample"]:
        print("torch_mlp: %.0f [%.0f-%.0f] tokens/s (%d tokens per sample)"
              % tuple([x * r["tokens_per_sample"] for x in (r["samples_per_sec"], r["min"], r["max"])]
                      + [r["tokens_per_sample"]]))
    if a.json:
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
