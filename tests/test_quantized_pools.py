"""Max pools of quantized tensors against the float reference of their dequantized values.

The reference is ``F.pad(value=-inf)`` of the dequantized input and torch's unpadded float
max pool (ceil mode written out: windows that start in the right padding are dropped).
Max pooling never rounds, so a quantized padkit pool must dequantize to exactly the
reference; a window holding only padding must give the quantization's lowest value
(``qmin``). Inputs are mostly all-negative, so a pad of the real 0.0 would win at every
border.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st
from torch import Tensor, nn
from torch.ao import quantization as tq
from torch.ao.quantization import DeQuantStub, QuantStub

import padkit.functional as PF
import padkit.nn as pn
from padkit import PaddingError
from padkit.native import _dispatch, _ops
from padkit.plan import plan_pool

convert: Callable[..., Any] = tq.convert
get_default_qconfig: Callable[..., Any] = tq.get_default_qconfig
prepare: Callable[..., Any] = tq.prepare

pytestmark = [
    pytest.mark.filterwarnings("ignore:torch.ao.quantization is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Please use quant_min and quant_max:UserWarning"),
    pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning"),
]

Pairs = tuple[tuple[int, int], ...]

#: the integer range of each quantized dtype, written out
QRANGE = {torch.quint8: (0, 255), torch.qint8: (-128, 127), torch.qint32: (-(2**31), 2**31 - 1)}
FUNCS = {1: PF.max_pool1d, 2: PF.max_pool2d, 3: PF.max_pool3d}
LAYERS: dict[int, Callable[..., nn.Module]] = {1: pn.MaxPool1d, 2: pn.MaxPool2d, 3: pn.MaxPool3d}
TORCH_POOLS: dict[int, Callable[..., Tensor]] = {
    1: F.max_pool1d,
    2: F.max_pool2d,
    3: F.max_pool3d,
}


def reference(
    xf: Tensor,
    k: tuple[int, ...],
    s: tuple[int, ...],
    d: tuple[int, ...],
    pairs: Pairs,
    ceil: bool,
) -> Tensor:
    """The float max pool of ``xf`` padded by ``pairs`` with -inf."""
    outs, extra = [], []
    for n, kk, ss, dd, (lo, hi) in zip(xf.shape[2:], k, s, d, pairs):
        ke, length = dd * (kk - 1) + 1, n + lo + hi
        if ceil:
            out = -(-(length - ke) // ss) + 1
            if (out - 1) * ss >= n + lo:  # the last window would start in the right pad
                out -= 1
        else:
            out = (length - ke) // ss + 1
        outs.append(out)
        extra.append(max(0, (out - 1) * ss + ke - length))
    torch_pad = [p for (lo, hi), e in zip(reversed(pairs), reversed(extra)) for p in (lo, hi + e)]
    padded = F.pad(xf, torch_pad, value=-math.inf)
    res = TORCH_POOLS[len(k)](padded, k, s, 0, d)
    for i, out in enumerate(outs):
        res = res.narrow(2 + i, 0, out)
    return res


def assert_exact(got: Tensor, xq: Tensor, want: Tensor) -> None:
    """``got`` keeps ``xq``'s quantization and dequantizes to ``want``; where ``want`` is
    -inf (a window of padding only) it holds ``qmin``."""
    assert got.is_quantized and got.dtype == xq.dtype and got.qscheme() == xq.qscheme()
    assert got.shape == want.shape
    pad_only = want == -math.inf
    deq = got.dequantize()
    assert torch.equal(deq[~pad_only], want[~pad_only]), (deq - want)[~pad_only].abs().max()
    assert bool((got.int_repr()[pad_only] == QRANGE[xq.dtype][0]).all())


def quantize(x: Tensor, dtype: torch.dtype, scale: float, zero_point: int) -> Tensor:
    return torch.quantize_per_tensor(x, scale, zero_point, dtype)


@st.composite
def cases(draw: Any) -> dict[str, Any]:
    nd = draw(st.integers(1, 3))
    k = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    s = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    d = tuple(draw(st.integers(1, 2)) for _ in range(nd))
    ke = [dd * (kk - 1) + 1 for kk, dd in zip(k, d)]
    # pads up to the dilated kernel: windows of padding only happen too
    pairs = tuple((draw(st.integers(0, e)), draw(st.integers(0, e))) for e in ke)
    sizes = tuple(draw(st.integers(e, e + 5)) for e in ke)
    dtype = draw(st.sampled_from([torch.quint8, torch.qint8, torch.qint32]))
    qmin, qmax = QRANGE[dtype]
    zero_point = draw(st.integers(max(qmin, -200), min(qmax, 255)))
    return {
        "nd": nd,
        "k": k,
        "s": s,
        "d": d,
        "pairs": pairs,
        "sizes": sizes,
        "ceil": draw(st.booleans()),
        "dtype": dtype,
        "scale": draw(st.sampled_from([0.003, 0.02, 0.05, 0.17])),
        "zero_point": zero_point,
        "negative": draw(st.sampled_from([True, True, False])),
        "seed": draw(st.integers(0, 2**16)),
    }


def make_input(case: dict[str, Any], batch: int = 2, channels: int = 3) -> Tensor:
    g = torch.Generator().manual_seed(case["seed"])
    x = torch.rand(batch, channels, *case["sizes"], generator=g)
    if case["negative"]:  # every value below 0: a pad of the real 0.0 would win
        return -(x * 2.0 + float(case["scale"]))
    return x * 4.0 - 2.0


@settings(max_examples=80, deadline=None)
@given(case=cases())
def test_functional_and_layer_max_pools_of_quantized_tensors_are_exact(
    case: dict[str, Any],
) -> None:
    nd, k, s, d, pairs, ceil = (case[n] for n in ("nd", "k", "s", "d", "pairs", "ceil"))
    xq = quantize(make_input(case), case["dtype"], case["scale"], case["zero_point"])
    want = reference(xq.dequantize(), k, s, d, pairs, ceil)
    if min(want.shape[2:]) < 1:
        return
    assert_exact(FUNCS[nd](xq, k, s, pairs, d, ceil), xq, want)
    layer = LAYERS[nd](k, s, pairs, d, ceil_mode=ceil)
    for _ in range(2):  # the second call takes the layer's cached path
        assert_exact(layer(xq), xq, want)
    # unbatched
    assert_exact(FUNCS[nd](xq[0], k, s, pairs, d, ceil), xq[0], want[0])


#: one case per plan: (pads, kernel, stride, dilation, ceil_mode, strategy); 9 samples
PLAN_CASES = [
    (((1, 1),), (3,), (2,), (1,), False, "native"),
    (((1, 1),), (3,), (2,), (1,), True, "native"),
    (((1, 0),), (3,), (3,), (1,), False, "crop"),
    (((1, 0),), (4,), (2,), (1,), False, "crop"),
    (((0, 1),), (3,), (2,), (1,), False, "ceil_mode"),
    (((0, 1),), (2,), (2,), (1,), False, "ceil_mode"),
    (((2, 2),), (2,), (2,), (1,), False, "explicit"),
    (((0, 2),), (3,), (2,), (1,), True, "explicit"),
    (((3, 0),), (3,), (1,), (2,), False, "explicit"),
]


@pytest.mark.parametrize("dtype", [torch.quint8, torch.qint8, torch.qint32])
@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize(("pads", "k", "s", "d", "ceil", "strategy"), PLAN_CASES)
def test_every_plan_pads_below_every_input(
    pads: Pairs,
    k: tuple[int, ...],
    s: tuple[int, ...],
    d: tuple[int, ...],
    ceil: bool,
    strategy: str,
    nd: int,
    dtype: torch.dtype,
) -> None:
    """All-negative inputs: each border window's maximum is an input value, never the pad."""
    pairs, k, s, d = pads * nd, k * nd, s * nd, d * nd
    sizes = (9,) * nd
    assert plan_pool("max_pool", pairs, k, s, d, sizes, ceil_mode=ceil).strategy == strategy
    zero_point = {torch.quint8: 200, torch.qint8: 50, torch.qint32: 1000}[dtype]
    torch.manual_seed(nd)
    xq = quantize(-torch.rand(1, 2, *sizes) - 0.25, dtype, 0.01, zero_point)
    want = reference(xq.dequantize(), k, s, d, pairs, ceil)
    assert bool((want < 0).all())
    assert_exact(FUNCS[nd](xq, k, s, pairs, d, ceil), xq, want)
    assert_exact(LAYERS[nd](k, s, pairs, d, ceil_mode=ceil)(xq), xq, want)


