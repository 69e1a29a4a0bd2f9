"""Converters (and their run-time functions) for indexing, scattering, sorting, sequence
generation and layout nodes: Range, Tile, TopK, NonZero, Gather/ScatterElements,
Gather/ScatterND, OneHot, Compress, Trilu, EyeLike, SpaceToDepth / DepthToSpace, the window
functions and friends."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from . import _runtime as R
from ._graph import ONNX_DTYPES, Const, NodeContext, Value
from ._registry import register

__all__: list[str] = []


# ----------------------------------------------------------------------------- run time


def onnx_range(start: Tensor, limit: Tensor, delta: Tensor) -> Tensor:
    """ONNX ``Range``: ``start + i * delta`` for ``i < max(ceil((limit - start) / delta), 0)``."""
    dtype = start.dtype
    if dtype.is_floating_point:
        wide = torch.float64
        s, lim, d = start.to(wide), limit.to(wide), delta.to(wide)
        n = torch.clamp(torch.ceil((lim - s) / d), min=0).to(torch.int64)
        count = int(n)
        return (s + torch.arange(count, dtype=wide, device=start.device) * d).to(dtype)
    lo, hi, step = int(start.reshape(())), int(limit.reshape(())), int(delta.reshape(()))
    return torch.arange(lo, hi, step, dtype=dtype, device=start.device)


def tile(x: Tensor, repeats: Any) -> Tensor:
    """ONNX ``Tile``."""
    return x.repeat(R.as_ints(repeats) if isinstance(repeats, Tensor) else list(repeats))


def top_k(x: Tensor, k: Any, axis: int, largest: int, sorted_: int) -> tuple[Tensor, Tensor]:
    """ONNX ``TopK``: among equal values the lower index comes first (a stable sort)."""
    count = int(R.scalar(k))
    values, indices = torch.sort(x, dim=axis, descending=bool(largest), stable=True)
    return values.narrow(axis, 0, count), indices.narrow(axis, 0, count)


def nonzero(x: Tensor) -> Tensor:
    """ONNX ``NonZero``: the indices of the non-zero elements, shape ``(rank, n)``."""
    if x.dim() == 0:
        return torch.zeros((0, int(bool(x))), dtype=torch.int64, device=x.device)
    return torch.nonzero(x).t()


def _wrap_index(index: Tensor, size: Any) -> Tensor:
    index = index.long()
    return torch.where(index < 0, index + size, index)


def gather_elements(x: Tensor, index: Tensor, axis: int) -> Tensor:
    """ONNX ``GatherElements`` (negative indices count from the end)."""
    if axis < 0:
        axis += x.dim()
    return torch.gather(x, axis, _wrap_index(index, x.shape[axis]))


_REDUCTIONS = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


def scatter_elements(
    x: Tensor, index: Tensor, updates: Tensor, axis: int, reduction: str
) -> Tensor:
    """ONNX ``ScatterElements`` / ``Scatter`` with ``reduction`` none / add / mul / max / min."""
    if axis < 0:
        axis += x.dim()
    index = _wrap_index(index, x.shape[axis])
    if reduction == "none":
        return torch.scatter(x, axis, index, updates)
    return torch.scatter_reduce(x, axis, index, updates, _REDUCTIONS[reduction])


def _linear_index(shape: Any, index: Tensor) -> Tensor:
    """Row-major linear indices into the first ``index.shape[-1]`` dims of ``shape``."""
    k = index.shape[-1]
    linear = torch.zeros(index.shape[:-1], dtype=torch.int64, device=index.device)
    for i in range(k):
        linear = linear * shape[i] + _wrap_index(index[..., i], shape[i])
    return linear


def gather_nd(x: Tensor, index: Tensor, batch_dims: int) -> Tensor:
    """ONNX ``GatherND`` with ``batch_dims``."""
    batch = x.shape[:batch_dims]
    k = index.shape[-1]
    xb = x.reshape((-1, *tuple(x.shape[batch_dims:])))
    ib = index.reshape((-1, *tuple(index.shape[batch_dims:])))
    inner = tuple(x.shape[batch_dims + k :])
    n_batch = xb.shape[0]
    flat = xb.reshape((n_batch, -1, *inner))
    linear = _linear_index(x.shape[batch_dims:], ib.reshape(n_batch, -1, k))
    rows = torch.arange(n_batch, device=x.device).unsqueeze(1)
    out = flat[rows, linear]
    return out.reshape(tuple(batch) + tuple(index.shape[batch_dims:-1]) + inner)


def scatter_nd(x: Tensor, index: Tensor, updates: Tensor, reduction: str) -> Tensor:
    """ONNX ``ScatterND`` with ``reduction`` none / add / mul / max / min."""
    k = index.shape[-1]
    inner = tuple(x.shape[k:])
    flat = x.reshape((-1, *inner)).clone()
    linear = _linear_index(x.shape, index).reshape(-1)
    upd = updates.reshape((-1, *inner))
    if reduction == "none":
        flat[linear] = upd
    elif reduction == "add":
        flat.index_add_(0, linear, upd)
    else:
        index = linear.reshape((-1,) + (1,) * len(inner)).expand(upd.shape)
        flat = flat.scatter_reduce(0, index, upd, _REDUCTIONS[reduction], include_self=True)
    return flat.reshape(x.shape)


def one_hot(indices: Tensor, depth: Any, values: Tensor, axis: int) -> Tensor:
    """ONNX ``OneHot``: ``values[1]`` at each index along a new axis, ``values[0]`` elsewhere
    (negative indices count from the end; out-of-range ones give a row of ``values[0]``)."""
    n = int(R.scalar(depth))
    idx = indices.long()
    idx = torch.where(idx < 0, idx + n, idx)
    rank = indices.dim() + 1
    if axis < 0:
        axis += rank
    classes = torch.arange(n, device=indices.device).reshape([n] + [1] * (rank - 1 - axis))
    hot = idx.unsqueeze(axis) == classes
    off, on = values.reshape(-1)[0], values.reshape(-1)[1]
    return torch.where(hot, on, off)


def compress(x: Tensor, condition: Tensor, axis: int | None) -> Tensor:
    """ONNX ``Compress``: the slices where ``condition`` is true."""
    if axis is None:
        x, axis = x.reshape(-1), 0
    if axis < 0:
        axis += x.dim()
    keep = torch.nonzero(condition.reshape(-1)[: x.shape[axis]].bool()).reshape(-1)
    return x.index_select(axis, keep)


def trilu(x: Tensor, k: Any, upper: int) -> Tensor:
    """ONNX ``Trilu`` over the last two axes."""
    diag = 0 if k is None else int(R.scalar(k))
    return torch.triu(x, diag) if upper else torch.tril(x, diag)


def eye_like(x: Tensor, k: int, dtype: torch.dtype) -> Tensor:
    """ONNX ``EyeLike``: ones on diagonal ``k`` of a matrix shaped like ``x``."""
    rows = torch.arange(x.shape[0], device=x.device).unsqueeze(1)
    cols = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
    return (cols - rows == k).to(dtype)


def space_to_depth(x: Tensor, block: int, crd: bool = False) -> Tensor:
    """ONNX ``SpaceToDepth``: ``(N, C, H, W) -> (N, C*b*b, H/b, W/b)`` (``DCR``, or ``CRD``
    with ``crd``)."""
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // block, block, w // block, block)
    y = y.permute(0, 1, 3, 5, 2, 4) if crd else y.permute(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * block * block, h // block, w // block)


def depth_to_space(x: Tensor, block: int, crd: bool) -> Tensor:
    """ONNX ``DepthToSpace`` (``DCR``, or ``CRD`` with ``crd``)."""
    n, c, h, w = x.shape
    out_c = c // (block * block)
    if crd:
        y = x.reshape(n, out_c, block, block, h, w).permute(0, 1, 4, 2, 5, 3)
    else:
        y = x.reshape(n, block, block, out_c, h, w).permute(0, 3, 4, 1, 5, 2)
    return y.reshape(n, out_c, h * block, w * block)


def window(size: Any, kind: str, periodic: int, dtype: torch.dtype) -> Tensor:
    """ONNX ``HannWindow`` / ``HammingWindow`` / ``BlackmanWindow``."""
    n = int(R.scalar(size))
    denom = n if periodic else n - 1
    i = torch.arange(n, dtype=torch.float64)
    phase = 2 * math.pi * i / denom if denom else torch.zeros_like(i)
    if kind == "hann":
        w = 0.5 - 0.5 * torch.cos(phase)
    elif kind == "hamming":
        alpha = 25.0 / 46.0
        w = alpha - (1 - alpha) * torch.cos(phase)
    else:
        w = 0.42 - 0.5 * torch.cos(phase) + 0.08 * torch.cos(2 * phase)
    return w.to(dtype)


def reverse_sequence(x: Tensor, lengths: Tensor, batch_axis: int, time_axis: int) -> Tensor:
    """ONNX ``ReverseSequence``: reverse the first ``lengths[b]`` steps of each batch row."""
    steps = x.shape[time_axis]
    t = torch.arange(steps, device=x.device).unsqueeze(0)
    lens = lengths.long().unsqueeze(1)
    src = torch.where(t < lens, lens - 1 - t, t)  # (batch, time)
    if batch_axis > time_axis:
        src = src.t()
    shape = [1] * x.dim()
    shape[batch_axis], shape[time_axis] = x.shape[batch_axis], steps
    order = sorted((batch_axis, time_axis))
    index = src.reshape([shape[a] if a in order else 1 for a in range(x.dim())])
    return torch.gather(x, time_axis, index.expand(x.shape))


def center_crop_pad(x: Tensor, shape: Any, axes: list[int] | None) -> Tensor:
    """ONNX ``CenterCropPad``: crop or zero-pad each axis about its centre."""
    target = R.as_ints(shape)
    dims = list(range(x.dim())) if axes is None else [a % x.dim() for a in axes]
    for axis, want in zip(dims, target):
        have = int(x.shape[axis])
        if want < have:
            x = x.narrow(axis, (have - want) // 2, want)
        elif want > have:
            lo = (want - have) // 2
            pad_shape = list(x.shape)
            pad_shape[axis] = want
            out = torch.zeros(pad_shape, dtype=x.dtype, device=x.device)
            out.narrow(axis, lo, have).copy_(x)
            x = out
    return x


# ----------------------------------------------------------------------------- converters


def _value_or_const(value: Value | None) -> Any:
    if isinstance(value, Const):
        return value.tensor
    return value


@register("Range", since=11)
def range_(ctx: NodeContext) -> list[Value | None]:
    return [ctx.call(onnx_range, ctx.required(0), ctx.required(1), ctx.required(2))]


@register("Tile", since=6)
def tile_(ctx: NodeContext) -> list[Value | None]:
    reps = ctx.required(1)
    arg = R.as_ints(reps.tensor) if isinstance(reps, Const) else reps
    return [ctx.call(tile, ctx.required(0), arg)]


@register("TopK", since=10)
def top_k_(ctx: NodeContext) -> list[Value | None]:
    k = ctx.required(1)
    k_arg = int(R.scalar(k.tensor)) if isinstance(k, Const) else k
    axis = int(ctx.attr("axis", -1))
    largest, sorted_ = int(ctx.attr("largest", 1)), int(ctx.attr("sorted", 1))
    return list(ctx.call(top_k, ctx.required(0), k_arg, axis, largest, sorted_, n_out=2))


@register("TopK", since=1)
def top_k_legacy(ctx: NodeContext) -> list[Value | None]:
    axis = int(ctx.attr("axis", -1))
    return list(ctx.call(top_k, ctx.required(0), int(ctx.attr("k")), axis, 1, 1, n_out=2))


@register("NonZero", since=9)
def nonzero_(ctx: NodeContext) -> list[Value | None]:
    return [ctx.call(nonzero, ctx.required(0))]


@register("GatherElements", since=11)
def gather_elements_(ctx: NodeContext) -> list[Value | None]:
    axis = int(ctx.attr("axis", 0))
    return [ctx.call(gather_elements, ctx.required(0), ctx.required(1), axis)]


def _reduction(ctx: NodeContext) -> str:
    reduction = str(ctx.attr("reduction", "none"))
    if reduction not in ("none", *_REDUCTIONS):
        raise ctx.error(f"reduction must be none, add, mul, max or min, got {reduction!r}")
    return reduction


@register("ScatterElements", since=11)
@register("Scatter", since=9)
def scatter_elements_(ctx: NodeContext) -> list[Value | None]:
    axis = int(ctx.attr("axis", 0))
    x, index, updates = ctx.required(0), ctx.required(1), ctx.required(2)
    return [ctx.call(scatter_elements, x, index, updates, axis, _reduction(ctx))]


@register("GatherND", since=11)
def gather_nd_(ctx: NodeContext) -> list[Value | None]:
    batch_dims = int(ctx.attr("batch_dims", 0))
    return [ctx.call(gather_nd, ctx.required(0), ctx.required(1), batch_dims)]


@register("ScatterND", since=11)
def scatter_nd_(ctx: NodeContext) -> list[Value | None]:
    x, index, updates = ctx.required(0), ctx.required(1), ctx.required(2)
    return [ctx.call(scatter_nd, x, index, updates, _reduction(ctx))]


@register("OneHot", since=9)
def one_hot_(ctx: NodeContext) -> list[Value | None]:
    depth = ctx.required(1)
    arg = int(R.scalar(depth.tensor)) if isinstance(depth, Const) else depth
    axis = int(ctx.attr("axis", -1))
    return [ctx.call(one_hot, ctx.required(0), arg, ctx.required(2), axis)]


@register("Compress", since=9)
def compress_(ctx: NodeContext) -> list[Value | None]:
    axis = ctx.attr("axis")
    axis = None if axis is None else int(axis)
    return [ctx.call(compress, ctx.required(0), ctx.required(1), axis)]


@register("Trilu", since=14)
def trilu_(ctx: NodeContext) -> list[Value | None]:
    k = ctx.input(1)
    arg = int(R.scalar(k.tensor)) if isinstance(k, Const) else k
    return [ctx.call(trilu, ctx.required(0), arg, int(ctx.attr("upper", 1)))]


@register("EyeLike", since=9)
def eye_like_(ctx: NodeContext) -> list[Value | None]:
    x = ctx.required(0)
    code = ctx.attr("dtype")
    dtype = None
    if code is not None:
        if int(code) not in ONNX_DTYPES:
            raise ctx.unsupported(f"dtype={code} (no torch equivalent)")
        dtype = ONNX_DTYPES[int(code)]
    if dtype is None:
        if isinstance(x, Const):
            dtype = x.tensor.dtype
        else:
            return [ctx.call(_eye_like_same, x, int(ctx.attr("k", 0)))]
    return [ctx.call(eye_like, x, int(ctx.attr("k", 0)), dtype)]


def _eye_like_same(x: Tensor, k: int) -> Tensor:
    return eye_like(x, k, x.dtype)


def _block_mode(ctx: NodeContext) -> str:
    mode = str(ctx.attr("mode", "DCR")).upper()
    if mode not in ("DCR", "CRD"):
        raise ctx.error(f"mode must be 'DCR' or 'CRD', got {mode!r}")
    return mode


@register("SpaceToDepth", since=1)
def space_to_depth_(ctx: NodeContext) -> list[Value | None]:
    block = int(ctx.attr("blocksize"))
    return [ctx.call(space_to_depth, ctx.required(0), block, _block_mode(ctx) == "CRD")]


@register("DepthToSpace", since=1)
def depth_to_space_(ctx: NodeContext) -> list[Value | None]:
    mode = _block_mode(ctx)
    block = int(ctx.attr("blocksize"))
    return [ctx.call(depth_to_space, ctx.required(0), block, mode == "CRD")]


def _window(kind: str) -> Callable[[NodeContext], list[Value | None]]:
    def convert(ctx: NodeContext) -> list[Value | None]:
        code = int(ctx.attr("output_datatype", 1))
        if code not in ONNX_DTYPES:
            raise ctx.unsupported(f"output_datatype={code} (no torch equivalent)")
        periodic = int(ctx.attr("periodic", 1))
        size = _value_or_const(ctx.required(0))
        if isinstance(size, Tensor):
            return [Const(window(size, kind, periodic, ONNX_DTYPES[code]))]
        return [ctx.call(window, size, kind, periodic, ONNX_DTYPES[code])]

    return convert


register("HannWindow", since=17)(_window("hann"))
register("HammingWindow", since=17)(_window("hamming"))
register("BlackmanWindow", since=17)(_window("blackman"))


@register("ReverseSequence", since=10)
def reverse_sequence_(ctx: NodeContext) -> list[Value | None]:
    batch_axis = int(ctx.attr("batch_axis", 1))
    time_axis = int(ctx.attr("time_axis", 0))
    return [ctx.call(reverse_sequence, ctx.required(0), ctx.required(1), batch_axis, time_axis)]


@register("CenterCropPad", since=18)
def center_crop_pad_(ctx: NodeContext) -> list[Value | None]:
    shape = ctx.required(1)
    arg = R.as_ints(shape.tensor) if isinstance(shape, Const) else shape
    return [ctx.call(center_crop_pad, ctx.required(0), arg, ctx.ints("axes"))]


# ----------------------------------------------------------------------------- detection


def _corners(boxes: Tensor, center_point_box: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``(x_min, x_max, y_min, y_max)`` of ``(N, 4)`` boxes."""
    if center_point_box:
        xc, yc, w, h = boxes.unbind(-1)
        return xc - w / 2, xc + w / 2, yc - h / 2, yc + h / 2
    y1, x1, y2, x2 = boxes.unbind(-1)
    return torch.minimum(x1, x2), torch.maximum(x1, x2), torch.minimum(y1, y2), y1.maximum(y2)


