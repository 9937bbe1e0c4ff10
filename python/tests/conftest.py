"""The pytest suite of the strata package (ctest runs it as python.pytest).

Environment: PYTHONPATH holds the build's python/ folder; STRATA_TRAIN is the
strata-train the oracle runs come from; STRATA_SOURCE_DIR the source tree
(its models/). Without them the paths of a build in build/ are tried.
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest

SOURCE = pathlib.Path(os.environ.get("STRATA_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[2]))
BUILD = pathlib.Path(os.environ.get("STRATA_BUILD_DIR", SOURCE / "build"))
if "strata" not in sys.modules and str(BUILD / "python") not in sys.path:
    sys.path.insert(0, str(BUILD / "python"))

import strata  # noqa: E402

# Two host threads, so that two thread ranks of one thread each fit on any machine.
strata.init(threads=2)


@pytest.fixture(scope="session")
def train_exe():
    exe = os.path.abspath(os.environ.get("STRATA_TRAIN", str(BUILD / "bin" / "strata-train")))
    assert os.path.exists(exe), f"no strata-train at {exe} (set STRATA_TRAIN)"
    return exe


@pytest.fixture(scope="session")
def source():
    return SOURCE


@pytest.fixture(scope="session")
def fashion():
    """Fashion-MNIST as strata-train reads and normalises it."""
    return strata.datasets.load("fashion-mnist")


def run_train(exe, args, cwd):
    """strata-train with args; returns its final metrics record."""
    metrics = pathlib.Path(cwd) / "metrics.jsonl"
    env = dict(os.environ, OMP_NUM_THREADS="2", OMP_WAIT_POLICY="PASSIVE")
    r = subprocess.run([exe, *args, "--metrics", str(metrics), "--quiet"], cwd=cwd, env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    return records


def read_safetensors(path):
    """{name: numpy array} of a safetensors file (float32 and int64 tensors)."""
    import numpy as np
    raw = pathlib.Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    body = raw[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        dtype = {"F32": np.float32, "I64": np.int64}[t["dtype"]]
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(body[a:b], dtype=dtype).reshape(t["shape"])
    return out
