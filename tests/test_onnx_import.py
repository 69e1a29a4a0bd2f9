"""padkit.onnx.load: padding semantics and the CNN operator set, checked against
onnxruntime (1 thread), and against JAX where onnxruntime deviates from the ONNX spec."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from padkit.onnx import OnnxImportError, UnsupportedOnnxError, load  # noqa: E402

torch.set_num_threads(1)

NP_TO_ONNX = {
    np.dtype("float32"): TensorProto.FLOAT,
    np.dtype("float64"): TensorProto.DOUBLE,
    np.dtype("int64"): TensorProto.INT64,
    np.dtype("int32"): TensorProto.INT32,
    np.dtype("uint8"): TensorProto.UINT8,
    np.dtype("int8"): TensorProto.INT8,
    np.dtype("bool"): TensorProto.BOOL,
}


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def make_model(
    op: str,
    inputs: dict[str, np.ndarray],
    attrs: dict[str, Any] | None = None,
    *,
    inits: dict[str, np.ndarray] | None = None,
    n_out: int = 1,
    opset: int | None = None,
    order: list[str] | None = None,
) -> Any:
    """A one-node model; ``inputs`` become graph inputs, ``inits`` initializers; ``order``
    names the node inputs ("" for an omitted optional one)."""
    inits = inits or {}
    names = order if order is not None else [*inputs, *inits]
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, names, outs, **(attrs or {}))
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(k, NP_TO_ONNX[v.dtype], v.shape) for k, v in inputs.items()],
        [helper.make_empty_tensor_value_info(o) for o in outs],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    version = opset or onnx.defs.onnx_opset_version()
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", version)])


def run_ort(model: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return [np.asarray(v) for v in sess.run(None, feeds)]


def run_padkit(model: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    module = load(model)
    with torch.no_grad():
        out = module(*[torch.from_numpy(v) for v in feeds.values()])
    outs = out if isinstance(out, tuple) else (out,)
    return [o.numpy() for o in outs]


def check_vs_ort(model: Any, feeds: dict[str, np.ndarray], *, atol: float = 1e-5) -> None:
    want = run_ort(model, feeds)
    got = run_padkit(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert g.shape == w.shape, (g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=atol)


def check_op(
    op: str,
    inputs: dict[str, np.ndarray],
    attrs: dict[str, Any] | None = None,
    **kw: Any,
) -> None:
    model = make_model(op, inputs, attrs, **kw)
    check_vs_ort(model, inputs)


# ----------------------------------------------------------------------------- Conv


CONV_CASES = [
    # (input shape, weight shape, attrs)
    ((1, 2, 7), (3, 2, 3), {"pads": [0, 2]}),
    ((1, 2, 7, 6), (3, 2, 3, 2), {"pads": [1, 0, 2, 1], "strides": [2, 1]}),
    ((1, 2, 7, 6), (3, 2, 4, 4), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 2, 8, 6), (3, 2, 4, 4), {"auto_pad": "SAME_LOWER", "strides": [2, 3]}),
    ((1, 2, 5, 6), (3, 2, 2, 2), {"auto_pad": "SAME_UPPER"}),
    ((1, 2, 5, 6), (3, 2, 2, 3), {"auto_pad": "SAME_LOWER"}),
    ((1, 2, 7, 6), (3, 2, 3, 3), {"auto_pad": "VALID", "strides": [2, 2]}),
    ((1, 2, 9, 9), (4, 1, 3, 3), {"pads": [2, 1, 0, 3], "dilations": [2, 3], "group": 2}),
    ((2, 2, 5, 6, 4), (3, 2, 3, 2, 2), {"pads": [1, 0, 1, 0, 1, 1]}),
    ((1, 2, 5, 6, 7), (3, 2, 2, 3, 4), {"auto_pad": "SAME_UPPER", "strides": [2, 2, 3]}),
]


@pytest.mark.parametrize("as_init", [True, False], ids=["weights-init", "weights-input"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize(("xs", "ws", "attrs"), CONV_CASES)
def test_conv(
    xs: tuple[int, ...], ws: tuple[int, ...], attrs: dict[str, Any], as_init: bool, bias: bool
) -> None:
    x, w, b = rand(*xs), rand(*ws, seed=1), rand(ws[0], seed=2)
    params = {"w": w, "b": b} if bias else {"w": w}
    if as_init:
        model = make_model("Conv", {"x": x}, attrs, inits=params)
        check_vs_ort(model, {"x": x})
    else:
        check_op("Conv", {"x": x, **params}, attrs)


def test_conv_weights_become_padkit_layers() -> None:
    import padkit.nn

    model = make_model(
        "Conv",
        {"x": rand(1, 2, 8)},
        {"auto_pad": "SAME_UPPER", "strides": [2]},
        inits={"w": rand(3, 2, 3)},
    )
    module = load(model)
    convs = [m for m in module.modules() if isinstance(m, padkit.nn.Conv1d)]
    assert len(convs) == 1 and convs[0].pad_spec.axes == ("same",)


@pytest.mark.parametrize("mode", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize(("n", "k", "s", "d"), [(7, 2, 1, 3), (9, 3, 2, 2), (8, 4, 3, 2)])
def test_conv_same_dilated_follows_spec(mode: str, n: int, k: int, s: int, d: int) -> None:
    """ORT refuses auto_pad=SAME_* with dilation; the spec sizes the pad with the dilated
    kernel (convPoolShapeInference), as JAX does."""
    jax = pytest.importorskip("jax")
    x, w = rand(1, 2, n, n + 1), rand(3, 2, k, k, seed=1)
    attrs = {"auto_pad": mode, "strides": [s, s], "dilations": [d, d]}
    got = run_padkit(make_model("Conv", {"x": x, "w": w}, attrs), {"x": x, "w": w})[0]
    want = jax.lax.conv_general_dilated(
        x, w, (s, s), "SAME" if mode == "SAME_UPPER" else "SAME_LOWER", rhs_dilation=(d, d)
    )
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- ConvTranspose


CONVT_CASES = [
    ((1, 2, 3), (2, 3, 3), {"strides": [2], "pads": [1, 0], "output_padding": [1]}),
    ((1, 2, 4, 3), (2, 3, 3, 2), {"strides": [3, 2], "pads": [2, 1, 0, 1]}),
    ((1, 2, 3, 3), (2, 3, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 3, 3), (2, 3, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    (
        (1, 2, 3, 3),
        (2, 3, 3, 3),
        {"strides": [2, 2], "auto_pad": "SAME_UPPER", "output_padding": [1, 1]},
    ),
    ((1, 2, 3, 3), (2, 3, 2, 2), {"strides": [3, 3], "auto_pad": "SAME_UPPER"}),  # k < s
    (
        (1, 2, 3, 3),
        (2, 3, 2, 2),
        {"strides": [3, 3], "auto_pad": "SAME_LOWER", "output_padding": [2, 1]},
    ),
    ((1, 2, 3, 4), (2, 3, 3, 3), {"strides": [2, 2], "output_shape": [6, 8]}),
    (
        (1, 2, 3, 4),
        (2, 3, 3, 3),
        {"strides": [2, 2], "output_shape": [6, 8], "auto_pad": "SAME_UPPER"},
    ),
    (
        (1, 2, 3, 4),
        (2, 3, 3, 3),
        {"strides": [2, 2], "output_shape": [6, 8], "auto_pad": "SAME_LOWER"},
    ),
    ((1, 2, 3, 4), (2, 3, 3, 3), {"strides": [2, 2], "output_shape": [8, 9]}),  # extends
    (
        (1, 2, 3, 4),
        (2, 3, 3, 3),
        {"strides": [2, 2], "output_shape": [7, 9], "output_padding": [1, 1]},
    ),
    (
        (1, 4, 3, 4),
        (4, 1, 2, 3),
        {"strides": [2, 1], "dilations": [2, 2], "group": 2, "pads": [1, 0, 0, 2]},
    ),
    ((1, 2, 3, 2, 2), (2, 2, 2, 3, 2), {"strides": [2, 1, 2], "pads": [0, 1, 1, 1, 0, 0]}),
    ((1, 2, 3, 4), (2, 3, 3, 3), {"strides": [2, 2], "auto_pad": "VALID"}),
]


@pytest.mark.parametrize("as_init", [True, False], ids=["weights-init", "weights-input"])
@pytest.mark.parametrize(("xs", "ws", "attrs"), CONVT_CASES)
def test_conv_transpose(
    xs: tuple[int, ...], ws: tuple[int, ...], attrs: dict[str, Any], as_init: bool
) -> None:
    x = rand(*xs)
    params = {"w": rand(*ws, seed=1), "b": rand(ws[1] * attrs.get("group", 1), seed=2)}
    if as_init:
        model = make_model("ConvTranspose", {"x": x}, attrs, inits=params)
        check_vs_ort(model, {"x": x})
    else:
        check_op("ConvTranspose", {"x": x, **params}, attrs)


def test_conv_transpose_output_shape_dynamic_size() -> None:
    """output_shape with an input whose spatial size is unknown at import time."""
    w = rand(2, 3, 3, 3, seed=1)
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], output_shape=[6, 8])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])
    x = rand(2, 2, 3, 4)
    check_vs_ort(model, {"x": x})


# ----------------------------------------------------------------------------- pools

POOL_CASES = [
    # (input shape, attrs) -- pads < kernel so that ORT accepts them
    ((1, 2, 9), {"kernel_shape": [3], "pads": [2, 0], "strides": [2]}),
    ((1, 2, 7, 8), {"kernel_shape": [3, 2], "pads": [0, 1, 2, 0]}),
    ((1, 2, 7, 8), {"kernel_shape": [3, 3], "pads": [2, 2, 2, 2], "strides": [2, 2]}),
    ((1, 2, 7, 8), {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 2, 8, 7), {"kernel_shape": [3, 4], "auto_pad": "SAME_LOWER", "strides": [2, 3]}),
    ((1, 2, 8, 7), {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 7, 8), {"kernel_shape": [3, 3], "auto_pad": "VALID", "strides": [2, 2]}),
    (
        (1, 2, 4, 5),
        {"kernel_shape": [2, 2], "pads": [0, 0, 1, 1], "strides": [2, 2], "ceil_mode": 1},
    ),
    (
        (1, 2, 6, 5),
        {"kernel_shape": [3, 3], "pads": [1, 0, 1, 2], "strides": [2, 2], "ceil_mode": 1},
    ),
    ((1, 2, 5, 5), {"kernel_shape": [4, 4], "strides": [4, 4], "ceil_mode": 1}),  # ONNX ceil_mode
    (
        (1, 2, 2, 2),
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [3, 3], "ceil_mode": 1},
    ),
    (
        (1, 2, 9, 8),
        {"kernel_shape": [2, 3], "pads": [1, 0, 1, 2], "dilations": [2, 2], "strides": [1, 2]},
    ),
    (
        (1, 2, 9, 8),
        {
            "kernel_shape": [2, 2],
            "pads": [1, 1, 0, 1],
            "dilations": [3, 2],
            "strides": [2, 2],
            "ceil_mode": 1,
        },
    ),
    (
        (1, 1, 4, 4, 5),
        {"kernel_shape": [2, 3, 2], "pads": [1, 0, 1, 0, 2, 1], "strides": [2, 1, 2]},
    ),
]

AVG_EXTRA = [{"count_include_pad": 0}, {"count_include_pad": 1}]


@pytest.mark.parametrize(("xs", "attrs"), POOL_CASES)
def test_max_pool(xs: tuple[int, ...], attrs: dict[str, Any]) -> None:
    check_op("MaxPool", {"x": rand(*xs)}, attrs)


@pytest.mark.parametrize("extra", AVG_EXTRA, ids=["exclude_pad", "include_pad"])
@pytest.mark.parametrize(("xs", "attrs"), POOL_CASES)
def test_average_pool(xs: tuple[int, ...], attrs: dict[str, Any], extra: dict[str, Any]) -> None:
    if "dilations" in attrs and attrs.get("auto_pad", "NOTSET").startswith("SAME"):
        pytest.skip("ORT mis-sizes dilated SAME pools; see test_same_pool_dilated")
    check_op("AveragePool", {"x": rand(*xs)}, {**attrs, **extra})


@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize(("xs", "attrs"), POOL_CASES)
def test_lp_pool(xs: tuple[int, ...], attrs: dict[str, Any], p: int) -> None:
    check_op("LpPool", {"x": rand(*xs)}, {**attrs, "p": p})


@pytest.mark.parametrize("opset", [8, 10, 11, 12])
def test_pools_older_opsets(opset: int) -> None:
    x = rand(1, 2, 7, 8)
    attrs = {"kernel_shape": [3, 2], "pads": [0, 1, 2, 0], "strides": [2, 1]}
    check_op("MaxPool", {"x": x}, attrs, opset=opset)
    check_op("AveragePool", {"x": x}, attrs, opset=opset)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.float64])
def test_max_pool_dtypes(dtype: Any) -> None:
    x = (rand(1, 2, 6, 7) * 50).astype(dtype)
    check_op("MaxPool", {"x": x}, {"kernel_shape": [3, 3], "pads": [2, 0, 1, 2]})


@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [3, 2], "pads": [1, 0, 2, 1], "strides": [2, 1]},
        {"kernel_shape": [2, 2], "strides": [2, 2]},
    ],
)
def test_max_pool_indices(attrs: dict[str, Any], storage_order: int) -> None:
    x = rand(2, 3, 6, 5)
    check_op("MaxPool", {"x": x}, {**attrs, "storage_order": storage_order}, n_out=2)


def _jax_pool(x: np.ndarray, op: str, k: int, s: int, d: int, padding: Any) -> np.ndarray:
    jax = pytest.importorskip("jax")
    lax = jax.lax
    win, strides, dil = (1, 1, k, k), (1, 1, s, s), (1, 1, d, d)
    if isinstance(padding, str):
        pads = lax.padtype_to_pads(x.shape[2:], (d * (k - 1) + 1,) * 2, (s, s), padding)
        padding = [(0, 0), (0, 0), *pads]
    if op == "max":
        return np.asarray(
            lax.reduce_window(x, -np.inf, lax.max, win, strides, padding, window_dilation=dil)
        )
    total = lax.reduce_window(x, 0.0, lax.add, win, strides, padding, window_dilation=dil)
    if op == "lp2":
        total = lax.reduce_window(x * x, 0.0, lax.add, win, strides, padding, window_dilation=dil)
        return np.asarray(total) ** 0.5
    count = lax.reduce_window(
        np.ones_like(x), 0.0, lax.add, win, strides, padding, window_dilation=dil
    )
    return np.asarray(total / count)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
@pytest.mark.parametrize("mode", ["SAME_UPPER", "SAME_LOWER"])
@pytest.mark.parametrize(("n", "k", "s", "d"), [(5, 2, 1, 2), (8, 3, 2, 2), (7, 2, 2, 3)])
def test_same_pool_dilated(op: str, mode: str, n: int, k: int, s: int, d: int) -> None:
    """ORT ignores the dilation when sizing SAME pools; the spec (and JAX) use k_eff."""
    x = rand(1, 2, n, n)
    attrs = {"kernel_shape": [k, k], "strides": [s, s], "dilations": [d, d], "auto_pad": mode}
    if op == "LpPool":
        attrs["p"] = 2
    got = run_padkit(make_model(op, {"x": x}, attrs), {"x": x})[0]
    ref_op = {"MaxPool": "max", "AveragePool": "avg", "LpPool": "lp2"}[op]
    want = _jax_pool(x, ref_op, k, s, d, "SAME" if mode == "SAME_UPPER" else "SAME_LOWER")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_same_pool_kernel_smaller_than_stride(op: str) -> None:
    """SAME with k < s: the spec clamps the total pad at 0 (ORT raises)."""
    x = rand(1, 1, 5, 7)
    attrs = {"kernel_shape": [1, 2], "strides": [2, 3], "auto_pad": "SAME_UPPER"}
    got = run_padkit(make_model(op, {"x": x}, attrs), {"x": x})[0]
    want = x[:, :, ::2, :][:, :, :, [0, 3, 6]]
    if op == "MaxPool":
        want = np.maximum(want, np.concatenate([x[:, :, ::2, [1, 4]], want[..., 2:]], -1))
    else:
        want = (want + np.concatenate([x[:, :, ::2, [1, 4]], want[..., 2:]], -1)) / 2
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_pool_pads_larger_than_kernel_follow_spec() -> None:
    """pads >= kernel (ORT refuses; the spec only asks pads >= 0): windows that lie wholly
    in the padding give -inf for MaxPool."""
    x = rand(1, 1, 4)
    model = make_model("MaxPool", {"x": x}, {"kernel_shape": [2], "pads": [3, 0]})
    got = run_padkit(model, {"x": x})[0][0, 0]
    assert got.shape == (6,)
    assert np.isneginf(got[:2]).all()
    want = [x[0, 0, 0], *np.maximum(x[0, 0, :-1], x[0, 0, 1:])]
    np.testing.assert_allclose(got[2:], want)


def test_tiny_yolo_final_pool() -> None:
    """tiny-YOLOv2's MaxPool k=2 s=1 pads [0,0,1,1] keeps 13x13."""
    x = rand(1, 8, 13, 13)
    attrs = {"kernel_shape": [2, 2], "strides": [1, 1], "pads": [0, 0, 1, 1]}
    check_op("MaxPool", {"x": x}, attrs)


