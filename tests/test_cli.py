"""The ``padkit`` command (padkit.cli) and the public functions behind it.

Expected pads come from hand derivations of each framework's rule (written out per
case) or from onnxruntime's own outputs, never from padkit.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper
from torch import nn

import padkit.nn as pnn
from padkit import onnx as padkit_onnx
from padkit._onnxfile import OnnxFileError
from padkit.cli import main
from padkit.inspect import inspect_model
from padkit.onnx import supported_ops

ROOT = Path(__file__).resolve().parent.parent


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ----------------------------------------------------------------------------- fixtures


def tiny_net() -> nn.Module:
    """A factory for ``padkit inspect test_cli:tiny_net``."""
    torch.manual_seed(0)
    return nn.Sequential(
        pnn.Conv2d(3, 4, 3, stride=2, padding="same"),  # TF SAME: size dependent
        nn.MaxPool2d(3, 2, padding=1, ceil_mode=True),
        nn.AvgPool2d(3, 1, padding=1),  # torch's count_include_pad=True default
        nn.Conv2d(4, 4, 4, padding="same"),  # torch's static split of an even kernel
        nn.Conv2d(4, 4, 3, padding=1, padding_mode="reflect"),
        pnn.Conv2d(4, 4, 3, stride=2, padding="same", dilation=2),
    )


def _single(node: Any, x_shape: list[Any], inits: list[Any], opset: int = 13) -> Any:
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, None)],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


_W = np.random.default_rng(0).standard_normal((2, 2, 3, 3)).astype(np.float32)

# name -> node; all read x: 1x2x8x8
_NODES = {
    "pool_asym": helper.make_node(
        "MaxPool",
        ["x"],
        ["pool_asym"],
        name="pool_asym",
        kernel_shape=[3, 3],
        strides=[2, 2],
        pads=[0, 0, 1, 1],
    ),
    "conv_lower": helper.make_node(
        "Conv",
        ["x", "w"],
        ["conv_lower"],
        name="conv_lower",
        strides=[2, 2],
        auto_pad="SAME_LOWER",
    ),
    "conv_dil": helper.make_node(
        "Conv",
        ["x", "w"],
        ["conv_dil"],
        name="conv_dil",
        dilations=[2, 2],
        auto_pad="SAME_UPPER",
    ),
    "pool_ceil": helper.make_node(
        "MaxPool",
        ["x"],
        ["pool_ceil"],
        name="pool_ceil",
        kernel_shape=[3, 3],
        strides=[2, 2],
        ceil_mode=1,
    ),
    "avg_default": helper.make_node(
        "AveragePool",
        ["x"],
        ["avg_default"],
        name="avg_default",
        kernel_shape=[3, 3],
        pads=[1, 1, 1, 1],
    ),
}


@pytest.fixture(scope="module")
def tricky_onnx(tmp_path_factory: pytest.TempPathFactory) -> Path:
    graph = helper.make_graph(
        list(_NODES.values()),
        "tricky",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, "H", "W"])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in _NODES],
        initializer=[numpy_helper.from_array(_W, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("onnx") / "tricky.onnx"
    onnx.save(model, str(path))
    return path


def _ort_run(name: str, x: np.ndarray) -> np.ndarray:
    model = _single(_NODES[name], list(x.shape), [numpy_helper.from_array(_W, "w")])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"x": x})[0])


# ----------------------------------------------------------------------------- verify


def test_verify_bundled_example_passes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "verify")
    assert code == 0
    assert "googlenet_mini" in out
    assert out.rstrip().splitlines()[-1].startswith("PASS")
    assert [line.split()[0] for line in out.splitlines() if line.endswith(" ok")] == [
        "prob",
        "inception",
    ]
    assert "running onnxruntime" in err and "imported in" in err  # progress goes to stderr


def test_example_model_is_small_and_rebuilt_byte_for_byte() -> None:
    from padkit.examples import example_model

    data = example_model()
    assert len(data) < 300_000
    spec = importlib.util.spec_from_file_location(
        "make_example_model", ROOT / "scripts" / "make_example_model.py"
    )
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.build_model().SerializeToString() == data
    ops = {n.op_type for n in onnx.load_from_string(data).graph.node}
    assert {"Conv", "MaxPool", "LRN", "Concat", "AveragePool", "Gemm", "Softmax"} <= ops


def test_verify_reports_a_real_mismatch(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # MaxPool SAME_UPPER with dilation: onnxruntime ignores the dilation when it sizes the pad
    # (n=5, k=2, d=2 -> 4 outputs; the spec and JAX give 5)
    node = helper.make_node(
        "MaxPool", ["x"], ["y"], kernel_shape=[2], dilations=[2], auto_pad="SAME_UPPER"
    )
    path = tmp_path / "ort_deviates.onnx"
    onnx.save(_single(node, [1, 1, 5], [], opset=12), str(path))
    code, out, _ = run(capsys, "verify", str(path), "-q")
    assert code == 1
    assert "1x1x4 (padkit 1x1x5)" in out and "MISMATCH" in out
    assert out.rstrip().splitlines()[-1].startswith("FAIL")


def test_verify_fails_on_wrong_numbers(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import padkit.onnx._graph as graph

    real = graph.load

    def off_by_a_bit(model: Any) -> Any:
        module = real(model)

        class Shifted(nn.Module):
            def forward(self, *args: Any) -> Any:
                return tuple(y + 1e-2 for y in module(*args))

        return Shifted()

    monkeypatch.setattr(graph, "load", off_by_a_bit)
    code, out, _ = run(capsys, "verify", "--quiet")
    assert code == 1 and "FAIL" in out
    assert run(capsys, "verify", "--quiet", "--atol", "0.1")[0] == 0


def test_verify_given_inputs_and_dynamic_shapes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    node = helper.make_node(
        "AveragePool", ["x"], ["y"], kernel_shape=[3], strides=[2], pads=[0, 1], ceil_mode=1
    )
    path = tmp_path / "dyn.onnx"
    onnx.save(_single(node, ["N", 1, "L"], []), str(path))
    code, _, err = run(capsys, "verify", str(path), "-q")
    assert code == 1 and "--input-shape" in err and "Traceback" not in err
    assert run(capsys, "verify", str(path), "-q", "--input-shape", "2,1,9")[0] == 0
    arr = tmp_path / "x.npy"
    np.save(arr, np.arange(10, dtype=np.float32).reshape(1, 1, 10))
    code, out, _ = run(capsys, "verify", str(path), "-q", "--input", str(arr))
    assert code == 0 and "given" in out
    assert run(capsys, "verify", str(path), "-q", "--input", f"x={arr}")[0] == 0


def test_verify_without_onnxruntime_says_how_to_install(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    code, _, err = run(capsys, "verify")
    assert code == 1
    assert 'pip install "padkit[onnx]"' in err


# ----------------------------------------------------------------------------- usage errors


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["bogus"],
        ["inspect"],
        ["explain", "--kernel", "3"],
        ["explain", "--kernel", "0", "--input", "8"],
        ["explain", "-k", "3", "-n", "8", "--convention", "tf,keras"],
        ["verify", "--input-shape", "1,x,3"],
        ["verify", "--seed", "one"],
    ],
    ids=lambda a: " ".join(a) or "nothing",
)
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert "usage: padkit" in err


def test_help_has_examples(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "examples:" in out and "padkit verify" in out
    for command in ("inspect", "verify", "explain"):
        code, out, _ = run(capsys, command, "--help")
        assert code == 0 and "examples:" in out


@pytest.mark.parametrize(
    ("model", "error"),
    [
        ("no_such_module_xyz:build", "ModuleNotFoundError"),
        ("torch.nn:NoSuchLayer", "AttributeError"),
        ("missing.onnx", "FileNotFoundError"),
        ("resnet", "ValueError"),
    ],
)
def test_model_load_errors_exit_1_without_traceback(
    capsys: pytest.CaptureFixture[str], model: str, error: str
) -> None:
    code, _, err = run(capsys, "inspect", model)
    assert code == 1
    assert err.startswith(f"padkit inspect: error: {error}")
    assert "Traceback" not in err


# ----------------------------------------------------------------------------- inspect: ONNX


def test_inspect_onnx_pads_and_warnings(
    capsys: pytest.CaptureFixture[str], tricky_onnx: Path
) -> None:
    code, out, _ = run(capsys, "inspect", str(tricky_onnx), "--input-shape", "1,2,8,8", "--json")
    assert code == 0
    layers = {r["name"]: r for r in json.loads(out)["layers"]}
    assert set(layers) == set(_NODES)
    # hand-derived: n=8, k=3, s=2 -> SAME total 1; LOWER -> (1, 0);
    # k=3, d=2 -> k_eff 5, s=1 -> total 4 -> (2, 2); explicit pads are the node's own
    assert layers["pool_asym"]["pads"] == [[0, 1], [0, 1]]
    assert layers["conv_lower"]["pads"] == [[1, 0], [1, 0]]
    assert layers["conv_dil"]["pads"] == [[2, 2], [2, 2]]
    assert layers["pool_ceil"]["pads"] == [[0, 0], [0, 0]]
    assert layers["avg_default"]["pads"] == [[1, 1], [1, 1]]
    assert layers["conv_lower"]["size_dependent"] and not layers["pool_asym"]["size_dependent"]
    assert layers["pool_asym"]["symmetric"] is False and layers["conv_dil"]["symmetric"] is True
    assert layers["conv_lower"]["auto_pad"] == "SAME_LOWER"
    assert layers["avg_default"]["count_include_pad"] is False

    def warned(name: str, text: str) -> bool:
        return any(text in w for w in layers[name]["warnings"])

    assert warned("pool_asym", "asymmetric pads") and warned("conv_lower", "asymmetric pads")
    assert warned("conv_lower", "SAME_LOWER")
    assert warned("conv_dil", "onnxruntime refuses")
    assert warned("pool_ceil", "ceil_mode") and warned("pool_ceil", "4x4 outputs where floor")
    assert warned("avg_default", "count_include_pad not set")
    assert not layers["conv_dil"]["warnings"][1:]  # symmetric: only the dilation warning
    assert layers["pool_asym"]["imports_as"] == "padkit.nn.MaxPool2d(padding=((0, 1), (0, 1)))"


def test_inspect_onnx_pads_match_onnxruntime(
    capsys: pytest.CaptureFixture[str], tricky_onnx: Path
) -> None:
    """The reported pads, applied with F.pad, reproduce onnxruntime's numbers and shapes."""
    _, out, _ = run(capsys, "inspect", str(tricky_onnx), "--input-shape", "1,2,8,8", "--json")
    layers = {r["name"]: r for r in json.loads(out)["layers"]}
    x = np.random.default_rng(1).standard_normal((1, 2, 8, 8)).astype(np.float32)
    xt = torch.from_numpy(x)
    for name in ("pool_asym", "conv_lower", "pool_ceil", "avg_default"):
        ref = _ort_run(name, x)
        assert list(ref.shape[2:]) == layers[name]["output_size"], name
        (t, b), (left, r) = layers[name]["pads"]
        if name == "conv_lower":
            mine = F.conv2d(F.pad(xt, (left, r, t, b)), torch.from_numpy(_W), stride=2)
        elif name == "pool_asym":
            mine = F.max_pool2d(F.pad(xt, (left, r, t, b), value=-float("inf")), 3, 2)
        else:
            continue
        np.testing.assert_allclose(mine.numpy(), ref, atol=1e-5)
    with pytest.raises(Exception, match=r"(?i)dilation"):  # the warning's claim, checked
        _ort_run("conv_dil", x)


