"""Build a ``torch.fx.GraphModule`` from an ONNX graph, node by node.

Every ONNX value becomes either a :class:`Const` (a tensor known at import time:
initializers, ``Constant`` nodes, and anything computed only from those, which is
folded eagerly) or an ``fx.Node`` (a value that depends on the graph inputs).
"""

from __future__ import annotations

import functools
import keyword
import math
import operator
import os
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeAlias

import torch
from torch import fx, nn

from ._errors import DEFAULT_DOMAIN, OnnxImportError, UnsupportedOnnxError, UnsupportedOp
from ._expand import expand_function_ops
from ._guard import (
    FOLD_SIZERS,
    FoldBudget,
    Limits,
    check_depth,
    check_function_expansion,
    check_tensor,
    has_external_data,
    read_external_data,
    validate_model,
)
from ._registry import find_converter, first_version, load_converters

__all__ = ["Const", "NodeContext", "OnnxGraphModule", "OnnxInput", "Value", "load"]


@dataclass(frozen=True, eq=False)
class Const:
    """A value known at import time."""

    tensor: torch.Tensor


Value: TypeAlias = Const | fx.Node

# ONNX TensorProto element types -> torch dtypes
ONNX_DTYPES: dict[int, torch.dtype] = {
    1: torch.float32,
    2: torch.uint8,
    3: torch.int8,
    4: torch.uint16,
    5: torch.int16,
    6: torch.int32,
    7: torch.int64,
    9: torch.bool,
    10: torch.float16,
    11: torch.float64,
    12: torch.uint32,
    13: torch.uint64,
    16: torch.bfloat16,
}
_DEFAULT_DOMAINS = ("", "ai.onnx")
_INFER_MAX_ELEMENTS = 4096


def onnx_dtype(code: int, what: str) -> torch.dtype:
    """The torch dtype of an ONNX element type, or raise."""
    if code not in ONNX_DTYPES:
        raise OnnxImportError(f"{what}: ONNX element type {code} has no torch dtype")
    return ONNX_DTYPES[code]


def tensor_from_proto(proto: Any) -> torch.Tensor:
    """A torch tensor (a copy) from an ONNX ``TensorProto``.

    Raises:
        OnnxImportError: strings, an element type torch cannot hold, or data that
            disagrees with the declared type and dims.
    """
    from onnx import TensorProto, numpy_helper

    code = int(proto.data_type)
    if code == TensorProto.STRING:
        raise OnnxImportError(f"tensor {proto.name!r} holds strings, which torch cannot represent")
    if code not in ONNX_DTYPES:
        name = TensorProto.DataType.Name(code) if code in TensorProto.DataType.values() else code
        raise OnnxImportError(
            f"tensor {proto.name!r} is of element type {name}, which torch cannot hold exactly "
            f"(padkit reads {', '.join(TensorProto.DataType.Name(c) for c in ONNX_DTYPES)})"
        )
    check_tensor(proto, f"tensor {proto.name!r}")
    if proto.data_location == TensorProto.EXTERNAL:
        raise OnnxImportError(
            f"tensor {proto.name!r} keeps its data in an external file that was not read"
        )
    try:
        array = numpy_helper.to_array(proto)
    except (ValueError, TypeError) as err:
        raise OnnxImportError(f"tensor {proto.name!r} cannot be decoded: {err}") from None
    if proto.data_type == 16:  # bfloat16 arrives as a numpy-incompatible dtype
        return torch.tensor(array.astype("float32")).to(torch.bfloat16)
    return torch.from_numpy(array.copy())


class _Poisoned:
    """The output of a node that failed to convert (its consumers are skipped)."""


_POISON = _Poisoned()