@pytest.mark.parametrize("size", [3, 4])
def test_lrn_window_follows_spec(size: int) -> None:
    """ONNX LRN sums channels [c - (size-1)//2, c + ceil((size-1)/2)] (ORT: odd sizes only)."""
    x = rand(2, 6, 3, 2)
    attrs = {"size": size, "alpha": 0.05, "beta": 0.6, "bias": 1.5}
    got = run_padkit(make_model("LRN", {"x": x}, attrs), {"x": x})[0]
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    sq = np.pad(x * x, [(0, 0), (lo, hi), (0, 0), (0, 0)])
    sums = np.stack([sq[:, c : c + size].sum(1) for c in range(x.shape[1])], 1)
    want = x / (1.5 + 0.05 / size * sums) ** 0.6
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_global_pools() -> None:
    check_op("GlobalAveragePool", {"x": rand(2, 3, 4, 5)})
    check_op("GlobalMaxPool", {"x": rand(2, 3, 4, 5, 2)})


# ----------------------------------------------------------------------------- Pad

PAD_CASES = [
    ("constant", [0, 0, 1, 2, 0, 0, 3, 0], None, 1.5),
    ("constant", [0, 1, -1, 2, 0, -1, 2, -2], None, 0.0),
    ("reflect", [0, 0, 2, 1, 0, 0, 1, 3], None, None),
    ("reflect", [0, 0, -1, 2, 0, 0, 2, -1], None, None),
    ("reflect", [0, 1, 0, 0, 0, 1, 0, 0], None, None),
    ("edge", [0, 0, 3, -2, 0, 0, 5, 1], None, None),
    ("edge", [1, 0, 0, 0, 0, 2, 0, 0], None, None),
    ("wrap", [0, 0, 2, 3, 0, 0, 1, 4], None, None),
    ("wrap", [0, 0, 5, -1, 0, 0, 7, 6], None, None),  # wraps more than once
    ("constant", [1, -1, 2, 3], [1, 3], 2.0),
    ("reflect", [1, 2, 2, 1], [-2, -1], None),
    ("wrap", [3, 1], [-1], None),
]


