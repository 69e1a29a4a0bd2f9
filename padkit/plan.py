"""Execution plans: the cheapest exact way to run an op with per-side pads.

PyTorch's conv and pool kernels take one symmetric pad per axis. Per-side pads are
cheapest when they never become a padded copy of the input. For each op, resolved
pads, input shape, dtype, layout and device, :func:`plan_conv` and :func:`plan_pool`
pick one exact lowering:

``native``
    the pads are symmetric (and, for pools, at most half the kernel): the op as is.
``crop``
    native padding ``max(lo, hi)``, then a view that drops the surplus outputs. Exact
    when the surplus on the low side is a whole number of strides (any stride when
    ``lo > hi``; stride 1 always): causal TCNs, even kernels, ``same_lower``.
``zero_extend``
    the kernel grows by zero taps on the short side and the pad becomes symmetric:
    no input copy, a few more multiply-adds (exact when the surplus is a whole number
    of dilations). Chosen for depthwise and other grouped convs, which are memory-bound.
    Under autograd the conv runs as ``residual_pad`` instead: the backward of the grown
    kernel costs more than one padded copy (see docs/performance.md).
``ceil_mode``
    pools with ``lo <= hi`` whose extra end pad is exactly what ``ceil_mode`` adds.
``residual_pad``
    native ``min(lo, hi)`` plus ``F.pad`` of the rest (dense convs).
``explicit``
    ``F.pad`` of everything, then the op unpadded (non-zero padding modes, pads larger
    than torch's pools accept, dilated average pools, ...).

Every plan is exact: it equals the explicit ``F.pad`` reference bit for bit or to
float rounding (tests check every strategy against that reference). Two read elements
outside an output's window and are exact for finite inputs only: ``zero_extend`` (its
zero taps make ``0 * inf = NaN``) and, for a weight's gradient, ``crop`` (its dropped
outputs' zero gradients meet the input). The executors in :mod:`padkit.functional` keep
their result only where its output is finite (``padkit._finite.all_finite``, which proves
no tap met a NaN or an infinity), and compute the exact ``residual_pad`` (or ``F.pad`` and
the pool) otherwise, so NaN and infinities stay where torch puts them.

Under ``torch.compile(dynamic=True)`` and ``torch.export`` with dynamic dims the input
sizes are symbolic. Plans then choose from static facts only (kernel, stride, dilation,
the rule's pads): a condition on the size counts only where it holds without a guard
(:func:`_known`), so a compiled model is not specialised to its input size; pads that
depend on the size (``same`` at stride > 1) take the ``explicit`` plan, whose pads are
symbolic arithmetic.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from torch import sym_max

from ._sym import statically_known_true
from .spec import pool_output_size

__all__ = ["STRATEGIES", "Plan", "plan_conv", "plan_pool"]

STRATEGIES = ("native", "crop", "zero_extend", "ceil_mode", "residual_pad", "explicit")

Pairs = tuple[tuple[int, int], ...]

#: a ``crop`` plan may compute at most this much more output than it keeps
_CROP_MAX_SURPLUS = 1.34


@dataclass(frozen=True)
class Plan:
    """What runs for one op on one input shape.

    Attributes:
        op: ``"conv"``, ``"max_pool"`` or ``"avg_pool"``.
        strategy: one of :data:`STRATEGIES`.
        pads: the resolved ``(lo, hi)`` pads it implements.
        native_padding: the symmetric padding handed to the torch kernel.
        pre_pad: ``(lo, hi)`` per axis applied to the input with ``F.pad`` first.
        kernel_ext: zero taps ``(lo, hi)`` per axis added to the kernel.
        skip: outputs dropped at the start of each axis (``crop``).
        out_size: the output size per axis.
        ceil_mode: the torch kernel runs with ``ceil_mode=True``.
        reason: why this strategy, in words.

    Example:
        >>> p = plan_conv(((0, 1), (0, 1)), (3, 3), (2, 2), (1, 1), (112, 112), groups=32,
        ...               in_channels=32)
        >>> p.strategy, p.native_padding, p.kernel_ext
        ('zero_extend', (1, 1), ((1, 0), (1, 0)))
    """

    op: str
    strategy: str
    pads: Pairs
    native_padding: tuple[int, ...]
    pre_pad: Pairs
    kernel_ext: Pairs
    skip: tuple[int, ...]
    out_size: tuple[int, ...]
    ceil_mode: bool
    reason: str

    def describe(self) -> str:
        """One line: the strategy and why."""
        return f"{self.op}: {self.strategy} (pads {list(self.pads)}) - {self.reason}"

    def __str__(self) -> str:
        return self.describe()


def _known(cond: object) -> bool:
    """``cond`` holds for certain: a plain bool as is; for symbolic sizes, only where it
    holds without adding a guard on the size (so a dynamic-shape trace stays general)."""
    return bool(statically_known_true(cond))


def _zeros(nd: int) -> Pairs:
    return ((0, 0),) * nd


def _conv_out(n: int, k: int, s: int, d: int, lo: int, hi: int) -> int:
    return (n + lo + hi - (d * (k - 1) + 1)) // s + 1


_SYMBOLIC = "a symbolic input size (dynamic shapes): one pad, no size-specialised choice"


def _ratio(counts: tuple[int, int], traced: bool) -> str:
    # while tracing, the sizes (and so the ratio) may be symbolic: nothing to print
    got, want = counts
    return "more outputs than kept" if traced else f"{got / want:.2f}x"


def _symbolic_plan(
    op: str,
    pairs: Pairs,
    k: tuple[int, ...],
    s: tuple[int, ...],
    d: tuple[int, ...],
    n: tuple[int, ...],
    ceil_mode: bool = False,
) -> Plan:
    nd = len(pairs)
    if op == "conv":
        out = tuple(_conv_out(*a, *p) for a, p in zip(zip(n, k, s, d), pairs))
    else:
        out = tuple(
            pool_output_size(nn, kk, ss, dd, lo, hi, ceil_mode)
            for nn, kk, ss, dd, (lo, hi) in zip(n, k, s, d, pairs)
        )
    zero = _zeros(nd)
    return Plan(op, "explicit", pairs, (0,) * nd, pairs, zero, (0,) * nd, out, False, _SYMBOLIC)


def _crop_layout(
    pairs: Pairs, k: Sequence[int], s: Sequence[int], d: Sequence[int], n: Sequence[int]
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, int]] | None:
    """Native padding, leading outputs to skip, and the outputs computed and kept (the
    surplus factor is their ratio); None if inexact."""
    native: list[int] = []
    skip: list[int] = []
    got_all: Any = 1  # int, or a SymInt while tracing with dynamic shapes
    want_all: Any = 1
    for (lo, hi), kk, ss, dd, nn in zip(pairs, k, s, d, n):
        p = max(lo, hi)
        if (p - lo) % ss:
            return None
        native.append(p)
        skip.append((p - lo) // ss)
        want_all = want_all * sym_max(_conv_out(nn, kk, ss, dd, lo, hi), 1)
        got_all = got_all * _conv_out(nn, kk, ss, dd, p, p)
    return tuple(native), tuple(skip), (got_all, want_all)


def _surplus_ok(counts: tuple[int, int]) -> bool:
    """A crop computes at most ``_CROP_MAX_SURPLUS`` times the outputs it keeps; for a
    symbolic size, unless it provably computes more (the surplus only matters for inputs
    a few kernels long)."""
    got, want = counts
    return not _known(got * 100 > want * round(_CROP_MAX_SURPLUS * 100))


def _dilated_overpad(native: Sequence[int], k: Sequence[int], d: Sequence[int]) -> bool:
    """A dilated conv asked for more native padding than ``d*(k-1)//2`` on some axis.

    oneDNN then leaves its direct kernel for im2col + GEMM on several (k, d) (k3 d4:
    1.25x native, against 1.04-1.09x for one ``F.pad`` and an unpadded conv; see
    docs/performance.md), so such convs take ``residual_pad`` instead of ``crop``.
    """
    return any(dd > 1 and p > dd * (kk - 1) // 2 for p, kk, dd in zip(native, k, d))


def _extend_layout(pairs: Pairs, d: Sequence[int]) -> tuple[tuple[int, ...], Pairs] | None:
    native: list[int] = []
    ext: list[tuple[int, int]] = []
    for (lo, hi), dd in zip(pairs, d):
        if (hi - lo) % dd:
            return None
        native.append(max(lo, hi))
        ext.append(((hi - lo) // dd, 0) if hi > lo else (0, (lo - hi) // dd))
    return tuple(native), tuple(ext)


@functools.lru_cache(maxsize=4096)
def _plan_conv_cached(
    pairs: Pairs,
    k: tuple[int, ...],
    s: tuple[int, ...],
    d: tuple[int, ...],
    n: tuple[int, ...],
    groups: int,
    in_channels: int,
    padding_mode: str,
) -> Plan:
    return _plan_conv(pairs, k, s, d, n, groups, in_channels, padding_mode)


def plan_conv(
    pairs: Pairs,
    k: Sequence[int],
    s: Sequence[int],
    d: Sequence[int],
    n: Sequence[int],
    *,
    groups: int = 1,
    in_channels: int = 1,
    padding_mode: str = "zeros",
    cache: bool = True,
    symbolic: bool = False,
) -> Plan:
    """The plan for a conv with resolved ``pairs`` on spatial input size ``n``.

    Plans are cached per shape unless ``cache=False`` (padkit passes that while
    ``torch.compile`` traces, which plans once per graph anyway). ``symbolic=True`` (pads
    that depend on a size traced with dynamic shapes) picks the explicit plan, which needs
    no guard on the size.
    """
    args = (tuple(pairs), tuple(k), tuple(s), tuple(d), tuple(n))
    if symbolic:
        return _symbolic_plan("conv", args[0], args[1], args[2], args[3], args[4])
    if cache and all(isinstance(v, int) for v in args[4]):
        return _plan_conv_cached(*args, groups, in_channels, padding_mode)
    return _plan_conv(*args, groups, in_channels, padding_mode, traced=not cache)


def _plan_conv(
    pairs: Pairs,
    k: tuple[int, ...],
    s: tuple[int, ...],
    d: tuple[int, ...],
    n: tuple[int, ...],
    groups: int,
    in_channels: int,
    padding_mode: str,
    traced: bool = False,
) -> Plan:
    nd = len(pairs)
    out = tuple(_conv_out(*a, *p) for a, p in zip(zip(n, k, s, d), pairs))
    zero, none = _zeros(nd), (0,) * nd

    def make(strategy: str, native: Sequence[int], reason: str, **kw: object) -> Plan:
        return Plan(
            "conv",
            strategy,
            pairs,
            tuple(native),
            kw.get("pre_pad", zero),  # type: ignore[arg-type]
            kw.get("kernel_ext", zero),  # type: ignore[arg-type]
            kw.get("skip", none),  # type: ignore[arg-type]
            out,
            False,
            reason,
        )

    if padding_mode != "zeros":
        if all(lo == 0 and hi == 0 for lo, hi in pairs):
            return make("native", none, "no padding")
        return make(
            "explicit", none, f"{padding_mode} padding is a copy of the input", pre_pad=pairs
        )
    if all(lo == hi for lo, hi in pairs):
        return make("native", [lo for lo, _ in pairs], "symmetric pads")
    crop = _crop_layout(pairs, k, s, d, n)
    if crop is not None and _surplus_ok(crop[2]) and not _dilated_overpad(crop[0], k, d):
        native, skip, counts = crop
        return make(
            "crop",
            native,
            f"symmetric padding {native}, then a view without the surplus outputs "
            f"({_ratio(counts, traced)} computed)",
            skip=skip,
        )
    grouped = groups > 1 and groups == in_channels
    ext = _extend_layout(pairs, d)
    if grouped and ext is not None:
        native, kernel_ext = ext
        return make(
            "zero_extend",
            native,
            "depthwise conv: zero taps on the short side, symmetric padding, no input copy",
            kernel_ext=kernel_ext,
        )
    sym, residual = _residual_layout(pairs)
    return make("residual_pad", sym, _RESIDUAL, pre_pad=residual)


_RESIDUAL = "dense conv: symmetric part native, the rest one F.pad"


def _residual_layout(pairs: Pairs) -> tuple[tuple[int, ...], Pairs]:
    """The symmetric part of each axis's pads (native) and the rest (one ``F.pad``)."""
    sym = tuple(min(lo, hi) for lo, hi in pairs)
    return sym, tuple((lo - m, hi - m) for (lo, hi), m in zip(pairs, sym))


