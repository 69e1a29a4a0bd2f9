"""A transposed conv's two torch layouts (the sliced full output and the shifted input)
equal the full transposed conv cropped by hand, and the layer takes the shifted one only
where its first call measured it faster."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, settings, strategies as st

import padkit.functional as PF
import padkit.native
import padkit.nn as pnn
from padkit import PaddingError
from padkit.functional import _transpose
from padkit.native import _dispatch, _tune

torch.set_num_threads(1)

CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


def cropped_reference(
    x: torch.Tensor,
    w: torch.Tensor,
    b: torch.Tensor,
    s: tuple[int, ...],
    d: tuple[int, ...],
    crops: tuple[tuple[int, int], ...],
    op: tuple[int, ...],
) -> torch.Tensor:
    """torch's full transposed conv (no padding), then the crops taken by hand."""
    nd = len(s)
    full = CONV_T[nd](x, w, b, s, 0, 0, 1, d)
    for i, ((lo, hi), o) in enumerate(zip(crops, op)):
        axis = 2 + i
        full = full.narrow(axis, lo, full.shape[axis] - lo - (hi - o))
    return full


@settings(max_examples=60, deadline=None)
@given(
    nd=st.integers(1, 3),
    data=st.data(),
)
def test_sliced_and_shifted_layouts_equal_the_cropped_full_output(nd: int, data: Any) -> None:
    k = tuple(data.draw(st.integers(1, 4)) for _ in range(nd))
    s = tuple(data.draw(st.integers(1, 3)) for _ in range(nd))
    d = tuple(data.draw(st.integers(1, 2)) for _ in range(nd))
    n = tuple(data.draw(st.integers(1, 5)) for _ in range(nd))
    crops = tuple((data.draw(st.integers(0, 3)), data.draw(st.integers(0, 4))) for _ in range(nd))
    op = tuple(data.draw(st.integers(0, max(si, di) - 1)) for si, di in zip(s, d))
    # the crops leave something and never extend the output past the full one
    assume(all(hi >= o for (_, hi), o in zip(crops, op)))
    full = [(ni - 1) * si + di * (ki - 1) + 1 for ni, si, di, ki in zip(n, s, d, k)]
    assume(all(f - lo - (hi - o) > 0 for f, (lo, hi), o in zip(full, crops, op)))
    torch.manual_seed(0)
    x = torch.randn(2, 3, *n, dtype=torch.float64)
    w = torch.randn(3, 2, *k, dtype=torch.float64)
    b = torch.randn(2, dtype=torch.float64)
    ref = cropped_reference(x, w, b, s, d, crops, op)
    try:
        p, o, slices = PF.transpose_layout(crops, op, k, s, d, n, "test")
    except PaddingError:
        assume(False)
    got = PF.run_transpose(x, w, b, s, p, o, 1, d, slices)
    torch.testing.assert_close(got, ref)
    shifted = PF.shifted_layout(crops, op, k, s, d, n, "test")
    if any(end for _, end in slices):
        assert shifted is not None
        pads, p2, o2, slices2 = shifted
        assert not any(end for _, end in slices2)  # nothing computed past the end
        assert all(oo < max(ss, dd) for oo, ss, dd in zip(o2, s, d))
        got = PF.run_transpose(x, w, b, s, p2, o2, 1, d, slices2, pads)
        torch.testing.assert_close(got, ref)
    else:
        assert shifted is None


def test_tf_same_shifted_layout_computes_exactly_n_times_s() -> None:
    # TF Conv2DTranspose 'same', k=3, s=2: crops (0, 1); sliced, torch computes 2n+1 and
    # drops the last; shifted, one zero row in front and padding 2, output_padding 1
    crops = ((0, 1), (0, 1))
    p, o, slices = PF.transpose_layout(crops, (0, 0), (3, 3), (2, 2), (1, 1), (28, 28), "t")
    assert (p, o, slices) == ((0, 0), (0, 0), ((0, 1), (0, 1)))
    shifted = PF.shifted_layout(crops, (0, 0), (3, 3), (2, 2), (1, 1), (28, 28), "t")
    assert shifted == (((1, 0), (1, 0)), (2, 2), (1, 1), ((0, 0), (0, 0)))


