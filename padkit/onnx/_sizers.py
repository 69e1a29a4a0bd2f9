"""The element count of each run-time function whose result size its inputs' *values*
decide (``ConstantOfShape``, ``Range``, ``Tile``, ``Expand``, ``OneHot``, ``Gather``,
``Resize``, ``Pad``), so that folding one at import time is checked against
``max_folded_bytes`` before anything is allocated (:class:`._guard.FoldBudget`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from torch import Tensor

from . import _runtime as R
from ._errors import OnnxImportError
from ._guard import fold_sizer
from ._ops_index import one_hot, onnx_range, tile

__all__: list[str] = []


def _sizes(dims: Any, what: str) -> int:
    values = R.as_ints(dims) if isinstance(dims, Tensor) else [int(d) for d in dims]
    if any(d < 0 for d in values):
        raise OnnxImportError(f"{what} {values} holds a negative size")
    return math.prod(values)


@fold_sizer(R.constant_of_shape)
def _constant_of_shape(_: Any, shape: Any, value: Any) -> int:
    return _sizes(shape, "input 0 (shape)")


@fold_sizer(R.constant_of_sizes)
def _constant_of_sizes(_: Any, dims: Any, value: Any) -> int | None:
    if not all(isinstance(d, int) for d in dims):
        return None
    return _sizes(dims, "the inferred shape")


@fold_sizer(onnx_range)
def _range(_: Any, start: Tensor, limit: Tensor, delta: Tensor) -> int:
    values = []
    for name, t in (("start", start), ("limit", limit), ("delta", delta)):
        if t.numel() != 1:
            raise OnnxImportError(f"input {name} must hold one value, got shape {list(t.shape)}")
        v = float(t.reshape(-1)[0].item())
        if not math.isfinite(v):
            raise OnnxImportError(f"input {name} is {v}; Range needs finite values")
        values.append(v)
    lo, hi, step = values
    if step == 0:
        raise OnnxImportError(f"input delta is 0 (start {lo}, limit {hi}): Range never ends")
    return max(math.ceil((hi - lo) / step), 0)


@fold_sizer(tile)
def _tile(_: Any, x: Tensor, repeats: Any) -> int:
    reps = R.as_ints(repeats) if isinstance(repeats, Tensor) else [int(r) for r in repeats]
    if any(r < 0 for r in reps):
        raise OnnxImportError(f"input 1 (repeats) {reps} holds a negative count")
    return x.numel() * math.prod(reps)


def _broadcast_numel(x: Tensor, shape: Sequence[int]) -> int:
    if any(d < 0 for d in shape):
        raise OnnxImportError(f"input 1 (shape) {list(shape)} holds a negative size")
    dims = list(x.shape)
    rank = max(len(dims), len(shape))
    a = [1] * (rank - len(dims)) + [int(d) for d in dims]
    b = [1] * (rank - len(shape)) + list(shape)
    return math.prod(max(p, q) if 1 in (p, q) else p for p, q in zip(a, b))


@fold_sizer(R.expand)
def _expand(_: Any, x: Tensor, shape: Any) -> int:
    return _broadcast_numel(x, R.as_ints(shape) if isinstance(shape, Tensor) else list(shape))


@fold_sizer(R.expand_to)
def _expand_to(_: Any, x: Tensor, dims: Any) -> int | None:
    if not all(isinstance(d, int) for d in dims):
        return None
    return _broadcast_numel(x, list(dims))


@fold_sizer(one_hot)
def _one_hot(_: Any, indices: Tensor, depth: Any, values: Tensor, axis: int) -> int:
    n = int(R.scalar(depth))
    if n < 0:
        raise OnnxImportError(f"input 1 (depth) is {n}; OneHot needs a depth >= 0")
    return indices.numel() * n


@fold_sizer(R.gather)
def _gather(_: Any, x: Tensor, indices: Tensor, axis: int) -> int:
    rank = x.dim()
    if not -rank <= axis < rank:
        raise OnnxImportError(f"attribute axis={axis} is out of range for rank {rank}")
    n = int(x.shape[axis])
    return indices.numel() * (x.numel() // n if n else 0)


@fold_sizer(R.Resize)
def _resize(
    mod: R.Resize,
    x: Tensor,
    scales: Tensor | None = None,
    sizes: Tensor | None = None,
    roi: Tensor | None = None,
) -> int | None:
    rank = x.dim()
    axes = list(range(rank)) if mod.axes is None else [a % rank for a in mod.axes]
    sc = mod.scales if scales is None else tuple(float(v) for v in scales.reshape(-1).tolist())
    sz = mod.sizes if sizes is None else tuple(R.as_ints(sizes))
    out = [int(d) for d in x.shape]
    for j, axis in enumerate(axes):
        if sz and j < len(sz):
            out[axis] = int(sz[j])
        elif sc and j < len(sc):
            if not math.isfinite(sc[j]) or sc[j] <= 0:
                raise OnnxImportError(f"scales {list(sc)}: each must be finite and > 0")
            out[axis] = math.floor(out[axis] * sc[j])
    if any(d < 0 for d in out):
        raise OnnxImportError(f"the output sizes {out} hold a negative size")
    return math.prod(out)


@fold_sizer(R.OnnxPad)
def _pad(
    mod: R.OnnxPad,
    x: Tensor,
    pads: Tensor | None = None,
    value: Tensor | None = None,
    axes: Tensor | None = None,
) -> int | None:
    flat = R.as_ints(pads) if pads is not None else list(mod.pads or ())
    rank = x.dim()
    ax = R.as_ints(axes) if axes is not None else mod.axes
    ax_list = list(range(rank)) if ax is None else [a + rank if a < 0 else a for a in ax]
    if len(flat) != 2 * len(ax_list) or any(not 0 <= a < rank for a in ax_list):
        return None  # the pad itself says what is wrong
    out = [int(d) for d in x.shape]
    half = len(ax_list)
    for i, a in enumerate(ax_list):
        out[a] += flat[i] + flat[i + half]
    return math.prod(max(d, 0) for d in out)
