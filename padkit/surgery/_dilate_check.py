"""dilate's self-check: the dilated model run at each probe size against the a-trous identity.

A layer whose stride ``s`` becomes dilation has, on the dense grid, the output length
``N + f*(lo + hi + e - d*(k-1))`` (``N`` its dense input length, ``f`` its lattice factor,
``e`` a ceil-mode pool's overhang): any length in ``(F*(m-1), F*m]`` (``F = f*s``, ``m``
the original output length) keeps the lattice outputs exact, and each kind of layer lands
at its own place in that window. A patchify conv (``Conv2d(C, C, 2, stride=2)``) ends at
``N - f``, a ceil-mode pool (the ResNet-D shortcut) at ``N``: equal lattices, unequal dense
maps, and a join of the two (``main(x) + shortcut(x)``) fails. :func:`watch` runs the
dilated model and, at every join (a pointwise op on several maps, ``cat``, ``stack``) whose
inputs differ in length, names the converted layer each shorter input comes from (the last
one it passed, through position-wise code); dilate then gives that layer the missing cells
as end padding that no lattice output reads, and runs it again.

:func:`compare` then holds the dilated model's outputs, subsampled at their lattice, to the
original's on the same probes; :func:`first_difference` names the first module, in call
order, whose output is off its lattice when they differ.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F
from torch.overrides import TorchFunctionMode

from ..recognise import func_name as _name
from ._common import _tensors, strides
from ._lattice import _base, _lattice, _pointwise

_JOINS = frozenset({"cat", "concat", "concatenate", "stack"})


@dataclass
class Mismatch:
    """A join whose inputs have unequal dense lengths along one tensor dim."""

    join: str  # the module whose own code makes the join
    name: str  # the function
    dim: int  # the tensor dim (counted from the end: -1 is the last)
    lengths: list[int]  # each input's length along it
    # per shorter input: (converted layer path, its spatial axis, cells it lacks) or None
    short: list[tuple[str, int, int] | None] = field(default_factory=list)


class _Watch(TorchFunctionMode):
    """Runs a dilated model, tagging each tensor with the converted layer it last came
    through, and evening out (with zeros, to go on) every join whose inputs differ."""

    def __init__(self, converted: dict[str, int]) -> None:
        super().__init__()
        self.converted = converted  # path -> the layer's number of spatial dims
        self.stack: list[str] = []
        self.tags: dict[int, tuple[Any, str, int]] = {}
        self.mismatches: list[Mismatch] = []
        self.failed_in: str | None = None

    def tag(self, t: Tensor, source: tuple[str, int]) -> None:
        self.tags[id(t)] = (weakref.ref(t), *source)

    def tag_of(self, t: Tensor) -> tuple[str, int] | None:
        found = self.tags.get(id(t))
        if found is None or found[0]() is not t:
            return None
        return found[1], found[2]

    def hooks(self, root: nn.Module) -> list[Any]:
        handles = []
        for path, module in root.named_modules():
            handles.append(module.register_forward_pre_hook(self._pre(path)))
            handles.append(module.register_forward_hook(self._post(path), always_call=True))
        return handles

    def _pre(self, path: str) -> Callable[..., None]:
        def pre(_m: nn.Module, _args: Any) -> None:
            self.stack.append(path)

        return pre

    def _post(self, path: str) -> Callable[..., None]:
        def post(_m: nn.Module, _args: Any, out: Any) -> None:
            if self.stack:
                self.stack.pop()
            if path in self.converted:
                for t in _tensors(out):
                    self.tag(t, (path, t.dim()))

        return post

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        ins = list(_tensors((args, kwargs)))
        if len(ins) > 1:
            name = _base(_name(func))
            if name in _JOINS or _pointwise(name):
                args, kwargs = self.even(name, args, kwargs, ins)
        try:
            out = func(*args, **kwargs)
        except Exception:
            if self.failed_in is None:
                self.failed_in = self.stack[-1] if self.stack else ""
            raise
        source = next((s for t in ins if (s := self.tag_of(t)) is not None), None)
        if source is not None:
            for t in _tensors(out):
                if t.dim() == source[1]:
                    self.tag(t, source)
        return out

    def even(
        self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], ins: list[Tensor]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        maps = [t for t in ins if t.dim() >= 3]
        if len(maps) < 2:
            return args, kwargs
        rank = max(t.dim() for t in maps)
        skip = 0  # cat's own dim, counted from the end
        if name in _JOINS and name != "stack":
            dim = kwargs.get("dim", args[1] if len(args) > 1 else 0)
            if not isinstance(dim, int):
                return args, kwargs
            skip = rank - dim % rank
        grown: dict[int, Tensor] = {}
        for back in range(1, rank + 1):
            if back == skip:
                continue
            sizes = [t.shape[-back] if t.dim() >= back else 1 for t in maps]
            real = [n for n in sizes if n != 1]
            if len(set(real)) < 2:
                continue
            target = max(real)
            found = Mismatch(self.stack[-1] if self.stack else "", name, -back, sizes)
            for t, n in zip(maps, sizes):
                if n == 1 or n == target:
                    continue
                source = self.tag_of(t)
                axis: int | None = None
                if source is not None and source[1] == t.dim():
                    nd = self.converted[source[0]]
                    if back <= nd:
                        axis = nd - back
                found.short.append(
                    None if source is None or axis is None else (source[0], axis, target - n)
                )
                base = grown.get(id(t), t)
                pads = [0] * (2 * back)
                pads[-1] = target - n
                grown[id(t)] = F.pad(base, pads)
            self.mismatches.append(found)
        if not grown:
            return args, kwargs

        def swap(value: Any) -> Any:
            if isinstance(value, Tensor):
                return grown.get(id(value), value)
            if isinstance(value, (list, tuple)):
                return type(value)(swap(v) for v in value)
            if isinstance(value, dict):
                return {k: swap(v) for k, v in value.items()}
            return value

        return swap(args), swap(kwargs)


def _eval_run(model: nn.Module, run: Callable[[], Any]) -> Any:
    modes = [(m, m.training) for m in model.modules()]
    try:
        model.eval()
        with torch.no_grad():
            return run()
    finally:
        for m, training in modes:
            m.training = training


def outputs(model: nn.Module, x: Tensor) -> list[Tensor]:
    """The model's output tensors on ``x``, in eval mode, without gradients."""
    return list(_tensors(_eval_run(model, lambda: model(x))))


