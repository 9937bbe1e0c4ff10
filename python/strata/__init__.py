"""Strata from Python: train models in parallel with Strata's engines.

    import strata
    model = strata.Model.from_file("models/fashion-mlp.toml")
    trainer = strata.Trainer(model, ranks=2, optimizer="adamw", lr=1e-3, batch_size=128)
    data = strata.datasets.load("fashion-mnist")
    for x, y in strata.batches(data["train_x"], data["train_y"], 128):
        loss = trainer.step(x, y)
    print(trainer.evaluate(data["test_x"], data["test_y"]))

A Trainer takes strata-train's options as keyword arguments (`--batch-size
128` is `batch_size=128`, a flag `--reproducible` is `reproducible=True`,
`--no-shuffle` is `shuffle=False`), with their names, defaults and checks:
every strategy strata-train has (data parallelism over thread ranks, pipeline
and tensor parallelism, ZeRO, mixed precision) is one keyword away. Under
mpirun or srun each process is one rank of the MPI world.

Arrays: NumPy arrays and PyTorch CPU tensors, float32 inputs and integer
labels (or float32 targets for MSE), C-contiguous. A host build reads each
rank's rows in place, without a copy. Every call releases the GIL while it
runs. Errors are strata.ConfigError (a ValueError: bad options, shapes,
arrays), strata.DataError (an OSError: missing or corrupt files) and
strata.RuntimeFailure (a RuntimeError: divergence, a failed rank), all
strata.Error, each with the message strata-train prints.

docs/python.md has the whole guide.
"""

import atexit as _atexit
import os as _os
import tempfile as _tempfile

from . import _strata
from ._strata import ConfigError, DataError, Error, RuntimeFailure  # noqa: F401

__all__ = ["Model", "Trainer", "nn", "init", "shutdown", "build_info", "batches", "datasets",
           "from_torch", "Error", "ConfigError", "DataError", "RuntimeFailure"]

init = _strata.init
shutdown = _strata.shutdown
build_info = _strata.build_info
threads = _strata.threads
_atexit.register(_strata.shutdown)


_known = None


def _train_options():
    """{option: takes a value} of every strata-train option, from its --help."""
    global _known
    if _known is None:
        import re
        _known = {}
        for line in _strata.train_help().splitlines():
            m = re.match(r"^\s+(?:-\w,)?(--[a-z0-9-]+)(\s+\S)?", line)
            if m:
                value = m.group(2) is not None and re.match(r"\s+[A-Z]", m.group(2)) is not None
                _known[m.group(1)] = value
    return _known


def _options(options):
    """strata-train's command-line options from keyword arguments: batch_size=128 is
    --batch-size 128; a flag takes True or False (shuffle=False is --no-shuffle,
    shuffle=True the default, reproducible=False the default too)."""
    known = _train_options()
    args = []
    for key, value in options.items():
        name = "--" + key.replace("_", "-")
        negative = "--no-" + key.replace("_", "-")
        if value is None:
            continue
        if name not in known and negative not in known:
            import difflib
            close = difflib.get_close_matches(name, list(known), n=3)
            close = ["--lr"] if key == "learning_rate" else close
            raise ConfigError(f"{key}=: strata-train has no option {name}"
                              + (f" (did you mean {', '.join(c[2:].replace('-', '_') for c in close)}?)"
                                 if close else " (strata-train --help lists them)"))
        if isinstance(value, bool):
            if name in known and not known[name]:
                if value:
                    args.append(name)  # a flag; False: its default
            elif negative in known:
                if not value:
                    args.append(negative)  # True: its default
            else:
                raise ConfigError(f"{key}={value}: {name} takes a value, not True or False")
        elif isinstance(value, (list, tuple)):
            args += [name, ",".join(str(v) for v in value)]
        else:
            args += [name, str(value)]
    return args


class Model:
    """A model description: a model file (TOML), TOML text, or the MLP shorthand."""

    def __init__(self, args, source, keep=None):
        self._args = list(args)
        self.source = source
        self._state = None
        self._keep = keep  # the temporary file of a model made from text

    @classmethod
    def from_file(cls, path):
        """The model of a TOML model file (models/*.toml; docs/models.md)."""
        if not _os.path.exists(path):
            raise ConfigError(f"model file {path}: no such file")
        return cls(["--model", str(path)], str(path))

    @classmethod
    def from_text(cls, text, name="model"):
        """A model from TOML text (the model-file format)."""
        f = _tempfile.NamedTemporaryFile("w", prefix=f"strata-{name}-", suffix=".toml", delete=False)
        f.write(text)
        f.close()
        model = cls(["--model", f.name], name, keep=f.name)
        model.describe()  # a bad description fails here, naming the line
        return model

    @classmethod
    def mlp(cls, widths, activation="relu", dropout=0.0):
        """strata-train's --layers MLP: Linear - activation - [Dropout] - ... - Linear."""
        args = ["--layers", ",".join(str(w) for w in widths), "--activation", activation]
        if dropout:
            args += ["--dropout", str(dropout)]
        return cls(args, "--layers " + ",".join(str(w) for w in widths))

    def describe(self):
        """The layer table: shapes, parameters, FLOPs and activation memory."""
        return _strata.describe_model(self._args)

    def parameters(self):
        """[(name, shape)] of every parameter tensor, in single-rank layout."""
        return [(n, tuple(s)) for n, s in _strata.model_parameters(self._args)]

    def __repr__(self):
        return f"strata.Model({self.source})"

    def __del__(self):
        if self._keep:
            try:
                _os.unlink(self._keep)
            except OSError:
                pass


