"""A 1-d conv with per-side pads run as one GEMM per kernel tap (``functional._taps``),
against the explicit ``F.pad`` + unpadded ``conv1d`` reference."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import padkit.nn as pnn
from padkit.functional import _taps

CASES = [  # in, out, kernel, dilation, length, batch, padding
    (64, 32, 3, 4, 300, 2, "causal"),
    (8, 16, 4, 2, 50, 3, "same"),  # symmetric: torch's own conv
    (8, 16, 4, 1, 50, 3, "same"),
    (3, 5, 5, 1, 7, 1, ((3, 1),)),
    (4, 4, 3, 3, 5, 1, "causal"),  # taps that read no input for some outputs
    (2, 3, 2, 1, 9, 2, ((0, 1),)),
    (5, 2, 3, 2, 4, 1, ((6, 6),)),  # pads wider than the input: no tap reads all outputs
]


@pytest.fixture
def taps_always(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every eligible call takes the per-tap products (timing on, its choice forced)."""
    from padkit.native import _dispatch

    monkeypatch.setattr(_dispatch.HOOK.tuner, "measure", True)
    monkeypatch.setattr(_dispatch, "active", None)  # the torch side only
    monkeypatch.setattr(_taps._TAPS, "decide", lambda key, *a, **k: True)
    monkeypatch.setattr(_taps._TAPS, "known", lambda key: True)
    _taps._RAW.clear()
    yield
    _taps._RAW.clear()


def _reference(m: Any, x: torch.Tensor) -> torch.Tensor:
    ((lo, hi),) = m.plan(x.shape).pads
    return F.conv1d(F.pad(x, (lo, hi)), m.weight, m.bias, 1, 0, m.dilation)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_equals_the_padded_reference(
    taps_always: None, case: tuple[Any, ...], bias: bool, dtype: torch.dtype
) -> None:
    cin, cout, k, d, length, n, padding = case
    torch.manual_seed(0)
    m = pnn.Conv1d(cin, cout, k, dilation=d, padding=padding, bias=bias).to(dtype).eval()
    x = torch.randn(n, cin, length, dtype=dtype)
    ((lo, hi),) = m.plan(x.shape).pads
    with torch.no_grad():
        direct = _taps.conv1d_taps(x, m.weight, m.bias, ((lo, hi),), d)
        ref = _reference(m, x)
        via_layer = m(x)
    if m.plan(x.shape).strategy != "native":  # symmetric pads: torch's own conv
        assert list(_taps._RAW.values()) == [True]  # the layer's call took the taps
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    scale = float(ref.abs().max()) + 1
    torch.testing.assert_close(direct.detach(), ref, rtol=0, atol=tol * scale)
    torch.testing.assert_close(via_layer, ref, rtol=0, atol=tol * scale)


def test_nan_and_inf_meet_the_outputs_whose_window_holds_them(taps_always: None) -> None:
    torch.manual_seed(0)
    m = pnn.Conv1d(3, 4, 3, dilation=2, padding="causal").eval()
    x = torch.randn(2, 3, 40)
    x[0, 1, 7], x[1, 2, 30] = math.nan, math.inf
    x[1, 0, 0] = -math.inf
    with torch.no_grad():
        got, ref = m(x), _reference(m, x)
    assert torch.equal(got.isnan(), ref.isnan())
    assert torch.equal(got.isinf(), ref.isinf())
    finite = ref.isfinite()
    torch.testing.assert_close(got[finite], ref[finite], rtol=0, atol=1e-5)


def test_a_weight_that_is_not_finite_runs_the_torch_plan(taps_always: None) -> None:
    # the reference multiplies the weight by the zero pads: inf * 0 is NaN there
    m = pnn.Conv1d(2, 2, 3, padding="causal").eval()
    with torch.no_grad():
        m.weight[0, 1, 0] = math.inf
    x = torch.randn(1, 2, 12)
    with torch.no_grad():
        got, ref = m(x), _reference(m, x)
    assert torch.equal(got.isnan(), ref.isnan()) and ref.isnan().any()
    finite = ref.isfinite()
    assert torch.equal(got[finite], ref[finite])


def test_training_keeps_the_plan_and_its_gradients(taps_always: None) -> None:
    torch.manual_seed(0)
    m = pnn.Conv1d(4, 4, 3, dilation=2, padding="causal")
    x = torch.randn(2, 4, 30, requires_grad=True)
    out = m(x)
    ref = _reference(m, x)
    torch.testing.assert_close(out, ref)
    g = torch.randn_like(out)
    got = torch.autograd.grad(out, (x, m.weight, m.bias), g)
    want = torch.autograd.grad(ref, (x, m.weight, m.bias), g)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_timing_runs_once_a_class_has_run_often_and_tuning_off_skips_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import padkit.native as native

    # the torch side only (a choice of the backend's on disk could run these on oneDNN)
    monkeypatch.setattr(native._dispatch, "active", None)
    monkeypatch.setattr(native._dispatch.HOOK.tuner, "measure", True)
    monkeypatch.setattr(_taps, "_TAPS", type(_taps._TAPS)())
    monkeypatch.setattr(_taps, "_SEEN", {})
    monkeypatch.setattr(_taps, "_RAW", {})
    timed: list[Any] = []
    real = _taps._TAPS.decide

    def spy(key: Any, *args: Any, **kwargs: Any) -> bool:
        timed.append(key)
        return real(key, *args, **kwargs)

    monkeypatch.setattr(_taps._TAPS, "decide", spy)
    m = pnn.Conv1d(8, 8, 3, dilation=4, padding="causal").eval()
    ran: list[int] = []
    real_taps = _taps.conv1d_taps
    monkeypatch.setattr(_taps, "conv1d_taps", lambda *a: ran.append(1) or real_taps(*a))
    with torch.no_grad():
        for i in range(_taps.TIME_AFTER):  # the products, untimed, lengths of one class
            x = torch.randn(1, 8, 100 + i % 20)
            if i < 3:
                torch.testing.assert_close(m(x), _reference(m, x), rtol=1e-5, atol=1e-5)
            else:
                m(x)
        assert not timed
        assert len(ran) == _taps.TIME_AFTER
        m(torch.randn(1, 8, 101))  # same class (bucketed length): timed once
        assert len(timed) == 1
        m(torch.randn(1, 8, 102))
        assert len(timed) == 1
        before = native._dispatch.HOOK.tuner.measure
        native.set_tuning(False)
        try:
            monkeypatch.setattr(_taps, "_SEEN", {})
            for i in range(_taps.TIME_AFTER + 2):
                m(torch.randn(1, 8, 3000 + i))
        finally:
            native.set_tuning(before)
        assert len(timed) == 1
