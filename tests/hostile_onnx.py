"""Hostile and malformed ONNX models, built with ``onnx.helper`` (nothing downloaded).

Each case writes what it needs under a folder ``root``: the model folder ``root/model``
and, beside it, ``root/outside/canary.bin``, a file no import may open. A case returns
:class:`Case`: the model (a path, bytes or a ``ModelProto``), the keywords for
``padkit.onnx.load``, and what must happen (``error``: the padkit error class name and the
texts its message must hold, among them the node's name; or ``ok``: the expected output
for an all-ones input, or None for "imports").

``tests/test_onnx_hostile.py`` runs every case in a child process under a memory limit and
a time limit, with an audit hook that records every file opened;
``scripts/onnx_hostile_table.py`` runs the same cases through onnxruntime (and onnx2torch).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CANARY_VALUE = 31337.25  # the canary's floats: must never come out of a model


@dataclass
class Case:
    model: Any  # a path (str), bytes or an onnx.ModelProto
    kwargs: dict[str, Any] = field(default_factory=dict)
    error: str | None = None  # "OnnxImportError" / "UnsupportedOnnxError"; None: imports
    texts: tuple[str, ...] = ()  # the error message holds each of these
    expected: Any = None  # the output for ones inputs (imports only), or None
    crashy: bool = False  # a bomb: without the checks it hangs, crashes or exhausts memory
    what: str = ""  # one line for the docs table


F = TensorProto.FLOAT
I64 = TensorProto.INT64


def _vi(name: str, elem: int = F, shape: Any = None) -> Any:
    return helper.make_tensor_value_info(name, elem, shape)


def _model(
    nodes: list[Any],
    inputs: list[Any],
    outputs: list[Any],
    inits: list[Any] | None = None,
    opset: int = 17,
    functions: list[Any] | None = None,
    opsets: list[Any] | None = None,
) -> Any:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=inits or [])
    imports = opsets or [helper.make_opsetid("", opset)]
    m = helper.make_model(graph, opset_imports=imports, functions=functions or [])
    m.ir_version = 8
    return m


def _folders(root: Path) -> tuple[Path, Path]:
    model_dir, outside = root / "model", root / "outside"
    model_dir.mkdir(parents=True, exist_ok=True)
    outside.mkdir(parents=True, exist_ok=True)
    canary = outside / "canary.bin"
    if not canary.exists():
        canary.write_bytes(np.full(16, CANARY_VALUE, np.float32).tobytes())
    return model_dir, outside


def _external(
    name: str,
    location: str,
    dims: list[int],
    offset: int | None = None,
    length: int | None = None,
    elem: int = F,
) -> Any:
    t = TensorProto()
    t.name, t.data_type = name, elem
    t.dims.extend(dims)
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        if value is not None:
            entry = t.external_data.add()
            entry.key, entry.value = key, str(value)
    return t


def _add_w(w: Any) -> Any:
    """y = x + w for a [4] float x."""
    return _model(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add_w")],
        [_vi("x", F, [4])],
        [_vi("y", F, [4])],
        [w],
    )


# ----------------------------------------------------------------------------- external data


def ext_bytes_no_base_dir(root: Path) -> Case:
    _folders(root)
    m = _add_w(_external("w", "canary.bin", [4]))
    return Case(
        m.SerializeToString(),
        error="OnnxImportError",
        texts=("'w'", "base_dir"),
        what="external data, model as bytes, no base_dir (a canary in the cwd)",
    )


def ext_proto_no_base_dir(root: Path) -> Case:
    _folders(root)
    m = _add_w(_external("w", "canary.bin", [4]))
    return Case(
        m,
        error="OnnxImportError",
        texts=("'w'", "base_dir"),
        what="external data, ModelProto, no base_dir",
    )


def ext_proto_base_dir_ok(root: Path) -> Case:
    model_dir, _ = _folders(root)
    (model_dir / "w.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    m = _add_w(_external("w", "w.bin", [4]))
    return Case(
        m,
        {"base_dir": str(model_dir)},
        expected=[1.0, 2.0, 3.0, 4.0],
        what="external data, ModelProto with base_dir (legitimate)",
    )


def ext_path_ok(root: Path) -> Case:
    model_dir, _ = _folders(root)
    (model_dir / "w_off.bin").write_bytes(b"pad!" + np.arange(4, dtype=np.float32).tobytes())
    path = model_dir / "ok.onnx"
    onnx.save(_add_w(_external("w", "w_off.bin", [4], offset=4, length=16)), str(path))
    return Case(
        str(path),
        expected=[1.0, 2.0, 3.0, 4.0],
        what="external data beside the model file, with offset (legitimate)",
    )


def _saved(root: Path, location: str, **kw: Any) -> str:
    """The model y = x + w, w external at ``location``, saved under the caller's name."""
    model_dir, _ = _folders(root)
    path = model_dir / (sys._getframe(1).f_code.co_name + ".onnx")
    onnx.save(_add_w(_external("w", location, [4], **kw)), str(path))
    return str(path)


def ext_dotdot(root: Path) -> Case:
    return Case(
        _saved(root, "../outside/canary.bin"),
        error="OnnxImportError",
        texts=("'w'", "'..'"),
        what="external location '../outside/canary.bin'",
    )


def ext_absolute(root: Path) -> Case:
    _, outside = _folders(root)
    return Case(
        _saved(root, str(outside / "canary.bin")),
        error="OnnxImportError",
        texts=("'w'", "absolute"),
        what="external location: an absolute path",
    )


def ext_backslash_dotdot(root: Path) -> Case:
    return Case(
        _saved(root, "..\\outside\\canary.bin"),
        error="OnnxImportError",
        texts=("'w'",),
        what="external location '..\\outside\\canary.bin'",
    )


def ext_symlink_escape(root: Path) -> Case:
    model_dir, outside = _folders(root)
    link = model_dir / "link.bin"
    if not link.is_symlink():
        link.symlink_to(outside / "canary.bin")
    return Case(
        _saved(root, "link.bin"),
        error="OnnxImportError",
        texts=("'w'", "outside"),
        what="external location: a symlink out of the folder",
    )


