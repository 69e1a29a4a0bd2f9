"""padkit.onnx.load on hostile and malformed files (built in tests/hostile_onnx.py).

Every case runs in one child process, after the cases are written, under an address-space
limit (RLIMIT_AS: what the child holds after its imports + 3 GiB) and a wall limit, with an
audit hook recording each file it opens and its working directory set to the folder of the
canary file. A crash or hang of one case fails that case (and names it), not the session.
Each case must import (and give the expected output), or raise the padkit error named, whose
message names the node (and its opset) or the tensor at fault; no case may open a file
outside the model's folder, nor take long.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("onnx")

from hostile_onnx import CANARY_VALUE, CASES

ROOT = Path(__file__).resolve().parent.parent
CASE_SECONDS = 20.0  # generous: every case takes well under a second
CHILD_SECONDS = 240

CHILD = r"""
import json, os, resource, sys, time
from pathlib import Path
import numpy as np
import torch
import onnx
import padkit.onnx
from padkit.onnx import OnnxImportError, UnsupportedOnnxError
from hostile_onnx import CASES

root = Path(sys.argv[1])
names = sys.argv[2:]
built = {name: CASES[name](root) for name in names}
padkit.onnx.load(built["conv_ok"].model)  # converters and lazy imports loaded up front

def vm_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0

limit = vm_bytes() + (3 << 30)
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
opened = []
def hook(event, args):
    if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        opened.append(os.path.abspath(os.fsdecode(args[0])))
sys.addaudithook(hook)
os.chdir(root / "outside")  # the canary sits in the working directory

def ones(model):
    if not isinstance(model, onnx.ModelProto):
        return None
    inits = {t.name for t in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims = [d.dim_value for d in tt.shape.dim]
        dtype = torch.bool if tt.elem_type == onnx.TensorProto.BOOL else torch.float32
        out.append(torch.ones(dims, dtype=dtype))
    return out

for name in names:
    case = built[name]
    opened.clear()
    start = time.perf_counter()
    result = {"name": name}
    try:
        module = padkit.onnx.load(case.model, **case.kwargs)
        result["outcome"] = "ok"
        inputs = ones(case.model) if not isinstance(case.model, str) else [torch.ones(4)]
        if case.expected is not None and inputs is not None:
            out = module(*inputs)
            result["output"] = out.reshape(-1).tolist()
    except (OnnxImportError, UnsupportedOnnxError) as err:
        result["outcome"] = type(err).__name__
        result["message"] = str(err)
    except BaseException as err:
        result["outcome"] = "raw " + type(err).__name__
        result["message"] = str(err)[:500]
    result["seconds"] = time.perf_counter() - start
    result["opened"] = sorted(set(p for p in opened if p.startswith(str(root))))
    print("RESULT " + json.dumps(result), flush=True)
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    root = tmp_path_factory.mktemp("hostile")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    env.setdefault("OMP_NUM_THREADS", "1")
    try:
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, str(root), *CASES],
            capture_output=True,
            text=True,
            timeout=CHILD_SECONDS,
            env=env,
            cwd=str(root),
        )
        stdout, stderr, status = proc.stdout, proc.stderr, f"exit {proc.returncode}"
    except subprocess.TimeoutExpired as err:  # a hang: the cases before it still count
        stdout = err.stdout.decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
        stderr, status = "", f"killed after {CHILD_SECONDS} s"
    found = {}
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            entry = json.loads(line[len("RESULT ") :])
            found[entry["name"]] = entry
    if len(found) < len(CASES):  # the child died or hung: blame the first case without a result
        dead = next(name for name in CASES if name not in found)
        found[dead] = {
            "name": dead,
            "outcome": f"child process died or hung ({status})",
            "message": stderr[-2000:],
        }
    found["__root__"] = {"path": str(root)}
    return found


@pytest.mark.parametrize("name", list(CASES))
def test_hostile_case(name: str, results: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    if name not in results:
        pytest.fail("an earlier case killed or hung the child process")
    got = results[name]
    case = CASES[name](tmp_path)  # the expectations (the child wrote its own copy)
    message = got.get("message", "")
    if case.error is None:
        assert got["outcome"] == "ok", message
        if case.expected is not None and "output" in got:
            assert got["output"] == pytest.approx(case.expected)
    else:
        assert got["outcome"] == case.error, message
        for text in case.texts:
            assert text in message, f"{text!r} not in {message!r}"
    assert got["seconds"] < CASE_SECONDS
    outside = str(Path(results["__root__"]["path"]) / "outside")
    assert not [p for p in got["opened"] if p.startswith(outside)], got["opened"]
    assert str(CANARY_VALUE) not in json.dumps(got.get("output", []))


def test_node_errors_name_the_opset(results: dict[str, dict[str, Any]]) -> None:
    """Errors raised while converting a node label it with op type, name and opset."""
    for name in (
        "constant_of_shape_huge",
        "range_zero_delta",
        "conv_bias_length",
        "squeeze_bad_axis",
    ):
        message = results[name]["message"]
        assert "(ai.onnx opset 17)" in message, message


def test_limits_are_checked() -> None:
    import padkit.onnx

    with pytest.raises(ValueError, match="max_folded_bytes must be a positive int"):
        padkit.onnx.load(b"", max_folded_bytes=0)
    with pytest.raises(ValueError, match="max_initializer_ratio"):
        padkit.onnx.load(b"", max_initializer_ratio=float("nan"))
    with pytest.raises(TypeError, match="base_dir applies to a model given as bytes"):
        padkit.onnx.load("model.onnx", base_dir=".")
