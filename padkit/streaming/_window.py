"""Windows of earlier time steps in a causal stream: a module measured to read its inputs
``t - w .. t`` for its output ``t`` (a moving average, causal local attention written with a
banded mask) runs on each step on its last ``w`` input samples, kept in the state as
``"<name>.hist"``, and the chunk; the step keeps the outputs of the chunk's time steps.

Before a window is taken the module is run that way on its recorded input
(:func:`window_differs`); the measurement that finds the window is ``_check.measure``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import torch
from torch import Tensor, nn

from ..spec import PaddingError
from ._lookahead import span_at
from ._state import _Context, check_continues, claim_call

__all__ = [
    "LONG_WINDOW_PROBE",
    "WindowPlan",
    "blocks_differ",
    "chunk_sizes",
    "mismatch",
    "window_differs",
    "window_step",
]

# the length a module's input is repeated to when its window reaches past the probe
LONG_WINDOW_PROBE = 1024


@dataclass(frozen=True)
class WindowPlan:
    """A module measured to read a window of time steps (its output ``t`` depends on its
    inputs ``t - reach .. t + ahead``; ``ahead`` > 0 in lookahead streams only, where
    ``rate`` is its input's clock: its samples per model-input sample).
    ``in_axis``/``out_axis``: the time axis of its input and output."""

    name: str
    reach: int
    in_axis: int
    out_axis: int
    ahead: int = 0
    rate: Fraction | None = None
    # blocks: output t reads the inputs of the block of ``block`` steps holding t (blocks
    # from the stream's start); reach and ahead are then ``block - 1``
    block: int = 0

    @property
    def key(self) -> str:
        return f"{self.name}.hist"

    @property
    def how(self) -> str:
        """How the module streams, for messages."""
        if self.block:
            return (
                f"on whole blocks of {self.block} input samples from the stream's start, "
                "with the stream's lookahead"
            )
        how = f"on a window of its last {self.reach} input samples"
        if self.ahead:
            how += f" and, with the stream's lookahead, its next {self.ahead}"
        return how

    @property
    def state_keys(self) -> str:
        return repr(self.key)


def window_step(
    plan: WindowPlan,
    layer: nn.Module,
    x: Any,
    args: tuple[Any, ...],
    kwargs: Any,
    ctx: _Context,
    quiet: Callable[[], AbstractContextManager[None]],
) -> Any:
    """A windowed module's call in a step: its own forward on its last input samples and
    ``x``; returns the outputs of ``x``'s time steps. ``quiet``: the context its run on the
    window goes in (the self-check's record skips those calls)."""
    what = f"{type(layer).__name__} {plan.name!r}"
    claim_call(ctx, plan.name, what, plan.how, x, args, kwargs)
    dim = plan.in_axis if plan.in_axis >= 0 else x.dim() + plan.in_axis
    hist = ctx.state_in.get(plan.key)
    if hist is not None:
        check_continues(plan.key, hist, x, dim, "as the window its next outputs read")
    h = int(hist.shape[dim]) if hist is not None else 0
    if ctx.lookahead is not None:
        return _lookahead_step(plan, layer, x, hist, h, dim, ctx, quiet)
    if x.shape[dim] == 0:
        # no new time step (a strided layer before it is between outputs): its output on a
        # zero window, for the shape of an empty one; the history stays
        if hist is not None:
            ctx.state_out[plan.key] = hist
        shape = list(x.shape)
        shape[dim] = plan.reach + 1
        x, h = x.new_zeros(shape), plan.reach + 1
        hist = None
    xe = torch.cat([hist, x], dim) if hist is not None and h else x
    out, odim = _run_on(plan, layer, xe, quiet)
    total = int(xe.shape[dim])
    if h == total:  # (the zero window above)
        return out.narrow(odim, total, 0)
    keep = min(plan.reach, total)
    ctx.state_out[plan.key] = xe.narrow(dim, total - keep, keep).clone()
    return out.narrow(odim, h, total - h)


def _run_on(
    plan: WindowPlan,
    layer: nn.Module,
    xe: Tensor,
    quiet: Callable[[], AbstractContextManager[None]],
) -> tuple[Tensor, int]:
    """The module's own forward on ``xe`` (its window and new samples): the output and its
    time axis, checked to keep the time steps as measured."""
    with quiet():
        out = type(layer).__call__(layer, xe)
    dim = plan.in_axis if plan.in_axis >= 0 else xe.dim() + plan.in_axis
    total = int(xe.shape[dim])
    if isinstance(out, Tensor):
        odim = plan.out_axis if plan.out_axis >= 0 else out.dim() + plan.out_axis
        if 0 <= odim < out.dim() and int(out.shape[odim]) == total:
            return out, odim
    got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
    raise PaddingError(
        f"StreamingModule: {type(layer).__name__} {plan.name!r} streams {plan.how}; on {total} "
        f"time steps it returned {got}, not one tensor of {total} time steps on axis "
        f"{plan.out_axis} as measured"
    )


def _lookahead_step(
    plan: WindowPlan,
    layer: nn.Module,
    x: Tensor,
    hist: Tensor | None,
    h: int,
    dim: int,
    ctx: _Context,
    quiet: Callable[[], AbstractContextManager[None]],
) -> Tensor:
    """A lookahead step: ``x`` holds the module's inputs from the span's start (on its clock)
    to the end; the window before them is in the state. Its outputs near the end read
    inputs not seen yet and are not committed (its lookahead is in the stream's delay): the
    next step runs them again. The window kept is the one before the next span's start."""
    length = int(x.shape[dim])
    rate = plan.rate if plan.rate is not None else Fraction(1)
    a_in, a_next = span_at(ctx.clocks, ctx.lookahead, rate)  # type: ignore[arg-type]
    keep = a_next - a_in
    if keep < 0 or keep > length:
        raise PaddingError(
            f"StreamingModule(lookahead=...): {type(layer).__name__} {plan.name!r} got "
            f"{length} time steps from its step {a_in}, but the stream commits its inputs up "
            f"to {a_next}: its forward pads or crops time in code the stream does not see"
        )
    if plan.block:
        return _block_step(plan, layer, x, hist, h, dim, a_in, keep, ctx, quiet)
    xe = torch.cat([hist, x], dim) if hist is not None and h else x
    if h + length == 0:
        # nothing yet on its clock: its output on a zero window, for the shape of an empty one
        shape = list(x.shape)
        shape[dim] = plan.reach + plan.ahead + 1
        out, odim = _run_on(plan, layer, x.new_zeros(shape), quiet)
        return out.narrow(odim, 0, 0)
    out, odim = _run_on(plan, layer, xe, quiet)
    done = min(plan.reach, h + keep)
    ctx.state_out[plan.key] = xe.narrow(dim, h + keep - done, done).clone()
    return out.narrow(odim, h, length)


def _block_step(
    plan: WindowPlan,
    layer: nn.Module,
    x: Tensor,
    hist: Tensor | None,
    h: int,
    dim: int,
    a_in: int,
    keep: int,
    ctx: _Context,
    quiet: Callable[[], AbstractContextManager[None]],
) -> Tensor:
    """A lookahead step of a module that reads in blocks of ``plan.block`` time steps: it
    runs on whole blocks, from the block holding the span's first sample (its earlier
    samples are in the state) to the end, the last block filled out with zeros; the
    outputs of a block not yet complete read those zeros and are not committed (the block
    is in the stream's delay), so the next step runs them again."""
    w = plan.block
    if h != a_in % w:
        raise PaddingError(
            f"step(): state {plan.key!r} holds {h} samples, but {type(layer).__name__} "
            f"{plan.name!r} reads in blocks of {w} time steps and its input's next sample is "
            f"{a_in}: {a_in % w} of its block came before; pass the state returned by the "
            "previous step"
        )
    length = int(x.shape[dim])
    xe = torch.cat([hist, x], dim) if hist is not None and h else x
    out, odim = _run_on(plan, layer, _whole_blocks(xe, dim, w), quiet)
    # the samples of the next span's first block that come before it
    a_next = a_in + keep
    done = a_next % w
    ctx.state_out[plan.key] = xe.narrow(dim, h + keep - done, done).clone()
    return out.narrow(odim, h, length)


def _whole_blocks(x: Tensor, dim: int, w: int) -> Tensor:
    """``x`` filled out with zeros on ``dim`` to whole blocks of ``w`` (one block when
    empty)."""
    n = int(x.shape[dim])
    fill = (-n) % w if n else w
    if not fill:
        return x
    shape = list(x.shape)
    shape[dim] = fill
    return torch.cat([x, x.new_zeros(shape)], dim)


def blocks_differ(
    module: nn.Module, x: Tensor, in_axis: int, out_axis: int, block: int
) -> str | None:
    """Run ``module`` as a lookahead stream runs a module that reads in blocks (on whole
    blocks from the start, the last one filled out with zeros, its outputs redone until its
    block is complete) on ``x`` in chunks of 1, 7, 3 and the rest, and compare with its
    run on all of ``x``; None where they agree, else why not."""
    steps = int(x.shape[in_axis])
    reads = f"the {block} time steps of its block"
    with torch.no_grad():
        try:
            full = module(x.clone())
            outs = []
            done = seen = 0
            for c in chunk_sizes(steps):
                seen += c
                upto = seen if seen == steps else seen - seen % block
                part = _whole_blocks(x.narrow(in_axis, done, seen - done), in_axis, block)
                if upto > done:
                    outs.append(module(part).narrow(out_axis, 0, upto - done))
                done = upto
            got = torch.cat(outs, out_axis)
        except Exception as err:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            return (
                f"its output t reads {reads}, but it raises when run on whole blocks "
                f"({type(err).__name__}: {first})"
            )
    d = mismatch(full, got)
    if d is not None:
        return (
            f"its output t reads {reads}, but run on whole blocks from the start, as a "
            f"stream runs it, its output differs from the full run's"
            + ("" if d == math.inf else f" by {d:.3g}")
        )
    return None


def window_differs(
    module: nn.Module, x: Tensor, in_axis: int, out_axis: int, window: int, ahead: int = 0
) -> str | None:
    """Run ``module`` as a stream runs a windowed module (on its last ``window`` input
    samples and each chunk of ``x``: 1, 7, 3 samples, then the rest; with ``ahead``, as a
    lookahead stream does, keeping each run's last ``ahead`` outputs for the next run to
    redo with the samples after them) and compare with its run on all of ``x``; None where
    they agree, else why not. (The caller passes a float64 copy of the module and input
    where it can: the comparison is then to rounding.)"""
    sizes = chunk_sizes(int(x.shape[in_axis]))
    reads = f"t - {window} .. t + {ahead}" if ahead else f"t - {window} .. t"
    with torch.no_grad():
        try:
            full = module(x.clone())
            outs = []
            hist = pending = x.narrow(in_axis, 0, 0)
            for i, c in enumerate(torch.split(x, sizes, in_axis)):
                span = torch.cat([pending, c], in_axis)
                h, n = int(hist.shape[in_axis]), int(span.shape[in_axis])
                xe = torch.cat([hist, span], in_axis)
                done = n if i == len(sizes) - 1 else max(0, n - ahead)
                outs.append(module(xe).narrow(out_axis, h, done))
                keep = min(window, h + done)
                hist = xe.narrow(in_axis, h + done - keep, keep)
                pending = span.narrow(in_axis, done, n - done)
            got = torch.cat(outs, out_axis)
        except Exception as err:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            return (
                f"its output t reads its inputs {reads}, but it raises when run on such a "
                f"window ({type(err).__name__}: {first})"
            )
    d = mismatch(full, got)
    if d == math.inf:
        return (
            f"its output t reads its inputs {reads}, but its output on such a window has "
            "another shape"
        )
    if d is not None:
        return (
            f"its output t reads its inputs {reads}, but run on such a window of its input, "
            f"as a stream runs it, its output differs from the full run's by {d:.3g}: it "
            "depends on where a time step sits or on how many there are (a positional "
            "encoding, a scale by the length)"
        )
    return None


def chunk_sizes(steps: int) -> list[int]:
    """Chunks of 1, 7, 3 time steps and the rest: how a measured module is run as a stream
    would run it before it streams so."""
    sizes = [k for k in (1, 7, 3) if k < steps]
    sizes.append(steps - sum(sizes))
    return sizes


def mismatch(full: Any, got: Tensor) -> float | None:
    """How far ``got`` (a module's outputs on chunks, joined) is from ``full`` (its full
    run): None within rounding (float64: 1e-9 relative; else 1e-4), inf for another shape."""
    if not isinstance(full, Tensor) or got.shape != full.shape:
        return math.inf
    rel = 1e-9 if full.dtype == torch.float64 else 1e-4
    d = float((got - full).abs().max()) if got.numel() else 0.0
    return d if d > rel * (1.0 + float(full.abs().max() if full.numel() else 0.0)) else None