def _as_residual_pad(plan: Plan) -> Plan:
    """A ``zero_extend`` conv plan as ``residual_pad``: what runs under autograd, where the
    backward of the kernel grown by zero taps costs more than one padded copy. (Not
    cached: ``torch.compile`` traces this, and dynamo refuses ``lru_cache`` wrappers.)"""
    sym, residual = _residual_layout(plan.pads)
    # built field by field: dataclasses.replace, traced, leaves the compiled graph a guard
    # on each of its globals, checked on every call
    return Plan(
        plan.op,
        "residual_pad",
        plan.pads,
        sym,
        residual,
        _zeros(len(plan.pads)),
        plan.skip,
        plan.out_size,
        plan.ceil_mode,
        _RESIDUAL + " (under autograd or a compiler, in place of zero taps)",
    )


@functools.lru_cache(maxsize=4096)
def _plan_pool_cached(
    op: str,
    pairs: Pairs,
    k: tuple[int, ...],
    s: tuple[int, ...],
    d: tuple[int, ...],
    n: tuple[int, ...],
    ceil_mode: bool,
    count_include_pad: bool,
    native_dtype: bool,
    float_input: bool,
    channels_last: bool,
    neutral_pads: bool = True,
) -> Plan:
    return _plan_pool(
        op,
        pairs,
        k,
        s,
        d,
        n,
        ceil_mode,
        count_include_pad,
        native_dtype,
        float_input,
        channels_last,
        neutral_pads,
    )


