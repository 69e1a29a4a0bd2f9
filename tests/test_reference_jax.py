"""padkit against JAX ``lax`` (float64): pad resolution, conv, pools, transposed conv.

JAX resolves ``"SAME"``/``"SAME_LOWER"``/``"VALID"`` itself (with the dilated kernel), so
those forms are handed to JAX as strings. padkit's own rules (causal, full, the static
"same" rules, explicit and mixed per-axis forms) are handed to JAX as the (lo, hi) pairs
the other frameworks define for them (``oracles.rule_pads``), never as padkit's resolution.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st
from jax import lax
from oracles import (
    jax_avg_pool,
    jax_conv,
    jax_conv_transpose_lax,
    jax_conv_transpose_vjp,
    jax_lp_pool,
    jax_max_pool,
    rule_pads,
    to_numpy,
)

import padkit
import padkit.functional as PF
import padkit.nn as PN
from padkit import PaddingError

# hypothesis's failure report imports a module that warns under filterwarnings=error
pytestmark = pytest.mark.filterwarnings(
    "ignore:mypy_extensions.TypedDict is deprecated:DeprecationWarning"
)

RTOL = ATOL = 1e-10
JAX_STRINGS = {"same": "SAME", "same_lower": "SAME_LOWER", "valid": "VALID"}
RULES = ("same", "same_lower", "valid", "causal", "full", "same_static", "same_static_lower")

CONV: dict[int, Callable[..., torch.Tensor]] = {1: PF.conv1d, 2: PF.conv2d, 3: PF.conv3d}
CONV_T: dict[int, Callable[..., torch.Tensor]] = {
    1: PF.conv_transpose1d,
    2: PF.conv_transpose2d,
    3: PF.conv_transpose3d,
}
MAX_POOL: dict[int, Callable[..., torch.Tensor]] = {
    1: PF.max_pool1d,
    2: PF.max_pool2d,
    3: PF.max_pool3d,
}
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

Ints = tuple[int, ...]


# ----------------------------------------------------------------------------- helpers


def rand(shape: Sequence[int], seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(tuple(shape))


def axis_rules(padding: Any, nd: int) -> list[Any]:
    """The per-axis rules of a padkit padding argument, as the test wrote it."""
    if isinstance(padding, (str, int)):
        return [padding] * nd
    return list(padding)


def oracle_pairs(padding: Any, sizes: Sequence[int], k: Ints, s: Ints, d: Ints) -> list[Any]:
    """The (lo, hi) pairs each axis should get, from the oracles' definitions of the rules."""
    pairs = []
    for rule, n, kk, ss, dd in zip(axis_rules(padding, len(sizes)), sizes, k, s, d):
        if isinstance(rule, int):
            rule = (rule, rule)
        elif not isinstance(rule, str):
            rule = tuple(rule)
        pairs.append(rule_pads(rule, n, kk, ss, dd))
    return pairs


def oracle_padding(padding: Any, sizes: Sequence[int], k: Ints, s: Ints, d: Ints) -> Any:
    """What to hand JAX: its own string where padkit got one of JAX's strings, else pairs."""
    if isinstance(padding, str) and padding.lower() in JAX_STRINGS:
        return JAX_STRINGS[padding.lower()]
    return oracle_pairs(padding, sizes, k, s, d)


def fits(sizes: Sequence[int], pairs: Sequence[Any], k: Ints, d: Ints) -> bool:
    return all(n + lo + hi >= dd * (kk - 1) + 1 for n, (lo, hi), kk, dd in zip(sizes, pairs, k, d))


def assert_matches(actual: torch.Tensor, expected: np.ndarray) -> None:
    got = to_numpy(actual)
    assert got.shape == expected.shape, f"shape {got.shape} != reference {expected.shape}"
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)


def tup(v: int | Sequence[int], nd: int) -> Ints:
    return (v,) * nd if isinstance(v, int) else tuple(v)


def case_id(*parts: Any) -> str:
    return "-".join(str(p).replace(" ", "") for p in parts)


