"""The padding spec: parsing, resolution, layout conversions and output-size formulas.

Every expected value comes from an independent oracle: the formulas in
each framework's formulas (re-implemented here), ``jax.lax.padtype_to_pads``, torch's own
output shapes, ``F.pad`` and ``numpy.pad``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, settings, strategies as st

import padkit
import padkit.functional as PF
import padkit.nn as pn
from padkit import Padding, PaddingError, pool_output_size, resolve_padding

torch.set_num_threads(1)

RULE_NAMES = (
    "valid",
    "same",
    "same_lower",
    "same_static",
    "same_static_lower",
    "causal",
    "causal_block",
    "full",
)


# ----------------------------------------------------------------------------- oracles


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def ref_pads(rule: str, n: int, k: int, s: int, d: int) -> tuple[int, int]:
    """One axis of a rule, from the frameworks' formulas (not from padkit)."""
    k_eff = d * (k - 1) + 1
    if rule == "valid":
        return 0, 0
    if rule in ("same", "same_lower"):
        out = ceil_div(n, s)
        total = max((out - 1) * s + k_eff - n, 0)
        if rule == "same":
            return total // 2, total - total // 2
        return total - total // 2, total // 2
    total = k_eff - 1
    if rule == "same_static":
        return total // 2, total - total // 2
    if rule == "same_static_lower":
        return total - total // 2, total // 2
    if rule == "causal":
        return total, 0
    if rule == "causal_block":
        if k_eff < s:
            raise ValueError("causal_block needs k_eff >= s")
        return k_eff - s, 0
    if rule == "full":
        return total, total
    raise AssertionError(rule)


def ref_floor_out(n: int, k_eff: int, s: int, lo: int, hi: int) -> int:
    return (n + lo + hi - k_eff) // s + 1


