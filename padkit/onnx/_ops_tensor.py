"""Converters for element-wise, tensor-manipulation, shape and matrix nodes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from . import _runtime as R, _unsigned as U
from ._graph import ONNX_DTYPES, Const, NodeContext, Value, tensor_from_proto
from ._registry import register

__all__: list[str] = []


def _unary(fn: Callable[..., Any], **fixed: Any) -> Callable[[NodeContext], list[Value | None]]:
    def convert(ctx: NodeContext) -> list[Value | None]:
        return [ctx.call(fn, ctx.required(0), **fixed)]

    return convert


_UNARY: dict[str, Callable[..., Any]] = {
    "Relu": torch.relu,
    "Sigmoid": torch.sigmoid,
    "Tanh": torch.tanh,
    "Erf": torch.erf,
    "Exp": torch.exp,
    "Log": torch.log,
    "Neg": torch.neg,
    "Sqrt": torch.sqrt,
    "Abs": torch.abs,
    "Reciprocal": torch.reciprocal,
    "Floor": torch.floor,
    "Ceil": torch.ceil,
    "Softplus": F.softplus,
    "HardSwish": F.hardswish,
    "Not": torch.logical_not,
}
for _op, _fn in _UNARY.items():
    register(_op)(_unary(_fn))


@register("Identity")
def identity(ctx: NodeContext) -> list[Value | None]:
    return [ctx.required(0)]


@register("LeakyRelu")
def leaky_relu(ctx: NodeContext) -> list[Value | None]:
    return [ctx.call(F.leaky_relu, ctx.required(0), float(ctx.attr("alpha", 0.01)))]


@register("Elu")
def elu(ctx: NodeContext) -> list[Value | None]:
    return [ctx.call(F.elu, ctx.required(0), float(ctx.attr("alpha", 1.0)))]


@register("Selu")
def selu(ctx: NodeContext) -> list[Value | None]:
    alpha = float(ctx.attr("alpha", 1.67326319217681884765625))
    gamma = float(ctx.attr("gamma", 1.05070102214813232421875))
    return [ctx.call(R.selu, ctx.required(0), alpha, gamma)]


@register("HardSigmoid")
def hard_sigmoid(ctx: NodeContext) -> list[Value | None]:
    alpha = float(ctx.attr("alpha", 0.2))
    beta = float(ctx.attr("beta", 0.5))
    return [ctx.call(R.hard_sigmoid, ctx.required(0), alpha, beta)]


@register("Gelu", since=20)
def gelu(ctx: NodeContext) -> list[Value | None]:
    approximate = str(ctx.attr("approximate", "none"))
    if approximate not in ("none", "tanh"):
        raise ctx.error(f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return [ctx.call(F.gelu, ctx.required(0), approximate=approximate)]


@register("PRelu")
def prelu(ctx: NodeContext) -> list[Value | None]:
    return [ctx.call(R.prelu, ctx.required(0), ctx.required(1))]


@register("Clip")
def clip(ctx: NodeContext) -> list[Value | None]:
    x = ctx.required(0)
    if ctx.version < 11:
        lo = float(ctx.attr("min", -3.4028234663852886e38))
        hi = float(ctx.attr("max", 3.4028234663852886e38))
        return [ctx.call(R.clip, x, lo, hi)]
    bounds: list[Any] = []
    for i in (1, 2):
        v = ctx.input(i)
        if isinstance(v, Const):
            bounds.append(R.scalar(v.tensor) if v.tensor.numel() else None)
        else:
            bounds.append(v)
    return [ctx.call(R.clip, x, *bounds)]


# ----------------------------------------------------------------------------- binary


def _binary(fn: Callable[..., Any] | str) -> Callable[[NodeContext], list[Value | None]]:
    def convert(ctx: NodeContext) -> list[Value | None]:
        a, b = ctx.required(0), ctx.required(1)
        if ctx.version < 7 and int(ctx.attr("broadcast", 0)):
            # opsets 1-6: B's shape matches a run of A's dims starting at ``axis``
            b = ctx.call(R.legacy_broadcast, a, b, ctx.attr("axis"))
        if isinstance(fn, str):
            return [ctx.call(getattr(U, fn), a, b)]
        return [ctx.call(fn, a, b)]

    return convert


_BINARY: dict[str, Callable[..., Any] | str] = {
    "Add": "add",
    "Sub": "sub",
    "Mul": "mul",
    "Div": "div",
    "Pow": R.pow_,
    "MatMul": torch.matmul,
    "Equal": "eq",
    "Less": "lt",
    "Greater": "gt",
}
for _op, _bin in _BINARY.items():
    register(_op, since=1)(_binary(_bin))


@register("Where", since=9)
def where(ctx: NodeContext) -> list[Value | None]:
    return [ctx.call(torch.where, ctx.required(0), ctx.required(1), ctx.required(2))]


def _variadic(op: str) -> Callable[[NodeContext], list[Value | None]]:
    def convert(ctx: NodeContext) -> list[Value | None]:
        args = [v for v in ctx.inputs if v is not None]
        return [ctx.call(R.variadic, op, *args)]

    return convert


for _op, _name in {"Sum": "sum", "Max": "max", "Min": "min", "Mean": "mean"}.items():
    register(_op, since=1)(_variadic(_name))


@register("Gemm")
def gemm(ctx: NodeContext) -> list[Value | None]:
    a, b, c = ctx.required(0), ctx.required(1), ctx.input(2)
    alpha = float(ctx.attr("alpha", 1.0))
    beta = float(ctx.attr("beta", 1.0))
    trans_a = int(ctx.attr("transA", 0))
    trans_b = int(ctx.attr("transB", 0))
    if isinstance(b, Const) and not trans_a and alpha == 1.0 and not isinstance(a, Const):
        weight = b.tensor if trans_b else b.tensor.t()
        n_out = int(weight.shape[0])
        bias = None
        if (
            isinstance(c, Const)
            and beta == 1.0
            and c.tensor.numel() == n_out
            and (c.tensor.dim() == 1 or tuple(c.tensor.shape) == (1, n_out))
        ):
            bias = c.tensor.reshape(n_out)
        if c is None or bias is not None:
            layer = nn.Linear(
                int(weight.shape[1]),
                n_out,
                bias=bias is not None,
                device="meta",
                dtype=weight.dtype,
            )
            layer.weight = nn.Parameter(weight.detach().contiguous())
            if bias is not None:
                layer.bias = nn.Parameter(bias.detach())
            return [ctx.module(layer, a)]
    return [ctx.call(R.gemm, a, b, c, alpha, beta, trans_a, trans_b)]


# ----------------------------------------------------------------------------- softmax, reduce


def _softmax(log: bool) -> Callable[[NodeContext], list[Value | None]]:
    def convert(ctx: NodeContext) -> list[Value | None]:
        legacy = ctx.version < 13
        axis = int(ctx.attr("axis", 1 if legacy else -1))
        return [ctx.call(R.softmax, ctx.required(0), axis, log, legacy)]

    return convert


register("Softmax")(_softmax(False))
register("LogSoftmax")(_softmax(True))


# ----------------------------------------------------------------------------- tensor shape ops


@register("Concat")
def concat(ctx: NodeContext) -> list[Value | None]:
    parts = [v for v in ctx.inputs if v is not None]
    axis = ctx.attr("axis", 1 if ctx.version < 4 else None)
    if axis is None:
        raise ctx.error("attribute axis is required")
    return [ctx.call(R.concat, parts, int(axis))]


@register("Split", since=2)
def split(ctx: NodeContext) -> list[Value | None]:
    x = ctx.required(0)
    axis = int(ctx.attr("axis", 0))
    n_out = len(ctx.node.output)
    sizes: Any
    if ctx.version < 13:
        sizes = ctx.ints("split")
    else:
        given = ctx.input(1)
        sizes = R.as_ints(given.tensor) if isinstance(given, Const) else given
    uneven = ctx.version >= 18 and sizes is None
    if uneven:
        n_out = int(ctx.attr("num_outputs", n_out))
    outs = ctx.call(R.split, x, axis, sizes, n_out, uneven, n_out=n_out)
    return list(outs)


@register("Slice", since=1)
def slice_(ctx: NodeContext) -> list[Value | None]:
    x = ctx.required(0)
    if ctx.version < 10:
        return [
            ctx.call(R.onnx_slice, x, ctx.ints("starts"), ctx.ints("ends"), ctx.ints("axes"), None)
        ]
    args: list[Any] = []
    for i in (1, 2, 3, 4):
        v = ctx.input(i)
        args.append(R.as_ints(v.tensor) if isinstance(v, Const) else v)
    return [ctx.call(R.onnx_slice, x, *args)]


@register("Flatten")
def flatten(ctx: NodeContext) -> list[Value | None]:
    return [ctx.call(R.flatten, ctx.required(0), int(ctx.attr("axis", 1)))]


def _inferred_shape(ctx: NodeContext, minus_one: bool) -> list[Any] | None:
    """Output 0's shape as ONNX shape inference (with data propagation) sees it, for a node
    whose shape argument is computed at run time: literal sizes, ``(tensor, j)`` for a
    dimension named like dim ``j`` of a graph input, and (``minus_one``) at most one -1 for
    the rest. None when that does not pin the shape down. Sizes read from the graph inputs
    stay symbolic under ``torch.export``, where a shape tensor's values would not."""
    run = ctx.converting
    if run is None:
        return None
    out = run.shapes.get(ctx.node.output[0])
    names = run.params.get(ctx.node.output[0])
    if out is None or names is None or len(names) != len(out):
        return None
    dims: list[Any] = []
    for size, name in zip(out, names):
        if size is not None:
            if size <= 0:
                return None
            dims.append(int(size))
        elif name is not None and name in run.symbols:
            dims.append(run.symbols[name])
        elif minus_one and -1 not in dims:
            dims.append(-1)
        else:
            return None
    return dims


