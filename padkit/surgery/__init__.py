"""Model surgery: exact padkit replacements, padding-convention ports and output-stride dilation.

:func:`convert` returns a copy of a model in which the layers that pad on every forward
(timm's ``Conv2dSame``/``MaxPool2dSame``/``AvgPool2dSame``, torch convs with
``padding='same'``) and explicit pad modules directly followed by a conv or pool in an
``nn.Sequential`` are replaced by padkit layers that compute the same numbers with the
same weights. With ``padding=...`` it also switches the model's padding convention (a
PyTorch-style model to TF ``SAME`` to run weights trained in TF/Keras, or a TF port back
to symmetric padding) and reports every layer whose numbers change.

:func:`dilate` turns a CNN of output stride 32 into one of output stride 16 or 8 by
replacing strides with dilations. It traces the model (two forwards on small random
inputs) rather than matching classes, fixes every padding and every global read this
affects, and so makes the a-trous identity hold exactly: in eval mode each output of the
dilated model, subsampled at its lattice, equals the original's. :func:`dilation_error`
measures that on an input.

:func:`fuse_pads` lets the elementwise op before each per-side-padded conv (a ReLU, a
residual addition) write straight into the interior of a zero-bordered buffer that the
conv reads unpadded, so that inside a model the padded copy of the input disappears.

:func:`lower` returns a copy in torch's own modules only (pad modules and torch's conv and
pool layers), for tools that find layers by exact class; pads that depend on the input size
are resolved for the example's size, and other sizes are refused at run time.

All four return ``(model, report)``; the model is a copy unless ``inplace=True``, and its
``state_dict`` has the original's keys and shapes. torch is the only dependency: timm and
torchvision classes are recognised only when those packages are already imported (a model
holding their layers has imported them).
"""

from ._common import PORT_TARGETS, Change, FoldedPad, Skip, SurgeryError, SurgeryReport
from ._lattice import LatticeGate
from .convert import convert
from .dilate import dilate, dilation_error
from .fuse import fuse_pads
from .lower import InputSizeGuard, lower

__all__ = [
    "PORT_TARGETS",
    "Change",
    "FoldedPad",
    "InputSizeGuard",
    "LatticeGate",
    "Skip",
    "SurgeryError",
    "SurgeryReport",
    "convert",
    "dilate",
    "dilation_error",
    "fuse_pads",
    "lower",
]
