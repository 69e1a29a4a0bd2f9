"""Converters for conv, pooling, Pad, normalization and resizing nodes."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from .. import nn as pnn
from ..spec import Padding, PaddingError
from . import _runtime as R
from ._graph import Const, NodeContext, Value
from ._registry import register

__all__: list[str] = []

_AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def _auto_pad(ctx: NodeContext) -> str:
    mode = str(ctx.attr("auto_pad", "NOTSET")).upper()
    if mode not in _AUTO_PADS:
        raise ctx.error(f"auto_pad must be one of {_AUTO_PADS}, got {ctx.attr('auto_pad')!r}")
    return mode


def _padding(ctx: NodeContext, nd: int) -> Padding:
    """The node's ``pads`` / ``auto_pad`` as a padkit spec."""
    pads = ctx.ints("pads")
    try:
        return Padding.from_onnx(pads=pads, auto_pad=_auto_pad(ctx), ndim=nd)
    except (PaddingError, TypeError) as err:
        raise ctx.error(str(err)) from None


def _per_axis(ctx: NodeContext, name: str, nd: int, default: int = 1) -> tuple[int, ...]:
    values = ctx.ints(name)
    if values is None or len(values) == 0:
        return (default,) * nd
    if len(values) != nd:
        raise ctx.error(f"{name}={values} must have {nd} value(s), one per spatial axis")
    return tuple(values)


def _spatial_rank(ctx: NodeContext, weight: Value | None) -> int:
    kernel = ctx.ints("kernel_shape")
    if kernel:
        return len(kernel)
    rank = ctx.static_rank(weight) if weight is not None else None
    if rank is None:
        rank = ctx.static_rank(ctx.input(0))
    if rank is None:
        raise ctx.unsupported("cannot tell the number of spatial axes (no kernel_shape, no shape)")
    return rank - 2


def _check_nd(ctx: NodeContext, nd: int) -> None:
    if nd not in (1, 2, 3):
        raise ctx.unsupported(f"{nd} spatial axes (padkit layers cover 1, 2 and 3)")


def _check_conv(
    ctx: NodeContext, x: Value, w: Value, b: Value | None, nd: int, transposed: bool
) -> int:
    """Check ``group``, strides, dilations, ``kernel_shape`` and the bias against the weight
    (where it is known at import time); returns ``group``."""
    group = ctx.attr("group", 1)
    if not isinstance(group, int) or group < 1:
        raise ctx.error(f"attribute group={group!r} must be an int >= 1")
    for name in ("strides", "dilations"):
        values = ctx.ints(name) or []
        if any(v < 1 for v in values):
            raise ctx.error(f"attribute {name}={values}: each must be >= 1")
    if not isinstance(w, Const):
        return group
    weight = w.tensor
    shape = [int(v) for v in weight.shape]
    if not weight.dtype.is_floating_point:
        dtype = str(weight.dtype).replace("torch.", "")
        raise ctx.error(
            f"input 1 (W) is {dtype}; {ctx.op_type} takes float16, bfloat16, float32 or "
            "float64 weights"
        )
    if len(shape) != nd + 2:
        raise ctx.error(
            f"input 1 (W) has shape {shape}: a {nd}-d {ctx.op_type} needs a {nd + 2}-d weight"
        )
    kernel = ctx.ints("kernel_shape")
    if kernel and list(kernel) != shape[2:]:
        raise ctx.error(
            f"attribute kernel_shape={list(kernel)} disagrees with input 1 (W) of shape "
            f"{shape}, whose kernel is {shape[2:]}"
        )
    if shape[0] % group:
        raise ctx.error(
            f"input 1 (W) has {shape[0]} {'input' if transposed else 'output'} channel(s), "
            f"not a multiple of group={group}"
        )
    in_ch = shape[0] if transposed else shape[1] * group
    out_ch = shape[1] * group if transposed else shape[0]
    x_shape = ctx.static_shape(x)
    known = x_shape is not None and len(x_shape) >= 2 and x_shape[1] is not None
    if known and x_shape is not None and (len(x_shape) != nd + 2 or x_shape[1] != in_ch):
        raise ctx.error(
            f"input 0 (X) has shape {list(x_shape)}, but input 1 (W) of shape {shape} "
            f"with group={group} takes {nd + 2}-d input with {in_ch} channel(s)"
        )
    if isinstance(b, Const):
        bias = [int(v) for v in b.tensor.shape]
        if bias != [out_ch]:
            raise ctx.error(
                f"input 2 (B) has shape {bias}, but the {ctx.op_type} makes {out_ch} output "
                f"channel(s) (W {shape}, group={group}): B must have shape [{out_ch}]"
            )
        if b.tensor.dtype != weight.dtype:
            raise ctx.error(
                f"input 2 (B) is {b.tensor.dtype}, input 1 (W) {weight.dtype}: they must agree"
            )
    return group


