"""The record of what a model computes for one input, written in one pass.

:func:`record` runs a model once under module forward hooks and one
:class:`~torch.overrides.TorchFunctionMode`. It writes a :class:`Record`: every module call
(path, class, input and output shapes and tensors, the enclosing call) and every torch
function called on the way, each tagged with the module call whose own code made it and its
ordinal among that code's calls of the same name (the key :func:`padkit.surgery._probe.rewired`
uses to replace a call). Calls are read into typed facts by what they do to the tensor:

* :class:`Pad`: ``F.pad`` in any mode (pad modules call it too, subclasses included), and
  ``torch.cat`` of one tensor with constant pieces (zeros or any one value) or with a
  registered buffer (state), along one axis;
* :class:`Crop`: a slice (``x[..., a:b]``, ``narrow``) that keeps a contiguous run of one
  axis, the other axes whole;
* :class:`AxisMove`: ``transpose``/``permute``/``movedim`` (the permutation);
* a view that keeps every element as it is (``x[..., :n]`` of a length-``n`` axis, ``x[:]``,
  a reshape to the same shape) is the tensor it views: the record gives it its source's
  identity, so a pad read through such a view is still read by the conv;
* in-place writes (``x[...] = y``, ``copy_``, ``add_``...): ``mutates``, and
  ``persistent`` when they write into a parameter's or buffer's storage (state a module
  keeps across calls). :meth:`Record.live` says which calls the output (or such state)
  depends on: a pad whose output also feeds a dead end (a fresh state object written and
  thrown away) is still read by its convs only;
* a conv or pool: an :class:`~padkit.op.Op`, from a functional call (``call_op``) or a
  module (``module_op``);
* :class:`Reduction`: a call that mixes positions along some dims of its input (``mean``,
  ``amax``, ``softmax``, ``normalize``..., adaptive pools, ``layer_norm``); ``batch_norm``'s
  ``batch_stats`` (whether it takes batch statistics); ``elementwise`` for the two-tensor
  forms of ``max``/``min`` (``torch.max(a, b)``).

Each call keeps the tensors it read and made by identity (their shapes are the record's
tensors' shapes), and ``func`` (the name it was called by: ``'__radd__'``, ``'mean'``).

Which call reads which tensor is kept by tensor identity (the record holds every tensor it
saw, so identities are not reused), which links a pad to the conv that reads it through any
number of wrapper levels: a module that passes a tensor on does not make a new one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.modules import module as _module_mod
from torch.overrides import TorchFunctionMode

from ..op import Op
from ._calls import REDUCTIONS, base_name, call_op, call_pad, module_op

__all__ = [
    "AxisMove",
    "Call",
    "Crop",
    "ModuleCall",
    "Pad",
    "Record",
    "Reduction",
    "failing_module",
    "func_name",
    "record",
]

_CROP_NAMES = ("getitem", "narrow", "slice")
_CAT_NAMES = ("cat", "concat", "concatenate")
_MOVE_NAMES = ("transpose", "swapaxes", "swapdims", "permute", "movedim", "moveaxis")
#: calls that read a tensor's values without returning a tensor
_VALUE_READS = ("equal", "allclose", "item", "tolist", "any", "all")
#: in-place writes that return nothing (those ending in ``_`` are found by name)
_WRITES = ("setitem",)


def _writes(name: str) -> bool:
    return (
        name in _WRITES
        or (name.endswith("_") and not name.startswith("_"))
        or (name.startswith("i") and name[1:] in _INPLACE_OPS)
    )


_INPLACE_OPS = ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor")


def _whole_view(x: Tensor, y: Tensor) -> bool:
    """Whether ``y`` is a view of all of ``x`` as it is: same storage, offset, sizes, strides
    and dtype (so the same values, element for element)."""
    if y is x or y.numel() == 0 or x.is_sparse or y.is_sparse:
        return False
    try:
        return bool(
            y.shape == x.shape
            and y.stride() == x.stride()
            and y.dtype == x.dtype
            and y.device == x.device
            and y.storage_offset() == x.storage_offset()
            and y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
            and y.is_conj() == x.is_conj()
            and y.is_neg() == x.is_neg()
        )
    except (RuntimeError, NotImplementedError):
        return False


@dataclass(frozen=True)
class Pad:
    """A tensor padded: ``pairs[d] = (lo, hi)`` per dim of the source (0 for unpadded dims;
    a ``F.pad`` call that pads nothing has only zeros),
    ``mode`` one of ``constant``, ``reflect``, ``replicate``, ``circular`` or ``state`` (a
    ``torch.cat`` with a buffer that is not constant), ``value`` the constant fill.
    ``form`` is ``'pad'`` (a pad call) or ``'cat'``; ``piece`` the source's index among the
    concatenated tensors."""

    source: int
    pairs: tuple[tuple[int, int], ...]
    mode: str
    value: float
    form: str = "pad"
    piece: int = 0
    state: str = ""

    def padded_dims(self) -> list[int]:
        return [d for d, p in enumerate(self.pairs) if p != (0, 0)]


@dataclass(frozen=True)
class Crop:
    """A contiguous run of one dim kept: ``lo`` elements dropped before, ``hi`` after."""

    source: int
    dim: int
    lo: int
    hi: int


@dataclass(frozen=True)
class AxisMove:
    """A permutation of dims (``out.dim(i)`` is ``source.dim(perm[i])``), None when the call's
    arguments were not read."""

    source: int
    perm: tuple[int, ...] | None


@dataclass(frozen=True)
class Reduction:
    """A call that mixes the positions of ``dims`` (of its first input): ``kind`` is
    ``'reduce'`` (a reduction, ``softmax``, ``log_softmax``, ``normalize``), ``'adaptive'``
    (an adaptive pool over its last dims) or ``'norm'`` (``layer_norm`` over its last
    dims)."""

    dims: frozenset[int]
    kind: str = "reduce"


_REDUCING = REDUCTIONS | {"softmax", "log_softmax", "normalize"}


def _dims(value: Any, ndim: int) -> frozenset[int] | None:
    if isinstance(value, int):
        return frozenset({value % ndim})
    if isinstance(value, (tuple, list)) and all(isinstance(v, int) for v in value):
        return frozenset(v % ndim for v in value)
    return None


def func_name(func: Any) -> str:
    """The name a torch function was called by (``'__radd__'``, ``'mean'``; a property
    read such as ``Tensor.shape`` is ``'Size.__get__'``-like)."""
    name = getattr(func, "__name__", None)
    if name == "__get__":  # a property such as Tensor.shape
        owner = getattr(func, "__self__", None)
        name = f"{getattr(owner, '__name__', 'property')}.__get__"
    return str(name) if name is not None else type(func).__name__


@dataclass
class ModuleCall:
    """One module call: ``path`` in the model (``''`` the root, ``'?'`` a module outside it),
    its class, ``parent`` (the enclosing module call's index), its tensors (positional inputs,
    flattened outputs) by identity and their shapes, and ``at``: how many torch calls the
    record held when it began (its place among :attr:`Record.calls`: the calls of index
    ``>= at`` came after its start)."""

    index: int
    path: str
    cls: str
    parent: int | None
    inputs: tuple[int, ...]
    in_shapes: tuple[tuple[int, ...], ...]
    outputs: tuple[int, ...] = ()
    out_shapes: tuple[tuple[int, ...], ...] = ()
    op: Op | None = None
    module: nn.Module | None = field(default=None, repr=False, compare=False)
    at: int = 0


@dataclass
class Call:
    """One torch function call: its base name (``'pad'``, ``'conv1d'``, ``'getitem'``...),
    ``owner`` (the module call whose own code made it, None outside every module),
    ``ordinal`` (that name's count in the owner call's own code), the tensors it read and
    made by identity, and what it is: ``op``, ``pad``, ``crop`` or ``move``; ``reduce``
    (the dims it mixes), ``elementwise`` (``torch.max(a, b)`` and the like), ``batch_stats``
    (a ``batch_norm``: whether it takes batch statistics; None for other calls); ``func``
    the name it was called by."""

    index: int
    name: str
    owner: int | None
    ordinal: int
    reads: tuple[int, ...]
    makes: tuple[int, ...]
    op: Op | None = None
    pad: Pad | None = None
    crop: Crop | None = None
    move: AxisMove | None = None
    mutates: bool = False
    persistent: bool = False
    func: str = ""
    reduce: Reduction | None = None
    elementwise: bool = False
    batch_stats: bool | None = None


@dataclass
class Record:
    """What a model computed for one input (see the module docstring). ``inputs`` and
    ``output`` are the call's arguments and result; ``length`` the input's time size when
    the record comes from :func:`padkit.recognise.probe`."""

    modules: list[ModuleCall] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    inputs: tuple[Any, ...] = ()
    output: Any = None
    length: int | None = None
    _tensors: dict[int, Tensor] = field(default_factory=dict, repr=False)
    _producer: dict[int, int] = field(default_factory=dict, repr=False)
    _readers: dict[int, list[int]] = field(default_factory=dict, repr=False)
    _alias: dict[int, int] = field(default_factory=dict, repr=False)
    _live: set[int] | None = field(default=None, repr=False)

    def canonical(self, tid: int) -> int:
        """The identity of the tensor ``tid`` views whole (itself when it views nothing)."""
        return self._alias.get(tid, tid)

    def live(self) -> set[int]:
        """The indices of the calls that the output depends on, or that write into a
        parameter's or buffer's storage (and the calls those depend on). A call outside
        this set computes something nobody reads: a fresh state object filled and dropped."""
        if self._live is not None:
            return self._live
        need = {self.canonical(id(t)) for t in _flat(self.output)}
        live: set[int] = set()
        for c in reversed(self.calls):
            if (
                c.persistent
                or any(t in need for t in c.makes)
                or (c.mutates and c.reads and c.reads[0] in need)
            ):
                live.add(c.index)
                need.update(c.reads)
        self._live = live
        return live

    def tensor(self, tid: int) -> Tensor:
        """The tensor with identity ``tid`` seen during the run."""
        return self._tensors[tid]

    def producer(self, tid: int) -> Call | None:
        """The torch call that made tensor ``tid`` (None for inputs, parameters, buffers)."""
        i = self._producer.get(tid)
        return None if i is None else self.calls[i]

    def readers(self, tid: int) -> list[Call]:
        """The torch calls that read tensor ``tid``'s values."""
        return [self.calls[i] for i in self._readers.get(tid, [])]

    def within(self, call: int | None, ancestor: int) -> bool:
        """Whether module call ``call`` is ``ancestor`` or runs inside it."""
        while call is not None:
            if call == ancestor:
                return True
            call = self.modules[call].parent
        return False

    def module_calls(self, path: str) -> list[ModuleCall]:
        return [m for m in self.modules if m.path == path]

    def own_calls(self, owner: int, name: str | None = None) -> Iterator[Call]:
        """The calls module call ``owner``'s own code made (of ``name``)."""
        for c in self.calls:
            if c.owner == owner and (name is None or c.name == name):
                yield c

    @property
    def pads(self) -> list[Call]:
        return [c for c in self.calls if c.pad is not None]

    @property
    def crops(self) -> list[Call]:
        return [c for c in self.calls if c.crop is not None]


