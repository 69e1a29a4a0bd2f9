"""padkit against onnxruntime single-node models (float32 in ORT, float64 in padkit).

ORT 1.32 deviations that these tests steer around, so that every
comparison below is against a config ORT computes correctly:

* Conv with ``auto_pad=SAME_*`` and dilation != 1 is refused (INVALID_ARGUMENT), so the
  auto_pad Conv cases use dilation 1; dilated convs are tested with explicit pads.
* MaxPool/AveragePool with ``auto_pad=SAME_*`` ignore the dilation when sizing the pads,
  and refuse SAME with kernel < stride: SAME pools here have dilation 1 and
  k >= s (JAX covers the rest in test_reference_jax.py).
* Pools require every pad < kernel ("Pad should be smaller than kernel").
* ConvTranspose SAME_* with k_eff < stride returns the uncropped ``(n-1)*s + k_eff`` instead
  of the spec's (and TF's) ``n*s``, so those cases are left to the JAX vjp oracle.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st
from oracles import (
    ort_avg_pool,
    ort_conv,
    ort_conv_transpose,
    ort_lp_pool,
    ort_max_pool,
    ort_pad,
    to_numpy,
)

import padkit
import padkit.functional as PF
from padkit import PaddingError

# hypothesis's failure report imports a module that warns under filterwarnings=error
pytestmark = pytest.mark.filterwarnings(
    "ignore:mypy_extensions.TypedDict is deprecated:DeprecationWarning"
)

RTOL = ATOL = 2e-5
FLT_LOWEST = np.finfo(np.float32).min
Ints = tuple[int, ...]

CONV: dict[int, Callable[..., torch.Tensor]] = {1: PF.conv1d, 2: PF.conv2d, 3: PF.conv3d}
CONV_T: dict[int, Callable[..., torch.Tensor]] = {
    1: PF.conv_transpose1d,
    2: PF.conv_transpose2d,
    3: PF.conv_transpose3d,
}
MAX_POOL: dict[int, Callable[..., Any]] = {1: PF.max_pool1d, 2: PF.max_pool2d, 3: PF.max_pool3d}
AVG_POOL: dict[int, Callable[..., torch.Tensor]] = {
    1: PF.avg_pool1d,
    2: PF.avg_pool2d,
    3: PF.avg_pool3d,
}
LP_POOL: dict[int, Callable[..., torch.Tensor]] = {
    1: PF.lp_pool1d,
    2: PF.lp_pool2d,
    3: PF.lp_pool3d,
}
AUTO_PAD = {"SAME_UPPER": "same", "SAME_LOWER": "same_lower", "VALID": "valid"}


def rand32(shape: Sequence[int], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(tuple(shape)).astype(np.float32)


def t64(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(a.astype(np.float64))


def pairs_of(pads: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """ONNX ``pads`` ``[b1, b2, ..., e1, e2, ...]`` as (lo, hi) pairs, written out here."""
    half = len(pads) // 2
    return tuple((pads[i], pads[half + i]) for i in range(half))


def assert_matches(actual: torch.Tensor, expected: np.ndarray) -> None:
    got = to_numpy(actual)
    assert got.shape == expected.shape, f"shape {got.shape} != ORT {expected.shape}"
    np.testing.assert_allclose(got, expected.astype(np.float64), rtol=RTOL, atol=ATOL)


def ort_max(x: np.ndarray, *args: Any, **kwargs: Any) -> np.ndarray:
    """ORT MaxPool, with a window that covers no input (ORT: -FLT_MAX) read as -inf."""
    out = ort_max_pool(x, *args, **kwargs)
    return np.where(out == FLT_LOWEST, -np.inf, out)


def case_id(*parts: Any) -> str:
    return "-".join(str(p).replace(" ", "") for p in parts)


# ----------------------------------------------------------------------------- Conv

CONV_PADS = [
    # (sizes, k, strides, dilations, pads, groups)
    ((7,), (3,), (1,), (1,), [1, 0], 1),  # ORT Conv1D_asymmetric_padding
    ((8,), (4,), (2,), (1,), [0, 3], 1),
    ((9,), (3,), (3,), (2,), [4, 1], 2),
    ((5,), (5,), (2,), (1,), [2, 3], 1),
    ((3,), (4,), (1,), (2,), [3, 3], 1),  # input smaller than the kernel
    ((7, 5), (3, 3), (2, 2), (1, 1), [1, 1, 1, 2], 1),  # ORT Conv2D_1 pads
    ((7, 5), (3, 2), (2, 1), (1, 1), [1, 0, 1, 0], 1),  # ONNX strides+asymmetric padding
    ((6, 6), (2, 3), (1, 3), (3, 1), [0, 2, 3, 1], 2),
    ((6, 8), (3, 3), (1, 1), (1, 1), [1, 1, 1, 1], 4),  # depthwise
    ((4, 5, 3), (3, 2, 2), (2, 1, 3), (1, 2, 1), [0, 1, 2, 2, 0, 1], 1),
    ((3, 3, 4), (2, 3, 3), (1, 2, 2), (2, 1, 1), [1, 2, 0, 0, 1, 1], 2),
]


@pytest.mark.parametrize(
    ("sizes", "k", "s", "d", "pads", "groups"),
    [pytest.param(*c, id=case_id(f"{len(c[0])}d", *c)) for c in CONV_PADS],
)
def test_conv_explicit_pads_match_ort(
    sizes: Ints, k: Ints, s: Ints, d: Ints, pads: list[int], groups: int
) -> None:
    x = rand32((2, 4, *sizes), 0)
    w = rand32((4, 4 // groups, *k), 1)
    expected = ort_conv(x, w, s, pads=pads, dilations=d, group=groups)
    got = CONV[len(sizes)](
        t64(x), t64(w), stride=s, padding=pairs_of(pads), dilation=d, groups=groups
    )
    assert_matches(got, expected)
    # padkit's own ONNX-layout reader gives the same spec
    from_onnx = padkit.Padding.from_onnx(pads=pads)
    assert from_onnx.resolve(k, s, d) == pairs_of(pads)
    assert padkit.Padding.parse(pairs_of(pads)).to_onnx_pads() == list(pads)


# n, k, s: odd/even kernels, strides 1-3, inputs smaller than the kernel
AUTO_1D = [(8, 3, 2), (7, 3, 2), (6, 4, 1), (5, 2, 1), (9, 4, 3), (10, 5, 2), (3, 5, 2), (2, 4, 3)]


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize(
    ("n", "k", "s"), [pytest.param(*c, id=f"n{c[0]}k{c[1]}s{c[2]}") for c in AUTO_1D]
)
def test_conv1d_auto_pad_matches_ort(n: int, k: int, s: int, auto_pad: str) -> None:
    # dilation 1 only: ORT refuses a dilated Conv with auto_pad SAME_*
    x = rand32((1, 2, n), n)
    w = rand32((3, 2, k), k)
    padding = AUTO_PAD[auto_pad]
    if auto_pad == "VALID" and n < k:
        with pytest.raises(PaddingError):
            PF.conv1d(t64(x), t64(w), stride=s, padding=padding)
        return
    expected = ort_conv(x, w, (s,), auto_pad=auto_pad)
    assert_matches(PF.conv1d(t64(x), t64(w), stride=s, padding=padding), expected)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize(
    ("sizes", "k", "s"),
    [
        pytest.param((8, 7), (3, 4), (2, 3), id="2d"),
        pytest.param((9, 10), (4, 2), (3, 2), id="2d-even"),
        pytest.param((5, 4, 6), (3, 2, 4), (2, 1, 3), id="3d"),
    ],
)
def test_conv_nd_auto_pad_matches_ort(sizes: Ints, k: Ints, s: Ints, auto_pad: str) -> None:
    x = rand32((1, 2, *sizes), 3)
    w = rand32((2, 2, *k), 4)
    expected = ort_conv(x, w, s, auto_pad=auto_pad)
    got = CONV[len(sizes)](t64(x), t64(w), stride=s, padding=AUTO_PAD[auto_pad])
    assert_matches(got, expected)
    spec = padkit.Padding.from_onnx(auto_pad=auto_pad, ndim=len(sizes))
    assert_matches(CONV[len(sizes)](t64(x), t64(w), stride=s, padding=spec), expected)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_conv_explicit_pads_property_matches_ort(data: Any, seed: int) -> None:
    draw = data.draw
    nd = draw(st.integers(1, 3))
    sizes = tuple(draw(st.integers(1, {1: 10, 2: 7, 3: 5}[nd])) for _ in range(nd))
    k = tuple(draw(st.integers(1, 4)) for _ in range(nd))
    s = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    d = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    pads = [draw(st.integers(0, 4)) for _ in range(2 * nd)]
    groups = draw(st.sampled_from([1, 2]))
    x = rand32((1, 2, *sizes), seed)
    w = rand32((2, 2 // groups, *k), seed + 1)
    padding = pairs_of(pads)
    fits = all(
        n + lo + hi >= dd * (kk - 1) + 1 for n, (lo, hi), kk, dd in zip(sizes, padding, k, d)
    )
    conv = CONV[nd]
    if not fits:
        with pytest.raises(PaddingError):
            conv(t64(x), t64(w), stride=s, padding=padding, dilation=d, groups=groups)
        return
    expected = ort_conv(x, w, s, pads=pads, dilations=d, group=groups)
    got = conv(t64(x), t64(w), stride=s, padding=padding, dilation=d, groups=groups)
    assert_matches(got, expected)


# ----------------------------------------------------------------------------- ConvTranspose

CONV_T_PADS = [
    # (sizes, k, strides, dilations, pads, output_padding, groups)
    ((3,), (3,), (2,), (1,), [1, 1], [1], 1),
    ((4,), (4,), (2,), (1,), [0, 2], [0], 1),
    ((4,), (4,), (3,), (1,), [2, 0], [2], 1),
    ((5,), (3,), (2,), (2,), [1, 3], [1], 2),
    ((3,), (2,), (1,), (3,), [0, 1], [0], 1),  # dilated (ORT wants output_padding < stride)
    ((3, 4), (3, 4), (2, 2), (1, 1), [0, 1, 1, 2], [1, 0], 1),
    ((3, 3), (3, 2), (2, 3), (2, 1), [2, 0, 1, 1], [0, 2], 2),
    ((2, 3, 2), (2, 3, 3), (2, 1, 2), (1, 1, 2), [0, 1, 2, 1, 0, 1], [1, 0, 0], 1),
]


@pytest.mark.parametrize(
    ("sizes", "k", "s", "d", "pads", "output_padding", "groups"),
    [pytest.param(*c, id=case_id(f"{len(c[0])}d", *c)) for c in CONV_T_PADS],
)
def test_conv_transpose_pads_match_ort(
    sizes: Ints,
    k: Ints,
    s: Ints,
    d: Ints,
    pads: list[int],
    output_padding: list[int],
    groups: int,
) -> None:
    x = rand32((1, 2, *sizes), 5)
    w = rand32((2, 4 // groups, *k), 6)
    expected = ort_conv_transpose(
        x, w, s, pads=pads, dilations=d, output_padding=output_padding, group=groups
    )
    got = CONV_T[len(sizes)](
        t64(x),
        t64(w),
        stride=s,
        padding=pairs_of(pads),
        output_padding=output_padding,
        groups=groups,
        dilation=d,
    )
    assert_matches(got, expected)


CONV_T_AUTO = [
    # (sizes, k, s, d): k_eff >= s (see the module docstring), odd and even total crops
    ((3,), (3,), (2,), (1,)),  # transposed 'same', k=3 s=2
    ((4,), (4,), (2,), (1,)),
    ((5,), (5,), (2,), (1,)),
    ((3,), (4,), (3,), (1,)),
    ((4,), (2,), (2,), (3,)),  # dilated: ORT's ConvTranspose accepts it
    ((3, 4), (4, 3), (2, 3), (1, 1)),
    ((3, 2), (3, 3), (2, 2), (2, 1)),
    ((2, 3, 2), (3, 2, 4), (2, 2, 3), (1, 1, 1)),
]


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize(
    ("sizes", "k", "s", "d"), [pytest.param(*c, id=case_id(*c)) for c in CONV_T_AUTO]
)
def test_conv_transpose_auto_pad_matches_ort(
    sizes: Ints, k: Ints, s: Ints, d: Ints, auto_pad: str
) -> None:
    x = rand32((1, 2, *sizes), 7)
    w = rand32((2, 3, *k), 8)
    expected = ort_conv_transpose(x, w, s, auto_pad=auto_pad, dilations=d)
    got = CONV_T[len(sizes)](t64(x), t64(w), stride=s, padding=AUTO_PAD[auto_pad], dilation=d)
    assert_matches(got, expected)
    assert got.shape[2:] == tuple(n * ss for n, ss in zip(sizes, s))


# ----------------------------------------------------------------------------- pools


def has_empty_window(
    sizes: Sequence[int], out: Sequence[int], k: Ints, s: Ints, d: Ints, lo: Sequence[int]
) -> bool:
    """Whether some window of a pool (output sizes ``out``) covers no input element."""
    for n, o_len, kk, ss, dd, lo_i in zip(sizes, out, k, s, d, lo):
        for o in range(o_len):
            if not any(0 <= o * ss - lo_i + t * dd < n for t in range(kk)):
                return True
    return False


POOL_PADS = [
    # (sizes, k, strides, dilations, pads); every pad < kernel (ORT's rule)
    ((5,), (2,), (2,), (1,), [1, 1]),
    ((6,), (3,), (2,), (1,), [1, 1]),
    ((4,), (2,), (2,), (1,), [0, 1]),
    ((5,), (4,), (4,), (1,), [0, 0]),  # ceil overhang >= 2
    ((9,), (3,), (2,), (1,), [2, 0]),  # pads > k/2: torch's native pool refuses them
    ((8,), (4,), (3,), (1,), [3, 1]),
    ((9,), (3,), (2,), (2,), [2, 1]),  # dilated, explicit pads
    ((7,), (2,), (1,), (3,), [1, 0]),
    ((7, 6), (3, 2), (2, 2), (1, 1), [0, 1, 2, 0]),
    ((3, 3), (2, 2), (1, 1), (1, 1), [0, 1, 0, 0]),  # 2-d pads layout
    ((6, 7), (3, 3), (3, 2), (2, 1), [1, 2, 2, 0]),
    ((5, 4, 6), (2, 3, 3), (2, 1, 2), (1, 1, 1), [1, 0, 2, 0, 2, 1]),
    ((4, 5, 5), (3, 2, 2), (2, 2, 1), (1, 2, 1), [0, 1, 1, 2, 1, 0]),
]
POOL_IDS = [case_id(f"{len(c[0])}d", *c) for c in POOL_PADS]


@pytest.mark.parametrize("ceil_mode", [False, True], ids=["floor", "ceil"])
@pytest.mark.parametrize(
    ("sizes", "k", "s", "d", "pads"),
    [pytest.param(*c, id=i) for c, i in zip(POOL_PADS, POOL_IDS)],
)
def test_max_pool_pads_match_ort(
    sizes: Ints, k: Ints, s: Ints, d: Ints, pads: list[int], ceil_mode: bool
) -> None:
    x = -1.0 - np.abs(rand32((2, 3, *sizes), 9))  # negative: a zero pad would win
    expected = ort_max(x, k, s, pads=pads, dilations=d, ceil_mode=ceil_mode)
    got = MAX_POOL[len(sizes)](
        t64(x), k, s, padding=pairs_of(pads), dilation=d, ceil_mode=ceil_mode
    )
    assert_matches(got, expected)


@pytest.mark.parametrize("count_include_pad", [False, True], ids=["cip0", "cip1"])
@pytest.mark.parametrize("ceil_mode", [False, True], ids=["floor", "ceil"])
@pytest.mark.parametrize(
    ("sizes", "k", "s", "d", "pads"),
    [pytest.param(*c, id=i) for c, i in zip(POOL_PADS, POOL_IDS)],
)
def test_avg_pool_pads_match_ort(
    sizes: Ints,
    k: Ints,
    s: Ints,
    d: Ints,
    pads: list[int],
    ceil_mode: bool,
    count_include_pad: bool,
) -> None:
    x = rand32((2, 3, *sizes), 10)
    expected = ort_avg_pool(
        x, k, s, pads=pads, dilations=d, ceil_mode=ceil_mode, count_include_pad=count_include_pad
    )

    def call() -> torch.Tensor:
        return AVG_POOL[len(sizes)](
            t64(x),
            k,
            s,
            padding=pairs_of(pads),
            ceil_mode=ceil_mode,
            count_include_pad=count_include_pad,
            dilation=d,
        )

    nd = len(sizes)
    if not count_include_pad and has_empty_window(sizes, expected.shape[2:], k, s, d, pads[:nd]):
        with pytest.raises(PaddingError):  # 0/0: padkit refuses, ORT makes something up
            call()
        return
    assert_matches(call(), expected)


POOL_AUTO = [
    # (sizes, k, s): dilation 1 and k >= s only (see the module docstring)
    ((8,), (3,), (2,)),
    ((7,), (3,), (2,)),
    ((6,), (2,), (2,)),
    ((9,), (4,), (3,)),
    ((5,), (4,), (1,)),
    ((3,), (5,), (2,)),  # input smaller than the kernel
    ((7, 8), (3, 2), (2, 2)),
    ((5, 6, 4), (3, 2, 2), (2, 1, 2)),
]


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize(("sizes", "k", "s"), [pytest.param(*c, id=case_id(*c)) for c in POOL_AUTO])
def test_pools_auto_pad_match_ort(sizes: Ints, k: Ints, s: Ints, auto_pad: str) -> None:
    nd = len(sizes)
    padding = AUTO_PAD[auto_pad]
    x = -1.0 - np.abs(rand32((1, 2, *sizes), 11))
    expected = ort_max(x, k, s, auto_pad=auto_pad)
    assert_matches(MAX_POOL[nd](t64(x), k, s, padding=padding), expected)
    for cip in (False, True):
        expected = ort_avg_pool(x, k, s, auto_pad=auto_pad, count_include_pad=cip)
        got = AVG_POOL[nd](t64(x), k, s, padding=padding, count_include_pad=cip)
        assert_matches(got, expected)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_pools_property_match_ort(data: Any, seed: int) -> None:
    draw = data.draw
    nd = draw(st.integers(1, 3))
    sizes = tuple(draw(st.integers(1, {1: 10, 2: 7, 3: 5}[nd])) for _ in range(nd))
    k = tuple(draw(st.integers(1, 4)) for _ in range(nd))
    s = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    d = tuple(draw(st.integers(1, 2)) for _ in range(nd))
    lo = [draw(st.integers(0, kk - 1)) for kk in k]  # ORT: pads < kernel
    hi = [draw(st.integers(0, kk - 1)) for kk in k]
    ceil_mode = draw(st.booleans())
    cip = draw(st.booleans())
    padding = tuple(zip(lo, hi))
    if any(n + a + b < dd * (kk - 1) + 1 for n, (a, b), kk, dd in zip(sizes, padding, k, d)):
        with pytest.raises(PaddingError):
            MAX_POOL[nd](torch.zeros(1, 1, *sizes), k, s, padding=padding, dilation=d)
        return
    x = -1.0 - np.abs(rand32((1, 2, *sizes), seed))
    pads = lo + hi
    expected = ort_max(x, k, s, pads=pads, dilations=d, ceil_mode=ceil_mode)
    got = MAX_POOL[nd](t64(x), k, s, padding=padding, dilation=d, ceil_mode=ceil_mode)
    assert_matches(got, expected)
    expected = ort_avg_pool(
        x, k, s, pads=pads, dilations=d, ceil_mode=ceil_mode, count_include_pad=cip
    )

    def avg() -> torch.Tensor:
        return AVG_POOL[nd](
            t64(x), k, s, padding=padding, ceil_mode=ceil_mode, count_include_pad=cip, dilation=d
        )

    if not cip and has_empty_window(sizes, expected.shape[2:], k, s, d, lo):
        with pytest.raises(PaddingError):
            avg()
        return
    assert_matches(avg(), expected)


LP_CASES = [
    # (sizes, k, strides, dilations, pads, ceil_mode, p)
    ((9,), (3,), (2,), (1,), [2, 1], False, 2),
    ((8,), (4,), (4,), (1,), [1, 0], True, 2),
    ((7,), (2,), (1,), (2,), [1, 1], False, 1),
    ((6,), (3,), (2,), (1,), [0, 2], True, 3),
    ((5, 6), (3, 3), (2, 1), (1, 2), [2, 0, 1, 2], False, 2),  # ONNX lppool_2d_pads-like
    ((5, 5), (2, 3), (2, 2), (1, 1), [1, 1, 0, 2], True, 2),
    ((4, 5, 3), (2, 3, 2), (1, 2, 1), (1, 1, 2), [1, 0, 1, 0, 2, 1], False, 3),
]


@pytest.mark.parametrize(
    ("sizes", "k", "s", "d", "pads", "ceil_mode", "p"),
    [pytest.param(*c, id=case_id(f"p{c[6]}", *c[:6])) for c in LP_CASES],
)
def test_lp_pool_pads_match_ort(
    sizes: Ints, k: Ints, s: Ints, d: Ints, pads: list[int], ceil_mode: bool, p: int
) -> None:
    x = np.abs(rand32((1, 2, *sizes), 12)) + np.float32(0.1)
    expected = ort_lp_pool(x, p, k, s, pads=pads, dilations=d, ceil_mode=ceil_mode)
    got = LP_POOL[len(sizes)](
        t64(x), p, k, s, ceil_mode=ceil_mode, padding=pairs_of(pads), dilation=d
    )
    assert_matches(got, expected)


# ----------------------------------------------------------------------------- Pad

PAD_MODES = [
    # (padkit mode, ONNX mode)
    ("constant", "constant"),
    ("zeros", "constant"),
    ("reflect", "reflect"),
    ("replicate", "edge"),
    ("edge", "edge"),
    ("circular", "wrap"),
    ("wrap", "wrap"),
]
PAD_CASES = [
    # (shape, per-axis pairs over the trailing axes)
    ((2, 3, 5), ((1, 2),)),
    ((2, 3, 5), ((4, 0),)),
    ((1, 2, 4, 5), ((1, 3), (2, 0))),
    ((1, 2, 4, 5), ((3, 3), (4, 4))),
    ((1, 1, 3, 4, 5), ((1, 0), (0, 2), (2, 1))),
]


def onnx_pads(ndim: int, pairs: Sequence[tuple[int, int]]) -> list[int]:
    """Pad's ``pads`` input over every axis: zeros for the leading (batch, channel) axes."""
    lead = ndim - len(pairs)
    begins = [0] * lead + [lo for lo, _ in pairs]
    ends = [0] * lead + [hi for _, hi in pairs]
    return begins + ends