def _param(t: torch.Tensor) -> nn.Parameter:
    return nn.Parameter(t.detach(), requires_grad=t.dtype.is_floating_point)


# ----------------------------------------------------------------------------- Conv


_CONV: dict[int, Any] = {1: pnn.Conv1d, 2: pnn.Conv2d, 3: pnn.Conv3d}
_CONV_T: dict[int, Any] = {1: pnn.ConvTranspose1d, 2: pnn.ConvTranspose2d, 3: pnn.ConvTranspose3d}


@register("Conv")
def conv(ctx: NodeContext) -> list[Value | None]:
    x, w, b = ctx.required(0), ctx.required(1), ctx.input(2)
    nd = _spatial_rank(ctx, w)
    _check_nd(ctx, nd)
    padding = _padding(ctx, nd)
    groups = _check_conv(ctx, x, w, b, nd, transposed=False)
    stride = _per_axis(ctx, "strides", nd)
    dilation = _per_axis(ctx, "dilations", nd)
    if isinstance(w, Const) and (b is None or isinstance(b, Const)):
        weight = w.tensor
        kernel = tuple(int(v) for v in weight.shape[2:])
        layer = _CONV[nd](
            int(weight.shape[1]) * groups,
            int(weight.shape[0]),
            kernel,
            stride,
            padding,
            dilation,
            groups,
            bias=b is not None,
            device="meta",
            dtype=weight.dtype,
        )
        layer.weight = _param(weight)
        if isinstance(b, Const):
            layer.bias = _param(b.tensor)
        return [ctx.module(layer, x)]
    dyn = R.DynamicConv(nd, stride, padding, dilation, groups)
    args = (x, w) if b is None else (x, w, b)
    return [ctx.module(dyn, *args)]


def _transpose_pads(
    ctx: NodeContext, nd: int, output_padding: tuple[int, ...]
) -> tuple[tuple[tuple[int, int], ...], tuple[int, ...]]:
    """A ConvTranspose's explicit ``pads`` as crops, and its output padding.

    tf2onnx writes a negative end pad where TensorFlow's output runs past the full
    transposed conv (Keras ``Conv*DTranspose`` with ``"valid"`` and a kernel smaller than
    the stride, or with ``output_padding``): the output formula
    ``(n-1)*s + k_eff + output_padding - begin - end`` then extends the end with zeros
    (plus the bias), which is what TensorFlow computes; padkit adds it to the output
    padding. (onnxruntime refuses negative pads.) A negative begin pad is refused.
    """
    pads = ctx.ints("pads")
    if not pads:
        return ((0, 0),) * nd, output_padding
    if len(pads) != 2 * nd:
        raise ctx.error(f"pads={pads} must have {2 * nd} values (all begins, then all ends)")
    begins, ends = [int(v) for v in pads[:nd]], [int(v) for v in pads[nd:]]
    if min(begins) < 0:
        raise ctx.unsupported(
            f"pads={pads}: a negative begin pad would extend the output before its first "
            "element, which no transposed conv computes"
        )
    ops = tuple(op + max(-end, 0) for op, end in zip(output_padding, ends))
    return tuple(zip(begins, (max(end, 0) for end in ends))), ops