# ----------------------------------------------------------------------------- resolution


@pytest.mark.parametrize("rule", ["same", "same_lower"])
@pytest.mark.parametrize("s", [1, 2, 3], ids=lambda v: f"s{v}")
@pytest.mark.parametrize("d", [1, 2, 3], ids=lambda v: f"d{v}")
def test_resolve_same_matches_padtype_to_pads(rule: str, s: int, d: int) -> None:
    for n, k in itertools.product(range(1, 13), range(1, 7)):
        k_eff = d * (k - 1) + 1
        expected = lax.padtype_to_pads((n,), (k_eff,), (s,), JAX_STRINGS[rule])
        got = padkit.resolve_padding(rule, kernel_size=k, stride=s, dilation=d, input_size=n)
        assert got == tuple(tuple(map(int, p)) for p in expected), (n, k)
        if s == 1:  # stride 1: the pads do not depend on n, so no input size is needed
            assert padkit.resolve_padding(rule, kernel_size=k, dilation=d) == got


@settings(max_examples=80, deadline=None)
@given(
    nd=st.integers(2, 3),
    data=st.data(),
    rule=st.sampled_from(["same", "same_lower", "SAME", "Same_Lower"]),
)
def test_resolve_same_per_axis_matches_padtype_to_pads(nd: int, data: Any, rule: str) -> None:
    draw = data.draw
    n = tuple(draw(st.integers(1, 20)) for _ in range(nd))
    k = tuple(draw(st.integers(1, 7)) for _ in range(nd))
    s = tuple(draw(st.integers(1, 4)) for _ in range(nd))
    d = tuple(draw(st.integers(1, 4)) for _ in range(nd))
    k_eff = tuple(dd * (kk - 1) + 1 for kk, dd in zip(k, d))
    expected = lax.padtype_to_pads(n, k_eff, s, rule.upper())
    got = padkit.resolve_padding(rule, kernel_size=k, stride=s, dilation=d, input_size=n)
    assert got == tuple(tuple(map(int, p)) for p in expected)


# ----------------------------------------------------------------------------- convolution

# (n, k, s, d): odd and even kernels, strides 1-3, dilations 1-3, inputs smaller than k
AXIS_CONFIGS_1D = [
    (8, 3, 2, 1),
    (7, 4, 3, 2),
    (5, 2, 1, 3),
    (12, 6, 3, 1),
    (9, 1, 2, 1),
    (3, 5, 2, 1),
    (2, 3, 3, 2),
    (1, 4, 1, 1),
]
FORMS_1D: list[Any] = [*RULES, ((1, 2),), ((0, 3),), ((2, 0),), 1, ("same",)]

CONV_1D = [
    pytest.param(n, k, s, d, form, id=case_id(f"n{n}k{k}s{s}d{d}", form))
    for (n, k, s, d), form in itertools.product(AXIS_CONFIGS_1D, FORMS_1D)
    if form in RULES or (n, k, s, d) in AXIS_CONFIGS_1D[::3]
]


