"""docs/onnx-import.md lists exactly the operators the converter registry holds."""

from __future__ import annotations

import os
import subprocess
import sys

from padkit.onnx import supported_ops
from padkit.onnx._registry import op_table_markdown

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "onnx-import.md")


def test_op_table_is_current() -> None:
    with open(DOC, encoding="utf-8") as fh:
        text = fh.read()
    start = text.index("<!-- op-table:start")
    body = text[text.index("\n", start) + 1 : text.index("<!-- op-table:end -->")]
    assert body == op_table_markdown(), "run: python scripts/onnx_op_table.py"
    listed = {line.split("`")[1] for line in body.splitlines() if line.startswith("| `")}
    assert listed == set(supported_ops())


def test_generator_check_mode_agrees() -> None:
    script = os.path.join(ROOT, "scripts", "onnx_op_table.py")
    out = subprocess.run(
        [sys.executable, script, "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