def ref_ceil_out(n: int, k_eff: int, s: int, lo: int, hi: int) -> int:
    out = -(-(n + lo + hi - k_eff) // s) + 1
    if (out - 1) * s >= n + lo:
        out -= 1
    return out


def caffe_pool_out(n: int, k: int, s: int, p: int) -> int:
    """BVLC/caffe pooling_layer.cpp: always ceil, clip only if pad > 0."""
    pooled = ceil_div(n + 2 * p - k, s) + 1
    if p and (pooled - 1) * s >= n + p:
        pooled -= 1
    return pooled


def caffe_pool_1d(x: np.ndarray, k: int, s: int, p: int, mode: str) -> np.ndarray:
    """Caffe MAX / AVE pooling of a 1-D signal, transcribed from pooling_layer.cpp."""
    n = x.shape[-1]
    out = []
    for ph in range(caffe_pool_out(n, k, s, p)):
        hs = ph * s - p
        if mode == "max":
            he = min(hs + k, n)
            hs = max(hs, 0)
            out.append(x[hs:he].max())
        else:
            he = min(hs + k, n + p)
            size = he - hs
            hs, he = max(hs, 0), min(he, n)
            out.append(x[hs:he].sum() / size)
    return np.array(out)


# ----------------------------------------------------------------------------- parsing


PARSE_CASES = [
    ("int", 2, 2, ((2, 2), (2, 2))),
    ("zero", 0, 3, ((0, 0), (0, 0), (0, 0))),
    ("tuple_of_ints", (1, 2), 2, ((1, 1), (2, 2))),
    ("list_of_ints", [1, 2, 3], 3, ((1, 1), (2, 2), (3, 3))),
    ("pairs", ((0, 1), (2, 3)), 2, ((0, 1), (2, 3))),
    ("pairs_as_lists", [[0, 1], [2, 3]], 2, ((0, 1), (2, 3))),
    ("one_pair_1d", ((3, 0),), 1, ((3, 0),)),
    ("mix_pair_rule_int", ((0, 1), "same", 3), 3, ((0, 1), "same", (3, 3))),
    ("mix_rules", ("causal", "SAME_lower"), 2, ("causal", "same_lower")),
    ("numpy_int", np.int64(2), 2, ((2, 2), (2, 2))),
    ("numpy_tuple", (np.int32(1), np.int64(2)), 2, ((1, 1), (2, 2))),
    ("numpy_pairs", ((np.int16(0), np.uint8(1)),), 1, ((0, 1),)),
]


@pytest.mark.parametrize(
    ("padding", "ndim", "axes"),
    [c[1:] for c in PARSE_CASES],
    ids=[c[0] for c in PARSE_CASES],
)
def test_parse_forms(padding: object, ndim: int, axes: tuple[object, ...]) -> None:
    spec = Padding.parse(padding, ndim)  # type: ignore[arg-type]
    assert spec.axes == axes
    assert spec.ndim == ndim
    assert all(type(v) is int for a in spec.axes if isinstance(a, tuple) for v in a)


@pytest.mark.parametrize("rule", RULE_NAMES)
@pytest.mark.parametrize("case", [str.lower, str.upper, str.title, str.swapcase], ids=str)
def test_parse_rule_strings_any_case(rule: str, case: object) -> None:
    text = case(rule)  # type: ignore[operator]
    spec = Padding.parse(text)
    assert spec.broadcast
    assert spec.axes == (rule,)
    assert Padding.parse(text, 2).axes == (rule, rule)
    assert Padding.parse((text, 1), 2).axes == (rule, (1, 1))


def test_parse_broadcast_int_fits_any_ndim() -> None:
    spec = Padding.parse(3)
    assert spec.broadcast and spec.ndim is None
    for nd in (1, 2, 3):
        assert spec.expand(nd).axes == ((3, 3),) * nd


def test_parse_padding_instance_is_returned_unchanged() -> None:
    spec = Padding.parse(((0, 1), "causal"))
    assert Padding.parse(spec) == spec
    assert Padding.parse(spec, 2) == spec
    # hashable and frozen
    assert len({spec, Padding.parse(((0, 1), "causal"))}) == 1
    with pytest.raises(AttributeError):
        spec.axes = ()  # type: ignore[misc]


def test_parse_equal_forms_compare_equal() -> None:
    a = Padding.parse(((1, 1), (2, 2)))
    assert Padding.parse((1, 2), 2) == a
    assert Padding.parse([(1, 1), [2, 2]], 2) == a
    assert Padding.parse((np.int64(1), 2), 2) == a


def test_layers_accept_every_form() -> None:
    x = torch.randn(1, 2, 7, 6)
    forms: list[object] = [
        1,
        (1, 0),
        ((0, 1), (2, 0)),
        "same",
        "SAME",
        ("causal", (1, 2)),
        Padding.parse("same_lower"),
        np.int64(1),
    ]
    for form in forms:
        conv = pn.Conv2d(2, 3, 3, padding=form)  # type: ignore[arg-type]
        pairs = Padding.parse(form, 2).resolve(3, 1, 1, (7, 6))  # type: ignore[arg-type]
        ref = F.conv2d(F.pad(x, torch_pad(pairs)), conv.weight, conv.bias)
        torch.testing.assert_close(conv(x), ref, rtol=1e-5, atol=1e-5)


def test_spec_module_imports_no_torch() -> None:
    code = textwrap.dedent(
        """
        import sys
        import padkit.spec
        import padkit
        assert "torch" not in sys.modules, sorted(m for m in sys.modules if "torch" in m)
        padkit.Padding.parse("same").resolve(3, 2, 1, 8)
        assert "torch" not in sys.modules
        print("ok")
        """
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"


# ----------------------------------------------------------------------------- resolve


def torch_pad(pairs: tuple[tuple[int, int], ...]) -> list[int]:
    """F.pad order (last axis first) from per-axis pairs."""
    return [v for lo_hi in reversed(pairs) for v in lo_hi]


GRID = [
    (n, k, s, d)
    for n in range(1, 11)
    for k in range(1, 6)
    for s in range(1, 4)
    for d in range(1, 4)
]


@pytest.mark.parametrize("rule", RULE_NAMES)
def test_resolve_every_rule_matches_formula(rule: str) -> None:
    for n, k, s, d in GRID:
        try:
            want = ref_pads(rule, n, k, s, d)
        except ValueError:
            with pytest.raises(
                PaddingError, match=rf"'{rule}' on axis 0 .*= {d * (k - 1) + 1}\).*stride \({s}\)"
            ):
                resolve_padding(rule, k, s, d, n)
            continue
        assert resolve_padding(rule, k, s, d, n) == (want,), (rule, n, k, s, d)
        assert resolve_padding(rule.upper(), (k,), (s,), (d,), (n,)) == (want,)
        assert Padding.parse(rule).resolve(k, s, d, n, ndim=1) == (want,)


@pytest.mark.parametrize("rule", ["same", "same_lower"])
def test_same_matches_jax_padtype_to_pads(rule: str) -> None:
    lax = pytest.importorskip("jax.lax")
    jax_name = "SAME" if rule == "same" else "SAME_LOWER"
    for n, k, s, d in GRID:
        k_eff = d * (k - 1) + 1
        want = tuple(tuple(p) for p in lax.padtype_to_pads((n,), (k_eff,), (s,), jax_name))
        assert resolve_padding(rule, k, s, d, n) == want, (n, k, s, d)


def test_resolve_per_axis_values_not_swapped() -> None:
    # k=(3,5), d=(2,3), s=(1,2), input (28, 31)
    got = resolve_padding("same", (3, 5), (1, 2), (2, 3), (28, 31))
    assert got == (ref_pads("same", 28, 3, 1, 2), ref_pads("same", 31, 5, 2, 3))
    mixed = resolve_padding(("causal", (1, 2), "full"), (3, 4, 2), 1, (2, 1, 3))
    assert mixed == ((4, 0), (1, 2), (3, 3))


@pytest.mark.parametrize(
    ("n", "want"),
    [(5, (1, 2)), (10, (1, 1)), (8, (1, 1)), (7, (1, 2))],
    ids=["n5", "n10", "n8", "n7"],
)
def test_same_depends_on_input_size(n: int, want: tuple[int, int]) -> None:
    # in=5,k=4,s=2 -> (1,2); in=10 -> (1,1)
    assert want == ref_pads("same", n, 4, 2, 1)
    assert resolve_padding("same", 4, 2, 1, n) == (want,)


@pytest.mark.parametrize("rule", ["same", "same_lower"])
def test_same_with_stride_needs_input_size(rule: str) -> None:
    with pytest.raises(PaddingError, match=rf"{rule!r} with stride 2 .*input_size"):
        resolve_padding(rule, 3, 2)
    with pytest.raises(PaddingError, match="input_size"):
        Padding.parse(rule).resolve(3, (1, 2), ndim=2)
    assert Padding.parse(rule).needs_input_size(2)
    assert not Padding.parse(rule).needs_input_size(1)
    # stride 1 resolves without the input size
    assert resolve_padding(rule, 4, 1) == (ref_pads(rule, 100, 4, 1, 1),)


@pytest.mark.parametrize(
    "rule", ["valid", "same_static", "same_static_lower", "causal", "causal_block", "full"]
)
def test_static_rules_need_no_input_size(rule: str) -> None:
    assert not Padding.parse(rule).needs_input_size(3)
    assert resolve_padding(rule, 4, 3, 2) == (ref_pads(rule, 1, 4, 3, 2),)


def test_layer_resolved_padding_needs_input_size_for_strided_same() -> None:
    conv = pn.Conv2d(1, 1, 3, stride=2, padding="same")
    with pytest.raises(PaddingError, match="input_size"):
        conv.resolved_padding()
    assert conv.resolved_padding((8, 7)) == (
        ref_pads("same", 8, 3, 2, 1),
        ref_pads("same", 7, 3, 2, 1),
    )


# ----------------------------------------------------------------------------- layouts

ONNX_FIXTURE = [0, 0, 3, 1, 0, 0, 4, 2]  # pytorch-converted test_ConstantPad2d
TORCH_FIXTURE = (1, 2, 3, 4)


def test_onnx_fixture_matches_torch_pad() -> None:
    spec = Padding.from_onnx(pads=ONNX_FIXTURE)
    assert spec.axes == ((0, 0), (0, 0), (3, 4), (1, 2))
    # the same physical padding as F.pad (1, 2, 3, 4) and numpy's per-axis pairs
    x = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).view(2, 3, 4, 5)
    ref = F.pad(x, TORCH_FIXTURE)
    torch.testing.assert_close(F.pad(x, spec.to_torch_pad()), ref, rtol=0, atol=0)
    np.testing.assert_array_equal(np.pad(x.numpy(), spec.to_jax()), ref.numpy())
    # and back: the two spatial axes from F.pad order give the spatial part of the fixture
    spatial = Padding.from_torch_pad(TORCH_FIXTURE)
    assert spatial.axes == ((3, 4), (1, 2))
    assert spatial.to_onnx_pads() == [3, 1, 4, 2]
    assert spatial.to_onnx() == {"pads": [3, 1, 4, 2]}
    assert Padding.from_torch_pad(spec.to_torch_pad()).to_onnx_pads() == ONNX_FIXTURE
    # padkit.functional.pad with the spec (axis order) equals F.pad too
    torch.testing.assert_close(PF.pad(x, spatial), ref, rtol=0, atol=0)


def test_flux_layout() -> None:
    # Flux is WHCN: an N-tuple lists W first; a 2N-tuple is numerically the F.pad tuple
    assert Padding.from_flux((1, 2), ndim=2).axes == ((2, 2), (1, 1))
    assert Padding.from_flux(TORCH_FIXTURE, ndim=2) == Padding.from_torch_pad(TORCH_FIXTURE)
    assert Padding.from_flux(3, ndim=3).axes == ((3, 3),) * 3
    # Flux SamePad: static total k_eff - 1, odd pixel at the start
    same = Padding.from_flux("SamePad", ndim=1)
    assert same.resolve(2, ndim=1) == ((1, 0),)
    assert same.resolve(4, ndim=1) == ((2, 1),)
    assert same.resolve(2, 1, 3, ndim=1) == ((2, 1),)


def test_jax_layout_strings() -> None:
    assert Padding.parse("same").to_jax() == "SAME"
    assert Padding.parse("same_lower").to_jax() == "SAME_LOWER"
    assert Padding.parse("valid").to_jax() == "VALID"
    assert Padding.from_jax("SAME") == Padding.parse("same")
    assert Padding.from_jax("same_lower") == Padding.parse("same_lower")
    assert Padding.from_jax([(1, 2), (0, 3)]).axes == ((1, 2), (0, 3))


def test_onnx_auto_pad() -> None:
    assert Padding.parse("same").to_onnx() == {"auto_pad": "SAME_UPPER"}
    assert Padding.parse("same_lower").to_onnx() == {"auto_pad": "SAME_LOWER"}
    assert Padding.from_onnx(auto_pad="SAME_UPPER", ndim=2).axes == ("same", "same")
    assert Padding.from_onnx(auto_pad=b"VALID", ndim=1).axes == ("valid",)
    assert Padding.from_onnx(auto_pad="SAME_LOWER", ndim=2).resolve(2, 1, 1, (32, 32)) == (
        (1, 0),
        (1, 0),
    )


pairs_st = st.tuples(st.integers(0, 9), st.integers(0, 9))
axis_st = st.one_of(pairs_st, st.sampled_from(RULE_NAMES))


@st.composite
def explicit_specs(draw: st.DrawFn) -> Padding:
    nd = draw(st.integers(1, 3))
    return Padding.parse(tuple(draw(pairs_st) for _ in range(nd)), nd)


@st.composite
def mixed_problems(
    draw: st.DrawFn,
) -> tuple[Padding, tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    nd = draw(st.integers(1, 3))
    spec = Padding.parse(tuple(draw(axis_st) for _ in range(nd)), nd)
    k = tuple(draw(st.integers(1, 6)) for _ in range(nd))
    s = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    d = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    n = tuple(draw(st.integers(1, 20)) for _ in range(nd))
    for rule, kk, ss, dd in zip(spec.axes, k, s, d):
        assume(rule != "causal_block" or dd * (kk - 1) + 1 >= ss)
    return spec, k, s, d, n


SETTINGS = settings(max_examples=60, deadline=None)


@SETTINGS
@given(explicit_specs())
def test_torch_pad_round_trip(p: Padding) -> None:
    assert Padding.from_torch_pad(p.to_torch_pad()) == p
    pad = p.to_torch_pad()
    assert len(pad) == 2 * len(p.axes)
    # last axis first
    assert pad[:2] == p.axes[-1]


@SETTINGS
@given(explicit_specs())
def test_onnx_pads_round_trip_explicit(p: Padding) -> None:
    pads = p.to_onnx_pads()
    nd = len(p.axes)
    assert pads == [a[0] for a in p.axes] + [a[1] for a in p.axes]  # type: ignore[index]
    assert Padding.from_onnx(pads=pads) == p
    assert Padding.from_onnx(pads=pads, ndim=nd) == p


@SETTINGS
@given(mixed_problems())
def test_onnx_round_trip_resolves_equal(
    problem: tuple[Padding, tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]],
) -> None:
    p, k, s, d, n = problem
    want = p.resolve(k, s, d, n)
    pads = p.to_onnx_pads(k, s, d, n)
    assert Padding.from_onnx(pads=pads).resolve(k, s, d, n) == want
    attrs = p.to_onnx(k, s, d, n)
    assert Padding.from_onnx(**attrs, ndim=len(k)).resolve(k, s, d, n) == want


@SETTINGS
@given(mixed_problems())
def test_jax_round_trip_resolves_equal(
    problem: tuple[Padding, tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]],
) -> None:
    p, k, s, d, n = problem
    want = p.resolve(k, s, d, n)
    assert Padding.from_jax(p.to_jax(k, s, d, n)).resolve(k, s, d, n, ndim=len(k)) == want


