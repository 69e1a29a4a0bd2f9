"""The stream's self-check: what the model's modules compute over time, measured, and a probe
of the whole model against its plan, before the first step for an input shape.

A model may pad or slice the time axis in tensor code the runner does not see (a wrapper
module calling ``F.pad`` before its conv child, ``x[..., :-p]`` after a transposed conv), or
hold modules that mix time steps (attention or a norm over the whole sequence, written by
hand): that code runs on every chunk as written, and the stream would return a wrong length,
wrong values or a raw torch error. :func:`probe_stream` does, on a random sequence of a few
total strides (a length the model accepts: when the model refuses one, longer ones are
tried):

1. a full-sequence run, recording every module's inputs and outputs (forward hooks on the
   model's modules, removed afterwards), and a second at another length, which tells each
   tensor's time axis (the axis whose size follows the sequence length);
2. the measurement of each leaf module that is not elementwise (an unknown module, a
   channel-wise one that could be applied along time, one declared in ``allow=``): on a
   float64 copy where it can make one, its input at one time step is perturbed, and the
   outputs that change are recorded. A module whose output ``t`` depends on its input ``t``
   only acts on each time step on its own and streams as written; any other is refused with
   the dependency measured ("output 0 depends on input 19"); one that cannot be measured
   and that no list or ``allow=`` names is a question to the user, naming it;
3. (``check=True``) the same sequence streamed in chunks of 1, 7 and the rest (then
   :meth:`~padkit.streaming.StreamingModule.flush` in lookahead mode, whose steps' outputs
   are compared where they are final), recording every module's outputs. The first module
   (in the order they return) whose streamed outputs do not give its full-sequence output,
   or that raises while streaming, is named in a :class:`padkit.PaddingError`, with the
   difference and what a measurement of it finds.

The model's parameters and buffers are the same tensors, with the same values, after the
probe as before it (BatchNorm running statistics included).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from itertools import pairwise
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils._pytree import tree_flatten, tree_unflatten

from ..recognise import padding_pairs
from ..spec import PaddingError
from ._cumulative import cumulative_differs
from ._window import LONG_WINDOW_PROBE, blocks_differ, chunk_sizes, window_differs

__all__ = ["ModelRaised", "model_raised", "probe_lengths", "probe_stream", "unchanged"]

_HINT = (
    "Its forward runs as written on every chunk: padding or slicing the time axis there "
    "(F.pad, x[..., :-p]) is repeated per chunk, and branches it adds must emit their samples "
    "at the same times. For pads and crops, convert the model first: "
    "padkit.streaming.convert_causal(model, example{}) moves such pads and crops into padkit "
    "layers; StreamingModule(..., check=False) skips this check"
)


def _hint(stream: Any) -> str:
    """:data:`_HINT`, with the input's time axis where it is not the last."""
    axis = getattr(stream, "axis", -1)
    return _HINT.format("" if axis == -1 else f", input_axis={axis}")


_AMBIGUOUS = -1  # several axes of a tensor follow the sequence length


# ----------------------------------------------------------------------------- model errors


class ModelRaised(PaddingError):
    """The model's own code raised while the stream ran it: names the deepest module whose
    forward raised and the chunk length it was given."""

    def __init__(self, message: str, label: str, error: BaseException, length: int) -> None:
        super().__init__(message)
        self.label = label
        self.error = error
        self.length = length


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


def raiser(err: BaseException, names: dict[int, str]) -> tuple[str | None, Any]:
    """The deepest module (by ``names``: id to label) whose code is on ``err``'s traceback,
    and the first tensor it was called with (None where none is found)."""
    found: tuple[str | None, Any] = (None, None)
    tb = err.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        try:
            local = frame.f_locals
        except Exception:  # pragma: no cover - a frame whose locals cannot be read
            local = {}
        owner = local.get("self")
        if owner is not None and id(owner) in names:
            code = frame.f_code
            argnames = code.co_varnames[1 : code.co_argcount + 1 + bool(code.co_flags & 4)]
            first = None
            for arg in argnames:
                value = local.get(arg)
                if isinstance(value, (tuple, list)):
                    value = next((v for v in value if isinstance(v, Tensor)), None)
                if isinstance(value, Tensor):
                    first = value
                    break
            found = (names[id(owner)], first)
        tb = tb.tb_next
    return found


def model_raised(
    err: BaseException, names: dict[int, str], model: nn.Module, length: int, where: str
) -> ModelRaised:
    """The padkit error for ``err``, raised by the model's code on a run of ``length``
    samples (``where``: what ran it, e.g. ``"step()"``)."""
    label, first = raiser(err, names)
    if label is None:
        what = f"{type(model).__name__} '<model>'"
    else:
        mod = _get(model, label)
        what = f"{type(mod).__name__} {label!r}" if mod is not None else repr(label)
    shape = f" (its input: shape {tuple(first.shape)})" if isinstance(first, Tensor) else ""
    return ModelRaised(
        f"{where}: {what} raised {_first_line(err)} on a chunk of {length} sample(s){shape}",
        what,
        err,
        length,
    )


def _get(model: nn.Module, label: str) -> nn.Module | None:
    if label == "<model>":
        return model
    try:
        return model.get_submodule(label)
    except AttributeError:
        return None


def probe_lengths(start: int, hop: int, minimum: int, also: int = 0) -> list[int]:
    """Lengths to try, shortest first, when a model refuses ``start``: multiples of ``hop``
    from ``minimum`` (derived from the model's windows) doubling, and multiples of ``also``
    (a chunk length the caller was given)."""
    hop = max(hop, 1)
    base = hop * max(1, math.ceil(max(start, minimum, 1) / hop))
    out = [start, base, base + hop]
    n = base
    for _ in range(6):
        n *= 2
        out.append(n)
    if also > 0:
        m = also * max(1, math.ceil(max(start, minimum) / also))
        out += [m, also, 2 * m, 4 * m]
    seen: list[int] = []
    for v in out:
        if v > 0 and v not in seen and v <= 1 << 16:
            seen.append(v)
    return seen


# ----------------------------------------------------------------------------- parameters


@contextmanager
def unchanged(model: nn.Module, buffers_only: bool = False) -> Iterator[None]:
    """Every parameter and buffer of ``model`` (``buffers_only``: every buffer) is,
    afterwards, the tensor it was before, holding the values it held (a probe that updates
    running statistics, counters or caches in its forward leaves no trace)."""
    saved: list[tuple[dict[str, Any], str, Any, Tensor]] = []
    for m in model.modules():
        tables = (m._buffers,) if buffers_only else (m._parameters, m._buffers)
        for table in tables:
            for k, t in table.items():
                if isinstance(t, Tensor):
                    saved.append((table, k, t, t.detach().clone()))
    try:
        yield
    finally:
        with torch.no_grad():
            for table, k, t, value in saved:
                table[k] = t
                if t.shape != value.shape:
                    t.data = value
                elif not torch.equal(t, value):
                    t.copy_(value)


# ----------------------------------------------------------------------------- recording


def _length(obj: Any, axis: int) -> int | None:
    """The length on ``axis`` of the first tensor in ``obj`` (None: none has the axis)."""
    xs = [v for v in _tensors(obj) if isinstance(v, Tensor)]
    return int(xs[0].shape[axis]) if xs and xs[0].dim() > axis else None


