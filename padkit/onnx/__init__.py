"""ONNX import: turn an ONNX model into a ``torch.fx.GraphModule`` of padkit layers.

:func:`load` maps every ONNX ``pads`` / ``auto_pad`` combination of ``Conv``,
``ConvTranspose``, ``MaxPool``, ``AveragePool``, ``LpPool`` and ``Pad`` onto
:mod:`padkit.nn` layers exactly (the ONNX spec's semantics; see ``docs/onnx-import.md``
for where onnxruntime deviates), plus the common CNN operators. ``onnx`` is imported
only when :func:`load` runs.

:func:`verify_export` checks an exported file against the torch model it came from, at
sizes the export never saw (``padkit verify FILE --against module.py:factory``).
"""

from __future__ import annotations

from ._errors import (
    OnnxImportError as OnnxImportError,
    UnsupportedOnnxError as UnsupportedOnnxError,
)
from ._fold import Fold as Fold
from ._graph import OnnxGraphModule as OnnxGraphModule, OnnxInput as OnnxInput, load as load
from ._registry import supported_ops as supported_ops
from ._verify_export import (
    ExportReport as ExportReport,
    SizeCheck as SizeCheck,
    load_model as load_model,
    verify_export as verify_export,
)

__all__ = [
    "ExportReport",
    "Fold",
    "OnnxGraphModule",
    "OnnxImportError",
    "OnnxInput",
    "SizeCheck",
    "UnsupportedOnnxError",
    "load",
    "load_model",
    "supported_ops",
    "verify_export",
]