@pytest.mark.parametrize(("mode", "onnx_mode"), PAD_MODES, ids=[m for m, _ in PAD_MODES])
@pytest.mark.parametrize(("shape", "pairs"), [pytest.param(*c, id=case_id(*c)) for c in PAD_CASES])
def test_pad_matches_ort(
    shape: Ints, pairs: tuple[tuple[int, int], ...], mode: str, onnx_mode: str
) -> None:
    x = rand32(shape, 13)
    expected = ort_pad(x, onnx_pads(len(shape), pairs), onnx_mode)
    assert_matches(PF.pad(t64(x), pairs, mode=mode), expected)


@pytest.mark.parametrize("value", [0.0, -2.5, 7.0])
def test_pad_constant_value_matches_ort(value: float) -> None:
    x = rand32((1, 2, 3, 4), 14)
    pairs = ((2, 1), (0, 3))
    expected = ort_pad(x, onnx_pads(4, pairs), "constant", value)
    assert_matches(PF.pad(t64(x), pairs, mode="constant", value=value), expected)


@pytest.mark.parametrize(
    ("mode", "onnx_mode", "pairs"),
    [
        pytest.param("constant", "constant", ((-1, 2), (1, -2)), id="constant"),
        pytest.param("replicate", "edge", ((-2, 1), (0, -1)), id="edge"),
        pytest.param("reflect", "reflect", ((-1, 2), (2, -1)), id="reflect-cropped-first"),
        pytest.param("circular", "wrap", ((1, -1), (-2, 2)), id="wrap"),
    ],
)
def test_pad_negative_crops_match_ort(
    mode: str, onnx_mode: str, pairs: tuple[tuple[int, int], ...]
) -> None:
    """Negative pads crop; ORT reflects/wraps against the cropped tensor, as padkit does."""
    x = rand32((1, 2, 5, 6), 15)
    expected = ort_pad(x, onnx_pads(4, pairs), onnx_mode)
    assert_matches(PF.pad(t64(x), pairs, mode=mode), expected)


@settings(max_examples=50, deadline=None)
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_pad_property_matches_ort(data: Any, seed: int) -> None:
    draw = data.draw
    mode, onnx_mode = draw(st.sampled_from(PAD_MODES))
    nd = draw(st.integers(1, 3))
    sizes = tuple(draw(st.integers(1, 5)) for _ in range(nd))
    # reflect needs pad < size, wrap here pad <= size (torch cannot wrap more than once)
    limit = {"reflect": -1, "wrap": 0}.get(onnx_mode, 3)
    pairs = tuple(
        (draw(st.integers(0, max(n + limit, 0))), draw(st.integers(0, max(n + limit, 0))))
        for n in sizes
    )
    x = rand32((1, 2, *sizes), seed)
    expected = ort_pad(x, onnx_pads(nd + 2, pairs), onnx_mode)
    assert_matches(PF.pad(t64(x), pairs, mode=mode), expected)
