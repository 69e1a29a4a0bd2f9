"""Drop-in ``torch.nn`` conv, transposed-conv and pooling layers with exact padding.

Each layer subclasses its torch namesake (``isinstance(padkit.nn.Conv2d(...),
torch.nn.Conv2d)`` holds), takes the same arguments, and has the same
``state_dict`` keys, so pretrained weights load unchanged. ``padding=`` accepts
every padkit form (see :class:`padkit.Padding`). Padding that does not depend on
the input size is resolved at construction; ``"same"`` with stride > 1 is resolved
per input shape and cached.
"""

from __future__ import annotations

from .. import quantization as _quantization
from ._common import _FAST as _FAST, _hashable as _hashable, _Live as _Live
from ._conv import Conv1d as Conv1d, Conv2d as Conv2d, Conv3d as Conv3d, _ConvMixin as _ConvMixin
from ._pool import (
    AvgPool1d as AvgPool1d,
    AvgPool2d as AvgPool2d,
    AvgPool3d as AvgPool3d,
    LPPool1d as LPPool1d,
    LPPool2d as LPPool2d,
    LPPool3d as LPPool3d,
    MaxPool1d as MaxPool1d,
    MaxPool2d as MaxPool2d,
    MaxPool3d as MaxPool3d,
)
from ._transpose import (
    ConvTranspose1d as ConvTranspose1d,
    ConvTranspose2d as ConvTranspose2d,
    ConvTranspose3d as ConvTranspose3d,
)

__all__ = [
    "AvgPool1d",
    "AvgPool2d",
    "AvgPool3d",
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "ConvTranspose3d",
    "LPPool1d",
    "LPPool2d",
    "LPPool3d",
    "MaxPool1d",
    "MaxPool2d",
    "MaxPool3d",
]

# The layers are named as this package's, where they lived before it was split into
# modules: pickles made then still load, and reprs, torch.fx and the docs show
# ``padkit.nn.Conv2d``.
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name

# fuse_modules, prepare, prepare_qat and convert find modules by exact class: padkit's convs
# go into their tables with fused, QAT and quantized modules that keep padkit's padding
_quantization.register_layers(
    {1: Conv1d, 2: Conv2d, 3: Conv3d},
    {1: ConvTranspose1d, 2: ConvTranspose2d, 3: ConvTranspose3d},
)
