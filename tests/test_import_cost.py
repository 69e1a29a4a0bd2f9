"""What ``import padkit`` and ``import padkit.nn`` load beyond ``import torch``.

torch's compiler (``torch._dynamo``, ~0.7 s), sympy and ``symbolic_shapes`` (~0.3 s),
ONNX and anything of ``torch.ao`` that ``import torch`` does not load itself come in only
when used. Each check runs in a fresh interpreter (``sys.modules`` of this one holds
whatever earlier tests imported). ``bench/import_cost.py`` measures the time and memory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from padkit import _compiled, _sym

ROOT = Path(__file__).resolve().parents[1]

#: module name prefixes padkit must not import on its own (each also matches its submodules)
HEAVY = ("torch._dynamo", "torch._inductor", "sympy", "torch.fx.experimental.symbolic_shapes")
HEAVY += ("torch.ao", "torch.onnx", "onnx", "onnxruntime", "torch.export", "triton")


def _fresh(code: str) -> Any:
    """Run ``code`` in a fresh interpreter with this checkout's padkit; it prints JSON."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PADKIT_NATIVE": "0"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def _heavy(names: list[str]) -> list[str]:
    return sorted(m for m in names if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_import_padkit_loads_no_torch() -> None:
    new = _fresh("import sys, json\nimport padkit\nprint(json.dumps(sorted(sys.modules)))")
    assert [m for m in new if m == "torch" or m.startswith("torch.")] == []


@pytest.mark.parametrize("module", ["padkit", "padkit.nn", "padkit.functional"])
def test_import_adds_nothing_heavy_to_torch(module: str) -> None:
    code = (
        "import sys, json, importlib\n"
        "import torch\n"
        "before = set(sys.modules)\n"
        f"importlib.import_module({module!r})\n"
        "print(json.dumps(sorted(set(sys.modules) - before)))"
    )
    new = _fresh(code)
    assert _heavy(new) == []
    assert [m for m in new if not m.startswith("padkit")] == []


def test_layers_compile_when_imported_before_dynamo() -> None:
    # padkit's planners are marked for dynamo before dynamo is loaded (padkit._compiled)
    code = (
        "import sys, json, torch\n"
        "import padkit.nn as pnn, padkit._compiled as pc\n"
        "assert 'torch._dynamo' not in sys.modules\n"
        "torch.manual_seed(0)\n"
        "conv = pnn.Conv2d(3, 4, 3, stride=2, padding='same')\n"
        "x = torch.randn(1, 3, 9, 10)\n"
        "got = torch.compile(conv, fullgraph=True, backend='eager')(x)\n"
        "marked = pc.conv_plan._dynamo_marked_constant\n"
        "print(json.dumps([float((got - conv(x)).abs().max()), marked]))"
    )
    diff, marked = _fresh(code)
    assert diff == 0.0 and marked is True


def test_planners_are_marked_as_dynamo_marks_them() -> None:
    # _compiled._mark_constant stands in for torch.compiler.assume_constant_result until
    # dynamo is loaded: both must leave a function in the same state
    def ours() -> None: ...

    def theirs() -> None: ...

    assert _compiled._mark_constant(ours) is ours
    assert torch.compiler.assume_constant_result(theirs) is theirs  # type: ignore[no-untyped-call]
    assert vars(ours) == vars(theirs) == {"_dynamo_marked_constant": True}
    for planner in (_compiled.conv_plan, _compiled.conv_transpose_plan, _compiled.pool_plan):
        assert vars(planner).get("_dynamo_marked_constant") is True


def test_lazy_symbolic_tests_answer_as_torchs() -> None:
    from torch.fx.experimental import symbolic_shapes as sym

    for b in (True, False):
        assert _sym.statically_known_true(b) is sym.statically_known_true(b) is b
    for v in (True, 0, 3, -1, 2.5):
        assert _sym.has_static_value(v) is sym.has_static_value(v) is True
    with pytest.raises(AssertionError):  # torch's own answer for what is neither
        _sym.statically_known_true(1)
