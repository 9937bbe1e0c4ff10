"""strata from Python. Oracles: strata-train (the same options, bitwise under
--reproducible), the single rank, and PyTorch."""
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

import strata
from conftest import read_safetensors, run_train

MLP = [784, 64, 10]
COMMON = dict(batch_size=64, seed=7, optimizer="adamw", lr=1e-3)


def assert_same_weights(a, b, what):
    assert sorted(a) == sorted(b), what
    for name in a:
        assert np.array_equal(a[name], b[name]), f"{what}: {name} differs (max |d| " \
            f"{np.max(np.abs(a[name].astype(np.float64) - b[name])):.3g})"


def python_loop(fashion, steps, **options):
    """steps of Trainer.step() over Fashion-MNIST's first batches, in order."""
    t = strata.Trainer(strata.Model.mlp(MLP), **dict(COMMON, **options))
    x, y = fashion["train_x"], fashion["train_y"]
    losses = [t.step(x[i * 64:(i + 1) * 64], y[i * 64:(i + 1) * 64]) for i in range(steps)]
    return t, losses


def test_build_info_and_model_description():
    assert "Kokkos" in strata.build_info()
    m = strata.Model.mlp(MLP)
    assert "Linear" in m.describe()
    names = [n for n, _ in m.parameters()]
    shapes = dict(m.parameters())
    assert len(names) == 4 and shapes[names[0]] == (64, 784)


def test_python_loop_is_bitwise_strata_train(fashion, train_exe, tmp_path):
    """Quick start's MLP: the same steps from Python and from strata-train, the
    same weights to the bit (--reproducible, data in order)."""
    steps = 20
    run_train(train_exe, ["--layers", ",".join(map(str, MLP)), "--steps", str(steps),
                          "--batch-size", "64", "--seed", "7", "--optimizer", "adamw", "--lr", "1e-3",
                          "--reproducible", "--no-shuffle", "--no-eval",
                          "--export", str(tmp_path / "w.safetensors")], tmp_path)
    oracle = read_safetensors(tmp_path / "w.safetensors")
    t, losses = python_loop(fashion, steps, reproducible=True, shuffle=False)
    assert t.steps == steps and all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert_same_weights(t.state_dict(), oracle, "Python loop vs strata-train")


def test_fit_is_strata_trains_loop(train_exe, tmp_path):
    """fit() runs strata-train's loop (shuffle, evaluation): the same final
    loss and test accuracy, bitwise, on synthetic data."""
    opts = ["--dataset", "synthetic", "--samples", "600", "--layers", "32,16,4", "--steps", "15",
            "--batch-size", "32", "--seed", "3", "--reproducible"]
    records = run_train(train_exe, opts, tmp_path)
    final = records[-1]
    evals = [r for r in records if "test_accuracy" in r]
    seen = []
    t = strata.Trainer(strata.Model.mlp([32, 16, 4]), dataset="synthetic", samples=600,
                       batch_size=32, seed=3, reproducible=True)
    r = t.fit(steps=15, on_step=seen.append)
    assert r["steps"] == 15 and [s["step"] for s in seen] == list(range(1, 16))
    assert r["final_loss"] == final["final_loss"]
    assert r["test_accuracy"] == evals[-1]["test_accuracy"]


def test_thread_ranks_are_bitwise_one_rank(fashion):
    """Two thread ranks (data parallel) and one rank: the same weights under
    --reproducible; and a pipeline of 2 stages too."""
    one, l1 = python_loop(fashion, 6, reproducible=True)
    two, l2 = python_loop(fashion, 6, reproducible=True, ranks=2, threads=1)
    assert two.ranks == 2 and l1 == l2
    assert_same_weights(two.state_dict(), one.state_dict(), "2 thread ranks vs 1")
    pp, lp = python_loop(fashion, 6, reproducible=True, ranks=2, threads=1, strategy="hybrid", pp=2,
                         micro_batches=2)
    assert "pp 2" in pp.describe()
    assert lp == l1
    assert_same_weights(pp.state_dict(), one.state_dict(), "2 pipeline stages vs 1 rank")