def plan_pool(
    op: str,
    pairs: Pairs,
    k: Sequence[int],
    s: Sequence[int],
    d: Sequence[int],
    n: Sequence[int],
    *,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    native_dtype: bool = True,
    float_input: bool = True,
    channels_last: bool = False,
    cache: bool = True,
    symbolic: bool = False,
    neutral_pads: bool = True,
) -> Plan:
    """The plan for a ``"max_pool"``, ``"avg_pool"`` or ``"lp_pool"`` with resolved ``pairs``.

    ``cache`` and ``symbolic`` as for :func:`plan_conv`. ``neutral_pads=False``: a max pool
    whose pads hold a value that may win (``padding_value`` other than -inf), which
    torch's own pool padding cannot give: any nonzero pads are ``explicit``.

    Example:
        >>> plan_pool("max_pool", ((0, 1), (0, 1)), (3, 3), (2, 2), (1, 1), (112, 112)).strategy
        'ceil_mode'
    """
    args = (op, tuple(pairs), tuple(k), tuple(s), tuple(d), tuple(n))
    if symbolic:
        return _symbolic_plan(op, *args[1:], bool(ceil_mode))
    if cache and all(isinstance(v, int) for v in args[5]):
        return _plan_pool_cached(
            *args,
            bool(ceil_mode),
            bool(count_include_pad),
            native_dtype,
            float_input,
            channels_last,
            neutral_pads,
        )
    return _plan_pool(
        *args,
        bool(ceil_mode),
        bool(count_include_pad),
        native_dtype,
        float_input,
        channels_last,
        neutral_pads,
        traced=not cache,
    )


