"""ONNX export of every padkit layer through plain ``torch.onnx.export``, both exporters.

Each exported graph runs in onnxruntime and must equal the PyTorch module's own output
(atol 1e-5); the graph structure is asserted too: static zero padding is one op node with
its ``pads``, other modes one ``Pad`` plus the op, dynamic ``same`` uses ``auto_pad`` where
onnxruntime computes it exactly and never next to a dilation.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

import padkit.nn as pnn  # noqa: E402
from padkit import PaddingError  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore::DeprecationWarning", "ignore::UserWarning", "ignore::FutureWarning"
)

torch.set_num_threads(1)

OPS = ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool")
#: nodes that cost nothing at run time
FREE = ("Constant", "Identity")


def export(model: nn.Module, x: Any, *, dynamo: bool, dynamic: bool = False, **kw: Any) -> Any:
    model = model.eval()
    nd = x.dim() - 2
    if dynamic:
        if dynamo:
            kw["dynamic_shapes"] = ({2 + i: torch.export.Dim.DYNAMIC for i in range(nd)},)
        else:
            kw["dynamic_axes"] = {"x": {2 + i: f"s{i}" for i in range(nd)}}
    if dynamo:
        prog = torch.onnx.export(model, (x,), dynamo=True, verbose=False, input_names=["x"], **kw)
        return prog.model_proto
    buf = io.BytesIO()
    torch.onnx.export(model, (x,), buf, dynamo=False, input_names=["x"], **kw)
    return onnx.load_from_string(buf.getvalue())


def run_ort(proto: Any, x: Any) -> np.ndarray:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
    out: np.ndarray = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    return out


def assert_matches(
    model: nn.Module, proto: Any, xs: Sequence[Any], *, lowest: bool = False
) -> None:
    """``lowest``: a max-pool window lying entirely in padding is -inf in padkit, and in
    onnxruntime's 2-D MaxPool, but the lowest finite float in its 1-D/3-D kernels."""
    for x in xs:
        with torch.no_grad():
            ref = model(x).numpy()
        got = run_ort(proto, x)
        if lowest:
            floor = np.finfo(ref.dtype).min
            ref, got = np.maximum(ref, floor), np.maximum(got, floor)
        assert got.shape == ref.shape, (tuple(x.shape), got.shape, ref.shape)
        np.testing.assert_allclose(got, ref, atol=1e-5, rtol=1e-5, equal_nan=True)


def nodes(proto: Any) -> list[Any]:
    return [n for n in proto.graph.node if n.op_type not in FREE]


def attrs(node: Any) -> dict[str, Any]:
    out = {}
    for a in node.attribute:
        v = onnx.helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


def op_nodes(proto: Any) -> list[Any]:
    return [n for n in proto.graph.node if n.op_type in OPS]


def rand(*shape: int, seed: int = 0) -> Any:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------- cases

Factory = Callable[[int], nn.Module]

C = 3
CONV = {1: pnn.Conv1d, 2: pnn.Conv2d, 3: pnn.Conv3d}
CONVT = {1: pnn.ConvTranspose1d, 2: pnn.ConvTranspose2d, 3: pnn.ConvTranspose3d}
MAX = {1: pnn.MaxPool1d, 2: pnn.MaxPool2d, 3: pnn.MaxPool3d}
AVG = {1: pnn.AvgPool1d, 2: pnn.AvgPool2d, 3: pnn.AvgPool3d}
LP = {1: pnn.LPPool1d, 2: pnn.LPPool2d, 3: pnn.LPPool3d}

ASYM = ((1, 0), (0, 2), (2, 1))


def asym(nd: int) -> tuple[tuple[int, int], ...]:
    return ASYM[:nd]