@register("ConvTranspose")
def conv_transpose(ctx: NodeContext) -> list[Value | None]:
    x, w, b = ctx.required(0), ctx.required(1), ctx.input(2)
    nd = _spatial_rank(ctx, w)
    _check_nd(ctx, nd)
    auto_pad = _auto_pad(ctx)
    groups = _check_conv(ctx, x, w, b, nd, transposed=True)
    stride = _per_axis(ctx, "strides", nd)
    dilation = _per_axis(ctx, "dilations", nd)
    output_padding = _per_axis(ctx, "output_padding", nd, default=0)
    output_shape = ctx.ints("output_shape")
    if output_shape is not None and len(output_shape) == 0:
        output_shape = None
    if output_shape is not None:
        if len(output_shape) == nd + 2:
            output_shape = output_shape[2:]
        if len(output_shape) != nd:
            raise ctx.error(f"output_shape={output_shape} must have {nd} value(s)")
    pairs: tuple[tuple[int, int], ...] = ((0, 0),) * nd
    if auto_pad == "NOTSET" and output_shape is None:
        pairs, output_padding = _transpose_pads(ctx, nd, output_padding)
    kernel = ctx.ints("kernel_shape")
    if isinstance(w, Const):
        kernel = [int(v) for v in w.tensor.shape[2:]]
    x_shape = ctx.static_shape(x)
    sizes = None if x_shape is None else x_shape[2:]
    static = kernel is not None and (
        output_shape is None or (sizes is not None and all(v is not None for v in sizes))
    )
    if (
        kernel is not None
        and static
        and isinstance(w, Const)
        and (b is None or isinstance(b, Const))
    ):
        n = [int(v) if v is not None else 1 for v in (sizes or [1] * nd)]
        crops, op = R.transpose_pads(
            n, kernel, stride, dilation, output_padding, pairs, auto_pad, output_shape
        )
        weight = w.tensor
        try:
            layer = _CONV_T[nd](
                int(weight.shape[0]),
                int(weight.shape[1]) * groups,
                tuple(kernel),
                stride,
                crops,
                op,
                groups,
                bias=b is not None,
                dilation=dilation,
                device="meta",
                dtype=weight.dtype,
            )
        except PaddingError as err:
            raise ctx.error(str(err)) from None
        layer.weight = _param(weight)
        if isinstance(b, Const):
            layer.bias = _param(b.tensor)
        return [ctx.module(layer, x)]
    weight_param = w.tensor if isinstance(w, Const) else None
    bias_param = b.tensor if isinstance(b, Const) else None
    dyn = R.DynamicConvTranspose(
        nd,
        stride,
        dilation,
        groups,
        output_padding,
        pairs,
        auto_pad,
        output_shape,
        weight_param,
        bias_param,
    )
    args: list[Any] = [x]
    if weight_param is None:
        args.append(w)
    if b is not None and bias_param is None:
        args += [None] * (2 - len(args)) + [b]
    return [ctx.module(dyn, *args)]


# ----------------------------------------------------------------------------- pooling

_MAX: dict[int, Any] = {1: pnn.MaxPool1d, 2: pnn.MaxPool2d, 3: pnn.MaxPool3d}
_AVG: dict[int, Any] = {1: pnn.AvgPool1d, 2: pnn.AvgPool2d, 3: pnn.AvgPool3d}
_LP: dict[int, Any] = {1: pnn.LPPool1d, 2: pnn.LPPool2d, 3: pnn.LPPool3d}