class _Timer:
    """Stands in for the tuner's clock: reports the given (sliced, shifted) seconds and
    counts the measurements."""

    def __init__(self, sliced: float, shifted: float) -> None:
        self.result = (sliced, shifted)
        self.calls = 0

    def __call__(self, run_sliced: Any, run_shifted: Any) -> tuple[float, float, bool]:
        run_sliced()
        run_shifted()
        self.calls += 1
        return (*self.result, True)


@pytest.fixture
def fresh_tuner(monkeypatch: pytest.MonkeyPatch) -> _tune.Tuner:
    tuner = _tune.Tuner()
    monkeypatch.setattr(_dispatch.HOOK.tuner, "measure", True)  # (the tests run with it off)
    monkeypatch.setattr(_transpose, "_SHIFT", tuner)
    monkeypatch.setattr(_transpose, "_SHIFTED", {})
    monkeypatch.setattr(_dispatch, "active", None)  # torch's layouts, not the oneDNN backend
    return tuner


def _layer_and_input(batch: int = 2) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    layer = pnn.ConvTranspose2d(4, 3, 3, stride=2, padding="same").eval()
    x = torch.randn(batch, 4, 7, 6)
    with torch.no_grad():
        ref = cropped_reference(
            x, layer.weight, layer.bias, (2, 2), (1, 1), ((0, 1), (0, 1)), (0, 0)
        )
    return layer, x, ref


def _record_pads(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    seen: list[Any] = []
    run = _transpose.run_transpose

    def spy(*args: Any) -> torch.Tensor:
        seen.append(args[9] if len(args) > 9 else None)
        return run(*args)

    monkeypatch.setattr(_transpose, "run_transpose", spy)
    return seen


@pytest.mark.parametrize(
    ("sliced", "shifted", "takes_shift"),
    [(1.0, 0.5, True), (1.0, 0.99, False), (0.5, 1.0, False)],
)
def test_layer_takes_the_shifted_layout_only_where_measured_faster(
    monkeypatch: pytest.MonkeyPatch,
    fresh_tuner: _tune.Tuner,
    sliced: float,
    shifted: float,
    takes_shift: bool,
) -> None:
    timer = _Timer(sliced, shifted)
    monkeypatch.setattr(_tune, "_time_pair", timer)
    layer, x, ref = _layer_and_input()
    seen = _record_pads(monkeypatch)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(layer(x), ref, rtol=1e-5, atol=1e-5)
    assert timer.calls == 1  # measured once, then remembered
    ran = seen[-3:]  # the layer's three calls (the measurement ran both layouts before)
    assert len(seen) == 5
    assert all((pads is not None) == takes_shift for pads in ran), ran


def test_no_measurement_in_training_deterministic_or_tuning_off(
    monkeypatch: pytest.MonkeyPatch, fresh_tuner: _tune.Tuner
) -> None:
    timer = _Timer(1.0, 0.1)
    monkeypatch.setattr(_tune, "_time_pair", timer)
    layer, x, ref = _layer_and_input()
    # training (autograd records the layer): the slice, torch's own layout
    torch.testing.assert_close(layer(x), ref, rtol=1e-5, atol=1e-5)
    assert timer.calls == 0
    with torch.no_grad():
        prev = torch.are_deterministic_algorithms_enabled()
        torch.use_deterministic_algorithms(True)
        try:
            torch.testing.assert_close(layer(x), ref, rtol=1e-5, atol=1e-5)
        finally:
            torch.use_deterministic_algorithms(prev)
        assert timer.calls == 0
        padkit.native.set_tuning(False)  # as PADKIT_NATIVE_TUNE=0 does
        torch.testing.assert_close(layer(x), ref, rtol=1e-5, atol=1e-5)
        assert timer.calls == 0


def _compiled_ops(
    layer: torch.nn.Module, x: torch.Tensor, grad: bool = False
) -> tuple[torch.Tensor, set[Any]]:
    """The layer under ``torch.compile`` (a fresh graph, run by eager torch) and the ops of
    the graph dynamo captured."""
    graphs: list[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, _inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    with torch.set_grad_enabled(grad):
        out = torch.compile(layer, backend=backend, fullgraph=True)(x)
    assert len(graphs) == 1
    return out, {
        n.target for n in graphs[0].graph.nodes if n.op in ("call_function", "call_method")
    }


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize(
    ("sliced", "shifted", "takes_shift"), [(1.0, 0.5, True), (0.5, 1.0, False)]
)
def test_compiled_layer_takes_the_layout_measured_faster(
    monkeypatch: pytest.MonkeyPatch,
    fresh_tuner: _tune.Tuner,
    channels_last: bool,
    sliced: float,
    shifted: float,
    takes_shift: bool,
) -> None:
    """Compiled (CPU inference), the layer's graph holds the layout that stand-ins of the
    traced input measured faster, timed once outside the trace and shared with eager calls
    of the same signature; compiling leaves the global random state alone."""
    timer = _Timer(sliced, shifted)
    monkeypatch.setattr(_tune, "_time_pair", timer)
    layer, x, ref = _layer_and_input()
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    state = torch.get_rng_state()
    out, ops = _compiled_ops(layer, x)
    assert torch.equal(torch.get_rng_state(), state)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert timer.calls == 1
    assert (torch.constant_pad_nd in ops) == takes_shift, ops
    assert ("narrow" in ops) != takes_shift, ops
    [raw] = _transpose._SHIFTED  # the stand-in had the traced input's shape and strides
    assert raw[:2] == (x.shape, x.stride())
    seen = _record_pads(monkeypatch)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), ref, rtol=1e-5, atol=1e-5)
    assert timer.calls == 1 and (seen[-1] is not None) == takes_shift  # eager: the same choice