class Trainer:
    """A training run driven from Python, with strata-train's options.

    trainer.step(x, y)          one optimizer step on a global batch; returns the loss
    trainer.evaluate(x, y)      {"loss", "accuracy", "samples"}, no update
    trainer.fit(...)            strata-train's loop on the `dataset` option's data,
                                or step() over an iterable of (x, y) batches
    trainer.save(dir), load(file), state_dict(), load_state_dict(d)
    """

    def __init__(self, model, **options):
        if not isinstance(model, Model):
            raise ConfigError(f"Trainer: model must be a strata.Model, got {type(model).__name__}")
        self.model = model
        self.options = dict(options)
        self._session = _strata.Session(model._args + _options(options))
        state = getattr(model, "_state", None)
        if state is not None:  # strata.from_torch: the module's weights
            self.load_state_dict(state)

    def describe(self):
        """The strategy, as strata-train's banner says it."""
        return self._session.describe()

    num_params = property(lambda self: self._session.num_params)
    ranks = property(lambda self: self._session.ranks, doc="ranks of the run")
    rank = property(lambda self: self._session.rank,
                    doc="this process's first rank (under MPI: its rank in the world)")
    steps = property(lambda self: self._session.steps, doc="optimizer steps done")

    def step(self, x, y):
        """One optimizer step on the global batch (x, y); returns its mean loss."""
        return self._session.step(x, y)

    def evaluate(self, x, y):
        """The loss (and accuracy) of the model on (x, y), in evaluation mode."""
        return self._session.evaluate(x, y)

    def fit(self, data=None, epochs=None, steps=None, on_step=None, on_evaluation=None):
        """Trains and returns a summary.

        data=None: strata-train's loop on the Trainer's `dataset` option (shuffling,
        evaluation, checkpoints as its options say): steps=N trains N more steps,
        epochs=E up to E epochs from the run's start (strata-train's --epochs);
        on_step(dict) and on_evaluation(dict) are called on this thread (they must
        not call the Trainer).
        data=iterable of (x, y): step() on each batch, on_step({"step", "loss"}) after
        each; epochs > 1 needs an iterable that starts again (a list, a DataLoader).
        """
        if data is None:
            return self._session.fit(epochs or 0, steps or 0, on_step, on_evaluation)
        if on_evaluation is not None:
            raise ConfigError("fit(data=...): on_evaluation is for fit() on the dataset option; "
                              "call evaluate() in on_step")
        if (epochs or 1) > 1 and iter(data) is data:
            raise ConfigError(f"fit(data=..., epochs={epochs}): a generator or iterator runs out "
                              "after one epoch; pass a list or a DataLoader")
        if isinstance(data, str):
            raise ConfigError("fit(data=...): give an iterable of (x, y) batches; a data set by "
                              f"name is the Trainer's option dataset={data!r}")
        last = None
        done = 0
        for _ in range(epochs or 1):
            for x, y in data:
                last = self.step(x, y)
                done += 1
                if on_step:
                    on_step({"step": self.steps, "loss": last})
                if steps and done >= steps:
                    return {"steps": self.steps, "final_loss": last}
        return {"steps": self.steps, "final_loss": last}

    def save(self, directory):
        """Writes a checkpoint (any strategy resumes it); returns its file."""
        return self._session.save(str(directory))

    def load(self, file):
        """Restores a checkpoint file written by any strategy (or strata-train); a
        checkpoint folder gives its latest."""
        self._session.load(str(file))

    def state_dict(self):
        """{name: numpy.ndarray} with PyTorch's names (what strata-train --export writes)."""
        return self._session.state_dict()

    def load_state_dict(self, state_dict, strict=True):
        """Sets the weights from {name: array or tensor} (PyTorch's names); returns
        {"missing_keys", "unexpected_keys", "mismatched", "loaded"}."""
        return self._session.load_state_dict(dict(state_dict), strict)


def batches(x, y, batch_size, shuffle=False, seed=0, drop_last=False):
    """(x, y) batches of batch_size rows, in order or shuffled; views, no copies
    unless shuffled."""
    import numpy as np
    n = len(x)
    order = np.random.default_rng(seed).permutation(n) if shuffle else None
    for first in range(0, n, batch_size):
        last = min(first + batch_size, n)
        if drop_last and last - first < batch_size:
            break
        if order is None:
            yield x[first:last], y[first:last]
        else:
            rows = order[first:last]
            yield np.ascontiguousarray(x[rows]), np.ascontiguousarray(y[rows])


class datasets:
    """The data sets strata-train reads, as NumPy arrays."""

    @staticmethod
    def load(name="fashion-mnist", **options):
        """{"train_x", "train_y", "test_x", "test_y", "classes", "name"}: the data set
        of strata-train's --dataset NAME (and its other data options), normalised as
        strata-train normalises it for the model the options name."""
        return _strata.load_dataset(_options(dict(options, dataset=name)))


from . import nn  # noqa: E402  (needs the names above)
from .interop import from_torch  # noqa: E402