def _flat(value: Any) -> list[Tensor]:
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _flat(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _flat(v)]
    return []


def _constant(t: Tensor) -> float | None:
    """The one value every element of ``t`` holds, or None."""
    if t.numel() == 0 or t.is_complex():
        return None
    first = t.reshape(-1)[0]
    if not bool(torch.all(t == first)):
        return None
    return float(first)


def _read_crop(x: Tensor, y: Tensor) -> tuple[int, int, int] | None:
    """``(dim, lo, hi)`` when ``y`` is a view of ``x`` keeping a contiguous run of one dim."""
    if x.dim() != y.dim() or x.dim() == 0 or x.is_sparse or y.is_sparse:
        return None
    dims = [d for d in range(x.dim()) if x.shape[d] != y.shape[d]]
    if len(dims) != 1:
        return None
    (d,) = dims
    try:
        same = x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None
    if not same or y.stride() != x.stride() or x.stride(d) <= 0:
        return None
    off = y.storage_offset() - x.storage_offset()
    if off % x.stride(d):
        return None
    lo = off // x.stride(d)
    hi = int(x.shape[d]) - lo - int(y.shape[d])
    if lo < 0 or hi < 0:
        return None
    return int(d), int(lo), int(hi)


def _read_move(name: str, x: Tensor, args: tuple[Any, ...]) -> tuple[int, ...] | None:
    n = x.dim()
    try:
        if name in ("transpose", "swapaxes", "swapdims"):
            a, b = int(args[1]) % n, int(args[2]) % n
            perm = list(range(n))
            perm[a], perm[b] = perm[b], perm[a]
            return tuple(perm)
        if name == "permute":
            dims = args[1:] if not isinstance(args[1], (list, tuple)) else args[1]
            return tuple(int(d) % n for d in dims)
    except (IndexError, TypeError, ValueError):
        return None
    return None