def test_compiled_layer_keeps_the_slice_in_training_deterministic_or_tuning_off(
    monkeypatch: pytest.MonkeyPatch, fresh_tuner: _tune.Tuner
) -> None:
    timer = _Timer(1.0, 0.1)
    monkeypatch.setattr(_tune, "_time_pair", timer)
    layer, x, ref = _layer_and_input()
    out, ops = _compiled_ops(layer, x, grad=True)  # training: the weight takes part in autograd
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert out.requires_grad and "narrow" in ops and timer.calls == 0
    prev = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        out, ops = _compiled_ops(layer, x)
    finally:
        torch.use_deterministic_algorithms(prev)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert "narrow" in ops and timer.calls == 0
    padkit.native.set_tuning(False)
    out, ops = _compiled_ops(layer, x)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert "narrow" in ops and timer.calls == 0


def test_compiled_layer_under_freezing_takes_the_shifted_layout(
    monkeypatch: pytest.MonkeyPatch, fresh_tuner: _tune.Tuner
) -> None:
    """Inductor's freezing (visible to the trace in its config) runs the shifted layout
    faster on every shape measured: the plan takes it without timing, where eager would
    keep the slice."""
    import torch._inductor.config as inductor_config

    timer = _Timer(0.5, 1.0)
    monkeypatch.setattr(_tune, "_time_pair", timer)
    layer, x, ref = _layer_and_input()
    with inductor_config.patch(freezing=True):
        out, ops = _compiled_ops(layer, x)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert torch.constant_pad_nd in ops and "narrow" not in ops and timer.calls == 0
    padkit.native.set_tuning(False)  # off: the slice, frozen or not
    with inductor_config.patch(freezing=True):
        out, ops = _compiled_ops(layer, x)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert "narrow" in ops and torch.constant_pad_nd not in ops


@pytest.mark.parametrize("freezing", [False, True])
def test_inductor_runs_the_shifted_layout_exactly(
    monkeypatch: pytest.MonkeyPatch, fresh_tuner: _tune.Tuner, freezing: bool
) -> None:
    """The shifted layout through inductor's own lowering (and its freezing, which packs
    the weight) equals the cropped full output."""
    import torch._inductor.config as inductor_config

    monkeypatch.setattr(_tune, "_time_pair", _Timer(1.0, 0.5))
    layer, x, ref = _layer_and_input()
    torch._dynamo.reset()
    with inductor_config.patch(freezing=freezing), torch.no_grad():
        out = torch.compile(layer, fullgraph=True)(x)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert any(_transpose._SHIFTED.values()) or freezing  # (frozen: taken untimed)
