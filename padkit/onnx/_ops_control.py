"""Converters for control flow: ``If`` (a constant condition inlines its branch; otherwise
both branches become submodules and the condition picks one at call time)."""

from __future__ import annotations

from typing import Any

from torch import Tensor, fx, nn

from ._graph import _POISON, Const, NodeContext, Value, outer_names, tensor_from_proto
from ._registry import register

__all__ = ["OnnxIf"]


class OnnxIf(nn.Module):
    """ONNX ``If`` whose condition is known only at call time: runs ``then_branch`` or
    ``else_branch`` on the outer-scope values both read."""

    def __init__(self, then_branch: fx.GraphModule, else_branch: fx.GraphModule) -> None:
        super().__init__()
        self.then_branch = then_branch
        self.else_branch = else_branch

    def forward(self, cond: Tensor, *outer: Tensor) -> tuple[Tensor, ...]:
        branch = self.then_branch if bool(cond.reshape(-1)[0]) else self.else_branch
        out: tuple[Tensor, ...] = branch(*outer)
        return out


@register("If", since=1)
def if_(ctx: NodeContext) -> list[Value | None]:
    cond = ctx.required(0)
    then_g, else_g = ctx.attr("then_branch"), ctx.attr("else_branch")
    run = ctx.converting
    b = ctx.builder
    n_out = len(ctx.node.output)
    if isinstance(cond, Const):
        branch = then_g if bool(cond.tensor.reshape(-1)[0]) else else_g
        for init in branch.initializer:
            b.values[init.name] = Const(tensor_from_proto(init))
        run.run_nodes(b, branch.node)
        which = "then_branch" if branch is then_g else "else_branch"
        missing = [o.name for o in branch.output if o.name not in b.values]
        if missing:
            raise ctx.error(
                f"attribute {which!r}: output {missing[0]!r} is computed by no node, "
                "initializer or input of the branch nor of an enclosing graph"
            )
        return [b.values[o.name] for o in branch.output]
    captured: list[str] = []
    for graph in (then_g, else_g):
        for name in outer_names(graph):
            value = b.values.get(name)
            if isinstance(value, fx.Node) and name not in captured:
                captured.append(name)
    then_m = run.subgraph(then_g, b.values, captured)
    else_m = run.subgraph(else_g, b.values, captured)
    if then_m is None or else_m is None:
        poisoned: list[Any] = [_POISON] * n_out
        return poisoned
    args = [b.values[name] for name in captured]
    outs = ctx.module(OnnxIf(then_m, else_m), cond, *args, n_out=n_out)
    return list(outs)