def ext_symlinked_folder(root: Path) -> Case:
    model_dir, outside = _folders(root)
    link = model_dir / "sub"
    if not link.is_symlink():
        link.symlink_to(outside)
    return Case(
        _saved(root, "sub/canary.bin"),
        error="OnnxImportError",
        texts=("'w'", "outside"),
        what="external location through a symlinked folder",
    )


def ext_base_dir_escape(root: Path) -> Case:
    model_dir, _ = _folders(root)
    m = _add_w(_external("w", "../outside/canary.bin", [4]))
    return Case(
        m,
        {"base_dir": str(model_dir)},
        error="OnnxImportError",
        texts=("'w'", "'..'"),
        what="ModelProto with base_dir, location '../outside/canary.bin'",
    )


def ext_fifo(root: Path) -> Case:
    model_dir, _ = _folders(root)
    fifo = model_dir / "pipe.bin"
    if not fifo.exists():
        os.mkfifo(fifo)
    return Case(
        _saved(root, "pipe.bin"),
        error="OnnxImportError",
        texts=("'w'", "regular file"),
        crashy=True,
        what="external location: a FIFO in the folder (would block)",
    )


def ext_directory(root: Path) -> Case:
    return Case(
        _saved(root, "."),
        error="OnnxImportError",
        texts=("'w'", "regular file"),
        what="external location: the folder itself",
    )


def ext_missing(root: Path) -> Case:
    return Case(
        _saved(root, "nope.bin"),
        error="OnnxImportError",
        texts=("'w'", "nope.bin"),
        what="external file missing",
    )


def ext_length_mismatch(root: Path) -> Case:
    model_dir, _ = _folders(root)
    (model_dir / "w8.bin").write_bytes(bytes(64))
    return Case(
        _saved(root, "w8.bin", length=8),
        error="OnnxImportError",
        texts=("'w'", "length 8"),
        what="external length disagrees with dims",
    )


def ext_offset_past_end(root: Path) -> Case:
    model_dir, _ = _folders(root)
    (model_dir / "w16.bin").write_bytes(bytes(16))
    return Case(
        _saved(root, "w16.bin", offset=1 << 40, length=16),
        error="OnnxImportError",
        texts=("'w'", "offset"),
        what="external offset past the end of the file",
    )


def ext_negative_offset(root: Path) -> Case:
    model_dir, _ = _folders(root)
    (model_dir / "w16.bin").write_bytes(bytes(16))
    return Case(
        _saved(root, "w16.bin", offset=-8),
        error="OnnxImportError",
        texts=("'w'", "negative"),
        what="external offset negative",
    )


def ext_huge_dims(root: Path) -> Case:
    model_dir, _ = _folders(root)
    path = model_dir / "huge.onnx"
    (model_dir / "w16.bin").write_bytes(bytes(16))
    onnx.save(_add_w(_external("w", "w16.bin", [1 << 40])), str(path))
    return Case(
        str(path),
        error="OnnxImportError",
        texts=("'w'",),
        what="external tensor declaring 2**40 elements, 16 bytes on disk",
    )


def ext_in_constant_node(root: Path) -> Case:
    _folders(root)
    node = helper.make_node(
        "Constant", [], ["w"], name="const_w", value=_external("cw", "canary.bin", [4])
    )
    m = _model(
        [node, helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        [_vi("x", F, [4])],
        [_vi("y", F, [4])],
    )
    return Case(
        m.SerializeToString(),
        error="OnnxImportError",
        texts=("const_w", "base_dir"),
        what="external data in a Constant node, bytes without base_dir",
    )


def ext_in_subgraph(root: Path) -> Case:
    model_dir, _ = _folders(root)
    then_g = helper.make_graph(
        [helper.make_node("Identity", ["sw"], ["t"])],
        "then",
        [],
        [_vi("t", F, [4])],
        [_external("sw", "../outside/canary.bin", [4])],
    )
    else_g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"])], "else", [], [_vi("e", F, [4])]
    )
    node = helper.make_node(
        "If", ["c"], ["y"], name="if_ext", then_branch=then_g, else_branch=else_g
    )
    m = _model([node], [_vi("c", TensorProto.BOOL, []), _vi("x", F, [4])], [_vi("y", F, [4])])
    path = model_dir / "sub.onnx"
    onnx.save(m, str(path))
    return Case(
        str(path),
        error="OnnxImportError",
        texts=("'sw'", "'..'"),
        what="external data '..' in an If branch's initializer",
    )


# ----------------------------------------------------------------------------- function bombs


def _bomb(depth: int, calls: int = 2) -> Any:
    dom = "bomb"
    functions = [
        helper.make_function(
            dom,
            "f0",
            ["a"],
            ["b"],
            [helper.make_node("Relu", ["a"], ["b"])],
            [helper.make_opsetid("", 17)],
        )
    ]
    for i in range(1, depth + 1):
        nodes, prev = [], "a"
        for j in range(calls):
            out = "b" if j == calls - 1 else f"t{j}"
            nodes.append(helper.make_node(f"f{i - 1}", [prev], [out], domain=dom))
            prev = out
        functions.append(
            helper.make_function(
                dom,
                f"f{i}",
                ["a"],
                ["b"],
                nodes,
                [helper.make_opsetid("", 17), helper.make_opsetid(dom, 1)],
            )
        )
    node = helper.make_node(f"f{depth}", ["x"], ["y"], domain=dom, name="bomb_call")
    return _model(
        [node],
        [_vi("x", F, [4])],
        [_vi("y", F, [4])],
        functions=functions,
        opsets=[helper.make_opsetid("", 17), helper.make_opsetid(dom, 1)],
    )


def function_bomb(root: Path) -> Case:
    return Case(
        _bomb(40).SerializeToString(),
        error="OnnxImportError",
        texts=("bomb_call", "max_function_nodes"),
        crashy=True,
        what="local functions each calling the next twice, 40 deep (2**40 nodes)",
    )


def function_small_ok(root: Path) -> Case:
    return Case(_bomb(3), expected=[1.0] * 4, what="the same, 3 deep (8 nodes, legitimate)")


def function_over_raised_limit(root: Path) -> Case:
    return Case(
        _bomb(6),
        {"max_function_nodes": 50},
        error="OnnxImportError",
        texts=("bomb_call", "max_function_nodes=50"),
        what="64 inlined nodes under max_function_nodes=50",
    )