@SETTINGS
@given(mixed_problems())
def test_flux_round_trip_resolves_equal(
    problem: tuple[Padding, tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]],
) -> None:
    p, k, s, d, n = problem
    want = p.resolve(k, s, d, n)
    flux = p.to_flux(k, s, d, n)
    assert flux == tuple(torch_pad(want))
    assert Padding.from_flux(flux, ndim=len(k)).resolve(k, s, d, n) == want


@SETTINGS
@given(explicit_specs())
def test_flux_round_trip_explicit(p: Padding) -> None:
    assert Padding.from_flux(p.to_flux(), ndim=len(p.axes)) == p


@SETTINGS
@given(mixed_problems())
def test_resolve_matches_formula_per_axis(
    problem: tuple[Padding, tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]],
) -> None:
    p, k, s, d, n = problem
    got = p.resolve(k, s, d, n)
    for i, rule in enumerate(p.axes):
        want = rule if isinstance(rule, tuple) else ref_pads(rule, n[i], k[i], s[i], d[i])
        assert got[i] == want


# ----------------------------------------------------------------------------- 'same' and causal


def test_same_output_size_is_ceil_n_over_s() -> None:
    for n, k, s, d in GRID:
        x = torch.ones(1, 1, n)
        w = torch.ones(1, 1, k)
        for rule in ("same", "same_lower"):
            y = PF.conv1d(x, w, stride=s, padding=rule, dilation=d)
            assert y.shape[-1] == ceil_div(n, s), (rule, n, k, s, d)
            lo, hi = ref_pads(rule, n, k, s, d)
            assert ref_floor_out(n, d * (k - 1) + 1, s, lo, hi) == ceil_div(n, s)