def test_torch_tensors_and_int64_labels(fashion):
    torch = pytest.importorskip("torch")
    a, la = python_loop(fashion, 3, reproducible=True)
    b = strata.Trainer(strata.Model.mlp(MLP), **dict(COMMON, reproducible=True))
    x = torch.from_numpy(fashion["train_x"][:192].reshape(192, 784))
    y = torch.from_numpy(fashion["train_y"][:192].astype(np.int64))
    lb = [b.step(x[i * 64:(i + 1) * 64], y[i * 64:(i + 1) * 64]) for i in range(3)]
    assert la == lb
    assert_same_weights(a.state_dict(), b.state_dict(), "torch tensors vs numpy")


def test_bad_arrays_are_value_errors_and_leave_the_trainer_usable(fashion):
    t = strata.Trainer(strata.Model.mlp(MLP), **COMMON)
    x, y = fashion["train_x"][:64], fashion["train_y"][:64]
    cases = [
        ((x.astype(np.float64), y), "dtype float64"),
        ((x.reshape(64, 784)[:, ::2], y), "C-contiguous"),  # a strided view
        ((np.asfortranarray(x.reshape(64, 784)), y), "C-contiguous"),
        ((x[:, :10] if x.ndim == 2 else x.reshape(64, 784)[:, :10].copy(), y), "10 features"),
        ((x, y[:32]), "32 samples"),
        ((x, np.full(64, 10, np.int32)), "label 10"),
        ((x, y.astype(np.float64)), "dtype float64"),
        ((x, y.astype(np.float32)), "needs integer labels"),
        (("not an array", y), "x"),
    ]
    for (bx, by), message in cases:
        with pytest.raises(ValueError, match=message) as e:
            t.step(bx, by)
        assert isinstance(e.value, strata.ConfigError)
    assert t.steps == 0
    assert np.isfinite(t.step(x, y)) and t.steps == 1


def test_bad_options_raise_config_errors_naming_them():
    with pytest.raises(strata.ConfigError, match="strategy"):
        strata.Trainer(strata.Model.mlp(MLP), strategy="nope")
    with pytest.raises(strata.ConfigError, match="batch-size"):
        strata.Trainer(strata.Model.mlp(MLP), batch_size=-3)
    with pytest.raises(strata.ConfigError, match="no-such-option"):
        strata.Trainer(strata.Model.mlp(MLP), no_such_option=1)
    with pytest.raises(strata.ConfigError, match="line"):
        strata.Model.from_text('name = "x"\ninput = [4]\n[[layers]]\ntype = "nope"\n')


def test_divergence_is_a_runtime_failure():
    t = strata.Trainer(strata.Model.mlp([10, 32, 2]), dataset="synthetic", loss="mse", lr=1e30,
                       steps=20)
    with pytest.raises(strata.RuntimeFailure, match="diverged"):
        t.fit()


def test_checkpoint_resumes_bitwise(fashion, tmp_path):
    t, _ = python_loop(fashion, 4, reproducible=True)
    file = t.save(tmp_path / "ckpt")
    x, y = fashion["train_x"], fashion["train_y"]
    after = [t.step(x[i * 64:(i + 1) * 64], y[i * 64:(i + 1) * 64]) for i in range(4, 7)]
    u = strata.Trainer(strata.Model.mlp(MLP), **dict(COMMON, reproducible=True, ranks=2, threads=1))
    u.load(file)
    assert u.steps == 4
    again = [u.step(x[i * 64:(i + 1) * 64], y[i * 64:(i + 1) * 64]) for i in range(4, 7)]
    assert again == after
    assert_same_weights(u.state_dict(), t.state_dict(), "resumed on 2 ranks vs uninterrupted")
    with pytest.raises(strata.ConfigError):
        strata.Trainer(strata.Model.mlp([784, 32, 10]), **COMMON).load(file)


