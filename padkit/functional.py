"""Functional conv, transposed conv, pooling and pad with every padkit padding form.

Each function takes the arguments of its ``torch.nn.functional`` namesake, and
``padding=`` accepts every form :class:`padkit.Padding` parses: per-side pairs,
``"same"`` at any stride (TF/XLA), ``"same_lower"``, ``"same_static"``, ``"causal"``,
``"full"`` and per-axis mixes. Results equal an explicit ``F.pad`` followed by the
unpadded op, to float rounding.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.fx.experimental.symbolic_shapes import statically_known_true
from torch.overrides import has_torch_function

from . import _export
from .native import _dispatch as _backend
from .op import PADDING_MODES, Op
from .plan import Plan, _as_residual_pad, plan_conv, plan_pool
from .spec import (
    TRANSPOSE_RULES,
    Padding,
    PaddingError,
    PaddingLike,
    _tuple_of,
    conv_transpose_output_size,
    conv_transpose_padding,
    pool_output_size,
)

__all__ = [
    "PADDING_MODES",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "lp_pool1d",
    "lp_pool2d",
    "lp_pool3d",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "pad",
]

#: ``pad`` modes: torch names first, then the ONNX/numpy aliases.
PAD_MODES: tuple[str, ...] = (
    "constant",
    "reflect",
    "replicate",
    "circular",
    "zeros",
    "edge",
    "wrap",
)
_PAD_MODE_CANON = {
    "constant": "constant",
    "zeros": "constant",
    "reflect": "reflect",
    "replicate": "replicate",
    "edge": "replicate",
    "circular": "circular",
    "wrap": "circular",
}

Pairs = tuple[tuple[int, int], ...]


# ----------------------------------------------------------------------------- validation


def _pad_mode(mode: Any) -> str:
    if not isinstance(mode, str) or mode.lower() not in _PAD_MODE_CANON:
        raise PaddingError(f"mode must be one of {PAD_MODES}, got {mode!r}")
    return _PAD_MODE_CANON[mode.lower()]


def _check_input(fname: str, input: Any, nd: int) -> tuple[Tensor, bool]:
    """Returns a batched view of ``input`` and whether the input was unbatched."""
    if not isinstance(input, Tensor):
        raise TypeError(f"{fname}(): input must be a Tensor, got {type(input).__name__}")
    if input.dim() not in (nd + 1, nd + 2):
        raise PaddingError(
            f"{fname}(): expected a {nd + 1}-D (unbatched) or {nd + 2}-D (batched) input, got "
            f"a {input.dim()}-D input of shape {tuple(input.shape)}"
        )
    if input.dim() == nd + 1:
        return input.unsqueeze(0), True
    return input, False


def _check_spatial(fname: str, x: Tensor, nd: int) -> tuple[int, ...]:
    sizes = tuple(x.shape[2:])
    if torch._C._get_tracing_state() and not _export.exporting():
        # torch.jit.trace records sizes as tensors; a traced graph is specialised to the
        # example's shape (torch warns where a size is read), as for any size-dependent Python
        sizes = tuple(int(n) for n in sizes)
    for i, n in enumerate(sizes):
        if n == 0:
            raise PaddingError(
                f"{fname}(): input has size 0 along spatial axis {i} (shape "
                f"{tuple(x.shape)}); every spatial axis needs at least one element"
            )
    return sizes


def _check_fits(fname: str, sizes: Sequence[int], pairs: Pairs, k_eff: Sequence[int]) -> None:
    for i, (n, (lo, hi), ke) in enumerate(zip(sizes, pairs, k_eff)):
        if n + lo + hi < ke:
            raise PaddingError(
                f"{fname}(): along spatial axis {i} the padded input ({n} + {lo} + {hi} = "
                f"{n + lo + hi}) is smaller than the effective kernel ({ke})"
            )


def _parse(padding: PaddingLike, nd: int, fname: str, *, negative: bool = False) -> Padding:
    try:
        return Padding.parse(padding, nd, allow_negative=negative)
    except (PaddingError, TypeError) as err:
        raise type(err)(f"{fname}(): {err}") from None


# ----------------------------------------------------------------------------- resolution


@functools.lru_cache(maxsize=8192)
def _resolve_cached(
    spec: Padding,
    k: tuple[int, ...],
    s: tuple[int, ...],
    d: tuple[int, ...],
    n: tuple[int, ...] | None,
) -> Pairs:
    return spec.resolve(k, s, d, n)


def resolve(
    spec: Padding,
    k: tuple[int, ...],
    s: tuple[int, ...],
    d: tuple[int, ...],
    n: Sequence[int],
) -> Pairs:
    """Resolve ``spec`` for an input of spatial size ``n`` (cached per shape)."""
    if _compiling():
        return spec.resolve_checked(k, s, d, tuple(n) if spec.needs_input_size(s) else None)
    if spec.needs_input_size(s):
        sizes = tuple(n)
        if all(isinstance(v, int) for v in sizes):
            return _resolve_cached(spec, k, s, d, sizes)
        return spec.resolve(k, s, d, sizes)
    return _resolve_cached(spec, k, s, d, None)


def _compiling() -> bool:
    """Inside torch.compile/export tracing, where Python-side caches must be bypassed."""
    return bool(torch.compiler.is_compiling())


def _symbolic(sizes: Sequence[Any], strides: Sequence[int], sized: bool) -> bool:
    """Pads that depend on the input size (``sized``: ``same`` at stride > 1) while it is
    traced with dynamic shapes: plans must not branch on them.

    Under ``torch.compile`` a symbolic size is not a ``torch.SymInt`` to Python code (dynamo
    passes it as an int), so the test is what the trace can tell without a guard: a static
    size has a known remainder modulo the stride (all that ``same`` pads depend on), a
    symbolic one has none.
    """
    if not sized or not _compiling():
        return False
    return any(
        s > 1 and not any(statically_known_true(n % s == r) for r in range(s))
        for n, s in zip(sizes, strides)
    )


def _k_eff(k: Sequence[int], d: Sequence[int]) -> tuple[int, ...]:
    return tuple(dd * (kk - 1) + 1 for kk, dd in zip(k, d))


def _torch_pad(pairs: Pairs) -> list[int]:
    return [v for lo_hi in reversed(pairs) for v in lo_hi]


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


# ----------------------------------------------------------------------------- native backend

#: The optional oneDNN backend: ``_backend.active`` is a hook that runs ops with per-side
#: pads in one oneDNN primitive where that is faster, returning None to decline; None runs
#: the pure-torch plans below unchanged (see padkit.native).


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
    *,
    extend: Callable[[Tensor], Tensor] | None = None,
) -> Tensor:
    """Execute a zero-padding conv :class:`~padkit.plan.Plan` on a batched input.

    ``extend`` builds the zero-extended kernel of a ``zero_extend`` plan (the layers pass
    one that caches it for frozen weights); by default the weight is padded on each call.
    """
    hook = _backend.active
    if hook is not None and plan.strategy != "native":

        def torch_plan(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
            return run_conv_torch(plan, conv, x, w, b, s, d, groups, extend)

        res: Tensor | None = hook.conv(
            plan.strategy, x, weight, bias, s, d, plan.pads, groups, torch_plan
        )
        if res is not None:
            return res
    return run_conv_torch(plan, conv, x, weight, bias, s, d, groups, extend)


def run_conv_torch(
    plan: Plan,
    conv: Any,
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    s: tuple[int, ...],
    d: tuple[int, ...],
    groups: int,
    extend: Callable[[Tensor], Tensor] | None = None,
) -> Tensor:
    """A conv plan on torch's kernels (never the optional oneDNN backend)."""
    if plan.strategy in ("zero_extend", "crop") and torch.compiler.is_exporting():
        # torch.export: F.pad + the conv with the symmetric part, the form graph quantizers
        # (PT2E) and delegates recognise (a crop's surplus outputs would be observed)
        plan = _as_residual_pad(plan)
    elif plan.strategy == "crop" and torch.compiler.is_compiling():
        # torch.compile: one F.pad, which inductor writes from the kernel that produces the
        # input (or as one cheap copy), costs less than the crop's surplus outputs
        plan = _as_residual_pad(plan)
    if plan.strategy == "zero_extend" and (
        _needs_grad(x, weight, bias) or has_torch_function((weight,))
    ):
        # training: the backward of a kernel grown by zero taps (torch's depthwise kernels,
        # channels-last most of all) costs more than one padded copy of the input; a weight
        # with __torch_function__ (torch's ExpandedWeights) cannot be padded
        plan = _as_residual_pad(plan)
    if plan.strategy == "zero_extend":
        weight = (
            extend(weight) if extend is not None else F.pad(weight, _torch_pad(plan.kernel_ext))
        )
    elif plan.strategy in ("residual_pad", "explicit"):
        x = F.pad(x, _torch_pad(plan.pre_pad))
    out: Tensor = conv(x, weight, bias, s, plan.native_padding, d, groups)
    if plan.strategy == "crop":
        out = _narrow_out(out, plan)
    return out


