"""The streaming step as a module with the state as explicit tensors, for export
(:meth:`StreamingModule.step_module`, :meth:`StreamingModule.export_onnx`): every strided
layer's phase fixed from the state it is exported from."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from ..spec import PaddingError
from ._state import _STARTUP_KEY, StreamState, _Context

if TYPE_CHECKING:
    from ._runner import StreamingModule

__all__ = ["StreamingStep"]


def step_module(
    stream: StreamingModule, example: Tensor, state: StreamState | None
) -> StreamingStep:
    """See :meth:`StreamingModule.step_module`."""
    stream._check_chunk(example, "step_module(): example")
    if stream._lookahead_mode:
        raise PaddingError(
            "step_module(): a lookahead stream's step is not exported (the held input "
            "grows during the first steps); export a causal model"
        )
    stream._self_check(example)
    stream._refuse_start_pads("step_module()")
    stream._refuse_windows(
        "step_module()", "grows over the first steps: the exported step has fixed state shapes"
    )
    if state is None:
        state = stream.init_state(example=example)
    state = stream._settled(state)  # input a step held: run it (it completes no output)
    if _STARTUP_KEY in state or (stream._has_reflect() and stream._at_start(state)):
        dim = stream.axis if stream.axis >= 0 else example.dim() + stream.axis
        need = stream._startup_samples(example)
        if _STARTUP_KEY in state or example.shape[dim] < need:
            raise PaddingError(
                f"step_module(): the model pads time in mode 'reflect' "
                f"({stream._reflect_names()}): a stream's first run needs {need} samples "
                f"(startup_delay), the exported chunk has {example.shape[dim]}"
                + (" and the state holds a start-up" if _STARTUP_KEY in state else "")
                + ". Export a chunk of at least that length, or export from a state past "
                "the start-up (step() the first samples; the graph then serves such states)"
            )
    ctx = _Context(state_in=state, record={})
    with torch.no_grad():
        stream._run(torch.zeros_like(example), ctx)
    assert ctx.record is not None
    for name, (pos, length) in ctx.record.items():
        plan = stream._plans[name]
        if plan.offset(pos) != plan.offset(pos + length) or plan.outputs(
            pos, length
        ) != plan.outputs(pos + length, length):
            raise PaddingError(
                f"step_module(): {name!r} (stride {plan.stride}) gets {length} samples per "
                f"step after {pos}: its phase changes from step to step, so one exported "
                "graph cannot serve every step. Use a chunk length that is a multiple of "
                "the model's total stride"
                + (
                    ", and run a warm-up step() before exporting (the layer has no left padding)"
                    if plan.lo < plan.k_eff - plan.stride
                    else ""
                )
            )
    static = {name: pos for name, (pos, _) in ctx.record.items()}
    names = sorted(state)
    return StreamingStep(stream, names, static)


def export_onnx(
    stream: StreamingModule,
    path: str,
    example: Tensor,
    state: StreamState | None,
    *,
    dynamic_batch: bool,
    dynamic_length: bool,
    **kwargs: Any,
) -> list[str]:
    """See :meth:`StreamingModule.export_onnx`."""
    if stream._lookahead_mode:
        raise PaddingError(
            "export_onnx(): lookahead streams are not exported (the held input grows during "
            "the first steps); export a causal model"
        )
    stream._check_chunk(example, "export_onnx(): example")
    stream._self_check(example)
    stream._refuse_start_pads("export_onnx()")
    stream._refuse_windows(
        "export_onnx()", "grows over the first steps: the exported step has fixed state shapes"
    )
    if dynamic_length:
        bad = [p.name for p in stream._stateful() if not p.simple]
        if bad:
            raise PaddingError(
                f"export_onnx(dynamic_length=True): {bad} have a stride, a transposed conv "
                "or a left pad other than k_eff - 1, so their phase depends on the chunk "
                "length; export a fixed length (a multiple of the total stride)"
            )
    if state is not None:
        state = stream._settled(state)  # held input runs once here (step_module then has none)
    step = stream.step_module(example, state)
    start = state if state is not None else stream.init_state(example=example)
    # distinct tensors: layers may share one count tensor, which export would alias
    values = [start[k].clone() for k in step.state_names]
    args = (torch.zeros_like(example), *values)
    dim = stream.axis if stream.axis >= 0 else example.dim() + stream.axis
    kwargs.setdefault("dynamo", True)
    kwargs.setdefault("verbose", False)
    names_in = ["chunk", *[f"state_in.{k}" for k in step.state_names]]
    names_out = ["output", *[f"state_out.{k}" for k in step.state_names]]
    if (
        (dynamic_batch or dynamic_length)
        and "dynamic_shapes" not in kwargs
        and ("dynamic_axes" not in kwargs)
    ):
        if kwargs["dynamo"]:
            batch = torch.export.Dim("batch", min=1, max=1 << 16)
            chunk_dims: dict[int, Any] = {0: batch} if dynamic_batch else {}
            if dynamic_length:
                chunk_dims[dim] = torch.export.Dim("time", min=1, max=1 << 20)
            kwargs["dynamic_shapes"] = (
                chunk_dims,
                tuple({0: batch} if dynamic_batch and v.dim() else {} for v in values),
            )
        else:
            axes: dict[str, dict[int, str]] = {}
            for nm, v in zip(names_in + names_out, [example, *values] * 2):
                if dynamic_batch and v.dim():
                    axes[nm] = {0: "batch"}
            if dynamic_length:
                axes.setdefault("chunk", {})[dim] = "time"
            kwargs["dynamic_axes"] = axes
    with warnings.catch_warnings():
        # the exporter notes that the state tensors share the chunk's batch dimension
        warnings.filterwarnings("ignore", message=".*shares the same shape constraints.*")
        torch.onnx.export(step, args, path, input_names=names_in, output_names=names_out, **kwargs)
    return list(step.state_names)


class StreamingStep(nn.Module):
    """One streaming step with a fixed chunk shape and the state as explicit tensors.

    Made by :meth:`StreamingModule.step_module`; it exists to be exported (ONNX, or
    ``torch.export``) with the state as graph inputs and outputs.

    Shape:
        - Input: ``chunk`` of the example's shape, then one tensor per state entry, in the
          order of :attr:`state_names`.
        - Output: ``(output, *new_state)``, the new state in the same order.

    Example:
        >>> import padkit.nn as pn
        >>> from padkit.streaming import StreamingModule
        >>> stream = StreamingModule(pn.Conv1d(2, 3, 3, stride=2, padding="causal"))
        >>> step = stream.step_module(torch.zeros(1, 2, 4))
        >>> step.state_names
        ['<model>.buf', '<model>.pos']
        >>> state = stream.init_state(1)
        >>> out, *values = step(torch.ones(1, 2, 4), *[state[k] for k in step.state_names])
        >>> out.shape
        torch.Size([1, 3, 2])
    """

    def __init__(self, stream: StreamingModule, names: list[str], static: dict[str, int]) -> None:
        super().__init__()
        self.stream = stream
        self.state_names = list(names)
        self._static = dict(static)
        self.train(stream.model.training)

    def forward(self, chunk: Tensor, *state: Tensor) -> tuple[Tensor, ...]:
        if len(state) != len(self.state_names):
            raise PaddingError(
                f"StreamingStep: expected {len(self.state_names)} state tensors "
                f"({self.state_names}), got {len(state)}"
            )
        ctx = _Context(state_in=dict(zip(self.state_names, state)), static_pos=self._static)
        out = self.stream._run(chunk, ctx)
        if not isinstance(out, Tensor):
            raise TypeError(
                f"StreamingStep: the model must return a Tensor to export, got {type(out).__name__}"
            )
        new = dict(ctx.state_in)
        new.update(ctx.state_out)
        return (out, *[new[k] for k in self.state_names])