def function_recursive(root: Path) -> Case:
    dom = "rec"
    f = helper.make_function(
        dom,
        "f",
        ["a"],
        ["b"],
        [helper.make_node("f", ["a"], ["b"], domain=dom)],
        [helper.make_opsetid("", 17), helper.make_opsetid(dom, 1)],
    )
    m = _model(
        [helper.make_node("f", ["x"], ["y"], domain=dom, name="rec_call")],
        [_vi("x", F, [4])],
        [_vi("y", F, [4])],
        functions=[f],
        opsets=[helper.make_opsetid("", 17), helper.make_opsetid(dom, 1)],
    )
    return Case(
        m.SerializeToString(),
        error="OnnxImportError",
        texts=("'f'", "recurse"),
        crashy=True,
        what="a local function that calls itself",
    )


def function_mutual(root: Path) -> Case:
    dom, ops = "rec", [helper.make_opsetid("", 17), helper.make_opsetid("rec", 1)]
    f = helper.make_function(
        dom, "f", ["a"], ["b"], [helper.make_node("g", ["a"], ["b"], domain=dom)], ops
    )
    g = helper.make_function(
        dom, "g", ["a"], ["b"], [helper.make_node("f", ["a"], ["b"], domain=dom)], ops
    )
    m = _model(
        [helper.make_node("f", ["x"], ["y"], domain=dom, name="mutual_call")],
        [_vi("x", F, [4])],
        [_vi("y", F, [4])],
        functions=[f, g],
        opsets=ops,
    )
    return Case(
        m.SerializeToString(),
        error="OnnxImportError",
        texts=("recurse",),
        crashy=True,
        what="two local functions calling each other",
    )


def function_bomb_in_if(root: Path) -> Case:
    bomb = _bomb(30)
    call = helper.make_node("f30", ["x"], ["t"], domain="bomb", name="bomb_in_branch")
    then_g = helper.make_graph([call], "then", [], [_vi("t", F, [4])])
    else_g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"])], "else", [], [_vi("e", F, [4])]
    )
    node = helper.make_node(
        "If", ["c"], ["y"], name="if_bomb", then_branch=then_g, else_branch=else_g
    )
    m = _model(
        [node],
        [_vi("c", TensorProto.BOOL, []), _vi("x", F, [4])],
        [_vi("y", F, [4])],
        functions=list(bomb.functions),
        opsets=list(bomb.opset_import),
    )
    return Case(
        m.SerializeToString(),
        error="OnnxImportError",
        texts=("bomb_in_branch", "max_function_nodes"),
        crashy=True,
        what="a 2**30-node function bomb inside an If branch",
    )


# ----------------------------------------------------------------------------- folding bombs


def _i64(name: str, values: list[int]) -> Any:
    return helper.make_tensor(name, I64, [len(values)], values)


def _fold(nodes: list[Any], inits: list[Any], out: str = "y", opset: int = 17) -> Any:
    return _model(nodes, [], [_vi(out, F, None)], inits, opset=opset)


def constant_of_shape_huge(root: Path) -> Case:
    m = _fold(
        [
            helper.make_node(
                "ConstantOfShape",
                ["s"],
                ["y"],
                name="cos_huge",
                value=helper.make_tensor("v", F, [1], [1.0]),
            )
        ],
        [_i64("s", [1 << 20, 1 << 20, 1 << 20])],
    )
    return Case(
        m,
        error="OnnxImportError",
        texts=("cos_huge", "max_folded_bytes", "opset 17"),
        crashy=True,
        what="ConstantOfShape [2**20]*3 (2**62 floats)",
    )


def constant_of_shape_negative(root: Path) -> Case:
    m = _fold(
        [helper.make_node("ConstantOfShape", ["s"], ["y"], name="cos_neg")], [_i64("s", [-4, -4])]
    )
    return Case(
        m,
        error="OnnxImportError",
        texts=("cos_neg", "negative"),
        what="ConstantOfShape with shape [-4, -4]",
    )


def range_zero_delta(root: Path) -> Case:
    inits = [helper.make_tensor(n, F, [], [v]) for n, v in (("a", 0.0), ("b", 10.0), ("d", 0.0))]
    m = _fold([helper.make_node("Range", ["a", "b", "d"], ["y"], name="range_zero")], inits)
    return Case(
        m, error="OnnxImportError", texts=("range_zero", "delta"), what="Range with delta 0"
    )


def range_tiny_delta(root: Path) -> Case:
    inits = [helper.make_tensor(n, F, [], [v]) for n, v in (("a", 0.0), ("b", 1e9), ("d", 1e-9))]
    m = _fold([helper.make_node("Range", ["a", "b", "d"], ["y"], name="range_tiny")], inits)
    return Case(
        m,
        error="OnnxImportError",
        texts=("range_tiny", "max_folded_bytes"),
        crashy=True,
        what="Range 0..1e9 step 1e-9 (1e18 elements)",
    )


def range_huge_int(root: Path) -> Case:
    inits = [helper.make_tensor(n, I64, [], [v]) for n, v in (("a", 0), ("b", 1 << 50), ("d", 1))]
    m = _model(
        [helper.make_node("Range", ["a", "b", "d"], ["y"], name="range_huge")],
        [],
        [_vi("y", I64, None)],
        inits,
    )
    return Case(
        m,
        error="OnnxImportError",
        texts=("range_huge", "max_folded_bytes"),
        crashy=True,
        what="Range 0..2**50 in int64",
    )


def range_nan(root: Path) -> Case:
    inits = [
        helper.make_tensor(n, F, [], [v]) for n, v in (("a", 0.0), ("b", float("nan")), ("d", 1.0))
    ]
    m = _fold([helper.make_node("Range", ["a", "b", "d"], ["y"], name="range_nan")], inits)
    return Case(
        m, error="OnnxImportError", texts=("range_nan", "finite"), what="Range with limit NaN"
    )


