"""Folds at import (padkit.onnx.load): a constant Pad into the conv or pool reading it, and
with fold="all" BatchNormalization and per-channel affine constants into the conv's weights.
Each folded graph is checked against onnxruntime on the same file and against the unfolded
import; candidates that do not fold exactly stay, with the reason in ``onnx_folds``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import padkit.nn as pnn  # noqa: E402
from padkit.onnx import Fold, OnnxInput, load  # noqa: E402
from padkit.onnx._runtime import OnnxPad  # noqa: E402

RNG = np.random.default_rng(0)


def _init(name: str, array: np.ndarray) -> Any:
    return numpy_helper.from_array(np.asarray(array, dtype=np.float32), name)


def _model(nodes: list[Any], inits: list[Any], shape: list[Any], opset: int = 17) -> Any:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _pad(inp: str, out: str, pads: list[int], value: float, name: str = "pad") -> list[Any]:
    return [
        helper.make_node(
            "Constant",
            [],
            [f"{name}_p"],
            value=helper.make_tensor(f"{name}_p", TensorProto.INT64, [len(pads)], pads),
        ),
        helper.make_node(
            "Constant",
            [],
            [f"{name}_v"],
            value=helper.make_tensor(f"{name}_v", TensorProto.FLOAT, [], [value]),
        ),
        helper.make_node("Pad", [inp, f"{name}_p", f"{name}_v"], [out], name=name),
    ]


def _ort(model: Any, x: np.ndarray) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return np.asarray(sess.run(None, {"x": x})[0])


def _run(module: torch.nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return np.asarray(module(torch.from_numpy(x)).numpy())


def _pads_left(module: torch.nn.Module) -> int:
    return sum(isinstance(m, OnnxPad) for m in module.modules())


def _check(model: Any, x: np.ndarray, fold: str = "pads") -> Any:
    """The folded import against onnxruntime and the unfolded import."""
    module = load(model, fold=fold)
    plain = load(model, fold="none")
    got, want, ref = _run(module, x), _ort(model, x), _run(plain, x)
    scale = float(np.abs(want).max()) or 1.0
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6 * scale)
    return module


def test_pad_folds_into_conv_pads() -> None:
    w = RNG.standard_normal((4, 3, 3, 3))
    nodes = [
        *_pad("x", "p", [0, 0, 1, 0, 0, 0, 2, 1], 0.0),
        helper.make_node("Conv", ["p", "w"], ["y"], name="conv", pads=[1, 1, 0, 1]),
    ]
    model = _model(nodes, [_init("w", w)], [1, 3, 9, 8])
    module = _check(model, RNG.standard_normal((1, 3, 9, 8)).astype(np.float32))
    assert _pads_left(module) == 0
    conv = module.get_submodule("conv")
    assert conv.resolved_padding() == ((2, 2), (1, 2))
    (fold,) = module.onnx_folds
    assert fold == Fold("Pad", "pad", "conv", True, fold.detail) and "-> [(2, 2), (1, 2)]" in str(
        fold
    )
    assert _pads_left(load(model, fold="none")) == 1


@pytest.mark.parametrize("value", [float("-inf"), float(np.finfo(np.float32).min), 0.0])
def test_pad_folds_into_max_pool(value: float) -> None:
    nodes = [
        *_pad("x", "p", [0, 0, 0, 1, 0, 0, 1, 1], value),
        helper.make_node("MaxPool", ["p"], ["y"], name="pool", kernel_shape=[3, 3], strides=[2, 2]),
    ]
    model = _model(nodes, [], [1, 2, 8, 7])
    x = RNG.standard_normal((1, 2, 8, 7)).astype(np.float32) - 3.0  # negative: zero pads show
    module = _check(model, x)
    assert _pads_left(module) == 0
    assert module.get_submodule("pool").padding_value == value


@pytest.mark.parametrize("include", [0, 1])
def test_pad_folds_into_unpadded_average_pool(include: int) -> None:
    nodes = [
        *_pad("x", "p", [0, 0, 1, 1, 0, 0, 1, 1], 0.0),
        helper.make_node(
            "AveragePool",
            ["p"],
            ["y"],
            name="pool",
            kernel_shape=[3, 3],
            count_include_pad=include,
        ),
    ]
    model = _model(nodes, [], [1, 2, 7, 7])
    module = _check(model, RNG.standard_normal((1, 2, 7, 7)).astype(np.float32))
    assert _pads_left(module) == 0
    assert module.get_submodule("pool").count_include_pad


def test_average_pool_with_own_pads_and_count_include_pad_0_keeps_the_pad() -> None:
    nodes = [
        *_pad("x", "p", [0, 0, 1, 1, 0, 0, 1, 1], 0.0),
        helper.make_node(
            "AveragePool", ["p"], ["y"], name="pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1]
        ),
    ]
    model = _model(nodes, [], [1, 2, 7, 7])
    module = _check(model, RNG.standard_normal((1, 2, 7, 7)).astype(np.float32))
    assert _pads_left(module) == 1
    (fold,) = module.onnx_folds
    assert not fold.done and "count_include_pad=0" in fold.detail


@pytest.mark.parametrize(
    ("pads", "value", "why"),
    [
        ([0, 0, 1, 1, 0, 0, 1, 1], 1.0, "value 1.0"),
        ([0, 1, 1, 1, 0, 0, 1, 1], 0.0, "batch or channel"),
        ([0, 0, -1, 1, 0, 0, 1, 1], 0.0, "crop"),
    ],
)
def test_pads_that_do_not_fold_exactly_stay(pads: list[int], value: float, why: str) -> None:
    c_in = 3 + (pads[1] + pads[5])
    w = RNG.standard_normal((4, c_in, 3, 3))
    nodes = [*_pad("x", "p", pads, value), helper.make_node("Conv", ["p", "w"], ["y"], name="c")]
    model = _model(nodes, [_init("w", w)], [1, 3, 8, 8])
    module = _check(model, RNG.standard_normal((1, 3, 8, 8)).astype(np.float32))
    assert _pads_left(module) == 1
    (fold,) = module.onnx_folds
    assert not fold.done and why in fold.detail, fold


def test_pad_also_read_by_another_node_stays() -> None:
    w = RNG.standard_normal((3, 3, 3, 3))
    nodes = [
        *_pad("x", "p", [0, 0, 1, 1, 0, 0, 1, 1], 0.0),
        helper.make_node("Conv", ["p", "w"], ["c"], name="conv"),
        helper.make_node("Relu", ["p"], ["r"], name="relu"),
        helper.make_node("Slice", ["r", "st", "en"], ["rs"], name="slice"),
        helper.make_node("Add", ["c", "rs"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.array([1, 1], np.int64), "st"),
        numpy_helper.from_array(np.array([-1, -1], np.int64), "en"),
    ]
    inits[0].name, inits[1].name = "st", "en"
    model = _model(nodes, [_init("w", w), *inits], [1, 3, 6, 6])
    model.graph.node[-2].input[:] = ["r", "st", "en", "ax"]
    model.graph.initializer.append(numpy_helper.from_array(np.array([2, 3], np.int64), "ax"))
    module = _check(model, RNG.standard_normal((1, 3, 6, 6)).astype(np.float32))
    assert _pads_left(module) == 1
    (fold,) = module.onnx_folds
    assert not fold.done and "'relu'" in fold.detail


@pytest.mark.parametrize("layout", ["nhwc", "axes"])
def test_a_pad_before_a_transpose_moves_after_it_and_folds(layout: str) -> None:
    # tf2onnx's MobileNetV3 exports: Pad in NHWC, Transpose(0, 3, 1, 2), depthwise Conv
    pads = [0, 1, 2, 0, 0, 2, 1, 0] if layout == "nhwc" else [1, 2, 2, 1]
    nodes = [
        *_pad("x", "p", pads, 0.0),
        helper.make_node("Transpose", ["p"], ["t"], perm=[0, 3, 1, 2], name="tr"),
        helper.make_node("Conv", ["t", "w"], ["y"], name="dw", strides=[2, 2], group=4),
    ]
    if layout == "axes":  # opset 18: the pads of axes 1 and 2 only
        nodes[-3].input.append("ax")
    inits = [_init("w", RNG.standard_normal((4, 1, 3, 3)))]
    model = _model(nodes, inits, [2, 11, 12, 4], opset=18 if layout == "axes" else 17)
    if layout == "axes":
        model.graph.initializer.append(numpy_helper.from_array(np.array([1, 2], np.int64), "ax"))
    x = RNG.standard_normal((2, 11, 12, 4)).astype(np.float32)
    module = _check(model, x)
    assert _pads_left(module) == 0
    assert module.get_submodule("dw").resolved_padding() == ((1, 2), (2, 1))
    (fold,) = module.onnx_folds
    assert fold.done and (fold.node, fold.into) == ("pad", "dw")


def test_a_pad_of_a_pad_folds_too() -> None:
    nodes = [
        *_pad("x", "p1", [0, 0, 1, 0, 0, 0, 0, 1], 0.0, name="pad1"),
        *_pad("p1", "p2", [0, 0, 0, 2, 0, 0, 1, 0], 0.0, name="pad2"),
        helper.make_node("Conv", ["p2", "w"], ["y"], name="conv"),
    ]
    model = _model(nodes, [_init("w", RNG.standard_normal((2, 3, 3, 3)))], [1, 3, 7, 8])
    module = _check(model, RNG.standard_normal((1, 3, 7, 8)).astype(np.float32))
    assert _pads_left(module) == 0
    assert module.get_submodule("conv").resolved_padding() == ((1, 1), (2, 1))
    assert sorted(f.node for f in module.onnx_folds if f.done) == ["pad1", "pad2"]


def test_a_zero_pad_folds_into_an_lp_pool() -> None:
    nodes = [
        *_pad("x", "p", [0, 0, 1, 2, 0, 0, 2, 1], 0.0),
        helper.make_node("LpPool", ["p"], ["y"], name="lp", kernel_shape=[3, 3], strides=[2, 2]),
    ]
    model = _model(nodes, [], [1, 2, 9, 8])
    module = _check(model, RNG.standard_normal((1, 2, 9, 8)).astype(np.float32))
    assert _pads_left(module) == 0
    (fold,) = module.onnx_folds
    assert fold.done and fold.into == "lp"


def test_a_pad_before_a_transposed_conv_stays_with_its_reason() -> None:
    nodes = [
        *_pad("x", "p", [0, 0, 1, 1, 0, 0, 1, 1], 0.0),
        helper.make_node("ConvTranspose", ["p", "w"], ["y"], name="ct", strides=[2, 2]),
    ]
    model = _model(nodes, [_init("w", RNG.standard_normal((3, 2, 3, 3)))], [1, 3, 5, 6])
    module = _check(model, RNG.standard_normal((1, 3, 5, 6)).astype(np.float32))
    assert _pads_left(module) == 1
    (fold,) = module.onnx_folds
    assert not fold.done and "transposed conv's pads crop" in fold.detail
    from padkit.surgery import convert

    with pytest.warns(UserWarning, match=r"nothing changed; left as they were: pad: not folded"):
        _, report = convert(module)
    assert "no layer pads" not in report.notes[0]


def _conv_bn_model() -> Any:
    c = 5
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "g", "be", "m", "v"], ["n"], name="bn"),
        helper.make_node("Mul", ["n", "s"], ["ms"], name="mul"),
        helper.make_node("Add", ["k", "ms"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    inits = [
        _init("w", RNG.standard_normal((c, 3, 3, 3))),
        _init("b", RNG.standard_normal(c)),
        _init("g", RNG.random(c) + 0.5),
        _init("be", RNG.standard_normal(c)),
        _init("m", RNG.standard_normal(c) * 0.3),
        _init("v", RNG.random(c) + 0.5),
        _init("s", RNG.random((c, 1, 1)) + 0.5),
        _init("k", RNG.standard_normal((1, c, 1, 1))),
    ]
    return _model(nodes, inits, ["batch", 3, 10, 9])


def test_batch_norm_and_affine_constants_fold_into_the_conv_with_fold_all() -> None:
    model = _conv_bn_model()
    x = RNG.standard_normal((2, 3, 10, 9)).astype(np.float32)
    module = _check(model, x, fold="all")
    kinds = {type(m) for m in module.modules()}
    assert not any(issubclass(k, torch.nn.modules.batchnorm._BatchNorm) for k in kinds)
    assert [(f.kind, f.node, f.into, f.done) for f in module.onnx_folds] == [
        ("BatchNormalization", "bn", "conv", True),
        ("Mul", "mul", "conv", True),
        ("Add", "add", "conv", True),
    ]
    assert "Relu" not in [n.op for n in module.graph.nodes]
    assert [n.op for n in module.graph.nodes].count("call_function") == 1  # the Relu


def test_x_times_sigmoid_x_runs_as_one_silu_with_fold_all() -> None:
    """Both operand orders fold; a sigmoid read twice, and a sigmoid of another tensor
    (a squeeze-excitation gate), stay."""
    c = 4
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c"], ["s1"], name="sig1"),
        helper.make_node("Mul", ["c", "s1"], ["a"], name="mul1"),
        helper.make_node("Sigmoid", ["a"], ["s2"], name="sig2"),
        helper.make_node("Mul", ["s2", "a"], ["b"], name="mul2"),
        helper.make_node("Sigmoid", ["b"], ["s3"], name="sig3"),
        helper.make_node("Mul", ["b", "s3"], ["d"], name="mul3"),
        helper.make_node("Add", ["d", "s3"], ["e"], name="add"),
        helper.make_node("ReduceMean", ["e"], ["m"], axes=[2, 3], keepdims=1),
        helper.make_node("Sigmoid", ["m"], ["g"], name="gate"),
        helper.make_node("Mul", ["e", "g"], ["y"], name="scale"),
    ]
    model = _model(nodes, [_init("w", RNG.standard_normal((c, 3, 3, 3)))], ["batch", 3, 8, 7])
    x = RNG.standard_normal((2, 3, 8, 7)).astype(np.float32)
    module = _check(model, x, fold="all")
    assert [(f.kind, f.node, f.into) for f in module.onnx_folds if f.kind == "Sigmoid"] == [
        ("Sigmoid", "sig1", "mul1"),
        ("Sigmoid", "sig2", "mul2"),
    ]
    targets = [n.target for n in module.graph.nodes]
    assert targets.count(torch.nn.functional.silu) == 2
    assert targets.count(torch.sigmoid) == 2  # sig3 (read twice) and the gate
    assert load(model).onnx_folds == ()  # the default import keeps the graph as spelled


def test_default_import_keeps_batch_norm_trainable() -> None:
    module = load(_conv_bn_model())
    assert module.onnx_folds == ()
    bn = next(m for m in module.modules() if isinstance(m, torch.nn.BatchNorm2d))
    before = bn.running_mean.clone()
    module.train()
    module(torch.randn(4, 3, 10, 9)).sum().backward()
    assert not torch.equal(bn.running_mean, before)
    assert bn.weight.grad is not None


def test_optimize_inference_folds_and_freezes() -> None:
    model = _conv_bn_model()
    module = load(model, optimize="inference")
    assert not module.training
    assert all(not p.requires_grad for p in module.parameters())
    assert sum(f.done for f in module.onnx_folds) == 3
    x = RNG.standard_normal((1, 3, 10, 9)).astype(np.float32)
    want = _ort(model, x)
    np.testing.assert_allclose(_run(module, x), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_optimize_inference_takes_tensors_of_other_ranks() -> None:
    # a Conv3d (5-d weight) beside a 2-d one, and a 5-d constant (alexnet's export has one)
    nodes = [
        helper.make_node("Conv", ["x", "w3"], ["c3"], name="conv3d", pads=[1, 1, 1, 1, 1, 1]),
        helper.make_node("Add", ["c3", "k5"], ["a"], name="add5"),
        helper.make_node(
            "Constant",
            [],
            ["flat"],
            value=helper.make_tensor("flat", TensorProto.INT64, [4], [0, 16, 6, 35]),
        ),
        helper.make_node("Reshape", ["a", "flat"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2d", pads=[1, 1, 1, 1]),
    ]
    inits = [
        _init("w3", RNG.standard_normal((4, 3, 3, 3, 3))),
        _init("k5", RNG.standard_normal((1, 4, 1, 1, 1))),
        _init("w2", RNG.standard_normal((5, 16, 3, 3))),
    ]
    model = _model(nodes, inits, [1, 3, 4, 6, 35])
    x = RNG.standard_normal((1, 3, 4, 6, 35)).astype(np.float32)
    module = load(model, optimize="inference")
    assert module.get_submodule("conv2d").weight.is_contiguous(memory_format=torch.channels_last)
    assert module.get_submodule("conv3d").weight.dim() == 5
    want = _ort(model, x)
    np.testing.assert_allclose(_run(module, x), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"fold": "yes"}, "fold must be one of"),
        ({"fold": True}, "fold must be one of"),
        ({"optimize": "speed"}, "optimize must be None or 'inference'"),
        ({"optimize": "inference", "fold": "none"}, "cannot take fold='none'"),
    ],
)
def test_bad_fold_arguments_are_named(kwargs: dict[str, Any], text: str) -> None:
    with pytest.raises(ValueError, match=text):
        load(_conv_bn_model(), **kwargs)


def _nhwc_model() -> Any:
    """An NHWC graph as tf2onnx writes one before its transpose optimizer: Transpose, Pad
    (NCHW), Conv, Transpose back."""
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[0, 3, 1, 2]),
        *_pad("t", "p", [0, 0, 0, 0, 0, 0, 1, 1], 0.0),
        helper.make_node("Conv", ["p", "w"], ["c"], name="dw", strides=[2, 2], group=3),
        helper.make_node("Transpose", ["c"], ["y"], perm=[0, 2, 3, 1]),
    ]
    return _model(nodes, [_init("w", RNG.standard_normal((3, 1, 3, 3)))], ["N", 12, 11, 3])


def test_declared_inputs_are_kept() -> None:
    module = load(_nhwc_model(), fold="none")
    assert module.onnx_inputs == (OnnxInput("x", ("N", 12, 11, 3), torch.float32),)
    assert module.onnx_inputs[0].example_shape() == (1, 12, 11, 3)
    import copy

    assert copy.deepcopy(module).onnx_inputs == module.onnx_inputs


def test_surgery_convert_folds_the_pads_of_an_imported_nhwc_graph() -> None:
    from padkit.surgery import convert

    model = _nhwc_model()
    module = load(model, fold="none")
    assert _pads_left(module) == 1
    new, report = convert(module)
    assert _pads_left(new) == 0 and _pads_left(module) == 1
    assert not report.notes, report.notes
    assert [c.path for c in report.changes] == ["pad", "dw"]
    assert isinstance(new.get_submodule("dw"), pnn.Conv2d)
    x = RNG.standard_normal((2, 12, 11, 3)).astype(np.float32)
    np.testing.assert_allclose(_run(new, x), _ort(model, x), rtol=1e-5, atol=1e-5)
    # a default import folded the pad already: nothing left to convert, and no probe error
    with pytest.warns(UserWarning, match="nothing changed"):
        _, report = convert(load(model))
    assert not any("probe" in n for n in report.notes), report.notes
    # a convention port probes at the declared shape (NHWC)
    with pytest.warns(UserWarning, match="nothing changed"):
        _, report = convert(load(model), padding="symmetric")
    assert not any("probe" in n for n in report.notes), report.notes


def test_inspect_lists_the_folds(tmp_path: Any) -> None:
    from padkit.inspect import format_table, inspect_model

    model = _model(
        [
            *_pad("x", "p", [0, 0, 0, 0, 0, 0, 1, 1], 0.0),
            helper.make_node("Conv", ["p", "w"], ["y"], name="conv", strides=[2, 2]),
        ],
        [_init("w", RNG.standard_normal((2, 3, 3, 3)))],
        [1, 3, 8, 8],
    )
    reports = inspect_model(model)
    (report,) = reports
    assert report.folded == (
        "Pad 'pad' folded into 'conv': pads [(0, 0), (0, 0)] -> [(0, 1), (0, 1)]",
    )
    assert "Pad 'pad' folded" in (report.imports_as or "")
    table = format_table(reports)
    assert "folds at import (padkit.onnx.load): 1" in table
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    import json
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "padkit", "inspect", str(path), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    (layer,) = json.loads(out.stdout)["layers"]
    assert layer["folded"] == list(report.folded)


def _runtime_same_model(lower: bool, stride: int = 2, k: int = 3) -> Any:
    """A conv whose pads the graph computes from its input's size (TF SAME written out, as
    timm's ``Conv2dSame`` exports with dynamic sizes): Shape, integer arithmetic, Concat."""

    def ints(name: str, values: list[int]) -> Any:
        return numpy_helper.from_array(np.array(values, np.int64), name)

    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Slice", ["shape", "i2", "i4"], ["hw"]),
        helper.make_node("Add", ["hw", "sm1"], ["a"]),
        helper.make_node("Div", ["a", "s"], ["q"]),
        helper.make_node("Sub", ["q", "one"], ["q1"]),
        helper.make_node("Mul", ["q1", "s"], ["m"]),
        helper.make_node("Add", ["m", "keff"], ["m2"]),
        helper.make_node("Sub", ["m2", "hw"], ["t0"]),
        helper.make_node("Max", ["t0", "zero"], ["total"]),
        helper.make_node("Div", ["total", "two"], ["half"]),
        helper.make_node("Sub", ["total", "half"], ["other"]),
    ]
    lo, hi = ("half", "other") if not lower else ("other", "half")
    nodes += [
        helper.make_node("Concat", ["z2", lo, "z2", hi], ["pads"], axis=0),
        helper.make_node("Pad", ["x", "pads"], ["p"], name="pad", mode="constant"),
        helper.make_node("Conv", ["p", "w"], ["y"], name="conv", strides=[stride, stride]),
    ]
    inits = [
        ints("i2", [2]),
        ints("i4", [4]),
        ints("sm1", [stride - 1]),
        ints("s", [stride]),
        ints("one", [1]),
        ints("keff", [k]),
        ints("zero", [0]),
        ints("two", [2]),
        ints("z2", [0, 0]),
        _init("w", RNG.standard_normal((4, 3, k, k))),
    ]
    return _model(nodes, inits, ["N", 3, "H", "W"])


