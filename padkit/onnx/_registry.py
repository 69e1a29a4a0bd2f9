"""The converter registry: ONNX op type -> function that emits torch code for one node.

A converter is registered for the ``ai.onnx`` operator versions it understands
(``since`` = the first schema version it handles). At load time the importer asks
``onnx.defs`` which schema version is in force for the model's opset and picks the
converter registered for the newest ``since`` not above it; the converter still sees
that exact version as ``ctx.version`` to read version-dependent attributes and inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from ._graph import NodeContext, Value

__all__ = [
    "CONVERTERS",
    "Converter",
    "find_converter",
    "first_version",
    "load_converters",
    "register",
    "supported_ops",
]

Converter = Callable[["NodeContext"], "list[Value | None]"]
F = TypeVar("F", bound=Converter)

#: op type -> list of (since version, converter), sorted by version.
CONVERTERS: dict[str, list[tuple[int, Converter]]] = {}


def register(*op_types: str, since: int = 1) -> Callable[[F], F]:
    """Register a converter for ``op_types`` from schema version ``since`` on.

    Raises:
        ValueError: a converter is registered for one of ``op_types`` at ``since`` already
            (two converters for the same schema versions would silently shadow each other).
    """

    def wrap(fn: F) -> F:
        for op in op_types:
            entries = CONVERTERS.setdefault(op, [])
            clash = [other for v, other in entries if v == since]
            if clash:
                raise ValueError(
                    f"a converter for {op} from schema version {since} is registered already "
                    f"({clash[0].__module__}.{clash[0].__qualname__}); register the new one "
                    "with another since= or remove the old one"
                )
            entries.append((since, fn))
            entries.sort(key=lambda e: e[0])
        return fn

    return wrap


def find_converter(op_type: str, version: int) -> Converter | None:
    """The converter for ``op_type`` at schema version ``version``, or None."""
    best = None
    for since, fn in CONVERTERS.get(op_type, []):
        if since <= version:
            best = fn
    return best


def first_version(op_type: str) -> int | None:
    """The oldest schema version of ``op_type`` a converter handles, or None."""
    entries = CONVERTERS.get(op_type)
    return entries[0][0] if entries else None


def supported_ops() -> tuple[str, ...]:
    """The ``ai.onnx`` op types the importer converts, sorted.

    Example:
        >>> "Conv" in supported_ops() and "Pad" in supported_ops()
        True
    """
    load_converters()
    return tuple(sorted(CONVERTERS))


def load_converters() -> None:
    """Import every converter module (registration is their import side effect)."""
    from . import _ops_control, _ops_index, _ops_math, _ops_nn, _ops_tensor, _sizers  # noqa: F401


def op_table_markdown() -> str:
    """The Markdown table of converted operators and schema versions (docs/onnx-import.md).

    Example:
        >>> op_table_markdown().splitlines()[0]
        '| Operator | Schema versions | Converters from |'
    """
    load_converters()
    lines = ["| Operator | Schema versions | Converters from |", "|---|---|---|"]
    for op in sorted(CONVERTERS, key=str.lower):
        versions = [v for v, _ in CONVERTERS[op]]
        lines.append(f"| `{op}` | {versions[0]}+ | {', '.join(str(v) for v in versions)} |")
    return "\n".join(lines) + "\n"