class _Recorder(TorchFunctionMode):
    def __init__(
        self, rec: Record, stack: list[int], buffers: dict[int, str], storages: set[int]
    ) -> None:
        super().__init__()
        self.rec = rec
        self.stack = stack
        self.buffers = buffers
        self.storages = storages
        self.counts: dict[tuple[int | None, str], int] = {}
        self.quiet = 0

    def keep(self, t: Tensor) -> int:
        self.rec._tensors.setdefault(id(t), t)
        return self.rec.canonical(id(t))

    def _persistent(self, t: Any) -> bool:
        try:
            return isinstance(t, Tensor) and t.untyped_storage().data_ptr() in self.storages
        except (RuntimeError, NotImplementedError):
            return False

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.quiet:
            return out
        name = base_name(func)
        owner = self.stack[-1] if self.stack else None
        key = (owner, name)
        ordinal = self.counts.get(key, 0)
        self.counts[key] = ordinal + 1
        made = _flat(out)
        x = args[0] if args else None
        writes = _writes(name)
        rec = self.rec
        if (
            not writes
            and isinstance(out, Tensor)
            and isinstance(x, Tensor)
            and id(out) not in rec._tensors
            and _whole_view(x, out)
        ):
            # the same tensor under another name: readers of the view read the source
            rec._tensors[id(out)] = out
            rec._alias[id(out)] = self.keep(x)
            return out
        if not made and name not in _VALUE_READS and not writes:
            return out
        read = _flat(list(args)) + _flat(list(kwargs.values()))
        call = Call(
            len(rec.calls),
            name,
            owner,
            ordinal,
            tuple(self.keep(t) for t in read),
            tuple(self.keep(t) for t in made),
            func=func_name(func),
        )
        if writes:
            call.mutates = True
            call.persistent = self._persistent(x)
        # a fact that cannot be read is no fact; the call stands
        with contextlib.suppress(Exception):
            self._facts(call, func, name, args, kwargs, out)
        rec.calls.append(call)
        for tid in dict.fromkeys(call.reads):
            rec._readers.setdefault(tid, []).append(call.index)
        for tid in call.makes:
            rec._producer.setdefault(tid, call.index)
        return out

    def _facts(self, call: Call, func: Any, name: str, args: Any, kwargs: Any, out: Any) -> None:
        x = args[0] if args else None
        if name in ("pad", "constant_pad_nd") and isinstance(x, Tensor):
            pc = call_pad(func, args, kwargs)
            if pc is not None and all(a >= 0 and b >= 0 for a, b in pc.pairs):
                pairs = [(0, 0)] * (x.dim() - len(pc.pairs)) + list(pc.pairs)
                # a pad of nothing is kept too: code that pads (0, extra) pads nothing at
                # some lengths, and a module whose pad is all it adds is still recognised
                call.pad = Pad(self.keep(x), tuple(pairs), pc.mode, pc.value)
        elif name in _CAT_NAMES and isinstance(x, (list, tuple)) and isinstance(out, Tensor):
            call.pad = self._cat(x, args, kwargs, out)
        elif name in _CROP_NAMES and isinstance(x, Tensor) and isinstance(out, Tensor):
            found = _read_crop(x, out)
            if found is not None and (found[1] or found[2]):
                call.crop = Crop(self.keep(x), *found)
        elif name in _MOVE_NAMES and isinstance(x, Tensor):
            call.move = AxisMove(self.keep(x), _read_move(name, x, args))
        else:
            call.op = call_op(func, args, kwargs)
            if call.op is None and isinstance(x, Tensor) and x.dim():
                _mixing(call, name, x, args, kwargs)

    def _cat(self, pieces: Any, args: Any, kwargs: Any, out: Tensor) -> Pad | None:
        dim = args[1] if len(args) > 1 else kwargs.get("dim", kwargs.get("axis", 0))
        ts = [p for p in pieces if isinstance(p, Tensor)]
        if len(ts) != len(pieces) or len(ts) < 2 or not isinstance(dim, int):
            return None
        dim %= out.dim()
        edge = _edge_pad(ts, dim)
        if edge is not None:
            i, before, after, emode = edge
            pairs = [(0, 0)] * out.dim()
            pairs[dim] = (before, after)
            return Pad(self.keep(ts[i]), tuple(pairs), emode, 0.0, "cat", i)
        main: int | None = None
        value: float | None = None
        state = ""
        for i, t in enumerate(ts):
            if t.numel() == 0:
                continue
            c = _constant(t)
            if c is not None and (value is None or c == value):
                value = c
                continue
            if id(t) in self.buffers and not state:
                state = self.buffers[id(t)]
                continue
            if main is not None:
                return None
            main = i
        if main is None:
            return None
        before = sum(int(t.shape[dim]) for t in ts[:main])
        after = sum(int(t.shape[dim]) for t in ts[main + 1 :])
        if before == 0 and after == 0:
            return None
        pairs = [(0, 0)] * out.dim()
        pairs[dim] = (before, after)
        if state:
            return Pad(self.keep(ts[main]), tuple(pairs), "state", 0.0, "cat", main, state)
        return Pad(self.keep(ts[main]), tuple(pairs), "constant", float(value or 0.0), "cat", main)


