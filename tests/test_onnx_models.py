"""Whole models through padkit.onnx.load: the model-zoo topologies that ship with onnx,
a tiny-YOLOv2-shaped graph and torchvision models exported to ONNX."""

from __future__ import annotations

import io
import os
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from padkit.onnx import load  # noqa: E402

torch.set_num_threads(1)

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
ZOO = [
    "bvlc_alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "resnet50",
    "shufflenet",
    "squeezenet",
    pytest.param("vgg19", marks=pytest.mark.slow),  # ~500 MB of weights; AlexNet covers its ops
    "zfnet512",
]


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
    return [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]


def random_weights(model: Any, seed: int = 0) -> Any:
    """The model with every ConstantOfShape-made weight replaced by a random initializer."""
    rng = np.random.default_rng(seed)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    inits = {i.name: i for i in out.graph.initializer}
    kept = []
    for node in out.graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            shape = tuple(int(v) for v in numpy_helper.to_array(inits[node.input[0]]))
            if len(shape) == 1:  # biases, BN scales/shifts/means: positive, near 1
                data = rng.uniform(0.5, 1.5, shape).astype(np.float32)
            else:  # He-scaled weights keep activations O(1) through deep stacks
                fan_in = int(np.prod(shape[1:]))
                data = rng.standard_normal(shape, dtype=np.float32) * np.float32(
                    (2.0 / fan_in) ** 0.5
                )
            out.graph.initializer.append(numpy_helper.from_array(data, node.output[0]))
        else:
            kept.append(node)
    del out.graph.node[:]
    out.graph.node.extend(kept)
    return out


def graph_feeds(model: Any, seed: int = 1) -> dict[str, np.ndarray]:
    inits = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(seed)
    feeds = {}
    for inp in model.graph.input:
        if inp.name not in inits:
            shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
            feeds[inp.name] = rng.standard_normal(shape, dtype=np.float32)
    return feeds


@pytest.mark.parametrize("name", ZOO)
def test_zoo_model_random_weights(name: str) -> None:
    model = random_weights(onnx.load(os.path.join(LIGHT, f"light_{name}.onnx")))
    feeds = graph_feeds(model)
    want = run_ort(model, feeds)
    got = run_padkit(model, feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        scale = max(float(np.abs(w).max()), 1e-6)
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * scale)


