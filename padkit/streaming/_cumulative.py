"""Cumulative modules in a causal stream: a module whose output ``t`` reads every earlier
input (a cumulative layer norm: running sums over time divided by a count of the steps) is
run on each chunk with its cumulative ops carried over from the previous chunks.

While such a module's forward runs on a chunk of ``L`` time steps after ``n`` seen:

* ``torch.cumsum`` (or ``Tensor.cumsum``) along an axis of length ``L`` adds the last value
  of the same call's result on the previous chunk (kept in the state as
  ``"<name>.cum<k>"``, ``k`` counting the module's cumulative calls per step) to its first
  step, so that it continues the full run's running sum;
* ``torch.arange`` of ``L`` values counts positions: it starts ``n`` steps further on, where
  the full run's positions are.

Whether an op acts along time is known by its length only, so a module is streamed this way
only after it was run so on its recorded input, in chunks of 1, 7, 3 and the rest, and in
chunks of each new chunk length a stream gives it, and agreed with its full run
(:func:`cumulative_differs`); one that does not is refused with that measurement.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from ..spec import PaddingError
from ._hold import held_count
from ._state import _Context, claim_call
from ._window import chunk_sizes, mismatch

__all__ = [
    "CumulativeMode",
    "CumulativePlan",
    "carried_trace",
    "cumulative_differs",
    "cumulative_step",
    "run_cumulative",
    "trace_carried",
]


@dataclass
class CumulativePlan:
    """A module streamed with its cumulative ops carried (module docstring). ``probe``: its
    input recorded in the self-check's full run, for the check at each new chunk length."""

    name: str
    in_axis: int
    out_axis: int
    probe: Tensor
    checked: set[int] = field(default_factory=set)  # chunk lengths checked (or refused)
    # its forward traced (``torch.fx``) with the cumulative calls redirected, run without
    # the mode: None until tried, False where it does not trace or differs (not pickled)
    traced: Any = field(default=None, compare=False, repr=False)
    # the module's plain attributes when it was traced (a trace holds them as constants),
    # and the modules they are read from
    settings: Any = field(default=None, compare=False, repr=False)
    watched: Any = field(default=None, compare=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["traced"] = None  # generated code: traced again after a copy or a load
        state["watched"] = None
        return state

    @property
    def key_pos(self) -> str:
        return f"{self.name}.seen"

    def key_cum(self, k: int) -> str:
        return f"{self.name}.cum{k}"

    @property
    def how(self) -> str:
        """How the module streams, for messages."""
        return "with its running sums carried"

    @property
    def state_keys(self) -> str:
        return f"{self.key_pos!r}, {self.key_cum(0)!r}, ..."


_CUMSUM, _TENSOR_CUMSUM, _ARANGE = torch.cumsum, Tensor.cumsum, torch.arange
# the handler of the traced call running in this thread (None: the calls are torch's own)
_LOCAL = threading.local()


def _carried_cumsum(*args: Any, **kwargs: Any) -> Any:
    handler = getattr(_LOCAL, "handler", None)
    if handler is None:
        return _CUMSUM(*args, **kwargs)
    return handler._cumsum(_CUMSUM, args, dict(kwargs))


def _carried_arange(*args: Any, **kwargs: Any) -> Any:
    handler = getattr(_LOCAL, "handler", None)
    if handler is None:
        return _ARANGE(*args, **kwargs)
    return handler._arange(_ARANGE, args, dict(kwargs))


def trace_carried(module: nn.Module) -> Callable[..., Any] | None:
    """``module``'s forward traced with ``torch.fx``, its ``cumsum`` and ``arange`` calls
    sent to the running handler: a function of ``(module, x)`` that runs the ops directly
    (the mode sends every op through Python); None where the forward does not trace."""
    try:
        gm = torch.fx.symbolic_trace(module)
    except Exception:  # data-dependent control flow, untraceable calls: the mode serves
        return None
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is _CUMSUM:
            node.target = _carried_cumsum
        elif node.op == "call_method" and node.target == "cumsum":
            node.op, node.target = "call_function", _carried_cumsum
        elif node.op == "call_function" and node.target is _ARANGE:
            node.target = _carried_arange
    gm.recompile()
    fn: Callable[..., Any] = type(gm).forward  # run with the live module as ``self``
    return fn


class CumulativeMode(TorchFunctionMode):
    """Carries ``cumsum`` and offsets ``arange`` for one call of a cumulative module on a
    chunk of ``length`` time steps after ``seen`` (module docstring). ``carry_in`` and
    ``carry_out``: the last value of each cumulative call, by its order in the call."""

    def __init__(self, length: int, seen: int, carry_in: list[Tensor | None]) -> None:
        super().__init__()
        self.length, self.seen = length, seen
        self.carry_in = carry_in
        self.carry_out: list[Tensor] = []

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        if func is _CUMSUM or func is _TENSOR_CUMSUM:
            return self._cumsum(func, args, dict(kwargs or {}))
        if func is _ARANGE:
            return self._arange(func, args, dict(kwargs or {}))
        return func(*args, **(kwargs or {}))

    def _cumsum(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        t = args[0]
        dim = args[1] if len(args) > 1 else kwargs.pop("dim", None)
        dtype = kwargs.pop("dtype", None)
        if not isinstance(t, Tensor) or not isinstance(dim, int) or kwargs or len(args) > 2:
            return func(*args, **({"dim": dim} if dim is not None else {}), dtype=dtype, **kwargs)
        d = dim if dim >= 0 else t.dim() + dim
        if not 0 <= d < t.dim() or int(t.shape[d]) != self.length or self.length == 0:
            return func(t, dim, dtype=dtype)
        k = len(self.carry_out)
        carry = self.carry_in[k] if k < len(self.carry_in) else None
        if dtype is not None:
            t = t.to(dtype)
        if carry is not None:
            t = t.clone()
            t.narrow(d, 0, 1).add_(carry.to(t.dtype))
        out = func(t, dim)
        self.carry_out.append(out.narrow(d, self.length - 1, 1).clone())
        return out

    def _arange(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        pos = list(args)
        if len(pos) == 1 and "end" not in kwargs:
            start, end, step = 0, pos[0], kwargs.pop("step", 1)
        elif len(pos) <= 3:
            pos += [kwargs.pop(n) for n in ("start", "end", "step")[len(pos) :] if n in kwargs]
            if len(pos) < 2:
                return func(*args, **kwargs)
            start, end = pos[0], pos[1]
            step = pos[2] if len(pos) > 2 else 1
        else:
            return func(*args, **kwargs)
        numbers = all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in (start, end, step)
        )
        count = max(0, math.ceil((end - start) / step)) if numbers and step != 0 else -1
        if count == self.length and self.seen:
            start, end = start + self.seen * step, end + self.seen * step
        return func(start, end, step, **kwargs)


def run_cumulative(
    module: nn.Module,
    x: Tensor,
    length: int,
    seen: int,
    carry_in: list[Tensor | None],
    traced: Any = None,
) -> tuple[Any, list[Tensor]]:
    """``module(x)`` on a chunk of ``length`` time steps after ``seen``, its cumulative ops
    carried (through ``traced``, from :func:`trace_carried`, where given; else under the
    mode); returns its output and the carries for the next chunk."""
    mode = CumulativeMode(length, seen, carry_in)
    if traced:
        before = getattr(_LOCAL, "handler", None)
        _LOCAL.handler = mode
        try:
            out = traced(module, x)
        finally:
            _LOCAL.handler = before
        return out, mode.carry_out
    with mode:
        out = module(x)
    return out, mode.carry_out


def cumulative_differs(
    module: nn.Module,
    x: Tensor,
    in_axis: int,
    out_axis: int,
    sizes: list[int],
    traced: Any = None,
) -> str | None:
    """Run ``module`` on ``x`` in chunks of ``sizes`` as a stream runs a cumulative module
    and compare with its run on all of ``x``; None where they agree, else why not."""
    with torch.no_grad():
        try:
            full = module(x.clone())
            outs: list[Any] = []
            seen = 0
            carry: list[Tensor] = []
            for c in torch.split(x, sizes, in_axis):
                n = int(c.shape[in_axis])
                carry_in = list[Tensor | None](carry)
                out, carry_next = run_cumulative(module, c, n, seen, carry_in, traced)
                outs.append(out)
                carry, seen = carry_next, seen + n
            got = torch.cat(outs, out_axis)
        except Exception as err:  # the module refuses a chunk
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            return f"run on chunks with its running sums carried, it raises ({first})"
    d = mismatch(full, got)
    if d == math.inf:
        return "run on chunks with its running sums carried, its output has another shape"
    if d is not None:
        return (
            f"run on chunks of {sizes[:4]} samples with its running sums (torch.cumsum) "
            f"carried and its positions (torch.arange) offset, its output differs from the "
            f"full run's by {d:.3g}: it keeps earlier time steps in another way (a recurrence, "
            "a shift, a count not made by torch.arange), which the stream does not carry"
        )
    return None


def cumulative_step(
    plan: CumulativePlan,
    layer: nn.Module,
    x: Any,
    args: tuple[Any, ...],
    kwargs: Any,
    ctx: _Context,
    quiet: Callable[[], AbstractContextManager[None]],
) -> Any:
    """A cumulative module's call in a step: its own forward on ``x`` with its running sums
    carried from the state and its positions offset by the time steps seen. ``quiet``: the
    context its check at a new chunk length goes in (the self-check's record skips it)."""
    what = f"{type(layer).__name__} {plan.name!r}"
    claim_call(ctx, plan.name, what, plan.how, x, args, kwargs)
    dim = plan.in_axis if plan.in_axis >= 0 else x.dim() + plan.in_axis
    length = int(x.shape[dim])
    seen_t = ctx.state_in.get(plan.key_pos)
    seen = int(seen_t) if isinstance(seen_t, Tensor) and seen_t.numel() == 1 else 0
    carry: list[Tensor | None] = []
    while plan.key_cum(len(carry)) in ctx.state_in:
        carry.append(ctx.state_in[plan.key_cum(len(carry))])
    if plan.traced and settings(plan.watched) != plan.settings:
        plan.traced = None  # an attribute the trace read as a constant may have changed
    if plan.traced is None:  # (also a copied or loaded stream: traced again, and checked)
        plan.traced = carried_trace(layer, plan.probe, plan.in_axis, plan.out_axis)
        plan.watched = [m for _, m in layer.named_modules()]
        plan.settings = settings(plan.watched)
    if length == 0:  # no new time step: an empty output of its shape, the state as it was
        shape = list(x.shape)
        shape[dim] = 1
        out, _ = run_cumulative(layer, x.new_zeros(shape), 1, seen, carry, plan.traced)
        odim = plan.out_axis if plan.out_axis >= 0 else out.dim() + plan.out_axis
        return out.narrow(odim, 1, 0)
    if length not in plan.checked and not ctx.shape_only:
        with quiet():
            check_length(plan, layer, length, x)
    out, carry_out = run_cumulative(layer, x, length, seen, carry, plan.traced)
    ctx.state_out[plan.key_pos] = held_count(seen + length)
    for k, c in enumerate(carry_out):
        ctx.state_out[plan.key_cum(k)] = c
    return out


def check_length(plan: CumulativePlan, layer: nn.Module, length: int, chunk: Tensor) -> None:
    """Before a cumulative module's first chunk of ``length`` time steps: its recorded input
    (in ``chunk``'s dtype and device) streamed in such chunks must give its full run (an op
    of that length that does not act along time would be carried or offset wrongly)."""
    x = plan.probe.to(dtype=chunk.dtype, device=chunk.device)
    steps = int(x.shape[plan.in_axis])
    reps = max(1, math.ceil(3 * length / max(steps, 1)))
    if reps > 1:
        x = torch.cat([x] * reps, plan.in_axis)
    steps = int(x.shape[plan.in_axis])
    sizes = [length] * (steps // length) + ([steps % length] if steps % length else [])
    why = cumulative_differs(layer, x, plan.in_axis, plan.out_axis, sizes, plan.traced)
    if why is not None and plan.traced:  # the trace is wrong here: the mode, checked anew
        plan.traced = False
        plan.checked.clear()
        why = cumulative_differs(layer, x, plan.in_axis, plan.out_axis, sizes)
    if len(plan.checked) >= 256:
        plan.checked.clear()
    plan.checked.add(length)
    if why is not None:
        raise PaddingError(
            f"StreamingModule cannot stream {type(layer).__name__} {plan.name!r} on chunks "
            f"giving it {length} time steps: {why}"
        )


def carried_trace(module: nn.Module, probe: Tensor, in_axis: int, out_axis: int) -> Any:
    """:func:`trace_carried` of ``module`` where it traces and its recorded input ``probe``
    streamed through the trace in chunks of 1, 7, 3 and the rest gives its full run; else
    False (the mode serves)."""
    traced = trace_carried(module)
    if traced is None:
        return False
    sizes = chunk_sizes(int(probe.shape[in_axis]))
    if cumulative_differs(module, probe, in_axis, out_axis, sizes, traced) is not None:
        return False
    return traced


_PLAIN = (int, float, bool, str, type(None))


def settings(modules: list[nn.Module]) -> tuple[Any, ...]:
    """The plain (number, string, bool, None) attributes of ``modules`` (a module and its
    submodules), which a ``torch.fx`` trace of its forward holds as constants."""
    return tuple(
        (i, key, value)
        for i, m in enumerate(modules)
        for key, value in m.__dict__.items()
        if isinstance(value, _PLAIN)
    )
