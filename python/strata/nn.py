"""Models built in Python from Strata's layer vocabulary (the model-file
format of docs/training.md, one class per layer type):

    from strata import nn
    model = nn.Sequential(
        nn.Conv2d(32, kernel=3, padding=1, bias=False), nn.BatchNorm(), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(10),
        input=(1, 28, 28), name="small-cnn")

A layer takes its output width (`out`), not its input: the shapes follow from
`input`. Keyword arguments are the model file's keys (`std`, `tie`, `eps`,
...); the C++ reader checks them, so a wrong key fails with its message.
"""

from ._strata import ConfigError


def _value(v):
    """A TOML value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, Layer):
        return v.inline()
    if isinstance(v, (int, float)):
        return repr(v)
    raise ConfigError(f"model: {v!r} is not a value a model file holds")


class Layer:
    """One layer: its type and the model file's keys (None: left out)."""

    def __init__(self, type, name=None, **keys):
        self.type = type
        self.keys = {"name": name, **keys}

    def _items(self):
        yield "type", self.type
        for k, v in self.keys.items():
            if v is not None:
                yield k, v

    def inline(self):
        return "{ " + ", ".join(f"{k} = {_value(v)}" for k, v in self._items()) + " }"

    def table(self):
        return "[[layers]]\n" + "".join(f"{k} = {_value(v)}\n" for k, v in self._items())

    def __repr__(self):
        return f"nn.{type(self).__name__}({self.inline()})"


def _layer_class(type_name, doc, *positional):
    def __init__(self, *args, name=None, **keys):
        if len(args) > len(positional):
            raise ConfigError(f"nn.{cls.__name__}: at most {len(positional)} positional "
                              f"argument(s) ({', '.join(positional) or 'none'}), got {len(args)}")
        keys.update(zip(positional, args))
        Layer.__init__(self, type_name, name=name, **keys)
    cls = type(type_name, (Layer,), {"__init__": __init__, "__doc__": doc})
    return cls


Linear = _layer_class("linear", "Linear(out, bias=True, std=None, tie=None)", "out")
Conv2d = _layer_class("conv2d", "Conv2d(out, kernel, stride=1, padding=0, groups=1, bias=True)",
                      "out", "kernel")
BatchNorm = _layer_class("batchnorm", "BatchNorm(eps=1e-5, momentum=0.1)")
LayerNorm = _layer_class("layernorm", "LayerNorm(eps=1e-5)")
MaxPool2d = _layer_class("maxpool2d", "MaxPool2d(kernel, stride=kernel, padding=0)", "kernel")
AvgPool2d = _layer_class("avgpool2d", "AvgPool2d(kernel, stride=kernel, padding=0)", "kernel")
GlobalAvgPool = _layer_class("global_avgpool", "GlobalAvgPool(): the mean of each channel")
Flatten = _layer_class("flatten", "Flatten()")
Dropout = _layer_class("dropout", "Dropout(p=0.5)", "p")
ReLU = _layer_class("relu", "ReLU()")
GELU = _layer_class("gelu", "GELU() (exact, erf)")
Tanh = _layer_class("tanh", "Tanh()")
Sigmoid = _layer_class("sigmoid", "Sigmoid()")
Embedding = _layer_class("embedding", "Embedding(vocab, dim)", "vocab", "dim")
PositionEmbedding = _layer_class("position_embedding", "PositionEmbedding(context)", "context")
Attention = _layer_class("attention", "Attention(heads, std=None, proj_std=None): causal "
                         "self-attention", "heads")


class Residual(Layer):
    """x + f(x), f the layers given."""

    def __init__(self, *layers, name=None, **keys):
        super().__init__("residual", name=name, **keys)
        self.keys["layers"] = list(layers)


class Block(Layer):
    """The layers given as one block, `repeat` times (a transformer's stack)."""

    def __init__(self, *layers, repeat=None, name=None, **keys):
        super().__init__("block", name=name, repeat=repeat, **keys)
        self.keys["layers"] = list(layers)


def Sequential(*layers, input, name="model"):
    """A strata.Model of these layers, for samples of shape `input`."""
    from . import Model
    for i, layer in enumerate(layers):
        if not isinstance(layer, Layer):
            raise ConfigError(f"nn.Sequential: layer {i} is {type(layer).__name__}, not a strata.nn layer")
    text = f"name = {_value(name)}\ninput = {_value([int(d) for d in input])}\n"
    text += "".join("\n" + layer.table() for layer in layers)
    return Model.from_text(text, name)
