"""Recurrent layers (``nn.LSTM``, ``nn.GRU``, ``nn.RNN``) in a stream: their hidden state is
stream state.

A unidirectional recurrent layer is causal: its output at step ``t`` depends on the inputs up
to ``t`` only, through the hidden state it carries. Streaming it means carrying that state
from one chunk to the next, which is what a stand-in does for the duration of a step: it
runs the layer itself on the chunk from the state's ``(h, c)`` and keeps the final ``(h, c)``.

The state holds, per layer, ``"<name>.h"`` (and ``"<name>.c"`` for an LSTM) shaped
``(N, num_layers, hidden)``: batch first, like every other state entry, so that
``reset_rows``, ``torch.save`` and the exported ONNX step treat them alike (torch's own
layout ``(num_layers, N, hidden)`` is restored for the call).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..spec import PaddingError

__all__ = ["RecurrentPlan", "RecurrentStandIn", "plan_recurrent", "run_recurrent"]

_FORWARDS = frozenset([nn.LSTM.forward, nn.GRU.forward, nn.RNN.forward])
RECURRENT = (nn.LSTM, nn.GRU, nn.RNN)


@dataclass(frozen=True)
class RecurrentPlan:
    """How one recurrent layer streams: which state entries it keeps, and their sizes."""

    name: str
    lstm: bool
    batch_first: bool
    num_layers: int
    hidden: int  # size of h (proj_size when an LSTM projects)
    cell: int  # size of c (LSTM only)

    @property
    def key_h(self) -> str:
        return f"{self.name}.h"

    @property
    def key_c(self) -> str:
        return f"{self.name}.c"

    def state_keys(self) -> tuple[str, ...]:
        return (self.key_h, self.key_c) if self.lstm else (self.key_h,)

    def fresh(self, n: int, dtype: torch.dtype, device: torch.device) -> dict[str, Tensor]:
        """Zero state for ``n`` streams (torch's default initial state)."""
        out = {self.key_h: torch.zeros(n, self.num_layers, self.hidden, dtype=dtype, device=device)}
        if self.lstm:
            out[self.key_c] = torch.zeros(n, self.num_layers, self.cell, dtype=dtype, device=device)
        return out


def plan_recurrent(name: str, layer: nn.Module) -> RecurrentPlan:
    """The plan of an LSTM/GRU/RNN, or a :class:`PaddingError` saying why it cannot stream."""
    what = f"{type(layer).__name__} {name!r}"
    if type(layer).forward not in _FORWARDS:
        raise PaddingError(
            f"StreamingModule: {what} overrides forward(); streaming runs the recurrent layer "
            "itself and would skip that code"
        )
    if layer._forward_hooks or layer._forward_pre_hooks:
        raise PaddingError(
            f"StreamingModule: {what} has forward hooks; remove them to stream it (the "
            "stand-in calls the layer with the stream's hidden state)"
        )
    rnn: Any = layer
    if rnn.bidirectional:
        raise PaddingError(
            f"StreamingModule cannot stream {what}: it is bidirectional, so every output reads "
            "the whole sequence backwards from its end; only unidirectional recurrent layers "
            "are causal"
        )
    lstm = isinstance(layer, nn.LSTM)
    proj = int(getattr(rnn, "proj_size", 0) or 0)
    hidden = proj if proj > 0 else int(rnn.hidden_size)
    return RecurrentPlan(
        name, lstm, bool(rnn.batch_first), int(rnn.num_layers), hidden, int(rnn.hidden_size)
    )


class RecurrentStandIn(nn.Module):
    """Stands in for one recurrent layer during a step (the layer is not registered here)."""

    def __init__(self, runner: Any, plan: RecurrentPlan, layer: nn.Module) -> None:
        super().__init__()
        object.__setattr__(self, "_runner", runner)
        object.__setattr__(self, "_layer", layer)
        object.__setattr__(self, "plan", plan)

    _runner: Any
    _layer: nn.Module
    plan: RecurrentPlan

    def __call__(self, x: Any, hx: Any = None) -> Any:
        return self.forward(x, hx)

    def forward(self, x: Any, hx: Any = None) -> Any:
        return self._runner._run_recurrent(self.plan, self._layer, x, hx)


def _unrolled(
    plan: RecurrentPlan, rnn: Any, x: Tensor, h0: Tensor, c0: Tensor | None
) -> tuple[Tensor, Tensor, Tensor | None]:
    """The layer's recurrence written out step by step (``x`` time-major ``(T, N, C)``;
    states ``(L, N, H)``): what the exported step runs, as elementwise ops and matmuls that
    keep the batch dimension symbolic (torch's fused recurrent op exports with a fixed batch).
    """
    import torch.nn.functional as F

    seq = list(x.unbind(0))
    hs, cs = [], []
    for layer in range(plan.num_layers):
        w_ih = getattr(rnn, f"weight_ih_l{layer}")
        w_hh = getattr(rnn, f"weight_hh_l{layer}")
        b_ih = getattr(rnn, f"bias_ih_l{layer}", None) if rnn.bias else None
        b_hh = getattr(rnn, f"bias_hh_l{layer}", None) if rnn.bias else None
        w_hr = getattr(rnn, f"weight_hr_l{layer}", None)
        h = h0[layer]
        c = c0[layer] if c0 is not None else None
        out = []
        for xt in seq:
            gi = F.linear(xt, w_ih, b_ih)
            gh = F.linear(h, w_hh, b_hh)
            if plan.lstm:
                assert c is not None
                i, f, g, o = (gi + gh).chunk(4, 1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
                if w_hr is not None:
                    h = F.linear(h, w_hr)
            elif isinstance(rnn, nn.GRU):
                ir, iz, in_ = gi.chunk(3, 1)
                hr, hz, hn = gh.chunk(3, 1)
                r = torch.sigmoid(ir + hr)
                z = torch.sigmoid(iz + hz)
                n = torch.tanh(in_ + r * hn)
                h = (1 - z) * n + z * h
            else:
                h = torch.tanh(gi + gh) if rnn.nonlinearity == "tanh" else torch.relu(gi + gh)
            out.append(h)
        seq = out
        hs.append(h)
        if c is not None:
            cs.append(c)
    return torch.stack(seq, 0), torch.stack(hs, 0), (torch.stack(cs, 0) if cs else None)


def run_recurrent(
    plan: RecurrentPlan,
    layer: nn.Module,
    x: Any,
    hx: Any,
    state_in: dict[str, Tensor],
    state_out: dict[str, Tensor],
    created: dict[str, Tensor] | None,
    unroll: bool = False,
) -> tuple[Tensor, Any]:
    """One chunk through ``layer`` from the state's hidden state; writes the new state into
    ``state_out`` (``created``: where a missing entry is made, or None to refuse)."""
    what = f"{type(layer).__name__} {plan.name!r}"
    if hx is not None:
        raise PaddingError(
            f"StreamingModule: {what} was called with its own initial state hx; the stream "
            "carries the hidden state itself (call the layer as layer(x))"
        )
    if not isinstance(x, Tensor) or x.dim() != 3:
        got = f"shape {tuple(x.shape)}" if isinstance(x, Tensor) else type(x).__name__
        raise PaddingError(
            f"StreamingModule: {what} got an input of {got}; streaming needs a batched 3-d "
            "tensor (packed sequences and unbatched inputs are not streamed)"
        )
    bdim, tdim = (0, 1) if plan.batch_first else (1, 0)
    n: Any = x.shape[bdim]  # not int(): under export the batch size stays symbolic
    if all(k in state_in for k in plan.state_keys()):
        old = {k: state_in[k] for k in plan.state_keys()}
    elif created is not None:
        old = plan.fresh(n, x.dtype, x.device)
        created.update(old)
    else:
        raise PaddingError(
            f"step(): the state has no entry {plan.key_h!r} for {what}; build the state with "
            "init_state()"
        )
    h = old[plan.key_h]
    if h.shape[0] != n or tuple(h.shape[1:]) != (plan.num_layers, plan.hidden):
        raise PaddingError(
            f"step(): state {plan.key_h!r} has shape {tuple(h.shape)} but {what} needs "
            f"{(n, plan.num_layers, plan.hidden)} for a batch of {n} (batch size changed? start "
            "a new state with init_state())"
        )
    rnn: Any = layer
    if int(x.shape[tdim]) == 0:
        shape = list(x.shape)
        shape[2] = plan.hidden
        out = x.new_zeros(shape)
        for k in plan.state_keys():
            state_out[k] = old[k]
        hn: Any = tuple(old[k].transpose(0, 1) for k in plan.state_keys())
        return out, (hn if plan.lstm else hn[0])
    h0 = h.transpose(0, 1).contiguous()
    if unroll:
        if rnn.training and rnn.dropout > 0 and plan.num_layers > 1:
            raise PaddingError(
                f"StreamingModule: {what} is in train mode with dropout; call model.eval() "
                "before exporting the step"
            )
        xt = x.transpose(0, 1) if plan.batch_first else x
        c_in = old[plan.key_c].transpose(0, 1) if plan.lstm else None
        y, h1, c1 = _unrolled(plan, rnn, xt, h0, c_in)
        y = y.transpose(0, 1) if plan.batch_first else y
        state_out[plan.key_h] = h1.transpose(0, 1)
        if c1 is not None:
            state_out[plan.key_c] = c1.transpose(0, 1)
            return y, (h1, c1)
        return y, h1
    if plan.lstm:
        c0 = old[plan.key_c].transpose(0, 1).contiguous()
        out, (h1, c1) = rnn(x, (h0, c0))
        state_out[plan.key_h] = h1.transpose(0, 1)
        state_out[plan.key_c] = c1.transpose(0, 1)
        return out, (h1, c1)
    out, h1 = rnn(x, h0)
    state_out[plan.key_h] = h1.transpose(0, 1)
    return out, h1
