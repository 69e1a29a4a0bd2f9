"""The exporter matrix of scripts/onnx_exporter_matrix.py as tests: nine torchvision/timm
models (random weights), each exported by torch.onnx.export's TorchScript exporter at opsets
13 and 17 and its dynamo exporter at opset 20, with a dynamic batch, height and width, then
run on another batch and size by padkit.onnx.load's module and by onnxruntime, which must
agree to float tolerance. The full matrix is slow; the default run keeps the smallest model
through each exporter."""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
timm = pytest.importorskip("timm")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location(
    "onnx_exporter_matrix", os.path.join(ROOT, "scripts", "onnx_exporter_matrix.py")
)
assert _spec is not None and _spec.loader is not None
matrix = importlib.util.module_from_spec(_spec)
sys.modules["onnx_exporter_matrix"] = matrix
_spec.loader.exec_module(matrix)

torch.set_num_threads(1)

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning"),
]

FAST = [("squeezenet1_0", "torchscript-13")]
CONFIGS = [
    pytest.param(m, e, id=f"{m}-{e}", marks=[] if (m, e) in FAST else [pytest.mark.slow])
    for m, e in matrix.CONFIGS
]


def test_matrix_has_27_configs() -> None:
    assert len(matrix.CONFIGS) == len(set(matrix.CONFIGS)) == 27


@pytest.mark.parametrize(("model", "exporter"), CONFIGS)
def test_export_matches_onnxruntime(model: str, exporter: str, tmp_path: Any) -> None:
    res = matrix.run_config(model, exporter, str(tmp_path))
    assert res.verdict == "pass", f"{res.verdict}: {res.detail} (max diff {res.diff:.3g})"
    assert res.ref > 0  # the comparison saw a non-trivial output