class NodeContext:
    """What a converter sees of one ONNX node, and how it emits torch code.

    ``inputs`` holds a :data:`Value` per ONNX input (None for an omitted optional input).
    ``call`` and ``module`` emit a call, or run it at once when every value argument is a
    :class:`Const` (constant folding).
    """

    def __init__(
        self, builder: GraphBuilder, node: Any, version: int, inputs: list[Any], opset: int = 0
    ):
        self.builder = builder
        self.node = node
        self.op_type: str = node.op_type
        self.version = version
        self.opset = opset or version
        self.converting: Any = None  # the Converting run (for subgraphs)
        self.inputs: list[Value | None] = inputs
        self.attrs: dict[str, Any] = {}
        from onnx import helper

        for attr in node.attribute:
            value = helper.get_attribute_value(attr)
            if isinstance(value, bytes):
                value = value.decode()
            self.attrs[attr.name] = value

    # ---------------------------------------------------------------- inputs and attrs

    @property
    def name(self) -> str:
        """A readable name for error messages: op type, schema version, name and opset."""
        return _label(self.node, self.version, self.opset)

    @property
    def n_outputs(self) -> int:
        """How many outputs the node declares (trailing empty names excluded)."""
        outs = list(self.node.output)
        while outs and not outs[-1]:
            outs.pop()
        return len(outs)

    def output_used(self, i: int) -> bool:
        """Whether output ``i`` is declared with a non-empty name."""
        return i < len(self.node.output) and bool(self.node.output[i])

    def input(self, i: int) -> Value | None:
        """Input ``i``, or None when it is omitted."""
        return self.inputs[i] if i < len(self.inputs) else None

    def required(self, i: int) -> Value:
        """Input ``i``, which must be present."""
        value = self.input(i)
        if value is None:
            raise OnnxImportError(f"{self.name}: input {i} is required but missing")
        return value

    def const(self, i: int, what: str) -> torch.Tensor | None:
        """Input ``i`` as a tensor known at import time (None when omitted), or raise."""
        value = self.input(i)
        if value is None:
            return None
        if not isinstance(value, Const):
            raise self.unsupported(
                f"input {i} ({what}) must be a constant (an initializer, a Constant node or "
                "computed from those), got a value that depends on the graph inputs"
            )
        return value.tensor

    def attr(self, name: str, default: Any = None) -> Any:
        """Attribute ``name`` (decoded), or ``default``."""
        return self.attrs.get(name, default)

    def ints(self, name: str, default: Sequence[int] | None = None) -> list[int] | None:
        """An ``ints`` attribute as a list (``default`` when absent)."""
        value = self.attrs.get(name)
        if value is None:
            return None if default is None else list(default)
        return [int(v) for v in value]

    def unsupported(self, reason: str) -> UnsupportedOnnxError:
        """An error saying this node uses something the importer does not implement."""
        err = UnsupportedOnnxError(
            [UnsupportedOp(self.op_type, self.opset, 1, reason, DEFAULT_DOMAIN, self.version)]
        )
        err.node_labels = [self.node.name or (self.node.output[0] if self.node.output else "?")]
        return err

    def error(self, message: str) -> OnnxImportError:
        """An error for a malformed node."""
        return OnnxImportError(f"{self.name}: {message}")

    def static_shape(self, value: Value | None) -> tuple[int | None, ...] | None:
        """The shape of ``value`` where known at import time (dims may be None)."""
        if value is None:
            return None
        if isinstance(value, Const):
            return tuple(int(v) for v in value.tensor.shape)
        return self.builder.shapes.get(value)

    def static_rank(self, value: Value | None) -> int | None:
        """The rank of ``value`` where known at import time."""
        shape = self.static_shape(value)
        return None if shape is None else len(shape)

    # ---------------------------------------------------------------- emitting

    def call(self, fn: Callable[..., Any], *args: Any, n_out: int = 0, **kwargs: Any) -> Any:
        """Emit ``fn(*args, **kwargs)`` (folded when every value argument is constant).

        With ``n_out`` > 0 the call returns a tuple and this returns a list of values.
        """
        return self.builder.emit("call_function", fn, args, kwargs, n_out)

    def module(self, mod: nn.Module, *args: Any, n_out: int = 0, fold: bool = True) -> Any:
        """Emit a call of submodule ``mod`` (folded when every argument is constant)."""
        return self.builder.emit_module(mod, self.op_type, self.node.name, args, n_out, fold)


def _label(node: Any, version: int, opset: int) -> str:
    """``"Conv-11 node 'c1' (ai.onnx opset 13)"``."""
    label = node.name or (node.output[0] if len(node.output) else "") or "?"
    return f"{node.op_type}-{version} node {label!r} (ai.onnx opset {opset})"


def _describe(value: Any) -> str:
    if value is None:
        return "omitted"
    if isinstance(value, Const):
        t = value.tensor
        text = f"constant {str(t.dtype).replace('torch.', '')}{list(t.shape)}"
        if t.numel() <= 8:
            text += f" = {t.reshape(-1).tolist()}"
        return text
    if isinstance(value, _Poisoned):
        return "unconverted"
    return "run-time value"


def _tensors(obj: Any) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors(o)]
    return []


