"""Checks that let :func:`padkit.onnx.load` open any file as if it were hostile.

Before a node is converted the whole model is checked here: subgraph nesting, the opset,
every stored tensor against its declared type and dims, the names nodes write, attribute types,
``If`` / ``Loop`` / ``Scan`` bodies against their node, how many nodes inlining the model's
local functions would make, and how many bytes the stored tensors hold against the size of the
file. External data is read here, only from inside one folder. While converting,
:class:`FoldBudget` bounds the bytes of the constants computed at import time.
"""

from __future__ import annotations

import math
import ntpath
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ._errors import OnnxImportError

__all__ = [
    "FOLD_SIZERS",
    "FoldBudget",
    "Limits",
    "check_function_expansion",
    "declared_bytes",
    "read_external_data",
    "validate_model",
]

MiB = 1 << 20

#: defaults of the limits (keywords of padkit.onnx.load)
DEFAULT_MAX_FUNCTION_NODES = 100_000
DEFAULT_MAX_SUBGRAPH_DEPTH = 32
DEFAULT_MAX_INITIALIZER_RATIO = 16.0
#: stored tensors may always hold this much, whatever the file's size
INITIALIZER_FLOOR_BYTES = 16 * MiB
#: folded constants may hold FOLD_FLOOR_BYTES + FOLD_PER_SOURCE_BYTE x the model's size
FOLD_FLOOR_BYTES = 256 * MiB
FOLD_PER_SOURCE_BYTE = 4

_HINT = "pass a larger {name}= to padkit.onnx.load if you trust the model"

# bits per element of each ONNX element type (STRING has none)
_BITS: dict[int, int] = {
    1: 32, 2: 8, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 9: 8, 10: 16, 11: 64, 12: 32, 13: 64,
    14: 64, 15: 128, 16: 16, 17: 8, 18: 8, 19: 8, 20: 8, 21: 4, 22: 4, 23: 4, 24: 8,
    25: 2, 26: 2, 27: 6, 28: 6,
}  # fmt: skip
_STRING = 8
# the typed field each element type keeps its values in, and how many values per element
_FIELDS: dict[int, tuple[str, float]] = {
    1: ("float_data", 1), 14: ("float_data", 2), 7: ("int64_data", 1),
    11: ("double_data", 1), 15: ("double_data", 2), 12: ("uint64_data", 1),
    13: ("uint64_data", 1), 8: ("string_data", 1),
    **{code: ("int32_data", 1) for code in (2, 3, 4, 5, 6, 9, 10, 16, 17, 18, 19, 20, 24)},
    21: ("int32_data", 0.5), 22: ("int32_data", 0.5), 23: ("int32_data", 0.5),
    25: ("int32_data", 0.25), 26: ("int32_data", 0.25),
}  # fmt: skip
_TYPED_FIELDS = ("float_data", "int32_data", "int64_data", "double_data", "uint64_data")


@dataclass(frozen=True)
class Limits:
    """The limits :func:`padkit.onnx.load` imports a model under (see its keywords)."""

    max_function_nodes: int = DEFAULT_MAX_FUNCTION_NODES
    max_folded_bytes: int | None = None
    max_initializer_ratio: float = DEFAULT_MAX_INITIALIZER_RATIO
    max_subgraph_depth: int = DEFAULT_MAX_SUBGRAPH_DEPTH

    def __post_init__(self) -> None:
        for name in ("max_function_nodes", "max_subgraph_depth", "max_folded_bytes"):
            value = getattr(self, name)
            if name == "max_folded_bytes" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        ratio = self.max_initializer_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not ratio > 0:
            raise ValueError(f"max_initializer_ratio must be a positive number, got {ratio!r}")

    def folded_bytes(self, source_bytes: int) -> int:
        """The folded-constant budget for a model of ``source_bytes``."""
        if self.max_folded_bytes is not None:
            return self.max_folded_bytes
        return FOLD_FLOOR_BYTES + FOLD_PER_SOURCE_BYTE * source_bytes


# ----------------------------------------------------------------------------- walking


def _attr_graphs(attr: Any) -> list[Any]:
    graphs = list(attr.graphs)
    if attr.HasField("g"):
        graphs.append(attr.g)
    return graphs