def watch(
    model: nn.Module, x: Tensor, converted: dict[str, int]
) -> tuple[list[Tensor] | None, list[Mismatch], BaseException | None, str | None]:
    """Run the dilated ``model`` on ``x``: its outputs (None when it failed), the joins
    whose inputs differed, and the error with the innermost module that raised it."""
    rec = _Watch(converted)
    handles = rec.hooks(model)
    try:
        with rec:
            outs = outputs(model, x)
    except Exception as exc:
        return None, rec.mismatches, exc, rec.failed_in if rec.failed_in is not None else ""
    finally:
        for h in handles:
            h.remove()
    return outs, rec.mismatches, None, None


def tolerance(dtype: torch.dtype) -> float:
    """The relative difference beyond which an output is wrong rather than rounded: a
    wrong pad moves border values by a sizeable part of the map's scale."""
    if not dtype.is_floating_point:
        return 0.0
    return min(0.05, 1e5 * torch.finfo(dtype).eps)


def compare(
    refs: Sequence[Sequence[Tensor]], outs: Sequence[Sequence[Tensor]]
) -> tuple[int, int, str] | None:
    """Each dilated output (per probe) subsampled at its lattice against the original's:
    None when all agree, else ``(probe, output, why)``. The lattice ratio of each axis is
    the original's stride over the dilated one's, read from the two probes' sizes."""
    a0, a1 = refs
    b0, b1 = outs
    if len(a0) != len(b0):
        return 0, 0, f"the original returns {len(a0)} tensor(s), the dilated model {len(b0)}"
    for i, (r0, r1, o0, o1) in enumerate(zip(a0, a1, b0, b1)):
        before = strides(tuple(r0.shape), tuple(r1.shape))
        after = strides(tuple(o0.shape), tuple(o1.shape))
        spec = []
        for d, stride in before.items():
            ratio = stride / after.get(d, stride)
            if ratio.denominator != 1:
                return 0, i, f"its axis {d} has stride {stride} in the original, {after.get(d)}"
            spec.append((d, int(ratio)))
        for probe, (ref, out) in enumerate(((r0, o0), (r1, o1))):
            why = _differs(ref, _lattice(out, tuple(spec)))
            if why is not None:
                return probe, i, why
    return None


def _differs(ref: Tensor, sub: Tensor) -> str | None:
    if sub.shape != ref.shape:
        return f"its lattice is {tuple(sub.shape)}, the original's output {tuple(ref.shape)}"
    if not ref.is_floating_point():
        return None if torch.equal(ref, sub) else "its values differ"
    a, b = ref.double(), sub.double()
    same = (a == b) | (torch.isnan(a) & torch.isnan(b))
    finite = torch.isfinite(a) & torch.isfinite(b)
    if bool((~same & ~finite).any()):
        return "its infinities or NaNs sit elsewhere"
    scale = float(a[finite].abs().max()) if bool(finite.any()) else 0.0
    worst = float((a - b)[finite].abs().max()) if bool(finite.any()) else 0.0
    allowed = tolerance(ref.dtype) * (scale or 1.0)
    if worst > allowed:
        return (
            f"its lattice differs from the original's output by {worst:.3g} "
            f"(scale {scale:.3g}, allowed {allowed:.3g})"
        )
    return None


def first_difference(
    original: nn.Module,
    dilated: nn.Module,
    x: Tensor,
    factors: dict[tuple[str, int], dict[int, Fraction]],
) -> str | None:
    """The first module, in the original's call order, whose output on ``x`` in the
    dilated model, subsampled at its lattice (``factors`` per ``(path, call)``), is not the
    original's."""
    seen: dict[tuple[str, int], Tensor] = {}
    order: list[tuple[str, int]] = []

    def grab(into: dict[tuple[str, int], Tensor], keep: list[tuple[str, int]] | None) -> Any:
        calls: dict[str, int] = {}

        def make(path: str) -> Callable[..., None]:
            def hook(_m: nn.Module, _args: Any, out: Any) -> None:
                call = calls.get(path, 0)
                calls[path] = call + 1
                first = next(iter(_tensors(out)), None)
                if first is not None and (path, call) in factors:
                    into[(path, call)] = first
                    if keep is not None:
                        keep.append((path, call))

            return hook

        return make

    def run(model: nn.Module, into: dict[tuple[str, int], Tensor], keep: Any) -> None:
        make = grab(into, keep)
        handles = [m.register_forward_hook(make(p)) for p, m in model.named_modules() if p]
        try:
            outputs(model, x)
        except Exception:
            pass
        finally:
            for h in handles:
                h.remove()

    run(original, seen, order)
    mine: dict[tuple[str, int], Tensor] = {}
    run(dilated, mine, None)
    for key in order:
        out = mine.get(key)
        if out is None:
            return key[0]
        spec = tuple((d, int(f)) for d, f in factors[key].items() if f > 1)
        if _differs(seen[key], _lattice(out, spec)) is not None:
            return key[0]
    return None
