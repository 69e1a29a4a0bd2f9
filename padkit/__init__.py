"""padkit: exact, portable padding for convolution and pooling in PyTorch.

Every framework pads differently. padkit holds one padding spec
(:class:`padkit.Padding`) that reproduces each convention exactly (TF/XLA ``SAME``,
ONNX ``SAME_UPPER``/``SAME_LOWER``/``pads``, PyTorch, Flux, Caffe, causal), and
drop-in ``torch.nn`` layers (:mod:`padkit.nn`) and functions
(:mod:`padkit.functional`) that run it with per-side pads at any stride.
"""

from __future__ import annotations

from .spec import (
    RULES as RULES,
    TRANSPOSE_RULES as TRANSPOSE_RULES,
    Padding as Padding,
    PaddingError as PaddingError,
    PaddingLike as PaddingLike,
    conv_output_size as conv_output_size,
    conv_transpose_output_size as conv_transpose_output_size,
    conv_transpose_padding as conv_transpose_padding,
    pool_output_size as pool_output_size,
    resolve_padding as resolve_padding,
)

__version__ = "0.1.0"

__all__ = [
    "RULES",
    "TRANSPOSE_RULES",
    "Padding",
    "PaddingError",
    "PaddingLike",
    "__version__",
    "conv_output_size",
    "conv_transpose_output_size",
    "conv_transpose_padding",
    "pool_output_size",
    "resolve_padding",
]


# torch-backed (or onnx-backed) submodules, imported on first attribute access
_SUBMODULES = (
    "nn",
    "functional",
    "op",
    "plan",
    "surgery",
    "streaming",
    "reversible",
    "onnx",
    "explain",
    "inspect",
    "native",
)


def __getattr__(name: str) -> object:
    # torch-backed subpackages load on first use so that `import padkit` stays light
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'padkit' has no attribute {name!r}")