def _domain(name: str) -> str:
    return "ai.onnx" if name in ("", "ai.onnx") else name


def node_label(node: Any, opsets: dict[str, int]) -> str:
    """``"Conv node 'c1' (ai.onnx opset 13)"``: how the checks name a node."""
    domain = _domain(node.domain)
    name = node.name or (node.output[0] if len(node.output) else "") or "?"
    return f"{node.op_type} node {name!r} ({domain} opset {opsets.get(domain, '?')})"


def check_depth(model: Any, limit: int) -> None:
    """Refuse subgraphs nested deeper than ``limit`` (walked without recursion)."""
    opsets = {_domain(e.domain): int(e.version) for e in model.opset_import}
    stack: list[tuple[Any, int, str]] = [(model.graph, 0, "the main graph")]
    for function in model.functions:
        stack.append((function, 0, f"function {function.name!r}"))
    while stack:
        graph, depth, where = stack.pop()
        for node in graph.node:
            for attr in node.attribute:
                for sub in _attr_graphs(attr):
                    if depth + 1 > limit:
                        raise OnnxImportError(
                            f"{node_label(node, opsets)}: attribute "
                            f"{attr.name!r} nests subgraphs more than {limit} deep (in "
                            f"{where}), over max_subgraph_depth={limit}; "
                            + _HINT.format(name="max_subgraph_depth")
                        )
                    stack.append((sub, depth + 1, where))


def iter_graphs(model: Any) -> Iterator[tuple[Any, str, bool]]:
    """Every graph of the model (subgraphs of functions too): (graph, a description,
    whether it belongs to a function body)."""
    stack: list[tuple[Any, str, bool]] = [(model.graph, "the main graph", False)]
    stack += [(f, f"function {f.name!r}", True) for f in model.functions]
    while stack:
        graph, where, in_function = stack.pop()
        yield graph, where, in_function
        for node in graph.node:
            for attr in node.attribute:
                for sub in _attr_graphs(attr):
                    label = node.name or (node.output[0] if len(node.output) else "?")
                    at = f"attribute {attr.name!r} of {node.op_type} node {label!r}"
                    stack.append((sub, at, in_function))


def iter_tensors(model: Any) -> Iterator[tuple[Any, str]]:
    """Every stored ``TensorProto`` of the model, with where it sits."""
    opsets = {_domain(e.domain): int(e.version) for e in model.opset_import}
    for graph, where, _ in iter_graphs(model):
        for init in getattr(graph, "initializer", ()):
            yield init, f"initializer {init.name!r} of {where}"
        for sparse in getattr(graph, "sparse_initializer", ()):
            yield sparse.values, f"sparse initializer {sparse.values.name!r} of {where}"
            yield sparse.indices, f"indices of sparse initializer {sparse.values.name!r}"
        for node in graph.node:
            label = node_label(node, opsets)
            for attr in node.attribute:
                at = f"{label}: attribute {attr.name!r} (in {where})"
                if attr.HasField("t"):
                    yield attr.t, at
                for t in attr.tensors:
                    yield t, at
                if attr.HasField("sparse_tensor"):
                    yield attr.sparse_tensor.values, at
                    yield attr.sparse_tensor.indices, at
                for st in attr.sparse_tensors:
                    yield st.values, at
                    yield st.indices, at


# ----------------------------------------------------------------------------- tensors


def _type_name(code: int) -> str:
    from onnx import TensorProto

    try:
        return str(TensorProto.DataType.Name(code))
    except ValueError:
        return str(code)


def numel_of(tensor: Any, where: str) -> int:
    """The element count the dims of ``tensor`` declare, after checking them."""
    dims = [int(d) for d in tensor.dims]
    bad = [d for d in dims if d < 0]
    if bad:
        raise OnnxImportError(
            f"{where}: dims {dims} hold the negative size {bad[0]}; a stored tensor's dims must "
            "be sizes >= 0"
        )
    return math.prod(dims)


def declared_bytes(tensor: Any, where: str) -> int:
    """The bytes the declared type and dims of ``tensor`` make (strings: their bytes)."""
    code = int(tensor.data_type)
    if code == _STRING:
        return sum(len(s) for s in tensor.string_data)
    return (numel_of(tensor, where) * _BITS.get(code, 64) + 7) // 8