def concat_doubling(root: Path) -> Case:
    nodes, prev = [], "c0"
    for i in range(40):
        nodes.append(
            helper.make_node("Concat", [prev, prev], [f"c{i + 1}"], axis=0, name=f"dbl{i}")
        )
        prev = f"c{i + 1}"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    m = _fold(nodes, [helper.make_tensor("c0", F, [1024], [1.0] * 1024)])
    return Case(
        m,
        error="OnnxImportError",
        texts=("dbl", "max_folded_bytes"),
        crashy=True,
        what="a Concat chain doubling a constant 40 times",
    )


def tile_huge(root: Path) -> Case:
    m = _fold(
        [helper.make_node("Tile", ["c", "r"], ["y"], name="tile_huge")],
        [helper.make_tensor("c", F, [2, 2], [1.0] * 4), _i64("r", [1 << 30, 1 << 30])],
    )
    return Case(
        m,
        error="OnnxImportError",
        texts=("tile_huge", "max_folded_bytes"),
        crashy=True,
        what="Tile a 2x2 constant by [2**30, 2**30]",
    )


def expand_huge(root: Path) -> Case:
    nodes = [
        helper.make_node("Expand", ["c", "s"], ["e"], name="expand_huge"),
        helper.make_node("Add", ["e", "e"], ["y"], name="add_after"),
    ]
    m = _fold(nodes, [helper.make_tensor("c", F, [1], [1.0]), _i64("s", [1 << 25, 1 << 25])])
    return Case(
        m,
        error="OnnxImportError",
        texts=("expand_huge", "max_folded_bytes"),
        crashy=True,
        what="Expand a scalar to [2**25, 2**25], then Add",
    )


def broadcast_outer(root: Path) -> Case:
    a = numpy_helper.from_array(np.ones((1 << 16, 1), np.float32), "a")
    b = numpy_helper.from_array(np.ones((1, 1 << 16), np.float32), "b")
    m = _fold([helper.make_node("Mul", ["a", "b"], ["y"], name="outer_mul")], [a, b])
    return Case(
        m,
        error="OnnxImportError",
        texts=("outer_mul", "max_folded_bytes"),
        crashy=True,
        what="Mul of [65536,1] and [1,65536] constants (16 GiB)",
    )


def reshape_huge(root: Path) -> Case:
    m = _fold(
        [helper.make_node("Reshape", ["c", "s"], ["y"], name="reshape_huge")],
        [helper.make_tensor("c", F, [4], [1.0] * 4), _i64("s", [1 << 40, 1 << 40])],
    )
    return Case(
        m,
        error="OnnxImportError",
        texts=("reshape_huge", "input 1"),
        what="Reshape a [4] constant to [2**40, 2**40]",
    )


def one_hot_huge(root: Path) -> Case:
    inits = [
        _i64("i", [0, 1, 2]),
        helper.make_tensor("d", I64, [], [1 << 40]),
        helper.make_tensor("v", F, [2], [0.0, 1.0]),
    ]
    m = _fold([helper.make_node("OneHot", ["i", "d", "v"], ["y"], name="onehot_huge")], inits)
    return Case(
        m,
        error="OnnxImportError",
        texts=("onehot_huge", "max_folded_bytes"),
        crashy=True,
        what="OneHot with depth 2**40",
    )


def resize_huge(root: Path) -> Case:
    inits = [
        helper.make_tensor("c", F, [1, 1, 2, 2], [1.0] * 4),
        helper.make_tensor("sc", F, [4], [1.0, 1.0, 1e6, 1e6]),
    ]
    m = _fold([helper.make_node("Resize", ["c", "", "sc"], ["y"], name="resize_huge")], inits)
    return Case(
        m,
        error="OnnxImportError",
        texts=("resize_huge", "max_folded_bytes"),
        crashy=True,
        what="Resize a constant by 1e6 x 1e6",
    )


def _resize_scales(name: str, scales: list[float]) -> Any:
    sc = helper.make_tensor("sc", F, [4], scales)
    return _model(
        [helper.make_node("Resize", ["x", "", "sc"], ["y"], name=name)],
        [_vi("x", F, [1, 1, 4, 4])],
        [_vi("y", F, None)],
        [sc],
    )


def resize_inf_scales(root: Path) -> Case:
    return Case(
        _resize_scales("resize_inf", [1.0, 1.0, float("inf"), 2.0]),
        error="OnnxImportError",
        texts=("resize_inf", "scales", "finite"),
        what="Resize with an inf scale",
    )


def resize_nan_scales(root: Path) -> Case:
    return Case(
        _resize_scales("resize_nan", [1.0, 1.0, float("nan"), 2.0]),
        error="OnnxImportError",
        texts=("resize_nan", "scales"),
        what="Resize with a NaN scale",
    )


def resize_zero_scales(root: Path) -> Case:
    return Case(
        _resize_scales("resize_zero", [1.0, 1.0, 0.0, -2.0]),
        error="OnnxImportError",
        texts=("resize_zero", "scales", "> 0"),
        what="Resize with scales 0 and -2",
    )


def pad_huge(root: Path) -> Case:
    inits = [helper.make_tensor("c", F, [2, 2], [1.0] * 4), _i64("p", [0, 0, 1 << 30, 1 << 30])]
    m = _fold([helper.make_node("Pad", ["c", "p"], ["y"], name="pad_huge")], inits)
    return Case(
        m,
        error="OnnxImportError",
        texts=("pad_huge", "max_folded_bytes"),
        crashy=True,
        what="Pad a 2x2 constant by 2**30 on each side",
    )


def matmul_huge(root: Path) -> Case:
    a = numpy_helper.from_array(np.ones((1 << 15, 2), np.float32), "a")
    b = numpy_helper.from_array(np.ones((2, 1 << 15), np.float32), "b")
    m = _fold([helper.make_node("MatMul", ["a", "b"], ["y"], name="matmul_big")], [a, b])
    return Case(
        m,
        error="OnnxImportError",
        texts=("matmul_big", "max_folded_bytes"),
        crashy=True,
        what="MatMul of [32768,2] and [2,32768] constants (4 GiB)",
    )


def einsum_outer(root: Path) -> Case:
    a = numpy_helper.from_array(np.ones(1 << 15, np.float32), "a")
    m = _fold(
        [helper.make_node("Einsum", ["a", "a"], ["y"], equation="i,j->ij", name="einsum_big")],
        [a],
    )
    return Case(
        m,
        error="OnnxImportError",
        texts=("einsum_big", "max_folded_bytes"),
        crashy=True,
        what="Einsum i,j->ij of a [32768] constant with itself (4 GiB)",
    )