@pytest.mark.parametrize(("mode", "pads", "axes", "value"), PAD_CASES)
def test_pad(mode: str, pads: list[int], axes: list[int] | None, value: float | None) -> None:
    x = rand(2, 3, 4, 5)
    inits: dict[str, np.ndarray] = {"pads": np.array(pads, np.int64)}
    order = ["x", "pads"]
    if value is not None:
        inits["value"] = np.array(value, np.float32)
        order.append("value")
    if axes is not None:
        if value is None:
            order.append("")
        inits["axes"] = np.array(axes, np.int64)
        order.append("axes")
    model = make_model("Pad", {"x": x}, {"mode": mode}, inits=inits, order=order)
    check_vs_ort(model, {"x": x})


def test_pad_dynamic_pads_and_int_data() -> None:
    x = (rand(1, 2, 4, 5) * 10).astype(np.int64)
    feeds = {"x": x, "pads": np.array([0, 0, 1, -1, 0, 0, 2, 3], np.int64)}
    model = make_model(
        "Pad",
        feeds,
        {"mode": "constant"},
        inits={"v": np.array(7, np.int64)},
        order=["x", "pads", "v"],
    )
    check_vs_ort(model, feeds)


@pytest.mark.parametrize("opset", [7, 11, 13, 18, 19])
def test_pad_opsets(opset: int) -> None:
    x = rand(1, 2, 4, 5)
    if opset < 11:
        model = make_model(
            "Pad", {"x": x}, {"mode": "edge", "pads": [0, 0, 1, 2, 0, 0, 2, 1]}, opset=opset
        )
    else:
        model = make_model(
            "Pad",
            {"x": x},
            {"mode": "reflect"},
            opset=opset,
            inits={"p": np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)},
        )
    check_vs_ort(model, {"x": x})