def test_the_reported_case() -> None:
    pool = pn.MaxPool2d(2, 2, padding=((0, 1), (1, 0)))
    torch.manual_seed(0)
    xq = quantize(-torch.rand(1, 1, 5, 9) - 0.5, torch.quint8, 0.05, 60)
    want = F.max_pool2d(F.pad(xq.dequantize(), (1, 0, 0, 1), value=-math.inf), 2, 2)
    assert torch.equal(pool(xq).dequantize(), want)


def test_qint32_inputs_just_above_qmin() -> None:
    """Inputs a few steps above qint32's qmin, next to pads that the explicit plan adds
    (torch's F.pad quantizes a qint32 fill in float32, up to 128 steps above qmin).
    Compared on the integers: torch's dequantize overflows there (q - zero_point)."""
    qmin = QRANGE[torch.qint32][0]
    g = torch.Generator().manual_seed(6)
    ints = qmin + torch.randint(0, 100, (1, 2, 6, 7), generator=g)
    xq = torch._make_per_tensor_quantized_tensor(ints.to(torch.int32), 0.003, 65)
    pairs = ((0, 2), (3, 0))
    assert plan_pool("max_pool", pairs, (2, 2), (2, 2), (1, 1), (6, 7)).strategy == "explicit"
    want = reference(ints.double(), (2, 2), (2, 2), (1, 1), pairs, False)
    want = torch.where(want == -math.inf, float(qmin), want)
    for got in (PF.max_pool2d(xq, 2, 2, pairs), pn.MaxPool2d(2, 2, pairs)(xq)):
        assert got.dtype == torch.qint32 and got.q_scale() == xq.q_scale()
        assert torch.equal(got.int_repr().double(), want)