def conv_transpose_huge_stride(root: Path) -> Case:
    w = helper.make_tensor("w", F, [1, 1, 1], [1.0])
    c = helper.make_tensor("c", F, [1, 1, 4], [1.0] * 4)
    node = helper.make_node("ConvTranspose", ["c", "w"], ["y"], strides=[1 << 30], name="convt_big")
    return Case(
        _fold([node], [c, w]),
        error="OnnxImportError",
        texts=("convt_big", "max_folded_bytes"),
        crashy=True,
        what="ConvTranspose of a constant with stride 2**30",
    )


def fold_over_raised_limit(root: Path) -> Case:
    m = _fold(
        [helper.make_node("ConstantOfShape", ["s"], ["y"], name="cos_1mb")],
        [_i64("s", [256, 1024])],
    )
    return Case(
        m,
        {"max_folded_bytes": 4096},
        error="OnnxImportError",
        texts=("cos_1mb", "max_folded_bytes=4096"),
        what="a 1 MiB ConstantOfShape under max_folded_bytes=4096",
    )


def fold_default_ok(root: Path) -> Case:
    m = _fold(
        [helper.make_node("ConstantOfShape", ["s"], ["y"], name="cos_1mb")],
        [_i64("s", [256, 1024])],
    )
    return Case(m, what="the same under the default limit (legitimate)")


def maxpool_const_huge_kernel(root: Path) -> Case:
    m = _fold(
        [helper.make_node("MaxPool", ["c"], ["y"], kernel_shape=[1 << 30], name="pool_big")],
        [helper.make_tensor("c", F, [1, 1, 4], [1.0] * 4)],
    )
    return Case(
        m,
        error="OnnxImportError",
        texts=("pool_big", "opset 17"),
        what="MaxPool with kernel 2**30 over a constant",
    )


def squeeze_bad_axis(root: Path) -> Case:
    m = _fold(
        [helper.make_node("Squeeze", ["c", "ax"], ["y"], name="squeeze_bad")],
        [helper.make_tensor("c", F, [1, 4], [1.0] * 4), _i64("ax", [7])],
    )
    return Case(
        m,
        error="OnnxImportError",
        texts=("squeeze_bad", "input 0"),
        what="Squeeze a constant on axis 7 of 2",
    )


def topk_huge_k(root: Path) -> Case:
    m = _model(
        [helper.make_node("TopK", ["c", "k"], ["y", "i"], name="topk_big")],
        [],
        [_vi("y", F, None), _vi("i", I64, None)],
        [helper.make_tensor("c", F, [4], [1.0] * 4), _i64("k", [1 << 40])],
    )
    return Case(
        m, error="OnnxImportError", texts=("topk_big",), what="TopK with k=2**40 on a constant"
    )


def gather_out_of_range(root: Path) -> Case:
    m = _fold(
        [helper.make_node("Gather", ["c", "i"], ["y"], name="gather_oob")],
        [helper.make_tensor("c", F, [4], [1.0] * 4), _i64("i", [1 << 40])],
    )
    return Case(
        m,
        error="OnnxImportError",
        texts=("gather_oob",),
        what="Gather index 2**40 from a [4] constant",
    )


# ----------------------------------------------------------------------------- tensors


def _ident(init: Any, elem: int = F) -> Any:
    return _model(
        [helper.make_node("Identity", [init.name], ["y"], name="ident")],
        [],
        [_vi("y", elem, None)],
        [init],
    )


def tensor_raw_too_short(root: Path) -> Case:
    t = helper.make_tensor("w", F, [3], np.ones(3, np.float32).tobytes(), raw=True)
    t.dims[0] = 5
    return Case(
        _ident(t),
        error="OnnxImportError",
        texts=("'w'", "raw_data"),
        what="raw_data of 3 floats for dims [5]",
    )


def tensor_float_data_count(root: Path) -> Case:
    t = helper.make_tensor("w", F, [3], [1.0, 2.0, 3.0])
    t.dims[0] = 7
    return Case(
        _ident(t),
        error="OnnxImportError",
        texts=("'w'", "float_data"),
        what="float_data of 3 values for dims [7]",
    )


def tensor_negative_dims(root: Path) -> Case:
    t = helper.make_tensor("w", F, [1], [1.0])
    t.dims[0] = -1
    return Case(
        _ident(t),
        error="OnnxImportError",
        texts=("'w'", "negative"),
        what="an initializer with dims [-1]",
    )


def tensor_huge_dims_tiny_data(root: Path) -> Case:
    t = helper.make_tensor("w", F, [1], [1.0])
    del t.dims[:]
    t.dims.extend([1 << 31, 1 << 31])
    return Case(
        _ident(t).SerializeToString(),
        error="OnnxImportError",
        texts=("'w'",),
        crashy=True,
        what="dims [2**31, 2**31] with 1 float of data",
    )


def tensor_unknown_type(root: Path) -> Case:
    t = helper.make_tensor("w", F, [1], [1.0])
    t.data_type = 999
    return Case(
        _ident(t),
        error="OnnxImportError",
        texts=("'w'", "999"),
        what="an initializer of data_type 999",
    )


def tensor_undefined_type(root: Path) -> Case:
    t = helper.make_tensor("w", F, [1], [1.0])
    t.data_type = 0
    return Case(
        _ident(t),
        error="OnnxImportError",
        texts=("'w'", "UNDEFINED"),
        what="an initializer of data_type 0 (UNDEFINED)",
    )


def tensor_wrong_field(root: Path) -> Case:
    t = helper.make_tensor("w", F, [2], [1.0, 2.0])
    del t.float_data[:]
    t.int64_data.extend([1, 2])
    return Case(
        _ident(t),
        error="OnnxImportError",
        texts=("'w'", "int64_data"),
        what="FLOAT values stored in int64_data",
    )


def tensor_strings(root: Path) -> Case:
    t = helper.make_tensor("w", TensorProto.STRING, [2], [b"a", b"b"])
    return Case(
        _ident(t, TensorProto.STRING),
        error="OnnxImportError",
        texts=("'w'", "string"),
        what="a STRING initializer",
    )