def test_pad_reflect_too_large_raises() -> None:
    x = rand(1, 1, 3)
    model = make_model(
        "Pad", {"x": x}, {"mode": "reflect"}, inits={"p": np.array([0, 0, 3, 0, 0, 0], np.int64)}
    )
    with pytest.raises(ValueError, match="reflect"):
        run_padkit(model, {"x": x})


# ----------------------------------------------------------------------------- other ops

X = rand(2, 3, 4, 5)
OP_CASES: list[tuple[str, dict[str, np.ndarray], dict[str, Any], dict[str, Any]]] = [
    ("Relu", {"x": X}, {}, {}),
    ("LeakyRelu", {"x": X}, {"alpha": 0.2}, {}),
    ("Sigmoid", {"x": X}, {}, {}),
    ("Tanh", {"x": X}, {}, {}),
    ("HardSigmoid", {"x": X}, {"alpha": 0.3, "beta": 0.4}, {}),
    ("HardSwish", {"x": X * 4}, {}, {}),
    ("Elu", {"x": X}, {"alpha": 0.7}, {}),
    ("Selu", {"x": X}, {}, {}),
    ("Softplus", {"x": X}, {}, {}),
    ("Erf", {"x": X}, {}, {}),
    ("Exp", {"x": X}, {}, {}),
    ("Neg", {"x": X}, {}, {}),
    ("Sqrt", {"x": np.abs(X)}, {}, {}),
    ("Gelu", {"x": X}, {}, {}),
    ("Gelu", {"x": X}, {"approximate": "tanh"}, {}),
    ("Identity", {"x": X}, {}, {}),
    ("Dropout", {"x": X}, {}, {}),
    ("Dropout", {"x": X}, {"ratio": 0.3}, {"opset": 7}),
    ("PRelu", {"x": X}, {}, {"inits": {"slope": rand(3, 1, 1, seed=3)}}),
    ("Clip", {"x": X}, {"min": -0.5, "max": 0.7}, {"opset": 7}),
    ("Clip", {"x": X}, {}, {"inits": {"lo": np.array(-0.2, np.float32)}}),
    ("Add", {"x": X, "z": rand(5, seed=2)}, {}, {}),
    ("Sub", {"x": X, "z": rand(4, 1, seed=2)}, {}, {}),
    ("Mul", {"x": X}, {}, {"inits": {"z": rand(3, 1, 1, seed=2)}}),
    ("Div", {"x": X, "z": rand(1, 3, 1, 1, seed=2) + 3}, {}, {}),
    ("Div", {"x": np.array([7, -7, 9], np.int64), "z": np.array([2, 2, -4], np.int64)}, {}, {}),
    ("Pow", {"x": np.abs(X)}, {}, {"inits": {"z": np.array(1.5, np.float32)}}),
    ("Sum", {"x": X, "z": rand(5, seed=2), "w": rand(4, 5, seed=3)}, {}, {}),
    ("Concat", {"x": X, "z": rand(2, 1, 4, 5, seed=2)}, {"axis": 1}, {}),
    ("Split", {"x": X}, {"axis": 3, "split": [2, 3]}, {"opset": 11, "n_out": 2}),
    ("Split", {"x": X}, {"axis": 2}, {"opset": 13, "n_out": 2}),
    ("Split", {"x": X}, {"axis": 3, "num_outputs": 2}, {"n_out": 2}),
    ("Split", {"x": X}, {"axis": -1}, {"inits": {"s": np.array([1, 4], np.int64)}, "n_out": 2}),
    ("Slice", {"x": X}, {"starts": [1, 0], "ends": [3, -1], "axes": [2, 3]}, {"opset": 9}),
    (
        "Slice",
        {"x": X},
        {},
        {
            "inits": {
                "st": np.array([-1, 4], np.int64),
                "en": np.array([-1000, 0], np.int64),
                "ax": np.array([2, -1], np.int64),
                "sp": np.array([-1, -2], np.int64),
            }
        },
    ),
    ("Flatten", {"x": X}, {"axis": 2}, {}),
    ("Flatten", {"x": X}, {"axis": 0}, {}),
    ("Reshape", {"x": X}, {}, {"inits": {"s": np.array([0, -1, 5], np.int64)}}),
    ("Transpose", {"x": X}, {"perm": [0, 2, 3, 1]}, {}),
    ("Transpose", {"x": X}, {}, {}),
    ("Squeeze", {"x": rand(2, 1, 3, 1)}, {"axes": [1, -1]}, {"opset": 11}),
    ("Squeeze", {"x": rand(2, 1, 3, 1)}, {}, {}),
    ("Unsqueeze", {"x": X}, {"axes": [0, -1]}, {"opset": 11}),
    ("Unsqueeze", {"x": X}, {}, {"inits": {"a": np.array([1, 5], np.int64)}}),
    (
        "Gemm",
        {"x": rand(4, 6)},
        {"transB": 1},
        {"inits": {"b": rand(3, 6, seed=2), "c": rand(3, seed=3)}},
    ),
    (
        "Gemm",
        {"x": rand(6, 4)},
        {"transA": 1, "alpha": 0.5, "beta": 2.0},
        {"inits": {"b": rand(6, 3, seed=2), "c": rand(4, 3, seed=3)}},
    ),
    ("Gemm", {"x": rand(4, 6), "b": rand(6, 3, seed=2)}, {}, {}),
    ("MatMul", {"x": X}, {}, {"inits": {"w": rand(5, 2, seed=2)}}),
    ("Softmax", {"x": X}, {"axis": 1}, {"opset": 11}),
    ("Softmax", {"x": X}, {"axis": 2}, {}),
    ("Softmax", {"x": X}, {}, {}),
    ("ReduceMean", {"x": X}, {"axes": [2, 3]}, {"opset": 13}),
    ("ReduceMean", {"x": X}, {"keepdims": 0}, {"inits": {"a": np.array([-1], np.int64)}}),
    (
        "BatchNormalization",
        {"x": X},
        {"epsilon": 1e-3},
        {
            "inits": {
                "s": rand(3, seed=2),
                "b": rand(3, seed=3),
                "m": rand(3, seed=4),
                "v": np.abs(rand(3, seed=5)) + 0.5,
            }
        },
    ),
    (
        "BatchNormalization",
        {"x": rand(2, 3)},
        {},
        {
            "opset": 9,
            "inits": {
                "s": rand(3, seed=2),
                "b": rand(3, seed=3),
                "m": rand(3, seed=4),
                "v": np.abs(rand(3, seed=5)) + 0.5,
            },
        },
    ),
    (
        "InstanceNormalization",
        {"x": X},
        {"epsilon": 1e-4},
        {"inits": {"s": rand(3, seed=2), "b": rand(3, seed=3)}},
    ),
    ("LRN", {"x": rand(2, 7, 3, 3)}, {"size": 3, "alpha": 0.01, "beta": 0.6, "bias": 1.5}, {}),
    ("Gather", {"x": X}, {"axis": 1}, {"inits": {"i": np.array([[2, -1], [0, 1]], np.int64)}}),
    ("Gather", {"x": X}, {"axis": 3}, {"inits": {"i": np.array(-2, np.int64)}}),
    ("Cast", {"x": X * 4}, {"to": TensorProto.INT32}, {}),
    ("Cast", {"x": X}, {"to": TensorProto.DOUBLE}, {}),
    ("Shape", {"x": X}, {}, {}),
    ("Shape", {"x": X}, {"start": 1, "end": -1}, {}),
    (
        "ConstantOfShape",
        {},
        {"value": helper.make_tensor("v", TensorProto.INT64, [1], [3])},
        {"inits": {"s": np.array([2, 3], np.int64)}},
    ),
    ("Expand", {"x": rand(3, 1)}, {}, {"inits": {"s": np.array([2, 1, 4], np.int64)}}),
]