def test_same_layer_output_size_2d() -> None:
    for n1, n2, s in [(7, 8, 2), (224, 225, 2), (9, 10, 3), (1, 5, 3)]:
        conv = pn.Conv2d(1, 2, (3, 4), stride=s, padding="same", dilation=(2, 1))
        y = conv(torch.randn(1, 1, n1, n2))
        assert tuple(y.shape[2:]) == (ceil_div(n1, s), ceil_div(n2, s))


def test_same_stride2_windows_match_tf_t1() -> None:
    # TF SAME: n=8, k=3, s=2, ones kernel on [1..8] -> pads (0, 1), [6, 12, 18, 15]
    x = torch.arange(1.0, 9.0).view(1, 1, 8)
    w = torch.ones(1, 1, 3)
    ref = F.conv1d(F.pad(x, (0, 1)), w, stride=2)
    torch.testing.assert_close(PF.conv1d(x, w, stride=2, padding="same"), ref)
    assert ref.flatten().tolist() == [6.0, 12.0, 18.0, 15.0]


@pytest.mark.parametrize("dilation", [1, 2, 3])
@pytest.mark.parametrize("kernel", [2, 3, 5])
def test_causal_conv_does_not_see_the_future(kernel: int, dilation: int) -> None:
    torch.manual_seed(0)
    conv = pn.Conv1d(2, 3, kernel, padding="causal", dilation=dilation).double()
    x = torch.randn(1, 2, 16, dtype=torch.float64)
    y = conv(x)
    assert y.shape[-1] == 16
    for t0 in (0, 5, 11, 15):
        x2 = x.clone()
        x2[..., t0:] += torch.randn_like(x2[..., t0:])
        y2 = conv(x2)
        torch.testing.assert_close(y2[..., :t0], y[..., :t0], rtol=0, atol=0)
        assert not torch.equal(y2[..., t0:], y[..., t0:])
    # and it is the Keras causal conv: left pad d*(k-1), then valid
    ref = F.conv1d(
        F.pad(x, (dilation * (kernel - 1), 0)), conv.weight, conv.bias, dilation=dilation
    )
    torch.testing.assert_close(y, ref)