def _ceil_overhang_always(k: int, s: int, d: int, lo: int, hi: int) -> bool:
    """``ceil_mode`` with pads ``(lo, lo)`` gives the windows of pads ``(lo, hi)`` at every
    input size. Both output lengths grow by one when the size grows by ``s`` (ceil mode's
    dropped last window included), so one period of sizes from the smallest that fits
    decides it: a static fact, where a symbolic size must not be compared."""
    first = max(d * (k - 1) + 1 - lo - hi, 1)
    return all(
        pool_output_size(n, k, s, d, lo, lo, True) == pool_output_size(n, k, s, d, lo, hi)
        for n in range(first, first + s)
    )


def _plan_pool(
    op: str,
    pairs: Pairs,
    k: tuple[int, ...],
    s: tuple[int, ...],
    d: tuple[int, ...],
    n: tuple[int, ...],
    ceil_mode: bool,
    count_include_pad: bool,
    native_dtype: bool,
    float_input: bool = True,
    channels_last: bool = False,
    neutral_pads: bool = True,
    traced: bool = False,
) -> Plan:
    nd = len(pairs)
    zero, none = _zeros(nd), (0,) * nd
    out = tuple(
        pool_output_size(nn, kk, ss, dd, lo, hi, ceil_mode)
        for nn, kk, ss, dd, (lo, hi) in zip(n, k, s, d, pairs)
    )

    def make(strategy: str, native: Sequence[int], reason: str, **kw: object) -> Plan:
        return Plan(
            op,
            strategy,
            pairs,
            tuple(native),
            kw.get("pre_pad", zero),  # type: ignore[arg-type]
            kw.get("kernel_ext", zero),  # type: ignore[arg-type]
            kw.get("skip", none),  # type: ignore[arg-type]
            out,
            bool(kw.get("ceil", False)),
            reason,
        )

    def explicit(reason: str) -> Plan:
        return make("explicit", none, reason, pre_pad=pairs)

    undilated = all(dd == 1 for dd in d)
    if op == "lp_pool":
        return explicit("LP pooling sums x**p over each window of the zero-padded input")
    if not neutral_pads and any(lo or hi for lo, hi in pairs):
        return explicit("the pads hold padding_value, which torch's pool padding cannot hold")
    if op == "avg_pool" and not undilated:
        return explicit("torch's avg_pool has no dilation: window sums over a strided view")
    if not native_dtype:
        return explicit("the dtype has no native kernel for this pool")
    if op == "avg_pool" and nd == 3 and not all(_known(nn >= kk) for nn, kk in zip(n, k)):
        return explicit("torch's avg_pool3d refuses an input shorter than the kernel")

    def fits(p: Sequence[int]) -> bool:  # torch: pad <= kernel // 2 (raw kernel)
        return all(pp <= kk // 2 for pp, kk in zip(p, k))

    if all(lo == hi for lo, hi in pairs) and fits([lo for lo, _ in pairs]):
        return make("native", [lo for lo, _ in pairs], "symmetric pads", ceil=ceil_mode)

    if (
        op == "avg_pool"
        and count_include_pad
        and not ceil_mode
        and float_input
        and not channels_last
    ):
        # a constant divisor: the window mean is a depthwise conv with a 1/k kernel, and
        # torch's depthwise conv beats its own avg_pool in NCHW (0.12-0.20x, see
        # docs/performance.md; not in channels_last, where the pool is fast); zero taps on
        # the short side keep the padding symmetric
        native, kernel_ext = _extend_layout(pairs, d)  # type: ignore[misc]
        return make(
            "zero_extend",
            native,
            "average counting its pads: a depthwise conv with a constant kernel, zero taps "
            "on the short side, symmetric padding, no input copy",
            kernel_ext=kernel_ext,
        )

    # ceil_mode: the end pad is exactly the ceil overhang (pads never counted)
    lows = [lo for lo, _ in pairs]
    if (
        all(lo <= hi for lo, hi in pairs)
        and fits(lows)
        and (op == "max_pool" or not count_include_pad)
        and all(
            # traced, the size may be symbolic: only what holds at every size counts
            _ceil_overhang_always(kk, ss, dd, lo, hi)
            if traced
            else pool_output_size(nn, kk, ss, dd, lo, lo, True) == o
            for nn, kk, ss, dd, (lo, hi), o in zip(n, k, s, d, pairs, out)
        )
    ):
        return make(
            "ceil_mode",
            lows,
            "the end pads are the ceil_mode overhang, which never counts",
            ceil=True,
        )

    if not ceil_mode:
        crop = _crop_layout(pairs, k, s, d, n)
        if crop is not None and fits(crop[0]) and _surplus_ok(crop[2]):
            native, skip, counts = crop
            return make(
                "crop",
                native,
                f"symmetric padding {native}, then a view without the surplus outputs "
                f"({_ratio(counts, traced)} computed)",
                skip=skip,
            )
    if any(lo > kk // 2 or hi > kk // 2 for (lo, hi), kk in zip(pairs, k)):
        return explicit("pads exceed half the kernel, which torch's pools refuse")
    return explicit("asymmetric pads with no cheaper exact lowering")