def _mixing(call: Call, name: str, x: Tensor, args: Any, kwargs: Any) -> None:
    """The facts of a call that may mix positions: a reduction, an adaptive pool,
    ``layer_norm``, ``batch_norm``'s statistics, the elementwise ``max(a, b)``."""
    nd = x.dim()
    if name in _REDUCING:
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        if name == "normalize":
            dim = kwargs.get("dim", args[2] if len(args) > 2 else 1)
        if isinstance(dim, Tensor):
            call.elementwise = True  # torch.max(a, b) and the like
            return
        dims = frozenset(range(nd)) if dim is None else _dims(dim, nd)
        if dims is not None:
            call.reduce = Reduction(dims)
    elif name.startswith(("adaptive_avg_pool", "adaptive_max_pool")):
        k = int(name[len("adaptive_avg_pool")])
        call.reduce = Reduction(frozenset(range(nd - k, nd)), "adaptive")
    elif name == "batch_norm":
        call.batch_stats = bool(kwargs.get("training", args[5] if len(args) > 5 else False))
    elif name == "layer_norm":
        shape = kwargs.get("normalized_shape", args[1] if len(args) > 1 else None)
        k = len(shape) if isinstance(shape, (tuple, list, torch.Size)) else 1
        call.reduce = Reduction(frozenset(range(nd - k, nd)), "norm")