def check_tensor(tensor: Any, where: str) -> None:
    """Refuse a tensor whose data disagrees with its declared element type and dims."""
    from onnx import TensorProto

    code = int(tensor.data_type)
    if code not in _BITS and code != _STRING:
        known = ", ".join(f"{c} ({_type_name(c)})" for c in sorted(_BITS))
        raise OnnxImportError(
            f"{where}: data_type {code} ({_type_name(code)}) is no ONNX element type padkit "
            f"knows; known: {known}, 8 (STRING)"
        )
    n = numel_of(tensor, where)
    if tensor.HasField("segment"):
        raise OnnxImportError(
            f"{where}: a segmented tensor (segment {tensor.segment.begin}..{tensor.segment.end})"
            "; padkit.onnx reads whole tensors only"
        )
    if tensor.data_location == TensorProto.EXTERNAL:
        return  # read_external_data checks the bytes it reads
    shown = f"{_type_name(code)} {list(tensor.dims)} ({n} element(s))"
    if tensor.HasField("raw_data"):
        if code == _STRING:
            raise OnnxImportError(f"{where}: a STRING tensor cannot keep its data in raw_data")
        want = (n * _BITS[code] + 7) // 8
        if len(tensor.raw_data) != want:
            raise OnnxImportError(
                f"{where}: raw_data holds {len(tensor.raw_data)} byte(s), but {shown} needs {want}"
            )
        return
    field, per = _FIELDS.get(code, ("", 0.0))
    used = [f for f in (*_TYPED_FIELDS, "string_data") if len(getattr(tensor, f))]
    wrong = [f for f in used if f != field]
    if wrong:
        raise OnnxImportError(
            f"{where}: {shown} keeps values in {wrong[0]}, which holds no "
            f"{_type_name(code)} values (they go in {field or 'raw_data'})"
        )
    if not field:
        return
    have = len(getattr(tensor, field))
    want = math.ceil(n * per)
    if have != want:
        raise OnnxImportError(f"{where}: {field} holds {have} value(s), but {shown} needs {want}")


# ----------------------------------------------------------------------------- external data


def _entries(tensor: Any, where: str) -> tuple[str, int, int | None]:
    info = {e.key: e.value for e in tensor.external_data}
    location = info.get("location", "")
    if not location:
        raise OnnxImportError(
            f"{where}: data_location is EXTERNAL but external_data names no location "
            f"(keys: {sorted(info)})"
        )
    numbers: list[int | None] = []
    for key in ("offset", "length"):
        text = info.get(key)
        if text is None:
            numbers.append(None)
            continue
        try:
            value = int(text)
        except ValueError:
            raise OnnxImportError(
                f"{where}: external_data {key}={text!r} is not an integer"
            ) from None
        if value < 0:
            raise OnnxImportError(f"{where}: external_data {key}={value} is negative")
        numbers.append(value)
    return location, numbers[0] or 0, numbers[1]


def _inside(base: str, location: str, where: str) -> str:
    """The real path of ``location`` under ``base``, or raise when it leaves ``base``."""
    shown = f"external data location {location!r}"
    if "\x00" in location:
        raise OnnxImportError(f"{where}: {shown} holds a NUL byte")
    if os.path.isabs(location) or ntpath.isabs(location) or ntpath.splitdrive(location)[0]:
        raise OnnxImportError(
            f"{where}: {shown} is an absolute path; external data must be a relative path "
            f"inside the model's folder {base!r}"
        )
    parts = location.replace("\\", "/").split("/")
    if ".." in parts:
        raise OnnxImportError(
            f"{where}: {shown} climbs out with '..'; external data must be a relative path "
            f"inside the model's folder {base!r}"
        )
    real = os.path.realpath(os.path.join(base, location))
    if os.path.commonpath([base, real]) != base:
        raise OnnxImportError(
            f"{where}: {shown} resolves (through a link) to {real!r}, outside the model's "
            f"folder {base!r}; padkit reads external data only from inside it"
        )
    return real