def run_conv_case(
    sizes: Sequence[int],
    k: Ints,
    s: Ints,
    d: Ints,
    padding: Any,
    c_in: int = 2,
    c_out: int = 3,
    groups: int = 1,
    batch: int = 2,
    seed: int = 0,
) -> None:
    nd = len(sizes)
    x = rand((batch, c_in, *sizes), seed)
    w = rand((c_out, c_in // groups, *k), seed + 1)
    pairs = oracle_pairs(padding, sizes, k, s, d)
    conv = CONV[nd]
    xt, wt = torch.from_numpy(x), torch.from_numpy(w)
    if not fits(sizes, pairs, k, d):
        with pytest.raises(PaddingError):
            conv(xt, wt, stride=s, padding=padding, dilation=d, groups=groups)
        return
    expected = jax_conv(x, w, s, oracle_padding(padding, sizes, k, s, d), d, groups)
    got = conv(xt, wt, stride=s, padding=padding, dilation=d, groups=groups)
    assert_matches(got, expected)


@pytest.mark.parametrize(("n", "k", "s", "d", "padding"), CONV_1D)
def test_conv1d_matches_jax(n: int, k: int, s: int, d: int, padding: Any) -> None:
    run_conv_case((n,), (k,), (s,), (d,), padding)


CONV_ND = [
    # 2-d: per-axis kernels/strides/dilations, mixed per-axis padding forms
    ((8, 7), (3, 4), (2, 1), (1, 2), "same"),
    ((8, 7), (3, 4), (2, 3), (1, 2), "same_lower"),
    ((9, 6), (2, 3), (3, 2), (2, 1), ((0, 1), "same")),
    ((5, 6), (4, 2), (2, 2), (1, 3), ("causal", "same_lower")),
    ((4, 3), (5, 4), (1, 2), (1, 1), ("full", (2, 0))),
    ((7, 7), (3, 3), (2, 2), (2, 2), "same_static"),
    ((6, 5), (2, 2), (1, 1), (1, 1), "same_static_lower"),
    ((3, 2), (4, 5), (2, 3), (1, 1), "same"),
    ((6, 8), (3, 3), (1, 2), (1, 1), ((1, 2), (0, 3))),
    ((6, 8), (3, 3), (2, 1), (1, 1), (2, 1)),
    ((5, 5), (3, 3), (1, 1), (1, 1), "valid"),
    # 3-d
    ((5, 4, 6), (3, 2, 3), (2, 1, 3), (1, 2, 1), "same"),
    ((4, 5, 3), (2, 3, 4), (1, 2, 2), (2, 1, 1), "same_lower"),
    ((5, 4, 4), (3, 3, 3), (1, 1, 1), (1, 1, 1), ("causal", "same", "same")),
    ((3, 4, 5), (2, 2, 2), (2, 3, 1), (1, 1, 2), ((0, 1), "full", "same_static")),
    ((2, 3, 2), (3, 3, 3), (2, 2, 2), (1, 1, 1), "same"),
    ((4, 4, 4), (3, 2, 2), (1, 1, 1), (1, 1, 1), ((1, 0), (0, 1), (1, 1))),
]


@pytest.mark.parametrize(
    ("sizes", "k", "s", "d", "padding"),
    [pytest.param(*c, id=case_id(f"{len(c[0])}d", *c)) for c in CONV_ND],
)
def test_conv_nd_matches_jax(sizes: Ints, k: Ints, s: Ints, d: Ints, padding: Any) -> None:
    run_conv_case(sizes, k, s, d, padding, batch=1)


GROUPED = [
    # (sizes, k, s, d, padding, c_in, c_out, groups)
    ((9,), (3,), (2,), (1,), "same", 4, 6, 2),
    ((8,), (4,), (1,), (2,), "same_lower", 3, 6, 3),  # depthwise, channel multiplier 2
    ((7,), (5,), (3,), (1,), "causal", 4, 4, 4),  # depthwise
    ((7, 8), (3, 3), (2, 2), (1, 1), "same", 3, 3, 3),  # MobileNet-style depthwise stride 2
    ((6, 6), (2, 4), (1, 2), (2, 1), ((1, 0), "same"), 4, 2, 2),
    ((4, 5, 3), (3, 2, 2), (2, 1, 1), (1, 1, 1), "same", 2, 4, 2),
]


@pytest.mark.parametrize(
    ("sizes", "k", "s", "d", "padding", "c_in", "c_out", "groups"),
    [pytest.param(*c, id=case_id(f"g{c[7]}", *c[:5])) for c in GROUPED],
)
def test_grouped_conv_matches_jax(
    sizes: Ints, k: Ints, s: Ints, d: Ints, padding: Any, c_in: int, c_out: int, groups: int
) -> None:
    run_conv_case(sizes, k, s, d, padding, c_in=c_in, c_out=c_out, groups=groups, batch=1)


@st.composite
def padding_forms(draw: Any, nd: int) -> Any:
    """Every padding form: one rule (any case), an int, per-axis ints, pairs, mixed."""
    form = draw(st.sampled_from(["rule", "int", "ints", "pairs", "mixed"]))
    pair = st.tuples(st.integers(0, 3), st.integers(0, 3))
    if form == "rule":
        rule = draw(st.sampled_from(RULES))
        return draw(st.sampled_from([rule, rule.upper()]))
    if form == "int":
        return draw(st.integers(0, 3))
    if form == "ints":
        return tuple(draw(st.integers(0, 3)) for _ in range(nd))
    if form == "pairs":
        return tuple(draw(pair) for _ in range(nd))
    return tuple(
        draw(st.one_of(st.sampled_from(RULES), pair, st.integers(0, 2))) for _ in range(nd)
    )


@st.composite
def geometry(draw: Any, max_k: int = 4) -> tuple[Ints, Ints, Ints, Ints, Any]:
    nd = draw(st.integers(1, 3))
    max_n = {1: 11, 2: 7, 3: 5}[nd]
    sizes = tuple(draw(st.integers(1, max_n)) for _ in range(nd))
    k = tuple(draw(st.integers(1, max_k)) for _ in range(nd))
    s = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    d = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    return sizes, k, s, d, draw(padding_forms(nd))


@settings(max_examples=40, deadline=None)
@given(geo=geometry(), groups=st.sampled_from([1, 2]), seed=st.integers(0, 2**16))
def test_conv_property_matches_jax(geo: Any, groups: int, seed: int) -> None:
    sizes, k, s, d, padding = geo
    run_conv_case(sizes, k, s, d, padding, c_in=2, c_out=2, groups=groups, batch=1, seed=seed)


# ----------------------------------------------------------------------------- pools

POOL_AXES_1D = [(8, 3, 2, 1), (7, 4, 3, 2), (5, 2, 1, 3), (10, 5, 2, 2), (3, 5, 2, 1), (1, 4, 1, 1)]
POOL_1D = [
    pytest.param(n, k, s, d, form, id=case_id(f"n{n}k{k}s{s}d{d}", form))
    for (n, k, s, d), form in itertools.product(POOL_AXES_1D, FORMS_1D)
    if form in RULES or form == ((1, 2),)
]
POOL_ND = [c for c in CONV_ND if c[4] != "valid"]


def negative(shape: Sequence[int], seed: int) -> np.ndarray:
    """Strictly negative inputs: a zero pad would win every window it reaches."""
    return -1.0 - np.abs(rand(shape, seed))


def run_max_pool_case(
    sizes: Sequence[int], k: Ints, s: Ints, d: Ints, padding: Any, seed: int = 0
) -> None:
    nd = len(sizes)
    x = negative((2, 3, *sizes), seed)
    pairs = oracle_pairs(padding, sizes, k, s, d)
    pool = MAX_POOL[nd]
    if not fits(sizes, pairs, k, d):
        with pytest.raises(PaddingError):
            pool(torch.from_numpy(x), k, s, padding=padding, dilation=d)
        return
    expected = jax_max_pool(x, k, s, oracle_padding(padding, sizes, k, s, d), d)
    got = pool(torch.from_numpy(x), k, s, padding=padding, dilation=d)
    assert_matches(got, expected)
    # pads never win: every finite output is an element of the input
    finite = np.isfinite(expected)
    assert np.isin(to_numpy(got)[finite], x).all()


def run_avg_pool_case(
    sizes: Sequence[int],
    k: Ints,
    s: Ints,
    d: Ints,
    padding: Any,
    count_include_pad: bool,
    seed: int = 0,
) -> None:
    nd = len(sizes)
    x = rand((2, 3, *sizes), seed)
    pairs = oracle_pairs(padding, sizes, k, s, d)
    pool = AVG_POOL[nd]

    def call() -> torch.Tensor:
        return pool(
            torch.from_numpy(x),
            k,
            s,
            padding=padding,
            count_include_pad=count_include_pad,
            dilation=d,
        )

    if not fits(sizes, pairs, k, d):
        with pytest.raises(PaddingError):
            call()
        return
    padding_j = oracle_padding(padding, sizes, k, s, d)
    with np.errstate(invalid="ignore"):
        expected = jax_avg_pool(x, k, s, padding_j, d, count_include_pad)
    if np.isnan(expected).any():  # a window that holds only padding, excluded: 0/0
        with pytest.raises(PaddingError):
            call()
        return
    assert_matches(call(), expected)


@pytest.mark.parametrize(("n", "k", "s", "d", "padding"), POOL_1D)
def test_max_pool1d_matches_jax(n: int, k: int, s: int, d: int, padding: Any) -> None:
    run_max_pool_case((n,), (k,), (s,), (d,), padding)


@pytest.mark.parametrize(
    ("sizes", "k", "s", "d", "padding"),
    [pytest.param(*c, id=case_id(f"{len(c[0])}d", *c)) for c in POOL_ND],
)
def test_max_pool_nd_matches_jax(sizes: Ints, k: Ints, s: Ints, d: Ints, padding: Any) -> None:
    run_max_pool_case(sizes, k, s, d, padding)


@pytest.mark.parametrize("count_include_pad", [False, True], ids=["exclude", "include"])
@pytest.mark.parametrize(("n", "k", "s", "d", "padding"), POOL_1D)
def test_avg_pool1d_matches_jax(
    n: int, k: int, s: int, d: int, padding: Any, count_include_pad: bool
) -> None:
    run_avg_pool_case((n,), (k,), (s,), (d,), padding, count_include_pad)


@pytest.mark.parametrize("count_include_pad", [False, True], ids=["exclude", "include"])
@pytest.mark.parametrize(
    ("sizes", "k", "s", "d", "padding"),
    [pytest.param(*c, id=case_id(f"{len(c[0])}d", *c)) for c in POOL_ND[::2]],
)
def test_avg_pool_nd_matches_jax(
    sizes: Ints, k: Ints, s: Ints, d: Ints, padding: Any, count_include_pad: bool
) -> None:
    run_avg_pool_case(sizes, k, s, d, padding, count_include_pad)


@settings(max_examples=40, deadline=None)
@given(geo=geometry(), seed=st.integers(0, 2**16))
def test_max_pool_property_matches_jax(geo: Any, seed: int) -> None:
    run_max_pool_case(*geo, seed=seed)


@settings(max_examples=40, deadline=None)
@given(geo=geometry(), count_include_pad=st.booleans(), seed=st.integers(0, 2**16))
def test_avg_pool_property_matches_jax(geo: Any, count_include_pad: bool, seed: int) -> None:
    run_avg_pool_case(*geo, count_include_pad=count_include_pad, seed=seed)


def test_tf_same_average_excludes_pad() -> None:
    """TF SAME average pooling (= JAX sum / pooled ones) excludes the pad from the divisor."""
    x = rand((1, 2, 7, 8), 3)
    expected = jax_avg_pool(x, (3, 3), (2, 2), "SAME", (1, 1), count_include_pad=False)
    got = PF.avg_pool2d(torch.from_numpy(x), 3, 2, padding="same", count_include_pad=False)
    assert_matches(got, expected)
    included = jax_avg_pool(x, (3, 3), (2, 2), "SAME", (1, 1), count_include_pad=True)
    assert not np.allclose(expected, included)  # the distinction is observable here


LP_CASES = [
    ((9,), (3,), (2,), (1,), "same", 2),
    ((8,), (4,), (3,), (2,), ((2, 1),), 3),
    ((7,), (2,), (1,), (3,), "causal", 1),
    ((6, 7), (3, 2), (2, 1), (1, 2), ("same_lower", (1, 1)), 2),
    ((4, 5, 3), (2, 3, 2), (1, 2, 1), (1, 1, 2), "full", 3),
]


@pytest.mark.parametrize(
    ("sizes", "k", "s", "d", "padding", "p"),
    [pytest.param(*c, id=case_id(f"p{c[5]}", *c[:5])) for c in LP_CASES],
)
def test_lp_pool_matches_jax(sizes: Ints, k: Ints, s: Ints, d: Ints, padding: Any, p: int) -> None:
    x = np.abs(rand((1, 2, *sizes), 5)) + 0.1  # positive, so x**p is defined for every p
    expected = jax_lp_pool(x, p, k, s, oracle_padding(padding, sizes, k, s, d), d)
    got = LP_POOL[len(sizes)](torch.from_numpy(x), p, k, s, padding=padding, dilation=d)
    assert_matches(got, expected)


# ----------------------------------------------------------------------------- transposed conv

CONV_T_CASES = [
    # (sizes, k, s, d, padding, output_padding, c_in, c_out, groups)
    ((3,), (3,), (2,), (1,), "same", 0, 1, 1, 1),  # transposed 'same', k=3 s=2
    ((3,), (3,), (2,), (1,), "same_lower", 0, 1, 1, 1),
    ((5,), (4,), (2,), (1,), "same", 0, 2, 3, 1),
    ((5,), (4,), (3,), (1,), "same_lower", 0, 2, 3, 1),
    ((4,), (2,), (3,), (1,), "same", 0, 2, 2, 1),  # k < s: the end is extended
    ((6,), (3,), (2,), (2,), "same", 0, 2, 2, 1),  # dilated
    ((4,), (3,), (2,), (1,), ((1, 1),), 1, 2, 3, 1),  # torch padding=1, output_padding=1
    ((4,), (4,), (3,), (1,), ((0, 2),), 2, 2, 3, 1),
    ((5,), (3,), (2,), (2,), ((2, 1),), 1, 4, 4, 2),
    ((6,), (3,), (2,), (1,), "causal", 0, 2, 2, 1),  # crops (0, k_eff - s): n*s outputs
    ((4,), (4,), (2,), (2,), "causal", 0, 2, 2, 1),  # dilated: crops (0, 5)
    ((4,), (1,), (3,), (1,), "causal", 0, 2, 2, 1),  # k_eff < s: the end is extended
    ((5,), (4,), (2,), (1,), "same_static", 0, 2, 2, 1),
    ((3, 4), (3, 4), (2, 2), (1, 1), "same", (0, 0), 2, 2, 1),
    ((3, 4), (3, 2), (2, 3), (2, 1), "same_lower", (0, 0), 2, 4, 2),
    ((3, 3), (3, 3), (2, 1), (1, 1), ((1, 0), "same_static"), (1, 0), 2, 2, 1),
    ((2, 3, 2), (3, 2, 3), (2, 2, 1), (1, 1, 2), "same", (0, 0, 0), 2, 2, 1),
    ((2, 2, 3), (2, 3, 3), (1, 2, 2), (1, 1, 1), ((0, 1), (1, 1), (1, 0)), (0, 1, 1), 2, 2, 1),
]


def run_conv_transpose_case(
    sizes: Ints,
    k: Ints,
    s: Ints,
    d: Ints,
    padding: Any,
    output_padding: int | Ints,
    c_in: int,
    c_out: int,
    groups: int,
    seed: int = 0,
) -> None:
    nd = len(sizes)
    op = tup(output_padding, nd)
    x = rand((1, c_in, *sizes), seed)
    w = rand((c_in, c_out // groups, *k), seed + 1)
    if isinstance(padding, str) and padding.lower() in JAX_STRINGS:
        padding_j: Any = JAX_STRINGS[padding.lower()]
    else:
        padding_j = oracle_pairs(padding, [0] * nd, k, s, d)  # n-independent rules only
        # a causal transposed conv crops k_eff - s at the end (output j reads inputs up to
        # j // s), not the forward conv's causal pad
        padding_j = [
            (0, dd * (kk - 1) + 1 - ss) if rule in ("causal", "causal_block") else pair
            for rule, pair, kk, ss, dd in zip(axis_rules(padding, nd), padding_j, k, s, d)
        ]

    def call() -> torch.Tensor:
        return CONV_T[nd](
            torch.from_numpy(x),
            torch.from_numpy(w),
            stride=s,
            padding=padding,
            output_padding=op,
            groups=groups,
            dilation=d,
        )

    if not isinstance(padding_j, str):
        out = [
            (n - 1) * ss + dd * (kk - 1) + 1 - lo - hi + o
            for n, ss, dd, kk, (lo, hi), o in zip(sizes, s, d, k, padding_j, op)
        ]
        if min(out) < 1:  # the crops leave nothing: no reference output, padkit must refuse
            with pytest.raises(PaddingError):
                call()
            return
    got = call()
    expected = jax_conv_transpose_vjp(x, w, s, padding_j, d, groups, op)
    assert_matches(got, expected)
    if padding_j in ("SAME", "SAME_LOWER"):
        assert got.shape[2:] == tuple(n * ss for n, ss in zip(sizes, s))


@pytest.mark.parametrize(
    ("sizes", "k", "s", "d", "padding", "output_padding", "c_in", "c_out", "groups"),
    [pytest.param(*c, id=case_id(f"{len(c[0])}d", *c[:6])) for c in CONV_T_CASES],
)
def test_conv_transpose_matches_jax_vjp(
    sizes: Ints,
    k: Ints,
    s: Ints,
    d: Ints,
    padding: Any,
    output_padding: Any,
    c_in: int,
    c_out: int,
    groups: int,
) -> None:
    run_conv_transpose_case(sizes, k, s, d, padding, output_padding, c_in, c_out, groups)


@pytest.mark.parametrize(
    "padding",
    [
        pytest.param("full", id="full"),
        pytest.param(((1, 1),), id="symmetric-pair"),
        pytest.param(((2, 0),), id="start-pair"),
        pytest.param(((0, 2),), id="end-pair"),
    ],
)
def test_conv_transpose_crops_that_leave_nothing_are_refused(padding: Any) -> None:
    """n=1, k=2: the full output has 2 elements and each of these crops removes both.

    There is no reference output (the forward conv would have an empty input), so padkit
    must refuse with its own PaddingError, for symmetric crops as for one-sided ones.
    """
    run_conv_transpose_case((1,), (2,), (1,), (1,), padding, 0, 1, 1, 1)


@pytest.mark.parametrize(
    ("sizes", "k", "s", "d"),
    [
        pytest.param((3,), (3,), (2,), (1,), id="k3_s2_same"),
        pytest.param((5,), (4,), (2,), (1,), id="even-k"),
        pytest.param((4,), (2,), (3,), (1,), id="k<s"),
        pytest.param((5,), (3,), (2,), (2,), id="dilated"),
        pytest.param((3, 4), (4, 3), (2, 3), (1, 1), id="2d"),
        pytest.param((2, 3, 2), (3, 3, 2), (2, 1, 2), (1, 2, 1), id="3d"),
    ],
)
def test_conv_transpose_same_matches_lax_conv_transpose(
    sizes: Ints, k: Ints, s: Ints, d: Ints
) -> None:
    """TF ``Conv*DTranspose(padding='same')``: output = input * stride, extra crop at the end."""
    x = rand((1, 2, *sizes), 7)
    w = rand((2, 3, *k), 8)
    expected = jax_conv_transpose_lax(x, w, s, "SAME", d)
    got = CONV_T[len(sizes)](
        torch.from_numpy(x), torch.from_numpy(w), stride=s, padding="same", dilation=d
    )
    assert_matches(got, expected)


@settings(max_examples=30, deadline=None)
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_conv_transpose_property_matches_jax_vjp(data: Any, seed: int) -> None:
    draw = data.draw
    nd = draw(st.integers(1, 3))
    sizes = tuple(draw(st.integers(1, {1: 6, 2: 4, 3: 3}[nd])) for _ in range(nd))
    k = tuple(draw(st.integers(1, 4)) for _ in range(nd))
    s = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    d = tuple(draw(st.integers(1, 2)) for _ in range(nd))
    groups = draw(st.sampled_from([1, 2]))
    kind = draw(st.sampled_from(["same", "same_lower", "pairs", "static"]))
    op: Ints = (0,) * nd
    if kind == "pairs":
        k_eff = [dd * (kk - 1) + 1 for kk, dd in zip(k, d)]
        padding: Any = tuple(
            (draw(st.integers(0, ke - 1)), draw(st.integers(0, ke - 1))) for ke in k_eff
        )
        # output_padding < stride, so the forward conv of the vjp has the input's size
        op = tuple(draw(st.integers(0, ss - 1)) for ss in s)
    elif kind == "static":
        padding = tuple(draw(st.sampled_from(["causal", "full", "same_static"])) for _ in range(nd))
    else:
        padding = kind
    run_conv_transpose_case(sizes, k, s, d, padding, op, 2, 2, groups, seed=seed)


# ----------------------------------------------------------------------------- layers


def test_conv2d_layer_same_resolves_per_input_size() -> None:
    """A strided 'same' layer resolves its pads per input size (TF SAME), not once."""
    conv = PN.Conv2d(2, 3, (3, 4), stride=2, padding="same", bias=False).double()
    w = to_numpy(conv.weight)
    for size in ((8, 8), (9, 7), (8, 8), (7, 10)):
        x = rand((1, 2, *size), size[0])
        expected = jax_conv(x, w, (2, 2), "SAME", (1, 1))
        assert_matches(conv(torch.from_numpy(x)), expected)


@pytest.mark.parametrize("count_include_pad", [False, True], ids=["exclude", "include"])
def test_pool_layers_same_match_jax(count_include_pad: bool) -> None:
    for size in ((9, 8), (8, 8)):
        x = rand((1, 2, *size), sum(size))
        avg = PN.AvgPool2d(3, 2, padding="same", count_include_pad=count_include_pad)
        expected = jax_avg_pool(x, (3, 3), (2, 2), "SAME", (1, 1), count_include_pad)
        assert_matches(avg(torch.from_numpy(x)), expected)
        mx = PN.MaxPool2d(3, 2, padding="same_lower", dilation=2)
        xn = -np.abs(x) - 1
        expected = jax_max_pool(xn, (3, 3), (2, 2), "SAME_LOWER", (2, 2))
        assert_matches(mx(torch.from_numpy(xn)), expected)


def test_conv_transpose2d_layer_same_matches_jax() -> None:
    layer = PN.ConvTranspose2d(2, 3, 4, stride=2, padding="same", bias=False).double()
    x = rand((1, 2, 5, 3), 12)
    expected = jax_conv_transpose_lax(x, to_numpy(layer.weight), (2, 2), "SAME", (1, 1))
    assert_matches(layer(torch.from_numpy(x)), expected)


# ----------------------------------------------------------------------------- exhaustive (slow)

SLOW_AXES = list(
    itertools.product(range(1, 9), range(1, 6), range(1, 4), range(1, 4))
)  # n, k, s, d


@pytest.mark.slow
@pytest.mark.parametrize("padding", [*RULES, ((1, 2),), ((3, 0),)], ids=str)
def test_exhaustive_1d_conv_and_pools_match_jax(padding: Any, request: Any) -> None:
    """Every (n, k, s, d) with n <= 8, k <= 5; minutes of JAX compiles, so opt-in."""
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("exhaustive grid: select it with -m slow")
    for n, k, s, d in SLOW_AXES:
        run_conv_case((n,), (k,), (s,), (d,), padding, batch=1)
        run_max_pool_case((n,), (k,), (s,), (d,), padding)
        run_avg_pool_case((n,), (k,), (s,), (d,), padding, count_include_pad=False)
        run_avg_pool_case((n,), (k,), (s,), (d,), padding, count_include_pad=True)
