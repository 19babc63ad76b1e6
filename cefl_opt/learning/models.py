"""Small torch models for the CE-FL trainer and their analytic FLOP counts.

- ``mlp``: flatten -> Linear(C*H*W, 200) -> ReLU -> Linear(200, classes) (784-200-10 on MNIST).
- ``cnn``: two conv blocks (conv -> ReLU -> 2x2 max-pool; 16 and 32 channels; 5x5 kernels with
  padding 2 on 28x28/32x32 inputs, 3x3 with padding 1 on small inputs such as 8x8 digits) and one
  fully connected layer.
No batch normalisation or other buffers: a model is exactly its flat parameter vector.
"""
from __future__ import annotations

import torch
from torch import nn

from ..instance import InstanceError

MODELS = ("mlp", "cnn")


class MLP(nn.Module):
    def __init__(self, input_shape, n_classes: int = 10, hidden: int = 200):
        super().__init__()
        d = 1
        for v in input_shape:
            d *= int(v)
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(d, hidden), nn.ReLU(),
                                 nn.Linear(hidden, n_classes))

    def forward(self, x):
        return self.net(x)


class CNN(nn.Module):
    def __init__(self, input_shape, n_classes: int = 10, channels=(16, 32)):
        super().__init__()
        c, h, w = (int(v) for v in input_shape)
        k, p = (5, 2) if min(h, w) >= 16 else (3, 1)
        c1, c2 = channels
        self.features = nn.Sequential(
            nn.Conv2d(c, c1, k, padding=p), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(c1, c2, k, padding=p), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten())
        self.fc = nn.Linear(c2 * (h // 4) * (w // 4), n_classes)

    def forward(self, x):
        return self.fc(self.features(x))


def make_model(kind: str, input_shape, n_classes: int = 10, seed: int | None = None) -> nn.Module:
    """A fresh model; with ``seed`` its initial weights depend on the seed only (the global
    torch RNG state is restored afterwards)."""
    if len(tuple(input_shape)) != 3:
        raise InstanceError(f"input shape must be (C, H, W), got {tuple(input_shape)}")
    if kind not in MODELS:
        raise InstanceError(f"unknown model {kind!r} (known: {', '.join(MODELS)})")
    cls = MLP if kind == "mlp" else CNN
    if seed is None:
        return cls(input_shape, n_classes)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        return cls(input_shape, n_classes)


def forward_flops(model: nn.Module, input_shape) -> int:
    """Multiply-add FLOPs (2 per MAC) of one sample's forward pass through Linear and Conv2d
    layers (ReLU, pooling and bias adds are ignored: < 1 % here)."""
    flops = 0
    hooks = []

    def lin(mod, inp, out):
        nonlocal flops
        flops += 2 * mod.in_features * mod.out_features

    def conv(mod, inp, out):
        nonlocal flops
        kh, kw = mod.kernel_size
        flops += 2 * (mod.in_channels // mod.groups) * kh * kw * out[0].numel()

    for m in model.modules():
        if isinstance(m, nn.Linear):
            hooks.append(m.register_forward_hook(lin))
        elif isinstance(m, nn.Conv2d):
            hooks.append(m.register_forward_hook(conv))
    try:
        with torch.no_grad():
            model(torch.zeros((1, *tuple(input_shape))))
    finally:
        for h in hooks:
            h.remove()
    return int(flops)


def train_flops_per_sample(model: nn.Module, input_shape) -> int:
    """Forward + backward of one sample: ~3x the forward FLOPs (backward = 2x forward)."""
    return 3 * forward_flops(model, input_shape)
