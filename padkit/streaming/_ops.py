"""The ops a streamed layer runs on its buffered window: the layer without time padding (the
other axes padded as the layer pads them), the full transposed conv, the empty output of a
chunk that completes no window, and the tap-major weight of the matmul path. ``cache`` is the
stream's memo (pads per layer and sizes; reshaped weights)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import functional as PF
from ..recognise import torch_pairs
from ..spec import (
    Padding,
    _tuple_of,
    conv_output_size,
    conv_transpose_output_size,
    pool_output_size,
)
from ._plan import _Plan, _spatial

_TORCH_CONV: dict[int, Any] = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_TORCH_CONVT: dict[int, Any] = {
    1: F.conv_transpose1d,
    2: F.conv_transpose2d,
    3: F.conv_transpose3d,
}
_CONVT_FN: dict[int, Any] = {
    1: PF.conv_transpose1d,
    2: PF.conv_transpose2d,
    3: PF.conv_transpose3d,
}
_CONV_FN: dict[int, Any] = {1: PF.conv1d, 2: PF.conv2d, 3: PF.conv3d}
_MAX_FN: dict[int, Any] = {1: PF.max_pool1d, 2: PF.max_pool2d, 3: PF.max_pool3d}
_AVG_FN: dict[int, Any] = {1: PF.avg_pool1d, 2: PF.avg_pool2d, 3: PF.avg_pool3d}
_LP_FN: dict[int, Any] = {1: PF.lp_pool1d, 2: PF.lp_pool2d, 3: PF.lp_pool3d}

# the stream's memo: a layer's pads per spatial sizes (a function of shapes and the layer's
# arguments, never of a tensor's values)
PairsCache = dict[tuple[str, tuple[int, ...]], tuple[tuple[int, int], ...]]


def layer_pairs(
    cache: PairsCache, plan: _Plan, layer: nn.Module, sizes: Sequence[int]
) -> tuple[tuple[int, int], ...]:
    """The layer's pads (transposed: crops) for these spatial sizes, time unpadded."""
    key = (plan.name, tuple(sizes))
    cached = cache.get(key)
    if cached is not None:
        return cached
    if plan.kind == "convt" and plan.padkit:
        pairs = list(layer.resolved_crops(tuple(sizes)))  # type: ignore[operator]
    elif plan.padkit:
        probe = list(sizes)
        probe[plan.ti] = max(plan.k_eff, 1)
        pairs = list(layer.resolved_padding(tuple(probe)))  # type: ignore[operator]
    else:
        pairs = list(torch_pairs(getattr(layer, "padding", 0), plan.k, plan.d))
    pairs[plan.ti] = (0, 0)
    result = tuple(pairs)
    if len(cache) < 4096:
        cache[key] = result
    return result


def run_transposed(
    cache: PairsCache, plan: _Plan, layer: Any, cat: Tensor, with_bias: bool = True
) -> Tensor:
    """The full (time-uncropped) transposed conv of ``cat`` (``history ++ chunk``, or a
    chunk alone for overlap-add, then ``with_bias=False``: its outputs are partial sums)."""
    sizes = _spatial(plan, cat)
    pairs = layer_pairs(cache, plan, layer, sizes)
    op = list(_tuple_of(layer.output_padding, plan.nd, "output_padding", minimum=0))
    op[plan.ti] = 0
    bias = layer.bias if with_bias else None
    if all(p == (0, 0) for p in pairs) and not any(op):
        return _TORCH_CONVT[plan.nd](  # type: ignore[no-any-return]
            cat, layer.weight, bias, plan.s, 0, 0, layer.groups, plan.d
        )
    return _CONVT_FN[plan.nd](  # type: ignore[no-any-return]
        cat,
        layer.weight,
        bias,
        plan.s,
        Padding(pairs),
        tuple(op),
        layer.groups,
        plan.d,
    )


def run_overlap_add(
    cache: PairsCache, plan: _Plan, layer: Any, x: Tensor, kept: Tensor, off: int, m: int
) -> tuple[Tensor, Tensor]:
    """A causal 1-d transposed conv's step by overlap-add: ``kept`` holds its outputs from
    ``pos * s - hi`` on (``hi`` complete ones held back, then the partial sums of the last
    ``k_eff - s``), without the bias. The chunk's own transposed conv adds to them; returns
    outputs ``off .. off + m`` of that sum (with the bias) and the next ``kept``."""
    s, held, hist = plan.stride, plan.hi, plan.history
    over = hist - held  # max(0, k_eff - s): outputs the next inputs still add to
    length = x.shape[2]
    if isinstance(length, int) and length == 0:
        z = kept.new_zeros((kept.shape[0], kept.shape[1], over))
    else:
        z = run_transposed(cache, plan, layer, x, with_bias=False)  # outputs from pos * s
    need = length * s + over  # complete through (pos + length) * s, then partial
    if z.shape[2] != need:  # a kernel shorter than the stride: outputs it never reaches
        z = F.pad(z, (0, need - z.shape[2]))
    parts = [kept.narrow(2, 0, held)] if held else []
    if over:
        parts += [z.narrow(2, 0, over) + kept.narrow(2, held, over), z.narrow(2, over, need - over)]
    else:
        parts.append(z)
    comb = torch.cat(parts, 2) if len(parts) > 1 else parts[0]
    if m > 0:
        y = comb.narrow(2, off, m)
        bias = layer.bias
        if bias is not None:
            y = y + bias.view(1, -1, 1).to(y.dtype)
    else:
        y = empty_output(cache, plan, layer, x)
    return y, comb.narrow(2, length * s, hist)