def _pool_common(
    ctx: NodeContext,
) -> tuple[int, tuple[int, ...], tuple[int, ...], Padding, tuple[int, ...], bool]:
    kernel = ctx.ints("kernel_shape")
    if not kernel:
        raise ctx.error("kernel_shape is required")
    nd = len(kernel)
    _check_nd(ctx, nd)
    stride = _per_axis(ctx, "strides", nd)
    dilation = _per_axis(ctx, "dilations", nd)
    ceil = bool(ctx.attr("ceil_mode", 0))
    return nd, tuple(kernel), stride, _padding(ctx, nd), dilation, ceil


@register("MaxPool")
def max_pool(ctx: NodeContext) -> list[Value | None]:
    nd, k, s, padding, d, ceil = _pool_common(ctx)
    indices = ctx.output_used(1)
    x = ctx.required(0)
    try:  # a constant Pad before it folds into its pads after the build (_fold.fold_pads)
        layer = _MAX[nd](k, s, padding, d, return_indices=indices, ceil_mode=ceil)
    except PaddingError as err:
        raise ctx.error(str(err)) from None
    if not indices:
        return [ctx.module(layer, x)]
    wrapped = R.MaxPoolIndices(layer, int(ctx.attr("storage_order", 0)))
    y, idx = ctx.module(wrapped, x, n_out=2)
    return [y, idx]


@register("AveragePool")
def average_pool(ctx: NodeContext) -> list[Value | None]:
    nd, k, s, padding, d, ceil = _pool_common(ctx)
    include = bool(ctx.attr("count_include_pad", 0))
    try:
        layer = _AVG[nd](k, s, padding, ceil, include, None, d)
    except PaddingError as err:
        raise ctx.error(str(err)) from None
    return [ctx.module(layer, ctx.required(0))]


@register("LpPool")
def lp_pool(ctx: NodeContext) -> list[Value | None]:
    nd, k, s, padding, d, ceil = _pool_common(ctx)
    p = ctx.attr("p", 2)
    try:
        layer = _LP[nd](float(p), k, s, ceil, padding=padding, dilation=d)
    except PaddingError as err:
        raise ctx.error(str(err)) from None
    return [ctx.module(R.AbsLPPool(layer), ctx.required(0))]


@register("GlobalAveragePool")
def global_average_pool(ctx: NodeContext) -> list[Value | None]:
    return [ctx.call(R.global_pool, ctx.required(0), "mean")]


@register("GlobalMaxPool")
def global_max_pool(ctx: NodeContext) -> list[Value | None]:
    return [ctx.call(R.global_pool, ctx.required(0), "max")]


# ----------------------------------------------------------------------------- Pad

_PAD_MODES = ("constant", "reflect", "edge", "wrap")


@register("Pad", since=2)
def pad(ctx: NodeContext) -> list[Value | None]:
    mode = str(ctx.attr("mode", "constant")).lower()
    if mode not in _PAD_MODES or (mode == "wrap" and ctx.version < 19):
        raise ctx.error(f"mode must be one of {_PAD_MODES} (wrap from opset 19), got {mode!r}")
    x = ctx.required(0)
    if ctx.version < 11:
        pads = ctx.ints("pads", [])
        value = float(ctx.attr("value", 0.0))
        return [ctx.module(R.OnnxPad(mode, pads, None, value), x)]
    pads_v, value_v, axes_v = ctx.required(1), ctx.input(2), ctx.input(3)
    static_pads = R.as_ints(pads_v.tensor) if isinstance(pads_v, Const) else None
    static_value: float | None = None
    if value_v is None:
        static_value = 0.0
    elif isinstance(value_v, Const):
        static_value = float(R.scalar(value_v.tensor)) if value_v.tensor.numel() else 0.0
    static_axes = R.as_ints(axes_v.tensor) if isinstance(axes_v, Const) else None
    module = R.OnnxPad(mode, static_pads, static_axes, static_value)
    args: list[Any] = [x]
    dyn = [
        None if static_pads is not None else pads_v,
        None if static_value is not None else value_v,
        None if (axes_v is None or static_axes is not None) else axes_v,
    ]
    while dyn and dyn[-1] is None:
        dyn.pop()
    args += dyn
    return [ctx.module(module, *args)]


