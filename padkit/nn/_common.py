"""What every padkit layer shares: argument checks, the eager fast path (a plan remembered per
input shape and live attributes) and TorchScript's plain-layer stand-in."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from .. import functional as PF
from ..functional._common import _check_fits
from ..native import _dispatch as _backend
from ..op import Op
from ..plan import Plan, plan_conv
from ..spec import Padding, PaddingError, PaddingLike, _as_int


def _spec(padding: PaddingLike, nd: int, cls: str) -> Padding:
    try:
        return Padding.parse(padding, nd)
    except (PaddingError, TypeError) as err:
        raise type(err)(f"{cls}: {err}") from None


def _hashable(value: Any) -> Any:
    """A list argument (JSON configs give lists) as a tuple, for the per-shape memo key."""
    return tuple(value) if type(value) is list else value


def _check_channels(cls: str, in_channels: Any, out_channels: Any, groups: int) -> None:
    """torch's channel/group rules, with the values in the message."""
    try:
        cin = _as_int(in_channels, "in_channels")
        cout = _as_int(out_channels, "out_channels")
    except TypeError as err:
        raise TypeError(f"{cls}: {err}") from None
    for name, value in (("in_channels", cin), ("out_channels", cout)):
        if value < 1 or value % groups:
            raise ValueError(
                f"{cls}: {name}={value} must be a positive multiple of groups={groups}"
            )


def _padding_repr(spec: Padding) -> str:
    return (
        spec.describe()
        if spec.ndim is None or spec.pre is not None
        else repr(spec.to_jax())
        if spec.is_explicit
        else ("(" + ", ".join(repr(a) for a in spec.axes) + ")")
    )


def _is_proxy(value: Any) -> bool:
    """An input traced by torch.fx: layers then call padkit.functional (fx-wrapped)."""
    return isinstance(value, torch.fx.Proxy)


def _fx_padding(spec: Padding, cls: str) -> Any:
    """The spec as plain values that torch.fx can write into generated code."""
    if spec.ceil_mode:
        raise PaddingError(
            f"{cls}: torch.fx cannot carry Caffe ceil-rounded padding ({spec.describe()}) into "
            "generated code; trace the model with torch.jit.trace, torch.export or torch.compile"
        )
    if spec.pre is not None:
        raise PaddingError(
            f"{cls}: torch.fx cannot carry static pads before a padding rule ({spec.describe()}) "
            "into generated code; trace the model with torch.jit.trace, torch.export or "
            "torch.compile"
        )
    return tuple(spec.axes)


# ----------------------------------------------------------------------------- fast path
#
# A layer called again with an input of the same shape runs exactly what its first call
# ran, without re-parsing its arguments or re-planning. A pool or transposed-conv layer's
# key's first call takes the full path, with every check, and only marks the key seen; its
# second call builds a closure and stores it, later calls look it up, so a size met once
# (variable-length audio, detection resizes) never pays for a closure it would not use
# again. A conv layer's closure costs less than its full path once the layer has met any
# input: its checked record is kept per configuration (:meth:`_FastCache.config`), and a
# new input shape needs only its own checks and plan, so its first call builds the closure
# and runs it (bench/new_sizes.py's causal stack, second pass over 40 lengths: 1.44x
# torch's layers with the closure built at the second call, 1.13x so). Tracing
# (torch.compile, torch.export, the ONNX exporters, torch.jit) always takes the full path.

_FastFn = Callable[..., Any]


def _tracing() -> bool:
    return bool(torch.compiler.is_compiling() or torch._C._get_tracing_state())


class _FastCache(dict[tuple[Any, ...], "_FastFn | None"]):
    """Per-layer memo: key -> closure (None: this key always takes the full path)."""

    MAX_ENTRIES = 64

    def __init__(self) -> None:
        super().__init__()
        #: per layer configuration (its live attributes): the checked record and its
        #: static pads (None where they depend on the input size)
        self.configs: dict[tuple[Any, ...], tuple[Op, tuple[tuple[int, int], ...] | None]] = {}

    def config(
        self, key: tuple[Any, ...], make: Callable[[], Op]
    ) -> tuple[Op, tuple[tuple[int, int], ...] | None]:
        """The checked record of the layer configuration ``key`` and its static pads."""
        got = self.configs.get(key)
        if got is None:
            if len(self.configs) >= 8:
                self.configs.clear()
            op = make()
            got = self.configs[key] = (op, op.static_pairs())
        return got

    def remember(self, key: tuple[Any, ...], fn: _FastFn | None) -> None:
        if len(self) >= self.MAX_ENTRIES:
            self.clear()
        self[key] = fn

    def settle(
        self, key: tuple[Any, ...], got: Any, build: Callable[[], _FastFn | None]
    ) -> _FastFn | None:
        """For a call of ``key`` whose lookup gave ``got`` (False: not in the memo, or
        :data:`SEEN_ONCE`): the closure to run it with, built at the key's second call (the
        first call's full path checked what the key holds); None at the first call, which
        only marks the key seen and takes the full path."""
        if got is False:
            self.remember(key, SEEN_ONCE)
            return None
        fn = build()
        self.remember(key, fn)
        return fn


