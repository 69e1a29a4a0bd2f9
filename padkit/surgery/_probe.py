"""What model code computes: conv, pool and pad calls read from their arguments.

Surgery recognises padding by computation, not by class. This module is the one place
that reads a functional call (``F.conv2d``, ``F.max_pool2d``, ``F.avg_pool2d``, ``F.pad``
and the ``torch.*`` names they dispatch to) into padkit's terms, decides whether a module
is the owner of the call its own ``forward`` makes (a conv subclass that transforms its
weight and calls the conv with its own ``stride``/``padding``/``dilation``/``groups``),
finds the rule behind pad amounts that code computes from the input size, and runs a
module's own code with some of its calls replaced (:func:`rewired`).

Functions:

- :func:`call_op`: the :class:`~padkit.op.Op` of a functional conv/pool call, or None.
- :func:`call_pad`: the :class:`PadCall` of a functional pad call, or None.
- :func:`module_op`: what a conv/pool module's attributes say (any subclass).
- :func:`owns`: whether a call computes what its module's attributes say.
- :func:`pad_rule`: the padding rule (static pairs, ``'same'`` ...) a pad call follows,
  from the owner module run alone at many input sizes.
- :func:`own_calls`: the torch functions a module's own code calls (not its children's).
- :func:`rewired`: a copy of a module, an instance of its class under the same class name,
  whose own code runs with chosen calls replaced.
- :func:`rewired_fast`: the same without the per-call dispatch mode where a copy of its
  ``forward`` with one helper skipped computes the same numbers.

Nothing here matches model classes; every fact comes from a call's arguments or from
running the module.
"""

from __future__ import annotations

import copy
import math
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from .._made import stand_in
from ..op import Op
from ..recognise._calls import (
    FUNCTION_KINDS as FUNCTION_KINDS,
    PadCall as PadCall,
    Pairs as Pairs,
    base_name as base_name,
    call_op as call_op,
    call_pad as call_pad,
    module_op as module_op,
    owns as owns,
)
from ..recognise._record import _flat
from ..spec import Padding, PaddingError

# ----------------------------------------------------------------------------- own code


# base_name of the torch functions seen, by function (a rewired forward sees every call)
_NAMES: dict[Any, str] = {}


class _OwnCode(TorchFunctionMode):
    """Counts the calls ``module``'s own code makes (children's calls excluded: a global
    forward hook tracks the depth) and lets ``handler`` replace them."""

    def __init__(
        self,
        module: nn.Module,
        handler: Callable[[str, int, Any, tuple[Any, ...], dict[str, Any]], Any] | None,
    ) -> None:
        super().__init__()
        self.module = module
        self.handler = handler
        # the function names the handler edits (the others run as written, uncounted: a
        # rewired module's every call passes here, in streaming steps too); None: all
        self.only: frozenset[str] | None = getattr(handler, "names", None)
        self.depth = 0
        self.counts: dict[str, int] = {}
        self.seen: list[tuple[str, tuple[Any, ...], dict[str, Any], Any]] = []

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if self.depth:
            return func(*args, **kwargs)
        try:
            name = _NAMES[func]
        except (KeyError, TypeError):  # (an unhashable callable: named each time)
            name = base_name(func)
            try:
                if len(_NAMES) < 4096:
                    _NAMES[func] = name
            except TypeError:
                pass
        if (self.only is not None and name not in self.only) or _in_stand_in():
            return func(*args, **kwargs)
        i = self.counts.get(name, 0)
        self.counts[name] = i + 1
        out = _NOT_HANDLED
        if self.handler is not None:
            out = self.handler(name, i, func, args, kwargs)
        if out is _NOT_HANDLED:
            out = func(*args, **kwargs)
        if self.handler is None:
            self.seen.append((name, args, kwargs, out))
        return out

    def __enter__(self) -> _OwnCode:
        def pre(m: nn.Module, _args: Any) -> None:
            if m is not self.module:
                self.depth += 1

        def post(m: nn.Module, _args: Any, _out: Any) -> None:
            if m is not self.module:
                self.depth -= 1

        from torch.nn.modules import module as module_mod

        self._handles = [
            module_mod.register_module_forward_pre_hook(pre),
            module_mod.register_module_forward_hook(post, always_call=True),
        ]
        super().__enter__()  # type: ignore[no-untyped-call]
        return self

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)  # type: ignore[no-untyped-call]
        for h in self._handles:
            h.remove()


