"""What padkit.onnx.load refuses, and how: one UnsupportedOnnxError naming every operator it
cannot convert with its domain, node count and opset; old opsets convert where the operator is
the same; the converter registry refuses two converters for the same schema versions."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

from onnx import TensorProto, helper  # noqa: E402

from padkit.onnx import OnnxImportError, UnsupportedOnnxError, load  # noqa: E402
from padkit.onnx._registry import CONVERTERS, register  # noqa: E402

torch.set_num_threads(1)


def graph_model(
    nodes: list[Any], outputs: str, opsets: dict[str, int], shape: tuple[int, ...] = (2, 3)
) -> Any:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()]
    )
    model.ir_version = 8
    return model


def refusal(model: Any) -> UnsupportedOnnxError:
    with pytest.raises(UnsupportedOnnxError) as info:
        load(model)
    return info.value


def test_ml_domain_only_model_names_its_ops() -> None:
    nodes = [
        helper.make_node("Binarizer", ["x"], ["a"], domain="ai.onnx.ml"),
        helper.make_node("Normalizer", ["a"], ["b"], domain="ai.onnx.ml"),
        helper.make_node("Binarizer", ["b"], ["c"], domain="ai.onnx.ml"),
    ]
    err = refusal(graph_model(nodes, "c", {"ai.onnx.ml": 3}))
    text = str(err)
    assert "3 node(s)" in text
    assert "Binarizer (domain ai.onnx.ml, opset 3) x2" in text
    assert "Normalizer (domain ai.onnx.ml, opset 3) x1" in text
    entry = next(u for u in err.unsupported if u.op == "ai.onnx.ml::Binarizer")
    assert (entry.domain, entry.opset, entry.nodes) == ("ai.onnx.ml", 3, 2)


def test_mixed_domains_each_report_their_own_opset() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("StringNormalizer", ["a"], ["b"]),
        helper.make_node("Binarizer", ["a"], ["c"], domain="ai.onnx.ml"),
        helper.make_node("FusedConv", ["a"], ["d"], domain="com.microsoft"),
        helper.make_node("Mystery", ["a"], ["e"], domain="org.example"),
    ]
    opsets = {"": 17, "ai.onnx.ml": 3, "com.microsoft": 1}
    err = refusal(graph_model(nodes, "bcde", opsets))
    text = str(err)
    assert "4 node(s)" in text and "(4 kind(s))" in text
    assert "StringNormalizer (domain ai.onnx, opset 17, schema version 10) x1" in text
    assert "Binarizer (domain ai.onnx.ml, opset 3) x1" in text
    assert "FusedConv (domain com.microsoft, opset 1) x1" in text
    assert "Mystery (domain org.example, opset 0) x1" in text
    assert "does not import the org.example domain" in text
    assert "Relu" not in text
    assert {(u.domain, u.opset) for u in err.unsupported} == {
        ("ai.onnx", 17),
        ("ai.onnx.ml", 3),
        ("com.microsoft", 1),
        ("org.example", 0),
    }


def test_unknown_default_domain_op_is_named() -> None:
    err = refusal(graph_model([helper.make_node("NoSuchOp", ["x"], ["y"])], "y", {"": 13}))
    assert "NoSuchOp (domain ai.onnx, opset 13) x1" in str(err)
    assert "knows no NoSuchOp" in str(err)


def test_opset_1_model_with_a_current_op_converts() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sigmoid", ["r"], ["y"])]
    module = load(graph_model(nodes, "y", {"": 1}))
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    want = 1.0 / (1.0 + np.exp(-np.maximum(x, 0.0)))
    np.testing.assert_allclose(module(torch.from_numpy(x)).numpy(), want, rtol=1e-6)


def test_opset_1_legacy_forms() -> None:
    # Add-1 with broadcast=1 and axis, Concat-1 without axis (1), Cast-1 naming its type
    nodes = [
        helper.make_node("Add", ["x", "b"], ["s"], broadcast=1, axis=1),
        helper.make_node("Concat", ["s", "x"], ["c"]),
        helper.make_node("Cast", ["c"], ["y"], to="DOUBLE"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 1)])
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    want = np.concatenate([x + b[None, :, None], x], axis=1).astype(np.float64)
    got = load(model)(torch.from_numpy(x), torch.from_numpy(b))
    assert got.dtype == torch.float64
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def test_old_versions_the_converter_does_not_cover_are_named() -> None:
    nodes = [
        helper.make_node("Pad", ["x"], ["p"], paddings=[0, 1, 0, 1]),
        helper.make_node("Dropout", ["p"], ["y"], is_test=0),
    ]
    err = refusal(graph_model(nodes, "y", {"": 1}))
    text = str(err)
    assert "Pad (domain ai.onnx, opset 1) x1: padkit converts Pad from schema version 2" in text
    # Dropout-1 converts, but its training-mode default cannot: named with the node
    nodes[0] = helper.make_node("Relu", ["x"], ["p"])
    err = refusal(graph_model(nodes, "y", {"": 1}))
    assert "Dropout (domain ai.onnx, opset 1) x1: is_test=0" in str(err)


def test_model_local_functions_are_inlined() -> None:
    body = [
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Neg", ["r"], ["o"]),
    ]
    fn = helper.make_function(
        "local.fns", "NegRelu", ["a"], ["o"], body, [helper.make_opsetid("", 17)]
    )
    nodes = [helper.make_node("NegRelu", ["x"], ["y"], domain="local.fns")]
    model = graph_model(nodes, "y", {"": 17, "local.fns": 1})
    model.functions.append(fn)
    x = np.random.default_rng(2).standard_normal((2, 3)).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, {"x": x})
    np.testing.assert_array_equal(load(model)(torch.from_numpy(x)).numpy(), want)


def test_errors_are_value_and_not_implemented_errors() -> None:
    err = refusal(
        graph_model(
            [helper.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml")],
            "y",
            {"ai.onnx.ml": 1},
        )
    )
    assert isinstance(err, NotImplementedError)
    assert isinstance(err, OnnxImportError)
    assert isinstance(err, ValueError)


def test_registry_refuses_duplicate_registrations() -> None:
    def first(ctx: Any) -> list[Any]:
        return []

    def second(ctx: Any) -> list[Any]:
        return []

    try:
        register("PadkitTestOp", since=3)(first)
        register("PadkitTestOp", since=5)(second)  # another version range is fine
        with pytest.raises(ValueError, match=r"PadkitTestOp from schema version 3 .*first"):
            register("PadkitTestOp", since=3)(second)
        assert [v for v, _ in CONVERTERS["PadkitTestOp"]] == [3, 5]
    finally:
        CONVERTERS.pop("PadkitTestOp", None)


def test_registered_converters_are_unique() -> None:
    from padkit.onnx import supported_ops

    supported_ops()  # imports every converter module
    for op, entries in CONVERTERS.items():
        versions = [v for v, _ in entries]
        assert len(versions) == len(set(versions)), op
