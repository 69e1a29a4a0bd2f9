"""The ONNX backend node tests for Conv, ConvTranspose, MaxPool, AveragePool, LpPool and Pad,
run through :func:`padkit.onnx.load` and checked against the outputs stored with each case
(the values onnxruntime also produces)."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")

from padkit.onnx import load  # noqa: E402

torch.set_num_threads(1)

#: op type -> module of onnx.backend.test.case.node that holds its cases
PADDING_OPS = {
    "Conv": "conv",
    "ConvTranspose": "convtranspose",
    "MaxPool": "maxpool",
    "AveragePool": "averagepool",
    "LpPool": "lppool",
    "Pad": "pad",
}


def collect(op_type: str, module: str) -> list[Any]:
    """The node test cases of one op (generated in memory by the installed onnx)."""
    import onnx.backend.test.case.node as node_cases

    node_cases._NodeTestCases.clear()
    node_cases._TargetOpType = op_type
    mod = importlib.import_module(f"onnx.backend.test.case.node.{module}")
    if not node_cases._NodeTestCases:  # already imported in this process: run again
        node_cases._existing_names.clear()
        for name in dir(mod):
            cls = getattr(mod, name)
            if isinstance(cls, type) and cls.__module__ == mod.__name__:
                for attr in vars(cls):
                    if attr.startswith("export"):
                        np.random.seed(0)
                        getattr(cls, attr)()
    cases = [c for c in node_cases._NodeTestCases if c.model.graph.node[0].op_type == op_type]
    node_cases._NodeTestCases.clear()
    node_cases._TargetOpType = None
    return cases


CASES = [case for op, mod in PADDING_OPS.items() for case in collect(op, mod)]


def run_case(case: Any) -> None:
    module = load(case.model)
    for inputs, expected in case.data_sets:
        with torch.no_grad():
            out = module(*[torch.from_numpy(np.array(a)) for a in inputs])
        outs = out if isinstance(out, tuple) else (out,)
        assert len(outs) == len(expected)
        for got, want in zip(outs, expected):
            got_np = got.numpy()
            assert got_np.dtype == want.dtype, (got_np.dtype, want.dtype)
            assert got_np.shape == want.shape, (got_np.shape, want.shape)
            np.testing.assert_allclose(got_np, want, rtol=case.rtol, atol=case.atol)


def test_case_count() -> None:
    # 6 Conv + 11 ConvTranspose + 19 MaxPool + 20 AveragePool + 8 LpPool + 6 Pad (onnx 1.23)
    assert len(CASES) >= 70


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case(case: Any) -> None:
    run_case(case)