#: a memo entry for a key called once: its next call builds the closure
SEEN_ONCE: Any = object()


# The memo of each layer lives here, keyed by the layer object, never in the layer's
# ``__dict__``: a layer's ``__dict__`` holds only plain data, so pickling or copying it
# (torch-pruning's ``state_dict``, ``copy.copy``, multiprocessing) never meets a closure, and a
# copy starts with an empty memo of its own (no entry can go stale when its attributes change).
_FAST: weakref.WeakKeyDictionary[Any, _FastCache] = weakref.WeakKeyDictionary()


class _Live:
    """``.padding`` read and written as on the torch layer, kept as one canonical spec.

    The spec (``pad_spec``) is the only stored copy; what ``.padding`` shows (torch's
    symmetric tuple where one exists, else the spec) is derived from it and the layer's
    live ``kernel_size``/``stride``/``dilation``, and assigning ``.padding`` (any padkit
    form, torch ints and tuples included) re-parses it. The checked-op record is built
    from the live attributes whenever the layer meets a new input shape or arguments.
    """

    pad_spec: Padding
    _nd: int

    def _op(self) -> Op:
        raise NotImplementedError  # each layer family builds its record

    def resolved_padding(
        self, input_size: Sequence[int] | None = None
    ) -> tuple[tuple[int, int], ...]:
        """The ``(lo, hi)`` pads per spatial axis (``input_size`` where they depend on it)."""
        return self._pairs(self._op(), input_size)

    def _pairs(self, op: Op, input_size: Sequence[int] | None) -> tuple[tuple[int, int], ...]:
        static = op.static_pairs()
        if static is not None:
            return static
        if input_size is None:
            raise PaddingError(
                f"{type(self).__name__}: padding {self.pad_spec.describe()} depends on the input "
                "size; pass input_size"
            )
        return PF.resolve(
            op.padding, op.kernel, op.stride, op.dilation, tuple(input_size)[-self._nd :]
        )

    @property
    def padding(self) -> Any:
        spec = self.__dict__.get("pad_spec")
        if spec is None:  # inside the torch base class's __init__
            return (0,) * self._nd
        try:
            op = self._op()
        except AttributeError:  # inside the torch base class's __init__
            return (0,) * self._nd
        except (PaddingError, TypeError, ValueError):
            return spec
        if op.kind == "conv_transpose" and not spec.is_explicit:
            return spec
        return op.torch_padding()

    @padding.setter
    def padding(self, value: PaddingLike) -> None:
        self.pad_spec = _spec(value, self._nd, type(self).__name__)


def _fast_cache(module: Any) -> _FastCache:
    """The layer's memo (created empty on first use; a layer that cannot be weakly referenced
    or hashed gets a fresh one per call, i.e. always takes the full path)."""
    try:
        cache = _FAST.get(module)
        if cache is None:
            cache = _FAST[module] = _FastCache()
    except TypeError:
        return _FastCache()
    return cache


def declined_key(hook: Any, x: Tensor, w: Tensor, b: Tensor | None) -> tuple[Any, ...]:
    """What a layer's memo of the calls the backend left to torch is keyed by, for one
    input shape: the layouts, device, training flag, thread count and the tuner's state."""
    return (
        x.stride(),
        w.stride(),
        x.is_cpu,
        torch.is_grad_enabled()
        and (x.requires_grad or w.requires_grad or (b is not None and b.requires_grad)),
        torch.get_num_threads(),
        hook.tuner.version,
        hook.tuner.measure,
        hook.force,
    )


def conv_plan(op: Op, pairs: tuple[tuple[int, int], ...], sizes: tuple[int, ...], cin: int) -> Plan:
    """A conv layer's plan for spatial ``sizes`` with resolved ``pairs``."""
    mode = op.padding_mode if isinstance(op.padding_mode, str) else "mixed"
    return plan_conv(
        pairs,
        op.kernel,
        op.stride,
        op.dilation,
        sizes,
        groups=op.groups,
        in_channels=cin,
        padding_mode=mode,
    )