def _edge_pad(ts: list[Tensor], dim: int) -> tuple[int, int, int, str] | None:
    """``(main piece, before, after, mode)`` when the other pieces of a ``torch.cat`` are
    the main piece's edge samples repeated (``replicate``) or mirrored (``reflect``). A
    piece of zeros is a zero pad, never read as this (a zero edge sample is common)."""
    for i, m in enumerate(ts):
        n = int(m.shape[dim])
        if n < 2 or _constant(m) is not None:
            continue
        before = [t for t in ts[:i] if t.numel()]
        after = [t for t in ts[i + 1 :] if t.numel()]
        if not before and not after:
            return None
        if any(_constant(t) == 0.0 for t in before + after):
            continue
        b = sum(int(t.shape[dim]) for t in before)
        a = sum(int(t.shape[dim]) for t in after)
        lead = torch.cat(before, dim) if before else None
        tail = torch.cat(after, dim) if after else None
        for mode in ("replicate", "reflect"):
            if mode == "reflect" and max(a, b) >= n:
                continue
            ok = True
            for side, piece, k in (("lo", lead, b), ("hi", tail, a)):
                if piece is None:
                    continue
                if mode == "replicate":
                    src = m.narrow(dim, 0 if side == "lo" else n - 1, 1)
                    want = src.expand_as(piece)
                else:
                    want = m.narrow(dim, 1 if side == "lo" else n - 1 - k, k).flip(dim)
                if want.shape != piece.shape or not bool(torch.equal(want, piece)):
                    ok = False
                    break
            if ok:
                return i, b, a, mode
    return None


