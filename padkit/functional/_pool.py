"""Max, average and LP pooling with every padkit padding form: plans, explicit pads and
the executors."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .. import _export
from .._finite import all_finite, values_visible
from .._sym import statically_known_true
from ..native import _dispatch as _backend
from ..op import _PER_TENSOR, Op, lowest_value, max_pad_fill, quantized_pad
from ..plan import Plan, plan_pool
from ..spec import (
    Padding,
    PaddingError,
    PaddingLike,
    pool_output_size,
)
from ._common import (
    Pairs,
    _check_fits,
    _check_input,
    _check_spatial,
    _compiling,
    _k_eff,
    _parse,
    _symbolic,
    _torch_pad,
    resolve,
)
from ._conv import _CONV, _narrow_out, _needs_grad

# ----------------------------------------------------------------------------- pooling helpers


def _pad_value(rec: Op) -> float | None:
    """The value ``F.pad`` may give a pool's pads without changing its result: -inf for a
    max pool, 0 for an average that counts its pads; None where no value is neutral."""
    if rec.return_indices or rec.divisor_override is not None:
        return None
    if rec.kind == "max":
        return float("-inf")
    return 0.0 if rec.kind == "avg" and rec.count_include_pad else None


def run_pool_plan(plan: Plan, rec: Op, x: Tensor, *, mean_weight: Tensor | None = None) -> Any:
    """Execute a max or average pool :class:`~padkit.plan.Plan` that runs torch's own pool
    (``native``, ``ceil_mode``, ``crop``) or, for an average, a depthwise conv with a
    constant kernel (``zero_extend``; ``mean_weight`` is that kernel where the caller caches
    it; an input that is not all finite, :func:`all_finite`, is padded and pooled instead)
    on a batched input of ``rec``'s op. ``explicit`` plans pad first and are the pool
    functions' own business. Returns ``(out, indices)`` for a max pool that asks for them.
    """
    nd = rec.nd
    if plan.strategy == "zero_extend":  # average pools only
        if not values_visible(x):
            return padded_avg_pool(x, rec, plan.pads)
        weight = mean_weight
        if weight is None:
            weight = mean_kernel(x, rec.kernel, plan.kernel_ext, rec.divisor_override)
        out = _CONV[nd](x, weight, None, rec.stride, plan.native_padding, 1, x.shape[1])
        if not all_finite(out):
            # a zero tap may have met a NaN or an infinity outside its window
            return padded_avg_pool(x, rec, plan.pads)
        return out
    k, s = _lift(nd, rec.kernel, 1), _lift(nd, rec.stride, 1)
    p = _lift(nd, plan.native_padding, 0)
    crop = plan.strategy == "crop"
    value = _pad_value(rec) if crop and _needs_grad(x) and channels_last(x) else None
    if value is not None:
        # a channels-last crop under autograd: the crop view's backward feeds torch's
        # channels-last pool backward a gradient it runs 5-7x slower than the native pool's,
        # one padded copy costs 1.3-2.2x (docs/performance.md). Crop plans never use
        # ceil_mode, so the unpadded pool of the padded input has the plan's output size.
        x, p, crop = F.pad(x, _torch_pad(plan.pads), value=value), _lift(nd, (0,) * nd, 0), False
    if rec.kind == "avg":
        out = _AVG_POOL[max(nd, 2)](
            _to2d(x, nd), k, s, p, plan.ceil_mode, rec.count_include_pad, rec.divisor_override
        )
        return _from2d_narrow(out, nd, plan) if crop else _from2d(out, nd)
    d = _lift(nd, rec.dilation, 1)
    if rec.return_indices:
        res = _MAX_POOL[max(nd, 2)](_to2d(x, nd), k, s, p, d, plan.ceil_mode, True)
        if crop:
            return tuple(_from2d_narrow(r, nd, plan) for r in res)
        return _from2d(res[0], nd), _from2d(res[1], nd)
    pool = torch.max_pool3d if nd == 3 else torch.max_pool2d
    out = pool(_to2d(x, nd), k, s, p, d, plan.ceil_mode)
    return _from2d_narrow(out, nd, plan) if crop else _from2d(out, nd)


def _pool_setup(
    fname: str,
    nd: int,
    input: Tensor,
    rec: Op,
) -> tuple[
    Tensor,
    bool,
    tuple[int, ...],
    tuple[int, ...],
    tuple[int, ...],
    Pairs,
    bool,
    tuple[int, ...],
    tuple[int, ...],
]:
    x, unbatched = _check_input(fname, input, nd)
    k, s, d, spec = rec.kernel, rec.stride, rec.dilation, rec.padding
    sizes = _check_spatial(fname, x, nd)
    ceil = rec.ceil_mode or spec.ceil_mode
    if spec.ceil_mode:
        # Caffe rounding runs natively: symmetric pads with ceil_mode
        pairs: Pairs = tuple(a for a in spec.axes if isinstance(a, tuple))
        if len(pairs) != nd:
            pairs = resolve(Padding(spec.axes), k, s, d, sizes)
        for i, (n, (lo, _), kk, ss, dd) in enumerate(zip(sizes, pairs, k, s, d)):
            if lo == 0 and ss > 1:
                ke = dd * (kk - 1) + 1
                last = -(-(n - ke) // ss) * ss
                if last >= n:
                    raise PaddingError(
                        f"{fname}(): Caffe ceil rounding without padding puts the last window on "
                        f"axis {i} outside the input (Caffe computes -FLT_MAX there); padkit "
                        "refuses to approximate it"
                    )
    else:
        pairs = resolve(spec, k, s, d, sizes)
    k_eff = _k_eff(k, d)
    _check_fits(fname, sizes, pairs, k_eff)
    outs = tuple(
        pool_output_size(n, kk, ss, dd, lo, hi, ceil)
        for n, kk, ss, dd, (lo, hi) in zip(sizes, k, s, d, pairs)
    )
    return x, unbatched, k, s, d, pairs, ceil, sizes, outs


def _export_pool(fname: str, nd: int, rec: Op, input: Tensor, eager: _export.Eager) -> Tensor:
    x, unbatched = _check_input(fname, input, nd)
    out = _export.pool(fname, rec, x, eager)
    return out.squeeze(0) if unbatched else out


def _explicit_pads(
    sizes: Sequence[int],
    k_eff: Sequence[int],
    s: Sequence[int],
    pairs: Pairs,
    outs: Sequence[int],
    ceil: bool,
) -> Pairs:
    """Pads that make a floor-mode, unpadded pool produce exactly ``outs`` windows."""
    if not ceil:
        return pairs  # floor mode over the padded input gives ``outs`` already
    full: list[tuple[int, int]] = []
    for n, ke, ss, (lo, hi), o in zip(sizes, k_eff, s, pairs, outs):
        # grows hi for the ceil overhang; shrinks it where ceil mode drops windows that
        # would start in the right padding (possible once pads exceed the kernel)
        need = (o - 1) * ss + ke - (n + lo + hi)
        full.append((lo, hi + need))
    return tuple(full)


def _pad_windows(x: Tensor, full: Pairs, value: float) -> Tensor:
    """Pad by ``full``; a negative end pad trims the padded tensor (never more than it has)."""
    if _compiling():
        # pads may be symbolic: no branch on their values (F.pad crops for a negative pad)
        if all(statically_known_true(v == 0) for pair in full for v in pair):
            return x
        return F.pad(x, _torch_pad(full), value=value)
    pos: Pairs = tuple((lo, max(hi, 0)) for lo, hi in full)
    if any(lo or hi for lo, hi in pos):
        x = F.pad(x, _torch_pad(pos), value=value)
    for i, (_, hi) in enumerate(full):
        if hi < 0:
            x = x.narrow(2 + i, 0, x.shape[2 + i] + hi)
    return x


def _to2d(x: Tensor, nd: int) -> Tensor:
    return x.unsqueeze(2) if nd == 1 else x


def _from2d(x: Tensor, nd: int) -> Tensor:
    return x.squeeze(2) if nd == 1 else x


def _from2d_narrow(x: Tensor, nd: int, plan: Plan) -> Tensor:
    return _narrow_out(_from2d(x, nd), plan)


def _lift(nd: int, values: Sequence[int], fill: int) -> tuple[int, ...]:
    return (fill, *values) if nd == 1 else tuple(values)


_MAX_POOL: dict[int, Any] = {2: F.max_pool2d, 3: F.max_pool3d}
_AVG_POOL = {2: F.avg_pool2d, 3: F.avg_pool3d}


def _window_sum(
    x: Tensor,
    nd: int,
    k: tuple[int, ...],
    s: tuple[int, ...],
    d: tuple[int, ...],
    full: Pairs,
) -> Tensor:
    """Sum over every window of ``x`` zero-padded by ``full`` (floor mode)."""
    xp = _pad_windows(x, full, 0.0)
    # (torch has no half-precision avg_pool3d on the CPU: those sum over a strided view)
    half_3d = nd == 3 and x.device.type == "cpu" and x.dtype in (torch.float16, torch.bfloat16)
    if all(dd == 1 for dd in d) and x.dtype.is_floating_point and not half_3d:
        pool = _AVG_POOL[max(nd, 2)]
        out = pool(_to2d(xp, nd), _lift(nd, k, 1), _lift(nd, s, 1), 0, False, True, 1)
        return _from2d(out, nd)
    win = xp
    for i in range(nd):
        ke = d[i] * (k[i] - 1) + 1
        win = win.unfold(2 + i, ke, s[i])
    index = tuple([slice(None)] * (2 + nd) + [slice(None, None, dd) for dd in d])
    acc = None if x.dtype.is_floating_point or x.dtype.is_complex else torch.int64
    return win[index].sum(dim=tuple(range(-nd, 0)), dtype=acc)


def _axis_counts(
    n: int,
    k: int,
    s: int,
    d: int,
    lo: int,
    hi: int,
    out: int,
    include_pad: bool,
) -> list[int]:
    start, stop = (-lo, n + hi) if include_pad else (0, n)
    counts = []
    for o in range(out):
        first = o * s - lo
        counts.append(sum(1 for t in range(k) if start <= first + t * d < stop))
    return counts


@functools.lru_cache(maxsize=1024)
def _divisor(
    sizes: tuple[int, ...],
    k: tuple[int, ...],
    s: tuple[int, ...],
    d: tuple[int, ...],
    pairs: Pairs,
    outs: tuple[int, ...],
    include_pad: bool,
) -> tuple[tuple[int, ...], ...]:
    return tuple(
        tuple(_axis_counts(n, kk, ss, dd, lo, hi, o, include_pad))
        for n, kk, ss, dd, (lo, hi), o in zip(sizes, k, s, d, pairs, outs)
    )


def _divisor_traced(
    x: Tensor,
    nd: int,
    k: tuple[int, ...],
    s: tuple[int, ...],
    d: tuple[int, ...],
    pairs: Pairs,
    full: Pairs,
    include_pad: bool,
) -> Tensor:
    """The divisor as window sums of a mask (shape-agnostic, for traced graphs)."""
    dtype = x.dtype if x.dtype.is_floating_point else torch.int64
    mask = torch.ones((1, 1, *x.shape[2:]), dtype=dtype, device=x.device)
    if include_pad:
        mask = F.pad(mask, _torch_pad(pairs), value=1.0)
        rest: Pairs = tuple((0, f_hi - hi) for (_, hi), (_, f_hi) in zip(pairs, full))
    else:
        rest = full
    return _window_sum(mask, nd, k, s, d, rest)[0, 0]


def _divisor_tensor(axis_counts: tuple[tuple[int, ...], ...], like: Tensor) -> Tensor:
    dtype = like.dtype if like.dtype.is_floating_point else torch.int64
    nd = len(axis_counts)
    factors = []
    for i, counts in enumerate(axis_counts):
        shape = [1] * nd
        shape[i] = len(counts)
        factors.append(torch.tensor(counts, dtype=dtype, device=like.device).view(shape))
    return functools.reduce(torch.mul, factors)


# ----------------------------------------------------------------------------- max pool


def _max_pool(
    fname: str,
    nd: int,
    input: Tensor,
    kernel_size: Any,
    stride: Any,
    padding: PaddingLike,
    dilation: Any,
    ceil_mode: bool,
    return_indices: bool,
    padding_value: float = -math.inf,
) -> Any:
    rec = Op.make(
        "max",
        nd,
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode=ceil_mode,
        return_indices=return_indices,
        padding_value=padding_value,
        where=f"{fname}()",
    )
    if _export.exporting():
        return _export_pool(
            fname,
            nd,
            rec,
            input,
            lambda xx, _w, _b: _max_pool(
                fname,
                nd,
                xx,
                kernel_size,
                stride,
                padding,
                dilation,
                ceil_mode,
                False,
                padding_value,
            ),
        )
    if (
        isinstance(input, Tensor)
        and input.is_quantized
        and (
            return_indices
            or input.qscheme() not in _PER_TENSOR
            # F.pad quantizes a qint32 fill in float32: the lowest value comes back up to
            # 128 steps above qmin, above the inputs that lie there
            or input.dtype == torch.qint32
            # a chosen value pads as its exact integer, checked once
            or not rec.neutral_pads
        )
    ):
        return _max_pool_int_repr(
            fname,
            nd,
            input,
            kernel_size,
            stride,
            padding,
            dilation,
            ceil_mode,
            return_indices,
            rec.padding_value,
        )
    x, unbatched, k, s, d, pairs, ceil, sizes, outs = _pool_setup(fname, nd, input, rec)
    if x.dtype == torch.bool:
        raise TypeError(f"{fname}(): max pooling does not support bool tensors")
    plan = plan_pool(
        "max_pool",
        pairs,
        k,
        s,
        d,
        sizes,
        ceil_mode=ceil,
        cache=not _compiling(),
        symbolic=_symbolic(sizes, s, rec.padding.needs_input_size(s)),
        neutral_pads=rec.neutral_pads,
    )
    if not rec.neutral_pads:
        max_pad_fill(x, rec.padding_value, where=f"{fname}()")  # one the input holds exactly
    hook = _backend.active
    if hook is not None and not return_indices and plan.strategy != "native":
        got: Tensor | None = hook.pool(
            "max",
            plan.strategy,
            x,
            k,
            s,
            d,
            pairs,
            outs,
            lambda t: _max_pool(
                fname,
                nd,
                t,
                kernel_size,
                stride,
                padding,
                dilation,
                ceil_mode,
                False,
                padding_value,
            ),
            value=rec.padding_value,
        )
        if got is not None:
            return got.squeeze(0) if unbatched else got
    if plan.strategy != "explicit":
        res = run_pool_plan(plan, rec, x)
        if return_indices:
            return (res[0].squeeze(0), res[1].squeeze(0)) if unbatched else res
        return res.squeeze(0) if unbatched else res
    full = _explicit_pads(sizes, _k_eff(k, d), s, pairs, outs, ceil)
    if return_indices and not _compiling():
        counts = _divisor(sizes, k, s, d, pairs, outs, False)
        if any(0 in c for c in counts):
            axis = next(i for i, c in enumerate(counts) if 0 in c)
            raise PaddingError(
                f"{fname}(): with pads {pairs[axis]} a window on spatial axis {axis} "
                "holds only padding, so it has no input index; use smaller pads or "
                "return_indices=False"
            )
    res = explicit_max_pool(x, rec, full, pairs)
    if return_indices:
        return (res[0].squeeze(0), res[1].squeeze(0)) if unbatched else res
    return res.squeeze(0) if unbatched else res


def _max_pool_int_repr(
    fname: str,
    nd: int,
    input: Tensor,
    kernel_size: Any,
    stride: Any,
    padding: PaddingLike,
    dilation: Any,
    ceil_mode: bool,
    return_indices: bool,
    padding_value: float = -math.inf,
) -> Any:
    """A quantized max pool torch's quantized pools do not run (per-channel quantization,
    ``return_indices``), that ``F.pad`` cannot pad exactly (``qint32``) or with a chosen
    ``padding_value``: the pool of the integer representation, quantized again with the
    input's parameters. Dequantizing is increasing, so both take the same maxima, and the
    integer pads (the dtype's minimum, or the integer ``q`` that dequantizes exactly to
    ``padding_value``, :func:`padkit.op.quantized_pad`, refused where none does) are the
    quantized pads: exact."""
    if input.dim() not in (nd + 1, nd + 2):
        _check_input(fname, input, nd)  # raises the usual shape error
    if input.qscheme() in _PER_TENSOR:
        scale, zero_point, axis = input.q_scale(), input.q_zero_point(), -1
    else:
        axis = input.q_per_channel_axis()
        first_spatial = input.dim() - nd
        if axis >= first_spatial:
            raise PaddingError(
                f"{fname}(): input is quantized per channel along axis {axis} "
                f"({input.qscheme()}), a spatial axis the pool shrinks; a quantized max "
                f"pool takes per-tensor quantization or per-channel quantization along an "
                f"axis before the spatial ones (axis < {first_spatial})"
            )
    fill = padding_value
    if fill != -math.inf:
        fill = float(quantized_pad(input, fill, where=f"{fname}()"))
    res = _max_pool(
        fname,
        nd,
        input.int_repr(),
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode,
        return_indices,
        fill,
    )
    out = res[0] if return_indices else res
    if axis < 0:
        q = torch._make_per_tensor_quantized_tensor(out, scale, zero_point)
    else:
        q = torch._make_per_channel_quantized_tensor(
            out, input.q_per_channel_scales(), input.q_per_channel_zero_points(), axis
        )
    return (q, res[1]) if return_indices else q


def explicit_max_pool(x: Tensor, rec: Op, full: Pairs, pairs: Pairs | None = None) -> Any:
    """An ``explicit`` max pool plan on a batched input: the input padded by ``full`` with
    the lowest value it can hold (:func:`padkit.op.lowest_value`: -inf, an integer dtype's
    minimum, a quantized tensor's lowest representable value), then the unpadded pool
    (indices mapped back to the input). With a ``padding_value`` other than -inf, the
    declared ``pairs`` hold that value and only the rest of ``full`` (a ceil-mode overhang,
    which no window counts) the lowest value."""
    nd, k, s, d = rec.nd, rec.kernel, rec.stride, rec.dilation
    if rec.neutral_pads:
        xp = _pad_windows(x, full, lowest_value(x))
    else:
        declared = full if pairs is None else pairs
        xp = _pad_windows(x, declared, max_pad_fill(x, rec.padding_value))
        rest: Pairs = tuple((0, fh - h) for (_, h), (_, fh) in zip(declared, full))
        xp = _pad_windows(xp, rest, lowest_value(x))
    res = _MAX_POOL[max(nd, 2)](
        _to2d(xp, nd),
        _lift(nd, k, 1),
        _lift(nd, s, 1),
        0,
        _lift(nd, d, 1),
        False,
        rec.return_indices,
    )
    if rec.return_indices:
        idx = _unpad_indices(res[1], nd, xp.shape[2:], x.shape[2:], full)
        return _from2d(res[0], nd), _from2d(idx, nd)
    return _from2d(res, nd)


def _unpad_indices(
    idx: Tensor, nd: int, padded: Sequence[int], sizes: Sequence[int], full: Pairs
) -> Tensor:
    """Map flat indices into the padded plane back to flat indices into the input plane."""
    rem = idx
    coords: list[Tensor] = []
    for size in reversed(list(padded)):
        coords.append(torch.remainder(rem, size))
        rem = torch.div(rem, size, rounding_mode="floor")
    coords.reverse()
    flat = torch.zeros_like(idx)
    for c, n, (lo, _) in zip(coords, sizes, full):
        flat = flat * n + (c - lo)
    return flat


def max_pool1d(
    input: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: PaddingLike = 0,
    dilation: int | Sequence[int] = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
    padding_value: float = -math.inf,
) -> Any:
    """``F.max_pool1d`` with every padkit padding form; pads never win (−∞) unless
    ``padding_value`` names what they hold (``F.pad(value=padding_value)`` then the pool;
    see :func:`padkit.op.max_pad_fill` for integer and quantized inputs).

    Example:
        >>> x = -torch.arange(1.0, 9.0).view(1, 1, 8)
        >>> max_pool1d(x, 3, 2, padding="same_lower")   # pads (1, 0)
        tensor([[[-1., -2., -4., -6.]]])
    """
    return _max_pool(
        "max_pool1d",
        1,
        input,
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode,
        return_indices,
        padding_value,
    )


def max_pool2d(
    input: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: PaddingLike = 0,
    dilation: int | Sequence[int] = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
    padding_value: float = -math.inf,
) -> Any:
    """``F.max_pool2d`` with every padkit padding form; pads never win (−∞) unless
    ``padding_value`` names what they hold (``F.pad(value=padding_value)`` then the pool;
    see :func:`padkit.op.max_pad_fill` for integer and quantized inputs).

    Example:
        >>> max_pool2d(torch.ones(1, 1, 13, 13), 2, 1, padding=((0, 1), (0, 1))).shape
        torch.Size([1, 1, 13, 13])
    """
    return _max_pool(
        "max_pool2d",
        2,
        input,
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode,
        return_indices,
        padding_value,
    )


def max_pool3d(
    input: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: PaddingLike = 0,
    dilation: int | Sequence[int] = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
    padding_value: float = -math.inf,
) -> Any:
    """``F.max_pool3d`` with every padkit padding form; pads never win (−∞) unless
    ``padding_value`` names what they hold (``F.pad(value=padding_value)`` then the pool;
    see :func:`padkit.op.max_pad_fill` for integer and quantized inputs).

    Example:
        >>> max_pool3d(torch.ones(1, 1, 4, 5, 5), 3, 2, padding="same").shape
        torch.Size([1, 1, 2, 3, 3])
    """
    return _max_pool(
        "max_pool3d",
        3,
        input,
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode,
        return_indices,
        padding_value,
    )


# ----------------------------------------------------------------------------- avg pool


def default_count_include_pad(padding: PaddingLike, nd: int, where: str) -> bool:
    """Whether an average pool counts its pads when ``count_include_pad`` is not given.

    The padding names the convention: TF/ONNX rules (``"same"``, ``"same_lower"``) leave
    the pads out of the divisor, as TensorFlow and ONNX (whose ``count_include_pad``
    defaults to 0) do; torch ints and pairs, and every other rule, count them, as torch
    does. A padding that mixes a TF/ONNX rule with nonzero explicit pads has no single
    convention and is refused: pass ``count_include_pad``.
    """
    if isinstance(padding, int) and not isinstance(padding, bool):
        return True
    spec = _parse(padding, nd, where.rstrip("()"))
    tf_axes = [i for i, rule in enumerate(spec.axes) if rule in ("same", "same_lower")]
    if not tf_axes:
        return True
    torch_axes = [
        i
        for i, rule in enumerate(spec.axes)
        if (isinstance(rule, tuple) and any(rule)) or (spec.pre is not None and any(spec.pre[i]))
    ]
    if torch_axes:
        raise PaddingError(
            f"{where}: padding {spec.describe()} mixes a TF/ONNX rule (axis {tf_axes[0]}: pads "
            f"left out of the divisor) with torch pads (axis {torch_axes[0]}: pads counted); "
            "pass count_include_pad=True or False"
        )
    return False


def padded_avg_pool(x: Tensor, rec: Op, pairs: Pairs) -> Tensor:
    """An average pool as ``F.pad`` then torch's unpadded pool (see :func:`_pad_then_pool`):
    what ``torch.compile`` traces, as inductor lowers it to one loop reading the input with
    the pads as bounds (no extern depthwise conv, no divisor)."""
    nd = rec.nd
    pooled: Tensor = _AVG_POOL[max(nd, 2)](
        _to2d(F.pad(x, _torch_pad(pairs)), nd),
        _lift(nd, rec.kernel, 1),
        _lift(nd, rec.stride, 1),
        0,
        False,
        True,
        rec.divisor_override,
    )
    return _from2d(pooled, nd)


def _pad_then_pool(plan: Plan, rec: Op, dtype: torch.dtype) -> bool:
    """An average pool whose divisor never depends on where the pads are (it counts them,
    or is overridden), in floor mode: torch's unpadded pool of the zero-padded input is
    exact. Taken in place of the plans that avoid an input copy in eager mode."""
    return (
        plan.strategy in ("zero_extend", "explicit")
        and (rec.count_include_pad or rec.divisor_override is not None)
        and not plan.ceil_mode
        and not rec.ceil_mode
        and all(dd == 1 for dd in rec.dilation)
        and dtype.is_floating_point
    )


def _avg_pool(
    fname: str,
    nd: int,
    input: Tensor,
    kernel_size: Any,
    stride: Any,
    padding: PaddingLike,
    ceil_mode: bool,
    count_include_pad: bool | None,
    divisor_override: int | None,
    dilation: Any,
) -> Tensor:
    if isinstance(input, Tensor) and input.is_quantized:
        # the exact average of the quantized values, rounded once to the input's scale and
        # zero point (torch's quantized average pools keep them too; they differ from this
        # by at most one rounding step)
        if input.qscheme() not in (torch.per_tensor_affine, torch.per_tensor_symmetric):
            raise PaddingError(
                f"{fname}(): input is quantized with {input.qscheme()}; average pooling of a "
                "quantized tensor takes per-tensor quantization (torch.per_tensor_affine) only"
            )
        out = _avg_pool(
            fname,
            nd,
            input.dequantize(),
            kernel_size,
            stride,
            padding,
            ceil_mode,
            count_include_pad,
            divisor_override,
            dilation,
        )
        return torch.quantize_per_tensor(out, input.q_scale(), input.q_zero_point(), input.dtype)
    if count_include_pad is None:
        count_include_pad = default_count_include_pad(padding, nd, f"{fname}()")
    rec = Op.make(
        "avg",
        nd,
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode=ceil_mode,
        count_include_pad=count_include_pad,
        divisor_override=divisor_override,
        where=f"{fname}()",
    )
    divisor_override = rec.divisor_override
    if _export.exporting():
        return _export_pool(
            fname,
            nd,
            rec,
            input,
            lambda xx, _w, _b: _avg_pool(
                fname,
                nd,
                xx,
                kernel_size,
                stride,
                padding,
                ceil_mode,
                count_include_pad,
                divisor_override,
                dilation,
            ),
        )
    x, unbatched, k, s, d, pairs, ceil, sizes, outs = _pool_setup(fname, nd, input, rec)
    if x.dtype == torch.bool:
        raise TypeError(f"{fname}(): average pooling does not support bool tensors")
    if nd == 3 and x.device.type == "cpu" and x.dtype in (torch.float16, torch.bfloat16):
        # torch has no half-precision avg_pool3d on the CPU: average in float32, round once
        out = _avg_pool(
            fname, nd, x.float(), k, s, pairs, ceil, count_include_pad, divisor_override, d
        ).to(x.dtype)
        return out.squeeze(0) if unbatched else out
    native_dtype = x.dtype.is_floating_point or x.dtype == torch.int64
    plan = plan_pool(
        "avg_pool",
        pairs,
        k,
        s,
        d,
        sizes,
        ceil_mode=ceil,
        count_include_pad=bool(count_include_pad),
        native_dtype=native_dtype,
        float_input=x.dtype.is_floating_point,
        channels_last=channels_last(x),
        cache=not _compiling(),
        symbolic=_symbolic(sizes, s, rec.padding.needs_input_size(s)),
    )
    hook = _backend.active
    if hook is not None and divisor_override is None and plan.strategy != "native":
        kind = "avg_include" if count_include_pad else "avg_exclude"
        got_avg: Tensor | None = hook.pool(
            kind,
            plan.strategy,
            x,
            k,
            s,
            d,
            pairs,
            outs,
            lambda t: _avg_pool(
                fname,
                nd,
                t,
                kernel_size,
                stride,
                padding,
                ceil_mode,
                count_include_pad,
                None,
                dilation,
            ),
        )
        if got_avg is not None:
            return got_avg.squeeze(0) if unbatched else got_avg
    if _compiling() and not torch.compiler.is_exporting() and _pad_then_pool(plan, rec, x.dtype):
        pooled = padded_avg_pool(x, rec, pairs)
        return pooled.squeeze(0) if unbatched else pooled
    if plan.strategy != "explicit":
        avg: Tensor = run_pool_plan(plan, rec, x)
        return avg.squeeze(0) if unbatched else avg
    full = _explicit_pads(sizes, _k_eff(k, d), s, pairs, outs, ceil)
    if _compiling():
        out = explicit_avg_traced(x, rec, pairs, full)
        return out.squeeze(0) if unbatched else out
    total = _window_sum(x, nd, k, s, d, full)
    if divisor_override is not None:
        div: Tensor | int = divisor_override
    else:
        counts = _divisor(sizes, k, s, d, pairs, outs, bool(count_include_pad))
        if any(0 in c for c in counts):
            axis = next(i for i, c in enumerate(counts) if 0 in c)
            raise PaddingError(
                f"{fname}(): a window on spatial axis {axis} holds no input element (pads "
                f"{pairs[axis]} reach past the kernel); its average excluding padding is "
                "undefined. Use smaller pads or count_include_pad=True"
            )
        div = _divisor_tensor(counts, x)
    if x.dtype.is_floating_point or x.dtype.is_complex:
        out = total / div
    else:
        out = torch.div(total, div, rounding_mode="trunc").to(x.dtype)
    return out.squeeze(0) if unbatched else out


def explicit_avg_traced(x: Tensor, rec: Op, pairs: Pairs, full: Pairs) -> Tensor:
    """An ``explicit`` average pool plan on a batched input as traced graphs run it: window
    sums of the input zero-padded by ``full`` over window sums of a mask (or the divisor
    override), with no Python-side count of each window."""
    nd, k, s, d = rec.nd, rec.kernel, rec.stride, rec.dilation
    total = _window_sum(x, nd, k, s, d, full)
    div: Tensor | int
    if rec.divisor_override is not None:
        div = rec.divisor_override
    else:
        div = _divisor_traced(x, nd, k, s, d, pairs, full, rec.count_include_pad)
    if x.dtype.is_floating_point or x.dtype.is_complex:
        return total / div
    return torch.div(total, div, rounding_mode="trunc").to(x.dtype)


_CL_FORMATS = {4: torch.channels_last, 5: torch.channels_last_3d}


def channels_last(x: Tensor) -> bool:
    """``x`` is laid out channels-last (and not also plain contiguous).

    Inside ``torch.func`` transforms (``vmap`` cannot answer ``is_contiguous`` for a memory
    format) the layout is read from the strides, with torch's own rule.
    """
    fmt = _CL_FORMATS.get(x.dim())
    if fmt is None:
        return False
    if not _compiling() and torch._C._functorch.is_functorch_wrapped_tensor(x):
        nd = x.dim()
        last = (1, *range(nd - 1, 1, -1), 0)  # channels, then the spatial axes last first
        shape, strides = tuple(x.shape), x.stride()
        return (
            x.numel() > 0
            and _dense_in(last, shape, strides)
            and not _dense_in(range(nd - 1, -1, -1), shape, strides)
        )
    return x.is_contiguous(memory_format=fmt) and not x.is_contiguous()


def _dense_in(order: Sequence[int], shape: Sequence[int], strides: Sequence[int]) -> bool:
    """The axes, innermost first in ``order``, are densely packed (size-1 axes ignored)."""
    expected = 1
    for axis in order:
        if shape[axis] != 1:
            if strides[axis] != expected:
                return False
            expected *= shape[axis]
    return True


def mean_kernel(
    x: Tensor, k: Sequence[int], kernel_ext: Pairs, divisor_override: int | None = None
) -> Tensor:
    """The depthwise kernel of a window mean over ``x``'s channels: ``1/divisor`` on the
    ``k`` taps, zeros on the ``kernel_ext`` taps around them."""
    div = divisor_override if divisor_override is not None else math.prod(k)
    weight = torch.full((x.shape[1], 1, *k), 1.0 / div, dtype=x.dtype, device=x.device)
    return F.pad(weight, _torch_pad(kernel_ext)) if any(map(any, kernel_ext)) else weight


def avg_pool1d(
    input: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: PaddingLike = 0,
    ceil_mode: bool = False,
    count_include_pad: bool | None = None,
    divisor_override: int | None = None,
    dilation: int | Sequence[int] = 1,
) -> Tensor:
    """``F.avg_pool1d`` with every padkit padding form, dilation and ``divisor_override``.

    ``count_include_pad`` counts the declared pads, never the ``ceil_mode`` overhang
    (torch, ONNX and Caffe agree on that). Not given (``None``), it follows the convention
    the padding names: ``"same"``/``"same_lower"`` (TF, ONNX) leave the pads out, torch
    ints and pairs count them (:func:`default_count_include_pad`).

    Example:
        >>> x = torch.arange(1.0, 9.0).view(1, 1, 8)
        >>> avg_pool1d(x, 3, 2, padding="same", count_include_pad=False)   # TF SAME
        tensor([[[2.0000, 4.0000, 6.0000, 7.5000]]])
    """
    return _avg_pool(
        "avg_pool1d",
        1,
        input,
        kernel_size,
        stride,
        padding,
        ceil_mode,
        count_include_pad,
        divisor_override,
        dilation,
    )


def avg_pool2d(
    input: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: PaddingLike = 0,
    ceil_mode: bool = False,
    count_include_pad: bool | None = None,
    divisor_override: int | None = None,
    dilation: int | Sequence[int] = 1,
) -> Tensor:
    """``F.avg_pool2d`` with every padkit padding form, and dilation.

    Example:
        >>> avg_pool2d(torch.ones(1, 1, 4, 4), 2, 1, padding=((0, 1), (0, 1)),
        ...            count_include_pad=False).unique()   # every window's own count
        tensor([1.])
    """
    return _avg_pool(
        "avg_pool2d",
        2,
        input,
        kernel_size,
        stride,
        padding,
        ceil_mode,
        count_include_pad,
        divisor_override,
        dilation,
    )


def avg_pool3d(
    input: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: PaddingLike = 0,
    ceil_mode: bool = False,
    count_include_pad: bool | None = None,
    divisor_override: int | None = None,
    dilation: int | Sequence[int] = 1,
) -> Tensor:
    """``F.avg_pool3d`` with every padkit padding form, and dilation.

    Example:
        >>> avg_pool3d(torch.ones(1, 1, 3, 4, 4), 2, 2, padding="same", dilation=2).shape
        torch.Size([1, 1, 2, 2, 2])
    """
    return _avg_pool(
        "avg_pool3d",
        3,
        input,
        kernel_size,
        stride,
        padding,
        ceil_mode,
        count_include_pad,
        divisor_override,
        dilation,
    )


# ----------------------------------------------------------------------------- LP pool


def _lp_pool(
    fname: str,
    nd: int,
    input: Tensor,
    norm_type: float,
    kernel_size: Any,
    stride: Any,
    ceil_mode: bool,
    padding: PaddingLike,
    dilation: Any,
) -> Tensor:
    rec = Op.make(
        "lp",
        nd,
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode=ceil_mode,
        norm_type=norm_type,
        where=f"{fname}()",
    )
    if _export.exporting():
        return _export_pool(
            fname,
            nd,
            rec,
            input,
            lambda xx, _w, _b: _lp_pool(
                fname, nd, xx, norm_type, kernel_size, stride, ceil_mode, padding, dilation
            ),
        )
    x, unbatched, k, s, d, pairs, ceil, sizes, outs = _pool_setup(fname, nd, input, rec)
    if not x.dtype.is_floating_point:
        raise TypeError(f"{fname}(): LP pooling needs a floating-point input, got {x.dtype}")
    full = _explicit_pads(sizes, _k_eff(k, d), s, pairs, outs, ceil)
    if math.isinf(norm_type):
        out = _lp_pool_inf(x, nd, k, s, d, pairs, full, norm_type > 0)
        return out.squeeze(0) if unbatched else out
    total = _window_sum(x.pow(norm_type), nd, k, s, d, full)
    # torch's form: a window whose sum is zero or NaN passes no gradient back
    out = (torch.sign(total) * F.relu(torch.abs(total))).pow(1.0 / norm_type)
    return out.squeeze(0) if unbatched else out


def _lp_pool_inf(
    x: Tensor,
    nd: int,
    k: tuple[int, ...],
    s: tuple[int, ...],
    d: tuple[int, ...],
    pairs: Pairs,
    full: Pairs,
    largest: bool,
) -> Tensor:
    """LP pooling at ``p = inf`` (``largest``) or ``-inf`` as torch computes it: the largest
    (smallest) ``|x|`` per window (``max_pool(|x|)``, ``-max_pool(-|x|)``). The declared pads
    are zeros, so they count as ``|0|``; the ``ceil_mode`` overhang past them is outside
    every window (torch's pools skip it), so it pads with -inf, which never wins."""
    y = x.abs() if largest else -x.abs()
    y = _pad_windows(y, pairs, 0.0)
    rest: Pairs = tuple((0, f_hi - hi) for (_, hi), (_, f_hi) in zip(pairs, full))
    y = _pad_windows(y, rest, -math.inf)
    out: Tensor = _MAX_POOL[max(nd, 2)](
        _to2d(y, nd), _lift(nd, k, 1), _lift(nd, s, 1), 0, _lift(nd, d, 1), False
    )
    out = _from2d(out, nd)
    return out if largest else -out


def lp_pool1d(
    input: Tensor,
    norm_type: float,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    ceil_mode: bool = False,
    *,
    padding: PaddingLike = 0,
    dilation: int | Sequence[int] = 1,
) -> Tensor:
    """``F.lp_pool1d`` (``(sum x**p)**(1/p)`` per window) with padding and dilation.

    Pads contribute zero. ``norm_type=inf`` (``-inf``) is the largest (smallest) ``|x|``
    per window, as torch computes it; a pad counts as ``|0|`` there. Unlike torch, a
    ``ceil_mode`` window that hangs past the input sums only what it covers (torch rescales
    it by ``kernel / covered``; at ``±inf`` torch's pool skips the overhang, as padkit does).

    Example:
        >>> lp_pool1d(torch.tensor([[[3.0, 4.0]]]), 2, 2, padding=((1, 1),)).round()
        tensor([[[3., 4.]]])
    """
    return _lp_pool(
        "lp_pool1d", 1, input, norm_type, kernel_size, stride, ceil_mode, padding, dilation
    )


def lp_pool2d(
    input: Tensor,
    norm_type: float,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    ceil_mode: bool = False,
    *,
    padding: PaddingLike = 0,
    dilation: int | Sequence[int] = 1,
) -> Tensor:
    """``F.lp_pool2d`` with padding and dilation (see :func:`lp_pool1d`).

    Example:
        >>> lp_pool2d(torch.ones(1, 1, 4, 4), 2, 3, 1, padding="same").shape
        torch.Size([1, 1, 4, 4])
    """
    return _lp_pool(
        "lp_pool2d", 2, input, norm_type, kernel_size, stride, ceil_mode, padding, dilation
    )


def lp_pool3d(
    input: Tensor,
    norm_type: float,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    ceil_mode: bool = False,
    *,
    padding: PaddingLike = 0,
    dilation: int | Sequence[int] = 1,
) -> Tensor:
    """``F.lp_pool3d`` with padding and dilation (see :func:`lp_pool1d`).

    Example:
        >>> lp_pool3d(torch.ones(1, 1, 4, 4, 4), 1, 2, 2).unique()
        tensor([8.])
    """
    return _lp_pool(
        "lp_pool3d", 3, input, norm_type, kernel_size, stride, ceil_mode, padding, dilation
    )