def test_from_torch_matches_pytorch(fashion):
    """A PyTorch nn.Sequential, its weights, its loss and one SGD step."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(784, 32), torch.nn.Tanh(), torch.nn.Linear(32, 10))
    model = strata.from_torch(net, input_shape=(784,))
    t = strata.Trainer(model, optimizer="sgd", lr=0.1, momentum=0, batch_size=64)
    for name, value in net.state_dict().items():
        assert np.array_equal(t.state_dict()[name], value.numpy()), name
    x = fashion["train_x"][:64].reshape(64, 784)
    y = fashion["train_y"][:64]
    xt, yt = torch.from_numpy(x), torch.from_numpy(y.astype(np.int64))
    loss = torch.nn.functional.cross_entropy(net(xt), yt)
    # float32 sums of 784 and 32 products in another order: 1e-5 relative
    assert t.evaluate(x, y)["loss"] == pytest.approx(loss.item(), rel=1e-5)
    net.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in net.parameters():
            p -= 0.1 * p.grad
    assert t.step(x, y) == pytest.approx(loss.item(), rel=1e-5)
    after = t.state_dict()
    for name, value in net.state_dict().items():
        # per parameter: a step of 0.1 x a gradient accurate to ~1e-6 of its terms
        np.testing.assert_allclose(after[name], value.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)
    t2 = strata.Trainer(model, optimizer="sgd", lr=0.1, momentum=0, batch_size=64)
    report = t2.load_state_dict({k: v for k, v in net.state_dict().items() if k != "2.bias"},
                                strict=False)
    assert report["missing_keys"] == ["2.bias"]
    with pytest.raises(strata.ConfigError, match="the state_dict given .*2.bias"):
        t2.load_state_dict({k: v for k, v in net.state_dict().items() if k != "2.bias"})
    with pytest.raises(strata.ConfigError, match="Strata has no layer"):
        strata.from_torch(torch.nn.Sequential(torch.nn.LSTM(4, 4)), input_shape=(4,))


@pytest.mark.parametrize("mpi4py,ranks", [(False, 1), (True, 1), (False, 2)])
def test_mpi_processes_are_bitwise_one_rank(fashion, tmp_path, mpi4py, ranks):
    """Two MPI processes (of one or two thread ranks each; mpi4py imported
    first or not) and one rank in this process: the same losses and weights."""
    comms = [line for line in strata.build_info().splitlines() if line.startswith("communicators:")]
    if "mpi" not in comms[0].split(":")[1].replace(",", " ").split():
        pytest.skip("this build has no MPI communicator")
    mpiexec = os.environ.get("STRATA_MPIEXEC") or shutil.which("mpirun")
    assert mpiexec, "an MPI build, but no mpirun on PATH (set STRATA_MPIEXEC)"
    if mpi4py:
        pytest.importorskip("mpi4py")
    one, losses = python_loop(fashion, 5, reproducible=True, chunk=16)  # 16: 4 ranks' shards
    out = tmp_path / "mpi.npz"
    flags = ["--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    worker = pathlib.Path(__file__).with_name("mpi_worker.py")
    r = subprocess.run([mpiexec, *flags, "-np", "2", sys.executable, str(worker), str(out)]
                       + (["--mpi4py"] if mpi4py else []) + ["--ranks", str(ranks)],
                       capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stdout + r.stderr
    got = np.load(out)
    assert list(got["losses"]) == losses
    assert_same_weights({k: got[k] for k in got.files if k != "losses"}, one.state_dict(),
                        f"2 MPI processes x {ranks} thread rank(s) vs 1 rank")


def test_nn_builds_the_model_files_models(source):
    """strata.nn against the model file it restates (gpt-mini): the same
    parameter names and shapes, the same initial weights for the same seed."""
    from strata import nn
    gpt = nn.Sequential(
        nn.Embedding(256, 256, name="wte"),
        nn.PositionEmbedding(128, name="wpe"),
        nn.Block(
            nn.Residual(nn.LayerNorm(name="ln_1"),
                        nn.Attention(8, name="attn", std=0.02, proj_std=0.0058)),
            nn.Residual(nn.LayerNorm(name="ln_2"), nn.Linear(1024, name="c_fc", std=0.02), nn.GELU(),
                        nn.Linear(256, name="c_proj", std=0.0058)),
            name="h", repeat=6),
        nn.LayerNorm(name="ln_f"),
        nn.Linear(256, name="lm_head", bias=False, tie="wte"),
        input=[128], name="gpt-mini")
    file = strata.Model.from_file(str(source / "models" / "gpt-mini.toml"))
    assert gpt.parameters() == file.parameters()
    a = strata.Trainer(gpt, dataset="synthetic", batch_size=4).state_dict()
    b = strata.Trainer(file, dataset="synthetic", batch_size=4).state_dict()
    assert_same_weights(a, b, "nn.Sequential vs models/gpt-mini.toml")
    with pytest.raises(strata.ConfigError, match="nope"):
        nn.Sequential(nn.Linear(4, nope=1), input=[3])
    with pytest.raises(strata.ConfigError, match="positional"):
        nn.Linear(4, 5)


def test_steps_release_the_gil():
    """A Python thread runs while fit() trains (no callbacks: no Python code
    runs on this thread in between): the GIL is released inside."""
    import threading
    import time
    ticks = []
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.001)

    t = strata.Trainer(strata.Model.mlp([784, 256, 10]), batch_size=64, steps=400, eval=False)
    thread = threading.Thread(target=count)
    thread.start()
    time.sleep(0.01)
    before = len(ticks)
    t0 = time.perf_counter()
    r = t.fit()
    seconds = time.perf_counter() - t0
    during = len(ticks) - before
    stop.set()
    thread.join()
    assert r["steps"] == 400
    # about one tick per 1-2 ms of training; a held GIL would allow about none
    assert during > 0.1 * seconds * 1000, (during, seconds)


def test_a_fresh_process_describes_before_any_trainer_and_refuses_after_shutdown():
    """The runtime starts on first use (a model's description included) and
    once per process: after strata.shutdown() a Trainer is a clear error."""
    script = (
        "import strata\n"
        "print(strata.Model.mlp([4, 3, 2]).describe())\n"
        "strata.shutdown()\n"
        "try:\n"
        "    strata.Trainer(strata.Model.mlp([4, 3, 2]), dataset='synthetic')\n"
        "except strata.RuntimeFailure as e:\n"
        "    print('refused:', e)\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert r.returncode == 0, r.stderr
    assert "Linear" in r.stdout and "refused: strata.shutdown() ended" in r.stdout, r.stdout


def test_what_a_first_time_user_tries():
    """fit(steps=) counts more steps, also after step() and after a callback
    that raised; booleans both ways; unknown keywords; NaN inputs; integer
    token ids; a checkpoint folder; MSE has no accuracy."""
    from strata import nn
    t = strata.Trainer(strata.Model.mlp([8, 4, 2]), dataset="synthetic", samples=256,
                       batch_size=16, reproducible=False, shuffle=True, eval=False)
    assert t.fit(steps=3)["steps"] == 3
    assert t.fit(steps=2)["steps"] == 5

    def stop(s):
        if s["step"] == 7:
            raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        t.fit(steps=4, on_step=stop)
    assert t.steps == 7
    with pytest.raises(strata.ConfigError, match="did you mean lr"):
        strata.Trainer(strata.Model.mlp([8, 2]), learning_rate=0.1)
    with pytest.raises(strata.ConfigError, match="takes a value"):
        strata.Trainer(strata.Model.mlp([8, 2]), batch_size=True)
    x = np.ones((16, 8), np.float32)
    x[3, 5] = np.nan
    with pytest.raises(strata.ConfigError, match="sample 3, feature 5"):
        t.step(x, np.zeros(16, np.int32))
    with pytest.raises(strata.ConfigError, match="reshape"):
        t.step(np.ones(8, np.float32), np.zeros(1, np.int32))
    # a language model's token ids as integers: the same step as float ids
    lm = nn.Sequential(nn.Embedding(16, 8), nn.Linear(16), input=[4], name="tiny-lm")
    ids = np.arange(32, dtype=np.int64).reshape(8, 4) % 16
    a = strata.Trainer(lm, dataset="synthetic", batch_size=8)
    b = strata.Trainer(lm, dataset="synthetic", batch_size=8)
    assert a.step(ids, ids) == b.step(ids.astype(np.float32), ids)
    assert_same_weights(a.state_dict(), b.state_dict(), "int vs float token ids")
    # load() of a checkpoint folder takes its latest
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        a.save(d)
        c = strata.Trainer(lm, dataset="synthetic", batch_size=8)
        c.load(d)
        assert c.steps == 1
        assert_same_weights(c.state_dict(), a.state_dict(), "loaded from the folder")
    m = strata.Trainer(strata.Model.mlp([8, 2]), dataset="synthetic", loss="mse")
    assert m.evaluate(np.ones((4, 8), np.float32), np.zeros((4, 2), np.float32))["accuracy"] is None