def _suppressed_by(
    corners: tuple[Tensor, Tensor, Tensor, Tensor], i: int, iou_threshold: float
) -> Tensor:
    """Which boxes box ``i`` suppresses: IoU above the threshold (boxes without area or
    overlap never are)."""
    x0, x1, y0, y1 = corners
    ix = torch.minimum(x1[i], x1) - torch.maximum(x0[i], x0)
    iy = torch.minimum(y1[i], y1) - torch.maximum(y0[i], y0)
    inter = ix * iy
    area = (x1 - x0) * (y1 - y0)
    union = area[i] + area - inter
    valid = (ix > 0) & (iy > 0) & (inter > 0) & (area[i] > 0) & (area > 0) & (union > 0)
    iou = inter / torch.where(valid, union, torch.ones_like(union))
    return valid & (iou > iou_threshold)


def non_max_suppression(
    boxes: Tensor,
    scores: Tensor,
    max_per_class: Tensor | None,
    iou_threshold: Tensor | None,
    score_threshold: Tensor | None,
    center_point_box: int,
) -> Tensor:
    """ONNX ``NonMaxSuppression``: ``(batch, class, box)`` triples, greedily per batch and
    class in order of decreasing score (ties: the lower box index first)."""
    limit = 0 if max_per_class is None or max_per_class.numel() == 0 else int(max_per_class)
    limit = max(limit, 0)
    iou_t = 0.0 if iou_threshold is None or iou_threshold.numel() == 0 else float(iou_threshold)
    use_score = score_threshold is not None and score_threshold.numel() > 0
    score_t = float(score_threshold) if use_score and score_threshold is not None else 0.0
    selected: list[tuple[int, int, int]] = []
    for b in range(boxes.shape[0] if limit else 0):
        corners = _corners(boxes[b], center_point_box)
        for c in range(scores.shape[1]):
            s = scores[b, c]
            order = torch.sort(s, descending=True, stable=True).indices
            if use_score:
                order = order[s[order] > score_t]
            removed = torch.zeros(s.shape[0], dtype=torch.bool)
            kept = 0
            for i in order.tolist():
                if bool(removed[i]):
                    continue
                selected.append((b, c, i))
                kept += 1
                if kept >= limit:
                    break
                removed |= _suppressed_by(corners, i, iou_t)
    out = torch.tensor(selected, dtype=torch.int64, device=boxes.device)
    return out.reshape(-1, 3)


