"""Converters (and their run-time functions) for element-wise math, logic, reductions,
cumulative sums, arg-reductions and normalizations."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from . import _runtime as R, _unsigned as U
from ._graph import Const, NodeContext, Value
from ._registry import register

__all__: list[str] = []

Convert = Callable[[NodeContext], "list[Value | None]"]


# ----------------------------------------------------------------------------- run time


def softsign(x: Tensor) -> Tensor:
    """ONNX ``Softsign``: ``x / (1 + |x|)``."""
    return x / (1 + x.abs())


def mish(x: Tensor) -> Tensor:
    """ONNX ``Mish``: ``x * tanh(softplus(x))``."""
    return x * torch.tanh(F.softplus(x))


def swish(x: Tensor, alpha: float) -> Tensor:
    """ONNX ``Swish``: ``x * sigmoid(alpha * x)``."""
    return x * torch.sigmoid(x * alpha)


def thresholded_relu(x: Tensor, alpha: float) -> Tensor:
    """ONNX ``ThresholdedRelu``: ``x`` where ``x > alpha``, else 0."""
    return torch.where(x > alpha, x, torch.zeros((), dtype=x.dtype, device=x.device))


def shrink(x: Tensor, bias: float, lambd: float) -> Tensor:
    """ONNX ``Shrink``: ``x + bias`` below ``-lambd``, ``x - bias`` above ``lambd``, else 0."""
    zero = torch.zeros((), dtype=x.dtype, device=x.device)
    return torch.where(x < -lambd, x + bias, torch.where(x > lambd, x - bias, zero)).to(x.dtype)


def is_inf(x: Tensor, negative: int, positive: int) -> Tensor:
    """ONNX ``IsInf`` with ``detect_negative`` / ``detect_positive``."""
    if negative and positive:
        return torch.isinf(x)
    if negative:
        return torch.isneginf(x)
    if positive:
        return torch.isposinf(x)
    return torch.zeros_like(x, dtype=torch.bool)


def mod(a: Tensor, b: Tensor, fmod: int) -> Tensor:
    """ONNX ``Mod``: the sign of ``b`` (``fmod=0``) or of ``a`` (``fmod=1``)."""
    return U.binary("fmod" if fmod else "mod", a, b)


def bit_shift(a: Tensor, b: Tensor, left: bool) -> Tensor:
    """ONNX ``BitShift`` (unsigned operands)."""
    return U.binary("shift_left" if left else "shift_right", a, b)


def bitwise_not(a: Tensor) -> Tensor:
    """ONNX ``BitwiseNot``."""
    return U.unary("bitwise_not", a)


def arg_reduce(x: Tensor, axis: int, keepdims: int, last: int, largest: bool) -> Tensor:
    """ONNX ``ArgMax`` / ``ArgMin``: the first (or, ``select_last_index``, last) extremum."""
    fn = torch.argmax if largest else torch.argmin
    if not last:
        return fn(x, dim=axis, keepdim=bool(keepdims))
    if axis < 0:
        axis += x.dim()
    flipped = fn(x.flip(axis), dim=axis, keepdim=bool(keepdims))
    return x.shape[axis] - 1 - flipped


def cumulative(x: Tensor, axis: Any, exclusive: int, reverse: int, op: str) -> Tensor:
    """ONNX ``CumSum`` / ``CumProd`` with ``exclusive`` and ``reverse``."""
    dim = int(R.scalar(axis))
    if dim < 0:
        dim += x.dim()
    if reverse:
        x = x.flip(dim)
    out = torch.cumsum(x, dim) if op == "sum" else torch.cumprod(x, dim)
    if exclusive:
        fill = 0 if op == "sum" else 1
        first = torch.full_like(x.narrow(dim, 0, 1), fill)
        out = torch.cat([first, out.narrow(dim, 0, x.shape[dim] - 1)], dim)
    if reverse:
        out = out.flip(dim)
    return out.to(x.dtype)


def reduce(x: Tensor, op: str, axes: Any, keepdims: int, noop_with_empty_axes: int = 0) -> Tensor:
    """ONNX ``Reduce*``; reducing an empty axis gives the operation's identity (``-inf``
    for ``ReduceMax``, ``inf`` for ``ReduceMin``, 0 for sums, 1 for products), as the
    reference implementation does."""
    dims = [] if axes is None else R.as_ints(axes)
    if not dims:
        if noop_with_empty_axes:
            return x
        dims = list(range(x.dim()))
    dims = sorted({d + x.dim() if d < 0 else d for d in dims})
    keep = bool(keepdims)
    if op in ("max", "min") and any(x.shape[d] == 0 for d in dims):
        shape = [1 if d in dims else x.shape[d] for d in range(x.dim())]
        if not keep:
            shape = [x.shape[d] for d in range(x.dim()) if d not in dims]
        if x.dtype.is_floating_point:
            fill: float = -math.inf if op == "max" else math.inf
        elif x.dtype == torch.bool:
            fill = op == "min"
        else:
            info = torch.iinfo(x.dtype)
            fill = info.min if op == "max" else info.max
        return torch.full(shape, fill, dtype=x.dtype, device=x.device)
    if op == "mean":
        return x.mean(dim=dims, keepdim=keep)
    if op == "sum":
        return x.sum(dim=dims, keepdim=keep, dtype=x.dtype)
    if op == "max":
        return x.amax(dim=dims, keepdim=keep)
    if op == "min":
        return x.amin(dim=dims, keepdim=keep)
    if op == "prod":
        out = x
        for d in reversed(dims):
            out = out.prod(dim=d, keepdim=keep, dtype=x.dtype)
        return out
    if op == "sum_square":
        return (x * x).sum(dim=dims, keepdim=keep, dtype=x.dtype)
    if op == "l1":
        return x.abs().sum(dim=dims, keepdim=keep, dtype=x.dtype)
    if op == "l2":
        return torch.sqrt((x * x).sum(dim=dims, keepdim=keep)).to(x.dtype)
    if op == "log_sum":
        return torch.log(x.sum(dim=dims, keepdim=keep))
    if op == "log_sum_exp":
        return torch.logsumexp(x, dim=dims, keepdim=keep)
    raise ValueError(f"reduce: unknown op {op!r}")


def hardmax(x: Tensor, axis: int, legacy: bool) -> Tensor:
    """ONNX ``Hardmax``: 1 at the first maximum along ``axis`` (opset < 13: of the
    flattened trailing axes), 0 elsewhere."""
    if legacy:
        flat = R.flatten(x, axis)
        return hardmax(flat, 1, False).reshape(x.shape)
    if axis < 0:
        axis += x.dim()
    index = torch.argmax(x, dim=axis, keepdim=True)
    return torch.zeros_like(x).scatter(axis, index, 1.0)


def lp_normalize(x: Tensor, axis: int, p: int) -> Tensor:
    """ONNX ``LpNormalization``: ``x / ||x||_p`` along ``axis`` (0 where the norm is 0)."""
    norm = x.abs().sum(axis, keepdim=True) if p == 1 else torch.sqrt((x * x).sum(axis, True))
    return torch.where(norm == 0, torch.zeros_like(x), x / norm)


def mean_variance_normalize(x: Tensor, axes: Sequence[int]) -> Tensor:
    """ONNX ``MeanVarianceNormalization``: ``(x - mean) / (std + 1e-9)`` over ``axes``."""
    dims = list(axes)
    mean = x.mean(dims, keepdim=True)
    var = (x * x).mean(dims, keepdim=True) - mean * mean
    return (x - mean) / (torch.sqrt(var) + 1e-9)


def _stash(x: Tensor, stash: int) -> Tensor:
    return x.float() if stash == 1 and x.dtype != torch.float64 else x


def layer_norm(
    x: Tensor, scale: Tensor, bias: Tensor | None, axis: int, eps: float, stash: int
) -> tuple[Tensor, Tensor, Tensor]:
    """ONNX ``LayerNormalization``: ``Y``, ``Mean`` and ``InvStdDev`` over axes ``axis..``."""
    if axis < 0:
        axis += x.dim()
    dims = list(range(axis, x.dim()))
    xs = _stash(x, stash)
    mean = xs.mean(dims, keepdim=True)
    centered = xs - mean
    var = (centered * centered).mean(dims, keepdim=True)
    inv = torch.rsqrt(var + eps)
    y = (centered * inv).to(x.dtype) * scale
    if bias is not None:
        y = y + bias
    return y, mean, inv


def group_norm(
    x: Tensor, scale: Tensor, bias: Tensor, groups: int, eps: float, stash: int, per_group: bool
) -> Tensor:
    """ONNX ``GroupNormalization``; ``per_group`` (opset 18) has one scale per group."""
    n, c = x.shape[0], x.shape[1]
    xs = _stash(x, stash).reshape(n, groups, -1)
    mean = xs.mean(-1, keepdim=True)
    centered = xs - mean
    var = (centered * centered).mean(-1, keepdim=True)
    y = (centered * torch.rsqrt(var + eps)).reshape(x.shape).to(x.dtype)
    if per_group:
        scale = scale.repeat_interleave(c // groups)
        bias = bias.repeat_interleave(c // groups)
    shape = [c] + [1] * (x.dim() - 2)
    return y * scale.reshape(shape) + bias.reshape(shape)


def rms_norm(x: Tensor, scale: Tensor, axis: int, eps: float, stash: int) -> Tensor:
    """ONNX ``RMSNormalization``: ``x / sqrt(mean(x^2) + eps) * scale`` over axes ``axis..``."""
    if axis < 0:
        axis += x.dim()
    dims = list(range(axis, x.dim()))
    xs = _stash(x, stash)
    y = xs * torch.rsqrt((xs * xs).mean(dims, keepdim=True) + eps)
    return y.to(x.dtype) * scale


def einsum(equation: str, *operands: Tensor) -> Tensor:
    """ONNX ``Einsum``."""
    return torch.einsum(equation, *operands)


# ----------------------------------------------------------------------------- converters


def _unary(fn: Callable[..., Any], **fixed: Any) -> Convert:
    def convert(ctx: NodeContext) -> list[Value | None]:
        return [ctx.call(fn, ctx.required(0), **fixed)]

    return convert


_UNARY: dict[str, tuple[Callable[..., Any], int]] = {
    "Acos": (torch.acos, 7),
    "Acosh": (torch.acosh, 9),
    "Asin": (torch.asin, 7),
    "Asinh": (torch.asinh, 9),
    "Atan": (torch.atan, 7),
    "Atanh": (torch.atanh, 9),
    "Cos": (torch.cos, 7),
    "Cosh": (torch.cosh, 9),
    "Sin": (torch.sin, 7),
    "Sinh": (torch.sinh, 9),
    "Tan": (torch.tan, 7),
    "Sign": (torch.sign, 9),
    "Round": (torch.round, 11),
    "IsNaN": (torch.isnan, 9),
    "Softsign": (softsign, 1),
    "Mish": (mish, 18),
    "BitwiseNot": (bitwise_not, 18),
    "Det": (torch.linalg.det, 11),
}
for _op, (_fn, _since) in _UNARY.items():
    register(_op, since=_since)(_unary(_fn))


@register("Celu", since=12)
def celu(ctx: NodeContext) -> list[Value | None]:
    return [ctx.call(F.celu, ctx.required(0), float(ctx.attr("alpha", 1.0)))]


@register("Swish", since=24)
def swish_(ctx: NodeContext) -> list[Value | None]:
    return [ctx.call(swish, ctx.required(0), float(ctx.attr("alpha", 1.0)))]


@register("ThresholdedRelu", since=10)
def thresholded_relu_(ctx: NodeContext) -> list[Value | None]:
    return [ctx.call(thresholded_relu, ctx.required(0), float(ctx.attr("alpha", 1.0)))]


@register("Shrink", since=9)
def shrink_(ctx: NodeContext) -> list[Value | None]:
    bias, lambd = float(ctx.attr("bias", 0.0)), float(ctx.attr("lambd", 0.5))
    return [ctx.call(shrink, ctx.required(0), bias, lambd)]


@register("IsInf", since=10)
def is_inf_(ctx: NodeContext) -> list[Value | None]:
    neg, pos = int(ctx.attr("detect_negative", 1)), int(ctx.attr("detect_positive", 1))
    return [ctx.call(is_inf, ctx.required(0), neg, pos)]


def _binary(fn: Callable[..., Any] | str) -> Convert:
    def convert(ctx: NodeContext) -> list[Value | None]:
        a, b = ctx.required(0), ctx.required(1)
        if ctx.version < 7 and int(ctx.attr("broadcast", 0)):
            b = ctx.call(R.legacy_broadcast, a, b, ctx.attr("axis"))
        if isinstance(fn, str):
            return [ctx.call(getattr(U, fn), a, b)]
        return [ctx.call(fn, a, b)]

    return convert


_BINARY: dict[str, tuple[Callable[..., Any] | str, int]] = {
    "And": (torch.logical_and, 1),
    "Or": (torch.logical_or, 1),
    "Xor": (torch.logical_xor, 1),
    "GreaterOrEqual": ("ge", 12),
    "LessOrEqual": ("le", 12),
    "BitwiseAnd": ("bitwise_and", 18),
    "BitwiseOr": ("bitwise_or", 18),
    "BitwiseXor": ("bitwise_xor", 18),
}
for _op, (_bin, _since) in _BINARY.items():
    register(_op, since=_since)(_binary(_bin))


@register("Mod", since=10)
def mod_(ctx: NodeContext) -> list[Value | None]:
    return [ctx.call(mod, ctx.required(0), ctx.required(1), int(ctx.attr("fmod", 0)))]


@register("BitShift", since=11)
def bit_shift_(ctx: NodeContext) -> list[Value | None]:
    direction = str(ctx.attr("direction", ""))
    if direction not in ("LEFT", "RIGHT"):
        raise ctx.error(f"direction must be 'LEFT' or 'RIGHT', got {direction!r}")
    return [ctx.call(bit_shift, ctx.required(0), ctx.required(1), direction == "LEFT")]


def _arg(largest: bool) -> Convert:
    def convert(ctx: NodeContext) -> list[Value | None]:
        axis = int(ctx.attr("axis", 0))
        keep = int(ctx.attr("keepdims", 1))
        last = int(ctx.attr("select_last_index", 0))
        return [ctx.call(arg_reduce, ctx.required(0), axis, keep, last, largest)]

    return convert


register("ArgMax")(_arg(True))
register("ArgMin")(_arg(False))


def _cumulative(op: str) -> Convert:
    def convert(ctx: NodeContext) -> list[Value | None]:
        axis = ctx.required(1)
        arg = int(R.scalar(axis.tensor)) if isinstance(axis, Const) else axis
        exclusive, reverse = int(ctx.attr("exclusive", 0)), int(ctx.attr("reverse", 0))
        return [ctx.call(cumulative, ctx.required(0), arg, exclusive, reverse, op)]

    return convert


register("CumSum", since=11)(_cumulative("sum"))
register("CumProd", since=26)(_cumulative("prod"))


def _reduce(op: str, axes_input_since: int) -> Convert:
    def convert(ctx: NodeContext) -> list[Value | None]:
        keepdims = int(ctx.attr("keepdims", 1))
        noop = int(ctx.attr("noop_with_empty_axes", 0))
        x = ctx.required(0)
        if ctx.version < axes_input_since:
            return [ctx.call(reduce, x, op, ctx.ints("axes"), keepdims)]
        axes = ctx.input(1)
        if isinstance(axes, Const):
            return [ctx.call(reduce, x, op, R.as_ints(axes.tensor), keepdims, noop)]
        return [ctx.call(reduce, x, op, axes, keepdims, noop)]

    return convert


for _op, _name, _since in (
    ("ReduceMean", "mean", 18),
    ("ReduceSum", "sum", 13),
    ("ReduceMax", "max", 18),
    ("ReduceMin", "min", 18),
    ("ReduceProd", "prod", 18),
    ("ReduceSumSquare", "sum_square", 18),
    ("ReduceL1", "l1", 18),
    ("ReduceL2", "l2", 18),
    ("ReduceLogSum", "log_sum", 18),
    ("ReduceLogSumExp", "log_sum_exp", 18),
):
    register(_op)(_reduce(_name, _since))


@register("Hardmax")
def hardmax_(ctx: NodeContext) -> list[Value | None]:
    legacy = ctx.version < 13
    axis = int(ctx.attr("axis", 1 if legacy else -1))
    return [ctx.call(hardmax, ctx.required(0), axis, legacy)]


@register("LpNormalization")
def lp_normalization(ctx: NodeContext) -> list[Value | None]:
    p = int(ctx.attr("p", 2))
    if p not in (1, 2):
        raise ctx.error(f"p must be 1 or 2, got {p}")
    return [ctx.call(lp_normalize, ctx.required(0), int(ctx.attr("axis", -1)), p)]


@register("MeanVarianceNormalization", since=9)
def mean_variance_normalization(ctx: NodeContext) -> list[Value | None]:
    axes = ctx.ints("axes", [0, 2, 3])
    return [ctx.call(mean_variance_normalize, ctx.required(0), axes)]


@register("LayerNormalization", since=17)
def layer_normalization(ctx: NodeContext) -> list[Value | None]:
    axis = int(ctx.attr("axis", -1))
    eps = float(ctx.attr("epsilon", 1e-5))
    stash = int(ctx.attr("stash_type", 1))
    outs = ctx.call(
        layer_norm, ctx.required(0), ctx.required(1), ctx.input(2), axis, eps, stash, n_out=3
    )
    return list(outs)


@register("GroupNormalization", since=18)
def group_normalization(ctx: NodeContext) -> list[Value | None]:
    groups = int(ctx.attr("num_groups"))
    eps = float(ctx.attr("epsilon", 1e-5))
    stash = int(ctx.attr("stash_type", 1))
    x, scale, bias = ctx.required(0), ctx.required(1), ctx.required(2)
    return [ctx.call(group_norm, x, scale, bias, groups, eps, stash, ctx.version < 21)]


@register("RMSNormalization", since=23)
def rms_normalization(ctx: NodeContext) -> list[Value | None]:
    axis = int(ctx.attr("axis", -1))
    eps = float(ctx.attr("epsilon", 1e-5))
    stash = int(ctx.attr("stash_type", 1))
    return [ctx.call(rms_norm, ctx.required(0), ctx.required(1), axis, eps, stash)]


@register("Einsum", since=12)
def einsum_(ctx: NodeContext) -> list[Value | None]:
    operands = [v for v in ctx.inputs if v is not None]
    return [ctx.call(einsum, str(ctx.attr("equation")), *operands)]