def _conv_fast(layer: Any, x: Tensor, w: Tensor, config: tuple[Any, ...]) -> _FastFn | None:
    """The closure for a conv layer's calls of ``x``'s shape (None: the full path runs
    them, with its checks and errors). ``config``: the memo key of the layer's live
    attributes, under which its checked record is kept."""
    nd = layer._nd
    if x.dim() != nd + 2 or layer.padding_mode != "zeros":
        return None
    op, static = _fast_cache(layer).config(config, layer._op)
    sizes = tuple(int(n) for n in x.shape[2:])
    # the weight's shape: what ExpandedWeights (per-sample gradients) answers
    if len(w.shape) != nd + 2 or x.shape[1] != w.shape[1] * op.groups or 0 in sizes:
        return None  # the full path's error
    pairs = (
        static
        if static is not None
        else PF.resolve(op.padding, op.kernel, op.stride, op.dilation, sizes)
    )
    _check_fits(type(layer).__name__, sizes, pairs, op.k_eff)  # the full path's check
    plan = conv_plan(op, pairs, sizes, layer.in_channels)
    conv = PF._CONV[nd]
    s, d, g = op.stride, op.dilation, op.groups
    # the closure takes the weight and bias as arguments: replicas (DataParallel) and
    # _conv_forward callers (weight norm, fake-quant wrappers) share the memo
    # nothing derived from the weight's values is kept: a zero_extend plan grows the kernel
    # by zero taps on every call (F.pad of a small depthwise kernel), since a grown copy kept
    # between calls would go stale when the weight changes in place without a version bump
    # (``.data``, fused optimizers, FSDP's all-gather)
    if plan.strategy == "native":
        return lambda x, w, b: PF.run_conv_torch(plan, conv, x, w, b, s, d, g)

    def torch_plan(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
        return PF.run_conv_torch(plan, conv, x, w, b, s, d, g)

    # the layouts, devices, training flags and thread counts for which the backend decided
    # on torch's side: those calls run the torch plan without asking the backend again (its
    # signature lookup costs about 2 µs a call, a tenth of a tiny conv; the torch plan is
    # exact for every input), as pool layers do (``Hook.pool_layer``)
    declined: set[tuple[Any, ...]] = set()

    def run(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
        hook = _backend.active
        if hook is None:
            return torch_plan(x, w, b)
        if hook is not _backend.HOOK:  # the backend not started yet: the op starts it
            return PF.run_conv_plan(plan, conv, x, w, b, s, d, g)
        if type(w) not in _backend._TYPES:  # ExpandedWeights, ...: torch's side, unasked
            return torch_plan(x, w, b)
        key = declined_key(hook, x, w, b)
        if key in declined:
            return torch_plan(x, w, b)
        note: list[bool] = []
        out: Tensor | None = hook.conv(
            plan.strategy, x, w, b, s, d, plan.pads, g, torch_plan, note=note
        )
        if out is None:
            if note and len(declined) < 64:
                declined.add(key)
            return torch_plan(x, w, b)
        return out

    return run


# ----------------------------------------------------------------------------- TorchScript


def _script_refusal(layer: Any, op: Op) -> str | None:
    """Why the plain torch layer would not compute what ``layer`` computes, or None."""
    static = op.static_pairs()
    if static is None:
        return f"its padding {op.padding.describe()} depends on the input size"
    if any(lo != hi for lo, hi in static):
        return f"its pads {static} differ per side, which torch's layer cannot express"
    if isinstance(op.padding_mode, tuple):
        return f"its padding_mode {op.padding_mode} differs per axis"
    if op.kind == "max" and not op.neutral_pads and any(lo for lo, _ in static):
        return f"its pads hold padding_value={op.padding_value!r}; torch's pool pads with -inf"
    if op.kind == "max" and any(2 * lo > k for (lo, _), k in zip(static, op.kernel)):
        return f"its pads {static} exceed half the kernel {op.kernel}, which torch refuses"
    if op.kind == "avg" and op.dilation != (1,) * op.nd:
        return f"it is a dilated average pool (dilation={op.dilation}), which torch lacks"
    if op.kind == "lp" and (any(lo for lo, _ in static) or op.dilation != (1,) * op.nd):
        return "torch's LPPool has no padding or dilation"
    return None


def _scriptable(layer: Any) -> nn.Module:
    cls = type(layer).__name__
    op = layer._op()
    why = _script_refusal(layer, op)
    if why is not None:
        raise TypeError(
            f"torch.jit.script cannot compile padkit.nn.{cls}: {why}, and TorchScript cannot "
            "run padkit's Python padding. Use torch.jit.trace, torch.export or torch.compile "
            "(or padkit's ONNX export), which run padkit exactly"
        )
    base: Any = next(c for c in type(layer).__mro__ if c.__module__.startswith("torch.nn.modules"))
    plain: Any = base.__new__(base)
    state = {k: v for k, v in layer.__dict__.items() if k != "pad_spec"}
    for key in ("_parameters", "_buffers", "_modules"):
        state[key] = dict(state[key])
    plain.__dict__.update(state)
    pads = tuple(lo for lo, _ in op.static_pairs())
    plain.padding = pads[0] if op.is_pool and len(set(pads)) == 1 else pads
    plain.stride = op.stride
    if op.kind in ("conv", "conv_transpose"):
        plain._reversed_padding_repeated_twice = [p for p in reversed(pads) for _ in range(2)]
    return plain  # type: ignore[no-any-return]