def tensor_segment(root: Path) -> Case:
    t = helper.make_tensor("w", F, [2], [1.0, 2.0])
    t.segment.begin, t.segment.end = 0, 1
    return Case(
        _ident(t), error="OnnxImportError", texts=("'w'", "segment"), what="a segmented initializer"
    )


def tensor_sparse(root: Path) -> Case:
    values = helper.make_tensor("sp", F, [2], [1.0, 2.0])
    indices = helper.make_tensor("sp_i", I64, [2], [0, 3])
    sparse = helper.make_sparse_tensor(values, indices, [4])
    m = _model([helper.make_node("Identity", ["sp"], ["y"], name="ident")], [], [_vi("y", F, None)])
    m.graph.sparse_initializer.append(sparse)
    return Case(m, error="OnnxImportError", texts=("'sp'", "sparse"), what="a sparse initializer")


def tensor_bad_in_constant(root: Path) -> Case:
    t = helper.make_tensor("v", F, [1], [1.0])
    t.dims[0] = 9
    node = helper.make_node("Constant", [], ["y"], name="const_bad", value=t)
    m = _model([node], [], [_vi("y", F, None)])
    return Case(
        m,
        error="OnnxImportError",
        texts=("const_bad", "opset 17", "float_data"),
        what="a Constant node whose tensor has 1 value for dims [9]",
    )


def tensor_float8(root: Path) -> Case:
    t = helper.make_tensor("w", TensorProto.FLOAT8E4M3FN, [2], [1.0, 2.0])
    return Case(
        _ident(t, TensorProto.FLOAT8E4M3FN),
        error="OnnxImportError",
        texts=("'w'", "FLOAT8"),
        what="a FLOAT8E4M3FN initializer (torch has no exact dtype)",
    )


def initializer_ratio(root: Path) -> Case:
    t = helper.make_tensor("w", I64, [0], [])
    t.dims[0] = 3_000_000
    t.int64_data.extend(np.zeros(3_000_000, np.int64).tolist())
    m = _model(
        [helper.make_node("Identity", ["w"], ["y"], name="ident")], [], [_vi("y", I64, None)], [t]
    )
    return Case(
        m,
        {"max_initializer_ratio": 1.0},
        error="OnnxImportError",
        texts=("max_initializer_ratio=1",),
        what="3M int64 zeros as varints (8x their bytes) under max_initializer_ratio=1",
    )


# ----------------------------------------------------------------------------- graph structure


def duplicate_output(root: Path) -> Case:
    nodes = [
        helper.make_node("Relu", ["x"], ["t"], name="first"),
        helper.make_node("Neg", ["x"], ["t"], name="second"),
        helper.make_node("Identity", ["t"], ["y"], name="out"),
    ]
    m = _model(nodes, [_vi("x", F, [4])], [_vi("y", F, [4])])
    return Case(
        m,
        error="OnnxImportError",
        texts=("second", "'t'", "first"),
        what="two nodes writing the same output name",
    )


def output_shadows_input(root: Path) -> Case:
    nodes = [
        helper.make_node("Relu", ["x"], ["x"], name="relu_x"),
        helper.make_node("Identity", ["x"], ["y"]),
    ]
    m = _model(nodes, [_vi("x", F, [4])], [_vi("y", F, [4])])
    return Case(
        m,
        error="OnnxImportError",
        texts=("relu_x", "graph input"),
        what="a node writing the graph input's name",
    )


def opset_future(root: Path) -> Case:
    m = _model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [_vi("x", F, [4])],
        [_vi("y", F, [4])],
        opset=10000,
    )
    return Case(m, error="OnnxImportError", texts=("10000", "newest"), what="ai.onnx opset 10000")


def opset_zero(root: Path) -> Case:
    m = _model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [_vi("x", F, [4])],
        [_vi("y", F, [4])],
        opset=0,
    )
    return Case(m, error="OnnxImportError", texts=("version 0",), what="ai.onnx opset 0")


def _conv(
    w: Any, b: Any = None, name: str = "conv", op: str = "Conv", x_ch: int = 2, **attrs: Any
) -> Any:
    inputs = ["x", "w"] + (["b"] if b is not None else [])
    inits = [w] + ([b] if b is not None else [])
    node = helper.make_node(op, inputs, ["y"], name=name, **attrs)
    return _model([node], [_vi("x", F, [1, x_ch, 5, 5])], [_vi("y", F, None)], inits)


def _w(shape: list[int], elem: int = F) -> Any:
    n = int(np.prod(shape))
    if elem == I64:
        return helper.make_tensor("w", elem, shape, [1] * n)
    return helper.make_tensor("w", elem, shape, [0.5] * n)


def conv_kernel_shape_mismatch(root: Path) -> Case:
    return Case(
        _conv(_w([3, 2, 3, 3]), kernel_shape=[5, 5], name="conv_ks"),
        error="OnnxImportError",
        texts=("conv_ks", "kernel_shape"),
        what="Conv kernel_shape [5,5] with a 3x3 weight",
    )


def conv_bias_length(root: Path) -> Case:
    b = helper.make_tensor("b", F, [7], [0.0] * 7)
    return Case(
        _conv(_w([3, 2, 3, 3]), b, name="conv_bias"),
        error="OnnxImportError",
        texts=("conv_bias", "input 2"),
        what="Conv bias of 7 for 3 output channels",
    )


def conv_group_mismatch(root: Path) -> Case:
    return Case(
        _conv(_w([3, 2, 3, 3]), group=2, x_ch=4, name="conv_group"),
        error="OnnxImportError",
        texts=("conv_group", "group=2"),
        what="Conv group=2 with 3 output channels",
    )


def conv_group_zero(root: Path) -> Case:
    return Case(
        _conv(_w([3, 2, 3, 3]), group=0, name="conv_g0"),
        error="OnnxImportError",
        texts=("conv_g0", "group"),
        what="Conv group=0",
    )