def test_inspect_onnx_without_input_shape_leaves_size_dependent_pads_open(
    capsys: pytest.CaptureFixture[str], tricky_onnx: Path
) -> None:
    code, out, _ = run(capsys, "inspect", str(tricky_onnx))
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("conv_lower"))
    assert "(size?)" in row and "SAME_LOWER" in row
    assert "give --input-shape" in out
    # stride 1 SAME needs no size: the dilated conv is resolved anyway
    assert "(2,2) (2,2)" in next(line for line in out.splitlines() if line.startswith("conv_dil"))


def test_inspect_bundled_model_table(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from padkit.examples import example_model

    path = tmp_path / "g.onnx"
    path.write_bytes(example_model())
    code, out, _ = run(capsys, "inspect", str(path))
    assert code == 0
    pool1 = next(line for line in out.splitlines() if line.startswith("pool1 "))
    # GoogLeNet pool1 as Caffe converters write it: 28 -> 14 with pads [0, 0, 1, 1]
    assert "28x28  14x14  (0,1) (0,1)" in pool1 and " no " in pool1
    assert (
        "pool2: ceil_mode (Caffe-style rounding): 7x7 outputs where floor rounding gives 6x6" in out
    )


# ----------------------------------------------------------------------------- inspect: torch


def test_inspect_torch_factory(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "inspect", "test_cli:tiny_net", "--json")
    assert code == 0
    layers = json.loads(out)["layers"]
    assert [r["op"] for r in layers] == [
        "Conv2d",
        "MaxPool2d",
        "AvgPool2d",
        "Conv2d",
        "Conv2d",
        "Conv2d",
    ]
    same, pool, avg, even, reflect, dilated = layers
    assert same["source"] == "padkit" and same["pads"] is None and same["size_dependent"]
    assert same["exports_to"] == "Conv(auto_pad=SAME_UPPER)"
    # torch 'same' with k=4: total 3, total//2 before -> (1, 2)
    assert even["pads"] == [[1, 2], [1, 2]] and even["symmetric"] is False
    assert even["exports_to"] == "Conv(pads=[1, 1, 2, 2])"
    assert any("asymmetric" in w for w in even["warnings"])
    assert pool["exports_to"] == "MaxPool(pads=[1, 1, 1, 1], ceil_mode=1)"
    assert any("ceil_mode" in w for w in pool["warnings"])
    assert avg["count_include_pad"] is True
    assert any("count_include_pad=True" in w for w in avg["warnings"])
    assert reflect["exports_to"].startswith("Pad(mode=reflect")
    assert dilated["exports_to"].startswith("Shape/Pad subgraph + Conv")


def test_inspect_torch_factory_with_input_shape(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "inspect", "test_cli:tiny_net", "--input-shape", "1,3,17,17", "--json"
    )
    assert code == 0
    same, pool, *_ = json.loads(out)["layers"]
    # TF SAME, n=17, k=3, s=2: out 9, total max(8*2+3-17, 0) = 2 -> (1, 1)
    assert same["pads"] == [[1, 1], [1, 1]] and same["output_size"] == [9, 9]
    # torch ceil pooling, n=9, k=3, s=2, p=1: ceil(8/2)+1 = 5; 4*2 < 9+1 keeps it
    assert pool["input_size"] == [9, 9] and pool["output_size"] == [5, 5]
    net = tiny_net().eval()
    assert tuple(net[:2](torch.zeros(1, 3, 17, 17)).shape[2:]) == (5, 5)


def test_inspect_timm_tf_model(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("timm")
    code, out, _ = run(
        capsys, "inspect", "timm:tf_efficientnet_b0", "--input-shape", "1,3,64,64", "--json"
    )
    assert code == 0
    layers = {r["name"]: r for r in json.loads(out)["layers"]}
    stem = layers["conv_stem"]
    # TF SAME on 64, k=3, s=2: out 32, total 31*2+3-64 = 1 -> (0, 1)
    assert stem["op"] == "Conv2dSame" and stem["source"] == "timm"
    assert stem["pads"] == [[0, 1], [0, 1]] and stem["size_dependent"]
    assert "padkit.surgery.convert" in stem["exports_to"]
    same = [r for r in layers.values() if r["op"] == "Conv2dSame"]
    assert len(same) == 5  # the stem and the four stride-2 depthwise convs (docs/surgery.md)


def test_inspect_torchvision_factory(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torchvision")
    code, out, _ = run(capsys, "inspect", "torchvision.models:resnet18")
    assert code == 0
    first = out.splitlines()[1]
    assert (
        first.startswith("conv1 ") and "(3,3) (3,3)" in first and "Conv(pads=[3, 3, 3, 3])" in first
    )


# ------------------------------------------------------------- files that are not models


def _conv_model_bytes() -> bytes:
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])
    model = _single(node, [1, 2, 8, 8], [numpy_helper.from_array(_W, "w")])
    data: bytes = model.SerializeToString()
    return data


def _no_graph_bytes() -> bytes:
    model = onnx.ModelProto()
    model.ir_version = 8
    model.opset_import.add(domain="", version=13)
    model.producer_name = "a converter that wrote no graph"
    data: bytes = model.SerializeToString()
    return data


_BAD_FILES: dict[str, tuple[Any, str]] = {
    "empty": (lambda: b"", r"the file is empty \(0 bytes\), not an ONNX model"),
    "no_graph": (_no_graph_bytes, r"holds no ONNX graph"),
    # a cut inside the initializer's raw data
    "truncated": (
        lambda: _conv_model_bytes()[:150],
        r"does not parse as an ONNX model \(150 bytes",
    ),
    "text": (
        lambda: b"input: 1x3x224x224\nsee the README for the weights\n",
        r"is a text file \(it starts 'input: 1x3x224x224'\), not an ONNX model",
    ),
}


@pytest.mark.parametrize("command", ["inspect", "verify"])
@pytest.mark.parametrize("kind", list(_BAD_FILES))
def test_files_that_are_not_onnx_models_exit_1_with_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str, command: str
) -> None:
    make, reason = _BAD_FILES[kind]
    path = tmp_path / f"{kind}.onnx"
    path.write_bytes(make())
    try:  # the reference: onnx itself gets no graph out of the file
        assert not onnx.load(str(path)).HasField("graph")
    except Exception as err:  # it refused the file, with protobuf's wording
        assert type(err).__name__ == "DecodeError"
    code, out, err = run(capsys, command, str(path), *(["-q"] if command == "verify" else []))
    assert code == 1 and out == ""
    assert len(err.splitlines()) == 1
    assert re.match(
        rf"padkit {command}: error: OnnxFileError: {re.escape(str(path))}: {reason}", err
    )
    with pytest.raises(OnnxFileError, match=reason):
        inspect_model(str(path))


