"""A small CNN mixing padkit's padding forms, and its twin built from torch layers.

``mixed_model()`` holds TF ``same`` at stride 2 (pads that depend on the input size's
parity), a depthwise ``same`` conv, a static per-side conv, a conv that is ``same`` on one
axis and causal (dilated) on the other, a ``same`` max pool, a ``same`` transposed conv, and
two ``same`` average pools (one leaving the pads out of the divisor, one counting them).

``twin_model()`` computes the same function from plain torch layers (``padding=0``) and an
explicit ``F.pad`` (or crop) whose pads it derives itself from the TensorFlow/ONNX
definitions, sharing no code with padkit; it has the same ``state_dict`` keys, so
``twin.load_state_dict(model.state_dict())`` gives the reference for a trained model.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import padkit.nn as pn

Pairs = tuple[tuple[int, int], ...]


def tf_same(n: int, k: int, s: int = 1, d: int = 1) -> tuple[int, int]:
    """TensorFlow/ONNX SAME_UPPER pads of one axis: output ceil(n / s), odd pad at the end."""
    k_eff = d * (k - 1) + 1
    out = -(-n // s)
    total = max((out - 1) * s + k_eff - n, 0)
    return total // 2, total - total // 2


def flat(pairs: Pairs) -> list[int]:
    """(lo, hi) per axis in axis order -> F.pad's last-axis-first list."""
    return [v for pair in reversed(pairs) for v in pair]


def mixed_model() -> nn.Sequential:
    return nn.Sequential(
        pn.Conv2d(3, 8, 3, stride=2, padding="same"),
        nn.ReLU(),
        pn.Conv2d(8, 8, 5, stride=2, padding="same", groups=8),
        pn.Conv2d(8, 12, (2, 3), padding=((1, 0), (0, 2))),
        pn.Conv2d(12, 12, 3, dilation=2, padding=("same", "causal")),
        nn.ReLU(),
        pn.MaxPool2d(3, 2, padding="same"),
        pn.ConvTranspose2d(12, 8, 3, stride=2, padding="same"),
        pn.AvgPool2d(2, 1, padding="same"),
        pn.AvgPool2d(3, 2, padding="same", count_include_pad=True),
    )


class _SameConv(nn.Conv2d):
    """A torch conv (padding=0) after an explicit F.pad: TF 'same' or fixed pairs."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: int = 1,
        dilation: int = 1,
        groups: int = 1,
        pads: Pairs | None = None,
    ) -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, 0, dilation, groups=groups)
        self.pads = pads

    def forward(self, x: Tensor) -> Tensor:
        pads = self.pads
        if pads is None:
            pads = tuple(
                tf_same(n, k, s, d)
                for n, k, s, d in zip(x.shape[2:], self.kernel_size, self.stride, self.dilation)
            )
        return super().forward(F.pad(x, flat(pads)))


class _SameConvT(nn.ConvTranspose2d):
    """TF Conv2DTranspose 'same': the full output (n-1)*s + k, cropped to n*s (odd crop at
    the end)."""

    def forward(self, x: Tensor, output_size: list[int] | None = None) -> Tensor:
        full = super().forward(x)
        out = full
        for axis, (n, k, s) in enumerate(zip(x.shape[2:], self.kernel_size, self.stride)):
            total = k - s
            lo = total // 2
            out = out.narrow(2 + axis, lo, n * s)
        return out


class _SameMax(nn.MaxPool2d):
    def forward(self, x: Tensor) -> Tensor:
        k, s = self.kernel_size, self.stride
        assert isinstance(k, int) and isinstance(s, int)
        pads = tuple(tf_same(n, k, s) for n in x.shape[2:])
        return F.max_pool2d(F.pad(x, flat(pads), value=float("-inf")), k, s)


class _SameAvg(nn.AvgPool2d):
    """Window sums of the zero-padded input over the count of input elements (TF) or of
    the whole window (counting pads)."""

    def forward(self, x: Tensor) -> Tensor:
        k, s = self.kernel_size, self.stride
        assert isinstance(k, int) and isinstance(s, int)
        pads = flat(tuple(tf_same(n, k, s) for n in x.shape[2:]))
        total = F.avg_pool2d(F.pad(x, pads), k, s, divisor_override=1)
        if self.count_include_pad:
            return total / (k * k)
        ones = torch.ones((1, 1, *x.shape[2:]), dtype=x.dtype, device=x.device)
        return total / F.avg_pool2d(F.pad(ones, pads), k, s, divisor_override=1)


def twin_model() -> nn.Sequential:
    return nn.Sequential(
        _SameConv(3, 8, 3, stride=2),
        nn.ReLU(),
        _SameConv(8, 8, 5, stride=2, groups=8),
        _SameConv(8, 12, (2, 3), pads=((1, 0), (0, 2))),
        _SameConv(12, 12, 3, dilation=2, pads=((2, 2), (4, 0))),
        nn.ReLU(),
        _SameMax(3, 2),
        _SameConvT(12, 8, 3, stride=2),
        _SameAvg(2, 1, count_include_pad=False),
        _SameAvg(3, 2, count_include_pad=True),
    )


def model_and_twin(
    seed: int = 0, dtype: torch.dtype = torch.float64
) -> tuple[nn.Module, nn.Module]:
    """The padkit model with random weights and its twin holding the same weights."""
    torch.manual_seed(seed)
    model = mixed_model().to(dtype)
    twin = twin_model().to(dtype)
    twin.load_state_dict(model.state_dict())
    return model, twin
