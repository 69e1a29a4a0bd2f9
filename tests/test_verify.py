"""``padkit verify``: scale-relative tolerance, equal infinities, the float64 run, and the
names of randomised inputs (onnxruntime is the reference throughout)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from padkit.cli import main
from padkit.onnx.verify import ROUNDING_FACTOR, compare_output, verify


def model(nodes: list[object], inputs: dict[str, list[int]], opset: int = 17) -> bytes:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return proto.SerializeToString()


# ----------------------------------------------------------------------------- infinities


def test_equal_infinities_match() -> None:
    """Max-pool windows that see only -inf give -inf in padkit and onnxruntime alike."""
    pool = helper.make_node(
        "MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1]
    )
    x = np.random.default_rng(0).standard_normal((1, 2, 5, 5)).astype(np.float32)
    x[:, :, :2, :2] = -np.inf  # the first window of each channel holds only -inf
    x[0, 1, 4, 4] = np.inf
    for tolerance in ("scale", "elementwise"):
        report = verify(model([pool], {"x": [1, 2, 5, 5]}), [x], tolerance=tolerance)
        assert report.passed, str(report)
        (out,) = report.outputs
        assert out.max_abs_diff < 1e-6 and np.isfinite(out.max_abs_ref)


def test_unequal_infinities_and_nans_mismatch() -> None:
    ref = np.array([-np.inf, 1.0, np.nan])
    assert compare_output("y", ref.copy(), ref).passed
    assert not compare_output("y", np.array([np.inf, 1.0, np.nan]), ref).passed
    assert not compare_output("y", np.array([-3.0e38, 1.0, np.nan]), ref).passed
    assert not compare_output("y", np.array([-np.inf, 1.0, 0.0]), ref).passed
    assert not compare_output("y", np.array([-np.inf, 1.0, np.nan]), np.zeros(3)).passed


# ----------------------------------------------------------------------------- scale


def test_tolerance_is_relative_to_the_outputs_scale() -> None:
    """A deep net's float32 rounding: |diff| 9.3e-4 on a small element of an output whose
    scale is 11.7 passes by scale, fails element by element; a pad-sized error fails."""
    ref = np.linspace(-11.7, 11.7, 101).astype(np.float32)
    ref[50] = 0.01
    rounding = ref.copy()
    rounding[50] += 9.3e-4
    by_scale = compare_output("y", rounding, ref)
    assert by_scale.passed
    assert by_scale.tolerance == pytest.approx(1e-4 + 1e-4 * 11.7)
    assert not compare_output("y", rounding, ref, tolerance="elementwise").passed
    wrong = ref.copy()
    wrong[0] *= 0.9  # a border value off by a tenth, as a wrong pad leaves it
    assert not compare_output("y", wrong, ref).passed
    assert not compare_output("y", ref[:-1], ref).passed


def test_float64_run_tells_rounding_from_mismatch() -> None:
    ref = np.full(10, 5.0)
    wide = ref + 1e-3  # padkit in float64
    mine = wide + 2e-4  # padkit in float32: 2e-4 of its own rounding
    check = compare_output("y", mine, ref, atol=0.0, rtol=1e-5, wide=wide)
    assert check.passed  # 1e-3 <= 10 * 2e-4: rounding
    assert check.float64_diff == pytest.approx(1e-3) and check.rounding == pytest.approx(2e-4)
    assert ROUNDING_FACTOR * 2e-4 >= 1e-3
    far = ref + 0.5
    check = compare_output("y", far + 2e-4, ref, atol=0.0, rtol=1e-5, wide=far)
    assert not check.passed


def test_float64_report_on_a_model() -> None:
    conv = helper.make_node(
        "AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"
    )
    report = verify(model([conv], {"x": [1, 3, 8, 9]}), float64=True)
    assert report.passed and report.float64
    (out,) = report.outputs
    assert out.rounding is not None and out.float64_diff is not None
    assert out.rounding < 1e-5 and out.float64_diff < 1e-5
    text = str(report)
    assert "f64 |diff|" in text and "rounding" in text


def test_unknown_tolerance_is_refused() -> None:
    with pytest.raises(ValueError, match=r"tolerance.*'relative'"):
        verify(b"", tolerance="relative")


# ----------------------------------------------------------------------------- inputs


def test_randomised_inputs_are_named() -> None:
    """An exporter may leave statistics as graph inputs: verify says which it randomised."""
    nodes = [
        helper.make_node("Sub", ["x", "mean"], ["c"]),
        helper.make_node("Div", ["c", "std"], ["y"]),
    ]
    proto = model(nodes, {"x": [1, 3, 4], "mean": [1, 3, 1], "std": [1, 3, 1]})
    report = verify(proto)
    assert report.randomised == ("x", "mean", "std")
    assert "3 inputs were randomised (x, mean, std)" in str(report)
    given = {
        "x": np.ones((1, 3, 4), np.float32),
        "mean": np.zeros((1, 3, 1), np.float32),
        "std": np.ones((1, 3, 1), np.float32),
    }
    report = verify(proto, given)
    assert report.randomised == () and "randomised" not in str(report)


# ----------------------------------------------------------------------------- command line


def test_cli_float64_and_elementwise(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "-q", "--float64"]) == 0
    out = capsys.readouterr().out
    assert "f64 |diff|" in out and "relative to the output's scale" in out
    assert main(["verify", "-q", "--elementwise"]) == 0
    assert "element by element" in capsys.readouterr().out