def _meta_numel(target: Any, args: Any, kwargs: dict[str, Any]) -> int | None:
    """The elements of ``target(*args, **kwargs)`` found on the meta device (no data), or
    None where the call reads its inputs' values or fails there."""

    def meta(obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            return obj.to("meta")
        if isinstance(obj, (list, tuple)):
            return type(obj)(meta(o) for o in obj)
        if isinstance(obj, dict):
            return {k: meta(v) for k, v in obj.items()}
        return obj

    try:
        with torch.no_grad():
            if isinstance(target, nn.Module):
                state = {k: meta(v) for k, v in target.state_dict(keep_vars=True).items()}
                result = torch.func.functional_call(target, state, meta(tuple(args)))
            else:
                result = target(*meta(args), **meta(kwargs))
    except Exception:  # reads values (.tolist(), int()) or has no meta kernel
        return None
    return sum(t.numel() for t in _tensors(result))


def _broadcast(shapes: list[tuple[int, ...]]) -> list[int] | None:
    """The numpy broadcast of ``shapes``, or None when they do not broadcast."""
    rank = max(len(s) for s in shapes)
    out = [1] * rank
    for shape in shapes:
        for i, d in enumerate(shape, start=rank - len(shape)):
            if d != 1:
                if out[i] not in (1, d):
                    return None
                out[i] = d
    return out


class GraphBuilder:
    """Owns the fx graph, the root module and the ONNX name -> value table.

    ``budget`` bounds the bytes of the constants it folds (unbounded when None).
    """

    def __init__(self, budget: FoldBudget | None = None) -> None:
        self.budget = budget
        self.graph = fx.Graph()
        self.root = nn.Module()
        self.values: dict[str, Any] = {}
        self.shapes: dict[fx.Node, tuple[int | None, ...]] = {}
        self._const_nodes: dict[int, fx.Node] = {}
        self._const_keep: list[torch.Tensor] = []
        self._names: set[str] = set()

    def attr_name(self, hint: str) -> str:
        """A fresh attribute name on the root module, derived from ``hint``."""
        base = re.sub(r"\W", "_", hint).strip("_") or "node"
        if base[0].isdigit():
            base = "n_" + base
        if keyword.iskeyword(base) or base in ("self", "torch"):
            base += "_"
        name, i = base, 1
        while name in self._names or hasattr(self.root, name):
            i += 1
            name = f"{base}_{i}"
        self._names.add(name)
        return name

    def materialize(self, value: Value) -> fx.Node:
        """The fx node of a value (a constant becomes a buffer on the root)."""
        if not isinstance(value, Const):
            return value
        key = id(value.tensor)
        if key not in self._const_nodes:
            name = self.attr_name("const")
            self.root.register_buffer(name, value.tensor)
            self._const_keep.append(value.tensor)
            node = self.graph.get_attr(name)
            self._const_nodes[key] = node
            self.shapes[node] = tuple(int(v) for v in value.tensor.shape)
        return self._const_nodes[key]

    def _map(self, obj: Any, fold: bool) -> Any:
        if isinstance(obj, Const):
            return obj.tensor if fold else self.materialize(obj)
        if isinstance(obj, (list, tuple)):
            return type(obj)(self._map(o, fold) for o in obj)
        if isinstance(obj, dict):
            return {k: self._map(v, fold) for k, v in obj.items()}
        return obj

    @staticmethod
    def _has_node(obj: Any) -> bool:
        if isinstance(obj, fx.Node):
            return True
        if isinstance(obj, (list, tuple)):
            return any(GraphBuilder._has_node(o) for o in obj)
        if isinstance(obj, dict):
            return any(GraphBuilder._has_node(v) for v in obj.values())
        return False

    def _wrap(self, result: Any, n_out: int) -> Any:
        if n_out:
            return [Const(r) if isinstance(r, torch.Tensor) else r for r in result]
        return Const(result) if isinstance(result, torch.Tensor) else result

    def _outputs(self, node: fx.Node, n_out: int) -> Any:
        if not n_out:
            return node
        return [self.graph.call_function(operator.getitem, (node, i)) for i in range(n_out)]

    def _precheck(self, target: Any, args: Any, kwargs: dict[str, Any]) -> None:
        """Refuse a fold whose result would overrun the budget, before it runs."""
        if self.budget is None:
            return
        tensors = _tensors((args, kwargs))
        itemsize = max((t.element_size() for t in tensors), default=8)
        key = type(target) if isinstance(target, nn.Module) else target
        sizer = FOLD_SIZERS.get(key)
        if sizer is not None:
            numel = sizer(target, *args, **kwargs)
            if numel is not None:
                self.budget.precheck(int(numel), itemsize, "its result")
                return
        meta = _meta_numel(target, args, kwargs)
        if meta is not None:
            self.budget.precheck(meta, itemsize, "its result")
            return
        if len(tensors) >= 2:  # element-wise results take the broadcast shape of the inputs
            shape = _broadcast([tuple(int(d) for d in t.shape) for t in tensors])
            if shape is not None:
                self.budget.precheck(math.prod(shape), itemsize, f"a {shape} result")

    def _account(self, inputs: Any, result: Any) -> None:
        """Count the new bytes a fold holds (views of its inputs are free)."""
        if self.budget is None:
            return
        seen = {t.untyped_storage().data_ptr() for t in _tensors(inputs)}
        for t in _tensors(result):
            ptr = t.untyped_storage().data_ptr()
            if ptr not in seen:
                seen.add(ptr)
                self.budget.add(t.untyped_storage().nbytes(), f"a {list(t.shape)} result")

    def _fold(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        args, kwargs = self._map(args, True), self._map(kwargs, True)
        self._precheck(target, args, kwargs)
        with torch.no_grad():
            result = target(*args, **kwargs)
        self._account((args, kwargs), result)
        return result

    def emit(
        self, kind: str, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any], n_out: int
    ) -> Any:
        if not self._has_node((args, kwargs)):
            return self._wrap(self._fold(target, args, kwargs), n_out)
        node = self.graph.create_node(
            kind, target, self._map(args, False), self._map(kwargs, False)
        )
        return self._outputs(node, n_out)

    def emit_module(
        self,
        mod: nn.Module,
        op_type: str,
        node_name: str,
        args: tuple[Any, ...],
        n_out: int,
        fold: bool,
    ) -> Any:
        if fold and not self._has_node(args):
            return self._wrap(self._fold(mod.eval(), args, {}), n_out)
        name = self.attr_name(node_name or op_type.lower())
        self.root.add_module(name, mod)
        node = self.graph.call_module(name, self._map(args, False))
        return self._outputs(node, n_out)


# ----------------------------------------------------------------------------- loading


@dataclass
class _Source:
    """A model as read, without its external data: the proto, its size in bytes, how it
    came (for messages), the folder external data may come from, and whether the proto is
    the caller's own object (which load must not change)."""

    proto: Any
    size: int
    given: str
    base_dir: str | os.PathLike[str] | None
    shared: bool


def _read_model(model: Any, base_dir: str | os.PathLike[str] | None) -> _Source:
    import onnx

    if base_dir is not None and not isinstance(base_dir, (str, os.PathLike)):
        raise TypeError(
            f"base_dir must be a folder path (str or os.PathLike) or None, got "
            f"{type(base_dir).__name__}"
        )
    if isinstance(model, onnx.ModelProto):
        return _Source(model, model.ByteSize(), "an onnx.ModelProto", base_dir, True)
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
        try:
            proto = onnx.load_model_from_string(data)
        except Exception as err:  # protobuf's DecodeError, or a too-deep message
            detail = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise OnnxImportError(
                f"the {len(data)} bytes given do not parse as an ONNX model (truncated, "
                f"corrupt or not ONNX): {detail}"
            ) from None
        if not proto.HasField("graph"):
            raise OnnxImportError(f"the {len(data)} bytes given hold no ONNX graph")
        return _Source(proto, len(data), "bytes", base_dir, False)
    if isinstance(model, (str, os.PathLike)):
        from .._onnxfile import OnnxFileError, read_onnx_file

        if base_dir is not None:
            raise TypeError(
                "base_dir applies to a model given as bytes or an onnx.ModelProto; a model "
                "given by path reads external data from its own folder"
            )
        try:  # an empty, truncated, text or graphless file is refused naming the file
            proto = read_onnx_file(model, load_external_data=False)
        except OnnxFileError as err:
            raise OnnxImportError(str(err)) from None
        except (OSError, ImportError):
            raise
        except Exception as err:  # e.g. a message nested past protobuf's limit
            detail = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise OnnxImportError(f"{os.fspath(model)}: cannot be read: {detail}") from None
        real = os.path.realpath(os.fspath(model))
        return _Source(
            proto, os.path.getsize(real), repr(os.fspath(model)), os.path.dirname(real), False
        )
    raise TypeError(
        f"model must be a path (str or os.PathLike), bytes or an onnx.ModelProto, got "
        f"{type(model).__name__}"
    )


def infer_types(model: Any) -> dict[str, Any]:
    """Value name -> ``TypeProto`` from ONNX shape inference (what it could infer)."""
    import onnx
    from onnx import helper

    # big initializers travel as typed inputs: inference needs their shapes, not their data
    graph = model.graph
    declared = {i.name for i in graph.input}
    small, extra = [], []
    for init in graph.initializer:
        if len(init.dims) and int(math.prod(init.dims)) > _INFER_MAX_ELEMENTS:
            if init.name not in declared:
                extra.append(helper.make_tensor_value_info(init.name, init.data_type, init.dims))
        else:
            small.append(init)
            if init.name not in declared:
                extra.append(helper.make_tensor_value_info(init.name, init.data_type, init.dims))
    light = helper.make_model(
        helper.make_graph(
            graph.node,
            graph.name,
            [*graph.input, *extra],
            graph.output,
            initializer=small,
            value_info=graph.value_info,
        ),
        opset_imports=model.opset_import,
        ir_version=max(model.ir_version, 4),
    )
    light.functions.extend(model.functions)
    inferred = light
    modes = (True, False) if _data_prop_is_small(model) else (False,)
    for data_prop in modes:  # data propagation names more dims, but may give up
        try:
            inferred = onnx.shape_inference.infer_shapes(
                light, strict_mode=False, data_prop=data_prop
            )
            break
        except Exception:  # shape inference is an optimisation; conversion works without it
            continue
    graph = inferred.graph
    return {info.name: info.type for info in [*graph.input, *graph.value_info, *graph.output]}


#: the most elements ONNX data propagation may compute for one value (it holds them all)
_DATA_PROP_MAX_ELEMENTS = 1 << 16
# operators whose values ONNX data propagation computes (their inputs' values known)
_DATA_PROP_OPS = frozenset(
    {
        "Add", "Sub", "Mul", "Div", "Cast", "CastLike", "Concat", "Gather", "Identity",
        "Slice", "Squeeze", "Unsqueeze", "Constant", "Reshape",
    }
)  # fmt: skip


def _data_prop_is_small(model: Any) -> bool:
    """Whether ONNX data propagation stays small on ``model``: an upper bound on the
    elements each value it could compute holds (``Concat`` adds its inputs' sizes, the other
    operators it computes keep the largest, ``Shape`` gives at most 64), which must stay
    under ``_DATA_PROP_MAX_ELEMENTS``. A chain of ``Concat`` nodes doubling a constant would
    otherwise make onnx compute (and run out of memory on) every value of it."""
    size: dict[str, int] = {}
    graphs = [model.graph]
    while graphs:
        graph = graphs.pop()
        for init in graph.initializer:
            n = math.prod(int(d) for d in init.dims)
            size[init.name] = n if n <= _INFER_MAX_ELEMENTS else 0  # not given to inference
        for node in graph.node:
            known = [size.get(name, 0) for name in node.input if name]
            for attr in node.attribute:
                graphs.extend(_attr_graphs(attr))
                if attr.HasField("t"):
                    known.append(math.prod(int(d) for d in attr.t.dims))
                known.append(len(attr.ints) + len(attr.floats))
            if node.op_type in ("Shape", "Size"):
                bound = 64
            elif node.op_type not in _DATA_PROP_OPS:
                bound = 0
            elif node.op_type == "Concat":
                bound = sum(known)
            else:
                bound = max(known, default=1)
            if bound > _DATA_PROP_MAX_ELEMENTS:
                return False
            for name in node.output:
                size[name] = bound
    return True


def dim_params(types: dict[str, Any]) -> dict[str, tuple[str | None, ...]]:
    """Value name -> the symbolic names (``dim_param``) of its dims, None where there is none."""
    params: dict[str, tuple[str | None, ...]] = {}
    for name, vtype in types.items():
        ttype = vtype.tensor_type
        if not vtype.HasField("tensor_type") or not ttype.HasField("shape"):
            continue
        params[name] = tuple(
            d.dim_param if d.HasField("dim_param") else None for d in ttype.shape.dim
        )
    return params


def static_shapes(types: dict[str, Any]) -> dict[str, tuple[int | None, ...]]:
    """Value name -> shape (unknown dims as None) of the tensors in ``types``."""
    shapes: dict[str, tuple[int | None, ...]] = {}
    for name, vtype in types.items():
        ttype = vtype.tensor_type
        if not vtype.HasField("tensor_type") or not ttype.HasField("shape"):
            continue
        shapes[name] = tuple(
            d.dim_value if d.HasField("dim_value") else None for d in ttype.shape.dim
        )
    return shapes


def _domain(name: str) -> str:
    return DEFAULT_DOMAIN if name in _DEFAULT_DOMAINS else name


def _opsets(model: Any) -> dict[str, int]:
    """Domain -> the opset version the model imports (``ai.onnx`` for the default)."""
    import onnx

    opsets = {_domain(e.domain): int(e.version) for e in model.opset_import}
    if not model.opset_import:
        opsets[DEFAULT_DOMAIN] = int(onnx.defs.onnx_opset_version())
    return opsets


@functools.lru_cache(maxsize=4096)
def _schema_version(op_type: str, opset: int) -> int | None:
    import onnx

    try:
        schema = onnx.defs.get_schema(op_type, opset, "")
    except Exception:  # onnx raises SchemaError (not exported everywhere) for unknown ops
        return None
    return int(schema.since_version)


def _check_supported(model: Any, opsets: dict[str, int]) -> None:
    """Raise one error listing every operator (in subgraphs too) without a converter."""
    missing: Counter[UnsupportedOp] = Counter()
    imported = ", ".join(f"{d} {v}" for d, v in sorted(opsets.items())) or "nothing"
    for node in all_nodes(model.graph):
        domain = _domain(node.domain)
        opset = opsets.get(domain, 0)
        op = node.op_type if domain == DEFAULT_DOMAIN else f"{domain}::{node.op_type}"
        version = _schema_version(node.op_type, opset) if domain == DEFAULT_DOMAIN else None
        reason = ""
        if domain not in opsets:
            reason = f"the model does not import the {domain} domain (it imports {imported})"
        elif domain != DEFAULT_DOMAIN:
            reason = f"operator of the {domain} domain (padkit converts ai.onnx operators)"
        elif version is None:
            reason = f"onnx {_onnx_version()} knows no {node.op_type} in ai.onnx opset {opset}"
        elif find_converter(node.op_type, version) is None:
            first = first_version(node.op_type)
            if first is not None:
                reason = f"padkit converts {node.op_type} from schema version {first} on"
        else:
            continue
        missing[UnsupportedOp(op, opset, 0, reason, domain, version or 0)] += 1
    if missing:
        raise UnsupportedOnnxError(
            [u._replace(nodes=count) for u, count in sorted(missing.items())]
        )


def _raw_error(label: str, node: Any, inputs: list[Any], err: BaseException) -> str:
    """The message for a raw error converting (or folding) one node: the node, what went
    wrong and every input."""
    detail = str(err).strip().splitlines()[0][:300] if str(err).strip() else ""
    kind = type(err).__name__
    if isinstance(err, MemoryError):
        detail = "the allocation failed (out of memory)"
    elif isinstance(err, RecursionError):
        detail = "the graph nests too deeply"
    names = list(node.input)
    shown = "; ".join(
        f"input {i} {name!r}: {_describe(v)}" for i, (name, v) in enumerate(zip(names, inputs))
    )
    attrs = ", ".join(a.name for a in node.attribute)
    return (
        f"{label}: converting it failed ({kind}: {detail}); "
        + (shown or "no inputs")
        + (f"; attributes: {attrs}" if attrs else "")
    )


def _onnx_version() -> str:
    import onnx

    return str(onnx.__version__)


def _inline_functions(model: Any) -> Any:
    """The model with its local functions (exporters emit some) expanded in place."""
    if not len(model.functions):
        return model
    from onnx import inliner

    return inliner.inline_local_functions(model)


class Converting:
    """What converting one model shares across its graph and subgraphs."""

    def __init__(
        self,
        opsets: dict[str, int],
        shapes: dict[str, tuple[int | None, ...]],
        params: dict[str, tuple[str | None, ...]] | None = None,
        budget: FoldBudget | None = None,
    ):
        self.budget = budget
        self.params = params or {}
        #: dim_param -> (graph input, dim index) that carries that size at run time
        self.symbols: dict[str, tuple[fx.Node, int]] = {}
        self.opsets = opsets
        self.opset = opsets.get(DEFAULT_DOMAIN, 0)
        self.shapes = shapes
        self.failures: Counter[UnsupportedOp] = Counter()
        self.labels: dict[UnsupportedOp, list[str]] = {}

    def version(self, node: Any) -> int:
        return _schema_version(node.op_type, self.opset) or 0

    def run_nodes(self, b: GraphBuilder, nodes: Sequence[Any]) -> None:
        """Convert ``nodes`` in order into ``b`` (failures are collected, not raised)."""
        for node in nodes:
            self._run_node(b, node)

    def _run_node(self, b: GraphBuilder, node: Any) -> None:
        inputs: list[Any] = []
        skip = False
        for name in node.input:
            if not name:
                inputs.append(None)
                continue
            if name not in b.values:
                raise OnnxImportError(
                    f"{_label(node, self.version(node), self.opset)}: input {len(inputs)} "
                    f"({name!r}) is defined by no initializer, graph input or earlier node "
                    "(is the graph topologically sorted?)",
                    node=_label(node, self.version(node), self.opset),
                )
            value = b.values[name]
            if value is _POISON:
                skip = True
            inputs.append(value)
        outs: list[Any] = [_POISON] * len(node.output)
        version = self.version(node)
        label = _label(node, version, self.opset)
        if not skip:
            converter = find_converter(node.op_type, version)
            if converter is None:  # pragma: no cover - _check_supported raised already
                raise UnsupportedOnnxError([UnsupportedOp(node.op_type, self.opset, 1, "")])
            try:
                ctx = NodeContext(b, node, version, inputs, self.opset)
                ctx.converting = self
                outs = list(converter(ctx))
            except UnsupportedOnnxError as err:
                for entry in err.unsupported:
                    key = entry._replace(nodes=0)
                    self.failures[key] += entry.nodes
                    self.labels.setdefault(key, []).extend(err.node_labels)
                outs = [_POISON] * len(node.output)
            except OnnxImportError as err:
                if err.node is not None:  # a node of a subgraph, named already
                    raise
                text = str(err)
                if not text.startswith(label):
                    text = f"{label}: {text}"
                raise OnnxImportError(text, node=label) from err
            except Exception as err:  # a raw error of torch, numpy or onnx: name the node
                raise OnnxImportError(_raw_error(label, node, inputs, err), node=label) from err
        onnx_name = node.name or next((o for o in node.output if o), "")
        for out in outs:  # the ONNX node each fx node comes from (folds and reports name it)
            if isinstance(out, fx.Node):
                out.meta.setdefault("onnx_node", onnx_name)
                if out.target is operator.getitem and isinstance(out.args[0], fx.Node):
                    out.args[0].meta.setdefault("onnx_node", onnx_name)
        for i, name in enumerate(node.output):
            if not name:
                continue
            if i >= len(outs) or outs[i] is None:
                raise OnnxImportError(
                    f"{label}: output {i} ({name!r}) is used but the importer does not produce it",
                    node=label,
                )
            b.values[name] = outs[i]
            if isinstance(outs[i], fx.Node) and name in self.shapes:
                b.shapes[outs[i]] = self.shapes[name]

    def raise_failures(self) -> None:
        """Raise one :class:`UnsupportedOnnxError` for the failures collected."""
        if not self.failures:
            return
        entries = []
        for key, count in sorted(self.failures.items()):
            names = self.labels.get(key, [])
            shown = ", ".join(repr(n) for n in names[:5]) + (", ..." if len(names) > 5 else "")
            reason = f"{key.reason} (node(s) {shown})" if names else key.reason
            entries.append(key._replace(nodes=count, reason=reason))
        raise UnsupportedOnnxError(entries)

    def subgraph(
        self, graph: Any, outer: dict[str, Any], captured: list[str]
    ) -> fx.GraphModule | None:
        """A module for ``graph`` (an ``If`` / ``Loop`` body) whose arguments are the body's
        own inputs followed by the outer-scope values named in ``captured``. Returns None
        when a node of it failed to convert (the failure is collected)."""
        b = GraphBuilder(self.budget)
        for init in graph.initializer:
            b.values[init.name] = Const(tensor_from_proto(init))
        for inp in graph.input:
            b.values[inp.name] = b.graph.placeholder(b.attr_name("in_" + inp.name))
        for name in captured:
            b.values[name] = b.graph.placeholder(b.attr_name("outer_" + name))
        for name, value in outer.items():
            if isinstance(value, Const) and name not in b.values:
                b.values[name] = value
        before = sum(self.failures.values())
        self.run_nodes(b, graph.node)
        if sum(self.failures.values()) != before:
            return None
        results = []
        for out in graph.output:
            if out.name not in b.values:
                raise OnnxImportError(
                    f"subgraph {graph.name!r}: output {out.name!r} is computed by no node, "
                    "initializer or input of it nor of an enclosing graph"
                )
            value = b.values[out.name]
            if value is _POISON:
                return None
            results.append(b.materialize(value))
        b.graph.output(tuple(results))
        return fx.GraphModule(b.root, b.graph, class_name="OnnxSubgraph").eval()


def outer_names(graph: Any) -> list[str]:
    """The names ``graph`` (and the subgraphs within it) reads from enclosing scopes."""
    defined = {i.name for i in graph.initializer} | {i.name for i in graph.input}
    needed: list[str] = []
    for node in graph.node:
        reads = list(node.input)
        for attr in node.attribute:
            for sub in _attr_graphs(attr):
                reads += outer_names(sub)
        for name in reads:
            if name and name not in defined and name not in needed:
                needed.append(name)
        defined.update(o for o in node.output if o)
    return needed


def _attr_graphs(attr: Any) -> list[Any]:
    graphs = list(attr.graphs)
    if attr.HasField("g"):
        graphs.append(attr.g)
    return graphs


def all_nodes(graph: Any) -> list[Any]:
    """Every node of ``graph`` and of the subgraphs its nodes hold, depth first."""
    out = []
    for node in graph.node:
        out.append(node)
        for attr in node.attribute:
            for sub in _attr_graphs(attr):
                out += all_nodes(sub)
    return out


def _prepare(source: _Source, limits: Limits) -> tuple[Any, int]:
    """The checked model, its external data read (a copy when the caller owns it)."""
    model = source.proto
    check_depth(model, limits.max_subgraph_depth)
    extra = 0
    if has_external_data(model):
        if source.shared and source.base_dir is not None:
            import onnx

            model = onnx.ModelProto()
            model.CopyFrom(source.proto)
        extra = read_external_data(model, source.base_dir, source.given)
    validate_model(model, limits, source.size + extra)
    check_function_expansion(model, limits.max_function_nodes)
    return model, source.size + extra


class OnnxInput(NamedTuple):
    """One input of an imported graph, as the ONNX file declares it: ``name``, ``shape``
    (an int per known dim, the ``dim_param`` string of a symbolic one, None where the file
    says nothing; None for no shape at all) and ``dtype`` (None where torch has none)."""

    name: str
    shape: tuple[int | str | None, ...] | None
    dtype: torch.dtype | None

    def example_shape(self, default: int = 64) -> tuple[int, ...] | None:
        """A concrete shape: the declared dims, 1 for an unknown first (batch) dim and
        ``default`` for other unknown dims; None without a declared shape."""
        if self.shape is None:
            return None
        return tuple(
            d if isinstance(d, int) else (1 if i == 0 else default)
            for i, d in enumerate(self.shape)
        )


class OnnxGraphModule(fx.GraphModule):
    """The module :func:`load` returns: a ``torch.fx.GraphModule`` that also says what the
    import knew. Both properties read ``self.meta``, which copies keep."""

    @property
    def onnx_inputs(self) -> tuple[OnnxInput, ...]:
        """Each graph input as the file declares it (name, shape, dtype), in call order."""
        return tuple(self.meta.get("onnx_inputs", ()))

    @property
    def onnx_folds(self) -> tuple[Any, ...]:
        """Each fold made at import (:class:`padkit.onnx.Fold`), and each candidate left in
        place with the reason."""
        return tuple(self.meta.get("onnx_folds", ()))


def _declared_inputs(graph: Any, initialized: set[str]) -> tuple[OnnxInput, ...]:
    out = []
    for inp in graph.input:
        if inp.name in initialized:
            continue
        ttype = inp.type.tensor_type
        shape: tuple[int | str | None, ...] | None = None
        if inp.type.HasField("tensor_type") and ttype.HasField("shape"):
            shape = tuple(
                int(d.dim_value)
                if d.HasField("dim_value")
                else (d.dim_param if d.HasField("dim_param") else None)
                for d in ttype.shape.dim
            )
        out.append(OnnxInput(inp.name, shape, ONNX_DTYPES.get(int(ttype.elem_type))))
    return tuple(out)


def build(
    model: Any,
    limits: Limits | None = None,
    source_bytes: int | None = None,
    fold: str = "pads",
) -> OnnxGraphModule:
    """Convert a checked ``onnx.ModelProto`` (see :func:`padkit.onnx.load`)."""
    load_converters()
    limits = limits or Limits()
    size = model.ByteSize() if source_bytes is None else source_bytes
    stage = "inlining the model's local functions"
    try:
        model = _inline_functions(model)
        stage = "running ONNX shape inference"
        opsets = _opsets(model)
        types = infer_types(model)
        stage = "expanding function-defined operators"
        expanded = expand_function_ops(model, opsets, types)
        if expanded is not model:
            model, types = expanded, infer_types(expanded)
    except OnnxImportError:
        raise
    except Exception as err:
        detail = str(err).strip().splitlines()[0][:300] if str(err).strip() else ""
        raise OnnxImportError(f"{stage} failed ({type(err).__name__}: {detail})") from err
    _check_supported(model, opsets)
    graph = model.graph
    budget = FoldBudget(limits.folded_bytes(size))
    run = Converting(opsets, static_shapes(types), dim_params(types), budget)
    b = GraphBuilder(budget)
    for sparse in graph.sparse_initializer:
        raise OnnxImportError(
            f"initializer {sparse.values.name!r} is sparse; padkit.onnx needs dense initializers"
        )
    for init in graph.initializer:
        try:
            b.values[init.name] = Const(tensor_from_proto(init))
        except OnnxImportError as err:
            raise OnnxImportError(f"initializer {init.name!r} of the main graph: {err}") from None
    for inp in graph.input:
        if inp.name in b.values:
            continue  # an initializer listed as input (IR < 4): a constant
        arg = re.sub(r"\W", "_", inp.name) or "input"
        if keyword.iskeyword(arg) or arg == "self":  # forward(self, def) is no Python
            arg += "_"
        ph = b.graph.placeholder(arg)
        b.values[inp.name] = ph
        if inp.name in run.shapes:
            b.shapes[ph] = run.shapes[inp.name]
        for j, param in enumerate(run.params.get(inp.name, ())):
            if param is not None:
                run.symbols.setdefault(param, (ph, j))
    run.run_nodes(b, graph.node)
    run.raise_failures()
    results = []
    for out in graph.output:
        if out.name not in b.values:
            raise OnnxImportError(
                f"graph output {out.name!r} is computed by no node, initializer or input"
            )
        results.append(b.materialize(b.values[out.name]))
    b.graph.output(results[0] if len(results) == 1 else tuple(results))
    try:
        module = OnnxGraphModule(b.root, b.graph, class_name="OnnxModule")
        if module.graph.eliminate_dead_code():  # shape arithmetic symbolic sizes made unneeded
            module.delete_all_unused_submodules()
            module.recompile()
        from ._fold import fold_graph

        # (the folds probe the graph at sizes its declared input allows)
        module.meta["onnx_inputs"] = _declared_inputs(graph, {i.name for i in graph.initializer})
        folds = fold_graph(module, fold)
    except Exception as err:
        detail = str(err).strip().splitlines()[0][:300] if str(err).strip() else ""
        raise OnnxImportError(
            f"generating the torch module failed ({type(err).__name__}: {detail})"
        ) from err
    module.meta["onnx_inputs"] = _declared_inputs(graph, {i.name for i in graph.initializer})
    module.meta["onnx_folds"] = tuple(folds)
    return module.eval()


def load(
    model: Any,
    *,
    base_dir: str | os.PathLike[str] | None = None,
    max_function_nodes: int = Limits.max_function_nodes,
    max_folded_bytes: int | None = None,
    max_initializer_ratio: float = Limits.max_initializer_ratio,
    max_subgraph_depth: int = Limits.max_subgraph_depth,
    fold: str = "pads",
    optimize: str | None = None,
) -> OnnxGraphModule:
    """Import an ONNX model as a ``torch.fx.GraphModule`` built from padkit layers.

    The module takes the graph's inputs (those without an initializer) positionally, in
    graph order, and returns its single output, or a tuple of outputs. Conv, pooling and
    ``Pad`` nodes become :mod:`padkit.nn` layers with exact ONNX padding (``pads``,
    ``auto_pad``, ``ceil_mode``, ``count_include_pad``, dilations, ``output_shape``);
    values computable at import time (initializers, ``Constant``, ``Shape`` of a
    statically shaped tensor, ...) are folded. The module is returned in eval mode.

    Every file is treated as hostile: it is checked before anything is built (tensor data
    against dims and type, opsets, names, attribute types, subgraph bodies), external data
    is read only from one folder, and the limits below bound what importing may allocate.

    Args:
        model: a path, the serialized bytes, or an ``onnx.ModelProto``.
        base_dir: the folder external data is read from, for a model given as bytes or an
            ``onnx.ModelProto`` (a model given by path reads it from the file's own folder,
            links resolved). Without it such a model that needs external data is refused;
            with it, a location that leaves the folder (absolute, ``..``, a link) is refused.
        max_function_nodes: the most nodes inlining the model's local functions may make.
        max_folded_bytes: the most bytes the constants computed at import time may hold
            together; None: 256 MiB + 4 x the model's size (the file plus its external data).
        max_initializer_ratio: the stored tensors may declare at most this many times the
            model's size in bytes (+ 16 MiB).
        max_subgraph_depth: the deepest nesting of ``If`` / ``Loop`` / ``Scan`` bodies.
        fold: ``"pads"`` (the default): a constant ``Pad`` read only by convs and pools
            becomes their per-side pads (the module trains as before); ``"all"``: also
            ``BatchNormalization`` and ``Mul`` / ``Div`` / ``Add`` / ``Sub`` by per-channel
            constants after a conv become the conv's weight and bias (for inference: the
            batch norm no longer trains), and ``x * Sigmoid(x)`` runs as one SiLU;
            ``"none"``: the graph as the file spells it.
            The module's ``onnx_folds`` lists each fold and each candidate left in place
            with the reason.
        optimize: None, or ``"inference"``: ``fold="all"``, parameters frozen
            (``requires_grad=False``), 4-d weights channels-last (see
            ``docs/onnx-import.md`` and the figures in ``docs/performance.md``).

    The module's ``onnx_inputs`` holds each graph input as the file declares it
    (:class:`padkit.onnx.OnnxInput`: name, shape, dtype).

    Raises:
        UnsupportedOnnxError: the model uses operators or attributes the importer does not
            implement; the message lists each one with its opset and node count.
        OnnxImportError: the model is malformed, or over a limit (the message names the
            node, or the tensor, and the limit's keyword).
        TypeError: ``model`` or ``base_dir`` has a wrong type.
        ValueError: a limit is not a positive number.

    Example:
        >>> import torch
        >>> from onnx import TensorProto, helper
        >>> node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2], pads=[0, 1])
        >>> graph = helper.make_graph(
        ...     [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4])],
        ...     [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        >>> module = load(helper.make_model(graph))
        >>> module(torch.tensor([[[1.0, 3.0, 2.0, 4.0]]]))
        tensor([[[3., 3., 4., 4.]]])
    """
    try:
        import onnx  # noqa: F401
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "padkit.onnx.load needs the 'onnx' package: pip install 'padkit[onnx]'"
        ) from err
    from ._fold import FOLD_MODES

    if not isinstance(fold, str) or fold not in FOLD_MODES:
        raise ValueError(
            f"load(): fold must be one of {', '.join(repr(m) for m in FOLD_MODES)}, got {fold!r}"
        )
    if optimize not in (None, "inference"):
        raise ValueError(f"load(): optimize must be None or 'inference', got {optimize!r}")
    if optimize == "inference":
        if fold == "none":
            raise ValueError("load(): optimize='inference' folds; it cannot take fold='none'")
        fold = "all"
    limits = Limits(max_function_nodes, max_folded_bytes, max_initializer_ratio, max_subgraph_depth)
    source = _read_model(model, base_dir)
    try:
        proto, size = _prepare(source, limits)
    except RecursionError:
        raise OnnxImportError("the model nests too deeply to be checked") from None
    module = build(proto, limits, size, fold)
    if optimize == "inference":
        from ._fold import for_inference

        for_inference(module)
    return module