def _reshapes(call: _Call) -> bool:
    """Whether a module call returns another shape than its first input's."""
    ins = [v for v in _tensors((call.args, call.kwargs)) if isinstance(v, Tensor)]
    outs = [v for v in _tensors(call.out) if isinstance(v, Tensor)]
    return not ins or not outs or ins[0].shape != outs[0].shape


def _tensors(obj: Any) -> list[Any]:
    leaves, _ = tree_flatten(obj)
    return leaves


def _clone(obj: Any) -> Any:
    leaves, spec = tree_flatten(obj)
    return tree_unflatten(
        [v.detach().clone() if isinstance(v, Tensor) else v for v in leaves], spec
    )


class _Call:
    """One module call: its inputs (full runs), output, and where it sits in the run."""

    __slots__ = ("args", "enter", "exit", "kwargs", "out")

    def __init__(self, args: Any, kwargs: Any, enter: int) -> None:
        self.args, self.kwargs, self.enter = args, kwargs, enter
        self.out: Any = None
        self.exit = -1


class _Recorder:
    """Forward hooks on the model's modules: each call's inputs (``inputs``) and output, the
    order modules return in, and the stack of modules running (the deepest that raised)."""

    def __init__(self, model: nn.Module, streamed: set[int], runner: Any = None) -> None:
        # the runner's attributes: ``_unrecorded`` is set while a windowed module runs on its
        # history and the chunk (its calls there cover more time steps than the chunk's) and
        # while a cumulative module is checked at a new chunk length
        self.runner_attrs: dict[str, Any] = runner.__dict__ if runner is not None else {}
        self.names: dict[int, str] = {}
        self.modules: dict[int, nn.Module] = {}
        for name, m in model.named_modules():
            self.names[id(m)] = name or "<model>"
            self.modules[id(m)] = m
        self.streamed = streamed
        self.calls: dict[int, list[_Call]] = {}
        self.order: list[int] = []
        self.stack: list[tuple[int, _Call]] = []
        self.handles: list[Any] = []
        self.on = False
        self.inputs = False  # record inputs too (full runs)
        self.counter = 0

    def reset(self, inputs: bool) -> None:
        self.calls, self.order, self.stack = {}, [], []
        self.inputs = inputs
        self.counter = 0

    def __enter__(self) -> _Recorder:
        for key, m in self.modules.items():
            self.handles.append(m.register_forward_pre_hook(self._pre(key), with_kwargs=True))
            self.handles.append(m.register_forward_hook(self._post(key)))
        return self

    def __exit__(self, *exc: Any) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()

    def _pre(self, key: int) -> Any:
        def hook(mod: nn.Module, args: Any, kwargs: Any) -> None:
            if not self.on or (key in self.streamed and not self.inputs):
                return None
            if self.runner_attrs.get("_unrecorded"):
                return None
            self.counter += 1
            if self.inputs:
                call = _Call(_clone(args), _clone(kwargs), self.counter)
            else:
                call = _Call(None, None, self.counter)
            self.stack.append((key, call))
            return None

        return hook

    def _post(self, key: int) -> Any:
        def hook(mod: nn.Module, args: Any, out: Any) -> None:
            if not self.on or not self.stack or self.stack[-1][0] != key:
                return
            _, call = self.stack.pop()
            self.counter += 1
            call.exit = self.counter
            call.out = _clone(out)
            if key not in self.calls:
                self.order.append(key)
            self.calls.setdefault(key, []).append(call)

        return hook

    def label(self, key: int) -> str:
        return f"{type(self.modules[key]).__name__} {self.names[key]!r}"


# ----------------------------------------------------------------------------- time axes


def _axes(a: Any, b: Any) -> list[int | None]:
    """Per tensor leaf of ``a`` and ``b`` (one call at two sequence lengths): the axis whose
    size differs (the time axis), None where none does, ``_AMBIGUOUS`` where several do."""
    la, lb = _tensors(a), _tensors(b)
    out: list[int | None] = []
    for x, y in zip(la, lb):
        if not isinstance(x, Tensor) or not isinstance(y, Tensor) or x.dim() != y.dim():
            out.append(None)
            continue
        diff = [i for i in range(x.dim()) if x.shape[i] != y.shape[i]]
        out.append(diff[0] if len(diff) == 1 else (None if not diff else _AMBIGUOUS))
    out += [None] * (len(la) - len(out))
    return out


# ----------------------------------------------------------------------------- measurement


class _Finding:
    """What a measurement found: a dependency across time steps (``q`` depends on ``p``), or
    another reason the module does not act on each time step (``text``)."""

    def __init__(
        self, text: str, q: int = -1, p: int = -1, steps: int = 0, size: float = 0.0
    ) -> None:
        self.text, self.q, self.p, self.steps, self.size = text, q, p, steps, size
        self.back: _Finding | None = None  # a dependency on an earlier input too
        # within a window: output t reads inputs t - window .. t + ahead_window (earlier
        # inputs only when ahead_window is 0)
        self.window: int | None = None
        self.ahead_window = 0
        # in blocks: output t reads the inputs of the block of ``block`` steps holding t
        self.block = 0
        # output steps per input step (an upsampler's outputs are counted per input step)
        self.up = 1


def _float64_copy(module: nn.Module) -> nn.Module | None:
    try:
        dup = copy.deepcopy(module)
        return dup.double()
    except Exception:  # old-style weight norm's computed weight, foreign objects
        return None