def test_same_conv_is_not_causal() -> None:
    torch.manual_seed(0)
    conv = pn.Conv1d(1, 1, 3, padding="same").double()
    x = torch.randn(1, 1, 16, dtype=torch.float64)
    x2 = x.clone()
    x2[..., 5:] += 1.0
    assert not torch.equal(conv(x2)[..., :5], conv(x)[..., :5])


# ----------------------------------------------------------------------------- output sizes


CAFFE_GRID = [
    (n, k, s, p)
    for n in range(1, 13)
    for k in range(1, 6)
    for s in range(1, 4)
    for p in range(0, k)  # Caffe requires pad < kernel
    if n + 2 * p >= k
]


def test_caffe_pool_output_sizes() -> None:
    checked = refused = 0
    for n, k, s, p in CAFFE_GRID:
        want = caffe_pool_out(n, k, s, p)
        last_start_outside = (want - 1) * s - p >= n  # Caffe computes -FLT_MAX there
        pool = pn.MaxPool1d(k, s, padding=Padding.from_caffe(p, ndim=1))
        x = torch.randn(1, 1, n)
        if last_start_outside:
            with pytest.raises(PaddingError, match="Caffe"):
                pool(x)
            refused += 1
            continue
        assert pool(x).shape[-1] == want, (n, k, s, p)
        # the tight end pad a converter emits gives Caffe's count in floor mode
        ((lo, hi),) = Padding.from_caffe(p, ndim=1).resolve(k, s, 1, n)
        assert lo == p
        assert ref_floor_out(n, k, s, lo, hi) == want, (n, k, s, p)
        checked += 1
    assert checked > 100 and refused > 0