#: name -> (factory by nd, "zero" | "mode" | "any": the structure to expect)
CASES: dict[str, tuple[Factory, str]] = {
    "conv_sym": (lambda nd: CONV[nd](C, 4, 3, padding=1), "zero"),
    "conv_asym": (lambda nd: CONV[nd](C, 4, 3, padding=asym(nd)), "zero"),
    "conv_same_s1_k4": (lambda nd: CONV[nd](C, 4, 4, padding="same"), "zero"),
    "conv_same_s2": (lambda nd: CONV[nd](C, 4, 3, stride=2, padding="same"), "zero"),
    "conv_same_lower_s2": (
        lambda nd: CONV[nd](C, 2 * C, 4, stride=2, padding="same_lower", groups=C),
        "zero",
    ),
    "conv_causal_d2": (lambda nd: CONV[nd](C, 4, 3, padding="causal", dilation=2), "zero"),
    "conv_same_s2_d2": (
        lambda nd: CONV[nd](C, 4, 3, stride=2, padding="same", dilation=2),
        "zero",
    ),
    "conv_reflect": (
        lambda nd: CONV[nd](C, 4, 3, padding=asym(nd), padding_mode="reflect"),
        "mode",
    ),
    "conv_replicate": (
        lambda nd: CONV[nd](C, 4, 3, stride=2, padding="same", padding_mode="replicate"),
        "mode",
    ),
    "conv_circular": (
        lambda nd: CONV[nd](C, 4, 3, padding=asym(nd), padding_mode="circular"),
        "mode",
    ),
    "convT_asym": (lambda nd: CONVT[nd](C, 4, 3, stride=2, padding=asym(nd)), "zero"),
    "convT_output_padding": (
        lambda nd: CONVT[nd](C, 4, 3, stride=2, padding=1, output_padding=1),
        "zero",
    ),
    "convT_same_s2": (lambda nd: CONVT[nd](C, 4, 3, stride=2, padding="same"), "zero"),
    "convT_same_k2_s3": (lambda nd: CONVT[nd](C, 4, 2, stride=3, padding="same"), "zero"),
    "max_same_s2": (lambda nd: MAX[nd](3, 2, padding="same"), "zero"),
    "max_asym_ceil": (lambda nd: MAX[nd](3, 2, padding=asym(nd), ceil_mode=True), "zero"),
    "max_ceil_drop": (lambda nd: MAX[nd](2, 2, padding=1, ceil_mode=True), "zero"),
    "max_d2_same": (lambda nd: MAX[nd](3, 2, padding="same_lower", dilation=2), "zero"),
    "max_big_pads": (lambda nd: MAX[nd](2, 1, padding=((2, 3),) * nd), "any"),
    "avg_same_excl": (
        lambda nd: AVG[nd](3, 2, padding="same", count_include_pad=False),
        "zero",
    ),
    "avg_asym_incl_ceil": (
        lambda nd: AVG[nd](3, 2, padding=asym(nd), ceil_mode=True, count_include_pad=True),
        "zero",
    ),
    "avg_ceil_overhang_incl": (lambda nd: AVG[nd](3, 2, padding=1, ceil_mode=True), "zero"),
    "avg_divisor": (
        lambda nd: AVG[nd](3, 2, padding=1, ceil_mode=True, divisor_override=5),
        "zero",
    ),
    "avg_dilation": (
        lambda nd: AVG[nd](2, 1, padding="same", dilation=2, count_include_pad=False),
        "zero",
    ),
    "lp2_asym_ceil": (lambda nd: LP[nd](2, 3, 2, True, padding=asym(nd)), "zero"),
    "lp3_odd": (lambda nd: LP[nd](3, 2, 2, padding="same"), "zero"),
    "lp1_dilated": (lambda nd: LP[nd](1, 2, 1, padding=((1, 1),) * nd, dilation=2), "zero"),
}

SIZES = {1: (1, C, 11), 2: (1, C, 9, 10), 3: (1, C, 5, 6, 7)}


def check_structure(model: nn.Module, proto: Any, kind: str, x: Any) -> None:
    found = nodes(proto)
    types = [n.op_type for n in found]
    ops = op_nodes(proto)
    assert len(ops) == 1, types
    op = ops[0]
    a = attrs(op)
    assert "Slice" not in types and "Shape" not in types, types
    if op.op_type in ("MaxPool", "AveragePool", "LpPool"):
        assert "ceil_mode" in a, a
    if op.op_type == "AveragePool":
        assert "count_include_pad" in a, a
    if kind == "zero":
        assert types.count("Pad") == 0, types
        assert "auto_pad" not in a, a
        if isinstance(model, pnn.Conv1d | pnn.Conv2d | pnn.Conv3d):
            pairs = model.resolved_padding(tuple(x.shape))
            assert a["pads"] == [lo for lo, _ in pairs] + [hi for _, hi in pairs]
        # a single op, maybe followed by the window-sum's Mul/Pow (lowered exactly)
        rest = [t for t in types if t not in (op.op_type, "Mul", "Pow")]
        assert not rest, types
    elif kind == "mode":
        assert types.count("Pad") == 1 and len(types) == 2, types
        assert a["pads"] == [0] * len(a["pads"])


def case_params(nds: Sequence[int]) -> list[Any]:
    return [pytest.param(name, nd, id=f"{name}-{nd}d") for name in CASES for nd in nds]


@pytest.mark.parametrize(("name", "nd"), case_params((1, 2, 3)))
def test_torchscript_static(name: str, nd: int) -> None:
    factory, kind = CASES[name]
    model = factory(nd).eval()
    x = rand(*SIZES[nd])
    proto = export(model, x, dynamo=False)
    assert_matches(model, proto, [x], lowest=name == "max_big_pads")
    check_structure(model, proto, kind, x)


