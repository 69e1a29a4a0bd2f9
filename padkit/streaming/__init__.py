"""Exact chunk-by-chunk (streaming) inference for conv models, and the conversions it needs.

* :class:`StreamingModule` runs a model built from causal convs, pools and transposed convs
  chunk by chunk with explicit state (``padkit.streaming._runner``); with ``lookahead=`` it
  also streams models whose time padding reads ahead, with a fixed, reported delay.
* :func:`convert_causal` rewrites a third-party causal model (pytorch-tcn's ``TCN``,
  locuslab-style pad-then-chomp TCNs, convs padded by pad modules or ``F.pad``) into padkit
  layers with identical outputs, so that it streams (``padkit.streaming.convert``).

See ``docs/causal-streaming.md``.
"""

from ._runner import StreamingModule
from ._step_export import StreamingStep
from .convert import ConvertedConv1d, ConvertedConv2d, ConvertedConv3d, convert_causal

__all__ = [
    "ConvertedConv1d",
    "ConvertedConv2d",
    "ConvertedConv3d",
    "StreamingModule",
    "StreamingStep",
    "convert_causal",
]