@pytest.mark.parametrize(
    ("op", "inputs", "attrs", "kw"), OP_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(OP_CASES)]
)
def test_op(
    op: str, inputs: dict[str, np.ndarray], attrs: dict[str, Any], kw: dict[str, Any]
) -> None:
    check_op(op, inputs, attrs, **kw)


def test_constant_node_and_folding() -> None:
    """Constant -> Shape/Gather/Concat chains fold to constants; the module keeps no trace."""
    const = helper.make_node("Constant", [], ["c"], value_floats=[1.0, 2.0, 3.0])
    shape = helper.make_node("Shape", ["x"], ["s"])
    idx = helper.make_node("Constant", [], ["i"], value_int=0)
    gather = helper.make_node("Gather", ["s", "i"], ["n"])
    unsq = helper.make_node("Unsqueeze", ["n", "ax"], ["n1"])
    minus = helper.make_node("Constant", [], ["m"], value_ints=[-1])
    cat = helper.make_node("Concat", ["n1", "m"], ["shape"], axis=0)
    reshape = helper.make_node("Reshape", ["x", "shape"], ["r"])
    add = helper.make_node("Add", ["r", "c"], ["y"])
    graph = helper.make_graph(
        [const, shape, idx, gather, unsq, minus, cat, reshape, add],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.array([0], np.int64), "ax")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = rand(2, 3, 1)
    check_vs_ort(model, {"x": x})
    module = load(model)
    targets = {n.target for n in module.graph.nodes if n.op == "call_function"}
    assert {t.__name__ for t in targets} == {"reshape", "add"}


