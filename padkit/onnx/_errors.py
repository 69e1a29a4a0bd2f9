"""Errors raised by the ONNX importer."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

__all__ = ["OnnxImportError", "UnsupportedOnnxError", "UnsupportedOp"]

DEFAULT_DOMAIN = "ai.onnx"


class OnnxImportError(ValueError):
    """A model (or one node of it) is malformed or cannot be converted exactly.

    ``node`` is the label of the node at fault (``"Conv-11 node 'c1' (ai.onnx opset 13)"``)
    when one is, else None; the message starts with it.
    """

    def __init__(self, *args: object, node: str | None = None) -> None:
        super().__init__(*args)
        self.node = node


class UnsupportedOp(NamedTuple):
    """One kind of node the importer cannot convert.

    ``op`` is the op type, qualified as ``"domain::OpType"`` outside the default
    ``ai.onnx`` domain; ``opset`` the version the model imports for ``domain``; ``nodes``
    how many nodes; ``reason`` why (empty for an operator without a converter);
    ``version`` the operator's schema version in force (0 when onnx knows no schema).
    """

    op: str
    opset: int
    nodes: int
    reason: str
    domain: str = DEFAULT_DOMAIN
    version: int = 0

    def describe(self) -> str:
        """One line of the error message."""
        op_type = self.op.split("::")[-1]
        where = f"domain {self.domain}, opset {self.opset}"
        if self.version and self.version != self.opset:
            where += f", schema version {self.version}"
        text = f"{op_type} ({where}) x{self.nodes}"
        return f"{text}: {self.reason}" if self.reason else text


class UnsupportedOnnxError(OnnxImportError, NotImplementedError):
    """A valid model uses operators or attributes the importer does not implement.

    ``unsupported`` lists every offending part as :class:`UnsupportedOp` tuples
    ``(op, opset, nodes, reason, domain, version)``; the message has one line for each.
    """

    def __init__(self, unsupported: Iterable[tuple[str, int, int, str] | UnsupportedOp]) -> None:
        self.unsupported = [
            u if isinstance(u, UnsupportedOp) else UnsupportedOp(*u) for u in unsupported
        ]
        self.node_labels: list[str] = []
        total = sum(u.nodes for u in self.unsupported)
        super().__init__(
            f"the model has {total} node(s) padkit.onnx cannot convert "
            f"({len(self.unsupported)} kind(s)):\n"
            + "\n".join("  " + u.describe() for u in self.unsupported)
        )
