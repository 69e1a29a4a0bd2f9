"""Transposed convolution with every padkit padding form: crops, output padding and layout."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import _export
from ..native import _dispatch as _backend, _tune
from ..op import Op
from ..spec import (
    TRANSPOSE_RULES,
    Padding,
    PaddingError,
    PaddingLike,
    _tuple_of,
    conv_transpose_output_size,
    conv_transpose_padding,
)
from ._common import Pairs, _check_input, _check_spatial, _parse, _torch_pad
from ._conv import _CONV_T, _needs_grad

# ----------------------------------------------------------------------------- transposed


def transpose_crops(
    spec: Padding,
    k: tuple[int, ...],
    s: tuple[int, ...],
    d: tuple[int, ...],
    n: Sequence[int],
) -> Pairs:
    """What a transposed conv crops from its full output ``(n-1)*s + k_eff``, per side.

    Explicit pairs crop as given (torch's ``padding=p`` crops ``(p, p)``). ``"same"`` and
    ``"same_lower"`` crop ``k_eff - s`` (TF ``Conv2DTranspose``; ONNX ``SAME_UPPER`` /
    ``SAME_LOWER``) so that the output is ``n*s``: the odd pixel is cropped at the end
    (resp. start), and a negative total (``k_eff < s``) extends the end. ``"causal"`` and
    ``"causal_block"`` crop ``k_eff - s`` at the end only, so that the output is ``n*s``
    and output ``j`` reads inputs up to ``j // s``, never a later one. Every other rule
    crops what it would pad in the forward conv, so the layer is that conv's adjoint.
    """
    out: list[tuple[int, int]] = []
    for i, rule in enumerate(spec.axes):
        ke = d[i] * (k[i] - 1) + 1
        if rule in ("causal", "causal_block"):
            # the full output's start reads no future input; crop (or extend) the end only
            out.append((0, ke - s[i]))
        elif rule in ("same", "same_lower"):
            total = ke - s[i]
            if total < 0:
                out.append((0, total))
            elif rule == "same":
                out.append((total // 2, total - total // 2))
            else:
                out.append((total - total // 2, total // 2))
        elif isinstance(rule, tuple) and not spec.ceil_mode:
            out.append(rule)
        else:
            one = Padding((rule,), ceil_mode=spec.ceil_mode)
            out.append(one.resolve(k[i], s[i], d[i], n[i] * s[i])[0])
    return tuple(out)


def transpose_args(
    where: str,
    nd: int,
    padding: PaddingLike,
    output_padding: Any,
    k: Sequence[int],
    s: Any,
    d: Any,
) -> tuple[PaddingLike, Any]:
    """A transposed conv's ``padding`` and ``output_padding`` in padkit's (torch's) meaning.

    A framework-named rule (:data:`padkit.TRANSPOSE_RULES`: ``"keras_same"``, ...) becomes
    explicit crops and an output padding, with that framework's meaning of
    ``output_padding`` (``None``: not given). Otherwise ``None`` is 0, and ``"same"`` or
    ``"same_lower"`` with a nonzero output padding is refused: Keras and ONNX give it
    different output lengths, so the caller must name one.
    """
    if isinstance(padding, str) and padding.lower() in TRANSPOSE_RULES:
        with warnings.catch_warnings():
            # a traced weight shape: the kernel size is a constant of the trace anyway
            warnings.simplefilter("ignore")
            kernel = tuple(int(v) for v in k)
        try:
            return conv_transpose_padding(padding, kernel, s, d, output_padding, ndim=nd)
        except (PaddingError, TypeError) as err:
            raise type(err)(f"{where}: {err}") from None
    if output_padding is None:
        return padding, 0
    if isinstance(padding, int) or (
        isinstance(output_padding, (int, tuple, list))
        and not isinstance(output_padding, bool)
        and not any(
            output_padding if isinstance(output_padding, (tuple, list)) else (output_padding,)
        )
    ):
        return padding, output_padding  # the per-call path of a layer: nothing to check
    spec = padding if isinstance(padding, Padding) else _parse(padding, nd, where.rstrip("()"))
    if not any(rule in ("same", "same_lower") for rule in spec.axes):
        return padding, output_padding
    try:
        op = _tuple_of(output_padding, nd, "output_padding", minimum=0)
    except (PaddingError, TypeError) as err:
        raise type(err)(f"{where}: {err}") from None
    for i, (rule, o) in enumerate(zip(spec.axes, op)):
        if o and rule == "same":
            raise PaddingError(
                f"{where}: padding 'same' with output_padding={output_padding!r} (axis {i}) has "
                "no single meaning: Keras Conv*DTranspose gives (n-1)*stride + k_eff%2 + "
                "output_padding, ONNX ConvTranspose auto_pad=SAME_UPPER gives n*stride. Name "
                "the rule: padding='keras_same' or 'onnx_same_upper' (or give explicit crops "
                "as torch does)"
            )
        if o and rule == "same_lower":
            raise PaddingError(
                f"{where}: padding 'same_lower' with output_padding={output_padding!r} "
                f"(axis {i}) is ambiguous; for ONNX ConvTranspose auto_pad=SAME_LOWER use "
                "padding='onnx_same_lower' (or give explicit crops as torch does)"
            )
    return padding, output_padding


def _conv_transpose(
    fname: str,
    nd: int,
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    stride: Any,
    padding: PaddingLike,
    output_padding: Any,
    groups: int,
    dilation: Any,
    output_size: Sequence[int] | None = None,
) -> Tensor:
    x, unbatched = _check_input(fname, input, nd)
    if len(weight.shape) != nd + 2:  # shape: a method ExpandedWeights accepts
        raise PaddingError(
            f"{fname}(): weight must be {nd + 2}-D (in_channels, out_channels/groups, *kernel), "
            f"got shape {tuple(weight.shape)}"
        )
    padding, output_padding = transpose_args(
        f"{fname}()", nd, padding, output_padding, weight.shape[2:], stride, dilation
    )
    rec = Op.make(
        "conv_transpose",
        nd,
        _export.static_shape(weight)[2:],
        stride,
        padding,
        dilation,
        groups=groups,
        output_padding=output_padding,
        where=f"{fname}()",
    )
    k, s, d, op = rec.kernel, rec.stride, rec.dilation, rec.output_padding
    exporting = _export.exporting()
    if not exporting and x.shape[1] != weight.shape[0]:
        raise PaddingError(
            f"{fname}(): input has {x.shape[1]} channels but weight {tuple(weight.shape)} expects "
            f"{weight.shape[0]}"
        )
    sizes = _export.static_shape(x)[2:] if exporting else _check_spatial(fname, x, nd)
    caffe = rec.padding.ceil_mode and rec.padding.needs_input_size(s)
    if exporting and caffe and not _export.all_static(sizes):
        raise PaddingError(
            f"{fname}(): padding {rec.padding.describe()} depends on the input size, which is "
            "dynamic in this export; export with static sizes"
        )
    crops = transpose_crops(rec.padding, k, s, d, sizes)
    if output_size is not None:
        op = _output_padding_for(fname, output_size, sizes, k, s, d, crops)
    if exporting:
        out = _export.conv_transpose(
            fname,
            rec,
            x,
            weight,
            bias,
            lambda xx, ww, bb: _conv_transpose(
                fname,
                nd,
                xx,
                _export.weight_of(ww),
                bb,
                stride,
                padding,
                output_padding,
                groups,
                dilation,
                output_size,
            ),
            crops,
            op,
        )
        return out.squeeze(0) if unbatched else out
    out = _conv_transpose_crops(nd, x, weight, bias, s, crops, op, d, groups, fname)
    return out.squeeze(0) if unbatched else out


def _output_padding_for(
    fname: str,
    output_size: Sequence[int],
    sizes: Sequence[int],
    k: Sequence[int],
    s: Sequence[int],
    d: Sequence[int],
    crops: Pairs,
) -> tuple[int, ...]:
    want = [int(v) for v in output_size]
    nd = len(sizes)
    if len(want) == nd + 2:
        want = want[2:]
    elif len(want) == nd + 1:
        want = want[1:]
    if len(want) != nd:
        raise PaddingError(f"{fname}(): output_size must have {nd} entries, got {output_size!r}")
    ops = []
    for i in range(nd):
        base = conv_transpose_output_size(sizes[i], k[i], s[i], d[i], *crops[i])
        top = base + max(s[i], d[i]) - 1
        if not base <= want[i] <= top:
            raise PaddingError(
                f"{fname}(): output_size[{i}]={want[i]} is not reachable; valid sizes on that axis "
                f"are {base}..{top}"
            )
        ops.append(want[i] - base)
    return tuple(ops)


def _conv_transpose_crops(
    nd: int,
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    s: tuple[int, ...],
    crops: Pairs,
    op: Sequence[int],
    d: tuple[int, ...],
    groups: int,
    fname: str,
    note: list[bool] | None = None,
    backend: bool = True,
) -> Tensor:
    """Full transposed conv output cropped by ``crops`` (end crop reduced by ``op``).
    ``note`` gets an entry where the backend declined the call by a decision made for its
    signature; ``backend=False`` runs the torch plan without asking it."""
    sizes = tuple(x.shape[x.dim() - nd :])
    k = tuple(weight.shape[2:])
    native_p, native_op, slices = transpose_layout(crops, op, k, s, d, sizes, fname)
    pads: Pairs | None = None
    if layout_timing_on() and any(end for _, end in slices):
        sliced = (native_p, native_op, slices)
        shifted = _shifted_if_faster(x, weight, bias, s, d, groups, crops, op, sliced, fname)
        if shifted is not None:
            pads, native_p, native_op, slices = shifted

    def torch_plan(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        return run_transpose(x, weight, bias, s, native_p, native_op, groups, d, slices, pads)

    hook = _backend.active if backend else None
    if hook is not None:
        ends = tuple((lo, hi - o) for (lo, hi), o in zip(crops, op))
        res: Tensor | None = hook.conv_transpose(
            x, weight, bias, s, d, ends, groups, torch_plan, note=note
        )
        if res is not None:
            return res
    return torch_plan(x, weight, bias)


#: which of a sliced and a shifted layout is faster, per signature: measured once per
#: process on the first call (in memory only). The native backend's switch turns the
#: timing off (``PADKIT_NATIVE_TUNE=0``, ``padkit.native.set_tuning(False)``): the slice
_SHIFT = _tune.Tuner()


Shifted = tuple[Pairs, tuple[int, ...], tuple[int, ...], Pairs]

#: per raw call signature (shapes, strides, dtype, arguments, threads): the shifted layout
#: where it was measured faster, else None; what a repeated call looks up
_SHIFTED: dict[tuple[Any, ...], Shifted | None] = {}


def layout_timing_on() -> bool:
    """Whether a transposed conv may time its layouts at all: the native backend's tuning
    switch is on (``PADKIT_NATIVE_TUNE``, ``padkit.native.set_tuning``) and deterministic
    algorithms are off. Eager calls and compiled plans both ask it."""
    return _backend.HOOK.tuner.timing_on()


def _shifted_if_faster(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    s: tuple[int, ...],
    d: tuple[int, ...],
    groups: int,
    crops: Pairs,
    op: Sequence[int],
    sliced: tuple[tuple[int, ...], tuple[int, ...], Pairs],
    fname: str,
) -> Shifted | None:
    """The :func:`shifted_layout` where it runs ``x`` at least 5 % faster than ``sliced``
    (the :func:`transpose_layout`), as timed on the first call of its signature; None
    (the slice, torch's own layout) elsewhere, and always for anything but CPU inference
    on real tensors outside a trace. Asked only where :func:`layout_timing_on`."""
    nd = len(s)
    if (
        type(x) is not Tensor
        or not x.is_cpu
        or x.dim() != nd + 2
        or _needs_grad(x, weight, bias)
        or torch.compiler.is_compiling()
        or torch._C._get_tracing_state() is not None
        or torch._C._functorch.is_functorch_wrapped_tensor(x)
    ):
        return None
    return _timed_shift(x, weight, bias, s, d, groups, crops, op, sliced, fname)


def _timed_shift(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    s: tuple[int, ...],
    d: tuple[int, ...],
    groups: int,
    crops: Pairs,
    op: Sequence[int],
    sliced: tuple[tuple[int, ...], tuple[int, ...], Pairs],
    fname: str,
) -> Shifted | None:
    """The :func:`shifted_layout` where it runs ``x`` (a real CPU tensor) at least 5 %
    faster than ``sliced``, timed without autograd on the first call of its signature and
    looked up afterwards; None (the slice) elsewhere. The callers decide where timing
    applies: :func:`_shifted_if_faster` for eager calls, and the plan of a compiled
    transposed conv (``padkit._compiled``), which times stand-ins of the traced input's
    shape and layout outside the trace (inductor runs the same oneDNN deconvolution)."""
    threads = torch.get_num_threads()
    raw = (x.shape, x.stride(), x.dtype, weight.shape, s, d, groups, crops, tuple(op), threads)
    known: Any = _SHIFTED.get(raw, False)  # (False: not seen yet)
    if known is not False:
        return known  # type: ignore[no-any-return]
    shifted = shifted_layout(crops, op, tuple(weight.shape[2:]), s, d, tuple(x.shape[2:]), fname)
    if shifted is None:  # (the callers ask only where the layout slices an end)
        return None
    # the native backend's signature of this transposed conv, under a name of its own
    ends = tuple((lo, hi - o) for (lo, hi), o in zip(crops, op))
    key = (
        "conv_transpose_shift",
        *_backend._conv_key("conv_transpose", x, weight, s, d, ends, groups, False)[1:],
    )
    faster = _SHIFT.known(key)
    if faster is None and _tune.timing():
        return None  # inside another choice's timing (the backend's): the slice, unrecorded
    if faster is None:
        p1, o1, sl1 = sliced
        pads, p2, o2, sl2 = shifted
        with torch.no_grad():
            faster = _SHIFT.decide(
                key,
                lambda: run_transpose(x, weight, bias, s, p1, o1, groups, d, sl1),
                lambda: run_transpose(x, weight, bias, s, p2, o2, groups, d, sl2, pads),
                contextlib.nullcontext,
            )
    if len(_SHIFTED) >= 4096:
        _SHIFTED.clear()
    _SHIFTED[raw] = shifted if faster else None
    return _SHIFTED[raw]


def transpose_layout(
    crops: Pairs,
    op: Sequence[int],
    k: Sequence[int],
    s: Sequence[int],
    d: Sequence[int],
    sizes: Sequence[int],
    fname: str,
) -> tuple[tuple[int, ...], tuple[int, ...], Pairs]:
    """How torch's transposed conv computes the full output cropped by ``crops`` (end crop
    reduced by ``op``): its symmetric padding and output_padding per axis, and what is
    then sliced off each axis's start and end."""
    native_p: list[int] = []
    native_op: list[int] = []
    slices: list[tuple[int, int]] = []
    for i, (lo, hi) in enumerate(crops):
        end = hi - op[i]  # what to remove at the end; negative extends with zeros (+ bias)
        if lo < 0:
            raise PaddingError(f"{fname}(): a transposed conv cannot crop {lo} at the start")
        k_eff = d[i] * (k[i] - 1) + 1
        length = (sizes[i] - 1) * s[i] + k_eff - lo - end
        if length <= 0:
            raise PaddingError(
                f"{fname}(): the crops {crops[i]} (output_padding {op[i]}) leave no output on "
                f"spatial axis {i}: the full output has {length + lo + end} element(s)"
            )
        if lo == hi and 0 <= op[i] < max(s[i], d[i]):
            # torch's own symmetric padding with output_padding: no crop at all
            native_p.append(lo)
            native_op.append(op[i])
            slices.append((0, 0))
            continue
        p = min(lo, max(end, 0))
        o = p - end if end < p else 0
        if o >= max(s[i], d[i]):
            raise PaddingError(
                f"{fname}(): extending the output by {o} on axis {i} exceeds what a transposed "
                f"conv with stride {s[i]} and dilation {d[i]} can produce"
            )
        native_p.append(p)
        native_op.append(o)
        slices.append((lo - p, max(end - p, 0)))
    return tuple(native_p), tuple(native_op), tuple(slices)


def shifted_layout(
    crops: Pairs,
    op: Sequence[int],
    k: Sequence[int],
    s: Sequence[int],
    d: Sequence[int],
    sizes: Sequence[int],
    fname: str,
) -> tuple[Pairs, tuple[int, ...], tuple[int, ...], Pairs] | None:
    """:func:`transpose_layout` with no slice at the end of any axis: the input's zero pads
    (at the start of an axis), torch's padding and output_padding, and the slices that are
    left; None where the layout slices no axis at its end.

    Where the layout would compute ``end - lo`` surplus elements at the end of an axis
    (TF ``same`` with ``k_eff - s`` odd: the full output ``(n-1)*s + k_eff`` and its last
    element sliced off), ``m`` zero rows before the input move the full output ``m*s``
    later, and torch's padding ``lo + m*s`` with output_padding ``lo + m*s - end`` (less
    than the stride for the least ``m``) then crops exactly what is asked, with no slice:
    for TF ``same``, an output of exactly ``n*s``. The zero rows add nothing but the
    bias, which every kept element has anyway. Torch's transposed conv on CPU (oneDNN's
    deconvolution) runs some of these output sizes several times faster than the sliced
    ones, others slower: :func:`_conv_transpose_crops` measures which.
    """
    native_p, native_op, slices = transpose_layout(crops, op, k, s, d, sizes, fname)
    if not any(b for _, b in slices):
        return None
    pads: list[tuple[int, int]] = []
    p2, o2, sl2 = list(native_p), list(native_op), list(slices)
    for i, ((lo, hi), (_, b)) in enumerate(zip(crops, slices)):
        if not b:
            pads.append((0, 0))
            continue
        end = hi - op[i]  # > lo here: the layout's padding is lo and it slices end - lo
        m = -(-(end - lo) // s[i])
        pads.append((m, 0))
        p2[i], o2[i], sl2[i] = lo + m * s[i], lo + m * s[i] - end, (0, 0)
    return tuple(pads), tuple(p2), tuple(o2), tuple(sl2)


def run_transpose(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    s: tuple[int, ...],
    native_p: tuple[int, ...],
    native_op: tuple[int, ...],
    groups: int,
    d: tuple[int, ...],
    slices: Pairs,
    pads: Pairs | None = None,
) -> Tensor:
    """A :func:`transpose_layout` (or a :func:`shifted_layout`, whose input ``pads`` come
    last) on torch's transposed conv (batched or not)."""
    nd = len(s)
    if pads is not None:
        x = F.pad(x, _torch_pad(pads))
    out: Tensor = _CONV_T[nd](x, weight, bias, s, native_p, native_op, groups, d)
    for i, (a, b) in enumerate(slices):
        if a or b:
            out = out.narrow(out.dim() - nd + i, a, out.shape[out.dim() - nd + i] - a - b)
    return out


def conv_transpose1d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: PaddingLike = 0,
    output_padding: int | Sequence[int] | None = None,
    groups: int = 1,
    dilation: int | Sequence[int] = 1,
    *,
    output_size: Sequence[int] | None = None,
) -> Tensor:
    """``F.conv_transpose1d`` with per-side crops and TF ``"same"`` (output = input * stride).

    Example:
        >>> x = torch.tensor([[[1.0, 2.0, 3.0]]])
        >>> conv_transpose1d(x, torch.ones(1, 1, 3), stride=2, padding="same")
        tensor([[[1., 1., 3., 2., 5., 3.]]])
    """
    return _conv_transpose(
        "conv_transpose1d",
        1,
        input,
        weight,
        bias,
        stride,
        padding,
        output_padding,
        groups,
        dilation,
        output_size,
    )


def conv_transpose2d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: PaddingLike = 0,
    output_padding: int | Sequence[int] | None = None,
    groups: int = 1,
    dilation: int | Sequence[int] = 1,
    *,
    output_size: Sequence[int] | None = None,
) -> Tensor:
    """``F.conv_transpose2d`` with per-side crops and TF ``"same"`` (output = input * stride).

    Example:
        >>> x = torch.ones(1, 1, 3, 5)
        >>> conv_transpose2d(x, torch.ones(1, 1, 4, 4), stride=2, padding="same").shape
        torch.Size([1, 1, 6, 10])
    """
    return _conv_transpose(
        "conv_transpose2d",
        2,
        input,
        weight,
        bias,
        stride,
        padding,
        output_padding,
        groups,
        dilation,
        output_size,
    )


def conv_transpose3d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: int | Sequence[int] = 1,
    padding: PaddingLike = 0,
    output_padding: int | Sequence[int] | None = None,
    groups: int = 1,
    dilation: int | Sequence[int] = 1,
    *,
    output_size: Sequence[int] | None = None,
) -> Tensor:
    """``F.conv_transpose3d`` with per-side crops and TF ``"same"`` (output = input * stride).

    Example:
        >>> x = torch.ones(1, 1, 2, 3, 3)
        >>> conv_transpose3d(x, torch.ones(1, 1, 3, 3, 3), stride=2, padding="same").shape
        torch.Size([1, 1, 4, 6, 6])
    """
    return _conv_transpose(
        "conv_transpose3d",
        3,
        input,
        weight,
        bias,
        stride,
        padding,
        output_padding,
        groups,
        dilation,
        output_size,
    )