def _pad_value(rec: Op) -> float | None:
    """The value ``F.pad`` may give a pool's pads without changing its result: -inf for a
    max pool, 0 for an average that counts its pads; None where no value is neutral."""
    if rec.return_indices or rec.divisor_override is not None:
        return None
    if rec.kind == "max":
        return float("-inf")
    return 0.0 if rec.kind == "avg" and rec.count_include_pad else None


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


def run_pool_plan(plan: Plan, rec: Op, x: Tensor, *, mean_weight: Tensor | None = None) -> Any:
    """Execute a max or average pool :class:`~padkit.plan.Plan` that runs torch's own pool
    (``native``, ``ceil_mode``, ``crop``) or, for an average, a depthwise conv with a
    constant kernel (``zero_extend``; ``mean_weight`` is that kernel where the caller caches
    it) on a batched input of ``rec``'s op. ``explicit`` plans pad first and are the pool
    functions' own business. Returns ``(out, indices)`` for a max pool that asks for them.
    """
    nd = rec.nd
    if plan.strategy == "zero_extend":  # average pools only
        weight = mean_weight
        if weight is None:
            weight = mean_kernel(x, rec.kernel, plan.kernel_ext, rec.divisor_override)
        return _CONV[nd](x, weight, None, rec.stride, plan.native_padding, 1, x.shape[1])
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
) -> Tensor:
    """Full transposed conv output cropped by ``crops`` (end crop reduced by ``op``)."""
    sizes = tuple(x.shape[x.dim() - nd :])
    native_p, native_op, slices = transpose_layout(
        crops, op, tuple(weight.shape[2:]), s, d, sizes, fname
    )

    def torch_plan(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        return run_transpose(x, weight, bias, s, native_p, native_op, groups, d, slices)

    hook = _backend.active
    if hook is not None:
        ends = tuple((lo, hi - o) for (lo, hi), o in zip(crops, op))
        res: Tensor | None = hook.conv_transpose(x, weight, bias, s, d, ends, groups, torch_plan)
        if res is not None:
            return res
    return torch_plan(x, weight, bias)


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
) -> Tensor:
    """A :func:`transpose_layout` on torch's transposed conv (batched or not)."""
    nd = len(s)
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