@register("Reshape", since=1)
def reshape(ctx: NodeContext) -> list[Value | None]:
    if ctx.version < 5:
        return [ctx.call(R.reshape, ctx.required(0), ctx.ints("shape", []), 0)]
    shape = ctx.required(1)
    if not isinstance(shape, Const):
        # a shape computed at run time whose result ONNX shape inference (with data
        # propagation) knows up to one dimension: the literal shape with -1 there is the same
        # reshape, and keeps a symbolic batch symbolic under torch.export
        dims = _inferred_shape(ctx, minus_one=True)
        if dims is not None:
            return [ctx.call(R.reshape_to, ctx.required(0), dims)]
    arg = R.as_ints(shape.tensor) if isinstance(shape, Const) else shape
    return [ctx.call(R.reshape, ctx.required(0), arg, int(ctx.attr("allowzero", 0)))]


@register("Transpose")
def transpose(ctx: NodeContext) -> list[Value | None]:
    x = ctx.required(0)
    perm = ctx.ints("perm")
    if perm is None:
        rank = ctx.static_rank(x)
        if rank is None:
            return [ctx.call(R.reverse_dims, x)]
        perm = list(reversed(range(rank)))
    return [ctx.call(torch.permute, x, perm)]


def _axes_op(fn: Callable[..., Any], since: int) -> Callable[[NodeContext], list[Value | None]]:
    def convert(ctx: NodeContext) -> list[Value | None]:
        x = ctx.required(0)
        if ctx.version < since:
            return [ctx.call(fn, x, ctx.ints("axes"))]
        axes = ctx.input(1)
        arg = R.as_ints(axes.tensor) if isinstance(axes, Const) else axes
        return [ctx.call(fn, x, arg)]

    return convert