def conv_channels_mismatch(root: Path) -> Case:
    return Case(
        _conv(_w([3, 2, 3, 3]), x_ch=5, name="conv_ch"),
        error="OnnxImportError",
        texts=("conv_ch", "input 0"),
        what="Conv on 5 channels with a 2-channel weight",
    )


def conv_int64_weight(root: Path) -> Case:
    return Case(
        _conv(_w([3, 2, 3, 3], I64), name="conv_int"),
        error="OnnxImportError",
        texts=("conv_int", "input 1"),
        what="Conv with int64 weights",
    )


def conv_weight_rank(root: Path) -> Case:
    return Case(
        _conv(_w([3, 2]), kernel_shape=[3, 3], name="conv_rank"),
        error="OnnxImportError",
        texts=("conv_rank", "input 1"),
        what="Conv with a 2-d weight",
    )


def conv_zero_stride(root: Path) -> Case:
    return Case(
        _conv(_w([3, 2, 3, 3]), strides=[0, 1], name="conv_s0"),
        error="OnnxImportError",
        texts=("conv_s0", "strides"),
        what="Conv strides [0, 1]",
    )


def conv_transpose_bias(root: Path) -> Case:
    b = helper.make_tensor("b", F, [2], [0.0] * 2)
    return Case(
        _conv(_w([2, 3, 3, 3]), b, op="ConvTranspose", name="convt_bias"),
        error="OnnxImportError",
        texts=("convt_bias", "input 2"),
        what="ConvTranspose bias of 2 for 3 output channels",
    )


def conv_transpose_kernel_shape(root: Path) -> Case:
    return Case(
        _conv(_w([2, 3, 3, 3]), op="ConvTranspose", kernel_shape=[2, 2], name="convt_ks"),
        error="OnnxImportError",
        texts=("convt_ks", "kernel_shape"),
        what="ConvTranspose kernel_shape [2,2] with a 3x3 weight",
    )


def conv_ok(root: Path) -> Case:
    b = helper.make_tensor("b", F, [3], [0.0] * 3)
    return Case(
        _conv(_w([3, 2, 3, 3]), b, kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        what="a well-formed Conv (legitimate)",
    )


def _if(
    then_outs: list[Any], then_nodes: list[Any], n_out: int = 1, cond_init: bool = False
) -> Any:
    then_g = helper.make_graph(then_nodes, "then", [], then_outs)
    else_g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"])], "else", [], [_vi("e", F, [4])]
    )
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(
        "If", ["c"], outs, name="if_node", then_branch=then_g, else_branch=else_g
    )
    inits = [helper.make_tensor("c", TensorProto.BOOL, [], [True])] if cond_init else []
    inputs = ([] if cond_init else [_vi("c", TensorProto.BOOL, [])]) + [_vi("x", F, [4])]
    return _model([node], inputs, [_vi(o, F, None) for o in outs], inits)


def if_branch_output_count(root: Path) -> Case:
    m = _if([_vi("t", F, [4])], [helper.make_node("Relu", ["x"], ["t"])], n_out=2)
    return Case(
        m,
        error="OnnxImportError",
        texts=("if_node", "then_branch", "2 output"),
        what="If with 2 outputs whose branches have 1",
    )


def if_branch_output_missing(root: Path) -> Case:
    m = _if([_vi("nowhere", F, [4])], [helper.make_node("Relu", ["x"], ["t"])])
    return Case(
        m,
        error="OnnxImportError",
        texts=("if_node", "nowhere"),
        what="If branch declaring an output no node computes",
    )


def if_const_branch_output_missing(root: Path) -> Case:
    m = _if([_vi("nowhere", F, [4])], [helper.make_node("Relu", ["x"], ["t"])], cond_init=True)
    return Case(
        m,
        error="OnnxImportError",
        texts=("if_node", "nowhere"),
        what="the same with a constant condition (inlined branch)",
    )


def _nested_if(depth: int) -> Any:
    inner = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["o0"])], "b0", [], [_vi("o0", F, [4])]
    )
    for i in range(1, depth + 1):
        other = helper.make_graph(
            [helper.make_node("Identity", ["x"], [f"e{i}"])], f"e{i}", [], [_vi(f"e{i}", F, [4])]
        )
        node = helper.make_node(
            "If", ["c"], [f"o{i}"], name=f"nest{i}", then_branch=inner, else_branch=other
        )
        inner = helper.make_graph([node], f"b{i}", [], [_vi(f"o{i}", F, [4])])
    node = inner.node[0]
    node.output[0] = "y"
    return _model([node], [_vi("c", TensorProto.BOOL, []), _vi("x", F, [4])], [_vi("y", F, [4])])


def nested_if_depth(root: Path) -> Case:
    return Case(
        _nested_if(12),
        {"max_subgraph_depth": 8},
        error="OnnxImportError",
        texts=("nest", "max_subgraph_depth=8"),
        what="If nested 12 deep under max_subgraph_depth=8",
    )


def nested_if_deep_bytes(root: Path) -> Case:
    return Case(
        _nested_if(30).SerializeToString(),
        expected=[1.0] * 4,
        crashy=True,
        what="If nested 30 deep, as bytes (protobuf refuses ~33 and more)",
    )


def nested_if_ok(root: Path) -> Case:
    return Case(_nested_if(5), {}, expected=[1.0] * 4, what="If nested 5 deep (legitimate)")


def loop_body_outputs(root: Path) -> Case:
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [_vi("i", I64, []), _vi("cond_in", TensorProto.BOOL, [])],
        [_vi("cond_out", TensorProto.BOOL, [])],
    )
    node = helper.make_node("Loop", ["n", ""], ["y"], name="loop_bad", body=body)
    m = _model([node], [_vi("n", I64, [])], [_vi("y", F, None)])
    return Case(
        m,
        error="OnnxImportError",
        texts=("loop_bad", "body"),
        what="Loop whose body lacks the scan output the node declares",
    )


def attribute_wrong_type(root: Path) -> Case:
    node = helper.make_node("MaxPool", ["x"], ["y"], name="pool_attr")
    node.attribute.append(helper.make_attribute("kernel_shape", 2.5))
    m = _model([node], [_vi("x", F, [1, 1, 4, 4])], [_vi("y", F, None)])
    return Case(
        m,
        error="OnnxImportError",
        texts=("pool_attr", "kernel_shape", "INTS"),
        what="MaxPool kernel_shape given as a FLOAT",
    )


