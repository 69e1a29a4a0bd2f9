"""Real exporter output through padkit.onnx.load, against onnxruntime on the same file:
torchvision's ConvNeXt-Tiny (LayerNormalization, from the TorchScript and the dynamo exporter
at several opsets) and SSDlite320-MobileNetV3 (NonZero, GatherND, TopK, Tile, Range, If and
NonMaxSuppression in its post-processing), with random weights. The graphs are exported with
a dynamic batch and run at another batch size than the one traced."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

from padkit.onnx import load  # noqa: E402

torch.set_num_threads(1)

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning"),
]


def op_types(graph: Any) -> set[str]:
    """The op types of ``graph`` and of the subgraphs (If branches) its nodes hold."""
    ops = set()
    for node in graph.node:
        ops.add(node.op_type)
        for attr in node.attribute:
            for sub in [*attr.graphs, *([attr.g] if attr.HasField("g") else [])]:
                ops |= op_types(sub)
    return ops


def run_ort(path: str, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return [np.asarray(v) for v in sess.run(None, feeds)]


def run_padkit(path: str, *inputs: np.ndarray) -> list[np.ndarray]:
    module = load(path)
    with torch.no_grad():
        out = module(*[torch.from_numpy(v) for v in inputs])
    return [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]


def export(model: Any, args: tuple[Any, ...], path: str, opset: int, dynamo: bool) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            batch = torch.export.Dim("batch", min=1, max=64)
            torch.onnx.export(
                model,
                args,
                path,
                opset_version=opset,
                dynamo=True,
                input_names=["x"],
                dynamic_shapes=({0: batch},),
            )
        else:
            torch.onnx.export(
                model,
                args,
                path,
                opset_version=opset,
                dynamo=False,
                input_names=["x"],
                dynamic_axes={"x": {0: "batch"}},
            )


CONVNEXT = [
    pytest.param(17, False, id="torchscript-17", marks=pytest.mark.slow),
    pytest.param(13, False, id="torchscript-13", marks=pytest.mark.slow),
    pytest.param(20, False, id="torchscript-20", marks=pytest.mark.slow),
    pytest.param(18, True, id="dynamo-18", marks=pytest.mark.slow),
    pytest.param(20, True, id="dynamo-20", marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("opset", "dynamo"), CONVNEXT)
def test_convnext_tiny(opset: int, dynamo: bool, tmp_path: Any) -> None:
    torch.manual_seed(0)
    model = torchvision.models.convnext_tiny(weights=None).eval()
    path = str(tmp_path / "convnext.onnx")
    export(model, (torch.rand(2, 3, 64, 64),), path, opset, dynamo)
    ops = {n.op_type for n in onnx.load(path).graph.node}
    if opset >= 17:
        assert "LayerNormalization" in ops
    x = np.random.default_rng(1).random((3, 3, 64, 64), dtype=np.float32)  # another batch
    (want,) = run_ort(path, {"x": x})
    (got,) = run_padkit(path, x)
    assert got.shape == want.shape == (3, 1000)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * float(np.abs(want).max()))


class ConvNeXtBlock(torch.nn.Module):
    """ConvNeXt's block: depthwise conv, LayerNorm over channels-last, MLP, layer scale."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.dw = torch.nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = torch.nn.LayerNorm(dim)
        self.fc1, self.fc2 = torch.nn.Linear(dim, 4 * dim), torch.nn.Linear(4 * dim, dim)
        self.scale = torch.nn.Parameter(torch.full((dim,), 0.5))

    def forward(self, x: Any) -> Any:
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(y))))
        return x + (self.scale * y).permute(0, 3, 1, 2)


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_convnext_block_opset_18(dynamo: bool, tmp_path: Any) -> None:
    """The fast stand-in for the slow ConvNeXt-Tiny exports: the same operators."""
    torch.manual_seed(0)
    path = str(tmp_path / "block.onnx")
    export(ConvNeXtBlock().eval(), (torch.rand(2, 8, 12, 12),), path, 18, dynamo)
    assert "LayerNormalization" in {n.op_type for n in onnx.load(path).graph.node}
    x = np.random.default_rng(2).random((5, 8, 12, 12), dtype=np.float32)
    (want,) = run_ort(path, {"x": x})
    (got,) = run_padkit(path, x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_ssdlite320_mobilenet_v3_large(tmp_path: Any) -> None:
    torch.manual_seed(0)
    model = torchvision.models.detection.ssdlite320_mobilenet_v3_large(
        weights=None, weights_backbone=None
    ).eval()
    with torch.no_grad():  # distinct class scores (the default init gives near-uniform ones)
        for p in model.head.classification_head.parameters():
            p.normal_(0, 0.2)
    path = str(tmp_path / "ssd.onnx")
    image = torch.rand(3, 320, 320)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, ([image],), path, opset_version=17, dynamo=False)
    ops = op_types(onnx.load(path).graph)
    assert {"NonZero", "GatherND", "TopK", "If", "NonMaxSuppression", "Range", "Tile"} <= ops
    x = np.random.default_rng(3).random((3, 320, 320), dtype=np.float32)
    sess_input = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).get_inputs()
    want = run_ort(path, {sess_input[0].name: x})
    got = run_padkit(path, x)
    assert len(got) == len(want) == 3
    assert len(np.unique(got[0])) > 10 and len(np.unique(got[1])) > 1  # not degenerate
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


class SmallCNN(torch.nn.Module):
    """Conv, batch norm, ceil-mode pool, flatten, linear: what classifier exports hold."""

    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, stride=2, padding=1),
            torch.nn.BatchNorm2d(8),
            torch.nn.ReLU(),
            torch.nn.MaxPool2d(3, 2, ceil_mode=True),
            torch.nn.Conv2d(8, 4, 1),
        )
        self.fc = torch.nn.Linear(4 * 4 * 4, 10)

    def forward(self, x: Any) -> Any:
        return self.fc(torch.flatten(self.features(x), 1))


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_loaded_graph_is_torch_exportable_with_dynamic_batch(dynamo: bool, tmp_path: Any) -> None:
    """Import keeps the ONNX graph's dynamic batch: torch.export with a symbolic batch
    succeeds (no size specialised to the traced batch) and the exported program matches the
    original model at other batch sizes."""
    torch.manual_seed(0)
    model = SmallCNN().eval()
    path = str(tmp_path / "cnn.onnx")
    export(model, (torch.rand(2, 3, 16, 16),), path, 18, dynamo)
    module = load(path)
    batch = torch.export.Dim("batch", min=1, max=64)
    program = torch.export.export(module, (torch.rand(2, 3, 16, 16),), dynamic_shapes=({0: batch},))
    for n in (1, 5):
        x = torch.rand(n, 3, 16, 16)
        with torch.no_grad():
            torch.testing.assert_close(program.module()(x), model(x), rtol=1e-5, atol=1e-5)
