"""The stream's self-check: a probe of the whole model against its plan, before the first step.

A model may pad or slice the time axis in tensor code the runner does not see (a wrapper
module calling ``F.pad`` before its conv child, ``x[..., :-p]`` after a transposed conv):
that code runs on every chunk as written, and the stream would return a wrong length, wrong
values or a raw torch error. Before the first step for an input shape,
:func:`probe_stream` runs the model once on a random sequence of a few total strides, and
streams the same sequence in chunks of 1, 7 and the rest, recording every module's output
on both runs (forward hooks on the model's modules, removed afterwards; a reflect-padded
model's probe starts with a chunk that completes its start-up hold). The first module
(in the order they return) whose streamed outputs, concatenated on their time axis, do not
give its full-sequence output, or that raises while streaming, is named in a
:class:`padkit.PaddingError`.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from ..spec import PaddingError

__all__ = ["probe_stream"]

_HINT = (
    "Its forward runs as written on every chunk: padding or slicing the time axis there "
    "(F.pad, x[..., :-p]) is repeated per chunk, and branches it adds must emit their samples "
    "at the same times. For pads and crops, convert the model first: "
    "padkit.streaming.convert_causal(model, example) moves such pads and crops into padkit "
    "layers; StreamingModule(..., check=False) skips this check"
)


class _Recorder:
    """Forward hooks on every module of a model: each call's output, and the call stack."""

    def __init__(self, model: nn.Module, skip: set[int]) -> None:
        self.names: dict[int, str] = {}
        self.modules: dict[int, nn.Module] = {}
        for name, m in model.named_modules():
            if id(m) not in skip:
                self.names[id(m)] = name or "<model>"
                self.modules[id(m)] = m
        self.outputs: dict[int, list[Any]] = {}
        self.order: list[int] = []
        self.stack: list[int] = []
        self.handles: list[Any] = []
        self.on = False

    def __enter__(self) -> _Recorder:
        for key, m in self.modules.items():
            self.handles.append(m.register_forward_pre_hook(self._pre(key)))
            self.handles.append(m.register_forward_hook(self._post(key)))
        return self

    def __exit__(self, *exc: Any) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def _pre(self, key: int) -> Any:
        def hook(mod: nn.Module, args: Any) -> None:
            if self.on:
                self.stack.append(key)

        return hook

    def _post(self, key: int) -> Any:
        def hook(mod: nn.Module, args: Any, out: Any) -> None:
            if not self.on:
                return
            if self.stack and self.stack[-1] == key:
                self.stack.pop()
            if key not in self.outputs:
                self.order.append(key)
            value = out.detach() if isinstance(out, Tensor) else None
            self.outputs.setdefault(key, []).append(value)

        return hook


def probe_stream(stream: Any, chunk: Tensor) -> None:
    """Stream a random sequence shaped like ``chunk`` through ``stream`` and compare every
    module with the full-sequence run; raise :class:`PaddingError` naming the first module
    that streams wrongly."""
    model: nn.Module = stream.model
    axis = stream.axis if stream.axis >= 0 else chunk.dim() + stream.axis
    hop = 1
    for plan in stream._plans.values():
        if plan.kind != "convt":
            hop *= max(int(plan.stride), 1)
    hop = min(hop, 1 << 14)
    n = hop * max(3, math.ceil(24 / hop))
    sizes = [1, 7, n - 8] if n > 8 else [1, n - 1]
    # a reflect-padded model holds its input until its start-up is complete: the probe's
    # first chunk completes it, the small chunks come after
    startup = stream._startup_samples(chunk)
    if startup > 0:
        lead = hop * math.ceil(startup / hop)
        sizes = [lead, *sizes]
        n += lead
    shape = list(chunk.shape)
    shape[0] = 1
    shape[axis] = n
    gen = torch.Generator(device="cpu").manual_seed(1234)
    x = torch.randn(shape, generator=gen, dtype=torch.float64).to(chunk.dtype).to(chunk.device)
    skip = {id(stream._layer_by_name(name)) for name in [*stream._plans, *stream._rnn_plans]}
    rec = _Recorder(model, skip)
    with torch.no_grad(), rec:
        rec.on = True
        try:
            model(x)
        except Exception:  # the full run fails too: the model's own problem, not streaming's
            return
        full_out = rec.outputs
        full_order = rec.order
        rec.outputs, rec.order, rec.stack = {}, [], []
        rec.on = False
        state = stream.init_state(example=x.narrow(axis, 0, 1))
        rec.on = True
        for part in torch.split(x, sizes, dim=axis):
            rec.stack = []
            try:
                _, state = stream.step(part, state)
            except PaddingError:
                raise
            except Exception as err:  # a raw torch error inside some module's own code
                # a module that already returned a wrong stream is the cause; else the one
                # whose code raised
                _first_wrong(rec, full_out, full_order, n, sizes, final=False)
                where = rec.stack[-1] if rec.stack else None
                label = (
                    f"{type(rec.modules[where]).__name__} {rec.names[where]!r}"
                    if where is not None
                    else "the model's forward"
                )
                raise PaddingError(
                    f"StreamingModule: {label} fails on a streamed chunk of {part.shape[axis]} "
                    f"sample(s) ({type(err).__name__}: {str(err).splitlines()[0]}) although the "
                    f"full sequence runs. {_HINT}"
                ) from None
    _first_wrong(rec, full_out, full_order, n, sizes, final=True)


def _first_wrong(
    rec: _Recorder,
    full_out: dict[int, list[Any]],
    full_order: list[int],
    n: int,
    sizes: list[int],
    *,
    final: bool,
) -> None:
    """Raise naming the first module (in the order they return) whose streamed outputs so far
    are not the start of its full-sequence output (``final``: not all of it)."""
    for key in full_order:
        fulls = full_out[key]
        parts = rec.outputs.get(key, [])
        if len(fulls) != 1 or fulls[0] is None or not parts or any(p is None for p in parts):
            continue  # called several times per run, or returns no single tensor
        f = fulls[0]
        label = f"{type(rec.modules[key]).__name__} {rec.names[key]!r}"
        cands = [
            a
            for a in range(f.dim())
            if all(
                p.dim() == f.dim()
                and all(p.shape[b] == f.shape[b] for b in range(f.dim()) if b != a)
                for p in parts
            )
        ]
        if len(cands) != 1:
            continue  # no time axis to compare along (or several: ambiguous)
        a = cands[0]
        got = sum(int(p.shape[a]) for p in parts)
        want = int(f.shape[a])
        if got > want or (final and got != want):
            raise PaddingError(
                f"StreamingModule: {label} returned {got} time steps in all over "
                f"{'a probe' if final else 'the start of a probe'} of {n} samples streamed in "
                f"chunks {sizes}, where the full-sequence run returns {want}"
                f"{'' if final else f' for all {n}'}. {_HINT}"
            )
        if not f.is_floating_point() or got == 0:
            continue
        streamed = torch.cat(parts, dim=a)
        ref = f.narrow(a, 0, got)
        scale = float(ref.abs().max())
        diff = float((streamed - ref).abs().max())
        if not diff <= 1e-4 * (1.0 + scale):
            raise PaddingError(
                f"StreamingModule: {label} streams values that differ from the full run's by "
                f"{diff:.3g} (a probe of {n} samples in chunks {sizes}): its forward computes "
                "over time in code the streamer does not see, or branches it adds emit their "
                "samples at different times. " + _HINT
            )
