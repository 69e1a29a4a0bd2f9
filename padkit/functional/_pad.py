"""``pad``: per-side pads in every mode, with the ONNX/numpy mode aliases."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from ..spec import (
    Padding,
    PaddingError,
    PaddingLike,
)
from ._common import Pairs, _pad_mode, _parse, _torch_pad

# ----------------------------------------------------------------------------- pad


def pad(
    input: Tensor,
    padding: PaddingLike,
    mode: str = "constant",
    value: float | None = None,
    *,
    kernel_size: int | Sequence[int] | None = None,
    stride: int | Sequence[int] = 1,
    dilation: int | Sequence[int] = 1,
) -> Tensor:
    """Pad (or crop, with negative pads) the trailing spatial axes of ``input``.

    ``padding`` is any padkit form, in axis order (``((top, bottom), (left, right))``),
    never the flat F.pad order. An int or a single string applies to every axis after
    the first two (batch and channel). Rules (``"same"``, ``"causal"``, ...) need
    ``kernel_size`` (and ``stride``/``dilation`` where they matter).

    Crops are applied before pads, so ``reflect`` reflects the cropped tensor (the ONNX
    ``Pad`` semantics). ``mode`` is ``constant`` (alias ``zeros``), ``reflect``,
    ``replicate`` (alias ``edge``) or ``circular`` (alias ``wrap``).

    Example:
        >>> x = torch.arange(1.0, 4.0).view(1, 1, 3)
        >>> pad(x, ((1, 2),), mode="reflect")
        tensor([[[2., 1., 2., 3., 2., 1.]]])
        >>> pad(x, ((-1, 1),))
        tensor([[[2., 3., 0.]]])
    """
    if not isinstance(input, Tensor):
        raise TypeError(f"pad(): input must be a Tensor, got {type(input).__name__}")
    canon = _pad_mode(mode)
    spec = (
        Padding.parse(padding, allow_negative=True) if not isinstance(padding, Padding) else padding
    )
    nd = spec.ndim if spec.ndim is not None else input.dim() - 2
    if nd < 1 or nd > input.dim():
        raise PaddingError(
            f"pad(): padding {spec.describe()} needs {max(nd, 1)} trailing axis/axes but the "
            f"input has shape {tuple(input.shape)}"
        )
    spec = _parse(spec, nd, "pad", negative=True)
    sizes = tuple(int(v) for v in input.shape[input.dim() - nd :])
    if spec.is_explicit:
        pairs: Pairs = tuple(a for a in spec.axes if isinstance(a, tuple))
    else:
        if kernel_size is None:
            raise PaddingError(
                f"pad(): padding {spec.describe()} holds rules; pass kernel_size (and stride, "
                "dilation where they matter) to resolve them"
            )
        pairs = spec.resolve(kernel_size, stride, dilation, sizes, ndim=nd)
    if value is not None and canon != "constant":
        raise PaddingError(f"pad(): value= is only used by mode 'constant', got mode={mode!r}")
    fill = 0.0 if value is None else value
    return _apply_pad(input, pairs, canon, fill, "pad")


def _apply_pad(x: Tensor, pairs: Pairs, mode: str, value: float, fname: str) -> Tensor:
    nd = len(pairs)
    first = x.dim() - nd
    # crops first, as views
    for i, (lo, hi) in enumerate(pairs):
        if lo < 0 or hi < 0:
            n = x.shape[first + i]
            cut_lo, cut_hi = max(-lo, 0), max(-hi, 0)
            if cut_lo + cut_hi > n:
                raise PaddingError(
                    f"{fname}(): pads {(lo, hi)} on axis {first + i} remove {cut_lo + cut_hi} "
                    f"elements from a dimension of size {n}"
                )
            x = x.narrow(first + i, cut_lo, n - cut_lo - cut_hi)
    pos: Pairs = tuple((max(lo, 0), max(hi, 0)) for lo, hi in pairs)
    if all(lo == 0 and hi == 0 for lo, hi in pos):
        return x
    for i, (lo, hi) in enumerate(pos):
        n = x.shape[first + i]
        if mode == "reflect" and max(lo, hi) >= n:
            raise PaddingError(
                f"{fname}(): reflect padding {(lo, hi)} on axis {first + i} (spatial axis {i}) "
                f"needs pads smaller than the input size there ({n})"
            )
        if mode == "circular" and max(lo, hi) > n:
            raise PaddingError(
                f"{fname}(): circular padding {(lo, hi)} on axis {first + i} (spatial axis {i}) "
                f"needs pads no larger than the input size there ({n})"
            )
        if mode != "constant" and n == 0:
            raise PaddingError(f"{fname}(): {mode} padding of an empty axis {first + i}")
    if mode == "constant":
        if not x.dtype.is_floating_point and not x.dtype.is_complex:
            if x.dtype == torch.bool:
                if value not in (0, 1, False, True):
                    raise PaddingError(f"{fname}(): value {value!r} is not a bool")
            elif not (isinstance(value, int) or float(value).is_integer()):
                raise PaddingError(
                    f"{fname}(): value {value!r} is not representable in {x.dtype} (torch would "
                    "truncate it silently)"
                )
        return F.pad(x, _torch_pad(pos), mode="constant", value=value)
    if x.dtype == torch.bool:
        raise TypeError(f"{fname}(): {mode} padding does not support bool tensors")
    # torch's non-constant modes want (batch, channel, *spatial) with <= 3 spatial axes
    lead = x.shape[:first]
    if first == 2 and nd <= 3:
        return F.pad(x, _torch_pad(pos), mode=mode)
    flat = x.reshape((1, -1, *x.shape[first:])) if nd <= 3 else None
    if flat is None:
        raise PaddingError(f"{fname}(): {mode} padding supports at most 3 axes, got {nd}")
    out = F.pad(flat, _torch_pad(pos), mode=mode)
    return out.reshape((*lead, *out.shape[2:]))
