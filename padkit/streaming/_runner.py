"""Exact chunk-by-chunk (streaming) inference for models built from causal conv and pool layers.

A conv whose time axis is padded on the left only (``padding="causal"``,
``"causal_block"``, ``(lo, 0)`` pairs, or no time padding at all) never looks at the
future, so a sequence can be fed to it in pieces. :class:`StreamingModule` does that for a
whole ``nn.Module``: every conv and pool on the time axis keeps a small state (the last
``d*(k-1)`` samples of its padded input stream and a sample counter), and feeding a sequence
in chunks of any sizes (one sample, fewer samples than a stride, thousands) gives the
full-sequence output, without recomputing the past.

How it works: each conv/pool found in the model is swapped, for the duration of a
:meth:`StreamingModule.step`, for a stateful stand-in that prepends its buffered history to
the incoming chunk, runs the layer *without* time padding on exactly the windows that the
new samples complete, and keeps the tail as the next history. The model's own ``forward``
runs unchanged, so residual blocks and any other per-time-step code work as written. A
stand-in is an instance of a subclass of the layer's class sharing the layer's ``__dict__``
(:func:`make_stand_in`): code that reads the layer's attributes, weights or class during a
step reads the layer's own.

Which modules stream:

* ``torch.nn.Conv1d/2d/3d`` and ``Max/Avg/LPPool1d/2d/3d`` (padkit's or torch's) whose
  time-axis padding is ``(lo, 0)``; ``"causal"`` and ``"causal_block"`` are such rules.
  The time axis may use ``padding_mode`` ``"zeros"``, ``"replicate"`` (the first frame
  repeated, as causal video VAEs do) or ``"reflect"`` (samples ``1..lo`` mirrored: the
  stream holds its input until they have arrived, :attr:`StreamingModule.startup_delay`);
  other axes may be padded any way (``"same"`` for video).
* per-time-step modules pass through: activations, dropout, ``Identity``, ``BatchNorm`` in
  eval mode, and every other module whose output ``t`` is measured to depend on its input
  ``t`` only (the channel-wise ``Linear``/``LayerNorm``/``RMSNorm``/``GLU``/softmax family
  applied on channels, custom activations; ``padkit.streaming._check``).
* container modules (``nn.Sequential``, your residual blocks) run their own ``forward``.
* transposed convs (padkit's or torch's) whose time crop leaves no output that waits for
  the end of the sequence (``padding="causal"``: crop ``(0, k_eff - s)``), so that codec
  and vocoder decoders stream.

It refuses, naming the module: a conv or pool with right padding on the time axis (a
``"same"`` conv; stream it with ``lookahead=``), ``circular`` time padding,
``BatchNorm`` in train mode, ``GroupNorm``/``InstanceNorm`` without running statistics,
adaptive (global) pooling, upsampling, bidirectional recurrent layers and attention layers,
pad modules that pad time on the right or by reflection (``convert_causal`` rewrites
them; a left pad, constant or of the first sample replicated, pads the stream's start:
``_startpad.py``), ``Flatten``; and, before the first step,
modules measured to mix time steps (a norm or attention over the sequence written by hand,
even when declared in ``allow=``) and modules whose streamed outputs differ from the full
run's (the self-check, in causal and lookahead mode). What the model's own code raises comes
out as a :class:`padkit.PaddingError` naming the module.

With ``lookahead=``, layers padded on both sides of time (at any stride) and transposed
convs with any crops stream with a fixed delay (every tensor of a step spans its clock's
uncommitted samples and the chunk's; samples ``delay`` input samples before the end are
final: ``padkit.streaming._lookahead``), :meth:`StreamingModule.explain` tables each layer's
clock and delay, and :meth:`StreamingModule.flush` ends the stream. Every batch row keeps
its own sample count (:meth:`StreamingModule.reset_rows`).

What it cannot see: tensor code inside a ``forward`` (``x[..., :-2]``, ``x.mean(-1)``,
``F.conv1d`` on a layer's weight) is run as written on each chunk, and branches that are
added must emit their samples at the same times (see ``docs/causal-streaming.md``).
:meth:`StreamingModule.verify` compares a streamed run with the full-sequence run.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from fractions import Fraction
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..op import max_pad_fill
from ..spec import PaddingError
from ._catalog import _BATCH_NORMS, _HOLDERS, _MEASURED, _REFUSED, elementwise, refused_norm
from ._check import ModelRaised, model_raised, probe_lengths, probe_stream, unchanged
from ._cumulative import CumulativePlan, cumulative_step
from ._hold import HeldBuffer, HoldSchedule, held_count, measure_schedule
from ._lookahead import Clocks, make_clocks, span_at
from ._ops import (
    empty_output,
    run_op,
    run_overlap_add,
    run_transposed,
    run_transposed_window,
)
from ._plan import (
    _CONVS,
    _CONVTS,
    _ND,
    _POOLS,
    LEAN_OVERLAP,
    LEAN_SIMPLE,
    LEAN_WINDOW,
    _Plan,
    _plan_layer,
    weight_hooks,
)
from ._recurrent import (
    RECURRENT,
    RecurrentPlan,
    bind_recurrent,
    plan_recurrent,
    run_recurrent,
)
from ._startpad import StartPadPlan, pad_axes, start_pad_plan, start_pad_step
from ._state import (
    _HELD_COUNT_KEY,
    _HELD_KEY,
    _INPUT_KEY,
    _POS_KEY,
    _STARTUP_KEY,
    StreamState,
    _Context,
    check_continues,
    fresh_entries,
)
from ._step_export import StreamingStep, export_onnx, step_module
from ._verify import verify
from ._window import WindowPlan, window_step
from .convert import _KeywordTolerant

__all__ = ["StreamingModule", "StreamingStep"]

# ----------------------------------------------------------------------------- the runner


def _layer_call(self: Any, x: Any = None, *args: Any, **kwargs: Any) -> Any:
    """A streamed conv/pool stand-in's ``__call__`` (and ``forward``): the stream's run of the
    layer on its buffered history. A stand-in has no hooks of its own: nn.Module's call
    machinery is skipped (it would run once per layer and step, the overhead that matters
    for small chunks)."""
    runner, plan, layer = self._padkit_stream
    if not plan.pre_hooks and not args and not kwargs:
        if plan.lean:  # a plain causal 1-d layer
            y = _lean_step(runner.__dict__["_ctx"], plan, layer, x)
            if y is not None:
                return y
        elif plan.pointwise and isinstance(x, Tensor) and x.dim() == 3 and x.shape[2] > 0:
            # a 1x1 conv: no state, no padding, the torch conv (skips the layer's forward)
            weight, bias = _params(layer)
            return F.conv1d(x, weight, bias, 1, 0, 1, layer.groups)
    return runner._call_layer(plan, layer, x, args, kwargs)


def _changed_axis(a: tuple[int, ...], b: tuple[int, ...]) -> int | None:
    """The one axis whose size differs between the output shapes ``a`` and ``b`` of two
    runs at different lengths, else None."""
    if len(a) != len(b):
        return None
    diff = [i for i in range(len(a)) if a[i] != b[i]]
    return diff[0] if len(diff) == 1 else None


def _start_pad_call(self: Any, x: Any = None, *args: Any, **kwargs: Any) -> Any:
    """The stand-in ``__call__`` (and ``forward``) of a pad module streamed at the stream's
    start (``_startpad.py``)."""
    runner, plan, layer = self._padkit_stream
    ctx = runner._ctx
    if ctx is None:  # pragma: no cover - stand-ins exist only inside a step
        raise RuntimeError("padkit streaming stand-in called outside a step")
    return start_pad_step(plan, layer, x, args, kwargs, ctx)


def _measured_call(self: Any, x: Any = None, *args: Any, **kwargs: Any) -> Any:
    """The stand-in ``__call__`` (and ``forward``) of a module measured to stream on a window
    or with its running sums carried."""
    runner, plan, layer = self._padkit_stream
    return runner._call_measured(plan, layer, x, args, kwargs)


def _refused_call(self: Any, *args: Any, **kwargs: Any) -> Any:
    """The stand-in ``__call__`` (and ``forward``) of a module the stream cannot take: a
    module is refused where the model calls it, never because it is registered."""
    why = self._padkit_stream[1]
    raise PaddingError(why)


def _recurrent_call(self: Any, *args: Any, **kwargs: Any) -> Any:
    """A recurrent stand-in's ``__call__`` (and ``forward``): every call form of
    ``nn.LSTM``/``nn.GRU``/``nn.RNN`` (``input``, ``hx``, positional or by keyword)."""
    runner, plan, layer = self._padkit_stream
    x, hx = bind_recurrent(plan, layer, args, kwargs)
    return runner._run_recurrent(plan, layer, x, hx)


class _StreamLayer(nn.Module):
    """What stood in for a layer before stand-ins shared their layer's class: kept so that
    pickles of a :class:`StreamingModule` made then load (their stand-ins are made anew)."""


class _StandIn(nn.Module):
    """The stand-in of a layer whose class cannot be subclassed (it shares the layer's
    attributes, not its class)."""

    __slots__ = ("_padkit_stream",)


def make_stand_in(runner: Any, plan: Any, layer: nn.Module, call: Any) -> nn.Module:
    """What stands in for ``layer`` while a step runs: an instance of a subclass of the
    layer's class (``isinstance`` holds, the class name is the layer's) that shares the
    layer's ``__dict__``, so every attribute, parameter, buffer, submodule (parametrizations)
    and hook of the layer is the stand-in's too, live (``kernel_size``, ``weight``,
    ``weight_g``/``weight_v``, ``training``), and the parent's ``parameters()`` and
    ``state_dict()`` are the same tensors under the same names during a step. Only its call
    (``__call__`` and ``forward``) differs: ``call``, the streamed run. The runner, plan and
    layer live in a slot of the subclass, outside the shared ``__dict__``; a subclass is made
    per stand-in (it dies with the stream)."""
    cls = type(layer)
    namespace = {
        "__slots__": ("_padkit_stream",),
        "__call__": call,
        "forward": call,
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
    }
    try:
        sub: type = type(cls.__name__, (cls,), namespace)
    except Exception:  # a class that refuses subclasses (a layout conflict, a metaclass)
        sub = type(cls.__name__, (_StandIn,), {"__call__": call, "forward": call})
    stand: nn.Module = object.__new__(sub)
    object.__setattr__(stand, "__dict__", layer.__dict__)
    object.__setattr__(stand, "_padkit_stream", (runner, plan, layer))
    return stand


class StreamingModule(nn.Module):
    """Run a model of causal convs and pools chunk by chunk, exactly, with explicit state.

    ``StreamingModule(model, axis=-1)`` finds every conv and pool in ``model`` (padkit's or
    torch's) and checks that it pads the time axis ``axis`` on the left only; modules that
    would mix time non-causally are refused with their name. :meth:`step` then runs
    ``model``'s own ``forward`` on a chunk, with each conv/pool fed from its buffered
    history. Concatenating the outputs of consecutive steps gives the full-sequence output
    (to float rounding, usually bit for bit), for chunks of any sizes, including chunks of
    one sample and chunks shorter than a stride (a strided layer buffers them until its
    stride block is complete).

    The state is a flat ``dict`` of plain tensors, keyed ``"<layer name>.buf"`` (the last
    ``dilation*(kernel-1)`` samples of the layer's padded input stream, shape
    ``(N, C, ...)``, the time axis ``dilation*(kernel-1)`` long) and
    ``"<layer name>.pos"`` (an int64 count of samples seen per batch row, shape ``(N,)``;
    :meth:`reset_rows` restarts single streams; while a chunk that completes no output is
    held instead of run, ``"<stream>.held"`` holds its samples): save it with ``torch.save``,
    move it with ``{k: v.to(device) for k, v in state.items()}``, start over with
    :meth:`init_state`. :meth:`step` never modifies the state it is given.

    Args:
        model: the model; it is not modified (its layers are swapped for stand-ins only
            while a step runs, so do not call ``model`` from another thread meanwhile).
        axis: the time axis of the model's input and output, counted in their dims:
            ``-1`` for ``(N, C, T)`` audio, ``1`` for ``(N, T, D)`` sequences (channels last,
            as transformers and pytorch-tcn's ``input_shape="NLC"`` take them), ``2`` (or
            ``-3``) for ``(N, C, T, H, W)`` video.
        layer_axis: the time axis of the conv and pool inputs inside the model, counted in
            their ``(N, C, ...)`` dims. Default: measured per layer before the first step
            (the axis of its input that follows the input's length in two full runs on
            zeros: ``(N, T, F)`` features unsqueezed for 2-d convs have it at axis 2);
            where a layer's is not measured (it runs more than once a run, or no single axis
            follows), ``axis``, or ``-1`` when ``axis=1`` (the model transposes
            ``(N, T, D)`` to ``(N, D, T)`` for its convs); a refusal on that default axis
            of a layer of several spatial axes waits for the measurement.
        lookahead: ``None`` (causal: every time pad on the left), ``"auto"`` or a number of
            input samples: stream a model whose layers also pad on the right (strided convs
            and transposed convs included), its outputs delayed by :attr:`delay` input
            samples (:attr:`output_delay` output samples; the last ones come from
            :meth:`flush`).
        allow: extra module types, or qualified module names, that act on each time step on
            their own, for modules the probe cannot measure (random outputs, non-float
            inputs); modules are measured before the first step and need no declaration
            otherwise, and a declared module measured to mix time steps is refused.
        check: before the first step for an input shape, stream a probe sequence and
            compare every module with the full run (``padkit.streaming._check``); False
            skips that comparison (modules are still measured).

    Shape:
        - Input of :meth:`step`: ``(N, C, ..., T_chunk, ...)``, the time axis at ``axis``;
          ``T_chunk`` may be any size, 0 included.
        - Output: what ``model`` returns, its time axis holding the outputs the chunk
          completes (for a stride-``S`` model, about ``T_chunk / S`` of them). The output's
          time axis may be another than the input's (``(N, T, C)`` from an ``(N, C, T)``
          input): lookahead streams cut their outputs on the axis measured to follow the
          input's length.

    Example:
        >>> import padkit.nn as pn
        >>> _ = torch.manual_seed(0)
        >>> net = torch.nn.Sequential(
        ...     pn.Conv1d(1, 4, 3, padding="causal", dilation=2), torch.nn.ReLU(),
        ...     pn.Conv1d(4, 2, 4, stride=2, padding="causal_block"))
        >>> stream = StreamingModule(net)
        >>> x = torch.randn(1, 1, 11)
        >>> state = stream.init_state(batch_size=1)
        >>> outs = []
        >>> for chunk in x.split([1, 4, 1, 5], dim=-1):
        ...     y, state = stream.step(chunk, state)
        ...     outs.append(y)
        >>> [o.shape[-1] for o in outs]
        [0, 2, 1, 2]
        >>> torch.allclose(torch.cat(outs, -1), net(x), atol=1e-6)
        True
    """

    def __init__(
        self,
        model: nn.Module,
        axis: int = -1,
        *,
        layer_axis: int | None = None,
        lookahead: int | str | None = None,
        allow: Sequence[type[nn.Module] | str] = (),
        check: bool = True,
    ) -> None:
        super().__init__()
        if (
            lookahead is not None
            and lookahead != "auto"
            and (isinstance(lookahead, bool) or not isinstance(lookahead, int) or lookahead < 0)
        ):
            raise PaddingError(
                f"StreamingModule: lookahead must be None (causal), 'auto' (the sum of the "
                f"layers' right pads) or a non-negative int of samples, got {lookahead!r}"
            )
        if not isinstance(model, nn.Module):
            raise TypeError(
                f"StreamingModule: model must be an nn.Module, got {type(model).__name__}"
            )
        if isinstance(axis, bool) or not isinstance(axis, int):
            raise TypeError(f"StreamingModule: axis must be an int, got {axis!r}")
        if axis == 0:
            raise PaddingError(
                "StreamingModule: axis=0 is the batch axis; pass the time axis: -1 for "
                "(N, C, T), 1 for (N, T, D), 2 for (N, C, T, H, W)"
            )
        # a layer_axis not given is measured per layer before the first step (the axis of
        # each conv's and pool's input that follows the stream's length)
        self._layer_axis_given = layer_axis is not None
        if layer_axis is None:
            layer_axis = -1 if axis == 1 else axis
        if isinstance(layer_axis, bool) or not isinstance(layer_axis, int):
            raise TypeError(f"StreamingModule: layer_axis must be an int, got {layer_axis!r}")
        if layer_axis in (0, 1):
            raise PaddingError(
                f"StreamingModule: layer_axis={layer_axis} is the batch or channel axis of the "
                "conv inputs; the time axis is a spatial axis: -1 for (N, C, T), 2 for "
                "(N, C, T, H, W)"
            )
        for a in allow:
            if not isinstance(a, str) and not (isinstance(a, type) and issubclass(a, nn.Module)):
                raise TypeError(
                    f"StreamingModule: allow entries must be nn.Module subclasses or module "
                    f"names, got {a!r}"
                )
        self.model = model
        self.axis = axis
        self.layer_axis = layer_axis
        self._allow_types = tuple(a for a in allow if not isinstance(a, str))
        self._allow_names = frozenset(a for a in allow if isinstance(a, str))
        self._plans: dict[str, _Plan] = {}
        self._rnn_plans: dict[str, RecurrentPlan] = {}
        # recurrent layers seen called with their own initial state (their state counts rows)
        self._rnn_hx: set[str] = set()
        # leaf modules measured before the first step: "unknown" (no list names them),
        # "listed" (channel-wise, unless applied along time), "allowed" (declared in allow=)
        self._measure: dict[str, str] = {}
        # modules measured (before the first step) to read a window of earlier time steps:
        # each runs on its last input samples (kept in the state) and the chunk
        self._windows: dict[str, WindowPlan] = {}
        # modules measured to read every earlier time step, streamed with their cumulative
        # ops carried (``_cumulative.py``)
        self._cumulative: dict[str, CumulativePlan] = {}
        # pad modules streamed with their left time pad at the stream's start only
        self._start_pads: dict[str, StartPadPlan] = {}
        # modules the stream cannot take, by name: why (raised where the model calls one; a
        # module it never calls is no reason to refuse the model)
        self._refused: dict[str, str] = {}
        self._stand_ins: dict[int, nn.Module] = {}  # by id(layer), while scanning only
        # (parent, attribute, layer, stand-in) for every place a streamed layer is registered
        self._slots: list[tuple[nn.Module, str, nn.Module, nn.Module]] = []
        self._check = bool(check)
        self._checked: set[tuple[Any, ...]] = set()
        self._probing = False
        self._batch_norms: list[tuple[str, nn.Module]] = []
        self._root_stand_in: nn.Module | None = None
        self._ctx: _Context | None = None
        self._lock = threading.RLock()
        self._state: StreamState | None = None
        self._pairs_cache: dict[tuple[str, tuple[int, ...]], tuple[tuple[int, int], ...]] = {}
        self._empties: dict[tuple[Any, ...], Tensor] = {}
        self._lookahead_mode = lookahead is not None
        self._startup_cache: dict[tuple[Any, ...], int] = {}
        self._startup: int | None = None
        self._init_hold()
        self._scan(model, "", set())
        self._stand_ins.clear()
        self._lookahead: int | str = 0 if lookahead is None else lookahead
        self._clocks: Clocks | None = None
        if lookahead is not None and all(
            p.kind != "convt" and p.stride == 1 for p in self._plans.values()
        ):
            # stride 1: every clock is the input's (code that resamples time is caught by the
            # self-check)
            one = Fraction(1)
            rates = dict.fromkeys([*self._plans, *self._rnn_plans], one)
            self._clocks = make_clocks(self._plans, rates, one, lookahead)
            top = max((p.ahead for p in self._plans.values()), default=0)
            if lookahead != "auto" and self._clocks.delay < top:
                raise PaddingError(
                    f"StreamingModule: lookahead={lookahead} is smaller than the right pad "
                    f"{top} of one layer; the model needs up to {self._clocks.auto} samples "
                    "('auto')"
                )

    @property
    def _delay(self) -> int:
        """The delay in input samples where it is known (0 before the clocks are measured)."""
        c = self._clocks
        return 0 if c is None else -(-c.delay // c.ticks)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_lock", None)  # locks do not pickle or deep-copy; a copy gets its own
        # stand-ins share their layer's __dict__ and are of classes made at run time: a copy
        # makes its own from its own layers
        state["_slots"] = [(parent, key, layer, None) for parent, key, layer, _ in self._slots]
        state["_root_stand_in"] = None
        state["_ctx"] = None
        state["_hold_memo"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state.setdefault("_rnn_hx", set())  # pickles made before these existed
        state.setdefault("_measure", {})
        state.setdefault("_empties", {})
        state.setdefault("_holds", {})
        state.setdefault("_held_outs", {})
        state.setdefault("_windows", {})
        state.setdefault("_cumulative", {})
        state.setdefault("_start_pads", {})
        state.setdefault("_refused", {})
        state.setdefault("_layer_axis_given", True)
        state["_hold_memo"] = None
        state.pop("_hold_hop", None)  # an int, once kept under the method's name
        if "_clocks" not in state:  # pickles made before strided lookahead
            delay = state.pop("_delay", 0)
            state["_lookahead"] = delay
            state["_clocks"] = None
            if state.get("_lookahead_mode"):
                one = Fraction(1)
                plans = state["_plans"]
                state["_clocks"] = make_clocks(plans, dict.fromkeys(plans, one), one, delay)
        super().__setstate__(state)  # type: ignore[no-untyped-call]
        self._lock = threading.RLock()
        streamed = [
            *self._plans,
            *self._rnn_plans,
            *self._windows,
            *self._cumulative,
            *self._start_pads,
            *self._refused,
        ]
        names = {id(self._layer_by_name(n)): n for n in streamed}
        slots = []
        for parent, key, layer, _ in self._slots:
            slots.append((parent, key, layer, self._stand_in_of(names[id(layer)], layer)))
        self._slots = slots
        if "<model>" in names.values():
            root = self._stand_in_of("<model>", self.model)
            object.__setattr__(self, "_root_stand_in", root)

    def _stand_in_of(self, label: str, layer: nn.Module) -> nn.Module:
        if label in self._refused:
            return make_stand_in(self, self._refused[label], layer, _refused_call)
        if label in self._rnn_plans:
            return make_stand_in(self, self._rnn_plans[label], layer, _recurrent_call)
        if label in self._windows:
            return make_stand_in(self, self._windows[label], layer, _measured_call)
        if label in self._cumulative:
            return make_stand_in(self, self._cumulative[label], layer, _measured_call)
        if label in self._start_pads:
            return make_stand_in(self, self._start_pads[label], layer, _start_pad_call)
        return make_stand_in(self, self._plans[label], layer, _layer_call)

    def _add_cumulative(self, label: str, in_axis: int, out_axis: int, probe: Tensor) -> None:
        """Stream the module ``label`` with its cumulative ops carried (``_cumulative.py``;
        ``probe``: its input in the self-check's full run)."""
        layer = self._layer_by_name(label)
        self._cumulative[label] = CumulativePlan(label, in_axis, out_axis, probe)
        self._install(label, layer)

    def _install(self, label: str, layer: nn.Module) -> None:
        """Stand-ins for ``layer`` wherever the model registers it."""
        stand_in = self._stand_in_of(label, layer)
        if label == "<model>":  # the model itself (measured as a window): its run is the call
            object.__setattr__(self, "_root_stand_in", stand_in)
        for parent in self.model.modules():
            for key, child in parent._modules.items():
                if child is layer:
                    self._slots.append((parent, key, layer, stand_in))
        self._checked.clear()  # other input shapes: probe them with the stand-in too

    def _refuse_windows(self, where: str, why: str) -> None:
        """Raise for ``where`` when a module streams on a window of its input or with its
        running sums carried (``why``: what its state does that ``where`` cannot take)."""
        plans: list[WindowPlan | CumulativePlan | StartPadPlan] = [
            *self._windows.values(),
            *self._cumulative.values(),
            *(p for p in self._start_pads.values() if p.lo),
        ]
        if plans:
            plan = plans[0]
            layer = self._layer_by_name(plan.name)
            raise PaddingError(
                f"{where}: {type(layer).__name__} {plan.name!r} streams {plan.how}, and its "
                f"state ({plan.state_keys}) {why}; start new streams in a state of their own "
                "(init_state())"
            )

    def _stand_in_scanned(self, label: str, module: nn.Module) -> None:
        """The stand-in of a module the scan planned, for its parents' slots (the root's
        kept apart)."""
        stand = self._stand_in_of(label, module)
        self._stand_ins[id(module)] = stand
        if label == "<model>":
            object.__setattr__(self, "_root_stand_in", stand)

    def _provisional(self, label: str, nd: int, plan_on: Any) -> Any:
        """``plan_on(layer_axis)``. Where ``layer_axis`` was not given and the layer has
        several spatial axes, a refusal on the default axis waits for the measurement of the
        layer's time axis (:meth:`_measure_layer_axes`): the layer is planned on the first
        axis that takes it until then, and the refusal stands unless the measurement finds
        another time axis."""
        try:
            return plan_on(self.layer_axis)
        except PaddingError as err:
            if self._layer_axis_given or nd < 2:
                raise
            for a in range(2, 2 + nd):
                try:
                    plan = plan_on(a)
                except PaddingError:
                    continue
                self.__dict__.setdefault("_refusals", {})[label] = (a, err)
                return plan
            raise

    def _start_pad(self, label: str, module: nn.Module, axis: int) -> StartPadPlan | None:
        """The plan of a pad module streamed at the stream's start (time on ``axis`` of its
        input); raises where it pads time in a way a stream cannot; None: no pad module."""
        start = start_pad_plan(label, module, axis)
        what = f"{type(module).__name__} {label!r}"
        if isinstance(start, str):
            raise PaddingError(
                f"StreamingModule cannot stream {what}: {start}; "
                "padkit.streaming.convert_causal(model, example) moves a pad that feeds convs "
                "into them, and says why where it cannot"
            )
        if start is not None and self._lookahead_mode and start.lo:
            raise PaddingError(
                f"StreamingModule cannot stream {what} with lookahead: it pads the stream's "
                f"start by {start.lo} time step(s), which a lookahead stream does not take; "
                "stream it causally (without lookahead=)"
            )
        return start

    def _refuse_start_pads(self, where: str) -> None:
        """Raise for ``where`` (an exported step) when a pad module pads the stream's start:
        the first step returns more time steps than a later one for the same chunk."""
        for plan in self._start_pads.values():
            if plan.lo:
                layer = self._layer_by_name(plan.name)
                raise PaddingError(
                    f"{where}: {type(layer).__name__} {plan.name!r} streams {plan.how}: the "
                    f"first step returns {plan.lo} more of its time steps than a later step "
                    "for the same chunk, which a step of fixed shapes cannot; stream it with "
                    "step()"
                )

    def _add_window(
        self,
        label: str,
        reach: int,
        in_axis: int,
        out_axis: int,
        ahead: int = 0,
        rate: Fraction | None = None,
        block: int = 0,
    ) -> None:
        """Stream the module ``label`` on its last ``reach`` input samples and the chunk
        (measured: its output ``t`` reads its inputs ``t - reach .. t + ahead``, or with
        ``block``, those of the block of ``block`` steps holding ``t``; ``rate``: its
        input's clock in a lookahead stream, whose delay its ``ahead`` joins)."""
        layer = self._layer_by_name(label)
        self._windows[label] = WindowPlan(label, reach, in_axis, out_axis, ahead, rate, block)
        c = self._clocks
        if self._lookahead_mode and c is not None:
            self._clocks = self._remade_clocks(dict(c.rates), c.out)
        self._install(label, layer)

    def _remade_clocks(self, rates: dict[str, Fraction], out: Fraction) -> Clocks:
        """The clocks for measured ``rates`` and output clock ``out``, with the lookahead of
        the windowed modules that read ahead (their input's clock and how far they read)."""
        windows = {
            name: (w.rate, w.ahead)
            for name, w in self._windows.items()
            if w.ahead and w.rate is not None
        }
        return make_clocks(self._plans, rates, out, self._lookahead, windows)

    def _call_measured(
        self,
        plan: WindowPlan | CumulativePlan,
        layer: nn.Module,
        x: Any,
        args: tuple[Any, ...],
        kwargs: Any,
    ) -> Any:
        """The call of a module measured to stream on a window (``_window.py``) or with its
        running sums carried (``_cumulative.py``)."""
        ctx = self._ctx
        if ctx is None:  # pragma: no cover - stand-ins exist only inside a step
            raise RuntimeError("padkit streaming stand-in called outside a step")
        if isinstance(plan, WindowPlan):
            return window_step(plan, layer, x, args, kwargs, ctx, self._quiet)
        return cumulative_step(plan, layer, x, args, kwargs, ctx, self._quiet)

    @contextmanager
    def _quiet(self) -> Iterator[None]:
        """Calls the self-check's record skips: a windowed module's run on its history and
        the chunk, a cumulative module's check at a new chunk length."""
        attrs = self.__dict__
        attrs["_unrecorded"] = attrs.get("_unrecorded", 0) + 1
        try:
            yield
        finally:
            attrs["_unrecorded"] -= 1

    # ------------------------------------------------------------------ model scan

    def _scan(self, module: nn.Module, name: str, seen: set[int]) -> None:
        label = name or "<model>"
        if id(module) in seen:
            return
        seen.add(id(module))
        try:
            planned = self._scan_one(label, module)
        except PaddingError as err:
            if label == "<model>":
                raise  # the model itself: it is called by every step
            # refused where the model calls it (a module it never calls changes nothing)
            self._refused[label] = str(err)
            self._stand_in_scanned(label, module)
            return
        if planned:
            return
        children = list(module.named_children())
        if not children and isinstance(module, (nn.ModuleList, nn.ModuleDict, nn.Sequential)):
            return  # an empty container (e.g. a list of optional layers, all None)
        if all(isinstance(c, _HOLDERS) for _, c in children):
            # a module that computes (its children, if any, only hold parameters): measured
            # before the first step, refused only if it does not act on each time step
            self._measure[label] = "unknown"
            return
        for child_name, child in children:
            full = f"{name}.{child_name}" if name else child_name
            self._scan(child, full, seen)
            if id(child) in self._stand_ins:
                self._slots.append((module, child_name, child, self._stand_ins[id(child)]))

    def _scan_one(self, label: str, module: nn.Module) -> bool:
        """Plan ``module`` itself; True where that is all (its children are not scanned),
        False where its children are scanned in its place. Raises where the stream cannot
        take it."""
        if (label if label != "<model>" else "") in self._allow_names:
            self._measure[label] = "allowed"  # declared; measured before the first step
            return True
        if isinstance(module, RECURRENT) and not isinstance(module, nn.RNNCellBase):
            self._rnn_plans[label] = plan_recurrent(label, module)
            self._stand_in_scanned(label, module)
            return True
        start = self._provisional(
            label, pad_axes(module), lambda a: self._start_pad(label, module, a)
        )
        if start is not None:
            self._start_pads[label] = start
            self._stand_in_scanned(label, module)
            return True
        for types, why in _REFUSED:
            if isinstance(module, types):
                raise PaddingError(
                    f"StreamingModule cannot stream {type(module).__name__} {label!r}: {why}"
                )
        refused = refused_norm(module)
        if refused is not None:
            raise PaddingError(
                f"StreamingModule cannot stream {type(module).__name__} {label!r}: {refused}"
            )
        if isinstance(module, _CONVS + _CONVTS + _POOLS):
            self._plans[label] = self._provisional(
                label,
                next((v for t, v in _ND.items() if isinstance(module, t)), 1),
                lambda a: _plan_layer(label, module, a, self._lookahead_mode),
            )
            self._stand_in_scanned(label, module)
            return True
        if isinstance(module, _BATCH_NORMS):
            self._batch_norms.append((label, module))
            return True
        if isinstance(module, _HOLDERS) or elementwise(module):
            return True  # parameter containers compute nothing; elementwise ops per element
        if isinstance(module, self._allow_types):
            self._measure[label] = "allowed"
            return True
        if isinstance(module, _MEASURED):
            self._measure[label] = "listed"
            return True
        return False

    def _check_modes(self) -> None:
        for label, bn in self._batch_norms:
            if bn.training or getattr(bn, "running_mean", None) is None:
                raise PaddingError(
                    f"StreamingModule cannot stream {type(bn).__name__} {label!r} "
                    + (
                        "in train mode: it normalises with statistics over the whole chunk; "
                        "call model.eval()"
                        if bn.training
                        else "without running statistics (track_running_stats=False)"
                    )
                )

    @property
    def layers(self) -> dict[str, tuple[int, int, int, int]]:
        """Each streamed layer's time-axis ``(kernel, stride, dilation, left pad)``."""
        return {n: (p.k[p.ti], p.stride, p.d[p.ti], p.lo) for n, p in self._plans.items()}

    # ------------------------------------------------------------------ state

    def _stateful(self) -> list[_Plan]:
        return [p for p in self._plans.values() if not p.stateless]

    def _default_dtype_device(self) -> tuple[torch.dtype, torch.device]:
        for p in self.model.parameters():
            if p.is_floating_point():
                return p.dtype, p.device
        return torch.get_default_dtype(), torch.device("cpu")

    def init_state(
        self,
        batch_size: int | None = None,
        *,
        example: Tensor | None = None,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> StreamState:
        """A fresh state: the history of every layer is its padding (zeros; for max pools
        their ``padding_value``, ``-inf`` by default; the first frame for ``replicate``,
        filled in by the first step). A step whose chunk has another channel count, batch
        size, dtype or device than the state was made for is refused, naming the chunk's
        value, the expected one and the layer.

        Without ``example`` the buffer shapes must follow from the layers alone, which holds
        for models whose stateful layers are all 1-d convs. Otherwise pass ``example``, a chunk
        of the input (any time length; only its shape, dtype and device are used): the model
        runs once on zeros of that shape to find each buffer's shape.

        Args:
            batch_size: ``N``; defaults to the example's, else 1.
            example: an input chunk ``(N, C, ...)``.
            dtype, device: of the buffers; default the example's, else the model's.
        """
        if batch_size is not None and (
            isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1
        ):
            raise PaddingError(
                f"init_state(): batch_size must be a positive int, got {batch_size!r}"
            )
        if example is not None:
            if not isinstance(example, Tensor):
                raise TypeError(
                    f"init_state(): example must be a Tensor, got {type(example).__name__}"
                )
            self._check_chunk(example, "init_state(): example")
            shape = list(example.shape)
            if batch_size is not None:
                shape[0] = batch_size
            probe = torch.zeros(
                shape,
                dtype=dtype or example.dtype,
                device=device if device is not None else example.device,
            )
            dim = self.axis if self.axis >= 0 else probe.dim() + self.axis
            self._measure_layer_axes(probe)
            # the buffers' shapes do not depend on the time length: where the model refuses
            # the example's length (a pad that needs more samples, a length it asserts),
            # longer ones are tried
            hop, minimum = self._hop_and_minimum()
            first: ModelRaised | None = None
            tried: list[int] = []
            with unchanged(self.model, buffers_only=True):
                for n in probe_lengths(int(probe.shape[dim]), hop, minimum):
                    if n != probe.shape[dim]:
                        shape[dim] = n
                        probe = probe.new_zeros(shape)
                    span = (0, 0, n) if self._lookahead_mode else None
                    ctx = _Context(state_in={}, lazy=True, lookahead=span, shape_only=True)
                    tried.append(n)
                    try:
                        with torch.no_grad():
                            self._run(probe, ctx, "init_state()")
                    except ModelRaised as err:
                        first = first or err
                        continue
                    self._startup_samples(probe)
                    if self._lookahead_mode:
                        self._clocks_for(probe)
                        # modules measured to read ahead join the delay: check them now,
                        # as the first step would, so that the delay read next is final
                        self._self_check(probe)
                    elif 0 < example.shape[dim] < self._hold_hop():
                        # chunks this short are held until they complete an output: measure
                        # when outputs are due now rather than on the first such step
                        self._hold_schedule(probe, dim)
                    return ctx.created
            assert first is not None
            raise PaddingError(
                f"{first} (and on zero inputs of every length tried: {tried}); the stream "
                "runs the model on chunks like the example to find its state's shapes"
            ) from first.error
        n = 1 if batch_size is None else batch_size
        dflt_dtype, dflt_device = self._default_dtype_device()
        dt = dtype or dflt_dtype
        dev = torch.device(device) if device is not None else dflt_device
        state: StreamState = {}
        shared: dict[tuple[int, str], Tensor] = {}
        for plan in self._stateful():
            layer = self._layer(plan)
            if plan.kind not in ("conv", "convt") or plan.nd != 1:
                raise PaddingError(
                    f"init_state(): the buffer shape of {type(layer).__name__} {plan.name!r} "
                    "depends on its input; pass example=<an input chunk>"
                )
            # overlap-add keeps the layer's outputs, others its inputs
            channels: Any = layer.out_channels if plan.partial else layer.in_channels
            like = torch.empty((0,), dtype=dt, device=dev)
            state.update(fresh_entries(plan, (n, int(channels), plan.history), like, shared))
        for rplan in self._rnn_plans.values():
            state.update(rplan.fresh(n, dt, dev, with_pos=rplan.name in self._rnn_hx))
        return state

    def _hop_and_minimum(self) -> tuple[int, int]:
        """The model's total stride, and the samples its windows span (a length every
        layer can run on)."""
        hop = 1
        for plan in self._plans.values():
            if plan.kind != "convt":
                hop *= max(int(plan.stride), 1)
        minimum = 1 + sum(max(p.k_eff - 1, p.lo) for p in self._plans.values() if p.kind != "convt")
        return min(hop, 1 << 14), minimum

    def _measure_layer_axes(self, chunk: Tensor) -> None:
        """Where ``layer_axis`` was not given: each conv's and pool's time axis, measured in
        the model's full runs on zeros at two lengths (the one axis of the layer's input
        that follows the stream's length; an ``(N, T, F)`` input unsqueezed for 2-d convs has
        it at ``(N, 1, T, F)``'s axis 2), once per stream. A layer planned on another axis is
        planned again on it; one called more than once a run, or whose inputs change no
        single axis, keeps the default (1-d layers are not measured: their one spatial axis
        is time)."""
        if self._layer_axis_given or "_layer_axes" in self.__dict__:
            return
        self.__dict__["_layer_axes"] = {}
        shapes: dict[str, list[tuple[int, ...]]] = {}

        def recorder(label: str) -> Any:
            def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
                xs = [a for a in args if isinstance(a, Tensor)]
                if xs:
                    shapes.setdefault(label, []).append(tuple(xs[0].shape))

            return hook

        # a 1-d layer's one spatial axis is its time axis: only layers of more are measured
        several = [n for n, p in self._plans.items() if n != "<model>" and len(p.k) > 1]
        several += [n for n, p in self._start_pads.items() if n != "<model>" and len(p.pads) > 2]
        if not several:
            return
        hooks = [(self._layer_by_name(n), recorder(n)) for n in several]
        hop, minimum = self._hop_and_minimum()
        with self._lock:
            runs, _ = self._zero_runs(chunk, hop, minimum, hooks)
        refusals: dict[str, tuple[int, PaddingError]] = self.__dict__.pop("_refusals", {})
        if len(runs) != 2:
            shapes.clear()  # (the model ran at fewer than two lengths: nothing measured)
        moved = {}
        for label, seen in shapes.items():
            if len(seen) != 2:
                continue
            a = _changed_axis(*seen)
            pad = self._start_pads.get(label)
            now = len(seen[0]) - 1 - pad.pair if pad is not None else 2 + self._plans[label].ti
            if a is not None and a >= 2 and a != now:
                moved[label] = a
            if a is not None and label in refusals and a == refusals[label][0]:
                del refusals[label]  # planned on its measured time axis
        for label, (_, err) in refusals.items():
            if label not in moved:  # refused on the default axis, not found elsewhere
                raise err
        self.__dict__["_layer_axes"] = moved
        for label, a in moved.items():
            layer = self._layer_by_name(label)
            if label in self._start_pads:
                start = self._start_pad(label, layer, a)
                if start is None:  # (a pad module planned before: not reached)
                    continue
                self._start_pads[label] = start
            else:
                self._plans[label] = _plan_layer(label, layer, a, self._lookahead_mode)
            stand_in = self._stand_in_of(label, layer)
            self._slots = [
                (parent, key, lay, stand_in if lay is layer else s)
                for parent, key, lay, s in self._slots
            ]
        if moved:
            self._pairs_cache.clear()
            self._startup_cache.clear()
            self._checked.clear()
            self.__dict__.pop("_hold_hop_value", None)
            if self._clocks is not None:  # stride-1 lookahead: the clocks from the layers
                one = Fraction(1)
                rates = dict.fromkeys([*self._plans, *self._rnn_plans], one)
                self._clocks = make_clocks(self._plans, rates, one, self._lookahead)

    def _layer(self, plan: _Plan) -> nn.Module:
        return self._layer_by_name(plan.name)

    def _layer_by_name(self, name: str) -> nn.Module:
        if name == "<model>":
            return self.model
        return self.model.get_submodule(name)

    def _self_check(self, chunk: Tensor) -> None:
        """Before the first step for an input shape: measure the modules that need it and
        probe the whole model against its plan (see ``padkit.streaming._check``); raises
        naming a module that cannot stream."""
        if self._probing:
            return
        self._measure_layer_axes(chunk)
        if not (self._check or self._measure):
            return
        if not chunk.is_floating_point():
            unknown = [n for n, kind in self._measure.items() if kind == "unknown"]
            if unknown:
                mod = self._layer_by_name(unknown[0])
                cls = type(mod).__name__
                raise PaddingError(
                    f"StreamingModule does not know whether {cls} {unknown[0]!r} acts on each "
                    f"time step on its own: modules are measured on a floating-point probe, and "
                    f"the input is {chunk.dtype}. If it does, pass allow=[{cls}] (or "
                    f"allow=[{unknown[0]!r}])"
                )
            return
        dim = self.axis if self.axis >= 0 else chunk.dim() + self.axis
        shape = chunk.shape
        # the input's shape but for its batch and time sizes (torch.Size slices: plain ints)
        training = self._modules["model"].training  # type: ignore[union-attr]
        key = (shape[1:dim], shape[dim + 1 :], chunk.dtype, chunk.device, training)
        if key in self._checked:
            return
        with self._lock:
            self._probing = True
            try:
                probe_stream(self, chunk)
            finally:
                self._probing = False
            # also where the model ran at no probe length (its steps then raise its errors):
            # probing again on every step would cost the lengths tried each time
            self._checked.add(key)

    def reset(self, rows: Sequence[int] | Tensor | None = None) -> None:
        """Forget the state that :meth:`forward` keeps: all of it (the next call starts a new
        stream), or only that of the batch ``rows`` (see :meth:`reset_rows`)."""
        if rows is None or self._state is None:
            self._state = None
            return
        self._state = self.reset_rows(self._state, rows)

    def reset_rows(self, state: StreamState, rows: Sequence[int] | Tensor) -> StreamState:
        """A copy of ``state`` in which the streams of the batch ``rows`` start over.

        Every row of a batch keeps its own sample count, so streams that start, restart or
        stop at different times share one batch; each row's outputs equal that stream run
        alone. A strided layer can serve rows at different counts only while they complete
        the same number of outputs per chunk: reset rows when the other rows have seen a
        multiple of the model's total stride and feed chunks of such lengths (else
        :meth:`step` raises). Not available with ``lookahead`` (one delay line per batch).
        """
        if self._lookahead_mode:
            raise PaddingError(
                "reset_rows(): a lookahead stream holds one input delay line for the whole "
                "batch; reset the whole state (init_state()) instead"
            )
        if not isinstance(state, dict):
            raise TypeError(f"reset_rows(): state must be a state dict, got {type(state).__name__}")
        ok = isinstance(rows, Tensor) and not rows.is_floating_point() and not rows.is_complex()
        if not ok and not isinstance(rows, Tensor):
            seq = list(rows) if isinstance(rows, (list, tuple, range)) else None
            ok = seq is not None and all(
                isinstance(r, int) and not isinstance(r, bool) for r in seq
            )
        if not ok:
            raise TypeError(
                f"reset_rows(): rows must be a list/tuple/range of ints or an integer tensor, "
                f"got {rows!r}"
            )
        idx = torch.as_tensor(rows, dtype=torch.int64).flatten()
        self._refuse_windows("reset_rows()", "holds all rows alike")
        state = self._settled(state)
        if self._has_reflect():
            self._reset_rows_reflect(state, idx, rows)
        new = dict(state)
        new.pop(_STARTUP_KEY, None)
        counts: dict[int, Tensor] = {}  # shared count tensors stay shared
        for plan in self._stateful():
            buf, pos = state.get(plan.key_buf), state.get(plan.key_pos)
            if buf is None or pos is None:
                continue
            n = int(pos.shape[0]) if pos.dim() else 1
            if idx.numel() and (int(idx.min()) < -n or int(idx.max()) >= n):
                raise PaddingError(
                    f"reset_rows(): rows={rows!r} out of range for a batch of {n} streams"
                )
            fill = max_pad_fill(buf, plan.fill) if plan.kind == "max" else 0.0
            b = buf.clone()
            b[idx.to(buf.device)] = fill
            p = counts.get(id(pos))
            if p is None:
                p = pos.clone() if pos.dim() else pos.expand(n).clone()
                p[idx.to(pos.device)] = 0
                counts[id(pos)] = p
            new[plan.key_buf], new[plan.key_pos] = b, p
        for rplan in self._rnn_plans.values():
            for key in (*rplan.state_keys(), rplan.key_pos):
                value = state.get(key)
                if value is None:
                    continue
                n = int(value.shape[0])
                if idx.numel() and (int(idx.min()) < -n or int(idx.max()) >= n):
                    raise PaddingError(
                        f"reset_rows(): rows={rows!r} out of range for a batch of {n} streams"
                    )
                v = value.clone()
                v[idx.to(v.device)] = 0.0
                new[key] = v
        return new

    def _reset_rows_reflect(self, state: StreamState, idx: Tensor, rows: Any) -> None:
        """A reflect-padded model restarts the whole batch or nothing: a restarted row would
        hold its input for :attr:`startup_delay` samples while the other rows emit, and one
        step returns one time length for every row."""
        n = next(
            (
                int(state[p.key_pos].shape[0])
                for p in self._plans.values()
                if p.key_pos in state and state[p.key_pos].dim()
            ),
            None,
        )
        if n is None:
            return
        if idx.numel() and (int(idx.min()) < -n or int(idx.max()) >= n):
            raise PaddingError(
                f"reset_rows(): rows={rows!r} out of range for a batch of {n} streams"
            )
        if len({int(r) % n for r in idx.tolist()}) == n:
            return  # every row restarts: the whole batch starts over together
        raise PaddingError(
            f"reset_rows(): rows={rows!r} restart part of a batch of {n}, but the model pads "
            f"time in mode 'reflect' ({self._reflect_names()}): a restarted stream holds its "
            f"first {self._startup or 'startup_delay'} samples before its first output (its "
            "reflected samples must arrive), while the other rows emit, and a step returns one "
            "time length for all rows. Start the new stream in a state of its own "
            "(init_state()), restart every row, or pad time with 'zeros'/'replicate'"
        )

    # ------------------------------------------------------------------ stepping

    def _check_chunk(self, chunk: Any, what: str) -> None:
        if not isinstance(chunk, Tensor):
            raise TypeError(f"{what} must be a Tensor, got {type(chunk).__name__}")
        if chunk.dim() < 3:
            raise PaddingError(
                f"{what} must be batched, (N, C, ...) or (N, T, D), with the time axis at "
                f"axis={self.axis}, got shape {tuple(chunk.shape)}"
            )
        dim = self.axis if self.axis >= 0 else chunk.dim() + self.axis
        if not 1 <= dim < chunk.dim():
            raise PaddingError(
                f"{what} of shape {tuple(chunk.shape)} has no spatial axis {self.axis}"
            )

    def step(self, chunk: Tensor, state: StreamState) -> tuple[Any, StreamState]:
        """Feed one chunk; return the outputs it completes and the next state.

        With ``lookahead``, the outputs lag the input by :attr:`delay` samples; the last
        ones come out of :meth:`flush` when the stream ends.

        Args:
            chunk: ``(N, C, ...)`` (or ``(N, T, D)`` with ``axis=1``) with any number of
                samples on the time axis.
            state: from :meth:`init_state` or the previous step (not modified).

        Returns:
            ``(output, new_state)``; ``output`` is what the model returns for the chunk.
        """
        memo = self._hold_memo
        if (
            memo is not None
            and type(state) is dict
            and state.get(_HELD_COUNT_KEY) is memo.count_t
            and state.get(_HELD_KEY) is memo.buf
            and type(chunk) is Tensor
        ):
            # the state is the latest held one and the chunk continues it: write the chunk
            # after the held samples while they still complete no output (see ``_hold.py``);
            # any other chunk takes the full path, which says what is wrong
            count = memo.write_one(chunk)
            if count is None:
                count = memo.write(chunk)
            if count is not None:
                new = dict(state)
                new[_HELD_COUNT_KEY] = count
                return memo.out, new
        self._check_chunk(chunk, "step(): chunk")
        if not isinstance(state, dict):
            raise TypeError(
                f"step(): state must be the dict from init_state() or step(), got "
                f"{type(state).__name__}"
            )
        self._self_check(chunk)
        if self._lookahead_mode:
            return self._step_lookahead(chunk, state, final=False, lazy=False)
        return self._step_causal(chunk, state, lazy=False, final=False)

    def _step_causal(
        self, chunk: Tensor, state: StreamState, *, lazy: bool, final: bool
    ) -> tuple[Any, StreamState]:
        """One causal step; with reflect time padding, the input is held (and an empty
        output returned) until the stream's start-up is complete (:attr:`startup_delay`)."""
        x = chunk
        pending = state.get(_STARTUP_KEY)
        if pending is not None or (self._has_reflect() and self._at_start(state)):
            dim = self.axis if self.axis >= 0 else chunk.dim() + self.axis
            if pending is not None:
                check_continues(_STARTUP_KEY, pending, chunk, dim, "until the stream starts")
                x = torch.cat([pending, chunk], dim)
            if not final and x.shape[dim] < self._startup_samples(chunk):
                ctx = _Context(state_in=state, lazy=lazy, chunk=_described(chunk))
                out = self._run(x.narrow(dim, 0, 0), ctx, "step()")
                held = dict(ctx.created)
                held.update(state)
                held[_STARTUP_KEY] = x.clone()
                return out, held
        waiting = self._held_input(state)
        if waiting is not None:
            dim = self.axis if self.axis >= 0 else chunk.dim() + self.axis
            check_continues(_HELD_KEY, waiting, chunk, dim, "until it completes an output")
            x = torch.cat([waiting, chunk], dim) if chunk.shape[dim] else waiting
            state = {k: v for k, v in state.items() if k not in (_HELD_KEY, _HELD_COUNT_KEY)}
        if not final and not lazy:
            kept = self._hold(x, chunk, state)
            if kept is not None:
                return kept
        ctx = _Context(state_in=state, lazy=lazy, chunk=_described(chunk))
        try:
            out = self._run(x, ctx, "flush()" if final else "step()")
        except ModelRaised:
            dim = self.axis if self.axis >= 0 else chunk.dim() + self.axis
            if final or lazy or x.shape[dim] != 0:
                raise
            # an empty chunk the model's own code cannot take (a reshape with -1 of zero
            # elements): it completes no output, and the state stays as it is
            empty = self._empty_output(x, state, dim)
            if empty is None:
                raise
            return empty, state
        new_state = {**ctx.created, **state, **ctx.state_out}
        new_state.pop(_STARTUP_KEY, None)
        return out, new_state

    def _empty_output(self, x: Tensor, state: StreamState, dim: int) -> Tensor | None:
        """The output of a chunk of no samples for a model that does not run on one: its
        output for a hop more (run from ``state``, which it leaves as it is: a hop completes
        an output) with no time steps, on the output's measured time axis; None where the
        model does not return one tensor, or its time axis is not known."""
        self._measure_out_axis(x)
        if self.__dict__.get("_out_axis") is None:
            return None
        shape = list(x.shape)
        shape[dim] = max(1, self._hop_and_minimum()[0])
        one = x.new_zeros(shape)
        try:
            out = self._run(one, _Context(state_in=state, lazy=False, chunk=_described(one)))
        except PaddingError:
            return None
        if not isinstance(out, Tensor):
            return None
        return out.narrow(self._out_dim(out.dim()), 0, 0)

    # ------------------------------------------------------------------ holding

    def _init_hold(self) -> None:
        # per input shape (but batch and time): the schedule, or None (never held)
        self._holds: dict[tuple[Any, ...], HoldSchedule | None] = {}
        # per input shape, dtype, device and mode: the output of a step that completes
        # nothing, or None (the model does not run on an empty chunk)
        self._held_outs: dict[tuple[Any, ...], Any] = {}
        # the buffer of the latest held state, written in place by the step from it
        self._hold_memo: HeldBuffer | None = None

    def _hold(self, x: Tensor, chunk: Tensor, state: StreamState) -> tuple[Any, StreamState] | None:
        """Hold ``x`` (the held input and the chunk) in the state when it completes no
        output; returns the step's output and state, or None to run the model."""
        if self._lookahead_mode or self._probing or self._has_reflect():
            return None  # (the self-check's probe streams compare every step's modules)
        dim = self.axis if self.axis >= 0 else x.dim() + self.axis
        if x.shape[dim] >= self._hold_hop():  # a whole period completes an output (or hop 1)
            return None
        schedule = self._hold_schedule(x, dim)
        if schedule is None:
            return None
        pos = state.get(schedule.pilot)
        if pos is None:
            return None
        counts = pos.tolist() if pos.dim() else [int(pos)]
        if not counts or any(c != counts[0] for c in counts):
            return None  # rows at different counts: the model runs every step
        gap = schedule.gap(int(counts[0]))
        if x.shape[dim] >= gap:
            return None
        out = self._held_output(x, state, dim)
        if out is None:
            return None
        n = int(x.shape[dim])
        new = dict(state)
        if x.requires_grad:  # autograd reaches the held input: no writes in place
            new[_HELD_KEY] = x.clone() if x is chunk else x
            new[_HELD_COUNT_KEY] = held_count(n)
            self.__dict__["_hold_memo"] = None
            return out, new
        # room for every sample until the output is due (gap - 1 held at most)
        shape = list(x.shape)
        shape[dim] = gap - 1
        buf = x.new_empty(shape)
        buf.narrow(dim, 0, n).copy_(x)
        memo = HeldBuffer(buf, n, dim, out)
        new[_HELD_KEY] = buf
        new[_HELD_COUNT_KEY] = memo.count_t
        self.__dict__["_hold_memo"] = memo
        return out, new

    def _hold_hop(self) -> int:
        """The model's total stride (``_hop_and_minimum``), once per stream."""
        hop = self.__dict__.get("_hold_hop_value")
        if hop is None:
            hop = self.__dict__["_hold_hop_value"] = self._hop_and_minimum()[0]
        return int(hop)

    def _hold_schedule(self, x: Tensor, dim: int) -> HoldSchedule | None:
        key = (tuple(x.shape[1:dim]), tuple(x.shape[dim + 1 :]))
        if key in self._holds:
            return self._holds[key]
        schedule = None
        hop, minimum = self._hop_and_minimum()
        if hop > 1:
            pilots = {p.key_pos for p in self._stateful()}
            shape = list(x.shape)
            shape[0] = 1

            def run(n: int) -> tuple[int, dict[str, int]] | None:
                shape[dim] = n
                ctx = _Context(state_in={}, lazy=True)
                try:
                    with unchanged(self.model, buffers_only=True), torch.no_grad():
                        out = self._run(x.new_zeros(shape), ctx, "step()")
                except Exception:  # the model refuses this length: no schedule
                    return None
                if not isinstance(out, Tensor):
                    return None
                odim = self._out_dim(out.dim())
                counts = {}
                for key in pilots:
                    v = ctx.state_out.get(key)
                    if isinstance(v, Tensor) and v.numel() == 1:
                        counts[key] = int(v.reshape(()))
                return int(out.shape[odim]), counts

            self._measure_out_axis(x)
            with self._lock:
                schedule = measure_schedule(run, hop, minimum, pilots)
        if len(self._holds) >= 64:
            self._holds.clear()
        self._holds[key] = schedule
        return schedule

    def _held_output(self, x: Tensor, state: StreamState, dim: int) -> Any:
        """What a step that completes no output returns (the model's run on an empty chunk,
        or where its code cannot take one, its output of a hop with no time steps; once per
        shape), or None where neither gives one tensor."""
        key = self._empty_key(x, dim)
        if key in self._held_outs:
            return self._held_outs[key]
        ctx = _Context(state_in=state, lazy=True, chunk=_described(x))
        try:
            out = self._run(x.narrow(dim, 0, 0), ctx, "step()")
        except Exception:
            try:  # the model's code cannot take no time steps: the output of a hop, emptied
                out = self._empty_output(x, state, dim)
            except Exception:
                out = None
        if out is not None and not isinstance(out, Tensor):
            out = None  # a structure of outputs: the model runs every step
        self._keep_empty(key, out)
        return out

    def _empty_key(self, chunk: Tensor, dim: int) -> tuple[Any, ...]:
        """The key of a step's empty output (held, or a lookahead step that commits
        nothing): the mode, the chunk's shape but its time length, dtype, device, the
        model's mode and the grad mode."""
        shape = list(chunk.shape)
        shape[dim] = 0
        training = self._modules["model"].training  # type: ignore[union-attr]
        mode = self._lookahead_mode
        return (mode, tuple(shape), chunk.dtype, chunk.device, training, torch.is_grad_enabled())

    def _keep_empty(self, key: tuple[Any, ...], out: Any) -> None:
        """Store a step's empty output (or None: the model does not run on one), keeping
        at most 64."""
        if len(self._held_outs) >= 64:
            self._held_outs.clear()
        self._held_outs[key] = out

    def _held_input(self, state: StreamState) -> Tensor | None:
        """The input samples a causal state holds until they complete an output (the
        first ``"<stream>.held_count"`` of ``"<stream>.held"``), or None."""
        held = state.get(_HELD_KEY)
        if held is None:
            return None
        count = state.get(_HELD_COUNT_KEY)
        dim = self.axis if self.axis >= 0 else held.dim() + self.axis
        total = int(held.shape[dim])
        if count is None:  # a state saved before the count: all of it is held
            return held
        n = int(count) if isinstance(count, Tensor) and count.numel() == 1 else -1
        if not 0 <= n <= total:
            raise PaddingError(
                f"step(): state {_HELD_KEY!r} (shape {tuple(held.shape)}) comes with "
                f"{_HELD_COUNT_KEY!r} = {count!r}, not a count of its samples from 0 to "
                f"{total}; pass the state returned by the previous step"
            )
        return held if n == total else held.narrow(dim, 0, n)

    def _settled(self, state: StreamState) -> StreamState:
        """``state`` with its held input run through the model (which completes no output
        from it: it was held because it would not)."""
        held = state.get(_HELD_KEY)
        if held is None:
            return state
        dim = self.axis if self.axis >= 0 else held.dim() + self.axis
        return self._step_causal(held.narrow(dim, 0, 0), state, lazy=False, final=True)[1]

    def _has_reflect(self) -> bool:
        found = self.__dict__.get("_any_reflect")
        if found is None:  # once per stream (its layers are fixed when it is made)
            found = self.__dict__["_any_reflect"] = any(p.reflect for p in self._plans.values())
        return bool(found)

    def _at_start(self, state: StreamState) -> bool:
        """Whether the reflect-padded layers have not started yet (all rows)."""
        started = set()
        for plan in self._plans.values():
            pos = state.get(plan.key_pos) if plan.reflect else None
            if pos is None or pos.numel() == 0:
                continue
            started.update({int(pos.min()) > 0, int(pos.max()) > 0})
        if len(started) > 1:
            raise PaddingError(
                "step(): some streams in this batch have started and others not, and the "
                f"model pads time in mode 'reflect' ({self._reflect_names()}): a starting row "
                "would wait for its start-up while the others emit. Start new streams in a "
                "state of their own (init_state())"
            )
        return not started or started == {False}

    def _reflect_names(self) -> list[str]:
        return [p.name for p in self._plans.values() if p.reflect]

    def _startup_samples(self, chunk: Tensor) -> int:
        """The input samples a stream must hold before its first run, so that every
        reflect-padded layer's first call brings the ``lo + 1`` samples its pad reflects
        (found by running the model on zero inputs of growing length; cached per shape)."""
        reflect = [p for p in self._plans.values() if p.reflect]
        if not reflect or self._lookahead_mode:  # (lookahead: the delay covers the pads)
            return 0
        dim = self.axis if self.axis >= 0 else chunk.dim() + self.axis
        key = (
            tuple(int(v) for i, v in enumerate(chunk.shape) if i not in (0, dim)),
            chunk.dtype,
            str(chunk.device),
        )
        hit = self._startup_cache.get(key)
        if hit is not None:
            self._startup = hit
            return hit
        shape = list(chunk.shape)
        shape[0] = 1
        failure: list[str] = []

        def enough(n: int) -> bool:
            shape[dim] = n
            ctx = _Context(state_in={}, lazy=True, record={}, shape_only=True)
            try:
                with torch.no_grad():
                    self._run(chunk.new_zeros(shape), ctx, "startup_delay")
            except ModelRaised as err:  # the model's own code needs a longer input
                failure[:] = [str(err).split(": ", 1)[-1]]
                return False
            assert ctx.record is not None
            return all(ctx.record.get(p.name, (0, 0))[1] > p.lo for p in reflect)

        top = 1
        while not enough(top):
            if top >= 1 << 22:
                raise PaddingError(
                    f"StreamingModule: the reflect-padded layers {[p.name for p in reflect]} "
                    f"do not all get lo + 1 samples on a first run of {top} samples"
                    + (f" (the model raised {failure[0]})" if failure else "")
                    + "; such a model cannot start a stream"
                )
            top *= 2
        low = top // 2  # not enough (0: nothing)
        while top - low > 1:
            mid = (low + top) // 2
            if enough(mid):
                top = mid
            else:
                low = mid
        self._startup_cache[key] = top
        self._startup = top
        return top

    def flush(self, state: StreamState, example: Tensor | None = None) -> Any:
        """End the stream: the outputs still held back (lookahead mode), as the full-sequence
        run computes them with the right padding at the sequence's end.

        ``example`` (any chunk, for its shape) is needed only when no step has run yet. In
        causal mode nothing is held back and the output has time length 0.
        """
        if not isinstance(state, dict):
            raise TypeError(f"flush(): state must be a state dict, got {type(state).__name__}")
        held = state.get(_INPUT_KEY, state.get(_STARTUP_KEY, state.get(_HELD_KEY)))
        if example is None and held is None:
            raise PaddingError(
                "flush(): pass example= (a chunk): the state holds no input samples to take "
                "the output's shape from (nothing is held back in it)"
            )
        probe = held if held is not None else example
        assert probe is not None
        dim = self.axis if self.axis >= 0 else probe.dim() + self.axis
        empty = probe.narrow(dim, 0, 0)
        if self._lookahead_mode:
            return self._step_lookahead(empty, state, final=True, lazy=False)[0]
        self._check_chunk(empty, "flush(): example")
        return self._step_causal(empty, state, lazy=False, final=True)[0]

    def _confirm_clocks(self, chunk: Tensor) -> None:
        """A lookahead stream of stride-1 layers takes every clock to be the input's; code
        between them may resample time all the same (an ``nn.Upsample``): measured once,
        on two full runs, before the first step, and the clocks made from what was
        measured where they differ."""
        c = self._clocks
        if not self._lookahead_mode or c is None or self.__dict__.get("_clocks_confirmed"):
            return
        with self._lock:
            try:
                rates, out = self._measure_rates(chunk)
            except PaddingError:  # (a layer not called at both lengths: the check says)
                rates, out = c.rates, c.out
                self._measure_out_axis(chunk)
            if rates != c.rates or out != c.out:
                self._clocks = self._remade_clocks(rates, out)
            self.__dict__["_clocks_confirmed"] = True

    def _out_dim(self, ndim: int) -> int:
        """The time axis of the model's output of ``ndim`` axes: the one measured to follow
        the input's length (a model may return ``(N, T, C)`` for an ``(N, C, T)`` input),
        else the input's ``axis``."""
        a = self.__dict__.get("_out_axis")
        if a is not None and a < ndim:
            return int(a)
        return self.axis if self.axis >= 0 else ndim + self.axis

    def _measure_out_axis(self, chunk: Tensor) -> None:
        """Find the output's time axis (:meth:`_out_dim`) from the model's full runs on zeros
        at two lengths, once per stream; where no single axis follows the length, or the
        model runs at fewer than two lengths, the input's ``axis`` stands."""
        if "_out_axis" in self.__dict__:
            return
        hop, minimum = self._hop_and_minimum()
        with self._lock:
            runs, _ = self._zero_runs(chunk, hop, minimum)
        shapes = [tuple(out.shape) for _, _, out in runs if isinstance(out, Tensor)]
        self.__dict__["_out_axis"] = _changed_axis(*shapes) if len(shapes) == 2 else None

    def _zero_runs(
        self,
        chunk: Tensor,
        hop: int,
        minimum: int,
        hooks: Sequence[tuple[nn.Module, Any]] = (),
        seen: dict[str, int] | None = None,
    ) -> tuple[list[tuple[int, dict[str, int], Any]], list[str]]:
        """The model's runs on zeros shaped like ``chunk`` (batch 1) at the first two probe
        lengths it accepts, multiples of ``hop`` past ``minimum``: per run its length, what
        the forward pre-hooks ``hooks`` ((layer, hook) pairs) wrote to ``seen``, and its
        output; and what it raised at the lengths it refused."""
        dim = self.axis if self.axis >= 0 else chunk.dim() + self.axis
        shape = list(chunk.shape)
        shape[0] = 1
        seen = {} if seen is None else seen
        runs: list[tuple[int, dict[str, int], Any]] = []
        tried: list[str] = []
        handles = [layer.register_forward_pre_hook(hook) for layer, hook in hooks]
        try:
            with unchanged(self.model), torch.no_grad():
                for n in probe_lengths(hop * max(2, math.ceil(minimum / hop)), hop, minimum):
                    if len(runs) == 2:
                        break
                    shape[dim] = n
                    seen.clear()
                    try:
                        out = self.model(chunk.new_zeros(shape))
                    except Exception as err:  # (a length the model refuses: the next)
                        tried.append(f"{n}: {type(err).__name__}: {err}".split("\n")[0])
                        continue
                    runs.append((n, dict(seen), out))
        finally:
            for h in handles:
                h.remove()
        return runs, tried

    def _clocks_for(self, chunk: Tensor) -> Clocks:
        """The lookahead stream's clocks, measured on the first input shape (each layer's
        input length and the output's, in full runs of the model on zeros at two lengths;
        a stream of stride-1 layers has them from its layers, confirmed so)."""
        if self._clocks is not None:
            self._confirm_clocks(chunk)
            return self._clocks
        with self._lock:
            rates, out = self._measure_rates(chunk)
            self._clocks = self._remade_clocks(rates, out)
            self.__dict__["_clocks_confirmed"] = True
        return self._clocks

    def _measure_rates(self, chunk: Tensor) -> tuple[dict[str, Fraction], Fraction]:
        hop = 1
        for plan in self._plans.values():
            hop *= max(int(plan.stride), 1)
        hop = min(hop, 1 << 12)
        _, minimum = self._hop_and_minimum()
        seen: dict[str, int] = {}

        def hook(name: str, plan: _Plan) -> Any:
            def pre(_: nn.Module, args: tuple[Any, ...]) -> None:
                x = args[0] if args else None
                if isinstance(x, Tensor) and name not in seen and x.dim() == plan.nd + 2:
                    seen[name] = int(x.shape[2 + plan.ti])

            return pre

        def rnn_hook(name: str, rplan: RecurrentPlan) -> Any:
            def pre(_: nn.Module, args: tuple[Any, ...]) -> None:
                x = args[0] if args else None
                if isinstance(x, Tensor) and name not in seen and x.dim() in (2, 3):
                    tdim = 0 if x.dim() == 2 or not rplan.batch_first else 1
                    seen[name] = int(x.shape[tdim])

            return pre

        hooks = [(self._layer_by_name(n), hook(n, p)) for n, p in self._plans.items()]
        hooks += [(self._layer_by_name(n), rnn_hook(n, p)) for n, p in self._rnn_plans.items()]
        runs, tried = self._zero_runs(chunk, hop, minimum, hooks, seen)
        for _, _, out in runs:
            if not isinstance(out, Tensor):
                raise PaddingError(
                    f"StreamingModule(lookahead=...): the model returns "
                    f"{type(out).__name__}; lookahead streaming needs a model that "
                    "returns one tensor (its outputs are cut at the committed samples)"
                )
        if len(runs) < 2:
            raise PaddingError(
                "StreamingModule(lookahead=...): the model runs at fewer than two of the "
                f"lengths tried ({'; '.join(tried[:3])}); a lookahead stream measures each "
                "layer's clock on two full runs"
            )
        (n1, l1, out1), (n2, l2, out2) = runs
        s1, s2 = tuple(out1.shape), tuple(out2.shape)
        self.__dict__["_out_axis"] = _changed_axis(s1, s2)
        odim = self._out_dim(len(s1))
        o1, o2 = s1[odim], s2[odim]
        rates: dict[str, Fraction] = {}
        for name in self._rnn_plans:  # (where called: a step says so where it is not)
            if name in l1 and name in l2 and l2[name] > l1[name]:
                rates[name] = Fraction(l2[name] - l1[name], n2 - n1)
        for name, plan in self._plans.items():
            if name not in l1 or name not in l2:
                raise PaddingError(
                    f"StreamingModule(lookahead=...): {type(self._layer(plan)).__name__} "
                    f"{name!r} is not called by the model's forward on inputs of {n1} and {n2} "
                    "samples, so its clock cannot be measured"
                )
            rates[name] = Fraction(l2[name] - l1[name], n2 - n1)
            if rates[name] <= 0:
                raise PaddingError(
                    f"StreamingModule(lookahead=...): {type(self._layer(plan)).__name__} "
                    f"{name!r} gets {l1[name]} and {l2[name]} time steps for inputs of {n1} "
                    f"and {n2} samples: its input does not follow the sequence's length"
                )
        return rates, Fraction(o2 - o1, n2 - n1)

    def _step_lookahead(
        self, chunk: Tensor, state: StreamState, *, final: bool, lazy: bool
    ) -> tuple[Any, StreamState]:
        dim = self.axis if self.axis >= 0 else chunk.dim() + self.axis
        clocks = self._clocks_for(chunk)
        held = state.get(_INPUT_KEY)
        if held is not None:
            check_continues(_INPUT_KEY, held, chunk, dim, "that no output has committed yet")
        pos_t = state.get(_POS_KEY)
        n_prev = int(pos_t) if pos_t is not None else 0
        x = chunk if held is None or held.shape[dim] == 0 else torch.cat([held, chunk], dim)
        n = n_prev + int(chunk.shape[dim])
        # the held input starts where the last run left every layer's history: at
        # clocks.start(n_prev), or earlier when the steps since committed no output
        kept_n = held.shape[dim] if held is not None else 0
        start = n_prev - kept_n
        if start < 0 or start % clocks.hop or start > clocks.start(n_prev):
            raise PaddingError(
                f"step(): state {_INPUT_KEY!r} holds {kept_n} samples after {n_prev}, expected "
                f"{n_prev - clocks.start(n_prev)} or that plus whole hops of {clocks.hop}; "
                "pass the state returned by the previous step"
            )
        nxt = start if final else clocks.start(n)
        quiet = (
            not final
            and not lazy
            and not self._probing  # (the self-check's probe compares every step's modules)
            and n_prev > 0
            and clocks.committed(clocks.out, n) == clocks.committed(clocks.out, n_prev)
        )
        if quiet:
            # the chunk commits no output: the step only keeps it, and the step that commits
            # one runs the model from where the last run left off, as one longer chunk would
            # (see ``_hold.py``)
            empty = self._held_outs.get(self._empty_key(chunk, dim))
            if empty is not None:
                kept = dict(state)
                kept[_INPUT_KEY] = x
                kept[_POS_KEY] = (
                    held_count(n)  # (an int64 scalar like any other, shared)
                    if chunk.device.type == "cpu"
                    else torch.tensor(n, dtype=torch.int64, device=chunk.device)
                )
                return empty, kept
        ctx = _Context(
            state_in=state, lazy=lazy, lookahead=(start, nxt, n), chunk=_described(chunk)
        )
        ctx.clocks = clocks
        ctx.final = final
        out = self._run(x, ctx, "flush()" if final else "step()")
        if not isinstance(out, Tensor):
            raise PaddingError(
                f"StreamingModule(lookahead=...): the model returned {type(out).__name__}; "
                "lookahead streaming needs a model that returns one tensor"
            )
        odim = self._out_dim(out.dim())
        a_out = clocks.at(clocks.out, start)
        first = clocks.committed(clocks.out, n_prev) - a_out
        last = int(out.shape[odim]) if final else clocks.committed(clocks.out, n) - a_out
        if first < 0 or last > out.shape[odim]:
            raise PaddingError(
                f"StreamingModule(lookahead=...): {type(self.model).__name__} '<model>' "
                f"returned {out.shape[odim]} time "
                f"steps for input samples {start}..{n - 1}, where its outputs "
                f"{a_out + max(first, 0)}..{a_out + last - 1} are due (its output clock runs at "
                f"{clocks.out} samples per input sample); its forward pads or crops time in "
                "code the stream does not see"
            )
        out = out.narrow(odim, first, max(0, last - first))
        if quiet and out.shape[odim] == 0:
            self._keep_empty(self._empty_key(chunk, dim), out.clone())
        new_state = dict(ctx.created)
        new_state.update(state)
        new_state.update(ctx.state_out)
        new_state[_INPUT_KEY] = x.narrow(dim, nxt - start, n - nxt).clone()
        new_state[_POS_KEY] = torch.tensor(n, dtype=torch.int64, device=chunk.device)
        return out, new_state

    def forward(self, chunk: Tensor) -> Any:
        """Feed one chunk, keeping the state inside the module (see :meth:`reset`)."""
        self._check_chunk(chunk, "forward(): chunk")
        self._self_check(chunk)
        if self._lookahead_mode:
            out, self._state = self._step_lookahead(
                chunk, self._state or {}, final=False, lazy=True
            )
            return out
        out, self._state = self._step_causal(chunk, self._state or {}, lazy=True, final=False)
        return out

    @property
    def delay(self) -> int:
        """Input samples by which the outputs lag the input (lookahead mode; 0 when causal):
        after ``n`` input samples, every output whose time (output ``j`` of a model of total
        stride ``R`` at input ``j*R``; of an upsampling model at ``j/U``) is before
        ``n - delay`` has come out. Rounded up to a whole sample where the model upsamples
        (:attr:`output_delay` is exact there). For a strided lookahead model it is measured
        on the first input shape (:meth:`init_state` with ``example=`` or the first step);
        asked before that, it raises. Modules measured to read later time steps within a
        window (a non-causal local attention) add how far they read ahead when the model is
        checked, by the same calls. A reflect-padded model's start-up hold is
        :attr:`startup_delay`."""
        if self._lookahead_mode and self._clocks is None:
            raise PaddingError(
                "StreamingModule.delay: the clocks of this strided lookahead stream are "
                "measured on the first input shape; call init_state(example=...) or step() first"
            )
        return self._delay

    @property
    def output_delay(self) -> Fraction:
        """:attr:`delay` in samples of the model's output (lookahead mode): output ``j`` comes
        out once it is ``output_delay`` output samples older than the input's end."""
        self.delay  # raises before the clocks are measured  # noqa: B018
        c = self._clocks
        if c is None:
            return Fraction(0)
        return c.samples(c.delay, c.out)

    @property
    def startup_delay(self) -> int | None:
        """Input samples a stream holds before its first outputs: 0 unless the model pads
        time in mode ``"reflect"``, whose first outputs read samples ``1..lo`` of each such
        layer's input. Once they have arrived, every output comes out with the chunk that
        completes it, as in a zero-padded stream (a start-up hold, not a constant lag).
        Found for an input shape by :meth:`init_state` with ``example=`` or the first step;
        None before that."""
        if not self._has_reflect():
            return 0
        return self._startup

    @property
    def reflect_layers(self) -> dict[str, int]:
        """The layers padding time in mode ``"reflect"``, with their left pad ``lo``: each
        waits for samples ``1..lo`` of its input before its first output."""
        return {p.name: p.lo for p in self._plans.values() if p.reflect}

    @property
    def delays(self) -> dict[str, int]:
        """Each layer's lookahead (lookahead mode): how far its outputs read past their time,
        in samples of its input (a conv or pool: ``k_eff - 1 - lo``, its right pad for a
        length-keeping layer) or of its output (a transposed conv: its start crop).
        :attr:`delay` is their sum, each in input samples, unless ``lookahead`` was given as
        a number (see :meth:`explain`)."""
        if not self._lookahead_mode:
            return {}
        return {n: p.ahead for n, p in self._plans.items() if p.ahead > 0}

    def explain(self) -> str:
        """A table of the streamed layers: kernel, stride, dilation, time pads (crops for a
        transposed conv), and in lookahead mode each layer's clock (its input samples per
        model-input sample), how far it reads ahead and the delay it adds, in model-input
        samples; then the total :attr:`delay` (and :attr:`output_delay`), and the modules
        measured (before the first step) to stream on a window of their last inputs or with
        their running sums carried."""
        c = self._clocks
        mode = "causal" if not self._lookahead_mode else f"lookahead={self._lookahead!r}"
        rows = [
            f"StreamingModule({mode}): {len(self._plans)} streamed layer(s)",
            "| layer | kind | kernel | stride | dilation | time pads | clock | reads ahead "
            "| adds (input samples) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for name, p in self._plans.items():
            kind = {"convt": "transposed conv", "conv": "conv"}.get(p.kind, f"{p.kind} pool")
            pads = f"crops {p.crops}" if p.kind == "convt" else f"({p.lo}, {p.hi})"
            clock = ahead = adds = "-"
            if self._lookahead_mode:
                unit = "output" if p.kind == "convt" else "input"
                ahead = f"{p.ahead} ({unit})"
                if c is not None and name in c.rates:
                    clock = str(c.rates[name])
                    adds = str(Fraction(c.adds.get(name, 0), c.ticks))
                else:
                    clock = adds = "? (measured on the first input)"
            rows.append(
                f"| {name} | {kind} | {p.k[p.ti]} | {p.stride} | {p.d[p.ti]} | {pads} | "
                f"{clock} | {ahead} | {adds} |"
            )
        if self._lookahead_mode and c is not None:
            out = c.samples(c.delay, c.out)
            rows.append(
                f"delay: {Fraction(c.delay, c.ticks)} input samples ({self._delay} whole), "
                f"{out} output samples (output clock {c.out} per input sample; the layers' "
                f"sum, 'auto': {Fraction(c.auto, c.ticks)})"
            )
        elif self._lookahead_mode:
            rows.append("delay: measured on the first input shape (init_state(example=...))")
        for name, w in self._windows.items():
            what = type(self._layer_by_name(name)).__name__
            reads = f"a window of {w.reach} earlier time steps"
            if w.block:
                reads = f"the block of {w.block} time steps holding each step"
            elif w.ahead:
                reads += f" and {w.ahead} later ones"
            row = f"{what} {name!r}: reads {reads} (measured); streams {w.how}, state {w.key!r}"
            if w.ahead and c is not None and name in c.adds:
                row += (
                    f"; clock {w.rate}, adds {Fraction(c.adds[name], c.ticks)} input samples "
                    "to the delay"
                )
            rows.append(row)
        for name, cp in self._cumulative.items():
            what = type(self._layer_by_name(name)).__name__
            rows.append(
                f"{what} {name!r}: reads every earlier time step (measured); streams with its "
                f"torch.cumsum carried ({cp.key_cum(0)!r}, ...) and its torch.arange positions "
                f"offset by {cp.key_pos!r}"
            )
        return "\n".join(rows)

    @property
    def state(self) -> StreamState | None:
        """The state :meth:`forward` keeps (None before the first call or after reset)."""
        return self._state

    def _run(self, chunk: Tensor, ctx: _Context, where: str = "step()") -> Any:
        with self._lock:
            if self._batch_norms:
                self._check_modes()
            # plain dict access on the hot path: nn.Module's __setattr__ and __getattr__ (a
            # failed lookup, then the submodule) cost more than the rest of a small step
            attrs = self.__dict__
            attrs["_ctx"] = ctx
            slots = self._slots
            try:
                if self._root_stand_in is not None:
                    return self._root_stand_in(chunk)
                # the stand-ins in their parents' places for the model's run
                for parent, key, _, stand_in in slots:
                    parent._modules[key] = stand_in
                try:
                    return self._modules["model"](chunk)  # type: ignore[misc]
                finally:
                    for parent, key, layer, _ in reversed(slots):
                        parent._modules[key] = layer
            except PaddingError:
                raise
            except Exception as err:
                if ctx.static_pos is not None or torch.compiler.is_compiling():
                    raise  # export traces the step: its own errors go to the exporter
                dim = self.axis if self.axis >= 0 else chunk.dim() + self.axis
                raise self._model_raised(err, int(chunk.shape[dim]), where) from err
            finally:
                attrs["_ctx"] = None

    def _model_raised(self, err: BaseException, length: int, where: str) -> ModelRaised:
        """The padkit error for what the model's code raised on a run of ``length`` samples,
        naming the deepest of its modules whose forward raised."""
        names = {id(m): name or "<model>" for name, m in self.model.named_modules()}
        for _, key, layer, stand_in in self._slots:
            names[id(stand_in)] = names.get(id(layer), key)
        if self._root_stand_in is not None:
            names[id(self._root_stand_in)] = "<model>"
        raised = model_raised(err, names, self.model, length, where)
        hop = self.__dict__.get("_whole_hops")
        if hop and length % hop:
            raised = ModelRaised(
                f"{raised}; its own code refuses chunks that are not whole hops: the stream "
                f"was checked on chunks of {hop} samples, so step it with multiples of {hop}",
                raised.label,
                raised.error,
                raised.length,
            )
        return raised

    def _run_recurrent(self, plan: RecurrentPlan, layer: nn.Module, x: Any, hx: Any) -> Any:
        ctx = self._ctx
        if ctx is None:  # pragma: no cover - stand-ins exist only inside a step
            raise RuntimeError("padkit streaming stand-in called outside a step")
        if plan.name in ctx.called:
            raise PaddingError(
                f"StreamingModule: {type(layer).__name__} {plan.name!r} ran twice in one step; "
                "a layer applied to two signals needs one state per use (use two layers)"
            )
        ctx.called.add(plan.name)
        if hx is not None:
            self._rnn_hx.add(plan.name)
        created = ctx.created if ctx.lazy else None
        unroll = ctx.static_pos is not None  # export: the fused op would fix the batch size
        if ctx.lookahead is not None and isinstance(x, Tensor) and x.dim() in (2, 3):
            return self._recurrent_span(plan, layer, x, hx, ctx, created)
        return run_recurrent(plan, layer, x, hx, ctx.state_in, ctx.state_out, created, unroll)

    def _recurrent_span(
        self,
        plan: RecurrentPlan,
        layer: nn.Module,
        x: Tensor,
        hx: Any,
        ctx: _Context,
        created: dict[str, Tensor] | None,
    ) -> Any:
        """Lookahead: ``x`` holds the layer's inputs from the span's start to the end. Its
        state is carried over the samples the stream commits (up to the next span's start),
        kept, and the layer runs on from there over the rest, whose state is dropped: the
        next step runs them again."""
        span = ctx.lookahead
        assert span is not None  # (the caller's condition)
        start, nxt, _ = span
        tdim = 0 if x.dim() == 2 or not plan.batch_first else 1
        length = int(x.shape[tdim])
        keep = 0
        if start or nxt:
            rate = ctx.clocks.rates.get(plan.name)
            if rate is None:
                raise PaddingError(
                    f"StreamingModule(lookahead=...): the clock of {type(layer).__name__} "
                    f"{plan.name!r} was not measured (the model's full runs did not call it)"
                )
            a_in, a_next = span_at(ctx.clocks, span, rate)
            keep = a_next - a_in
        if keep < 0 or keep > length:
            raise PaddingError(
                f"StreamingModule(lookahead=...): {type(layer).__name__} {plan.name!r} got "
                f"{length} time steps, but the stream commits {keep} of them: its forward pads "
                "or crops time in code the stream does not see"
            )
        first, rest = x.narrow(tdim, 0, keep), x.narrow(tdim, keep, length - keep)
        out1, _ = run_recurrent(plan, layer, first, hx, ctx.state_in, ctx.state_out, created)
        after = {**ctx.state_in, **(created or {}), **ctx.state_out}
        out2, hn = run_recurrent(plan, layer, rest, hx, after, {}, None)
        return torch.cat([out1, out2], tdim), hn

    def _call_layer(
        self, plan: _Plan, layer: nn.Module, x: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Tensor:
        """A stand-in's call: the layer's streamed run on ``x``."""
        if plan.pre_hooks:  # old-style weight/spectral norm: set the weight, as a call does
            self._run_weight_hooks(plan, layer, x)
        if plan.lean and plan.pre_hooks and not args and not kwargs:
            # the lean step, now that the hooks set the weight (``_layer_call`` tried it
            # already for layers without them)
            y = _lean_step(self._ctx, plan, layer, x)
            if y is not None:
                return y
        elif (
            plan.pointwise
            and not args
            and not kwargs
            and isinstance(x, Tensor)
            and x.dim() == 3
            and x.shape[2] > 0
        ):
            # a 1x1 conv: no state, no padding, the torch conv (skips the layer's own forward)
            w: Any = layer
            return F.conv1d(x, w.weight, w.bias, 1, 0, 1, w.groups)
        if x is None and "input" in kwargs:  # layer(input=x)
            kwargs = dict(kwargs)
            x = kwargs.pop("input")
        if args or kwargs:
            extra = [a for a in args if a is not None and a is not False]
            extra += [k for k, v in kwargs.items() if v is not None and v is not False]
            if extra or type(layer).forward is not _KeywordTolerant.forward:
                raise PaddingError(
                    f"StreamingModule: {type(layer).__name__} {plan.name!r} was called "
                    f"with extra arguments {args!r} {kwargs!r}; a streamed layer takes the "
                    "input only"
                )
        return self._run_layer(plan, layer, x)

    def _run_weight_hooks(self, plan: _Plan, layer: nn.Module, x: Any) -> None:
        from torch.nn.utils.spectral_norm import SpectralNorm

        for hook in weight_hooks(layer):
            if isinstance(hook, SpectralNorm) and layer.training:
                raise PaddingError(
                    f"StreamingModule cannot stream {type(layer).__name__} {plan.name!r} in "
                    "train mode: its spectral norm runs a power iteration (updating its "
                    "buffers) on every call, once per step instead of once per sequence; "
                    "call model.eval()"
                )
            hook(layer, (x,))

    def _run_layer(self, plan: _Plan, layer: nn.Module, x: Tensor) -> Tensor:
        ctx = self._ctx
        if ctx is None:  # pragma: no cover - stand-ins exist only inside a step
            raise RuntimeError("padkit streaming stand-in called outside a step")
        if plan.name in ctx.called:
            raise PaddingError(
                f"StreamingModule: {type(layer).__name__} {plan.name!r} ran twice in one step; "
                "a layer applied to two signals needs one state per use (use two layers)"
            )
        ctx.called.add(plan.name)
        if not isinstance(x, Tensor) or x.dim() != plan.nd + 2:
            raise PaddingError(
                f"StreamingModule: {type(layer).__name__} {plan.name!r} got an input of shape "
                f"{tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__}; streaming "
                f"needs batched (N, C, {', '.join('*' * plan.nd)}) inputs"
            )
        td = 2 + plan.ti
        length = x.shape[td]
        if plan.stateless:
            return layer(x) if length > 0 else empty_output(self._pairs_cache, plan, layer, x)
        key_buf, key_pos = plan.key_buf, plan.key_pos
        state_in = ctx.state_in
        if key_buf in state_in and key_pos in state_in:
            buf, pos = state_in[key_buf], state_in[key_pos]
        elif ctx.lazy:
            shape = list(x.shape)
            shape[td] = plan.history
            if plan.partial:  # overlap-add keeps outputs
                shape[1] = int(layer.out_channels)  # type: ignore[arg-type]
            fresh = fresh_entries(plan, shape, x, ctx.shared_pos)
            ctx.created.update(fresh)
            buf, pos = fresh[key_buf], fresh[key_pos]
        else:
            raise PaddingError(
                f"step(): the state has no entry {key_buf!r}/{key_pos!r} for "
                f"{type(layer).__name__} {plan.name!r}; build the state with init_state()"
            )
        wrong = _wrong_input(plan, layer, x, buf, td, ctx)
        if wrong is not None:
            raise PaddingError(wrong)
        bs, xs = buf.shape, x.shape
        same = (
            bs[td] == plan.history
            and len(bs) == len(xs)
            and bs[0] == xs[0]
            and (bs[1] == layer.out_channels if plan.partial else bs[1] == xs[1])
            and bs[2:td] == xs[2:td]
            and bs[td + 1 :] == xs[td + 1 :]
        )
        if not same:
            want = list(x.shape)
            want[td] = plan.history
            if plan.partial:
                want[1] = int(layer.out_channels)  # type: ignore[arg-type]
            raise PaddingError(
                f"step(): state {key_buf!r} has shape {tuple(buf.shape)} but "
                f"{type(layer).__name__} {plan.name!r} needs {tuple(want)} for an input chunk "
                f"of shape {tuple(x.shape)} (batch size or input shape changed? start a new "
                "state with init_state(), or reset() for forward())"
            )
        if ctx.lookahead is not None:
            return self._run_layer_lookahead(plan, layer, x, buf, pos, ctx)
        if length == 0 and ctx.static_pos is None and ctx.record is None:
            # an empty chunk (checked above like any other; an upstream stride is
            # buffering): no window completes, and the state stays as it is (a step keeps
            # the entries it does not write)
            return self._empty(plan, layer, x)
        if ctx.static_pos is not None:
            pos_i = ctx.static_pos[plan.name]
            mixed = True
        else:
            pos_i, mixed = self._phase(plan, pos, length)
        if ctx.record is not None:
            ctx.record[plan.name] = (pos_i, length)
        if plan.replicate and length > 0:
            first = x.narrow(td, 0, 1).expand(buf.shape)
            if mixed:
                buf = torch.where((pos == 0).view(-1, *[1] * (x.dim() - 1)), first, buf)
            elif pos_i == 0:
                buf = first
        elif plan.reflect and length > 0 and (mixed or pos_i == 0):
            buf = self._reflect_start(plan, layer, x, buf, pos, pos_i, mixed, ctx)
        off, m = plan.window(pos_i, length)
        hist = plan.history
        if plan.partial:
            y, kept = run_overlap_add(self._pairs_cache, plan, layer, x, buf, off, m)
            made = length * plan.stride + hist
            ctx.state_out[key_buf] = _kept(kept, made, hist, ctx.static_pos is not None)
            ctx.state_out[key_pos] = _advanced(ctx, pos, length)
            return y
        if plan.kind != "convt" and hist > 0 and ctx.static_pos is None:
            # a window op (a stride, or pads other than the kernel's reach): copy only the
            # samples its windows read, as one contiguous tensor (a narrowed view of
            # ``history ++ chunk`` would reach the op non-contiguous, which slows it), and
            # the next history on its own
            if m > 0:
                span = (m - 1) * plan.stride + plan.k_eff
                if off >= hist:  # the windows read the chunk only
                    seg = x.narrow(td, off - hist, span)
                elif off + span <= hist:  # ... the history only
                    seg = buf.narrow(td, off, span)
                else:
                    seg = torch.cat(
                        [buf.narrow(td, off, hist - off), x.narrow(td, 0, span - hist + off)],
                        dim=td,
                    )
                y = run_op(self._pairs_cache, plan, layer, seg, pos, None, off - hist)
            else:
                y = empty_output(self._pairs_cache, plan, layer, x)
            if length >= hist:
                # a copy: a view would see the model (or the caller) change ``x`` in place
                ctx.state_out[key_buf] = x.narrow(td, length - hist, hist).clone()
            else:
                ctx.state_out[key_buf] = torch.cat(
                    [buf.narrow(td, length, hist - length), x], dim=td
                )
            ctx.state_out[key_pos] = _advanced(ctx, pos, length)
            return y
        cat = torch.cat([buf, x], dim=td) if hist > 0 else x
        if m > 0:
            if plan.kind == "convt" and ctx.static_pos is None:
                y = run_transposed_window(self._pairs_cache, plan, layer, cat, off, m)
            elif plan.kind == "convt":
                y = run_transposed(self._pairs_cache, plan, layer, cat)
                if off != 0 or y.shape[td] != m:
                    y = y.narrow(td, off, m)
            else:
                span = (m - 1) * plan.stride + plan.k_eff
                seg = cat if off == 0 and span == cat.shape[td] else cat.narrow(td, off, span)
                y = run_op(self._pairs_cache, plan, layer, seg, pos, None, off - hist)
        else:
            y = empty_output(self._pairs_cache, plan, layer, x)
        if plan.history > 0:
            tail = cat.narrow(td, length, plan.history)
            exporting = ctx.static_pos is not None
            ctx.state_out[key_buf] = _kept(tail, cat.shape[td], plan.history, exporting)
        else:
            ctx.state_out[key_buf] = buf
        ctx.state_out[key_pos] = _advanced(ctx, pos, length)
        return y

    def _empty(self, plan: _Plan, layer: nn.Module, x: Tensor) -> Tensor:
        """The (time length 0) output of a layer fed an empty chunk, made once per layer,
        input shape, dtype and device (an empty tensor holds no values to change)."""
        key = (plan.name, tuple(x.shape), x.dtype, x.device)
        got = self._empties.get(key)
        if got is None:
            if len(self._empties) >= 1024:
                self._empties.clear()
            got = self._empties[key] = empty_output(self._pairs_cache, plan, layer, x)
        return got

    def _reflect_start(
        self,
        plan: _Plan,
        layer: nn.Module,
        x: Tensor,
        buf: Tensor,
        pos: Tensor,
        pos_i: int,
        mixed: bool,
        ctx: _Context,
    ) -> Tensor:
        """The history of a reflect-padded layer at the start of its stream: samples
        ``lo .. 1`` of its first input (what ``F.pad(x, (lo, 0), mode="reflect")`` puts
        before it), for the rows that start now."""
        td = 2 + plan.ti
        lo = plan.lo
        if x.shape[td] <= lo:
            if ctx.shape_only or (ctx.static_pos is not None and pos_i > 0):
                # a probe, or a graph exported past the start-up (it serves such states)
                return buf
            raise PaddingError(
                f"StreamingModule: {type(layer).__name__} {plan.name!r} pads the time axis in "
                f"mode 'reflect' by {lo}: the first call of its stream must bring at least "
                f"{lo + 1} samples (its pad reflects samples 1..{lo}), got {x.shape[td]}. The "
                "stream holds its input until the start-up is complete (startup_delay); a row "
                "restarted alone, or a sequence shorter than that, cannot start this layer"
            )
        refl = x.narrow(td, 1, lo).flip(td)
        if plan.history > lo:  # samples before the pad: never read by a window
            refl = torch.cat([buf.narrow(td, 0, plan.history - lo), refl], dim=td)
        if mixed:
            return torch.where((pos == 0).view(-1, *[1] * (x.dim() - 1)), refl, buf)
        return refl

    def _phase(self, plan: _Plan, pos: Tensor, length: int) -> tuple[int, bool]:
        """The sample count all rows share for this layer's windows, and whether the rows'
        counts differ (then only where the difference does not matter)."""
        if pos.dim() == 0:
            return int(pos), False
        values = pos.tolist()
        first = values[0]
        if all(v == first for v in values):
            return int(first), False
        windows = {plan.window(int(v), length) for v in set(values)}
        if len(windows) > 1:
            raise PaddingError(
                f"step(): the streams in this batch are at different phases of "
                f"{plan.name!r} (stride {plan.stride}; samples seen per row: {values}), so "
                "this chunk completes a different number of outputs per row. Reset rows only "
                "when the other rows have seen a multiple of the model's total stride, and "
                "feed chunks whose length is a multiple of it"
            )
        return int(first), True

    def _run_layer_lookahead(
        self, plan: _Plan, layer: nn.Module, x: Tensor, buf: Tensor, pos: Tensor, ctx: _Context
    ) -> Tensor:
        """Lookahead mode: ``x`` covers this layer's input samples from the span's start
        (``start`` on its clock) to the end, as if the stream ended now; its history holds
        the committed samples before that. The right pad (a transposed conv: the end of its
        output) stands for the samples not seen yet; what reads it is recomputed on the
        next step."""
        assert ctx.lookahead is not None
        start, nxt, _ = ctx.lookahead
        td = 2 + plan.ti
        length = int(x.shape[td])
        a_in, a_next = (0, 0)
        if start or nxt:
            a_in, a_next = span_at(ctx.clocks, ctx.lookahead, ctx.clocks.rates[plan.name])
        hist = plan.history
        if a_in == 0 and length > 0 and (plan.replicate or plan.reflect) and plan.lo > 0:
            # the span starts the layer's input: its left pad is the first sample repeated,
            # or samples lo..1 mirrored (where the span has them: else its outputs read
            # samples not committed yet, which its lookahead keeps from being committed)
            if plan.replicate:
                buf = x.narrow(td, 0, 1).expand(buf.shape)
            elif length > plan.lo:
                refl = x.narrow(td, 1, plan.lo).flip(td)
                if hist > plan.lo:
                    refl = torch.cat([buf.narrow(td, 0, hist - plan.lo), refl], dim=td)
                buf = refl
        parts = [buf, x] if hist > 0 else [x]
        if plan.kind == "convt":
            cat = torch.cat(parts, dim=td) if len(parts) > 1 else x
            y = self._transposed_span(plan, layer, cat, a_in, length)
        else:
            if plan.hi > 0:
                shape = list(x.shape)
                shape[td] = plan.hi
                fill = max_pad_fill(x, plan.fill) if plan.kind == "max" else 0.0
                seen = torch.cat(parts, dim=td) if len(parts) > 1 else x
                if ctx.final and plan.replicate and seen.shape[td] > 0:
                    # the flush: the sequence ends here, its last sample repeated
                    parts.append(seen.narrow(td, seen.shape[td] - 1, 1).expand(shape))
                elif ctx.final and plan.reflect and seen.shape[td] > plan.hi:
                    last = seen.shape[td] - 1 - plan.hi
                    parts.append(seen.narrow(td, last, plan.hi).flip(td))
                else:  # (the right pad stands for samples not seen yet: never committed)
                    parts.append(x.new_full(shape, fill))
            cat = torch.cat(parts, dim=td) if len(parts) > 1 else x
            t0 = torch.full((x.shape[0],), a_in - plan.lo, dtype=torch.int64, device=x.device)
            if cat.shape[td] >= plan.k_eff:
                y = run_op(self._pairs_cache, plan, layer, cat, t0, a_in + length)
            else:
                y = empty_output(self._pairs_cache, plan, layer, x)
        if hist > 0:
            keep = a_next - a_in
            if keep < 0 or keep + hist > hist + length:
                raise PaddingError(
                    f"StreamingModule(lookahead=...): {type(layer).__name__} {plan.name!r} got "
                    f"{length} time steps from its step {a_in}, but the stream commits its "
                    f"inputs up to {a_next}: its forward pads or crops time in code the stream "
                    "does not see"
                )
            ctx.state_out[plan.key_buf] = cat.narrow(td, keep, hist).clone()
        else:
            ctx.state_out[plan.key_buf] = buf
        ctx.state_out[plan.key_pos] = pos
        return y

    def _transposed_span(
        self, plan: _Plan, layer: Any, cat: Tensor, a_in: int, length: int
    ) -> Tensor:
        """A transposed conv's outputs from ``a_in * s`` (after its start crop) to the end of
        its output on ``a_in + length`` inputs, from ``history ++ span``."""
        td = 2 + plan.ti
        s, h = plan.stride, plan.history
        total = a_in + length  # the layer's inputs so far, as if the stream ended now
        want = (total - 1) * s + plan.k_eff - plan.lo - plan.hi + plan.op if total > 0 else 0
        first = plan.lo + h * s  # output a_in * s in the uncropped output of cat
        last = want + plan.lo - (a_in - h) * s
        if cat.shape[td] == 0 or last <= first:
            return empty_output(self._pairs_cache, plan, layer, cat)
        y = run_transposed(self._pairs_cache, plan, layer, cat)
        if last > y.shape[td]:
            # output padding past the kernels' reach: the bias alone
            shape = list(y.shape)
            shape[td] = last - y.shape[td]
            extra = y.new_zeros(shape)
            bias = getattr(layer, "bias", None)
            if bias is not None:
                extra = extra + bias.view(1, -1, *[1] * (y.dim() - 2)).to(y.dtype)
            y = torch.cat([y, extra], dim=td)
        return y.narrow(td, first, last - first)

    # ------------------------------------------------------------------ checks and export

    def verify(
        self,
        x: Tensor,
        chunk_sizes: Sequence[int],
        *,
        rtol: float = 1e-5,
        atol: float = 1e-5,
    ) -> float:
        """Stream ``x`` in chunks of ``chunk_sizes`` (then :meth:`flush`) and compare with
        ``model(x)``.

        Returns the largest absolute difference; raises :class:`padkit.PaddingError` when
        the shapes differ or a value differs by more than ``atol + rtol * |full|`` (for
        instance when two added branches emit their samples at different times).
        """
        return verify(self, x, chunk_sizes, rtol=rtol, atol=atol)

    def step_module(self, example: Tensor, state: StreamState | None = None) -> StreamingStep:
        """A module computing one step for chunks shaped like ``example``, for export.

        ``forward(chunk, *state_values) -> (output, *new_state_values)``, the values in the
        order of :attr:`StreamingStep.state_names`. The time phase of every strided layer is
        fixed at export, so the module serves any number of steps of this chunk length when
        that length is a multiple of each layer's stride (as seen at that layer); raises
        :class:`padkit.PaddingError` otherwise. ``state`` (default: a fresh one) sets the
        phase; layers without left padding need a warm-up step before export.
        """
        return step_module(self, example, state)

    def export_onnx(
        self,
        path: str,
        example: Tensor,
        state: StreamState | None = None,
        *,
        dynamic_batch: bool = True,
        dynamic_length: bool = False,
        **kwargs: Any,
    ) -> list[str]:
        """Export one step (see :meth:`step_module`) to ONNX with the state as explicit
        inputs and outputs.

        The graph's inputs are ``chunk`` and ``state_in.<key>``, its outputs ``output`` and
        ``state_out.<key>``, the keys in the order returned. Run it by feeding each step's
        ``state_out.*`` back as the next step's ``state_in.*``, starting from
        :meth:`init_state`.

        Args:
            path: the ``.onnx`` file to write.
            example: a chunk of the shape to export (its batch size and, unless
                ``dynamic_length``, its time length).
            state: the state to export from (sets the phase; default a fresh one).
            dynamic_batch: the batch size is a graph input dimension (default); every state
                tensor shares it.
            dynamic_length: the chunk length is a graph input dimension too; allowed when
                every stateful layer is a stride-1 conv or pool padded ``(k_eff - 1, 0)``
                (then no layer's phase depends on the length).
            **kwargs: to ``torch.onnx.export`` (``dynamo=True`` unless given;
                ``opset_version``, ...).

        Returns:
            The state keys, in graph order.
        """
        return export_onnx(
            self,
            path,
            example,
            state,
            dynamic_batch=dynamic_batch,
            dynamic_length=dynamic_length,
            **kwargs,
        )


# classes whose ``weight`` and ``bias`` are plain registered parameters (no class-level
# descriptor such as a parametrization's property): read from ``_parameters`` directly
_PLAIN_PARAMS: dict[type, bool] = {}
# elements of a layer's ``history ++ chunk`` above which its kept history is a copy rather
# than a view (a view keeps the whole tensor alive until the next step)
_PIN_LIMIT = 1 << 16


def _lean_step(ctx: _Context | None, plan: _Plan, layer: Any, x: Any) -> Tensor | None:
    """The lean step of a causal 1-d conv or transposed conv (``plan.lean``): the layer's
    stream run with nothing but its tensor ops. A stride-1 conv padded by its kernel's reach:
    ``cat``, ``conv1d``, a view of the tail. Any other conv: ``conv1d`` of the samples its
    windows read, a copy of the tail. A transposed conv: overlap-add into its own output.
    None when anything is unusual (the general path then checks and explains): another call
    form, export, lookahead, a probe, an empty chunk, a state that does not fit, batch rows
    at different sample counts."""
    if (
        ctx is None
        or ctx.static_pos is not None
        or ctx.lookahead is not None
        or ctx.record is not None
        or not isinstance(x, Tensor)
    ):
        return None
    state_in = ctx.state_in
    buf = state_in.get(plan.key_buf)
    pos = state_in.get(plan.key_pos)
    if buf is None or pos is None or plan.name in ctx.called:
        return None
    lean = plan.lean
    xs = x.shape
    bs = buf.shape
    if (
        len(xs) != 3
        or xs[2] == 0
        or bs[0] != xs[0]
        or bs[1] != (layer.out_channels if lean == LEAN_OVERLAP else xs[1])
        or (lean == LEAN_OVERLAP and xs[1] != layer.in_channels)
        or bs[2] != plan.history
        or buf.dtype is not x.dtype
        or buf.device != x.device
    ):
        return None
    pos_i = 0
    if lean != LEAN_SIMPLE:  # the windows depend on the phase: the rows' shared count
        counts = pos.tolist()
        if not isinstance(counts, list) or not counts:
            return None
        pos_i = counts[0]
        if len(counts) > 1 and counts.count(pos_i) != len(counts):
            return None
    length = xs[2]
    ctx.called.add(plan.name)
    weight, bias = _params(layer)
    if lean == LEAN_WINDOW:
        y, kept = _lean_window(plan, layer, x, buf, pos_i, weight, bias)
    elif lean == LEAN_OVERLAP:
        y, kept = _lean_overlap(plan, layer, x, buf, pos_i, weight, bias)
    else:
        y, kept = _lean_simple(plan, layer, x, buf, weight, bias)
    ctx.state_out[plan.key_buf] = kept
    ctx.state_out[plan.key_pos] = _advanced(ctx, pos, length)
    return y


def _params(layer: Any) -> tuple[Tensor, Tensor | None]:
    """``layer.weight`` and ``layer.bias``, without nn.Module's ``__getattr__`` (a failed
    lookup that formats an error message, then the dict) where the class adds no
    descriptor for them (a parametrization's property)."""
    cls = type(layer)
    plain = _PLAIN_PARAMS.get(cls)
    if plain is None:
        plain = _PLAIN_PARAMS[cls] = not (hasattr(cls, "weight") or hasattr(cls, "bias"))
    params = layer._parameters
    weight = params.get("weight") if plain else None
    if weight is not None and "bias" in params:
        return weight, params["bias"]
    return layer.weight, layer.bias


def _lean_simple(
    plan: _Plan, layer: Any, x: Tensor, buf: Tensor, weight: Tensor, bias: Tensor | None
) -> tuple[Tensor, Tensor]:
    """A stride-1 conv padded by its kernel's reach: every sample of ``history ++ chunk``
    but the first ``history`` ends a window. The output and the next history."""
    length = x.shape[2]
    cat = torch.cat((buf, x), 2)
    dil = plan.d[0]
    if length == 1 and dil > 1:
        # one output: its taps, every dil-th sample, through the undilated conv (torch's
        # dilated CPU conv costs several times more per call)
        y = F.conv1d(cat[:, :, ::dil], weight, bias, 1, 0, 1, layer.groups)
    elif dil > 1 and layer.groups == 1 and length <= 512 and not cat.is_cuda:
        # a few outputs of a dilated conv: their taps as a matrix, one matmul (channel-
        # major, as the weight is stored: the weight is read as a view on every step)
        k = int(weight.shape[2])
        taps = cat.unfold(2, plan.k_eff, 1)[..., ::dil]  # (N, C, L, k)
        flat = taps.permute(0, 2, 1, 3).reshape(cat.shape[0], length, cat.shape[1] * k)
        y = F.linear(flat, weight.reshape(weight.shape[0], -1), bias).transpose(1, 2)
    else:
        y = F.conv1d(cat, weight, bias, 1, 0, plan.d, layer.groups)
    tail = cat.narrow(2, length, plan.history)
    return y, _kept(tail, cat.shape[2], plan.history, False)


def _lean_window(
    plan: _Plan,
    layer: Any,
    x: Tensor,
    buf: Tensor,
    pos: int,
    weight: Tensor,
    bias: Tensor | None,
) -> tuple[Tensor, Tensor]:
    """Any other causal 1-d conv after ``pos`` samples: ``conv1d`` (no pads: the history
    holds them) of only the samples the chunk's windows read, one contiguous tensor where
    they span history and chunk (a narrowed view of ``history ++ chunk`` would reach the
    conv non-contiguous, which slows it). The output and the next history: the tail of that
    tensor where it ends with the chunk (at hop-sized chunks), else a copy of the tail of
    ``history ++ chunk`` (never a view of ``x``, which the model or the caller may change in
    place)."""
    hist = plan.history
    length = int(x.shape[2])
    off, m = plan.window(pos, length)
    seg: Tensor | None = None
    if m <= 0:
        y = x.new_zeros((x.shape[0], layer.out_channels, 0))
    else:
        span = (m - 1) * plan.stride + plan.k_eff
        if off >= hist:  # the windows read the chunk only
            src = x.narrow(2, off - hist, span)
        elif off + span <= hist:  # ... the history only
            src = buf.narrow(2, off, span)
        else:
            head = buf.narrow(2, off, hist - off)
            src = seg = torch.cat((head, x.narrow(2, 0, span - hist + off)), 2)
        y = F.conv1d(src, weight, bias, plan.s, 0, plan.d, layer.groups)
        if seg is not None and (off + span != hist + length or span < hist):
            seg = None  # it does not end with the next history
    if seg is not None:
        kept = _kept(seg.narrow(2, seg.shape[2] - hist, hist), int(seg.shape[2]), hist, False)
    elif length >= hist:
        kept = x.narrow(2, length - hist, hist).clone()
    else:
        kept = torch.cat((buf.narrow(2, length, hist - length), x), 2)
    return y, kept


def _lean_overlap(
    plan: _Plan,
    layer: Any,
    x: Tensor,
    kept: Tensor,
    pos: int,
    weight: Tensor,
    bias: Tensor | None,
) -> tuple[Tensor, Tensor]:
    """A causal 1-d transposed conv after ``pos`` inputs, by overlap-add (as
    ``padkit.streaming._ops.run_overlap_add``, without its copies): the chunk's transposed
    conv, made here and seen by nothing else, takes the kept partial sums into its first
    ``history`` outputs in place; its last ``history`` are the next partial sums, and the
    outputs before them, with the bias added in place, are the step's (a view: the
    transposed conv's outputs are never copied). The output and the next partial sums."""
    s, hist = plan.stride, plan.history
    length = int(x.shape[2])
    z = F.conv_transpose1d(x, weight, None, s, 0, 0, layer.groups, plan.d)
    if hist:
        z.narrow(2, 0, hist).add_(kept)
        kept = _kept(z.narrow(2, length * s, hist), int(z.shape[2]), hist, False)
    off, m = plan.window(pos, length)
    if m <= 0:
        return x.new_zeros((x.shape[0], layer.out_channels, 0)), kept
    y = z.narrow(2, off, m) if off or m != z.shape[2] else z
    if bias is not None:
        y.add_((bias if bias.dtype is y.dtype else bias.to(y.dtype)).view(1, -1, 1))
    return y, kept


def _kept(tail: Tensor, made: int, hist: int, exporting: bool) -> Tensor:
    """A layer's next history, ``tail``: the last ``hist`` samples of a tensor of ``made``
    samples the step made itself (seen by nothing else, so a view is safe), kept as a view
    unless that would keep a large tensor alive until the next step (a long chunk), or the
    step is being exported."""
    if exporting or (made > 4 * hist and tail.numel() // max(hist, 1) * made > _PIN_LIMIT):
        return tail.clone()
    return tail


def _advanced(ctx: _Context, pos: Tensor, length: int) -> Tensor:
    """A layer's sample count ``pos`` advanced by the chunk's ``length``: once per step for
    all the layers that share one count tensor."""
    if ctx.static_pos is not None:  # export: the length may be symbolic
        return pos + length
    key = (id(pos), length)
    new = ctx.advanced.get(key)
    if new is None:
        new = ctx.advanced[key] = pos.add(length)  # the method: __add__ is a Python wrapper
        ctx.advanced[(id(new), -1)] = pos  # keeps ``pos`` alive, so its id stays unique
    return new


def _described(chunk: Any) -> tuple[tuple[int, ...], torch.dtype, torch.device] | None:
    if not isinstance(chunk, Tensor):
        return None
    return tuple(chunk.shape), chunk.dtype, chunk.device


def _wrong_input(
    plan: _Plan, layer: Any, x: Tensor, buf: Tensor, td: int, ctx: _Context
) -> str | None:
    """Why a layer's input does not continue its stream state (its channels, batch size,
    dtype or device differ from the input the state was initialised for), naming the step's
    argument (the chunk), its value, the value expected and the layer; None if it does."""
    if x.dtype is buf.dtype and x.device == buf.device:
        # the common case, checked before any message is built (this runs on every call)
        if ctx.static_pos is not None:
            return None
        xs, bs = x.shape, buf.shape
        if xs[0] == bs[0] and (td == 1 or xs[1] == (layer.in_channels if plan.partial else bs[1])):
            return None
    where = f"layer `{plan.name}`"
    if hasattr(layer, "in_channels"):
        where += f", in_channels={layer.in_channels}"
    else:
        where += f", {type(layer).__name__}"
    facts: list[tuple[str, int | None, Any, Any]] = [
        ("dtype", None, x.dtype, buf.dtype),
        ("device", None, x.device, buf.device),
    ]
    if ctx.static_pos is None:  # not exporting: sizes are plain ints (no int() on a SymInt)
        facts[:0] = [("batch size", 0, x.shape[0], buf.shape[0])]
        if td != 1:
            # overlap-add keeps outputs: the input's channels are the layer's in_channels
            want_c = layer.in_channels if plan.partial else buf.shape[1]
            facts[:0] = [("channels", 1, x.shape[1], want_c)]
    chunk = ctx.chunk
    for fact in facts:
        if fact[2] == fact[3]:
            continue
        what, axis, got, want = fact
        unit = f"{got} {what}" if what == "channels" else f"{what} {got}"
        expected = f"{want}" if what == "channels" else f"{what} {want}"
        if chunk is None:
            head = f"the input of {where.split(',')[0]} has {unit}"
        else:
            shape, dtype, device = chunk
            value: Any = shape[axis] if axis is not None and axis < len(shape) else None
            if what == "dtype":
                value = dtype
            elif what == "device":
                value = device
            if value == got:
                head = f"chunk has {unit}"
            else:  # the model changed it before this layer
                shown = f"{value} {what}" if what == "channels" else f"{what} {value}"
                head = f"chunk has {shown}, which gives {where.split(',')[0]} {unit}"
        return (
            f"step(): {head}; this stream was initialised for {expected} ({where}); pass "
            f"chunks like the one the state was made for, or start a new state with "
            f"init_state()"
        )
    return None