# ----------------------------------------------------------------------------- normalization


class _BatchNorm(nn.modules.batchnorm._BatchNorm):
    """Inference batch norm over any input rank >= 2 (shape unknown at import time)."""

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise PaddingError(f"BatchNormalization: expected >= 2-D input, got {input.dim()}-D")


_BN = {2: nn.BatchNorm1d, 3: nn.BatchNorm1d, 4: nn.BatchNorm2d, 5: nn.BatchNorm3d}


@register("BatchNormalization", since=1)
def batch_norm(ctx: NodeContext) -> list[Value | None]:
    if ctx.version < 7 and not int(ctx.attr("is_test", 0)):
        raise ctx.unsupported("is_test=0 (training mode; the importer builds inference graphs)")
    if ctx.version < 9 and int(ctx.attr("spatial", 1)) != 1:
        raise ctx.unsupported("spatial=0 (per-activation statistics)")
    if int(ctx.attr("training_mode", 0)):
        raise ctx.unsupported("training_mode=1 (the importer builds inference graphs)")
    if any(ctx.output_used(i) for i in range(1, 5)):
        raise ctx.unsupported("the training outputs (running / saved mean and variance)")
    x = ctx.required(0)
    params = [ctx.required(i) for i in range(1, 5)]
    eps = float(ctx.attr("epsilon", 1e-5))
    momentum = float(ctx.attr("momentum", 0.9))
    if all(isinstance(p, Const) for p in params):
        scale, bias, mean, var = (p.tensor for p in params if isinstance(p, Const))
        rank = ctx.static_rank(x)
        cls = _BN.get(rank, _BatchNorm) if rank is not None else _BatchNorm
        layer = cls(int(scale.numel()), eps, 1.0 - momentum, device="meta", dtype=scale.dtype)
        layer.weight = _param(scale)
        layer.bias = _param(bias)
        layer.running_mean = mean.detach()
        layer.running_var = var.detach()
        layer.num_batches_tracked = torch.tensor(0, dtype=torch.long)
        return [ctx.module(layer, x)]
    return [ctx.call(R.batch_norm, x, *params, eps)]


@register("InstanceNormalization")
def instance_norm(ctx: NodeContext) -> list[Value | None]:
    eps = float(ctx.attr("epsilon", 1e-5))
    return [ctx.call(R.instance_norm, ctx.required(0), ctx.required(1), ctx.required(2), eps)]


@register("LRN")
def lrn(ctx: NodeContext) -> list[Value | None]:
    layer = R.LocalResponseNorm(
        int(ctx.attr("size")),
        float(ctx.attr("alpha", 1e-4)),
        float(ctx.attr("beta", 0.75)),
        float(ctx.attr("bias", 1.0)),
    )
    return [ctx.module(layer, ctx.required(0))]


@register("Dropout")
def dropout(ctx: NodeContext) -> list[Value | None]:
    x = ctx.required(0)
    if ctx.version < 7 and not int(ctx.attr("is_test", 0)):
        raise ctx.unsupported("is_test=0 (training mode; the importer builds inference graphs)")
    if ctx.version >= 12 and ctx.input(2) is not None:
        training = ctx.const(2, "training_mode")
        if training is not None and bool(training.reshape(-1)[0]):
            raise ctx.unsupported("training_mode=True (the importer builds inference graphs)")
    outs: list[Value | None] = [x]
    if ctx.output_used(1):
        outs.append(ctx.call(R.ones_mask, x))
    return outs


# ----------------------------------------------------------------------------- Resize


def _floats(t: torch.Tensor | None) -> list[float] | None:
    if t is None or t.numel() == 0:
        return None
    return [float(v) for v in t.reshape(-1).tolist()]


def _scales(ctx: NodeContext, values: list[float] | None, what: str) -> list[float] | None:
    """``values`` after checking each scale is finite and > 0."""
    bad = [v for v in values or [] if not math.isfinite(v) or v <= 0]
    if bad:
        raise ctx.error(f"{what} {values}: each scale must be finite and > 0, got {bad[0]}")
    return values