def _in_stand_in() -> bool:
    """Whether the running torch call comes from a streaming stand-in the module's code called
    (stand-ins are called without module hooks, so the depth does not count them)."""
    f: types.FrameType | None = sys._getframe(2)
    while f is not None:
        if f.f_code is _rewired_forward.__code__:
            return False
        if str(f.f_globals.get("__name__", "")).startswith("padkit.streaming."):
            return True
        f = f.f_back
    return False


_NOT_HANDLED = object()
#: what a handler returns to let the call run as written
NOT_HANDLED: Any = _NOT_HANDLED


def own_calls(
    module: nn.Module, *inputs: Any
) -> list[tuple[str, tuple[Any, ...], dict[str, Any], Any]]:
    """Run ``module(*inputs)`` without gradients; the torch functions its own code called
    (children's calls excluded), each as ``(name, args, kwargs, output)``."""
    return own_run(module, *inputs)[0]


def own_run(
    module: nn.Module, *inputs: Any
) -> tuple[list[tuple[str, tuple[Any, ...], dict[str, Any], Any]], Any]:
    """:func:`own_calls` and the module's output."""
    mode = _OwnCode(module, None)
    with torch.no_grad(), mode:
        out = module(*inputs)
    return mode.seen, out


Handler = Callable[[str, int, Any, tuple[Any, ...], dict[str, Any]], Any]


class Dispatch:
    """A :func:`rewired` handler from a table ``(function name, ordinal) -> edit``; an edit
    is called as ``edit(func, args, kwargs)`` and returns the call's result, and calls
    missing from the table run as written. A module-level class, so a rewired module
    pickles wherever its edits do."""

    def __init__(self, table: dict[tuple[str, int], Any]) -> None:
        self.table = dict(table)
        # the function names the table edits (calls of others run as written)
        self.names = frozenset(name for name, _ in self.table)

    def __call__(self, name: str, i: int, func: Any, args: Any, kwargs: Any) -> Any:
        edit = self.table.get((name, i))
        return NOT_HANDLED if edit is None else edit(func, args, kwargs)


def rewired(module: nn.Module, handler: Handler, note: str) -> nn.Module:
    """A shallow copy of ``module`` (same parameters, buffers and children) whose own code
    runs with ``handler(name, ordinal, func, args, kwargs)`` offered each torch function it
    calls (``ordinal`` counts that name's calls in the module's own code); the handler
    returns a result, or :data:`NOT_HANDLED` to let the call run as written.

    The copy is an instance of ``module``'s class under the same class name (tools that
    find layers by type or name still find it); ``note`` shows in its ``repr``. It pickles
    where ``handler`` does (a module-level callable object rather than a closure).
    """
    cls = type(module)
    new_cls = _rewired_class(getattr(cls, "_padkit_base", cls))
    new = copy.copy(module)
    new.__class__ = new_cls
    new.__dict__["_padkit_handler"] = handler
    new.__dict__["_padkit_note"] = note
    return new


def _rewired_class(base: type) -> type:
    """``base`` whose own code runs under its handler (cached; pickles name ``base``)."""
    return stand_in(
        _rewired_class,
        (base,),
        base,
        (base,),
        lambda: {"forward": _rewired_forward, "extra_repr": _rewired_repr, "_padkit_base": base},
    )