def test_a_truncated_model_is_really_truncated() -> None:
    # the reference for the case above: the same bytes whole load and have a graph
    whole = onnx.load_from_string(_conv_model_bytes())
    assert whole.HasField("graph") and len(whole.graph.initializer) == 1


# ----------------------------------------------------------------------------- --input-shape


def conv_net() -> nn.Module:
    """A factory for ``padkit inspect test_cli:conv_net`` (3 -> 5 channels, 2d)."""
    return nn.Sequential(nn.Linear(8, 8), nn.Conv2d(3, 5, 3), nn.MaxPool2d(2))


def test_input_shape_of_the_wrong_rank_names_the_option_and_the_rank(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # the reference: torch's own refusal, which named neither the option nor the rank
    with pytest.raises(RuntimeError):
        conv_net()[1](torch.zeros(1, 3))
    code, out, err = run(capsys, "inspect", "test_cli:conv_net", "--input-shape", "1,3")
    assert code == 2 and out == ""
    assert err == (
        "padkit inspect: error: --input-shape 1,3 has 2 dim(s), but the model's first conv/pool "
        "layer '1' (Conv2d) takes 4-dim input (N, C, H, W)\n"
    )
    code, _, err = run(capsys, "inspect", "test_cli:conv_net", "--input-shape", "1,4,8,8")
    assert code == 2
    assert err.startswith("padkit inspect: error: --input-shape 1,4,8,8: the model's forward")
    assert "expected input[1, 4, 8, 8] to have 3 channels" in err
    path = tmp_path / "conv.onnx"
    path.write_bytes(_conv_model_bytes())
    code, _, err = run(capsys, "inspect", str(path), "--input-shape", "1,2,8")
    assert code == 2
    assert err == (
        "padkit inspect: error: --input-shape 1,2,8 has 3 dim(s), but the model's first input "
        "'x' has rank 4 (1x2x8x8)\n"
    )
    code, out, _ = run(capsys, "inspect", "test_cli:conv_net", "--input-shape", "1,3,8,8")
    assert code == 0 and "6x6" in out  # the right rank still works (8 - 3 + 1 = 6)


# ----------------------------------------------------------------------------- unsupported ops


def _unsupported_op() -> str:
    """An ai.onnx op padkit.onnx.load has no converter for (LSTM unless one was added)."""
    return next(op for op in ("LSTM", "GRU", "RNN", "TfIdfVectorizer") if op not in supported_ops())


def _model_with(op: str, conv: bool) -> Any:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 1, 2])
    w = numpy_helper.from_array(np.ones((1, 4 * 5, 2), np.float32), "W")
    r = numpy_helper.from_array(np.ones((1, 4 * 5, 5), np.float32), "R")
    nodes = [helper.make_node(op, ["x", "W", "R"], ["h"], name="rnn", hidden_size=5)]
    outputs = [helper.make_tensor_value_info("h", TensorProto.FLOAT, None)]
    inits = [w, r]
    if conv:
        image = helper.make_tensor_value_info("img", TensorProto.FLOAT, [1, 2, 8, 8])
        nodes.append(helper.make_node("Conv", ["img", "w"], ["c"], name="conv", pads=[0, 1, 0, 1]))
        outputs.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, None))
        inits.append(numpy_helper.from_array(_W, "w"))
    inputs = [x, image] if conv else [x]
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("conv", [False, True])
def test_inspect_says_which_ops_padkit_cannot_import(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, conv: bool
) -> None:
    op = _unsupported_op()
    path = tmp_path / "rnn.onnx"
    onnx.save(_model_with(op, conv), str(path))
    with pytest.raises(padkit_onnx.UnsupportedOnnxError):  # the importer's own verdict
        padkit_onnx.load(str(path))
    code, out, err = run(capsys, "inspect", str(path))
    assert code == 1
    assert err == (
        f"padkit inspect: error: {path}: padkit.onnx.load cannot import 1 node(s): "
        f"{op} (opset 14) x1\n"
    )
    if conv:  # the table is still printed
        assert out.splitlines()[1].startswith("conv ") and "(0,0) (1,1)" in out
    else:
        assert out == "no conv or pool layers found\n"
    code, out, _ = run(capsys, "inspect", str(path), "--json")
    payload = json.loads(out)
    assert code == 1 and payload["imports"] is False
    assert payload["unsupported_ops"] == [{"op": op, "opset": 14, "count": 1, "reason": ""}]