def record(model: nn.Module, *inputs: Any, **kwargs: Any) -> Record:
    """Run ``model(*inputs, **kwargs)`` once (without gradients, in the model's current mode)
    and return the :class:`Record` of what it computed. The model runs as it is: run it on a
    copy (:func:`padkit.recognise.probe` does) where its buffers must not change.

    An exception from the model propagates; :func:`failing_module` names the module
    call that raised it.
    """
    rec = Record()
    paths: dict[int, str] = {}
    buffers: dict[int, str] = {}
    for path, m in model.named_modules(remove_duplicate=False):
        paths.setdefault(id(m), path)
    storages: set[int] = set()
    for bname, b in model.named_buffers(remove_duplicate=False):
        buffers.setdefault(id(b), bname)
    for t in [*model.buffers(), *model.parameters()]:
        with contextlib.suppress(RuntimeError, NotImplementedError):
            storages.add(t.untyped_storage().data_ptr())
    stack: list[int] = []
    mode = _Recorder(rec, stack, buffers, storages)

    def pre(m: nn.Module, args: Any) -> None:
        mode.quiet += 1
        try:
            ins = [t for t in _flat(list(args))]
            call = ModuleCall(
                len(rec.modules),
                paths.get(id(m), "?"),
                type(m).__name__,
                stack[-1] if stack else None,
                tuple(mode.keep(t) for t in ins),
                tuple(tuple(t.shape) for t in ins),
                module=m,
                at=len(rec.calls),
            )
            rec.modules.append(call)
            stack.append(call.index)
        finally:
            mode.quiet -= 1

    def post(m: nn.Module, args: Any, out: Any) -> None:
        mode.quiet += 1
        try:
            if not stack or rec.modules[stack[-1]].module is not m:
                return
            call = rec.modules[stack.pop()]
            outs = _flat(out)
            call.outputs = tuple(mode.keep(t) for t in outs)
            call.out_shapes = tuple(tuple(t.shape) for t in outs)
            call.op = module_op(m)
        finally:
            mode.quiet -= 1

    handles = [
        _module_mod.register_module_forward_pre_hook(pre),
        _module_mod.register_module_forward_hook(post),
    ]
    rec.inputs = tuple(inputs)
    for t in _flat(list(inputs)):
        mode.keep(t)
    try:
        with torch.no_grad(), mode:
            out = model(*inputs, **kwargs)
    except Exception as err:
        # the innermost module still running is the one that raised
        err.__dict__["_padkit_failed"] = rec.modules[stack[-1]] if stack else None
        raise
    finally:
        for h in handles:
            h.remove()
    rec.output = out
    for t in _flat(out):
        mode.keep(t)
    return rec


def failing_module(err: BaseException) -> ModuleCall | None:
    """The innermost module call that was running when :func:`record`'s model raised ``err``."""
    found = getattr(err, "__dict__", {}).get("_padkit_failed")
    return found if isinstance(found, ModuleCall) else None