register("Squeeze")(_axes_op(R.squeeze, 13))
register("Unsqueeze")(_axes_op(R.unsqueeze, 13))


@register("Expand", since=8)
def expand(ctx: NodeContext) -> list[Value | None]:
    shape = ctx.required(1)
    if not isinstance(shape, Const):
        dims = _inferred_shape(ctx, minus_one=False)
        if dims is not None:
            return [ctx.call(R.expand_to, ctx.required(0), dims)]
    arg = R.as_ints(shape.tensor) if isinstance(shape, Const) else shape
    return [ctx.call(R.expand, ctx.required(0), arg)]


@register("Gather")
def gather(ctx: NodeContext) -> list[Value | None]:
    return [ctx.call(R.gather, ctx.required(0), ctx.required(1), int(ctx.attr("axis", 0)))]


def _cast_target(ctx: NodeContext, to: Any) -> torch.dtype:
    from onnx import TensorProto

    if isinstance(to, str):  # Cast-1 names the type
        try:
            to = TensorProto.DataType.Value(to.upper())
        except ValueError:
            raise ctx.error(f"to={to!r} is no ONNX element type") from None
    code = int(to)
    if code not in ONNX_DTYPES:
        name = TensorProto.DataType.Name(code) if code in TensorProto.DataType.values() else code
        raise ctx.unsupported(f"element type {name} (torch has no exact equivalent)")
    return ONNX_DTYPES[code]


