"""ONNX import: turn an ONNX model into a ``torch.fx.GraphModule`` of padkit layers.

:func:`load` maps every ONNX ``pads`` / ``auto_pad`` combination of ``Conv``,
``ConvTranspose``, ``MaxPool``, ``AveragePool``, ``LpPool`` and ``Pad`` onto
:mod:`padkit.nn` layers exactly (the ONNX spec's semantics; see ``docs/onnx-import.md``
for where onnxruntime deviates), plus the common CNN operators. ``onnx`` is imported
only when :func:`load` runs.
"""

from __future__ import annotations

from ._errors import (
    OnnxImportError as OnnxImportError,
    UnsupportedOnnxError as UnsupportedOnnxError,
)
from ._graph import load as load
from ._registry import supported_ops as supported_ops

__all__ = ["OnnxImportError", "UnsupportedOnnxError", "load", "supported_ops"]
