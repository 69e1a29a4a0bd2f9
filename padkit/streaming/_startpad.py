"""Pad modules at the stream's start.

A pad module (``nn.ConstantPad1d``, ``nn.ZeroPad2d``, ``nn.ReplicationPad1d``, ...) run on
every chunk would pad every chunk. One that pads the time axis on the left only, with a
constant or by replicating the first sample, pads the whole sequence at its start and
nowhere else: streamed, it pads the stream's first samples once (the first chunk that
brings a sample; a replicated pad copies that sample) and passes later chunks through, its
other axes padded on every chunk as they are in the full run. Its output stream is then the
full run's, ``lo`` samples longer than its input stream, which the layers after it stream
as any other input (parallel_wavegan's causal upsampler replicates a transposed conv's
first input sample this way, which no conv's own pads express).

The state holds, per batch row, whether the stream has started (``"<name>.started"``). Rows
start together: a step on rows of which some have started and some not is refused, as is
``reset_rows`` of part of a batch and the export of a step. A right pad on time needs the
sequence's end, and reflected or circular pads read samples the stream has not seen: those
stay refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..spec import PaddingError
from ._state import _Context, claim_call

__all__ = ["StartPadPlan", "pad_axes", "start_pad_plan", "start_pad_step"]

_CONSTANT = (nn.ConstantPad1d, nn.ConstantPad2d, nn.ConstantPad3d)  # ZeroPad* subclass these
_REPLICATE = (nn.ReplicationPad1d, nn.ReplicationPad2d, nn.ReplicationPad3d)


@dataclass(frozen=True)
class StartPadPlan:
    """A pad module streamed with its left time pad at the stream's start only: ``pads``
    in ``F.pad``'s order, ``pair`` the index of the time axis's pair in them (0: the last
    axis), ``axis`` the time axis of its input counted from the end."""

    name: str
    pads: tuple[int, ...]
    pair: int
    mode: str
    value: float

    @property
    def key(self) -> str:
        return f"{self.name}.started"

    @property
    def lo(self) -> int:
        return self.pads[2 * self.pair]

    @property
    def axis(self) -> int:
        return -1 - self.pair

    @property
    def how(self) -> str:
        """How the module streams, for messages."""
        return f"with its left pad of {self.lo} time step(s) at the stream's start only"

    @property
    def state_keys(self) -> str:
        return repr(self.key)

    def others(self) -> list[int]:
        """The pads of the other axes (the time axis's pair zero)."""
        rest = list(self.pads)
        rest[2 * self.pair] = rest[2 * self.pair + 1] = 0
        return rest


def pad_axes(module: nn.Module) -> int:
    """The spatial axes a pad module of torch's that may stream pads (0: none such)."""
    if not isinstance(module, (*_CONSTANT, *_REPLICATE)):
        return 0
    return len(module.padding) // 2


def start_pad_plan(name: str, module: nn.Module, layer_axis: int) -> StartPadPlan | str | None:
    """The plan of a pad module on the time axis ``layer_axis`` of its ``(N, C, ...)``
    input; a reason where it cannot stream; None where it is no pad module of torch's."""
    if isinstance(module, _CONSTANT):
        mode, value = "constant", float(module.value)
    elif isinstance(module, _REPLICATE):
        mode, value = "replicate", 0.0
    else:
        return None
    if not any(type(module).forward is c.forward for c in (*_CONSTANT, *_REPLICATE)):
        return "its forward is its own; only torch's pad is streamed"
    pads = tuple(int(p) for p in module.padding)
    nd = len(pads) // 2
    pair = -layer_axis - 1 if layer_axis < 0 else nd + 1 - layer_axis
    if not 0 <= pair < nd:
        return f"it pads {nd} spatial axis/axes, and the time axis is axis {layer_axis}"
    lo, hi = pads[2 * pair], pads[2 * pair + 1]
    if hi != 0 or lo < 0:
        return (
            f"it pads the time axis with {(lo, hi)}: a right pad (or a crop) needs the "
            "sequence's end"
        )
    return StartPadPlan(name, pads, pair, mode, value)


def start_pad_step(
    plan: StartPadPlan, layer: nn.Module, x: Any, args: Any, kwargs: Any, ctx: _Context
) -> Any:
    """The pad module's call in a step: its pads at the stream's first samples, else the
    other axes' pads only."""
    what = f"{type(layer).__name__} {plan.name!r}"
    claim_call(ctx, plan.name, what, plan.how, x, args, kwargs)
    if ctx.lookahead is not None:  # pragma: no cover - refused when the stream is made
        raise PaddingError(f"StreamingModule: {what} streams causally only")
    dim = x.dim() + plan.axis
    started = ctx.state_in.get(plan.key)
    rows = int(x.shape[0])
    if started is not None:
        if not isinstance(started, Tensor) or tuple(started.shape) != (rows,):
            got = tuple(started.shape) if isinstance(started, Tensor) else type(started)
            raise PaddingError(
                f"step(): state {plan.key!r} is {got}, but {what} needs one flag per batch row "
                f"({rows}); start a new state with init_state()"
            )
        begun = bool(started.all())
        if not begun and bool(started.any()):
            raise PaddingError(
                f"step(): {what} pads the stream's start, and the batch's rows are at "
                "different starts; restart every row together (init_state())"
            )
    else:
        begun = False
    if begun or x.shape[dim] == 0:
        rest = plan.others()
        return F.pad(x, rest, plan.mode, plan.value) if any(rest) else x
    out = F.pad(x, list(plan.pads), plan.mode, plan.value)
    if not ctx.shape_only:
        ctx.state_out[plan.key] = torch.ones(rows, dtype=torch.bool, device=x.device)
    return out
