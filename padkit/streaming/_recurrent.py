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

A layer may be called in every form torch accepts: ``layer(x)``, ``layer(x, hx)``,
``layer(input=x, hx=hx)``, batch first or not, batched or unbatched. An ``hx`` the model
passes is the initial state of the sequence: a stream uses it where a row starts (its
sample count ``"<name>.pos"``, kept for such layers, is 0) and its carried state elsewhere,
which is what the full-sequence run computes. Packed sequences are refused (a stream's
chunks are not packed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ..spec import PaddingError

__all__ = ["RecurrentPlan", "bind_recurrent", "plan_recurrent", "run_recurrent"]

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

    @property
    def key_pos(self) -> str:
        """Samples seen per row: kept when the model passes its own initial state ``hx``."""
        return f"{self.name}.pos"

    def state_keys(self) -> tuple[str, ...]:
        return (self.key_h, self.key_c) if self.lstm else (self.key_h,)

    def fresh(
        self, n: Any, dtype: torch.dtype, device: torch.device, with_pos: bool = False
    ) -> dict[str, Tensor]:
        """Zero state for ``n`` streams (torch's default initial state); ``with_pos``: and
        the sample counts (a layer called with its own ``hx``)."""
        out = {self.key_h: torch.zeros(n, self.num_layers, self.hidden, dtype=dtype, device=device)}
        if self.lstm:
            out[self.key_c] = torch.zeros(n, self.num_layers, self.cell, dtype=dtype, device=device)
        if with_pos:
            out[self.key_pos] = torch.zeros(n, dtype=torch.int64, device=device)
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
    """What stood in for a recurrent layer before stand-ins shared their layer's class: kept
    so that pickles of a ``StreamingModule`` made then load (their stand-ins are made anew)."""


def bind_recurrent(
    plan: RecurrentPlan, layer: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[Any, Any]:
    """``(input, hx)`` of a call ``layer(*args, **kwargs)``, bound as ``nn.RNNBase.forward``
    binds them (``forward(input, hx=None)``)."""
    names = ("input", "hx")
    bound: dict[str, Any] = {}
    if len(args) > 2:
        raise TypeError(
            f"{type(layer).__name__}.forward() takes from 2 to 3 positional arguments but "
            f"{len(args) + 1} were given"
        )
    for name, value in zip(names, args):
        bound[name] = value
    for name, value in kwargs.items():
        if name not in names:
            raise TypeError(
                f"{type(layer).__name__}.forward() got an unexpected keyword argument {name!r}"
            )
        if name in bound:
            raise TypeError(
                f"{type(layer).__name__}.forward() got multiple values for argument {name!r}"
            )
        bound[name] = value
    if "input" not in bound:
        raise TypeError(
            f"{type(layer).__name__}.forward() missing 1 required positional argument: 'input'"
        )
    return bound["input"], bound.get("hx")


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
    ``state_out`` (``created``: where a missing entry is made, or None to refuse). ``hx``,
    the initial state the model passes (or None), is used for the rows that start now."""
    what = f"{type(layer).__name__} {plan.name!r}"
    if isinstance(x, nn.utils.rnn.PackedSequence):
        raise PaddingError(
            f"StreamingModule: {what} was called with a PackedSequence; a stream feeds the "
            "layer one chunk of every row at a time, so packed (variable-length) sequences are "
            "not streamed: pass a padded (N, T, C) or (T, N, C) tensor"
        )
    if not isinstance(x, Tensor) or x.dim() not in (2, 3):
        got = f"shape {tuple(x.shape)}" if isinstance(x, Tensor) else type(x).__name__
        raise PaddingError(
            f"StreamingModule: {what} got an input of {got}; streaming needs a 3-d (batched) "
            "or 2-d (unbatched) tensor, as the layer itself does"
        )
    if x.dim() == 2:  # unbatched (T, C): a batch of one, as torch runs it
        bdim = 0 if plan.batch_first else 1
        h_in = _unbatched_hx(plan, what, hx)
        out, hn = run_recurrent(
            plan, layer, x.unsqueeze(bdim), h_in, state_in, state_out, created, unroll
        )
        hn = tuple(h.squeeze(1) for h in hn) if plan.lstm else hn.squeeze(1)
        return out.squeeze(bdim), hn
    bdim, tdim = (0, 1) if plan.batch_first else (1, 0)
    n: Any = x.shape[bdim]  # not int(): under export the batch size stays symbolic
    given = _batched_hx(plan, what, hx, n)
    keys = plan.state_keys()
    if all(k in state_in for k in keys):
        old = {k: state_in[k] for k in keys}
        if given is not None:  # no count yet: the state is fresh (init_state())
            pos_in = state_in.get(plan.key_pos)
            if pos_in is None:
                h_in = old[plan.key_h]
                pos_in = torch.zeros(h_in.shape[0], dtype=torch.int64, device=h_in.device)
            old[plan.key_pos] = pos_in
    elif created is not None:
        old = plan.fresh(n, x.dtype, x.device, with_pos=given is not None)
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
    length: Any = x.shape[tdim]
    h0 = h.transpose(0, 1)
    c0 = old[plan.key_c].transpose(0, 1) if plan.lstm else None
    if given is not None:
        # the model's own initial state where a row starts, the carried state elsewhere
        pos = old[plan.key_pos]
        start = (pos == 0).view(1, -1, 1)
        h0 = torch.where(start, given[0].to(h0.dtype), h0)
        if c0 is not None:
            c0 = torch.where(start, given[1].to(c0.dtype), c0)
        state_out[plan.key_pos] = pos + length
    if int(length) == 0:
        shape = list(x.shape)
        shape[2] = plan.hidden
        out = x.new_zeros(shape)
        for k in keys:
            state_out[k] = old[k]
        if given is not None:
            state_out[plan.key_pos] = old[plan.key_pos]
        return out, ((h0, c0) if plan.lstm else h0)
    h0 = h0.contiguous()
    if unroll:
        if rnn.training and rnn.dropout > 0 and plan.num_layers > 1:
            raise PaddingError(
                f"StreamingModule: {what} is in train mode with dropout; call model.eval() "
                "before exporting the step"
            )
        xt = x.transpose(0, 1) if plan.batch_first else x
        y, h1, c1 = _unrolled(plan, rnn, xt, h0, c0)
        y = y.transpose(0, 1) if plan.batch_first else y
        state_out[plan.key_h] = h1.transpose(0, 1)
        if c1 is not None:
            state_out[plan.key_c] = c1.transpose(0, 1)
            return y, (h1, c1)
        return y, h1
    if plan.lstm:
        assert c0 is not None
        out, (h1, c1) = rnn(x, (h0, c0.contiguous()))
        state_out[plan.key_h] = h1.transpose(0, 1)
        state_out[plan.key_c] = c1.transpose(0, 1)
        return out, (h1, c1)
    out, h1 = rnn(x, h0)
    state_out[plan.key_h] = h1.transpose(0, 1)
    return out, h1


def _batched_hx(plan: RecurrentPlan, what: str, hx: Any, n: Any) -> tuple[Tensor, ...] | None:
    """The initial state the model passes, as ``(h0,)`` or ``(h0, c0)`` in torch's layout
    ``(num_layers, N, size)``; None when it passes none."""
    if hx is None:
        return None
    parts = tuple(hx) if plan.lstm and isinstance(hx, (tuple, list)) else (hx,)
    want = 2 if plan.lstm else 1
    sizes = (plan.hidden, plan.cell)
    if len(parts) != want or not all(isinstance(p, Tensor) for p in parts):
        raise PaddingError(
            f"StreamingModule: {what} was called with hx={type(hx).__name__}; "
            + ("an LSTM takes hx=(h_0, c_0)" if plan.lstm else "it takes hx=h_0, a tensor")
        )
    for i, p in enumerate(parts):
        if p.dim() != 3 or p.shape[0] != plan.num_layers or p.shape[2] != sizes[i]:
            raise PaddingError(
                f"StreamingModule: {what} was called with an initial state of shape "
                f"{tuple(p.shape)}; it needs {(plan.num_layers, n, sizes[i])}"
            )
    return tuple(p.expand(plan.num_layers, n, p.shape[2]) for p in parts)


def _unbatched_hx(plan: RecurrentPlan, what: str, hx: Any) -> Any:
    if hx is None:
        return None
    if plan.lstm and isinstance(hx, (tuple, list)):
        return tuple(p.unsqueeze(1) if isinstance(p, Tensor) else p for p in hx)
    return hx.unsqueeze(1) if isinstance(hx, Tensor) else hx