def test_same_padding_and_return_indices() -> None:
    """'same' pads; with return_indices (which torch's quantized pools lack) the indices
    point at the maxima in the input plane."""
    torch.manual_seed(2)
    xq = quantize(-torch.rand(2, 3, 8, 7) - 0.1, torch.qint8, 0.01, 40)
    # TF SAME at 8x7, kernel 3, stride 2: pads (0, 1) and (1, 1)
    want = reference(xq.dequantize(), (3, 3), (2, 2), (1, 1), ((0, 1), (1, 1)), False)
    assert_exact(PF.max_pool2d(xq, 3, 2, "same"), xq, want)
    got, idx = pn.MaxPool2d(3, 2, "same", return_indices=True)(xq)
    assert_exact(got, xq, want)
    flat = xq.dequantize().flatten(2)
    assert torch.equal(flat.gather(2, idx.flatten(2)).view_as(want), want)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("dtype", [torch.quint8, torch.qint8])
def test_per_channel_quantization(axis: int, dtype: torch.dtype) -> None:
    """Per-channel (or per-sample) quantization: each plane keeps its own parameters."""
    torch.manual_seed(3)
    x = -torch.rand(2, 3, 7, 6) * 2.0 - 0.05
    n = x.shape[axis]
    scales = torch.tensor([0.01, 0.02, 0.015][:n], dtype=torch.float64)
    zeros = torch.tensor(([30, 100, 10] if dtype == torch.quint8 else [5, -3, 60])[:n])
    xq = torch.quantize_per_channel(x, scales, zeros, axis, dtype)
    pads: list[tuple[Pairs, bool]] = [
        (((0, 1), (2, 0)), False),
        (((1, 1), (1, 1)), True),
        (((3, 0), (0, 2)), False),
    ]
    for pairs, ceil in pads:
        want = reference(xq.dequantize(), (3, 2), (2, 2), (1, 1), pairs, ceil)
        got = PF.max_pool2d(xq, (3, 2), 2, pairs, ceil_mode=ceil)
        assert_exact(got, xq, want)
        assert got.q_per_channel_axis() == axis
        assert torch.equal(got.q_per_channel_scales(), xq.q_per_channel_scales())
        layer = pn.MaxPool2d((3, 2), 2, pairs, ceil_mode=ceil)
        assert_exact(layer(xq), xq, want)
        assert_exact(layer(xq), xq, want)