def test_caffe_googlenet_pool1() -> None:
    # Caffe (GoogLeNet pool1): 112, k=3, s=2, p=0 -> 56, tight pads [0, 0, 1, 1]
    spec = Padding.from_caffe(0)
    assert spec.resolve(3, 2, 1, (112, 112)) == ((0, 1), (0, 1))
    y = pn.MaxPool2d(3, 2, padding=spec)(torch.randn(1, 1, 112, 112))
    assert tuple(y.shape[2:]) == (caffe_pool_out(112, 3, 2, 0),) * 2 == (56, 56)


@pytest.mark.parametrize("mode", ["max", "ave"])
def test_caffe_pool_values(mode: str) -> None:
    rng = np.random.default_rng(0)
    for n, k, s, p in CAFFE_GRID:
        want_n = caffe_pool_out(n, k, s, p)
        if (want_n - 1) * s - p >= n:
            continue
        x = rng.standard_normal(n)
        want = caffe_pool_1d(x, k, s, p, mode)
        spec = Padding.from_caffe(p, ndim=1)
        xt = torch.from_numpy(x).view(1, 1, n)
        if mode == "max":
            got = pn.MaxPool1d(k, s, padding=spec)(xt)
        else:
            got = pn.AvgPool1d(k, s, padding=spec, count_include_pad=True)(xt)
        np.testing.assert_allclose(got.flatten().numpy(), want, rtol=1e-12, atol=1e-12)