def rewired_fast(
    module: nn.Module, handler: Handler, note: str, examples: Sequence[Tensor]
) -> nn.Module:
    """:func:`rewired`, without its per-call cost where a plain rewrite computes the same.

    The rewired copy runs its module's own code under a dispatch mode and module hooks on
    every call. Model code often makes the calls a handler replaces inside a helper of its
    own file (Hugging Face MobileNet's ``apply_tf_padding``, which only pads). So each
    helper function that ``forward`` looks up by a global name is tried in turn as the
    identity (its first argument returned): a copy of ``forward`` whose globals map that
    name to the identity. The first candidate whose outputs equal the rewired copy's on
    every one of ``examples`` (random inputs of several sizes, compared exactly) and that
    makes fewer of the handled calls is the copy's forward; otherwise the rewired copy is
    returned. Either is an instance of ``module``'s class under the same class name.
    """
    slow = rewired(module, handler, note)
    cls = type(module)
    base = getattr(cls, "_padkit_base", cls)
    forward = getattr(base.forward, "__func__", base.forward)
    code = getattr(forward, "__code__", None)
    if code is None or not examples:
        return slow
    owner = getattr(forward, "__module__", None)
    names = [
        n
        for n in code.co_names
        if isinstance(g := forward.__globals__.get(n), types.FunctionType) and g.__module__ == owner
    ]
    modes = {m: m.training for m in module.modules()}
    try:
        for m in modes:
            m.training = False
        found = _try_fast(module, slow, base, forward, names, handler, note, examples)
    finally:
        for m, mode in modes.items():
            m.training = mode
    if found is None:
        return slow
    found.training = module.training
    return found


def _try_fast(
    module: nn.Module,
    slow: nn.Module,
    base: type,
    forward: Any,
    names: list[str],
    handler: Handler,
    note: str,
    examples: Sequence[Tensor],
) -> nn.Module | None:
    """The first fast candidate of :func:`rewired_fast` that passes its checks, or None.
    Runs in eval mode (no running statistics are updated)."""
    slow.training = False
    try:
        with torch.no_grad():
            refs = [slow(x) for x in examples]
    except Exception:
        return None
    for name in names:
        new_cls = _fast_class(base, name)
        new = copy.copy(module)
        new.__class__ = new_cls
        new.__dict__["_padkit_note"] = f"{note} ({name}() skipped)"
        new.training = False
        try:
            with torch.no_grad():
                outs = [new(x) for x in examples]
                calls = [own_calls(new, x) for x in examples]
                before = [own_calls(module, x) for x in examples]
        except Exception:
            continue
        if all(_equal(a, b) for a, b in zip(outs, refs)) and all(
            len(c) < len(b) for c, b in zip(calls, before)
        ):
            return new
    return None


def _fast_class(base: type, name: str) -> type:
    """``base`` whose ``forward`` runs with the global helper ``name`` mapped to the
    identity (cached; pickles name ``base`` and ``name``, the class is made again)."""

    def members() -> dict[str, Any]:
        forward: Any = getattr(base.forward, "__func__", base.forward)  # type: ignore[attr-defined]
        scope = dict(forward.__globals__)
        scope[name] = _first_argument
        fast_forward = types.FunctionType(
            forward.__code__, scope, forward.__name__, forward.__defaults__, forward.__closure__
        )
        fast_forward.__kwdefaults__ = forward.__kwdefaults__
        return {
            "forward": fast_forward,
            "extra_repr": _rewired_repr,
            "_padkit_base": base,
            "_padkit_skipped": name,
        }

    return stand_in(_fast_class, (base, name), base, (base,), members)


def _first_argument(*args: Any, **kwargs: Any) -> Any:
    return args[0] if args else next(iter(kwargs.values()))


def _equal(a: Any, b: Any) -> bool:
    """Whether two outputs (tensors, or nests of them) hold the same numbers and shapes."""
    ta, tb = list(_flat(a)), list(_flat(b))
    return len(ta) == len(tb) and all(
        x.shape == y.shape and bool(torch.equal(x, y)) for x, y in zip(ta, tb)
    )


def _rewired_forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    base: Any = type(self)._padkit_base  # type: ignore[attr-defined]
    with _OwnCode(self, self.__dict__["_padkit_handler"]):
        return base.forward(self, *args, **kwargs)


def passthrough(module: nn.Module, note: str) -> nn.Module:
    """A shallow copy of ``module`` whose forward returns its input: for a module whose
    only computation is a pad that a padkit layer now does. It is an instance of
    ``module``'s class under the same class name; ``note`` shows in its ``repr``."""
    cls = type(module)
    new_cls = _passing_class(getattr(cls, "_padkit_base", cls))
    new = copy.copy(module)
    new.__class__ = new_cls
    new.__dict__["_padkit_note"] = note
    return new