@pytest.mark.parametrize("lower", [False, True])
def test_pads_computed_from_the_input_size_fold_as_the_same_rule(lower: bool) -> None:
    model = _runtime_same_model(lower)
    module = load(model)
    assert _pads_left(module) == 0
    (fold,) = module.onnx_folds
    assert fold.done and fold.into == "conv" and "at run time" in fold.detail
    rule = "same_lower" if lower else "same"
    assert module.get_submodule("conv").pad_spec.axes == (rule, rule)
    for shape in [(1, 3, 17, 22), (2, 3, 9, 30), (1, 3, 64, 65), (1, 3, 5, 5)]:
        x = RNG.standard_normal(shape).astype(np.float32)
        want = _ort(model, x)
        np.testing.assert_allclose(_run(module, x), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_pads_computed_at_run_time_that_follow_no_rule_stay() -> None:
    # a kernel of 3 with pads sized for a kernel of 5: no SAME rule of this conv
    model = _runtime_same_model(False, k=5)
    model.graph.initializer[-1].CopyFrom(_init("w", RNG.standard_normal((4, 3, 3, 3))))
    module = load(model)
    assert _pads_left(module) == 1
    (fold,) = module.onnx_folds
    assert not fold.done and "follow no SAME rule" in fold.detail
    x = RNG.standard_normal((1, 3, 19, 12)).astype(np.float32)
    np.testing.assert_allclose(_run(module, x), _ort(model, x), rtol=1e-5, atol=1e-5)


def test_pads_computed_from_the_input_values_stay() -> None:
    # pads of 1 where the input holds a positive value, else 0: probes on zeros see 0 pads at
    # every size, which says nothing of a real input
    nodes = [
        helper.make_node("ReduceMax", ["x"], ["mx"], keepdims=0),
        helper.make_node("Greater", ["mx", "zf"], ["pos"]),
        helper.make_node("Cast", ["pos"], ["c0"], to=TensorProto.INT64),
        helper.make_node("Reshape", ["c0", "one"], ["c"]),
        helper.make_node("Concat", ["z2", "c", "c", "z2", "c", "c"], ["pads"], axis=0),
        helper.make_node("Pad", ["x", "pads"], ["p"], name="pad", mode="constant"),
        helper.make_node("Conv", ["p", "w"], ["y"], name="conv"),
    ]
    inits = [
        _init("zf", np.zeros(())),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
        numpy_helper.from_array(np.array([0, 0], np.int64), "z2"),
        _init("w", RNG.standard_normal((4, 3, 3, 3))),
    ]
    model = _model(nodes, inits, ["N", 3, "H", "W"])
    module = load(model)
    assert _pads_left(module) == 1
    (fold,) = module.onnx_folds
    assert not fold.done and "from the input's values" in fold.detail
    x = np.abs(RNG.standard_normal((1, 3, 9, 8))).astype(np.float32)
    want = _ort(model, x)
    assert want.shape == (1, 4, 9, 8)  # padded by 1: a real input's pads
    np.testing.assert_allclose(_run(module, x), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
