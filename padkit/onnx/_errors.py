"""Errors raised by the ONNX importer."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["OnnxImportError", "UnsupportedOnnxError"]


class OnnxImportError(ValueError):
    """A model (or one node of it) is malformed or cannot be converted exactly."""


class UnsupportedOnnxError(OnnxImportError, NotImplementedError):
    """A valid model uses operators or attributes the importer does not implement.

    ``unsupported`` lists every offending part as ``(op, opset, count, reason)``:
    ``op`` is ``"domain::OpType"`` for non-default domains, ``opset`` the version of the
    operator's schema in force, ``count`` how many nodes use it and ``reason`` why (an
    empty string for an operator without a converter).
    """

    def __init__(self, unsupported: Sequence[tuple[str, int, int, str]]) -> None:
        self.unsupported = list(unsupported)
        self.node_labels: list[str] = []
        lines = []
        for op, opset, count, reason in self.unsupported:
            what = f"{op} (opset {opset}) x{count}"
            lines.append(f"  {what}: {reason}" if reason else f"  {what}")
        total = sum(count for _, _, count, _ in self.unsupported)
        super().__init__(
            f"the model has {total} node(s) padkit.onnx cannot convert "
            f"({len(self.unsupported)} kind(s)):\n" + "\n".join(lines)
        )