def _passing_class(base: type) -> type:
    """``base`` whose forward returns its input (cached; pickles name ``base``)."""
    return stand_in(
        _passing_class,
        (base,),
        base,
        (base,),
        lambda: {
            "forward": _passthrough_forward,
            "extra_repr": _passthrough_repr,
            "_padkit_base": base,
        },
    )


def _passthrough_forward(self: nn.Module, input: Any, *args: Any, **kwargs: Any) -> Any:
    return input


def _passthrough_repr(self: nn.Module) -> str:
    return f"passthrough: {self.__dict__['_padkit_note']}"


def _rewired_repr(self: nn.Module) -> str:
    base: Any = type(self)._padkit_base  # type: ignore[attr-defined]
    own = base.extra_repr(self)
    note = self.__dict__["_padkit_note"]
    return f"{own}, {note}" if own else note


# ----------------------------------------------------------------------------- pad rules


def _same_pairs(rule: str, k: int, s: int, d: int, n: int) -> tuple[int, int] | None:
    try:
        return Padding((rule,)).resolve(k, s, d, n)[0]
    except PaddingError:
        return None


def pad_rule(
    samples: Sequence[tuple[int, Pairs]], op: Op, axis: int
) -> str | tuple[int, int] | None:
    """The rule one axis of a pad follows, from ``(input size, pairs)`` samples: static
    ``(lo, hi)`` when every sample pads the same, else ``'same'`` / ``'same_lower'`` (TF's
    rules for ``op``'s kernel, stride and dilation) when every sample matches it, else None."""
    pads = {pairs[axis] for _, pairs in samples}
    if len(pads) == 1:
        return next(iter(pads))
    k, s, d = op.kernel[axis], op.stride[axis], op.dilation[axis]
    for rule in ("same", "same_lower"):
        if all(_same_pairs(rule, k, s, d, n) == pairs[axis] for n, pairs in samples):
            return rule
    return None


def sample_sizes(op: Op, axis: int, around: int) -> list[int]:
    """Input sizes that tell the pad rules of one axis apart: every residue modulo the
    stride, below and above the dilated kernel, near ``around``."""
    s = op.stride[axis]
    k_eff = op.dilation[axis] * (op.kernel[axis] - 1) + 1
    sizes = set(range(max(1, around - 2 * s), around + 2 * s + 1))
    sizes |= set(range(max(1, k_eff - s), k_eff + 2 * s + 1))
    return sorted(sizes)


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def lattice_pairs(
    rule: str | tuple[int, int], op: Op, axis: int, n: int, f: int, restrided: bool = False
) -> tuple[int, int]:
    """The pads of one axis on a lattice of factor ``f``: ``f`` times the original's pads
    at the original's size ``ceil(n / f)``.

    With ``restrided`` (the reader's stride on this axis became dilation), a size-dependent
    rule (TF 'same') keeps the start pad ``f * lo`` but ends at ``f*d*(k-1) - f*lo``: the
    dense output then has the input's length ``n``, whatever ``n`` is. Every length in
    ``(F*(m-1), F*m]`` (``F = f*s``, ``m = ceil(ceil(n/f)/s)`` the original output length)
    keeps the lattice outputs exact, and ``n`` always lies there; the original's own end pad
    at ``ceil(n/f)`` would make the dense length vary with ``n`` modulo ``f*s``, so that
    beside a branch of fixed offset (a strided 1x1 shortcut) no constant end padding could
    even a join out at every size."""
    if isinstance(rule, tuple):
        lo, hi = rule
        return f * lo, f * hi
    k, s, d = op.kernel[axis], op.stride[axis], op.dilation[axis]
    pairs = _same_pairs(rule, k, s, d, ceil_div(n, f))
    if pairs is None:  # pragma: no cover - same rules resolve at every size
        raise PaddingError(f"{rule!r} does not resolve at size {ceil_div(n, f)}")
    lo, hi = pairs
    if restrided and s > 1:
        return f * lo, f * (d * (k - 1) - lo)
    return f * lo, f * hi


def fill_value(pad: PadCall) -> float:
    """The fill of a constant pad (0.0 for another mode)."""
    return pad.value if pad.mode == "constant" else 0.0


def finite(value: float) -> bool:
    return not math.isinf(value) and not math.isnan(value)
