"""Every ONNX backend node test the installed onnx generates, run through
:func:`padkit.onnx.load` and checked against the outputs stored with each case (same dtype,
same shape, ``assert_allclose`` with the case's tolerances, as the official runner checks).

A case either matches, or is refused at import time by one ``UnsupportedOnnxError`` that names
its operators (domain, opset, count). Nothing that imports may crash or differ at run time,
apart from the documented disagreements listed in ``KNOWN_MISMATCHES``.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")

from onnx import numpy_helper  # noqa: E402

from padkit.onnx import UnsupportedOnnxError, load  # noqa: E402

torch.set_num_threads(1)

FLOATS = ("float16", "float32", "float64", "bfloat16")
TORCH_DTYPES = (*FLOATS, "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32")
TORCH_DTYPES += ("uint64", "bool")

#: cases whose stored outputs padkit deliberately does not reproduce (docs/onnx-import.md)
KNOWN_MISMATCHES = {
    # the reference implementation's fractional length_resized; padkit follows the text and ORT
    "test_resize_downsample_scales_linear_align_corners": "length_resized",
    "test_resize_downsample_scales_cubic_align_corners": "length_resized",
}
# causal attention in float16 / bfloat16: torch's half-precision matmul and softmax round
# one or two elements by one unit in the last place differently from numpy
KNOWN_MISMATCHES.update(
    {
        f"test_attention_{case}{suffix}": "half-precision rounding"
        for case in (
            "4d_causal_bf16",
            "4d_causal_fp16",
            "4d_padded_kv_bf16",
            "4d_causal_padded_kv_bf16",
            "4d_attn_mask_causal_bf16",
            "3d_causal_bf16",
        )
        for suffix in ("", "_expanded")
    }
)

#: the padding operators: every one of their cases must match
PADDING_OPS = ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "Pad")


def as_array(a: Any) -> Any:
    if isinstance(a, onnx.TensorProto):
        return numpy_helper.to_array(a)
    return a


def representable(case: Any) -> bool:
    """Whether torch can hold every stored input and output of ``case``."""
    for inputs, outputs in case.data_sets:
        for a in [*inputs, *outputs]:
            a = as_array(a)
            if not isinstance(a, np.ndarray) or a.dtype.name not in TORCH_DTYPES:
                return False
    return True


def collect() -> list[Any]:
    import onnx.backend.test.case.node as node_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = list(node_cases.collect_testcases())
    return [c for c in cases if c.data_sets and representable(c)]


CASES = collect()


def to_torch(a: Any) -> Any:
    a = as_array(a)
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.array(a))


def check(out: Any, expected: list[Any], rtol: float, atol: float) -> None:
    outs = out if isinstance(out, tuple) else (out,)
    assert len(outs) == len(expected)
    for got, want in zip(outs, expected):
        want = as_array(want)
        if want.dtype.name == "bfloat16":
            assert got.dtype == torch.bfloat16
            got_np, want = got.float().numpy(), want.astype(np.float32)
        else:
            got_np = got.numpy()
            assert got_np.dtype == want.dtype, (got_np.dtype, want.dtype)
        assert got_np.shape == want.shape, (got_np.shape, want.shape)
        np.testing.assert_allclose(got_np, want, rtol=rtol, atol=atol)


def imports(case: Any) -> Any:
    """The loaded module, or None when the import names what it cannot convert."""
    try:
        return load(case.model)
    except UnsupportedOnnxError as err:
        assert err.unsupported
        for entry in err.unsupported:
            assert entry.op and entry.domain and entry.nodes >= 1
            assert entry.op.split("::")[-1] in str(err)
        return None


def run_case(case: Any, module: Any) -> None:
    for inputs, expected in case.data_sets:
        with torch.no_grad():
            out = module(*[to_torch(a) for a in inputs])
        check(out, expected, case.rtol, case.atol)


def is_float_case(case: Any) -> bool:
    return all(as_array(o).dtype.name in FLOATS for o in case.data_sets[0][1])


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case(case: Any) -> None:
    module = imports(case)
    if module is None:
        return
    if case.name in KNOWN_MISMATCHES:
        with pytest.raises(AssertionError):
            run_case(case, module)
        return
    run_case(case, module)


def test_padding_ops_all_import() -> None:
    padding = [c for c in CASES if c.model.graph.node[0].op_type in PADDING_OPS]
    assert len(padding) >= 65
    assert all(imports(c) is not None for c in padding)


def test_float_coverage() -> None:
    """How many float-output cases import (each of them then matches, above)."""
    floats = [c for c in CASES if is_float_case(c)]
    imported = sum(imports(c) is not None for c in floats)
    assert len(floats) >= 1150
    assert imported >= 1000, f"{imported} of {len(floats)} float-output node tests import"