@register("Cast", since=1)
def cast(ctx: NodeContext) -> list[Value | None]:
    if int(ctx.attr("saturate", 1)) != 1:
        raise ctx.unsupported("saturate=0 (float8 casts)")
    dtype = _cast_target(ctx, ctx.attr("to"))
    return [ctx.call(R.cast, ctx.required(0), dtype)]


@register("CastLike", since=15)
def cast_like(ctx: NodeContext) -> list[Value | None]:
    if int(ctx.attr("saturate", 1)) != 1:
        raise ctx.unsupported("saturate=0 (float8 casts)")
    x, like = ctx.required(0), ctx.required(1)
    if isinstance(like, Const):
        return [ctx.call(R.cast, x, like.tensor.dtype)]
    return [ctx.call(R.cast_like, x, like)]


@register("Shape")
def shape(ctx: NodeContext) -> list[Value | None]:
    x = ctx.required(0)
    start = int(ctx.attr("start", 0))
    end = ctx.attr("end")
    end = None if end is None else int(end)
    dims = ctx.static_shape(x)
    if dims is not None and all(d is not None for d in dims):
        return [Const(torch.tensor(list(dims)[start:end], dtype=torch.int64))]
    return [ctx.call(R.shape_of, x, start, end)]


@register("Size")
def size(ctx: NodeContext) -> list[Value | None]:
    x = ctx.required(0)
    dims = ctx.static_shape(x)
    if dims is not None and all(d is not None for d in dims):
        count = 1
        for d in dims:
            count *= int(d or 0)
        return [Const(torch.tensor(count, dtype=torch.int64))]
    return [ctx.call(R.size_of, x)]


@register("Constant")
def constant(ctx: NodeContext) -> list[Value | None]:
    attrs = ctx.attrs
    if "value" in attrs:
        return [Const(tensor_from_proto(attrs["value"]))]
    if "value_float" in attrs:
        return [Const(torch.tensor(float(attrs["value_float"]), dtype=torch.float32))]
    if "value_floats" in attrs:
        return [Const(torch.tensor([float(v) for v in attrs["value_floats"]]))]
    if "value_int" in attrs:
        return [Const(torch.tensor(int(attrs["value_int"]), dtype=torch.int64))]
    if "value_ints" in attrs:
        return [Const(torch.tensor([int(v) for v in attrs["value_ints"]], dtype=torch.int64))]
    raise ctx.unsupported(f"attribute(s) {sorted(attrs)} (strings and sparse tensors)")


@register("ConstantOfShape", since=9)
def constant_of_shape(ctx: NodeContext) -> list[Value | None]:
    value = ctx.attr("value")
    fill = tensor_from_proto(value) if value is not None else torch.zeros(1)
    shape = ctx.required(0)
    if not isinstance(shape, Const):
        dims = _inferred_shape(ctx, minus_one=False)
        if dims is not None:
            return [ctx.call(R.constant_of_sizes, dims, Const(fill))]
    return [ctx.call(R.constant_of_shape, shape, Const(fill))]