def test_inspect_of_an_importable_model_says_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "conv.onnx"
    path.write_bytes(_conv_model_bytes())
    padkit_onnx.load(str(path))  # the reference: the importer takes it
    code, out, err = run(capsys, "inspect", str(path), "--json")
    assert code == 0 and err == ""
    payload = json.loads(out)
    assert payload["imports"] is True and payload["unsupported_ops"] == []


# ----------------------------------------------------------------------------- processes


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run python with this checkout's padkit, from a scratch directory."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )


def test_verify_checks_the_file_before_loading_torch(tmp_path: Path) -> None:
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    no_graph = tmp_path / "no_graph.onnx"
    no_graph.write_bytes(_no_graph_bytes())
    probe = (
        "import sys\n"
        "from padkit.cli import main\n"
        "code = main(['verify', sys.argv[1]])\n"
        "heavy = [m for m in ('torch', 'onnxruntime', 'onnx') if m in sys.modules]\n"
        "print(code, *heavy)\n"
    )
    for path, loaded, reason in [
        (str(tmp_path / "missing.onnx"), "", "FileNotFoundError: no such ONNX file"),
        (str(empty), "", "OnnxFileError"),
        (str(no_graph), " onnx", "OnnxFileError"),  # parsing needs onnx, nothing heavier
    ]:
        done = _python(probe, path)
        assert done.stdout == f"1{loaded}\n", done.stderr
        assert len(done.stderr.splitlines()) == 1
        assert done.stderr.startswith(f"padkit verify: error: {reason}")