@register("NonMaxSuppression", since=10)
def non_max_suppression_(ctx: NodeContext) -> list[Value | None]:
    center = int(ctx.attr("center_point_box", 0))
    args = [ctx.input(i) for i in range(5)]
    return [ctx.call(non_max_suppression, *args, center)]


def _roi_axis(
    start: float, bin_size: float, bins: int, grid: int, size: int
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Bilinear taps along one axis of RoiAlign's sampling grid: ``(low, high, w_low,
    w_high, inside)``, each ``(bins * grid,)``."""
    b = torch.arange(bins, dtype=torch.float64).unsqueeze(1)
    g = torch.arange(grid, dtype=torch.float64).unsqueeze(0)
    coord = (start + b * bin_size + (g + 0.5) * bin_size / grid).reshape(-1)
    inside = (coord >= -1.0) & (coord <= size)
    coord = coord.clamp(min=0)
    low = torch.floor(coord).long()
    at_end = low >= size - 1
    low = torch.where(at_end, torch.full_like(low, size - 1), low)
    high = torch.where(at_end, low, low + 1)
    coord = torch.where(at_end, low.double(), coord)
    frac = coord - low.double()
    return low, high, 1.0 - frac, frac, inside


def roi_align(
    x: Tensor,
    rois: Tensor,
    batch_indices: Tensor,
    half_pixel: bool,
    mode: str,
    out_h: int,
    out_w: int,
    sampling_ratio: int,
    spatial_scale: float,
) -> Tensor:
    """ONNX ``RoiAlign``: per region, ``out_h x out_w`` bins each averaging (or, ``mode="max"``,
    taking the largest weighted tap of) a grid of bilinear samples."""
    channels, height, width = x.shape[1], int(x.shape[2]), int(x.shape[3])
    outs = []
    offset = 0.5 if half_pixel else 0.0
    for n in range(rois.shape[0]):
        x0, y0, x1, y1 = (float(v) * spatial_scale - offset for v in rois[n].tolist())
        roi_w, roi_h = x1 - x0, y1 - y0
        if not half_pixel:
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        bin_h, bin_w = roi_h / out_h, roi_w / out_w
        grid_h = sampling_ratio if sampling_ratio > 0 else math.ceil(roi_h / out_h)
        grid_w = sampling_ratio if sampling_ratio > 0 else math.ceil(roi_w / out_w)
        if grid_h <= 0 or grid_w <= 0:
            outs.append(torch.zeros((channels, out_h, out_w), dtype=x.dtype, device=x.device))
            continue
        feat = x[int(batch_indices[n])].double()
        ylo, yhi, wyl, wyh, yin = _roi_axis(y0, bin_h, out_h, grid_h, height)
        xlo, xhi, wxl, wxh, xin = _roi_axis(x0, bin_w, out_w, grid_w, width)
        inside = (yin[:, None] & xin[None, :]).double()
        taps = [
            (ylo, xlo, wyl[:, None] * wxl[None, :]),
            (ylo, xhi, wyl[:, None] * wxh[None, :]),
            (yhi, xlo, wyh[:, None] * wxl[None, :]),
            (yhi, xhi, wyh[:, None] * wxh[None, :]),
        ]
        terms = [feat[:, ys[:, None], xs[None, :]] * (w * inside) for ys, xs, w in taps]
        shape = (channels, out_h, grid_h, out_w, grid_w)
        if mode == "avg":
            total = (terms[0] + terms[1] + terms[2] + terms[3]).reshape(shape)
            pooled = total.sum((2, 4)) / max(grid_h * grid_w, 1)
        else:
            best = torch.stack(terms).amax(0).reshape(shape)
            pooled = best.amax(4).amax(2)
        outs.append(pooled.to(x.dtype))
    if not outs:
        return torch.zeros((0, channels, out_h, out_w), dtype=x.dtype, device=x.device)
    return torch.stack(outs)


@register("RoiAlign", since=10)
def roi_align_(ctx: NodeContext) -> list[Value | None]:
    default = "half_pixel" if ctx.version >= 16 else "output_half_pixel"
    coord = str(ctx.attr("coordinate_transformation_mode", default))
    if coord not in ("half_pixel", "output_half_pixel"):
        raise ctx.error(
            f"coordinate_transformation_mode must be 'half_pixel' or 'output_half_pixel', "
            f"got {coord!r}"
        )
    mode = str(ctx.attr("mode", "avg"))
    if mode not in ("avg", "max"):
        raise ctx.error(f"mode must be 'avg' or 'max', got {mode!r}")
    return [
        ctx.call(
            roi_align,
            ctx.required(0),
            ctx.required(1),
            ctx.required(2),
            coord == "half_pixel",
            mode,
            int(ctx.attr("output_height", 1)),
            int(ctx.attr("output_width", 1)),
            int(ctx.attr("sampling_ratio", 0)),
            float(ctx.attr("spatial_scale", 1.0)),
        )
    ]
