"""Quantization of models with padkit convs, on every path torch and torchao offer on CPU.

- torch.ao eager mode (``fuse_modules``, ``fuse_modules_qat``, ``prepare``, ``prepare_qat``,
  ``convert``): :mod:`padkit.quantization.eager`, registered into torch.ao's tables when
  ``padkit.nn`` is imported, so torch's functions handle padkit convs unchanged.
- FX graph mode (``prepare_fx``, ``prepare_qat_fx``, ``convert_fx``):
  :mod:`padkit.quantization.fx` (torch's functions with its configs, or its wrappers).
- PT2E (``torch.export`` + torchao's ``prepare_pt2e``/``convert_pt2e``):
  :class:`PadkitQuantizer` around any torchao quantizer (:mod:`padkit.quantization.pt2e`).

docs/quantization.md has the recipe for each path.
"""

from __future__ import annotations

from typing import Any

from .eager import (
    ConvBn1d as ConvBn1d,
    ConvBn2d as ConvBn2d,
    ConvBn3d as ConvBn3d,
    ConvBnReLU1d as ConvBnReLU1d,
    ConvBnReLU2d as ConvBnReLU2d,
    ConvBnReLU3d as ConvBnReLU3d,
    ConvReLU1d as ConvReLU1d,
    ConvReLU2d as ConvReLU2d,
    ConvReLU3d as ConvReLU3d,
    QATConv1d as QATConv1d,
    QATConv2d as QATConv2d,
    QATConv3d as QATConv3d,
    QATConvBn1d as QATConvBn1d,
    QATConvBn2d as QATConvBn2d,
    QATConvBn3d as QATConvBn3d,
    QATConvBnReLU1d as QATConvBnReLU1d,
    QATConvBnReLU2d as QATConvBnReLU2d,
    QATConvBnReLU3d as QATConvBnReLU3d,
    QATConvReLU1d as QATConvReLU1d,
    QATConvReLU2d as QATConvReLU2d,
    QATConvReLU3d as QATConvReLU3d,
    QuantizedConv1d as QuantizedConv1d,
    QuantizedConv2d as QuantizedConv2d,
    QuantizedConv3d as QuantizedConv3d,
    QuantizedConvReLU1d as QuantizedConvReLU1d,
    QuantizedConvReLU2d as QuantizedConvReLU2d,
    QuantizedConvReLU3d as QuantizedConvReLU3d,
    fuse_conv_bn as fuse_conv_bn,
    fuse_conv_bn_relu as fuse_conv_bn_relu,
    fuse_conv_relu as fuse_conv_relu,
    register_layers as register_layers,
)

__all__ = [
    "ConvBn1d",
    "ConvBn2d",
    "ConvBn3d",
    "ConvBnReLU1d",
    "ConvBnReLU2d",
    "ConvBnReLU3d",
    "ConvReLU1d",
    "ConvReLU2d",
    "ConvReLU3d",
    "PadkitQuantizer",
    "QATConv1d",
    "QATConv2d",
    "QATConv3d",
    "QATConvBn1d",
    "QATConvBn2d",
    "QATConvBn3d",
    "QATConvBnReLU1d",
    "QATConvBnReLU2d",
    "QATConvBnReLU3d",
    "QATConvReLU1d",
    "QATConvReLU2d",
    "QATConvReLU3d",
    "QuantizedConv1d",
    "QuantizedConv2d",
    "QuantizedConv3d",
    "QuantizedConvReLU1d",
    "QuantizedConvReLU2d",
    "QuantizedConvReLU3d",
    "expose_convs",
]


def __getattr__(name: str) -> Any:
    """The PT2E helpers, imported on first use (they need torchao)."""
    if name in ("PadkitQuantizer", "expose_convs"):
        from . import pt2e

        return getattr(pt2e, name)
    raise AttributeError(f"module 'padkit.quantization' has no attribute {name!r}")