# a representative subset: dynamo export costs 1-2 s per graph
DYNAMO_FAST = [
    ("conv_asym", 2),
    ("conv_same_s2", 2),
    ("conv_reflect", 2),
    ("conv_circular", 1),
    ("convT_asym", 2),
    ("convT_same_k2_s3", 1),
    ("max_ceil_drop", 2),
    ("avg_divisor", 2),
    ("avg_dilation", 1),
    ("lp3_odd", 2),
    ("lp2_asym_ceil", 3),
]


@pytest.mark.parametrize(("name", "nd"), DYNAMO_FAST, ids=[f"{n}-{d}d" for n, d in DYNAMO_FAST])
def test_dynamo_static(name: str, nd: int) -> None:
    factory, kind = CASES[name]
    model = factory(nd).eval()
    x = rand(*SIZES[nd])
    proto = export(model, x, dynamo=True)
    assert_matches(model, proto, [x], lowest=name == "max_big_pads")
    check_structure(model, proto, kind, x)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "nd"), [p for p in case_params((1, 2, 3)) if tuple(p.values) not in DYNAMO_FAST]
)
def test_dynamo_static_all(name: str, nd: int) -> None:
    test_dynamo_static(name, nd)


def test_unbatched_input() -> None:
    model = pnn.Conv2d(C, 4, 3, stride=2, padding="same").eval()
    x = rand(C, 9, 10)
    proto = export(model, x, dynamo=False)
    assert_matches(model, proto, [x])


# ----------------------------------------------------------------------------- dynamic H, W

DYN_SIZES = [(9, 10), (8, 8), (13, 6), (7, 11), (16, 17)]  # odd and even remainders

DYNAMIC: dict[str, tuple[Callable[[], nn.Module], str]] = {
    "conv_d1": (lambda: pnn.Conv2d(C, 4, 3, stride=2, padding="same"), "SAME_UPPER"),
    "conv_dw5_lower": (
        lambda: pnn.Conv2d(C, C, 5, stride=2, padding="same_lower", groups=C),
        "SAME_LOWER",
    ),
    "conv_d2": (lambda: pnn.Conv2d(C, 4, 3, stride=2, padding="same", dilation=2), "pad"),
    "conv_k2_s3": (lambda: pnn.Conv2d(C, 4, 2, stride=3, padding="same"), "pad"),
    "conv_reflect": (
        lambda: pnn.Conv2d(C, 4, 3, stride=2, padding="same", padding_mode="reflect"),
        "pad",
    ),
    "max_d1_ceil": (lambda: pnn.MaxPool2d(3, 2, padding="same", ceil_mode=True), "SAME_UPPER"),
    "max_d2": (lambda: pnn.MaxPool2d(3, 2, padding="same", dilation=2), "pad"),
    "avg_excl": (
        lambda: pnn.AvgPool2d(3, 2, padding="same", count_include_pad=False),
        "SAME_UPPER",
    ),
    "avg_incl_d2": (
        lambda: pnn.AvgPool2d(3, 2, padding="same", dilation=2, count_include_pad=True),
        "pad",
    ),
    "avg_divisor": (lambda: pnn.AvgPool2d(3, 2, padding="same", divisor_override=4), "SAME_UPPER"),
    "lp3": (lambda: pnn.LPPool2d(3, 3, 2, padding="same"), "SAME_UPPER"),
    "mixed_axes": (lambda: pnn.Conv2d(C, 4, 3, stride=(1, 2), padding=("causal", "same")), "pad"),
    "convT_same": (lambda: pnn.ConvTranspose2d(C, 4, 3, stride=2, padding="same"), "static"),
}


def check_dynamic(model: nn.Module, proto: Any, expect: str) -> None:
    assert_matches(model, proto, [rand(1, C, h, w, seed=h * 31 + w) for h, w in DYN_SIZES])
    types = [n.op_type for n in nodes(proto)]
    ops = op_nodes(proto)
    assert len(ops) == 1, types
    a = attrs(ops[0])
    if expect.startswith("SAME"):
        assert a.get("auto_pad") == expect, a
        assert "Pad" not in types and "Shape" not in types, types
    elif expect == "pad":
        assert a.get("auto_pad", "NOTSET") == "NOTSET", a
        assert types.count("Pad") == 1, types
        assert len(types) <= 11, types  # Shape -> Sub/Mod/Sub/Div/Sub -> Concat -> Pad -> op
    else:
        assert types == ["ConvTranspose"], types
    # onnxruntime refuses SAME_* with dilation
    if any(d != 1 for d in a.get("dilations", [1])):
        assert a.get("auto_pad", "NOTSET") == "NOTSET"


