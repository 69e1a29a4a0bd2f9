"""What a stream's state is: a flat ``dict[str, Tensor]`` (per layer ``"<name>.buf"`` and
``"<name>.pos"``; recurrent layers add their hidden state; the stream's own keys below), fresh
entries for a layer, and the per-step context the stand-ins read and write."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from ..op import max_pad_fill
from ..spec import PaddingError
from ._plan import _Plan

StreamState = dict[str, Tensor]
# lookahead mode: the model input not yet committed, and the samples seen
_INPUT_KEY = "<stream>.input"
_POS_KEY = "<stream>.pos"
# reflect time padding: the input held until the stream's start-up is complete
_STARTUP_KEY = "<stream>.startup"
# causal mode: input held until it completes an output (``_hold.py``): a buffer of which
# the first ``_HELD_COUNT_KEY`` samples on the time axis are held
_HELD_KEY = "<stream>.held"
_HELD_COUNT_KEY = "<stream>.held_count"


class _Context:
    """One step's inputs and outputs: the state read, the entries written, and how the
    step runs (lazy state creation, export phases, lookahead span, probes). A plain class
    with slots: one is made per step, and its fields are read on every layer call."""

    __slots__ = (
        "advanced",
        "called",
        "chunk",
        "clocks",
        "created",
        "final",
        "lazy",
        "lookahead",
        "record",
        "shape_only",
        "shared_pos",
        "state_in",
        "state_out",
        "static_pos",
    )

    def __init__(
        self,
        state_in: StreamState,
        *,
        lazy: bool = False,
        static_pos: dict[str, int] | None = None,
        lookahead: tuple[int, int, int] | None = None,
        clocks: Any = None,
        record: dict[str, tuple[int, int]] | None = None,
        shape_only: bool = False,
        chunk: tuple[tuple[int, ...], torch.dtype, torch.device] | None = None,
    ) -> None:
        self.state_in = state_in
        self.state_out: StreamState = {}
        self.lazy = lazy
        self.created: StreamState = {}
        self.static_pos = static_pos
        # lookahead mode: (start, next start, end) input samples of this step: every tensor
        # covers its clock's samples from start to the end; those before the next start
        # become history
        self.lookahead = lookahead
        self.clocks = clocks  # lookahead mode: the stream's Clocks
        # lookahead mode: the flush, whose span ends where the sequence does (right pads in
        # mode replicate or reflect read its last samples)
        self.final = False
        self.record = record
        # a run whose outputs and new state are thrown away (init_state's shape probe, the
        # start-up length search): reflect layers may get fewer samples than their pad
        self.shape_only = shape_only
        self.called: set[str] = set()
        # per step: a layer's sample count advanced by the chunk length, shared by the
        # layers that hold the same count tensor (saves one tensor op per layer)
        self.advanced: dict[tuple[int, int], Tensor] = {}
        self.shared_pos: dict[tuple[int, str], Tensor] = {}
        # the step's chunk (shape, dtype, device), which input errors name
        self.chunk = chunk


def fresh_entries(
    plan: _Plan,
    shape: Sequence[int],
    like: Tensor,
    shared: dict[tuple[int, str], Tensor] | None = None,
) -> StreamState:
    """A fresh buffer (the layer's padding: zeros, for max pools their ``padding_value`` or
    by default the lowest value ``like`` can hold, ``-inf`` for floats) with ``like``'s
    dtype and device, and sample count for one layer; layers at the same count share one
    count tensor."""
    dtype, device = like.dtype, like.device
    if plan.kind == "max":
        buf = torch.full(tuple(shape), max_pad_fill(like, plan.fill), dtype=dtype, device=device)
    else:
        buf = torch.zeros(tuple(shape), dtype=dtype, device=device)
    # layers that see the same sample count share one count tensor (never mutated), so
    # a step advances it once for all of them
    key = (int(shape[0]), str(device))
    pos = shared.get(key) if shared is not None else None
    if pos is None:
        pos = torch.zeros((int(shape[0]),), dtype=torch.int64, device=device)
        if shared is not None:
            shared[key] = pos
    return {plan.key_buf: buf, plan.key_pos: pos}


def check_continues(key: str, held: Tensor, chunk: Tensor, dim: int, until: str) -> None:
    """Refuse a chunk that does not continue the input the state ``key`` holds (a ``cat``
    would raise from torch, or promote the dtype and run the model on another one)."""
    if not continues(held, chunk, dim):
        raise PaddingError(
            f"step(): state {key!r} holds input of shape {tuple(held.shape)} ({held.dtype}, "
            f"{held.device}) {until}; the chunk of shape {tuple(chunk.shape)} ({chunk.dtype}, "
            f"{chunk.device}) does not continue it. Pass the state returned by the previous "
            "step, or chunks of the stream's shape (but time), dtype and device"
        )


def continues(held: Tensor, chunk: Tensor, dim: int) -> bool:
    """Whether ``chunk`` continues the held input along the time axis ``dim``."""
    return (
        chunk.dim() == held.dim()
        and chunk.shape[:dim] == held.shape[:dim]
        and chunk.shape[dim + 1 :] == held.shape[dim + 1 :]
        and chunk.dtype == held.dtype
        and chunk.device == held.device
    )


def claim_call(
    ctx: _Context, name: str, what: str, how: str, x: Any, args: tuple[Any, ...], kwargs: Any
) -> None:
    """A measured module's stand-in (``how``: the way it streams) takes one tensor, once a
    step: raise where this call is another, else mark the module called in ``ctx``."""
    if args or kwargs or not isinstance(x, Tensor):
        raise PaddingError(
            f"StreamingModule: {what} streams {how} and takes one tensor then, as measured; "
            f"this step calls it with {1 + len(args)} positional and {len(kwargs)} keyword "
            "argument(s)"
        )
    if name in ctx.called:
        raise PaddingError(
            f"StreamingModule: {what} ran twice in one step; a module that streams {how} "
            "needs one state per use (use two modules)"
        )
    ctx.called.add(name)