def measure(
    module: nn.Module,
    args: Any,
    kwargs: Any,
    in_axes: list[int | None],
    out_axes: list[int | None],
    *,
    lookahead: int | None = None,
    behind: int | None = None,
) -> _Finding | str | None:
    """Whether ``module`` acts on each time step on its own, measured on its recorded input
    (``in_axes``/``out_axes``: the time axis of each tensor leaf of its input and output).

    Returns None (output ``t`` depends on input ``t`` only), a :class:`_Finding`, or a
    string saying why it cannot be measured. ``lookahead``: report only dependencies that
    reach more than that many steps ahead, or more than ``behind`` steps back (a module with
    streamed layers, which read back by design: None reports none back); without it, any
    other than output ``t`` on input ``t``.
    """
    leaves, spec = tree_flatten((args, kwargs))
    timed = [(i, a) for i, a in enumerate(in_axes) if a is not None and i < len(leaves)]
    if any(a == _AMBIGUOUS for _, a in timed):
        return "several axes of its input follow the sequence length"
    if not timed:
        return None  # no input along time: the same on every chunk
    if any(not leaves[i].is_floating_point() for i, _ in timed):
        return "its input along time is not floating point"
    lengths = {int(leaves[i].shape[a]) for i, a in timed}
    if len(lengths) != 1:
        return "its inputs along time have different lengths"
    (steps,) = lengths
    if steps < 2:
        return "its input has one time step"
    dup = _float64_copy(module)
    run = dup if dup is not None else module
    if dup is not None:
        leaves = [
            v.double() if isinstance(v, Tensor) and v.is_floating_point() else v for v in leaves
        ]
    rel = 1e-9 if dup is not None else 1e-5

    def call(values: list[Any]) -> list[Any]:
        a, k = tree_unflatten([v.clone() if isinstance(v, Tensor) else v for v in values], spec)
        with torch.no_grad():
            return _tensors(run(*a, **k))

    try:
        base = call(leaves)
        again = call(leaves)
    except Exception as err:
        return f"it raises on its own recorded input ({_first_line(err)})"
    if len(base) != len(out_axes) or len(again) != len(base):
        return "its output's structure differs between runs"
    tol: list[float] = []
    for o, o2 in zip(base, again):
        if not isinstance(o, Tensor) or not o.is_floating_point() or o.numel() == 0:
            tol.append(math.inf)
            continue
        t = rel * (1.0 + float(o.abs().max()))
        if o.shape != o2.shape or float((o - o2).abs().max()) > t:
            return "its output differs between two runs on the same input (it is random)"
        tol.append(t)
    # outputs per input step: an upsampler (each input step becomes ``up`` output steps)
    up = 1
    for j, ax in enumerate(out_axes):
        o = base[j]
        if ax == _AMBIGUOUS and tol[j] != math.inf:
            return "several axes of its output follow the sequence length"
        if ax is not None and ax != _AMBIGUOUS and int(o.shape[ax]) != steps:
            n_out = int(o.shape[ax])
            if n_out % steps == 0 and n_out // steps >= 2 and up in (1, n_out // steps):
                up = n_out // steps
                continue
            return _Finding(
                f"its output has {int(o.shape[ax])} time steps for its input's {steps}: it "
                "resamples or pools time"
            )
    gen = torch.Generator(device="cpu").manual_seed(4321)
    positions = sorted({p for p in (0, 1, steps // 2, steps - 2, steps - 1) if 0 <= p < steps})
    ahead: _Finding | None = None  # the farthest output that reads a later input
    back: _Finding | None = None  # the farthest output that reads an earlier one
    reach: dict[int, int] = {}  # per perturbed input: the farthest later output it moves
    early: dict[int, int] = {}  # per perturbed input: the farthest earlier output it moves
    for p in positions:
        reach[p] = early[p] = 0
        moved = list(leaves)
        for i, a in timed:
            v = moved[i].clone()
            shape = list(v.shape)
            shape[a] = 1
            noise = torch.randn(shape, generator=gen, dtype=torch.float64).to(v.dtype)
            v.narrow(a, p, 1).add_(noise.to(v.device))
            moved[i] = v
        try:
            outs = call(moved)
        except Exception as err:
            return f"it raises on a perturbed input ({_first_line(err)})"
        for j, (o0, o1) in enumerate(zip(base, outs)):
            if tol[j] == math.inf or not isinstance(o1, Tensor) or o1.shape != o0.shape:
                continue
            d = (o1 - o0).abs()
            ax = out_axes[j]
            if ax is None:
                if float(d.max()) > tol[j]:
                    return _Finding(
                        f"its output of shape {tuple(o0.shape)} has no time axis and changes "
                        f"when input {p} (of {steps} time steps) changes: it pools over time",
                        p=p,
                        steps=steps,
                    )
                continue
            per_t = d.movedim(ax, 0).reshape(steps, -1).amax(1)
            for q in (per_t > tol[j]).nonzero().flatten().tolist():
                if q == p:
                    continue  # (an upsampler's outputs of one input step count as one step)
                if q > p:
                    reach[p] = max(reach[p], q - p)
                else:
                    early[p] = max(early[p], p - q)
                if lookahead is not None:
                    if q < p and p - q <= lookahead:
                        continue
                    if q > p and (behind is None or q - p <= behind):
                        continue  # its streamed layers read back by design
                found = _Finding("", q, p, steps, float(per_t[q]))
                if q < p and (ahead is None or p - q > ahead.p - ahead.q):
                    ahead = found
                elif q > p and (back is None or q - p > back.q - back.p):
                    back = found
    if ahead is not None and back is not None:
        ahead.back = back
    for f in (ahead, back):
        if f is not None:
            f.up = up
    found_any = ahead or back
    if found_any is not None and lookahead is None and up == 1:
        # a window: every perturbed input moves the outputs up to the same distance after it
        # and the same distance before it (where the sequence has room for them), and, from
        # the middle on, stops well before either end of the sequence
        window, later = max(reach.values()), max(early.values())
        mid = steps // 2
        if (
            all(r == window for p, r in reach.items() if p + window < steps)
            and all(r == later for p, r in early.items() if p - later >= 0)
            and mid + window < steps - 1
            and mid - later > 0
            and 4 * (window + later) < steps
        ):
            found_any.window, found_any.ahead_window = window, later
        else:
            # blocks: output t reads the inputs of the block of ``w`` steps that holds t
            # (attention within fixed windows): input p moves outputs from its block's start
            # to its end, and no other
            w = reach[0] + 1 if 0 in reach else 0
            if (
                w >= 2
                and 2 * w <= steps
                and all(
                    reach[p] == min(w - 1 - p % w, steps - 1 - p) and early[p] == p % w
                    for p in positions
                )
            ):
                found_any.block = w
    if ahead is not None or back is not None or lookahead is not None:
        return ahead or back
    # a module run on a chunk sees those time steps alone: its output there must be the full
    # run's (a positional encoding, or a scale by the length, differs)
    for lo, hi in sorted({(1, steps), (0, steps - 1), (steps // 2, steps // 2 + 1)}):
        part = list(leaves)
        for i, a in timed:
            part[i] = part[i].narrow(a, lo, hi - lo)
        try:
            outs = call(part)
        except Exception:  # a module that needs more steps: the streamed probe tells
            continue
        for j, (o0, o1) in enumerate(zip(base, outs)):
            ax = out_axes[j]
            if tol[j] == math.inf or ax is None or not isinstance(o1, Tensor):
                continue
            ref = o0.narrow(ax, lo * up, (hi - lo) * up)
            if o1.shape != ref.shape:
                continue
            d = float((o1 - ref).abs().max()) if ref.numel() else 0.0
            if d > tol[j]:
                return _Finding(
                    f"run on its time steps {lo}..{hi - 1} alone (as a stream runs it on a "
                    f"chunk), its output there differs from the full run's by {d:.3g}: it "
                    "depends on where a time step sits or on how many there are (a positional "
                    "encoding, a scale by the length)"
                )
    return None


def describe(f: _Finding, ahead: int | None = None) -> str:
    """``f`` as a sentence."""
    if f.text:
        return f.text
    head = (
        f"output {f.q} depends on input {f.p} (of {f.steps} time steps: a change of input "
        f"{f.p} changes output {f.q} by {f.size:.3g})"
    )
    if f.up > 1:
        head += (
            f" (its outputs counted in input steps: it makes {f.up} output steps of each input "
            "step)"
        )
    if f.q < f.p:
        reach = f"{f.p - f.q} step(s) later"
        if ahead:
            reach += f", beyond the stream's lookahead of {ahead}"
        if f.back is not None:
            b = f.back
            later, earlier = f.p - f.q, b.q - b.p
            if 4 * (later + earlier) >= f.steps:
                return (
                    f"{head}, and output {b.q} on input {b.p}: it mixes time steps in both "
                    f"directions (reading {reach}), as a norm or attention over the whole "
                    "sequence does; a stream has not seen the later ones yet"
                )
            if f.up > 1:
                # a local filter that resamples time (an anti-aliased upsampler)
                return (
                    f"{head}, and output {b.q} on input {b.p}: it reads a window of its input "
                    f"({later} step(s) later, {earlier} earlier) and makes {f.up} output steps "
                    "of each; a module is streamed on a window of its input only where it keeps "
                    "the time length (one that encloses it and keeps the length streams so)"
                )
            return (
                f"{head}, and output {b.q} on input {b.p}: it reads a window of time steps "
                f"both ways ({reach}, {earlier} earlier); a stream has not seen the later "
                "ones yet" + ("" if ahead else ": stream it with a delay, lookahead='auto'")
            )
        return f"{head}: it reads time steps {reach}; a stream has not seen them yet"
    return (
        f"{head}: it carries earlier time steps forward in its own code (a cumulative, "
        "recurrent or shifting op, or one reaching farther back than its streamed layers), "
        "which runs on each chunk alone: the stream keeps no state for it"
    )


# ----------------------------------------------------------------------------- the probe


# first lengths the probe tries for a pair of full runs whose time axes are unambiguous
_AXIS_TRIES = 4


def _whole(n: int, hop: int) -> int:
    """The shortest probe length of at least ``n`` samples that is ``hop`` times a power of
    two: a whole number of every block, window or frame size that is a power of two, which
    the lengths a model is run at in use usually are (a module in blocks of 8 frames then
    sees whole blocks in the probe's full runs, as in the model's own use)."""
    k = max(1, -(-n // max(hop, 1)))
    return max(hop, 1) * (1 << (k - 1).bit_length())


class _Probe:
    def __init__(self, stream: Any, chunk: Tensor) -> None:
        self.stream = stream
        self.model: nn.Module = stream.model
        self.chunk = chunk
        self.axis = stream.axis if stream.axis >= 0 else chunk.dim() + stream.axis
        self.length = int(chunk.shape[self.axis])
        hop = 1
        for plan in stream._plans.values():
            if plan.kind != "convt":
                hop *= max(int(plan.stride), 1)
        self.hop = min(hop, 1 << 14)
        self.minimum = 1 + sum(
            max(p.k_eff - 1, p.lo) for p in stream._plans.values() if p.kind != "convt"
        )
        self.look_delay = 0  # lookahead: the delay, in input samples
        self.follow_clocks()
        streamed = {id(stream._layer_by_name(n)) for n in [*stream._plans, *stream._rnn_plans]}
        self.rec = _Recorder(self.model, streamed, stream)
        # modules with a measured window that did not stream exactly on it: why, by name
        self.window_refusals: dict[str, str] = {}
        self.full: dict[int, list[_Call]] = {}
        self.full_order: list[int] = []
        self.n = 0
        self.second: dict[int, list[_Call]] | None = None  # a full run at another length
        self.n2 = 0
        self.tried: list[tuple[int, str]] = []

    def follow_clocks(self) -> None:
        """Lookahead: the probe's delay, hop and shortest length from the stream's clocks
        (again when a module's measured lookahead joins them)."""
        stream = self.stream
        if not stream._lookahead_mode:
            return
        clocks = stream._clocks_for(self.chunk)
        self.look_delay = -(-clocks.delay // clocks.ticks)
        self.hop = max(self.hop, min(clocks.hop, 1 << 14))
        # long enough that outputs are emitted before the flush, every phase of a hop
        self.minimum = max(self.minimum, self.look_delay + 2 * clocks.hop + 8)

    # -------------------------------------------------------------- inputs

    def sequence(self, n: int, seed: int = 1234) -> Tensor:
        shape = list(self.chunk.shape)
        shape[0] = 1
        shape[self.axis] = n
        gen = torch.Generator(device="cpu").manual_seed(seed)
        x = torch.randn(shape, generator=gen, dtype=torch.float64)
        return x.to(self.chunk.dtype).to(self.chunk.device)

    def run_full(self, n: int, *, inputs: bool = True, seed: int = 1234) -> bool:
        """The model on a sequence of ``n`` samples, recorded; False where it raises."""
        rec = self.rec
        rec.reset(inputs)
        rec.on = True
        try:
            with torch.no_grad():
                self.model(self.sequence(n, seed))
        except Exception as err:
            where = rec.stack[-1][0] if rec.stack else None
            label = rec.label(where) if where is not None else "the model's forward"
            self.tried.append((n, f"{label} raised {_first_line(err)}"))
            return False
        finally:
            rec.on = False
        return True

    def accept(self, lengths: list[int]) -> int | None:
        """The first length the model's full run accepts (recorded in ``self.full``), and a
        second run at another length (``self.second``: the time axes). A pair of lengths at
        which a measured module's time axis is ambiguous (several of its axes change with the
        length: an attention in blocks whose count and size both follow a length that is not
        a whole number of blocks) is passed over for the next pair that runs, up to
        ``_AXIS_TRIES`` first lengths; failing that, the first pair is kept."""
        first: tuple[Any, ...] | None = None
        tried = 0
        for n in lengths:
            if tried >= _AXIS_TRIES and first is not None:
                break
            if not self.run_full(n):
                continue
            tried += 1
            full = (self.rec.calls, self.rec.order, n)
            second: tuple[Any, int] | None = None
            clear = False
            for m in (2 * n, n + 2 * self.hop, n + self.hop, n + 3 * self.hop):
                if self.run_full(m, seed=99):
                    second = (self.rec.calls, m)
                    clear = not self._ambiguous(full[0], second[0])
                    if clear:
                        break
            if first is None or clear:
                first = (full, second)
            if clear:
                break
        if first is None:
            return None
        (self.full, self.full_order, self.n), second = first
        self.second = None
        if second is not None:
            self.second, self.n2 = second
        return self.n

    def _ambiguous(self, a: dict[int, list[_Call]], b: dict[int, list[_Call]]) -> bool:
        """Whether a measured module's input or output has several axes that differ in size
        between the full runs ``a`` and ``b``."""
        for label in self.stream._measure:
            module = _get(self.model, label)
            if module is None:
                continue
            for ca, cb in zip(a.get(id(module), []), b.get(id(module), [])):
                ins = _axes((ca.args, ca.kwargs), (cb.args, cb.kwargs))
                if _AMBIGUOUS in ins or _AMBIGUOUS in _axes(ca.out, cb.out):
                    return True
        return False

    def lengths(self) -> list[int]:
        n0 = _whole(max(24, self.minimum, 3 * self.hop), self.hop)
        return probe_lengths(n0, self.hop, self.minimum, self.length)

    def call_axes(self, key: int, i: int) -> tuple[list[int | None], list[int | None]] | None:
        second = self.second
        if second is None:
            return None
        a, b = self.full.get(key, []), second.get(key, [])
        if len(a) != len(b) or i >= len(a):
            return None
        return _axes((a[i].args, a[i].kwargs), (b[i].args, b[i].kwargs)), _axes(a[i].out, b[i].out)

    # -------------------------------------------------------------- leaf modules

    def measure_leaves(self) -> None:
        stream = self.stream
        for label, kind in stream._measure.items():
            module = _get(self.model, label)
            if module is None or self._inside_measured(label):
                continue
            calls = self.full.get(id(module), [])
            what = f"{type(module).__name__} {label!r}"
            for i in range(min(len(calls), 4)):
                axes = self.call_axes(id(module), i)
                if axes is None:
                    found: _Finding | str | None = (
                        "the model does not run at a second sequence length"
                    )
                else:
                    call = calls[i]
                    found = measure(module, call.args, call.kwargs, axes[0], axes[1])
                    if self.windowed(label, module, found, i):
                        break
                before = set(stream._windows)
                if found is not None and self._window_around(label):
                    # a module around it streams on a window as a whole (a rotary or
                    # sinusoidal position table inside a local attention): it runs there
                    self._window_siblings(before)
                    break
                if isinstance(found, _Finding):
                    allowed = (
                        " It is declared in allow=, but it does not act on each time step on "
                        "its own."
                        if kind == "allowed"
                        else ""
                    )
                    said = self.window_refusals.get(label) or describe(found, stream._delay)
                    raise PaddingError(
                        f"StreamingModule cannot stream {what}: measured on its input in a "
                        f"full run of {self.n} samples, {said}.{allowed}"
                    )
                if isinstance(found, str) and kind == "unknown":
                    cls = type(module).__name__
                    raise PaddingError(
                        f"StreamingModule does not know whether {what} acts on each time step "
                        f"on its own: it cannot be measured ({found}). If it does, pass "
                        f"allow=[{cls}] (or allow=[{label!r}])"
                    )

    def _inside_measured(self, label: str) -> bool:
        """Whether ``label`` is inside a module that streams on a window or with its sums
        carried (it runs within that module's own forward)."""
        stream = self.stream
        return any(
            (w == "<model>" and label != w) or label.startswith(w + ".")
            for w in [*stream._windows, *stream._cumulative]
        )

    def _window_around(self, label: str, itself: bool = False) -> bool:
        """For a measured module that does not act on each time step on its own: stream the
        innermost module around it (``itself``: or it first) that measures as a window (or
        blocks) with one (see :meth:`windowed`); True where one now does."""
        parts = label.split(".") if label != "<model>" else []
        # (depth 0: the model itself)
        for depth in range(len(parts) - (0 if itself else 1), -1, -1):
            module = _get(self.model, ".".join(parts[:depth])) if depth else self.model
            if module is not None and self._try_window_at(id(module)):
                return True
        return False

    def windowed(self, label: str, module: nn.Module, found: Any, i: int = 0) -> bool:
        """Stream ``module`` with a window of its last input samples when ``found`` measured
        one (a causal stream, one call a run, one tensor in and out along time, no streamed
        layer inside it): True where it now does."""
        stream = self.stream
        look = stream._lookahead_mode
        if not isinstance(found, _Finding):
            return False
        earlier_only = found.q > found.p and found.back is None
        if found.window is None and not (earlier_only or look):
            return False  # it reads later time steps: a causal stream has not seen them
        if found.ahead_window and not look:
            return False
        if label in stream._windows or label in stream._cumulative or i > 0:
            return False
        if label in self.window_refusals:
            return False
        calls = self.full.get(id(module), [])
        axes = self.call_axes(id(module), 0)
        if len(calls) != 1 or axes is None or calls[0].kwargs:
            return False
        args = calls[0].args
        if not isinstance(args, tuple) or len(args) != 1 or not isinstance(args[0], Tensor):
            return False
        if len(axes[0]) != 1:
            return False
        (in_axis,), out_axes = axes[0], axes[1]
        if in_axis is None or in_axis == _AMBIGUOUS or len(out_axes) != 1:
            return False
        (out_axis,) = out_axes
        if out_axis is None or out_axis == _AMBIGUOUS:
            return False
        inside = [*stream._plans, *stream._rnn_plans, *stream._windows, *stream._cumulative]
        if any(n.startswith(label + ".") for n in inside):
            return False
        window, later, block = found.window, found.ahead_window, found.block
        x = args[0]
        if window is None and not block:
            # as far as the probe reaches: measured again on its input repeated to a longer
            # sequence, a window (or blocks) may show
            steps = int(x.shape[in_axis])
            reps = max(2, -(-LONG_WINDOW_PROBE // max(steps, 1)))
            longer = torch.cat([x] * reps, in_axis)
            try:
                again = measure(module, (longer,), {}, [in_axis], [out_axis])
            except Exception:  # pragma: no cover - the refusal names the first finding
                return False
            if not isinstance(again, _Finding):
                return False
            if again.window is None and not again.block:
                if look or not earlier_only:
                    return False
                # every earlier time step: its running sums carried
                return self.cumulative(label, module, args[0], in_axis, out_axis)
            window, later, block, x = again.window, again.ahead_window, again.block, longer
        if (later or block) and not look:
            return False  # it reads later time steps: a causal stream has not seen them
        rate = None
        if look:
            # the clock its input runs at (its output's: it keeps the time steps), on which
            # its lookahead joins the stream's delay
            clock = self.out_rate(id(module))
            if clock is None:
                return False
            rate = clock[1]
        dup = _float64_copy(module)
        run, xx = (dup, x.double()) if dup is not None and x.is_floating_point() else (module, x)
        if block:
            why = blocks_differ(run, xx, in_axis, out_axis, block)
            window = later = block - 1
        else:
            assert window is not None
            why = window_differs(run, xx, in_axis, out_axis, window, later)
        if why is not None:
            self.window_refusals[label] = why
            return False
        stream._add_window(label, window, in_axis, out_axis, later, rate, block)
        return True

    def cumulative(
        self, label: str, module: nn.Module, x: Tensor, in_axis: int, out_axis: int
    ) -> bool:
        """Stream ``module`` (measured to read every earlier time step) with its cumulative
        ops carried, where its recorded input ``x`` streamed so in chunks of 1, 7, 3 and the
        rest gives its full run (``_cumulative.py``): True where it now does."""
        dup = _float64_copy(module)
        run = dup if dup is not None else module
        xx = x.double() if dup is not None and x.is_floating_point() else x
        why = cumulative_differs(run, xx, in_axis, out_axis, chunk_sizes(int(x.shape[in_axis])))
        if why is not None:
            self.window_refusals[label] = f"its output t reads every earlier input, and {why}"
            return False
        self.stream._add_cumulative(label, in_axis, out_axis, x.detach().clone())
        return True

    def try_window(self, key: int) -> bool:
        """For a module whose streamed output differs: stream it, or else the innermost of
        its enclosing modules whose measurement finds one, with a window of its last input
        samples (see :meth:`windowed`). A module that acts on each time step differs when
        its input does: the code that reads earlier time steps is then its parent's.

        Where one now streams so, the other modules of its class are measured too, each on
        its own input (a vocoder repeats one anti-aliased activation a hundred times): those
        whose measurement finds a window stream so at once, instead of one retry of the
        probe each."""
        before = set(self.stream._windows)
        if not self._window_around(self.rec.names[key], itself=True):
            return False
        self._window_siblings(before)
        return True

    def _window_siblings(self, before: set[str]) -> None:
        """Measure the modules of the classes of the windows added since ``before`` (the
        names windowed then), each on its own input; stream those that measure as windows."""
        added = [n for n in self.stream._windows if n not in before]
        kinds = {type(_get(self.model, n) if n != "<model>" else self.model) for n in added}
        refusals = dict(self.window_refusals)
        for other, module in self.rec.modules.items():
            name = self.rec.names[other]
            if (
                type(module) in kinds
                and name not in self.stream._windows
                and not self._inside_measured(name)
            ):
                self._try_window_at(other)
        # (a sibling that measured otherwise is found, and named, by the probe itself)
        self.window_refusals.clear()
        self.window_refusals.update(refusals)

    def _try_window_at(self, key: int) -> bool:
        module = self.rec.modules[key]
        axes = self.call_axes(key, 0)
        calls = self.full.get(key, [])
        if axes is None or len(calls) != 1:
            return False
        name = self.rec.names[key]
        stream = self.stream
        inside = [*stream._plans, *stream._rnn_plans, *stream._windows, *stream._cumulative]
        if any(name == "<model>" or n == name or n.startswith(name + ".") for n in inside):
            return False  # (before measuring: a module holding streamed layers never qualifies)
        try:
            found = measure(module, calls[0].args, calls[0].kwargs, axes[0], axes[1])
        except Exception:  # pragma: no cover - the refusal below names it
            return False
        if self.windowed(name, module, found):
            return True
        if isinstance(found, _Finding):
            # the innermost module measured to read across time steps, and why it cannot
            # stream so: the refusal names it
            self.window_refusals.setdefault(name, describe(found))
        return False

    # -------------------------------------------------------------- the streamed run

    def split(self, lead: int = 0) -> list[int]:
        """Chunk sizes for the probe sequence: 1, 7 and the rest (after ``lead`` samples: a
        reflect-padded model's start-up)."""
        n = self.n - lead
        sizes = [1, 7, n - 8] if n > 8 else [1, n - 1]
        if self.look_delay and n > 8:
            # lookahead: one-sample steps over a hop from just before the first commit (the
            # delay) on, so that the first output of every phase is emitted by the step that
            # completes its window (a lookahead one sample short emits it a step early, and
            # one that misses a start-up pad's reach commits it a step early)
            start = min(max(2, self.look_delay - 1), n - 1)
            head = [1, 7, start - 8] if start > 8 else [1, start - 1]
            ones = min(self.hop + 1, 256, n - start)
            sizes = [*head, *([1] * ones), n - start - ones]
        return [s for s in ([lead] if lead else []) + sizes if s > 0]

    def stream_run(self, sizes: list[int]) -> None:
        """Stream the probe sequence in chunks ``sizes`` and compare every module with the
        full run (raises naming the first that differs, or that raises)."""
        stream = self.stream
        rec = self.rec
        x = self.sequence(self.n)
        look = stream._lookahead_mode
        # lookahead: each step's (span start, samples seen) in input samples
        spans: list[tuple[int, int]] = []
        rec.reset(False)
        with torch.no_grad():
            state = stream.init_state(example=x)  # a length the model accepts
            clocks = stream._clocks
            done = 0
            rec.on = True
            try:
                for part in torch.split(x, sizes, dim=self.axis):
                    rec.stack = []
                    k = int(part.shape[self.axis])
                    try:
                        _, state = stream.step(part, state)
                    except ModelRaised as err:
                        rec.on = False
                        self.first_wrong(spans, sizes, final=False)
                        where = rec.stack[-1][0] if rec.stack else None
                        if where is not None and self.try_window(where):
                            # it (or a module around it) reads a window or blocks of time
                            # steps and raised on a chunk of another length: now streamed so
                            raise _Retry from None
                        label = rec.label(where) if where is not None else err.label
                        raise _StreamFailed(label, k, err.error) from None
                    clocks = stream._clocks
                    start = clocks.start(done) if look and clocks is not None else 0
                    done += k
                    spans.append((start, done))
                if look:
                    clocks = stream._clocks
                    start = clocks.start(done) if clocks is not None else 0
                    rec.stack = []
                    try:
                        stream.flush(state)
                    except ModelRaised as err:
                        where = rec.stack[-1][0] if rec.stack else None
                        label = rec.label(where) if where is not None else err.label
                        raise _StreamFailed(label, 0, err.error) from None
                    spans.append((start, -1))  # -1: the flush, everything final
            finally:
                rec.on = False
        self.first_wrong(spans, sizes, final=True)

    def first_wrong(self, spans: list[tuple[int, int]], sizes: list[int], *, final: bool) -> None:
        """Raise naming the first module (in the order they return) whose streamed outputs so
        far are not the start of its full-sequence output (``final``: not all of it)."""
        look = self.stream._lookahead_mode
        n = self.n
        for key in self.full_order:
            fulls = self.full[key]
            streamed = self.rec.calls.get(key, [])
            if len(fulls) != 1 or not streamed:
                continue  # called several times per run
            f = fulls[0].out
            outs = [c.out for c in streamed]
            if not isinstance(f, Tensor) or any(not isinstance(p, Tensor) for p in outs):
                continue  # returns no single tensor
            parts: list[Tensor] | None = outs
            if look:
                if len(outs) > len(spans) + (0 if final else 1):
                    continue
                parts = self._final_parts(key, f, outs, spans)
            if parts is None:
                continue
            a = _time_axis(f, parts)
            if a is None:
                continue  # no time axis to compare along (or several: ambiguous)
            got = sum(int(p.shape[a]) for p in parts)
            want = int(f.shape[a])
            label = self.rec.label(key)
            if got > want or (final and got != want):
                partial = self.partial_window() if got < want and not look else ""
                raise PaddingError(
                    f"StreamingModule: {label} returned {got} time steps in all over "
                    f"{'a probe' if final else 'the start of a probe'} of {n} samples streamed "
                    f"in chunks {sizes}, where the full-sequence run returns {want}"
                    f"{'' if final else f' for all {n}'}. "
                    f"{partial or self.pads(key) or self.code_pad(key)}"
                    f"{'' if partial else _hint(self.stream)}"
                )
            if not f.is_floating_point() or got == 0:
                continue
            streamed_t = torch.cat(parts, dim=a)
            ref = f.narrow(a, 0, got)
            scale = float(ref.abs().max())
            diff = float((streamed_t - ref).abs().max())
            # float64 streams match to rounding (~1e-15): a weak dependency on an unseen
            # sample (a too-short lookahead through a deep chain) shows far above it
            rel = 1e-9 if f.dtype == torch.float64 else 1e-4
            if not diff <= rel * (1.0 + scale):
                if self.try_window(key):
                    raise _Retry
                refused = next(iter(self.window_refusals.items()), None)
                if refused is not None:
                    culprit = _get(self.model, refused[0])
                    raise PaddingError(
                        f"StreamingModule cannot stream {type(culprit).__name__} "
                        f"{refused[0]!r}: measured on its input in a full run of {n} samples, "
                        f"{refused[1]}"
                    )
                pads = self.pads(key)
                code = "" if pads else self.code_pad(key)  # the reason, where found
                raise PaddingError(
                    f"StreamingModule: {label} streams values that differ from the full run's "
                    f"(its streamed output differs by {diff:.3g}; a probe of {n} samples in "
                    f"chunks {sizes}{', then flush()' if look else ''}): {self.short()}"
                    f"{'' if code else self.why(key)}{pads or code}{_hint(self.stream)}"
                )

    def out_rate(self, key: int) -> tuple[int, Fraction] | None:
        """A module's output time axis and its clock (output samples per input sample),
        from the two full runs; None where it has no single one."""
        axes = self.call_axes(key, 0)
        if axes is None or self.second is None or len(axes[1]) != 1:
            return None
        a = axes[1][0]
        if a is None or a == _AMBIGUOUS:
            return None
        first, second = self.full[key][0].out, self.second[key][0].out
        if not isinstance(first, Tensor) or not isinstance(second, Tensor):
            return None
        rate = Fraction(int(second.shape[a]) - int(first.shape[a]), self.n2 - self.n)
        return (a, rate) if rate > 0 else None

    def _final_parts(
        self, key: int, f: Tensor, parts: list[Tensor], spans: list[tuple[int, int]]
    ) -> list[Tensor] | None:
        """Lookahead: the samples each step's output of a module adds to its committed ones
        (the module's clock is measured on the two full runs: its output's time length at
        the probe's two lengths)."""
        clocks = self.stream._clocks
        found = self.out_rate(key)
        if clocks is None or found is None:
            return None
        a, rate = found
        out: list[Tensor] = []
        emitted = 0
        for p, (start, n) in zip(parts, spans):
            v = start * rate
            if v.denominator != 1 or p.dim() != f.dim():
                return None
            first = int(v)
            upto = first + int(p.shape[a]) if n < 0 else clocks.committed(rate, n)
            lo, hi = emitted - first, upto - first
            if lo < 0 or hi > p.shape[a]:
                return None  # the module's output does not cover its committed samples
            out.append(p.narrow(a, lo, max(0, hi - lo)))
            emitted = max(emitted, upto)
        return out

    # -------------------------------------------------------------- explanations

    def short(self) -> str:
        """Lookahead: whether the stream's lookahead is shorter than its layers' right pads
        add up to (then outputs it emits may still depend on samples not seen yet)."""
        stream = self.stream
        clocks = stream._clocks
        if not stream._lookahead_mode or clocks is None or clocks.delay >= clocks.auto:
            return ""
        need = Fraction(clocks.auto, clocks.ticks)
        return (
            f"the stream's lookahead={stream._lookahead} is smaller than the {need} input "
            "samples its layers' lookaheads add up to (lookahead='auto'), and here the "
            "outputs it emits as final still depend on samples it has not seen. "
        )

    def why(self, key: int) -> str:
        """What a measurement of the module finds (on its full-run input)."""
        default = (
            "its forward computes over time in code the streamer does not see, or branches it "
            "adds emit their samples at different times. "
        )
        if self.short():
            default = ""
        module = self.rec.modules[key]
        axes = self.call_axes(key, 0)
        if axes is None:
            return default
        call = self.full[key][0]
        ahead = 0
        clocks = self.stream._clocks
        if self.stream._lookahead_mode and clocks is not None:
            found_rate = self.out_rate(key)
            rate = found_rate[1] if found_rate is not None else Fraction(1)
            ahead = math.floor(clocks.samples(clocks.delay, rate))
        behind = self.reach(key)
        try:
            found = measure(
                module, call.args, call.kwargs, axes[0], axes[1], lookahead=ahead, behind=behind
            )
        except Exception:  # pragma: no cover - a measurement is an explanation only
            return default
        if isinstance(found, _Finding):
            return f"measured on its full-sequence input, {describe(found, ahead)}. "
        return default

    def reach(self, key: int) -> int | None:
        """How far back the streamed layers inside a module can reach in all (their left
        windows added up), where that bounds what it may read back: None when it holds
        recurrent, strided or transposed layers."""
        name = self.rec.names[key]
        inside = [
            n
            for n in [*self.stream._plans, *self.stream._rnn_plans]
            if name == "<model>" or n == name or n.startswith(name + ".")
        ]
        total = 0
        for n in inside:
            plan = self.stream._plans.get(n)
            if plan is None or plan.kind == "convt" or plan.stride != 1:
                return None
            total += max(plan.k_eff - 1, plan.lo)
        return total

    def partial_window(self) -> str:
        """Why a causal stream emits fewer outputs than the full run where a streamed layer
        pads the time axis on the right by less than its stride: that pad makes a last,
        partial window that exists only once the sequence ends ("" where none does)."""
        for name, plan in self.stream._plans.items():
            if plan.kind == "convt" or plan.stride <= 1:
                continue
            try:
                lo, hi = padding_pairs(self.stream._layer_by_name(name))[plan.ti]
            except (PaddingError, IndexError, TypeError):
                continue
            if 0 < hi < plan.stride:
                layer = self.stream._layer_by_name(name)
                return (
                    f"{type(layer).__name__} {name!r} pads time by {(lo, hi)} at stride "
                    f"{plan.stride}: its right pad, shorter than the stride, makes a last, "
                    "partial window that exists only once the sequence ends, which a causal "
                    "stream does not emit. Stream with lookahead='auto' to have flush() emit "
                    "it, or pad the right by 0."
                )
        return ""

    def pads(self, key: int) -> str:
        """Whether the module gives the first streamed layer it calls another time length
        than its own input's (it pads or crops time in code before it)."""
        stream = self.stream
        calls = self.full.get(key, [])
        axes = self.call_axes(key, 0)
        if len(calls) != 1 or axes is None:
            return ""
        call = calls[0]
        leaves = _tensors((call.args, call.kwargs))
        timed = [(v, a) for v, a in zip(leaves, axes[0]) if a is not None and a != _AMBIGUOUS]
        if not timed:
            return ""
        own = int(timed[0][0].shape[timed[0][1]])
        first: tuple[int, str, int] | None = None
        for name, plan in stream._plans.items():
            layer = stream._layer_by_name(name)
            for c in self.full.get(id(layer), []):
                if call.enter < c.enter < call.exit and (first is None or c.enter < first[0]):
                    xs = [v for v in _tensors(c.args) if isinstance(v, Tensor)]
                    if xs and xs[0].dim() > 2 + plan.ti:
                        first = (c.enter, name, int(xs[0].shape[2 + plan.ti]))
        if first is None or first[2] == own:
            return ""
        layer = stream._layer_by_name(first[1])
        return (
            f"Its forward gives {type(layer).__name__} {first[1]!r} {first[2]} time steps for "
            f"its own input's {own}: it pads or crops the time axis in code before that layer. "
        )

    def code_pad(self, key: int) -> str:
        """The pad or crop that the module's forward, or the forward of a module around it,
        writes in code between two streamed layers: the later layer's input is longer or
        shorter on time than the earlier one's output, and no module called between them
        changes a shape (innermost first; the full run's calls)."""
        stream = self.stream
        names = self.rec.names
        name = names.get(key)
        if name is None:
            return ""
        keys = {n: k for k, n in names.items()}
        parts = [] if name == "<model>" else name.split(".")
        layers: list[tuple[_Call, str, int]] = []
        kinds: dict[str, str] = {}
        for lname, plan in stream._plans.items():
            for c in self.full.get(id(stream._layer_by_name(lname)), []):
                layers.append((c, lname, 2 + plan.ti))
            kinds[lname] = type(stream._layer_by_name(lname)).__name__
        axes = self.call_axes(key, 0) if name not in stream._plans else None
        if axes is not None and len(axes[0]) == 1 and len(self.full.get(key, [])) == 1:
            # the module named is no streamed layer (a Linear after the last conv): its own
            # input's time axis, measured, ends the last pair
            (a_in,) = axes[0]
            if a_in is not None and a_in != _AMBIGUOUS:
                layers.append((self.full[key][0], name, a_in))
                kinds[name] = type(self.rec.modules[key]).__name__
        for depth in range(len(parts), -1, -1):
            owner = keys.get(".".join(parts[:depth]) or "<model>")
            if owner is None or len(self.full.get(owner, [])) != 1:
                continue
            calls = self.full[owner]
            call = calls[0]
            inside = sorted(
                (t for t in layers if call.enter < t[0].enter < call.exit), key=lambda t: t[0].enter
            )
            for (a, a_name, a_ax), (b, b_name, b_ax) in pairwise(inside):
                got, want = _length(a.out, a_ax), _length(b.args, b_ax)
                if b.enter < a.exit or got is None or want is None or got == want:
                    continue
                if any(
                    a.exit < c.enter and c.exit < b.enter and _reshapes(c)
                    for k, cs in self.full.items()
                    if k not in (owner, key)
                    for c in cs
                ):
                    continue
                # the deepest module that starts after a returned, runs b, and is itself given
                # a's length: its forward (not a child's) changes it
                writer, at = owner, -1
                for k, cs in self.full.items():
                    for c in cs:
                        if (
                            a.exit < c.enter < b.enter
                            and b.exit < c.exit
                            and c.enter > at
                            and _length(c.args, b_ax) == got
                        ):
                            writer, at = k, c.enter
                whose = (
                    "Its forward" if writer == key else f"The forward of {self.rec.label(writer)}"
                )
                a_type, b_type = kinds[a_name], kinds[b_name]
                return (
                    f"{whose} gives {b_type} {b_name!r} {want} time steps where {a_type} "
                    f"{a_name!r} before it returned {got}: code between them changes the length "
                    "of the time axis (a pad or crop: F.pad, slicing), and runs again on every "
                    "chunk. "
                )
        return ""


class _Retry(Exception):
    """A module now streams with a window: stream the probe again."""


class _StreamFailed(Exception):
    def __init__(self, label: str, size: int, error: BaseException) -> None:
        super().__init__(label)
        self.label, self.size, self.error = label, size, error


def _time_axis(f: Tensor, parts: list[Tensor]) -> int | None:
    cands = [
        a
        for a in range(f.dim())
        if all(
            p.dim() == f.dim() and all(p.shape[b] == f.shape[b] for b in range(f.dim()) if b != a)
            for p in parts
        )
    ]
    return cands[0] if len(cands) == 1 else None


def probe_stream(stream: Any, chunk: Tensor) -> bool:
    """Measure the modules of ``stream``'s model that need it and (``stream._check``) stream a
    random sequence shaped like ``chunk`` through ``stream``, comparing every module with the
    full-sequence run; raise :class:`PaddingError` naming the first module that cannot
    stream. The model's parameters and buffers are left as they were. Returns False when the
    model runs at none of the probe lengths (nothing was checked)."""
    with unchanged(stream.model):
        probe = _Probe(stream, chunk)
        with probe.rec:
            return _probe(stream, probe)


def _whole_hops_stream(stream: Any, probe: _Probe, lead: int) -> bool:
    """Whether the probe streams exactly in chunks of whole hops (a causal stream of a model
    with a stride): True where it does; a difference found there raises as usual."""
    n = probe.n - lead
    if stream._lookahead_mode or probe.hop <= 1 or n < 2 * probe.hop or n % probe.hop:
        return False
    try:
        probe.stream_run(([lead] if lead else []) + [probe.hop] * (n // probe.hop))
    except (_StreamFailed, _Retry):
        return False
    return True


def _probe(stream: Any, probe: _Probe) -> bool:
    if probe.accept(probe.lengths()) is None:
        if any(kind == "unknown" for kind in stream._measure.values()):
            tried = "; ".join(f"{n}: {why}" for n, why in probe.tried[:4])
            raise PaddingError(
                f"StreamingModule: the model runs at none of the probe lengths "
                f"{[n for n, _ in probe.tried]} ({tried}), so its modules cannot be measured "
                "before the first step; stream a model that accepts such lengths"
            )
        return False
    probe.measure_leaves()
    if not stream._check:
        return True
    lead = 0
    startup = stream._startup_samples(probe.chunk)
    if startup > 0:
        # a reflect-padded model holds its input until its start-up is complete: the probe's
        # first chunk completes it, the small chunks come after
        lead = probe.hop * math.ceil(startup / probe.hop)
        if probe.accept([probe.n + lead]) is None:
            return False
    try:
        for _ in range(64):  # each retry streams one more module with a window
            probe.follow_clocks()
            longest = max((w.reach + w.ahead for w in stream._windows.values()), default=0)
            if 4 * longest + 8 > probe.n or probe.minimum > probe.n:
                # the probe streams past every window, so that each runs on a full history
                need = _whole(max(4 * longest + 8, probe.minimum) + lead, probe.hop)
                if probe.accept(probe_lengths(need, probe.hop, need)) is None:
                    probe.accept(probe.lengths())
            try:
                probe.stream_run(probe.split(lead))
                break
            except _Retry:
                continue
        else:
            raise PaddingError(
                f"StreamingModule: the probe of {type(stream.model).__name__} still differs "
                f"after 64 rounds that each streamed more modules on windows of their own "
                f"({len(stream._windows)} in all); such a model is not streamed"
            )
    except _StreamFailed as failed:
        if (
            isinstance(failed.error, (AssertionError, ValueError))  # its own check, not a
            and failed.size % probe.hop  # tensor op's (branches out of step raise those)
            and _whole_hops_stream(stream, probe, lead)
        ):
            # the model's own code refuses chunks of other lengths (an assert on whole
            # hops): checked on whole hops, it streams those; a step given another length
            # raises the model's error, saying so
            stream.__dict__["_whole_hops"] = probe.hop
            return True
        keys = [k for k in probe.rec.modules if probe.rec.label(k) == failed.label]
        measured = probe.why(keys[0]) if keys else ""
        if not measured.startswith("measured"):
            measured = ""
        raise PaddingError(
            f"StreamingModule: {failed.label} fails on a streamed chunk of {failed.size} "
            f"sample(s) ({_first_line(failed.error)}) although the full sequence of "
            f"{probe.n} runs{'; ' + measured if measured else '. '}"
            "Code in a forward that needs more time steps than a chunk brings (an assert or a "
            "branch on the input's length) runs on each chunk and fails on short ones: stream "
            f"chunks it accepts, or take that code out of the streamed path. {_hint(probe.stream)}"
        ) from None
    return True