@pytest.mark.parametrize("name", ["squeezenet", "inception_v1"])
def test_zoo_model_as_shipped(name: str) -> None:
    """The shipped files (weights from ConstantOfShape) against their stored outputs."""
    model = onnx.load(os.path.join(LIGHT, f"light_{name}.onnx"))
    tensor = onnx.TensorProto()
    with open(os.path.join(LIGHT, f"light_{name}_output_0.pb"), "rb") as f:
        tensor.ParseFromString(f.read())
    want = numpy_helper.to_array(tensor)
    feeds = {k: np.ones_like(v) for k, v in graph_feeds(model).items()}
    got = run_padkit(model, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got, run_ort(model, feeds)[0], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("opset", [7, 11, 13, 18, onnx.defs.onnx_opset_version()])
@pytest.mark.parametrize("name", ["squeezenet", "inception_v2"])
def test_zoo_model_across_opsets(name: str, opset: int) -> None:
    """The same topology converted by onnx.version_converter to every opset era."""
    from onnx import version_converter

    base = random_weights(onnx.load(os.path.join(LIGHT, f"light_{name}.onnx")))
    base.ir_version = 7  # initializers need not be listed as inputs
    model = version_converter.convert_version(base, opset)
    feeds = graph_feeds(model)
    want = run_ort(model, feeds)[0]
    np.testing.assert_allclose(run_padkit(model, feeds)[0], want, rtol=1e-4, atol=1e-6)


def test_inception_v1_keeps_its_asymmetric_pool() -> None:
    import padkit.nn

    module = load(random_weights(onnx.load(os.path.join(LIGHT, "light_inception_v1.onnx"))))
    pools = [m for m in module.modules() if isinstance(m, padkit.nn.AvgPool2d)]
    assert [p.resolved_padding() for p in pools] == [((0, 1), (0, 1))]


# ----------------------------------------------------------------------------- tiny YOLOv2


def tiny_yolo_v2(seed: int = 0, width: int = 4) -> Any:
    """tiny-YOLOv2's layout (conv3x3-BN-LeakyReLU blocks, five stride-2 pools, the final
    k=2 s=1 pool with pads [0,0,1,1], a 1x1 conv to 125 channels); channels / ``width``."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    channels = [16, 32, 64, 128, 256, 512, 1024, 1024]
    prev, c_in = "image", 3
    for i, c in enumerate(channels):
        c = max(c // width, 4)
        w = rng.standard_normal((c, c_in, 3, 3), dtype=np.float32) * np.float32(
            (2 / (9 * c_in)) ** 0.5
        )
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        for p, v in zip("sbmv", (1.0, 0.0, 0.0, 1.0)):
            data = (v + 0.1 * rng.standard_normal(c)).astype(np.float32)
            inits.append(numpy_helper.from_array(np.abs(data) if p == "v" else data, f"{p}{i}"))
        nodes += [
            helper.make_node(
                "Conv", [prev, f"w{i}"], [f"c{i}"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]
            ),
            helper.make_node(
                "BatchNormalization", [f"c{i}", f"s{i}", f"b{i}", f"m{i}", f"v{i}"], [f"n{i}"]
            ),
            helper.make_node("LeakyRelu", [f"n{i}"], [f"a{i}"], alpha=0.1),
        ]
        prev = f"a{i}"
        if i < 5:
            nodes.append(
                helper.make_node("MaxPool", [prev], [f"p{i}"], kernel_shape=[2, 2], strides=[2, 2])
            )
            prev = f"p{i}"
        elif i == 5:
            nodes.append(
                helper.make_node(
                    "MaxPool",
                    [prev],
                    [f"p{i}"],
                    kernel_shape=[2, 2],
                    strides=[1, 1],
                    pads=[0, 0, 1, 1],
                )
            )
            prev = f"p{i}"
        c_in = c
    w = rng.standard_normal((125, c_in, 1, 1), dtype=np.float32) * np.float32(c_in**-0.5)
    inits += [
        numpy_helper.from_array(w, "wo"),
        numpy_helper.from_array(rng.standard_normal(125, dtype=np.float32), "bo"),
    ]
    nodes.append(helper.make_node("Conv", [prev, "wo", "bo"], ["grid"], kernel_shape=[1, 1]))
    graph = helper.make_graph(
        nodes,
        "tiny_yolo_v2",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 416, 416])],
        [helper.make_tensor_value_info("grid", TensorProto.FLOAT, [1, 125, 13, 13])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)])


def test_tiny_yolo_v2_grid() -> None:
    model = tiny_yolo_v2()
    feeds = {"image": np.random.default_rng(3).random((1, 3, 416, 416), dtype=np.float32)}
    got = run_padkit(model, feeds)[0]
    assert got.shape == (1, 125, 13, 13)
    want = run_ort(model, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


# ----------------------------------------------------------------------------- torchvision


def randomized(model: Any) -> Any:
    """Random weights and BN statistics, so that outputs are far from trivial."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, (torch.nn.Conv2d, torch.nn.Linear)):
                fan_in = mod.weight[0].numel()
                mod.weight.copy_(torch.randn(mod.weight.shape, generator=gen) * (2 / fan_in) ** 0.5)
                if mod.bias is not None:
                    mod.bias.copy_(torch.randn(mod.bias.shape, generator=gen) * 0.1)
            elif isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.copy_(torch.randn(mod.running_mean.shape, generator=gen) * 0.1)
                mod.running_var.copy_(torch.rand(mod.running_var.shape, generator=gen) + 0.5)
                mod.weight.copy_(torch.rand(mod.weight.shape, generator=gen) + 0.5)
                mod.bias.copy_(torch.randn(mod.bias.shape, generator=gen) * 0.1)
    return model.eval()


TORCHVISION = [
    ("resnet18", {}, 64),
    ("mobilenet_v3_small", {}, 64),
    ("googlenet", {"aux_logits": False, "init_weights": False}, 64),  # ceil-mode pools
    ("squeezenet1_1", {}, 65),  # ceil-mode pools at an odd size
]


def _roundtrip(name: str, kwargs: dict[str, Any], res: int, dynamo: bool, path: Any) -> None:
    torchvision = pytest.importorskip("torchvision")
    model = randomized(getattr(torchvision.models, name)(weights=None, **kwargs))
    x = torch.randn(2, 3, res, res, generator=torch.Generator().manual_seed(1))
    if dynamo:
        torch.onnx.export(model, (x,), str(path / f"{name}.onnx"), dynamo=True)
        module = load(path / f"{name}.onnx")
    else:
        buf = io.BytesIO()
        torch.onnx.export(model, (x,), buf, dynamo=False)
        module = load(buf.getvalue())
    with torch.no_grad():
        want, got = model(x), module(x)
    scale = float(want.abs().max())
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5 * scale)


@pytest.mark.parametrize(("name", "kwargs", "res"), TORCHVISION, ids=[t[0] for t in TORCHVISION])
@pytest.mark.filterwarnings("ignore:You are using the legacy TorchScript:DeprecationWarning")
@pytest.mark.filterwarnings("ignore:The feature will be removed:DeprecationWarning")
def test_torchvision_roundtrip_legacy_export(
    name: str, kwargs: dict[str, Any], res: int, tmp_path: Any
) -> None:
    _roundtrip(name, kwargs, res, False, tmp_path)


@pytest.mark.parametrize(
    ("name", "kwargs", "res"),
    [
        TORCHVISION[3],
        *[pytest.param(*t, marks=pytest.mark.slow) for t in TORCHVISION[:3]],
    ],
    ids=["squeezenet1_1", "resnet18", "mobilenet_v3_small", "googlenet"],
)
def test_torchvision_roundtrip_dynamo_export(
    name: str, kwargs: dict[str, Any], res: int, tmp_path: Any
) -> None:
    _roundtrip(name, kwargs, res, True, tmp_path)