def _sizes(ctx: NodeContext, values: list[float] | None, what: str) -> list[float] | None:
    bad = [v for v in values or [] if v < 0]
    if bad:
        raise ctx.error(f"{what} {values}: each size must be >= 0, got {bad[0]}")
    return values


@register("Upsample", since=7)
def upsample(ctx: NodeContext) -> list[Value | None]:
    mode = str(ctx.attr("mode", "nearest")).lower()
    if mode == "bilinear":
        mode = "linear"
    if mode not in ("nearest", "linear"):
        raise ctx.unsupported(f"mode {mode!r} (nearest and linear are supported)")
    x = ctx.required(0)
    if ctx.version < 9:
        scales = [float(v) for v in ctx.attr("scales", [])]
        _scales(ctx, scales, "attribute scales")
        layer = R.Resize(mode, "asymmetric", "simple", scales=scales)
        return [ctx.module(layer, x)]
    sc = ctx.required(1)
    if isinstance(sc, Const):
        scales_in = _scales(ctx, _floats(sc.tensor), "input 1 (scales)")
        layer = R.Resize(mode, "asymmetric", "simple", scales=scales_in)
        return [ctx.module(layer, x)]
    return [ctx.module(R.Resize(mode, "asymmetric", "simple"), x, sc)]


@register("Resize", since=10)
def resize(ctx: NodeContext) -> list[Value | None]:
    mode = str(ctx.attr("mode", "nearest")).lower()
    if mode not in ("nearest", "linear", "cubic"):
        raise ctx.unsupported(f"mode {mode!r}")
    x = ctx.required(0)
    if ctx.version < 11:
        sc = ctx.required(1)
        layer = R.Resize(mode, "asymmetric", "simple")
        if isinstance(sc, Const):
            layer.scales = tuple(_scales(ctx, _floats(sc.tensor), "input 1 (scales)") or ())
            return [ctx.module(layer, x)]
        return [ctx.module(layer, x, sc)]
    if int(ctx.attr("antialias", 0)):
        raise ctx.unsupported("antialias=1")
    policy = str(ctx.attr("keep_aspect_ratio_policy", "stretch"))
    if policy != "stretch":
        raise ctx.unsupported(f"keep_aspect_ratio_policy={policy!r} (only 'stretch')")
    coord = str(ctx.attr("coordinate_transformation_mode", "half_pixel"))
    if coord not in R._COORD_MODES:
        raise ctx.unsupported(f"coordinate_transformation_mode={coord!r}")
    nearest = str(ctx.attr("nearest_mode", "round_prefer_floor"))
    if nearest not in R._NEAREST_MODES:
        raise ctx.unsupported(f"nearest_mode={nearest!r}")
    layer = R.Resize(
        mode,
        coord,
        nearest,
        float(ctx.attr("cubic_coeff_a", -0.75)),
        int(ctx.attr("exclude_outside", 0)),
        float(ctx.attr("extrapolation_value", 0.0)),
        ctx.ints("axes"),
    )
    dyn: list[Any] = [None, None, None]
    for slot, i, attr in ((0, 2, "scales"), (1, 3, "sizes"), (2, 1, "roi")):
        value = ctx.input(i)
        if value is None:
            continue
        if isinstance(value, Const):
            data = _floats(value.tensor)
            if attr == "scales":
                data = _scales(ctx, data, "input 2 (scales)")
            elif attr == "sizes":
                data = _sizes(ctx, data, "input 3 (sizes)")
            if data is not None:
                setattr(
                    layer, attr, tuple(int(v) for v in data) if attr == "sizes" else tuple(data)
                )
        else:
            dyn[slot] = value
    while dyn and dyn[-1] is None:
        dyn.pop()
    return [ctx.module(layer, x, *dyn)]
