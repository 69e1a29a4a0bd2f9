"""Operators without a converter whose ONNX schema defines them as a function of other
operators (``Attention``, ``RMSNormalization``, the losses, ...) are replaced by that function
body before conversion: the model then holds only operators the spec itself composes them of.
"""

from __future__ import annotations

from typing import Any

from ._registry import find_converter

__all__ = ["expand_function_ops"]

_DOMAIN = "padkit.expanded"
_ROUNDS = 4  # function bodies may use other function-defined operators


def _schema(op_type: str, opset: int) -> Any:
    import onnx

    try:
        return onnx.defs.get_schema(op_type, opset, "")
    except Exception:  # onnx raises SchemaError (not exported everywhere) for unknown ops
        return None


def _function_for(node: Any, opset: int, types: dict[str, Any]) -> Any:
    """The schema's function body for ``node`` at ``opset``, or None."""
    from onnx import FunctionProto

    schema = _schema(node.op_type, opset)
    if schema is None or find_converter(node.op_type, int(schema.since_version)) is not None:
        return None
    plain = [v for v in schema.function_opset_versions if v <= opset]
    dependent = [v for v in schema.context_dependent_function_opset_versions if v <= opset]
    text = None
    if plain and (not dependent or max(plain) >= max(dependent)):
        text = schema.get_function_with_opset_version(max(plain))
    elif dependent:
        inputs = [types.get(name) for name in node.input if name]
        known = [t for t in inputs if t is not None]
        if len(known) != len(inputs):
            return None  # the body depends on input types shape inference did not find
        text = schema.get_context_dependent_function_with_opset_version(
            max(dependent),
            node.SerializeToString(),
            [t.SerializeToString() for t in known],
        )
    if not text:
        return None
    function = FunctionProto()
    function.ParseFromString(text)
    for name, attr in schema.attributes.items():
        present = {a.name for a in node.attribute}
        if name not in present and attr.default_value.name:
            node.attribute.append(attr.default_value)
    return function


def _default_opset(opsets: dict[str, int]) -> int:
    return opsets.get("ai.onnx", 0)


def expand_function_ops(model: Any, opsets: dict[str, int], types: dict[str, Any]) -> Any:
    """``model`` with every function-defined operator that has no converter inlined (the
    same object when there is none)."""
    import onnx
    from onnx import helper, inliner

    opset = _default_opset(opsets)
    if not opset:
        return model
    out = model
    for _ in range(_ROUNDS):
        copy = None
        count = 0
        for i, node in enumerate(out.graph.node):
            if node.domain not in ("", "ai.onnx"):
                continue
            probe = onnx.NodeProto()
            probe.CopyFrom(node)
            function = _function_for(probe, opset, types)
            if function is None:
                continue
            if copy is None:
                copy = onnx.ModelProto()
                copy.CopyFrom(out)
            name = f"{node.op_type}_{i}"
            function.domain, function.name = _DOMAIN, name
            target = copy.graph.node[i]
            target.CopyFrom(probe)
            target.domain, target.op_type = _DOMAIN, name
            copy.functions.append(function)
            count += 1
        if copy is None:
            break
        copy.opset_import.append(helper.make_opsetid(_DOMAIN, 1))
        out = inliner.inline_local_functions(copy)
        kept = [e for e in out.opset_import if e.domain != _DOMAIN]
        del out.opset_import[:]
        out.opset_import.extend(kept)
    return out