# ----------------------------------------------------------------------------- pooling helpers


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


def _lowest(dtype: torch.dtype) -> float:
    if dtype.is_floating_point:
        return -math.inf
    if dtype == torch.bool:
        raise TypeError("max pooling does not support bool tensors")
    return float(torch.iinfo(dtype).min)


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
    if all(dd == 1 for dd in d) and x.dtype.is_floating_point:
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
        where=f"{fname}()",
    )
    if _export.exporting():
        return _export_pool(
            fname,
            nd,
            rec,
            input,
            lambda xx, _w, _b: _max_pool(
                fname, nd, xx, kernel_size, stride, padding, dilation, ceil_mode, False
            ),
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
    )
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
                fname, nd, t, kernel_size, stride, padding, dilation, ceil_mode, False
            ),
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
    res = explicit_max_pool(x, rec, full)
    if return_indices:
        return (res[0].squeeze(0), res[1].squeeze(0)) if unbatched else res
    return res.squeeze(0) if unbatched else res


def explicit_max_pool(x: Tensor, rec: Op, full: Pairs) -> Any:
    """An ``explicit`` max pool plan on a batched input: the input padded by ``full`` with
    the dtype's lowest value, then the unpadded pool (indices mapped back to the input)."""
    nd, k, s, d = rec.nd, rec.kernel, rec.stride, rec.dilation
    xp = _pad_windows(x, full, _lowest(x.dtype))
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
) -> Any:
    """``F.max_pool1d`` with every padkit padding form; pads never win (−∞).

    Example:
        >>> x = -torch.arange(1.0, 9.0).view(1, 1, 8)
        >>> max_pool1d(x, 3, 2, padding="same_lower")   # pads (1, 0)
        tensor([[[-1., -2., -4., -6.]]])
    """
    return _max_pool(
        "max_pool1d", 1, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices
    )


def max_pool2d(
    input: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: PaddingLike = 0,
    dilation: int | Sequence[int] = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Any:
    """``F.max_pool2d`` with every padkit padding form; pads never win (−∞).

    Example:
        >>> max_pool2d(torch.ones(1, 1, 13, 13), 2, 1, padding=((0, 1), (0, 1))).shape
        torch.Size([1, 1, 13, 13])
    """
    return _max_pool(
        "max_pool2d", 2, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices
    )


def max_pool3d(
    input: Tensor,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] | None = None,
    padding: PaddingLike = 0,
    dilation: int | Sequence[int] = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Any:
    """``F.max_pool3d`` with every padkit padding form; pads never win (−∞).

    Example:
        >>> max_pool3d(torch.ones(1, 1, 4, 5, 5), 3, 2, padding="same").shape
        torch.Size([1, 1, 2, 3, 3])
    """
    return _max_pool(
        "max_pool3d", 3, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices
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
    torch_axes = [i for i, rule in enumerate(spec.axes) if isinstance(rule, tuple) and any(rule)]
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


def channels_last(x: Tensor) -> bool:
    """``x`` is laid out channels-last (and not also plain contiguous).

    Inside ``torch.func`` transforms (``vmap`` cannot answer ``is_contiguous`` for a memory
    format) the layout is read from the strides, with torch's own rule.
    """
    fmt = {4: torch.channels_last, 5: torch.channels_last_3d}.get(x.dim())
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
    total = _window_sum(x.pow(norm_type), nd, k, s, d, full)
    out = total.pow(1.0 / norm_type)
    return out.squeeze(0) if unbatched else out


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

    Pads contribute zero. Unlike torch, a ``ceil_mode`` window that hangs past the input
    sums only what it covers (torch rescales it by ``kernel / covered``).

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


# torch.fx: a traced model records each of these as one call (its padding is resolved when the
# graph runs, from the actual input size), instead of tracing into padkit's Python
for _name in (
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "lp_pool1d",
    "lp_pool2d",
    "lp_pool3d",
    "pad",
):
    torch.fx.wrap(_name)
del _name