def has_external_data(model: Any) -> bool:
    from onnx import TensorProto

    return any(t.data_location == TensorProto.EXTERNAL for t, _ in iter_tensors(model))


def read_external_data(model: Any, base_dir: str | os.PathLike[str] | None, given: str) -> int:
    """Read every external tensor of ``model`` into its ``raw_data``, from inside
    ``base_dir`` only. Returns the size of the distinct files read (bytes).

    ``given`` says how the model came (``"bytes"``, ``"an onnx.ModelProto"``, a path) for
    the refusal without ``base_dir``.
    """
    from onnx import TensorProto

    external = [(t, w) for t, w in iter_tensors(model) if t.data_location == TensorProto.EXTERNAL]
    if not external:
        return 0
    first = external[0][1]
    if base_dir is None:
        raise OnnxImportError(
            f"{first}: the tensor keeps its data in an external file, and the model was given "
            f"as {given} without base_dir=; pass base_dir=FOLDER (external data is then read "
            "only from inside FOLDER) or load the model by its path"
        )
    base = os.path.realpath(os.fspath(base_dir))
    if not os.path.isdir(base):
        raise OnnxImportError(f"base_dir {os.fspath(base_dir)!r} is not a folder")
    sizes: dict[str, int] = {}
    for tensor, where in external:
        location, offset, length = _entries(tensor, where)
        path = _inside(base, location, where)
        try:
            info = os.stat(path)
        except OSError as err:
            raise OnnxImportError(
                f"{where}: external data file {location!r} cannot be read in {base!r}: "
                f"{err.strerror}"
            ) from None
        if not stat.S_ISREG(info.st_mode):
            raise OnnxImportError(f"{where}: external data {location!r} is not a regular file")
        code = int(tensor.data_type)
        if code not in _BITS:
            check_tensor(tensor, where)  # names the type
            raise OnnxImportError(f"{where}: a {_type_name(code)} tensor cannot be external")
        want = (numel_of(tensor, where) * _BITS[code] + 7) // 8
        size = info.st_size
        if length is None:
            length = max(size - offset, 0)
        if length != want:
            raise OnnxImportError(
                f"{where}: external_data length {length} disagrees with {_type_name(code)} "
                f"{list(tensor.dims)}, which needs {want} byte(s)"
            )
        if offset + length > size:
            raise OnnxImportError(
                f"{where}: external data {location!r} holds {size} byte(s), fewer than "
                f"offset {offset} + length {length}"
            )
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(length)
        if len(data) != length:
            raise OnnxImportError(f"{where}: external data {location!r} ended early")
        sizes[path] = size
        tensor.raw_data = data
        del tensor.external_data[:]
        tensor.data_location = TensorProto.DEFAULT
    return sum(sizes.values())


# ----------------------------------------------------------------------------- the model


def check_opsets(model: Any) -> None:
    """Refuse an ``ai.onnx`` opset newer than the installed onnx defines, or below 1."""
    import onnx

    newest = int(onnx.defs.onnx_opset_version())
    for entry in model.opset_import:
        domain, version = _domain(entry.domain), int(entry.version)
        if version < 1:
            raise OnnxImportError(
                f"opset_import: domain {domain} version {version}; versions start at 1"
            )
        if domain == "ai.onnx" and version > newest:
            raise OnnxImportError(
                f"opset_import: the model imports ai.onnx opset {version}, newer than the "
                f"newest this importer knows (ai.onnx opsets 1..{newest}, from onnx "
                f"{onnx.__version__})"
            )


def _schema(op_type: str, opset: int) -> Any:
    import onnx

    try:
        return onnx.defs.get_schema(op_type, opset, "")
    except Exception:  # SchemaError: an operator onnx does not know at that opset
        return None


def _attr_type_name(code: int) -> str:
    from onnx import AttributeProto

    try:
        return str(AttributeProto.AttributeType.Name(code))
    except ValueError:
        return str(code)