@pytest.mark.parametrize("name", list(DYNAMIC))
def test_torchscript_dynamic_hw(name: str) -> None:
    factory, expect = DYNAMIC[name]
    model = factory().eval()
    proto = export(model, rand(1, C, 9, 10), dynamo=False, dynamic=True)
    check_dynamic(model, proto, expect)


DYNAMO_DYNAMIC_FAST = ["conv_d1", "conv_d2", "avg_excl"]


@pytest.mark.parametrize("name", DYNAMO_DYNAMIC_FAST)
def test_dynamo_dynamic_hw(name: str) -> None:
    factory, expect = DYNAMIC[name]
    model = factory().eval()
    proto = export(model, rand(1, C, 9, 10), dynamo=True, dynamic=True)
    check_dynamic(model, proto, expect)


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in DYNAMIC if n not in DYNAMO_DYNAMIC_FAST])
def test_dynamo_dynamic_hw_all(name: str) -> None:
    test_dynamo_dynamic_hw(name)


class _Block(nn.Module):
    """A residual block whose branches size their outputs differently (dynamic shapes
    must still agree: the symbolic output size of every 'same' op is ceil(n/s))."""

    def __init__(self) -> None:
        super().__init__()
        self.a = pnn.Conv2d(C, 4, 3, stride=2, padding="same")
        self.b = pnn.Conv2d(C, 4, 3, stride=2, padding="same", dilation=2)
        self.p = pnn.MaxPool2d(3, 2, padding="same")

    def forward(self, x: Any) -> Any:
        return self.a(x) + self.b(x) + self.p(x).sum(1, keepdim=True)


def test_dynamo_dynamic_residual_block() -> None:
    model = _Block().eval()
    proto = export(model, rand(1, C, 9, 10), dynamo=True, dynamic=True)
    assert_matches(model, proto, [rand(1, C, h, w) for h, w in DYN_SIZES])


# ----------------------------------------------------------------------------- refusals


def test_refuses_return_indices() -> None:
    model = pnn.MaxPool2d(3, 2, padding="same", return_indices=True)
    with pytest.raises(PaddingError, match="return_indices"):
        export(model, rand(1, C, 9, 10), dynamo=False)


def test_refuses_old_opset_for_wrap() -> None:
    model = pnn.Conv2d(C, 4, 3, padding=1, padding_mode="circular")
    with pytest.raises(PaddingError, match="opset_version >= 19"):
        export(model, rand(1, C, 9, 10), dynamo=False, opset_version=18)


def test_refuses_dynamic_excluded_average_with_computed_pads() -> None:
    model = pnn.AvgPool2d(3, 2, padding="same", dilation=2, count_include_pad=False)
    with pytest.raises(PaddingError, match="count_include_pad=False"):
        export(model, rand(1, C, 9, 10), dynamo=False, dynamic=True)


# ----------------------------------------------------------------------------- eager, compile


def test_plain_torch_export_and_eager_untouched() -> None:
    model = pnn.Conv2d(C, 4, 3, stride=2, padding="same").eval()
    x = rand(1, C, 9, 10)
    ep = torch.export.export(model, (x,))
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert not any("onnx" in t for t in targets), targets
    torch.testing.assert_close(ep.module()(x), model(x))
    from padkit import _export

    assert not _export.exporting()


# ----------------------------------------------------------------------------- round trip


def _asym_graph() -> Any:
    from onnx import TensorProto, helper, numpy_helper

    w = np.random.default_rng(0).standard_normal((4, C, 3, 3)).astype(np.float32)
    nodes_ = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[0, 1, 1, 2], strides=[2, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node(
            "MaxPool", ["r"], ["m"], kernel_shape=[2, 3], pads=[1, 0, 0, 2], ceil_mode=1
        ),
        helper.make_node(
            "AveragePool", ["m"], ["y"], kernel_shape=[3, 3], pads=[0, 1, 2, 1], strides=[2, 2]
        ),
    ]
    graph = helper.make_graph(
        nodes_,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C, 11, 12])],
        [helper.make_empty_tensor_value_info("y")],
        initializer=[numpy_helper.from_array(w, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


@pytest.mark.parametrize("dynamo", [False, True], ids=["torchscript", "dynamo"])
def test_import_export_round_trip(dynamo: bool) -> None:
    from padkit.onnx import load

    original = _asym_graph()
    module = load(original)
    x = rand(1, C, 11, 12)
    want = run_ort(original, x)
    proto = export(module, x, dynamo=dynamo)
    np.testing.assert_allclose(run_ort(proto, x), want, atol=1e-5, rtol=1e-5)
    assert [n.op_type for n in op_nodes(proto)] == ["Conv", "MaxPool", "AveragePool"]
    assert "Pad" not in [n.op_type for n in proto.graph.node]