def attribute_string_axis(root: Path) -> Case:
    node = helper.make_node("Concat", ["x", "x"], ["y"], name="concat_attr", axis="zero")
    m = _model([node], [_vi("x", F, [4])], [_vi("y", F, None)])
    return Case(
        m,
        error="OnnxImportError",
        texts=("concat_attr", "axis"),
        what="Concat axis given as a STRING",
    )


def attribute_twice(root: Path) -> Case:
    node = helper.make_node("Concat", ["x", "x"], ["y"], name="concat_twice", axis=0)
    node.attribute.append(helper.make_attribute("axis", 1))
    m = _model([node], [_vi("x", F, [4])], [_vi("y", F, None)])
    return Case(
        m, error="OnnxImportError", texts=("concat_twice", "twice"), what="an attribute given twice"
    )


def attribute_undefined(root: Path) -> Case:
    node = helper.make_node("Relu", ["x"], ["y"], name="relu_undef")
    attr = node.attribute.add()
    attr.name = "mystery"
    m = _model([node], [_vi("x", F, [4])], [_vi("y", F, None)])
    return Case(
        m,
        error="OnnxImportError",
        texts=("relu_undef", "mystery"),
        what="an attribute of type UNDEFINED",
    )


def attribute_ref_outside_function(root: Path) -> Case:
    node = helper.make_node("Softmax", ["x"], ["y"], name="softmax_ref")
    attr = node.attribute.add()
    attr.name, attr.ref_attr_name, attr.type = "axis", "outer_axis", onnx.AttributeProto.INT
    m = _model([node], [_vi("x", F, [4])], [_vi("y", F, None)])
    return Case(
        m,
        error="OnnxImportError",
        texts=("softmax_ref", "outer_axis"),
        what="a ref_attr_name attribute outside a function",
    )


def input_undefined(root: Path) -> Case:
    nodes = [
        helper.make_node("Relu", ["later"], ["y"], name="early"),
        helper.make_node("Neg", ["x"], ["later"], name="late"),
    ]
    m = _model(nodes, [_vi("x", F, [4])], [_vi("y", F, [4])])
    return Case(
        m,
        error="OnnxImportError",
        texts=("early", "'later'"),
        what="a node reading a value defined after it",
    )


def hostile_names_ok(root: Path) -> Case:
    nodes = [
        helper.make_node("Relu", ["def"], ["__class__"], name="import os"),
        helper.make_node("Identity", ["__class__"], ["self"], name="1; rm -rf /"),
    ]
    m = _model(nodes, [_vi("def", F, [4])], [_vi("self", F, [4])])
    return Case(m, expected=[1.0] * 4, what="names that are Python keywords and code (legitimate)")


def garbage_bytes(root: Path) -> Case:
    return Case(
        b"\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff" * 10,
        error="OnnxImportError",
        texts=("bytes",),
        what="bytes that are not protobuf",
    )


def empty_bytes(root: Path) -> Case:
    return Case(b"", error="OnnxImportError", texts=("no ONNX graph",), what="empty bytes")


def truncated_file(root: Path) -> Case:
    model_dir, _ = _folders(root)
    data = conv_ok(root).model.SerializeToString()
    path = model_dir / "trunc.onnx"
    path.write_bytes(data[: len(data) // 2])
    return Case(str(path), error="OnnxImportError", texts=("trunc.onnx",), what="a truncated file")


CASES: dict[str, Callable[[Path], Case]] = {
    fn.__name__: fn
    for fn in [
        ext_bytes_no_base_dir,
        ext_proto_no_base_dir,
        ext_proto_base_dir_ok,
        ext_path_ok,
        ext_dotdot,
        ext_absolute,
        ext_backslash_dotdot,
        ext_symlink_escape,
        ext_symlinked_folder,
        ext_base_dir_escape,
        ext_fifo,
        ext_directory,
        ext_missing,
        ext_length_mismatch,
        ext_offset_past_end,
        ext_negative_offset,
        ext_huge_dims,
        ext_in_constant_node,
        ext_in_subgraph,
        function_bomb,
        function_small_ok,
        function_over_raised_limit,
        function_recursive,
        function_mutual,
        function_bomb_in_if,
        constant_of_shape_huge,
        constant_of_shape_negative,
        range_zero_delta,
        range_tiny_delta,
        range_huge_int,
        range_nan,
        concat_doubling,
        tile_huge,
        expand_huge,
        broadcast_outer,
        reshape_huge,
        one_hot_huge,
        resize_huge,
        resize_inf_scales,
        resize_nan_scales,
        resize_zero_scales,
        pad_huge,
        matmul_huge,
        einsum_outer,
        conv_transpose_huge_stride,
        fold_over_raised_limit,
        fold_default_ok,
        maxpool_const_huge_kernel,
        squeeze_bad_axis,
        topk_huge_k,
        gather_out_of_range,
        tensor_raw_too_short,
        tensor_float_data_count,
        tensor_negative_dims,
        tensor_huge_dims_tiny_data,
        tensor_unknown_type,
        tensor_undefined_type,
        tensor_wrong_field,
        tensor_strings,
        tensor_segment,
        tensor_sparse,
        tensor_bad_in_constant,
        tensor_float8,
        initializer_ratio,
        duplicate_output,
        output_shadows_input,
        opset_future,
        opset_zero,
        conv_kernel_shape_mismatch,
        conv_bias_length,
        conv_group_mismatch,
        conv_group_zero,
        conv_channels_mismatch,
        conv_int64_weight,
        conv_weight_rank,
        conv_zero_stride,
        conv_transpose_bias,
        conv_transpose_kernel_shape,
        conv_ok,
        if_branch_output_count,
        if_branch_output_missing,
        if_const_branch_output_missing,
        nested_if_depth,
        nested_if_deep_bytes,
        nested_if_ok,
        loop_body_outputs,
        attribute_wrong_type,
        attribute_string_axis,
        attribute_twice,
        attribute_undefined,
        attribute_ref_outside_function,
        input_undefined,
        hostile_names_ok,
        garbage_bytes,
        empty_bytes,
        truncated_file,
    ]
}