def _check_node(node: Any, opsets: dict[str, int], in_function: bool) -> None:
    from onnx import AttributeProto

    label = node_label(node, opsets)
    seen: set[str] = set()
    for attr in node.attribute:
        if attr.name in seen:
            raise OnnxImportError(f"{label}: attribute {attr.name!r} is given twice")
        seen.add(attr.name)
        if attr.ref_attr_name and not in_function:
            raise OnnxImportError(
                f"{label}: attribute {attr.name!r} refers to {attr.ref_attr_name!r}, which only "
                "a function body may do"
            )
        if attr.type == AttributeProto.UNDEFINED and not attr.ref_attr_name:
            raise OnnxImportError(f"{label}: attribute {attr.name!r} has no type (UNDEFINED)")
    domain = _domain(node.domain)
    if domain != "ai.onnx" or in_function:
        return
    schema = _schema(node.op_type, opsets.get(domain, 0))
    if schema is None:
        return  # _check_supported names it
    for attr in node.attribute:
        declared = schema.attributes.get(attr.name)
        if declared is None or attr.ref_attr_name:
            continue
        want = int(declared.type.value)
        if int(attr.type) != want:
            raise OnnxImportError(
                f"{label}: attribute {attr.name!r} is of type {_attr_type_name(attr.type)}, "
                f"but {node.op_type} takes {_attr_type_name(want)}"
            )
    _check_bodies(node, label)


def _branch(node: Any, name: str) -> Any:
    for attr in node.attribute:
        if attr.name == name and attr.HasField("g"):
            return attr.g
    return None


def _check_bodies(node: Any, label: str) -> None:
    """``If`` branches, ``Loop`` and ``Scan`` bodies must fit their node's outputs."""
    n_out = len(node.output)
    wanted: list[tuple[str, int]] = []
    if node.op_type == "If":
        wanted = [("then_branch", n_out), ("else_branch", n_out)]
    elif node.op_type == "Loop":
        wanted = [("body", 1 + n_out)]
    elif node.op_type == "Scan":
        wanted = [("body", n_out)]
    for name, count in wanted:
        body = _branch(node, name)
        if body is None:
            raise OnnxImportError(f"{label}: attribute {name!r} (a graph) is missing")
        if len(body.output) != count:
            raise OnnxImportError(
                f"{label}: attribute {name!r} has {len(body.output)} output(s), but the node "
                f"needs {count} (it declares {n_out} output(s))"
            )


def _check_names(graph: Any, where: str, opsets: dict[str, int]) -> None:
    """Each value is written once: no two nodes (nor a node and an input) share an output."""
    writers: dict[str, str] = {}
    for inp in graph.input:
        writers.setdefault(inp.name, f"graph input {inp.name!r}")
    for init in getattr(graph, "initializer", ()):
        writers.setdefault(init.name, f"initializer {init.name!r}")
    for node in graph.node:
        label = node_label(node, opsets)
        mine: set[str] = set()
        for i, name in enumerate(node.output):
            if not name:
                continue
            if name in mine:
                raise OnnxImportError(f"{label}: output {i} ({name!r}) is named twice")
            mine.add(name)
            if name in writers:
                raise OnnxImportError(
                    f"{label}: output {i} ({name!r}) is also written by {writers[name]} (in "
                    f"{where}); each value must be written once"
                )
            writers[name] = label


def validate_model(model: Any, limits: Limits, source_bytes: int) -> None:
    """Every check that needs no conversion; raises :class:`OnnxImportError`."""
    check_opsets(model)
    opsets = {_domain(e.domain): int(e.version) for e in model.opset_import}
    total = 0
    for tensor, where in iter_tensors(model):
        check_tensor(tensor, where)
        total += declared_bytes(tensor, where)
    allowed = limits.max_initializer_ratio * source_bytes + INITIALIZER_FLOOR_BYTES
    if total > allowed:
        raise OnnxImportError(
            f"the model's stored tensors declare {total} bytes, more than "
            f"max_initializer_ratio={limits.max_initializer_ratio:g} x its {source_bytes} "
            f"byte(s) (+ {INITIALIZER_FLOOR_BYTES} bytes); "
            + _HINT.format(name="max_initializer_ratio")
        )
    for graph, where, in_function in iter_graphs(model):
        if not in_function:
            _check_names(graph, where, opsets)
        for node in graph.node:
            _check_node(node, opsets, in_function)