def run_transposed_window(
    cache: PairsCache, plan: _Plan, layer: Any, cat: Tensor, off: int, m: int
) -> Tensor:
    """Outputs ``off .. off + m`` (time) of the full, time-uncropped transposed conv of
    ``cat`` (``history ++ chunk``), from only the inputs they read: output ``j`` reads
    inputs ``(j - k_eff) // s + 1 .. j // s``, so the inputs before the first output's
    reach (kept for outputs already emitted, or held back) are left out of the conv,
    which would otherwise compute every output they touch again."""
    td = 2 + plan.ti
    s = plan.stride
    start = max(0, (off - plan.k_eff) // s + 1)
    stop = min(int(cat.shape[td]), (off + m - 1) // s + 1)
    if (stop - start - 1) * s + plan.k_eff < off - start * s + m:
        start, stop = 0, int(cat.shape[td])  # outputs between the kernels' reach: all of it
    if start > 0 or stop < cat.shape[td]:
        cat = cat.narrow(td, start, stop - start)
    y = run_transposed(cache, plan, layer, cat)
    first = off - start * s
    if first != 0 or y.shape[td] != m:
        y = y.narrow(td, first, m)
    return y


def run_op(
    cache: PairsCache,
    plan: _Plan,
    layer: Any,
    seg: Tensor,
    t0: Tensor | int,
    end: int | None,
    shift: int = 0,
) -> Tensor:
    """The layer, unpadded in time, on ``seg``; ``t0 + shift`` is the stream time of
    ``seg``'s first sample per row (negative: the left pad; a tensor of rows, or an int
    for all rows), ``end`` the first time past the stream's end (lookahead: the right
    pad), for pools that do not count pads (the only op that reads them: the sum is made
    there, not on every call)."""
    if plan.lo == 0 and plan.hi == 0 and plan.kind != "convt":
        # nothing to pad on the time axis: the layer's own forward is the full-sequence op
        return layer(seg)  # type: ignore[no-any-return]
    sizes = _spatial(plan, seg)
    pairs = layer_pairs(cache, plan, layer, sizes)
    nd = plan.nd
    if plan.kind == "conv" and all(p == (0, 0) for p in pairs):
        # the common 1-d case: nothing left to pad, the plain torch conv
        return _TORCH_CONV[nd](  # type: ignore[no-any-return]
            seg, layer.weight, layer.bias, plan.s, 0, plan.d, layer.groups
        )
    spec = Padding(pairs)
    if plan.kind == "conv":
        return _CONV_FN[nd](  # type: ignore[no-any-return]
            seg,
            layer.weight,
            layer.bias,
            plan.s,
            spec,
            plan.d,
            layer.groups,
            layer.padding_mode,
        )
    if plan.kind == "max":
        return _MAX_FN[nd](  # type: ignore[no-any-return]
            seg, plan.k, plan.s, spec, plan.d, layer.ceil_mode, False, plan.fill
        )
    if plan.kind == "lp":
        return _LP_FN[nd](  # type: ignore[no-any-return]
            seg, layer.norm_type, plan.k, plan.s, layer.ceil_mode, padding=spec, dilation=plan.d
        )
    avg = _AVG_FN[nd]
    divisor = getattr(layer, "divisor_override", None)
    if layer.count_include_pad or divisor is not None:
        return avg(  # type: ignore[no-any-return]
            seg, plan.k, plan.s, spec, layer.ceil_mode, layer.count_include_pad, divisor, plan.d
        )
    # average over the real samples only: pool the sum and, from a mask of which stream
    # positions are real (not the time pads), the count
    td = 2 + plan.ti
    total = avg(seg, plan.k, plan.s, spec, layer.ceil_mode, True, 1, plan.d)
    base = torch.as_tensor(t0, device=seg.device).reshape(-1, 1) + shift
    times = base + torch.arange(seg.shape[td], device=seg.device)
    real = times >= 0
    if end is not None:
        real = real & (times < end)
    mshape = [seg.shape[0]] + [1] * (seg.dim() - 1)
    mshape[td] = seg.shape[td]
    mask = real.to(seg.dtype).view(mshape).expand([seg.shape[0], 1, *seg.shape[2:]])
    count = avg(mask, plan.k, plan.s, spec, layer.ceil_mode, True, 1, plan.d)
    return total / count  # type: ignore[no-any-return]


def empty_output(cache: PairsCache, plan: _Plan, layer: Any, x: Tensor) -> Tensor:
    """The output of a chunk that completes no window (time length 0)."""
    sizes = _spatial(plan, x)
    pairs = layer_pairs(cache, plan, layer, sizes)
    shape = [
        int(x.shape[0]),
        int(layer.out_channels) if plan.kind in ("conv", "convt") else int(x.shape[1]),
    ]
    ceil = bool(getattr(layer, "ceil_mode", False))
    if plan.kind == "convt":
        op = _tuple_of(layer.output_padding, plan.nd, "output_padding", minimum=0)
    for i, (n, (lo, hi)) in enumerate(zip(sizes, pairs)):
        if i == plan.ti:
            shape.append(0)
        elif plan.kind == "convt":
            shape.append(
                conv_transpose_output_size(n, plan.k[i], plan.s[i], plan.d[i], lo, hi) + op[i]
            )
        elif plan.kind == "conv":
            shape.append(conv_output_size(n, plan.k[i], plan.s[i], plan.d[i], lo, hi))
        else:
            shape.append(pool_output_size(n, plan.k[i], plan.s[i], plan.d[i], lo, hi, ceil))
    return x.new_zeros(shape)
