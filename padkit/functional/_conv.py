"""Convolution with every padkit padding form: the entry points, their plans and the
torch executors (a plan, the padding-mode pads)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.overrides import has_torch_function

from .. import _export
from .._finite import all_finite, values_visible
from .._sym import statically_known_true
from ..native import _dispatch as _backend
from ..op import Op
from ..plan import Plan, _as_residual_pad, plan_conv
from ..spec import (
    PaddingError,
    PaddingLike,
)
from . import _taps
from ._common import (
    _PAD_MODE_CANON,
    Pairs,
    _check_fits,
    _check_input,
    _check_spatial,
    _compiling,
    _symbolic,
    _torch_pad,
    resolve,
)
from ._pad import _apply_pad

# ----------------------------------------------------------------------------- convolution


def _conv(
    fname: str,
    nd: int,
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    stride: Any,
    padding: PaddingLike,
    dilation: Any,
    groups: int,
    padding_mode: str | Sequence[str] = "zeros",
) -> Tensor:
    x, unbatched = _check_input(fname, input, nd)
    if len(weight.shape) != nd + 2:  # shape: a method ExpandedWeights accepts
        raise PaddingError(
            f"{fname}(): weight must be {nd + 2}-D (out_channels, in_channels/groups, *kernel), "
            f"got shape {tuple(weight.shape)}"
        )
    rec = Op.make(
        "conv",
        nd,
        _export.static_shape(weight)[2:],
        stride,
        padding,
        dilation,
        groups=groups,
        padding_mode=padding_mode,
        where=f"{fname}()",
    )
    if _export.exporting():
        out = _export.conv(
            fname,
            rec,
            x,
            weight,
            bias,
            lambda xx, ww, bb: _conv(
                fname,
                nd,
                xx,
                _export.weight_of(ww),
                bb,
                stride,
                padding,
                dilation,
                groups,
                padding_mode,
            ),
        )
        return out.squeeze(0) if unbatched else out
    if x.shape[1] != weight.shape[1] * groups:
        raise PaddingError(
            f"{fname}(): input has {x.shape[1]} channels but weight {tuple(weight.shape)} with "
            f"groups={groups} expects {weight.shape[1] * groups}"
        )
    sizes = _check_spatial(fname, x, nd)
    pairs = resolve(rec.padding, rec.kernel, rec.stride, rec.dilation, sizes)
    _check_fits(fname, sizes, pairs, rec.k_eff)
    out = _conv_pairs(
        nd,
        x,
        weight,
        bias,
        rec.stride,
        pairs,
        rec.dilation,
        groups,
        rec.padding_mode,
        fname,
        sized=rec.padding.needs_input_size(rec.stride),
    )
    return out.squeeze(0) if unbatched else out


_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def _conv_pairs(
    nd: int,
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    s: tuple[int, ...],
    pairs: Pairs,
    d: tuple[int, ...],
    groups: int,
    padding_mode: str | tuple[str, ...],
    fname: str,
    *,
    sized: bool = False,
) -> Tensor:
    """Run a conv with resolved per-side pads on a batched input (``sized``: the pads
    depend on the input size).

    Axes with a non-zero mode are padded first, one at a time in axis order; zero pads
    then go to the conv (symmetric part) and one ``F.pad`` (the rest). Zero-padded axes
    commute with every mode, so the order is only visible between two non-zero modes.
    """
    conv = _CONV[nd]
    steps, zero_pairs = mode_pads(pairs, padding_mode)
    x = pad_steps(x, steps, fname)
    if zero_pairs is None:
        return conv(x, weight, bias, s, 0, d, groups)
    sizes = _export.static_shape(x)[2:]  # ints under torch.jit.trace (fvcore traces)
    plan = plan_conv(
        zero_pairs,
        tuple(int(v) for v in weight.shape[2:]),
        s,
        d,
        sizes,
        groups=groups,
        in_channels=int(x.shape[1]),
        cache=not _compiling(),
        symbolic=_symbolic(sizes, s, sized),
    )
    return run_conv_plan(plan, conv, x, weight, bias, s, d, groups)


def mode_pads(
    pairs: Pairs, padding_mode: str | tuple[str, ...]
) -> tuple[tuple[tuple[Pairs, str], ...], Pairs | None]:
    """A conv's pads split by padding mode: the ``F.pad`` steps ``(pairs, mode)`` applied to
    the input first (every axis at once for one non-zero mode, else one axis at a time in
    axis order), and the zero pads left for the conv's plan (None: none, the conv runs
    with padding 0)."""
    nd = len(pairs)
    modes = (padding_mode,) * nd if isinstance(padding_mode, str) else padding_mode
    if all(m == "zeros" for m in modes):
        return (), tuple(pairs)
    if len(set(modes)) == 1:
        return ((tuple(pairs), _PAD_MODE_CANON[modes[0]]),), None
    steps: list[tuple[Pairs, str]] = []
    zero_pairs = list(pairs)
    for i, m in enumerate(modes):
        if m != "zeros" and pairs[i] != (0, 0):
            one: Pairs = tuple(pairs[i] if j == i else (0, 0) for j in range(nd))
            steps.append((one, _PAD_MODE_CANON[m]))
            zero_pairs[i] = (0, 0)
    return tuple(steps), tuple(zero_pairs)


def pad_steps(x: Tensor, steps: tuple[tuple[Pairs, str], ...], fname: str) -> Tensor:
    """The :func:`mode_pads` steps on ``x``."""
    for step_pairs, mode in steps:
        x = _apply_pad(x, step_pairs, mode, 0.0, fname)
    return x


def run_conv_plan(
    plan: Plan,
    conv: Any,
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    s: tuple[int, ...],
    d: tuple[int, ...],
    groups: int,
) -> Tensor:
    """Execute a zero-padding conv :class:`~padkit.plan.Plan` on a batched input."""
    hook = _backend.active
    if hook is not None and plan.strategy != "native":

        def torch_plan(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
            return run_conv_torch(plan, conv, x, w, b, s, d, groups)

        res: Tensor | None = hook.conv(
            plan.strategy, x, weight, bias, s, d, plan.pads, groups, torch_plan
        )
        if res is not None:
            return res
    return run_conv_torch(plan, conv, x, weight, bias, s, d, groups)


def run_conv_torch(
    plan: Plan,
    conv: Any,
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    s: tuple[int, ...],
    d: tuple[int, ...],
    groups: int,
    *,
    taps: bool = True,
) -> Tensor:
    """A conv plan on torch's kernels (never the optional oneDNN backend).

    A 1-d, stride-1, ungrouped conv with per-side pads runs as one GEMM per kernel tap
    (``_taps``) until its class is timed, then where that was timed faster than the plan
    (inference; ``taps=False``: the plan, which the timing runs).

    A plan that would multiply an element outside an output's window (a ``zero_extend``
    kernel's zero taps; a ``crop``'s dropped windows, whose zero gradients meet the input
    in the weight's gradient) is kept only where its output before the crop is finite
    (:func:`all_finite`), which proves no tap met a NaN or an infinity (``0 * inf`` is NaN,
    where the ``F.pad`` reference has nothing); otherwise the call runs as ``residual_pad``.
    Where the values cannot be looked at (:func:`values_visible`), it runs so up front.
    """
    if taps and plan.strategy != "native" and _taps.eligible(x, weight, bias, s, groups):
        got = _taps.taps_if_faster(
            x,
            weight,
            bias,
            plan.pads,
            d[0],
            lambda: run_conv_torch(plan, conv, x, weight, bias, s, d, groups, taps=False),
        )
        if got is not None:
            return got
    plan = torch_conv_plan(
        plan,
        exporting=torch.compiler.is_exporting(),
        compiling=torch.compiler.is_compiling(),
        grad=plan.strategy == "zero_extend"
        and (_needs_grad(x, weight, bias) or has_torch_function((weight,))),
    )
    risky = plan.strategy == "zero_extend" or (
        plan.strategy == "crop" and (_needs_grad(weight) or has_torch_function((weight,)))
    )
    if risky and not values_visible(x):
        plan, risky = _as_residual_pad(plan), False
    w = weight
    if plan.strategy == "zero_extend":
        w = F.pad(weight, _torch_pad(plan.kernel_ext))
    elif plan.strategy in ("residual_pad", "explicit"):
        x = F.pad(x, _torch_pad(plan.pre_pad))
    out: Tensor = conv(x, w, bias, s, plan.native_padding, d, groups)
    if risky and not all_finite(out):
        # a tap met a NaN or an infinity: the exact form (rare; the check costs one sum)
        return run_conv_torch(_as_residual_pad(plan), conv, x, weight, bias, s, d, groups)
    if plan.strategy == "crop":
        out = _narrow_out(out, plan)
    return out


def torch_conv_plan(plan: Plan, *, exporting: bool, compiling: bool, grad: bool) -> Plan:
    """The plan that runs on torch's kernels in place of ``plan``: ``grad`` says that the
    weight takes part in autograd (or has ``__torch_function__``)."""
    if plan.strategy in ("zero_extend", "crop") and exporting:
        # torch.export: F.pad + the conv with the symmetric part, the form graph quantizers
        # (PT2E) and delegates recognise (a crop's surplus outputs would be observed)
        return _as_residual_pad(plan)
    if plan.strategy == "crop" and compiling:
        # torch.compile: one F.pad, which inductor writes from the kernel that produces the
        # input (or as one cheap copy), costs less than the crop's surplus outputs
        return _as_residual_pad(plan)
    if plan.strategy == "zero_extend" and grad:
        # training: the backward of a kernel grown by zero taps (torch's depthwise kernels,
        # channels-last most of all) costs more than one padded copy of the input; a weight
        # with __torch_function__ (torch's ExpandedWeights) cannot be padded
        return _as_residual_pad(plan)
    if plan.strategy == "zero_extend" and compiling:
        # a trace cannot ask whether the input is finite (all_finite): the zero taps would
        # turn an infinity outside a window into NaN, the padded copy never does
        return _as_residual_pad(plan)
    return plan


def _needs_grad(*ts: Tensor | None) -> bool:
    return torch.is_grad_enabled() and any(t is not None and _requires_grad(t) for t in ts)


def _requires_grad(t: Tensor) -> bool:
    """``t.requires_grad``, also for a weight that refuses the attribute under
    ``__torch_function__`` (torch's ExpandedWeights, used for per-sample gradients)."""
    try:
        return t.requires_grad
    except RuntimeError:
        with torch._C.DisableTorchFunctionSubclass():
            return bool(t.requires_grad)


def _narrow_out(out: Tensor, plan: Plan) -> Tensor:
    for i, (start, size) in enumerate(zip(plan.skip, plan.out_size)):
        # (a symbolic size is compared only where that needs no guard)
        if start or not statically_known_true(out.shape[2 + i] == size):
            out = out.narrow(2 + i, start, size)
    return out


def conv1d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: PaddingLike = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
    padding_mode: str | Sequence[str] = "zeros",
) -> Tensor:
    """``F.conv1d`` with every padkit padding form and ``padding_mode``.

    Example:
        >>> x = torch.arange(1.0, 9.0).view(1, 1, 8)
        >>> conv1d(x, torch.ones(1, 1, 3), stride=2, padding="same")   # TF SAME: pads (0, 1)
        tensor([[[ 6., 12., 18., 15.]]])
    """
    return _conv("conv1d", 1, input, weight, bias, stride, padding, dilation, groups, padding_mode)


def conv2d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: PaddingLike = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
    padding_mode: str | Sequence[str] = "zeros",
) -> Tensor:
    """``F.conv2d`` with every padkit padding form and ``padding_mode``.

    Example:
        >>> x = torch.ones(1, 1, 4, 4)
        >>> conv2d(x, torch.ones(1, 1, 2, 2), padding=((1, 0), (0, 1))).shape
        torch.Size([1, 1, 4, 4])
    """
    return _conv("conv2d", 2, input, weight, bias, stride, padding, dilation, groups, padding_mode)


def conv3d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: PaddingLike = 0,
    dilation: int | Sequence[int] = 1,
    groups: int = 1,
    padding_mode: str | Sequence[str] = "zeros",
) -> Tensor:
    """``F.conv3d`` with every padkit padding form and ``padding_mode``.

    Example:
        >>> x = torch.ones(1, 1, 5, 4, 4)
        >>> conv3d(x, torch.ones(1, 1, 3, 3, 3), padding=("causal", "same", "same")).shape
        torch.Size([1, 1, 5, 4, 4])
    """
    return _conv("conv3d", 3, input, weight, bias, stride, padding, dilation, groups, padding_mode)