def test_dynamic_batch_shape_chain() -> None:
    """With a symbolic batch dim, Shape/Gather/Concat/Reshape run at call time."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "ax"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["flat"]),
        helper.make_node(
            "ConstantOfShape",
            ["shape2"],
            ["ones"],
            value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0]),
        ),
        helper.make_node("Shape", ["flat"], ["shape2"]),
        helper.make_node("Add", ["flat", "ones"], ["y"]),
    ]
    nodes = [*nodes[:5], nodes[6], nodes[5], nodes[7]]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[
            numpy_helper.from_array(np.array(0, np.int64), "zero"),
            numpy_helper.from_array(np.array([0], np.int64), "ax"),
            numpy_helper.from_array(np.array([-1], np.int64), "minus"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    for batch in (1, 3):
        x = rand(batch, 3, 4)
        check_vs_ort(model, {"x": x})


RESIZE_CASES = [
    ({"mode": "nearest"}, [1, 1, 2, 2], None),
    (
        {
            "mode": "nearest",
            "coordinate_transformation_mode": "asymmetric",
            "nearest_mode": "floor",
        },
        [1, 1, 2, 3],
        None,
    ),
    (
        {
            "mode": "nearest",
            "coordinate_transformation_mode": "align_corners",
            "nearest_mode": "round_prefer_ceil",
        },
        [1, 1, 0.6, 1.7],
        None,
    ),
    ({"mode": "linear"}, [1, 1, 2, 2], None),
    ({"mode": "linear", "coordinate_transformation_mode": "align_corners"}, None, [2, 3, 7, 9]),
    (
        {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"},
        [1, 1, 0.5, 0.6],
        None,
    ),
    ({"mode": "linear", "coordinate_transformation_mode": "asymmetric"}, [1, 1, 1.5, 2.5], None),
    ({"mode": "cubic"}, [1, 1, 1.8, 2.0], None),
    ({"mode": "cubic", "exclude_outside": 1, "cubic_coeff_a": -0.5}, None, [2, 3, 3, 11]),
    (
        {"mode": "nearest", "coordinate_transformation_mode": "tf_half_pixel_for_nn"},
        [1, 1, 1.5, 0.5],
        None,
    ),
]


@pytest.mark.parametrize(("attrs", "scales", "sizes"), RESIZE_CASES)
def test_resize(attrs: dict[str, Any], scales: list[float] | None, sizes: list[int] | None) -> None:
    x = rand(2, 3, 4, 5)
    inits = {"roi": np.zeros(0, np.float32)}
    order = ["x", "roi"]
    if scales is not None:
        inits["scales"] = np.array(scales, np.float32)
        order.append("scales")
    else:
        inits["sizes"] = np.array(sizes, np.int64)
        order += ["", "sizes"]
    model = make_model("Resize", {"x": x}, attrs, inits=inits, order=order, opset=13)
    check_vs_ort(model, {"x": x}, atol=1e-4)


@pytest.mark.parametrize("opset", [7, 9])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample(opset: int, mode: str) -> None:
    x = rand(1, 2, 3, 4)
    scales = [1.0, 1.0, 2.0, 3.0]
    if opset == 7:
        model = make_model("Upsample", {"x": x}, {"mode": mode, "scales": scales}, opset=7)
    else:
        model = make_model(
            "Upsample", {"x": x}, {"mode": mode}, opset=9, inits={"s": np.array(scales, np.float32)}
        )
    check_vs_ort(model, {"x": x})


# ----------------------------------------------------------------------------- API and errors


def test_load_accepts_path_bytes_and_proto(tmp_path: Any) -> None:
    x = rand(1, 1, 5)
    model = make_model("MaxPool", {"x": x}, {"kernel_shape": [2], "pads": [1, 0]})
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    want = run_ort(model, {"x": x})[0]
    for source in (model, model.SerializeToString(), path, str(path)):
        module = load(source)
        np.testing.assert_array_equal(module(torch.from_numpy(x)).numpy(), want)


def test_load_rejects_other_types() -> None:
    with pytest.raises(TypeError, match="model must be a path"):
        load(42)


def test_unsupported_ops_are_listed_together() -> None:
    nodes = [
        helper.make_node("StringNormalizer", ["x"], ["a"]),
        helper.make_node("Relu", ["x"], ["b"]),
        helper.make_node("StringNormalizer", ["x"], ["c"]),
        helper.make_node("TfIdfVectorizer", ["x"], ["d"]),
        helper.make_node("FusedConv", ["x"], ["e"], domain="com.microsoft"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "abcde"],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )
    with pytest.raises(UnsupportedOnnxError) as info:
        load(model)
    text = str(info.value)
    assert "StringNormalizer (domain ai.onnx, opset 17, schema version 10) x2" in text
    assert "TfIdfVectorizer (domain ai.onnx, opset 17, schema version 9) x1" in text
    assert "FusedConv (domain com.microsoft, opset 1) x1" in text
    assert "Relu" not in text
    assert isinstance(info.value, NotImplementedError)
    assert sorted(op for op, *_ in info.value.unsupported) == [
        "StringNormalizer",
        "TfIdfVectorizer",
        "com.microsoft::FusedConv",
    ]


def test_unsupported_attributes_are_listed_together() -> None:
    nodes = [
        helper.make_node("Resize", ["x", "", "s"], ["a"], mode="linear", antialias=1),
        helper.make_node("Resize", ["x", "", "s"], ["b"], mode="linear", antialias=1),
        helper.make_node("Relu", ["a"], ["c"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "bc"],
        initializer=[numpy_helper.from_array(np.array([1, 1, 0.5, 0.5], np.float32), "s")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    with pytest.raises(
        UnsupportedOnnxError,
        match=r"Resize \(domain ai.onnx, opset 19\) x2: antialias=1 .*'a', 'b'",
    ):
        load(model)


def test_malformed_pads_name_the_node() -> None:
    model = make_model(
        "MaxPool", {"x": rand(1, 1, 4, 4)}, {"kernel_shape": [2, 2], "pads": [1, 1, 1]}
    )
    with pytest.raises(OnnxImportError, match=r"MaxPool-22 node .*pads must have length 4"):
        load(model)


def test_import_padkit_needs_no_onnx() -> None:
    code = "import sys, padkit, padkit.nn, padkit.onnx; print('onnx' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_graph_module_is_traceable_and_in_eval_mode() -> None:
    model = make_model("Dropout", {"x": rand(2, 3)}, {})
    module = load(model)
    assert isinstance(module, torch.fx.GraphModule)
    assert not module.training
    assert "def forward" in module.code


@pytest.mark.parametrize(
    ("content", "what"),
    [(b"", "empty"), (b"hello, not a model\n", "text"), (b"\x08\x07\x12\x05abc", "truncated")],
)
def test_load_refuses_files_without_a_graph(tmp_path: Any, content: bytes, what: str) -> None:
    path = tmp_path / f"{what}.onnx"
    path.write_bytes(content)
    with pytest.raises(OnnxImportError, match=what + r"\.onnx"):
        load(path)
