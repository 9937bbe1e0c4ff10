"""strata.from_torch: a PyTorch nn.Sequential as a Strata model, weights included."""

from ._strata import ConfigError


def _pair(v):
    return list(v) if isinstance(v, (tuple, list)) else [v, v]


def _layer_toml(m, index):
    """The [[layers]] table of one PyTorch module, or a ConfigError naming it."""
    import torch.nn as nn
    t = type(m).__name__
    if isinstance(m, nn.Linear):
        return {"type": "linear", "out": m.out_features, "bias": m.bias is not None}
    if isinstance(m, nn.Conv2d):
        if _pair(m.dilation) != [1, 1] or m.padding_mode != "zeros" or isinstance(m.padding, str):
            raise ConfigError(f"from_torch: layer {index} ({m}): only dilation 1 and numeric "
                              "zero padding are supported")
        return {"type": "conv2d", "out": m.out_channels, "kernel": _pair(m.kernel_size),
                "stride": _pair(m.stride), "padding": _pair(m.padding), "groups": m.groups,
                "bias": m.bias is not None}
    if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
        if not m.affine or not m.track_running_stats or m.momentum is None:
            raise ConfigError(f"from_torch: layer {index} ({m}): only affine BatchNorm with "
                              "running statistics and a momentum is supported")
        return {"type": "batchnorm", "eps": m.eps, "momentum": m.momentum}
    if isinstance(m, nn.LayerNorm):
        if len(m.normalized_shape) != 1 or not m.elementwise_affine:
            raise ConfigError(f"from_torch: layer {index} ({m}): only LayerNorm over the last "
                              "dimension with affine parameters is supported")
        return {"type": "layernorm", "eps": m.eps}
    if isinstance(m, (nn.MaxPool2d, nn.AvgPool2d)):
        stride = m.stride if m.stride is not None else m.kernel_size
        d = {"type": "maxpool2d" if isinstance(m, nn.MaxPool2d) else "avgpool2d",
             "kernel": _pair(m.kernel_size), "stride": _pair(stride), "padding": _pair(m.padding)}
        if isinstance(m, nn.AvgPool2d):
            d["count_include_pad"] = bool(m.count_include_pad)
        return d
    if isinstance(m, nn.AdaptiveAvgPool2d) and _pair(m.output_size) == [1, 1]:
        return {"type": "global_avgpool"}
    if isinstance(m, nn.Flatten):
        return {"type": "flatten"}
    if isinstance(m, nn.Dropout):
        return {"type": "dropout", "p": m.p}
    for cls, name in ((nn.ReLU, "relu"), (nn.GELU, "gelu"), (nn.Tanh, "tanh"), (nn.Sigmoid, "sigmoid")):
        if isinstance(m, cls):
            if isinstance(m, nn.GELU) and m.approximate != "none":
                raise ConfigError(f"from_torch: layer {index} ({m}): only the exact GELU is supported")
            return {"type": name}
    raise ConfigError(f"from_torch: layer {index} is {t}, which Strata has no layer for "
                      "(supported: Linear, Conv2d, BatchNorm1d/2d, LayerNorm, MaxPool2d, AvgPool2d, "
                      "AdaptiveAvgPool2d(1), Flatten, Dropout, ReLU, GELU, Tanh, Sigmoid)")


def from_torch(module, input_shape, name="from-torch"):
    """A strata.Model of a torch.nn.Sequential (input_shape: one sample's shape,
    e.g. (784,) or (1, 28, 28)), carrying the module's weights: a Trainer of it
    starts from them. Parameter names stay PyTorch's ("0.weight", ...)."""
    import torch.nn as tnn
    from . import nn
    if not isinstance(module, tnn.Sequential):
        raise ConfigError(f"from_torch: need a torch.nn.Sequential, got {type(module).__name__}")
    layers = []
    for i, m in enumerate(module):
        keys = _layer_toml(m, i)
        layers.append(nn.Layer(keys.pop("type"), **keys))
    model = nn.Sequential(*layers, input=input_shape, name=name)
    model._state = {k: v.detach().cpu().float().contiguous().numpy()
                    if v.is_floating_point() else v.detach().cpu().numpy()
                    for k, v in module.state_dict().items()}
    return model
