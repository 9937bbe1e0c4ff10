"""Strata model files (models/*.toml) as PyTorch modules, for the peers.

model_from_file(path) builds the network a model file describes layer by
layer as layers/registry.cpp does, with the file's names, so that the
state_dict keys are Strata's parameter names (wte.weight, h.0.0.ln_1.weight,
h.0.0.attn.qkv.weight, ...). Layer types: conv2d, batchnorm, max/avg/global
pooling, flatten, dropout, linear (std, tie), layernorm, activations,
embedding, position_embedding, attention, and the blocks "block" and
"residual" (repeat too). A tied linear shares the named layer's weight (the
same Parameter, as GPT-2's lm_head and wte).
"""
import math
from collections import OrderedDict


def _modules():
    import torch
    from torch import nn

    class Residual(nn.Sequential):
        """y = x + f(x), f the inner layers in order."""

        def forward(self, x):
            return x + super().forward(x)

    class PositionEmbedding(nn.Module):
        """y = x + W[:T], W (context, dim): GPT-2's wpe."""

        def __init__(self, context, dim, std):
            super().__init__()
            self.weight = nn.Parameter(torch.empty(context, dim))
            nn.init.normal_(self.weight, 0.0, std)

        def forward(self, x):
            return x + self.weight[: x.shape[1]]

    class CausalAttention(nn.Module):
        """qkv, softmax(q k^T / sqrt(hs), causal) v, proj: nanoGPT's
        CausalSelfAttention written for PyTorch 1.13 (no fused kernel)."""

        def __init__(self, width, heads, hs, bias):
            super().__init__()
            self.heads, self.hs = heads, hs
            self.qkv = nn.Linear(width, 3 * heads * hs, bias=bias)
            self.proj = nn.Linear(heads * hs, width, bias=bias)

        def forward(self, x):
            B, T, _ = x.shape
            W = self.heads * self.hs
            q, k, v = self.qkv(x).split(W, dim=2)
            q, k, v = (t.view(B, T, self.heads, self.hs).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hs))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, W)
            return self.proj(y)

    class TokenEmbedding(nn.Embedding):
        """nn.Embedding on ids given as floats (Strata's data) or integers."""

        def forward(self, x):
            return super().forward(x.long())

    return torch, nn, Residual, PositionEmbedding, CausalAttention, TokenEmbedding


def model_from_file(path, seq_len=None):
    """(nn.Module, input shape, classes) of a Strata model file; classes is the
    last dimension of the output (per position for a language model).
    seq_len replaces a token model's input = [T] (strata-train --seq-len)."""
    import tomllib
    torch, nn, Residual, PositionEmbedding, CausalAttention, TokenEmbedding = _modules()
    with open(path, "rb") as f:
        spec = tomllib.load(f)
    shape = list(spec["input"])
    if seq_len:
        shape = [seq_len]
    in_shape = list(shape)
    ties = []  # (module, name of the layer whose weight it uses)
    top = {}   # top-level name -> module

    def pair(v, default):
        v = default if v is None else v
        return tuple(v) if isinstance(v, (list, tuple)) else (v, v)

    def normal_init(m, std):
        if std:
            nn.init.normal_(m.weight, 0.0, std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)

    def one(l, shape, where):
        t = l["type"]
        if t in ("block", "residual"):
            inner, shape = build(l["layers"], shape, where)
            return (Residual if t == "residual" else nn.Sequential)(inner), shape
        if t == "conv2d":
            k = pair(l.get("kernel"), 1)
            m = nn.Conv2d(shape[0], l["out"], k, stride=pair(l.get("stride"), 1),
                          padding=pair(l.get("padding"), 0), dilation=pair(l.get("dilation"), 1),
                          groups=l.get("groups", 1), bias=l.get("bias", True))
        elif t in ("maxpool2d", "avgpool2d"):
            k = pair(l.get("kernel"), 1)
            cls = nn.MaxPool2d if t == "maxpool2d" else nn.AvgPool2d
            kw = {"dilation": pair(l.get("dilation"), 1)} if t == "maxpool2d" else \
                {"count_include_pad": l.get("count_include_pad", True)}
            m = cls(k, stride=pair(l.get("stride"), k), padding=pair(l.get("padding"), 0), **kw)
        elif t == "global_avgpool":
            m = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
        elif t == "batchnorm":
            cls = nn.BatchNorm2d if len(shape) == 3 else nn.BatchNorm1d
            m = cls(shape[0], eps=l.get("eps", 1e-5), momentum=l.get("momentum", 0.1))
        elif t == "flatten":
            m = nn.Flatten()
        elif t == "dropout":
            m = nn.Dropout(l.get("p", 0.5))
        elif t == "linear":
            m = nn.Linear(shape[-1], l["out"], bias=l.get("bias", True))
            normal_init(m, l.get("std", 0.0))
            if l.get("tie"):
                ties.append((m, l["tie"]))
        elif t == "layernorm":
            m = nn.LayerNorm(shape[-1], eps=l.get("eps", 1e-5))
        elif t in ("relu", "gelu", "tanh", "sigmoid"):
            m = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}[t]()
        elif t == "embedding":
            m = TokenEmbedding(l["vocab"], l["dim"])
            nn.init.normal_(m.weight, 0.0, l.get("std", 0.02))
        elif t == "position_embedding":
            m = PositionEmbedding(l["context"], shape[-1], l.get("std", 0.02))
        elif t == "attention":
            heads = l["heads"]
            hs = l.get("head_size", shape[-1] // heads)
            m = CausalAttention(shape[-1], heads, hs, l.get("bias", True))
            normal_init(m.qkv, l.get("std", 0.0))
            normal_init(m.proj, l.get("proj_std", l.get("std", 0.0)))
        else:
            raise SystemExit("torch peer: %s: %s: type %r has no PyTorch peer here" % (path, where, t))
        # The output shape, from a dry run of one sample.
        with torch.no_grad():
            m.eval()
            probe = torch.zeros([1] + shape)
            shape = list(m(probe).shape[1:])
            m.train()
        return m, shape

    def build(specs, shape, where):
        """OrderedDict of the layers of `specs` (positions as names where none
        is given; a repeated named layer N is N.0, N.1, ...)."""
        out = OrderedDict()
        for l in specs:
            name = l.get("name")
            reps = []
            for r in range(l.get("repeat", 1)):
                m, shape = one(l, shape, "%s layer %s" % (where, name or len(out)))
                reps.append(m)
            if name and len(reps) > 1:
                out[name] = nn.Sequential(*reps)
            else:
                for m in reps:
                    out[name or str(len(out))] = m
        return out, shape

    layers, shape = build(spec["layers"], shape, "layer")
    model = nn.Sequential(layers)
    for name, m in layers.items():
        top[name] = m
    for m, name in ties:
        if name not in top or not hasattr(top[name], "weight"):
            raise SystemExit("torch peer: %s: tie = %r names no earlier layer with a weight" % (path, name))
        m.weight = top[name].weight
    return model, in_shape, shape[-1]