def test_a_closed_pipe_ends_quietly() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with subprocess.Popen(
        [sys.executable, "-m", "padkit", "explain", "-k", "3", "-s", "2", "-n", "400"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=ROOT,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        proc.stdout.close()  # what `| head -1` does; the output is far beyond a pipe's buffer
        err = proc.stderr.read()
        code = proc.wait(timeout=120)
    assert first.startswith(b"kernel 3, stride 2")
    assert err == b""
    assert code == 141  # as a Unix tool killed by SIGPIPE (128 + 13)


# ----------------------------------------------------------------------------- explain


def test_explain_odd_pixel_k3_s2_n8(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "explain", "--kernel", "3", "--stride", "2", "--input", "8")
    assert code == 0
    summary = {line.split()[0]: line for line in out.splitlines()[-6:]}
    # TF SAME n=8, k=3, s=2 -> (0, 1); SAME_LOWER -> (1, 0);
    # 6: Flux SamePad is stride independent, total k-1 = 2 -> (1, 1); torch refuses stride 2;
    # 9: Caffe pad 1, ceil((8+2-3)/2)+1 = 5 outputs -> tight pads (1, 2)
    assert summary["tf"].split()[1:] == ["(0,", "1)", "4", "end"]
    assert summary["onnx-lower"].split()[1:] == ["(1,", "0)", "4", "start"]
    assert summary["flux"].split()[1:] == ["(1,", "1)", "4", "-"]
    assert summary["torch"].endswith("not allowed")
    assert summary["torch-sym"].split()[1:3] == ["(1,", "1)"]
    assert summary["caffe"].split()[1:4] == ["(1,", "2)", "5"]
    assert "torch refuses padding='same' for strided convolutions" in out
    # the drawing: TF's last window reads inputs 6, 7 and the end pad cell
    tf_block = out.split("\ntf: ")[1].split("\n\n")[0].splitlines()
    assert tf_block[2].split() == ["position", *map(str, range(8)), "p"]
    assert tf_block[-1].split() == ["out", "3", "#", "#", "o"]
    lower_block = out.split("\nonnx-lower: ")[1].split("\n\n")[0].splitlines()
    assert lower_block[3].split() == ["out", "0", "o", "#", "#"]


def test_explain_even_kernel_flux_puts_odd_pixel_first(capsys: pytest.CaptureFixture[str]) -> None:
    # Flux's docstring: Conv((2,2), pad=SamePad()) -> pad=(1, 0, 1, 0);
    # torch 'same' at stride 1 puts the odd pixel at the end
    code, out, _ = run(capsys, "explain", "-k", "2", "-n", "5", "-c", "flux,torch")
    assert code == 0
    summary = {line.split()[0]: line.split()[1:] for line in out.splitlines()[-2:]}
    assert summary == {"flux": ["(1,", "0)", "5", "start"], "torch": ["(0,", "1)", "5", "end"]}


def test_explain_caffe_googlenet_pool1(capsys: pytest.CaptureFixture[str]) -> None:
    # Caffe's ceil rounding, GoogLeNet pool1, in=112, k=3, s=2, p=0 -> 56 outputs, tight end pad 1
    code, out, _ = run(
        capsys, "explain", "-k", "3", "-s", "2", "-n", "112", "-c", "caffe", "--pad", "0"
    )
    assert code == 0
    assert out.splitlines()[-1].split() == ["caffe", "(0,", "1)", "56", "end"]


def test_explain_png(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "w.png"
    code, _, err = run(capsys, "explain", "-k", "3", "-s", "2", "-n", "8", "--png", str(path))
    assert code == 0 and f"wrote {path}" in err
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_explain_png_without_matplotlib(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code, _, err = run(capsys, "explain", "-k", "3", "-n", "8", "--png", str(tmp_path / "x.png"))
    assert code == 1
    assert "pip install matplotlib" in err and not (tmp_path / "x.png").exists()


# ----------------------------------------------------------------------------- entry points


def test_python_m_padkit_and_console_script() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "padkit", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and "examples:" in done.stdout
    (entry,) = importlib.metadata.entry_points(group="console_scripts", name="padkit")
    assert entry.value == "padkit.cli:main"
    exe = shutil.which("padkit") or str(Path(sys.executable).parent / "padkit")
    done = subprocess.run(
        [exe, "explain", "-k", "2", "-n", "5", "-c", "flux"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0
    assert done.stdout.splitlines()[-1].split() == ["flux", "(1,", "0)", "5", "start"]