def test_per_channel_along_a_spatial_axis_is_refused() -> None:
    x = torch.randn(1, 2, 4, 5)
    zeros = torch.zeros(4, dtype=torch.long)
    xq = torch.quantize_per_channel(x, torch.full((4,), 0.1), zeros, 2, torch.quint8)
    with pytest.raises(PaddingError, match=r"max_pool2d\(\): input is quantized per channel"):
        PF.max_pool2d(xq, 2, 2, ((0, 1), (1, 0)))
    with pytest.raises(PaddingError, match=r"MaxPool2d\(\): .* along axis 2 .*\(axis < 2\)"):
        pn.MaxPool2d(2, 2, ((0, 1), (1, 0)))(xq)


def test_the_native_backend_declines_quantized_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the backend on (forced for every eligible op) a quantized input stays on
    padkit's torch plans: the backend's pool is never called."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a quantized input reached the native backend")

    hook = _dispatch.Hook()
    hook.force = True
    monkeypatch.setattr(_dispatch, "active", hook)
    monkeypatch.setattr(_ops, "pool", refuse)
    torch.manual_seed(4)
    xq = quantize(-torch.rand(1, 2, 9, 9) - 0.1, torch.quint8, 0.02, 128)
    for pads in (((1, 0), (1, 0)), ((0, 1), (0, 1)), ((2, 0), (0, 2))):
        want = reference(xq.dequantize(), (3, 3), (2, 2), (1, 1), pads, False)
        assert_exact(PF.max_pool2d(xq, 3, 2, pads), xq, want)
        layer = pn.MaxPool2d(3, 2, pads)
        for _ in range(2):
            assert_exact(layer(xq), xq, want)


def test_eager_quantization_route() -> None:
    """QuantStub -> padkit conv -> padkit max pool -> DeQuantStub, quantized by torch.ao's
    prepare/convert: the converted pool runs on the quantized conv output exactly."""
    torch.manual_seed(5)
    conv = pn.Conv2d(3, 4, 3, padding="same")
    assert conv.bias is not None
    with torch.no_grad():
        conv.bias.fill_(-3.0)  # mostly negative outputs
    model = nn.Sequential(
        QuantStub(), conv, pn.MaxPool2d(3, 2, padding=((0, 2), (2, 1))), DeQuantStub()
    ).eval()
    model.qconfig = get_default_qconfig("x86")
    prepared = prepare(model)
    for _ in range(4):
        prepared(torch.randn(2, 3, 11, 10))
    quantized = convert(prepared)
    assert isinstance(quantized[2], pn.MaxPool2d)
    x = torch.randn(2, 3, 11, 10)
    before_pool = quantized[1](quantized[0](x))
    assert before_pool.is_quantized and bool((before_pool.dequantize() < 0).float().mean() > 0.9)
    want = reference(before_pool.dequantize(), (3, 3), (2, 2), (1, 1), ((0, 2), (2, 1)), False)
    assert torch.equal(quantized(x), want)
