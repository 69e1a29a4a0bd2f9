"""The operators real models need beyond convs and pools, each as a small graph against
onnxruntime (or, where onnxruntime has no kernel, the onnx reference implementation or numpy):
run-time If, NonMaxSuppression, TopK ties, GatherND, Range, Tile, SpaceToDepth /
DepthToSpace, LayerNormalization, unsigned integer arithmetic, empty reductions and
function-defined operators expanded into their bodies."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from padkit.onnx import load  # noqa: E402

torch.set_num_threads(1)

NP_TO_ONNX = {
    np.dtype(np.float32): TensorProto.FLOAT,
    np.dtype(np.int64): TensorProto.INT64,
    np.dtype(np.bool_): TensorProto.BOOL,
    np.dtype(np.uint16): TensorProto.UINT16,
    np.dtype(np.uint32): TensorProto.UINT32,
    np.dtype(np.uint64): TensorProto.UINT64,
}


def model_of(
    nodes: list[Any],
    inputs: dict[str, np.ndarray],
    outputs: list[str],
    opset: int = 17,
    inits: dict[str, np.ndarray] | None = None,
    dynamic: bool = False,
) -> Any:
    graph = helper.make_graph(
        nodes,
        "g",
        [
            helper.make_tensor_value_info(
                k, NP_TO_ONNX[v.dtype], [None] * v.ndim if dynamic else list(v.shape)
            )
            for k, v in inputs.items()
        ],
        [onnx.ValueInfoProto(name=o) for o in outputs],
        initializer=[numpy_helper.from_array(v, k) for k, v in (inits or {}).items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model)  # gives the outputs their types


def padkit_out(model: Any, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    module = load(model)
    with torch.no_grad():
        out = module(*[torch.from_numpy(v) for v in inputs.values()])
    return [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]


def ort_out(model: Any, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return [np.asarray(v) for v in sess.run(None, inputs)]


def same_as_ort(model: Any, inputs: dict[str, np.ndarray], atol: float = 1e-6) -> None:
    got, want = padkit_out(model, inputs), ort_out(model, inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=atol)


RNG = np.random.default_rng(0)


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def test_if_with_a_runtime_condition() -> None:
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["x", "k"], ["t"])],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.array(3.0, np.float32), "k")],
    )
    else_g = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)],
    )
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g),
    ]
    for x in (np.abs(rand(2, 3)), -np.abs(rand(2, 3))):
        model = model_of(
            nodes, {"x": x}, ["y"], inits={"zero": np.array(0.0, np.float32)}, dynamic=True
        )
        same_as_ort(model, {"x": x})


def test_if_with_a_constant_condition_is_inlined() -> None:
    branch = {
        name: helper.make_graph(
            [helper.make_node(op, ["x"], [name])],
            name,
            [],
            [helper.make_tensor_value_info(name, TensorProto.FLOAT, None)],
        )
        for name, op in (("t", "Relu"), ("e", "Neg"))
    }
    nodes = [
        helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.array(True))),
        helper.make_node("If", ["c"], ["y"], then_branch=branch["t"], else_branch=branch["e"]),
    ]
    x = rand(4)
    model = model_of(nodes, {"x": x}, ["y"])
    module = load(model)
    assert "If" not in module.code and "if_" not in module.code
    same_as_ort(model, {"x": x})


@pytest.mark.parametrize("center", [0, 1])
def test_non_max_suppression(center: int) -> None:
    centers = RNG.uniform(0, 10, (2, 40, 2)).astype(np.float32)
    sizes = RNG.uniform(0.5, 4, (2, 40, 2)).astype(np.float32)
    if center:
        boxes = np.concatenate([centers, sizes], -1)
    else:  # corners in either order: [y1, x1, y2, x2]
        a, b = centers - sizes / 2, centers + sizes / 2
        boxes = np.stack([b[..., 1], a[..., 0], a[..., 1], b[..., 0]], -1)
    scores = RNG.uniform(0, 1, (2, 3, 40)).astype(np.float32)
    scores[0, 0, 5] = scores[0, 0, 7]  # a tie: the lower index first
    nodes = [
        helper.make_node(
            "NonMaxSuppression",
            ["boxes", "scores", "max", "iou", "score"],
            ["sel"],
            center_point_box=center,
        )
    ]
    inits = {
        "max": np.array([6], np.int64),
        "iou": np.array([0.3], np.float32),
        "score": np.array([0.2], np.float32),
    }
    feeds = {"boxes": boxes, "scores": scores}
    same_as_ort(model_of(nodes, feeds, ["sel"], inits=inits, dynamic=True), feeds)


@pytest.mark.parametrize("largest", [0, 1])
def test_top_k_ties_keep_the_lower_index_first(largest: int) -> None:
    x = np.array([[3, 1, 3, 2, 1, 3], [0, 0, 0, 1, 1, 1]], np.float32)
    nodes = [helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1, largest=largest)]
    model = model_of(nodes, {"x": x}, ["v", "i"], inits={"k": np.array([4], np.int64)})
    same_as_ort(model, {"x": x})


@pytest.mark.parametrize("batch_dims", [0, 1])
def test_gather_nd(batch_dims: int) -> None:
    x = rand(2, 3, 4)
    idx = np.array([[[0, 1], [1, 2]], [[1, 3], [0, -1]]], np.int64)
    if batch_dims == 0:
        idx = np.array([[[0, 1], [1, 2]], [[1, 0], [0, 2]]], np.int64)
    nodes = [helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=batch_dims)]
    feeds = {"x": x, "i": idx}
    same_as_ort(model_of(nodes, feeds, ["y"]), feeds)


@pytest.mark.parametrize(
    ("start", "limit", "delta"),
    [(0, 10, 3), (10, 4, -2), (0.5, 3.2, 0.7), (1.0, -2.0, -0.25), (5, 5, 1)],
)
def test_range(start: float, limit: float, delta: float) -> None:
    dtype = np.int64 if all(isinstance(v, int) for v in (start, limit, delta)) else np.float32
    feeds = {n: np.array(v, dtype) for n, v in zip("sld", (start, limit, delta))}
    nodes = [helper.make_node("Range", ["s", "l", "d"], ["y"])]
    same_as_ort(model_of(nodes, feeds, ["y"]), feeds)


def test_tile_with_runtime_repeats() -> None:
    feeds = {"x": rand(2, 3), "r": np.array([3, 2], np.int64)}
    nodes = [helper.make_node("Tile", ["x", "r"], ["y"])]
    same_as_ort(model_of(nodes, feeds, ["y"], dynamic=True), feeds)


def test_non_zero_and_expand_chain() -> None:
    x = (rand(3, 4) > 0).astype(np.float32)
    nodes = [
        helper.make_node("NonZero", ["x"], ["nz"]),
        helper.make_node("Transpose", ["nz"], ["t"]),
        helper.make_node("GatherND", ["x", "t"], ["y"]),
    ]
    same_as_ort(model_of(nodes, {"x": x}, ["nz", "y"], dynamic=True), {"x": x})


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_and_back(mode: str) -> None:
    x = rand(2, 8, 3, 5)
    d2s = helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2, mode=mode)
    same_as_ort(model_of([d2s], {"x": x}, ["y"], opset=13, dynamic=True), {"x": x})
    s2d = helper.make_node("SpaceToDepth", ["y"], ["z"], blocksize=2)
    y = rand(2, 2, 6, 4)
    same_as_ort(model_of([s2d], {"y": y}, ["z"], opset=13, dynamic=True), {"y": y})


@pytest.mark.parametrize("axis", [-1, -2, 1])
def test_layer_normalization(axis: int) -> None:
    x = rand(2, 3, 4, 5)
    shape = x.shape[axis:]
    inits = {"s": rand(*shape), "b": rand(*shape)}
    nodes = [
        helper.make_node(
            "LayerNormalization", ["x", "s", "b"], ["y", "m", "inv"], axis=axis, epsilon=1e-3
        )
    ]
    same_as_ort(model_of(nodes, {"x": x}, ["y", "m", "inv"], inits=inits), {"x": x}, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "Less"])
def test_unsigned_arithmetic_matches_numpy(dtype: Any, op: str) -> None:
    info = np.iinfo(dtype)
    a = np.array([0, 1, 7, info.max, info.max - 3, info.max // 2 + 5, 12345], dtype)
    b = np.array([1, 3, 7, 2, info.max, info.max // 2 + 1, info.max], dtype)
    fn = {
        "Add": np.add,
        "Sub": np.subtract,
        "Mul": np.multiply,
        "Div": np.floor_divide,
        "Mod": np.mod,
        "Max": np.maximum,
        "Min": np.minimum,
        "Less": np.less,
    }[op]
    with np.errstate(over="ignore"):
        want = fn(a, b)
    nodes = [helper.make_node(op, ["a", "b"], ["y"])]
    (got,) = padkit_out(model_of(nodes, {"a": a, "b": b}, ["y"]), {"a": a, "b": b})
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin", "ReduceSum", "ReduceProd"])
def test_reduce_over_an_empty_axis_matches_the_reference(op: str) -> None:
    x = np.zeros((2, 0, 3), np.float32)
    nodes = [helper.make_node(op, ["x", "axes"], ["y"], keepdims=1)]
    model = model_of(nodes, {"x": x}, ["y"], opset=18, inits={"axes": np.array([1], np.int64)})
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    (got,) = padkit_out(model, {"x": x})
    assert got.shape == want.shape == (2, 1, 3)
    np.testing.assert_array_equal(got, want)


def test_function_defined_op_expands_into_its_body() -> None:
    """RMSNormalization (opset 23) has no converter: its ONNX function body is converted."""
    x = rand(2, 3, 8)
    inits = {"s": rand(8)}
    nodes = [helper.make_node("RMSNormalization", ["x", "s"], ["y"], epsilon=1e-4)]
    model = model_of(nodes, {"x": x}, ["y"], opset=23, inits=inits)
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    (got,) = padkit_out(model, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("coord", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize(("mode", "ratio"), [("avg", 0), ("avg", 2), ("max", 2)])
def test_roi_align(coord: str, mode: str, ratio: int) -> None:
    x = rand(2, 3, 10, 12)
    corners = RNG.uniform(-2, 14, (5, 2, 2)).astype(np.float32)
    rois = np.concatenate([corners.min(1), corners.max(1)], 1)  # x1, y1, x2, y2
    feeds = {"x": x, "rois": rois, "idx": np.array([0, 1, 1, 0, 1], np.int64)}
    node = helper.make_node(
        "RoiAlign",
        ["x", "rois", "idx"],
        ["y"],
        coordinate_transformation_mode=coord,
        mode=mode,
        output_height=3,
        output_width=4,
        sampling_ratio=ratio,
        spatial_scale=0.8,
    )
    same_as_ort(model_of([node], feeds, ["y"], opset=16), feeds, atol=1e-5)


def test_runtime_reshape_chain_stays_exportable_with_dynamic_batch() -> None:
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape (TorchScript's x.view(x.size(0), -1))
    on a symbolic batch: the Reshape takes its sizes from the input, not from the shape
    tensor's values, so torch.export keeps the batch dynamic."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "w"], ["y"]),
    ]
    inits = {
        "zero": np.array(0, np.int64),
        "ax": np.array([0], np.int64),
        "minus": np.array([-1], np.int64),
        "w": rand(12, 5),
    }
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    module = load(model)
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.export.export(module, (torch.rand(2, 3, 4),), dynamic_shapes=({0: batch},))
    for n in (1, 5):
        x = rand(n, 3, 4)
        (want,) = ort_out(model, {"x": x})
        np.testing.assert_allclose(program.module()(torch.from_numpy(x)).numpy(), want, rtol=1e-5)
