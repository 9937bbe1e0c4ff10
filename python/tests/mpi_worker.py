"""One MPI process of test_strata.py's MPI test: 5 reproducible steps of the
quick start's MLP on Fashion-MNIST's first batches; rank 0 saves the weights.

    mpirun -np 2 python3 mpi_worker.py OUT.npz [--mpi4py] [--ranks N]
"""
import sys

import numpy as np

if "--mpi4py" in sys.argv:
    from mpi4py import MPI  # MPI started by mpi4py; Strata takes it as it is

import strata  # noqa: E402

ranks = int(sys.argv[sys.argv.index("--ranks") + 1]) if "--ranks" in sys.argv else 1
strata.init(threads=ranks)
data = strata.datasets.load("fashion-mnist")
t = strata.Trainer(strata.Model.mlp([784, 64, 10]), batch_size=64, seed=7, optimizer="adamw",
                   lr=1e-3, reproducible=True, chunk=16, ranks=ranks, threads=1)
if "--mpi4py" in sys.argv:
    assert t.rank == ranks * MPI.COMM_WORLD.Get_rank(), (t.rank, MPI.COMM_WORLD.Get_rank())
x, y = data["train_x"], data["train_y"]
losses = [t.step(x[i * 64:(i + 1) * 64], y[i * 64:(i + 1) * 64]) for i in range(5)]
assert t.ranks == 2 * ranks, t.describe()
if t.rank == 0:
    np.savez(sys.argv[1], losses=np.array(losses), **t.state_dict())