def test_pool_output_size_matches_torch_shapes() -> None:
    compared = 0
    for n in range(1, 11):
        for k in range(1, 5):
            for s in range(1, 4):
                for d in (1, 2):
                    for p in range(0, k // 2 + 1):
                        for ceil in (False, True):
                            x = torch.zeros(1, 1, n)
                            try:
                                y = F.max_pool1d(x, k, s, p, d, ceil)
                            except RuntimeError:
                                continue  # torch refuses this config
                            k_eff = d * (k - 1) + 1
                            got = pool_output_size(n, k, s, d, p, p, ceil)
                            assert got == y.shape[-1], (n, k, s, d, p, ceil)
                            ref = ref_ceil_out if ceil else ref_floor_out
                            assert got == ref(n, k_eff, s, p, p)
                            compared += 1
    assert compared > 300


def test_pool_output_size_asymmetric_against_explicit_pad() -> None:
    # asymmetric pads: torch pools cannot take them, so pad explicitly (-inf) and run floor mode
    for n in range(1, 9):
        for k in range(1, 4):
            for s in range(1, 4):
                for lo in range(0, 3):
                    for hi in range(0, 3):
                        if n + lo + hi < k:
                            continue
                        x = F.pad(torch.zeros(1, 1, n), (lo, hi), value=-float("inf"))
                        want = F.max_pool1d(x, k, s).shape[-1]
                        assert pool_output_size(n, k, s, 1, lo, hi) == want
                        got = pn.MaxPool1d(k, s, padding=((lo, hi),))(torch.zeros(1, 1, n))
                        assert got.shape[-1] == want


def test_conv_output_sizes_match_torch() -> None:
    for n in range(1, 10):
        for k in range(1, 5):
            for s in range(1, 4):
                for d in (1, 2):
                    for p in range(0, 3):
                        k_eff = d * (k - 1) + 1
                        if n + 2 * p < k_eff:
                            continue
                        y = F.conv1d(torch.zeros(1, 1, n), torch.zeros(1, 1, k), None, s, p, d)
                        assert padkit.conv_output_size(n, k, s, d, p, p) == y.shape[-1]
                        yt = F.conv_transpose1d(
                            torch.zeros(1, 1, n), torch.zeros(1, 1, k), None, s, 0, 0, 1, d
                        )
                        full = yt.shape[-1]
                        assert padkit.conv_transpose_output_size(n, k, s, d) == full
                        if 2 * p < full:
                            yp = F.conv_transpose1d(
                                torch.zeros(1, 1, n), torch.zeros(1, 1, k), None, s, p, 0, 1, d
                            )
                            got = padkit.conv_transpose_output_size(n, k, s, d, p, p)
                            assert got == yp.shape[-1]