def check_function_expansion(model: Any, limit: int) -> None:
    """Refuse model-local functions that call themselves, or that would inline to more than
    ``limit`` nodes, before the inliner sees them (counted without expanding anything)."""
    functions = {
        (_domain(f.domain), f.name, getattr(f, "overload", "")): f for f in model.functions
    }
    if not functions:
        return
    by_name = {key[:2]: key for key in functions}  # for calls that name no overload

    def callee(node: Any) -> tuple[str, str, str] | None:
        key = (_domain(node.domain), node.op_type, getattr(node, "overload", ""))
        if key in functions:
            return key
        return by_name.get(key[:2])

    def nodes_of(graph: Any) -> Iterator[Any]:
        stack = [graph]
        while stack:
            g = stack.pop()
            for node in g.node:
                yield node
                for attr in node.attribute:
                    stack.extend(_attr_graphs(attr))

    cost: dict[tuple[str, str, str], int] = {}
    state: dict[tuple[str, str, str], int] = {}  # 1: in progress, 2: done
    for root in functions:
        stack: list[tuple[tuple[str, str, str], bool]] = [(root, False)]
        while stack:
            key, ready = stack.pop()
            if ready:
                total = 0
                for node in nodes_of(functions[key]):
                    called = callee(node)
                    total += cost[called] if called is not None else 1
                    total = min(total, limit + 1)
                cost[key], state[key] = total, 2
                continue
            if state.get(key) == 2:
                continue
            state[key] = 1
            stack.append((key, True))
            for node in nodes_of(functions[key]):
                called = callee(node)
                if called is None:
                    continue
                if state.get(called) == 1:
                    raise OnnxImportError(
                        f"function {key[1]!r} (domain {key[0]}) calls {called[1]!r}, which "
                        f"calls {key[1]!r} again: model-local functions must not recurse"
                    )
                if state.get(called) != 2:
                    stack.append((called, False))
    total = 0
    worst: tuple[int, Any] = (0, None)
    for node in nodes_of(model.graph):
        called = callee(node)
        size = cost[called] if called is not None else 1
        total += size
        if called is not None and size > worst[0]:
            worst = (size, node)
    if total > limit:
        detail = ""
        if worst[1] is not None:
            opsets = {_domain(e.domain): int(e.version) for e in model.opset_import}
            shown = f"more than {limit}" if worst[0] > limit else str(worst[0])
            detail = (
                f"; {node_label(worst[1], opsets)}, a call of a model-local function, alone "
                f"expands to {shown} node(s)"
            )
        raise OnnxImportError(
            f"inlining the model's local functions would make more than {limit} nodes, over "
            f"max_function_nodes={limit}{detail}; " + _HINT.format(name="max_function_nodes")
        )


# ----------------------------------------------------------------------------- folding


#: run-time function -> (args, kwargs) -> the element count of its result, where its
#: inputs' values decide it (checked before the call folds)
FOLD_SIZERS: dict[Any, Callable[..., int | None]] = {}


def fold_sizer(fn: Any) -> Callable[[Callable[..., int | None]], Callable[..., int | None]]:
    """Register the element count of ``fn``'s result, read from its arguments."""

    def wrap(sizer: Callable[..., int | None]) -> Callable[..., int | None]:
        FOLD_SIZERS[fn] = sizer
        return sizer

    return wrap


class FoldBudget:
    """The bytes of constants computed at import time, against ``max_folded_bytes``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def _refuse(self, nbytes: int, what: str) -> OnnxImportError:
        return OnnxImportError(
            f"folding it at import time would hold {nbytes} bytes ({what}), over "
            f"max_folded_bytes={self.limit} ({self.used} bytes folded so far); "
            + _HINT.format(name="max_folded_bytes")
        )

    def precheck(self, numel: int, itemsize: int, what: str) -> None:
        """Refuse a result of ``numel`` elements before it is allocated."""
        if numel < 0:
            raise OnnxImportError(f"{what}: a negative size ({numel} elements)")
        nbytes = numel * max(itemsize, 1)
        if self.used + nbytes > self.limit:
            raise self._refuse(nbytes, what)

    def add(self, nbytes: int, what: str) -> None:
        """Count ``nbytes`` newly held by folded constants."""
        if self.used + nbytes > self.limit:
            raise self._refuse(nbytes, what)
        self.used += nbytes
