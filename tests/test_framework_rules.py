"""Rules that differ per framework, each under its own name: transposed-conv lengths
(ONNX ``auto_pad`` against onnxruntime, torch's ints against torch) and the average-pool
divisor when ``count_include_pad`` is not given. Keras's rules are in test_keras.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

import padkit
import padkit.functional as PF
import padkit.nn as pn
import padkit.onnx
from padkit import PaddingError, conv_transpose_padding

PN_CONV_T = {1: pn.ConvTranspose1d, 2: pn.ConvTranspose2d}


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def run_ort(node: object, feeds: dict[str, np.ndarray], inits: dict[str, np.ndarray]) -> np.ndarray:
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, list(a.shape))
            for n, a in feeds.items()
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(a, n) for n, a in inits.items()],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, feeds)[0])


# ----------------------------------------------------------------------------- ONNX


# (sizes, kernel, stride, output_padding)
ONNX_CASES = [
    ((5,), 3, 2, 1),
    ((5,), 4, 2, 1),
    ((5,), 4, 2, 0),
    ((5,), 4, 3, 2),
    ((5,), 2, 3, 0),  # k < s: onnxruntime keeps (n-1)*s + k
    ((5,), 2, 3, 1),
    ((5,), 1, 3, 2),
    ((4, 5), 3, 2, 1),
    ((4, 5), 5, 3, 1),
]


@pytest.mark.parametrize("mode", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize(("sizes", "k", "s", "op"), ONNX_CASES)
def test_onnx_auto_pad_rules_match_onnxruntime(
    sizes: tuple[int, ...], k: int, s: int, op: int, mode: str
) -> None:
    nd = len(sizes)
    x, w, b = rand(1, 2, *sizes), rand(2, 3, *(k,) * nd, seed=1), rand(3, seed=2)
    attrs = {"strides": [s] * nd, "auto_pad": mode, "output_padding": [op] * nd}
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)
    want = run_ort(node, {"x": x}, {"w": w, "b": b})
    layer = PN_CONV_T[nd](2, 3, k, s, padding=f"onnx_{mode.lower()}", output_padding=op)
    with torch.no_grad():
        layer.weight.copy_(torch.from_numpy(w))
        layer.bias.copy_(torch.from_numpy(b))
        got = layer(torch.from_numpy(x)).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- torch and the spec


@pytest.mark.parametrize("rule", padkit.TRANSPOSE_RULES)
@pytest.mark.parametrize(
    ("k", "s", "d", "op"),
    [(3, 2, 1, 1), (2, 3, 1, None), (3, 1, 2, None), (3, 2, 2, 1), (4, 3, 1, 2)],
)
def test_rules_are_torch_crops(rule: str, k: int, s: int, d: int, op: int | None) -> None:
    """Every named rule resolves to crops + output padding that torch's own transposed
    conv (after an explicit crop) reproduces, independent of the input length."""
    (pair,), (extra,) = conv_transpose_padding(rule, k, s, d, op)
    w = torch.randn(2, 2, k, dtype=torch.float64)
    for n in (4, 5, 7):
        x = torch.randn(1, 2, n, dtype=torch.float64)
        full = torch.nn.functional.conv_transpose1d(x, w, stride=s, dilation=d)
        lo, hi = pair
        end = hi - extra  # negative: zeros appended at the end
        want = full[..., lo : full.shape[-1] - max(end, 0)]
        want = torch.nn.functional.pad(want, (0, max(-end, 0)))
        got = PF.conv_transpose1d(x, w, None, s, rule, op, 1, d)
        torch.testing.assert_close(got, want)


def test_torch_ints_unchanged() -> None:
    x, w = torch.randn(1, 2, 5), torch.randn(2, 3, 3)
    ref = torch.nn.ConvTranspose1d(2, 3, 3, stride=2, padding=1, output_padding=1)
    layer = pn.ConvTranspose1d(2, 3, 3, stride=2, padding=1, output_padding=1)
    layer.load_state_dict(ref.state_dict())
    torch.testing.assert_close(layer(x), ref(x))
    torch.testing.assert_close(
        PF.conv_transpose1d(x, w, None, 2, 1, 1),
        torch.nn.functional.conv_transpose1d(x, w, None, 2, 1, 1),
    )


@pytest.mark.parametrize(
    ("padding", "names"),
    [("same", r"'keras_same' or 'onnx_same_upper'"), ("same_lower", r"'onnx_same_lower'")],
)
def test_same_with_output_padding_is_refused(padding: str, names: str) -> None:
    with pytest.raises(PaddingError, match=rf"ConvTranspose2d.*{padding!r}.*{names}"):
        pn.ConvTranspose2d(2, 2, 3, stride=2, padding=padding, output_padding=1)
    with pytest.raises(PaddingError, match=rf"conv_transpose1d\(\).*{names}"):
        PF.conv_transpose1d(torch.ones(1, 1, 4), torch.ones(1, 1, 3), None, 2, padding, 1)
    # output_padding only on an axis without 'same' is fine
    layer = pn.ConvTranspose2d(1, 1, 3, stride=2, padding=((1, 1), padding), output_padding=(1, 0))
    assert layer(torch.ones(1, 1, 4, 4)).shape[-2:] == (8, 8)


def test_named_rule_errors_name_the_argument() -> None:
    with pytest.raises(PaddingError, match=r"output_padding\[0\]=2.*stride \(2\).*keras_same"):
        pn.ConvTranspose1d(1, 1, 3, stride=2, padding="keras_same", output_padding=2)
    with pytest.raises(PaddingError, match=r"unknown transposed-conv rule 'tf_same'"):
        conv_transpose_padding("tf_same", 3, 2)
    with pytest.raises(PaddingError, match=r"padding.*'keras_same'"):
        pn.Conv2d(1, 1, 3, padding="keras_same")  # forward convs keep their own rules


# ----------------------------------------------------------------------------- average pools


@pytest.mark.parametrize("mode", ["SAME_UPPER", "SAME_LOWER"])
def test_avg_pool_same_default_matches_onnx_default(mode: str) -> None:
    """ONNX AveragePool's count_include_pad defaults to 0, as padkit's 'same' default does."""
    x = rand(1, 2, 8, 7)
    node = helper.make_node(
        "AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], auto_pad=mode
    )
    want = run_ort(node, {"x": x}, {})
    padding = "same" if mode == "SAME_UPPER" else "same_lower"
    got = pn.AvgPool2d(3, 2, padding=padding)(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_avg_pool_torch_ints_default_counts_pads() -> None:
    x = torch.randn(1, 2, 7, 8)
    ref = torch.nn.AvgPool2d(3, 2, 1)
    torch.testing.assert_close(pn.AvgPool2d(3, 2, 1)(x), ref(x))
    torch.testing.assert_close(pn.AvgPool2d(3, 2, ((1, 1), (1, 1)))(x), ref(x))
    torch.testing.assert_close(PF.avg_pool2d(x, 3, 2, 1), ref(x))
    assert pn.AvgPool2d(3, 2, 1).count_include_pad is True
    assert pn.AvgPool2d(3, 2, "same").count_include_pad is False


def test_avg_pool_mixed_conventions_are_refused() -> None:
    with pytest.raises(PaddingError, match=r"AvgPool2d.*mixes.*count_include_pad=True or False"):
        pn.AvgPool2d(3, 2, padding=("same", 1))
    x = torch.randn(1, 1, 6, 6)
    with pytest.raises(PaddingError, match=r"avg_pool2d\(\).*mixes"):
        PF.avg_pool2d(x, 3, 2, padding=("same", 1))
    # explicit count_include_pad settles it; zero pads on the other axis are no conflict
    assert pn.AvgPool2d(3, 2, padding=("same", 1), count_include_pad=False)(x).shape[-2:] == (3, 3)
    torch.testing.assert_close(
        pn.AvgPool2d(3, 2, padding=("same", 0))(x),
        pn.AvgPool2d(3, 2, padding=("same", 0), count_include_pad=False)(x),
    )


def test_onnx_negative_begin_pad_is_refused() -> None:
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2], pads=[-1, 0])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(rand(1, 1, 3), "w")],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(padkit.onnx.OnnxImportError, match=r"pads=\[-1, 0\].*negative begin"):
        padkit.onnx.load(proto)


class _FunctionalKerasValid(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(2, 3, 2, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return PF.conv_transpose2d(x, self.w, None, 3, "keras_valid")


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
@pytest.mark.parametrize(
    "make",
    [
        lambda: pn.ConvTranspose2d(2, 3, 3, stride=2, padding="keras_same", output_padding=1),
        lambda: pn.ConvTranspose2d(2, 3, 4, stride=3, padding="onnx_same_lower", output_padding=2),
        _FunctionalKerasValid,
    ],
    ids=["keras_same", "onnx_same_lower", "functional_keras_valid"],
)
def test_named_rules_export_to_onnx(make: Any) -> None:
    import io

    import onnx

    model = make().eval()
    x = torch.randn(1, 2, 5, 6)
    buf = io.BytesIO()
    torch.onnx.export(model, (x,), buf, dynamo=False, input_names=["x"])
    proto = onnx.load_from_string(buf.getvalue())
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": x.numpy()})
    with torch.no_grad():
        got = model(x).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
