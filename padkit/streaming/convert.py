"""convert_causal: rewrite third-party causal conv models into padkit layers that stream.

Causal padding is written many ways in the wild, and none of them streams as written (a
pad in ``forward`` pads every chunk, a chomp crops every chunk). :func:`convert_causal`
runs the model twice on probe inputs, watches which tensor each module receives and
returns, and rewrites what it recognises:

* **a conv subclass that pads in its own forward** (pytorch-tcn's ``TemporalConv1d`` with
  its ``padder`` child, WaveNet's ``CausalConv1d(nn.Conv1d)`` calling ``F.pad``): the pads
  are solved from what the module returns (it must equal the base conv on the padded input
  for both probes) and the module becomes a :class:`ConvertedConv1d` (2d, 3d) with those
  pads;
* **a pad module feeding convs** anywhere in the tree (``nn.ConstantPad1d``/``ZeroPad``
  with value 0, or any parameter-free module whose output is its input zero-padded on the
  time axis, e.g. a module calling ``F.pad``): the pads move into every conv it feeds and
  the pad module becomes ``nn.Identity``;
* **``F.pad`` written in a module's forward** and feeding only convs (a WaveNet gated block
  padding once for its filter and gate convs): the module becomes its ``torch.fx`` trace
  without the pad, and the pads move into the convs (a forward that fx cannot trace is
  reported as skipped);
* **a conv followed by a chomp** (the locuslab TCN: symmetric ``padding=(k-1)*d``, then
  ``Chomp1d`` cropping the end): the crop moves into the conv's right pad (``(p, p)`` and a
  crop of ``c`` outputs at stride ``s`` become ``(p, p - c*s)``) and the chomp becomes
  ``nn.Identity``;
* **old-style weight norm** (``torch.nn.utils.weight_norm``, a forward pre-hook) becomes the
  ``torch.nn.utils.parametrizations.weight_norm`` parametrization with the same ``g`` and
  ``v``; parametrizations (weight norm, spectral norm, ...) move to the new layers as they
  are, so the converted model still trains.

The result is checked: the converted model must give the original's outputs on both probes
(else :class:`padkit.surgery.SurgeryError`). The model is copied; the report lists every
change. Crops written as tensor code (``x[..., :-p]`` in a ``forward``) and pads whose output
also feeds other computation are not rewritten; such a model still fails
:class:`~padkit.streaming.StreamingModule`'s checks or its ``verify``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils import parametrize
from torch.overrides import TorchFunctionMode

from .. import nn as pnn
from ..spec import PaddingError, _tuple_of
from ..surgery._common import Change, Skip, SurgeryError, SurgeryReport
from ._wrappers import find_wrapper, unpadded_class

__all__ = ["ConvertedConv1d", "ConvertedConv2d", "ConvertedConv3d", "convert_causal"]

_TORCH_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
_TORCH_CONVTS = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
_BASE_FORWARD: dict[int, Any] = {1: nn.Conv1d.forward, 2: nn.Conv2d.forward, 3: nn.Conv3d.forward}
_ZERO_PADS = (
    nn.ConstantPad1d,
    nn.ConstantPad2d,
    nn.ConstantPad3d,
    nn.ZeroPad1d,
    nn.ZeroPad2d,
    nn.ZeroPad3d,
)


class _KeywordTolerant:
    """Accepts (and refuses to act on) the extra call arguments of the layer it replaced."""

    def forward(self, input: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        extra = [a for a in args if a is not None and a is not False] + [
            k for k, v in kwargs.items() if v is not None and v is not False
        ]
        if extra:
            raise PaddingError(
                f"{type(self).__name__}: called with {args!r} {kwargs!r}; the converted layer "
                "computes the conv only. Stream it with padkit.streaming.StreamingModule "
                "instead of the original's own streaming options"
            )
        return super().forward(input)  # type: ignore[misc, no-any-return]


class ConvertedConv1d(_KeywordTolerant, pnn.Conv1d):
    """A :class:`padkit.nn.Conv1d` standing in for a third-party conv that padded itself.

    Identical to ``padkit.nn.Conv1d`` but for its call: it accepts (and ignores when
    ``None``/``False``) the extra arguments the original layer took, such as pytorch-tcn's
    ``inference=False``, so that the original model's ``forward`` runs unchanged.

    Shape:
        - Input: ``(N, C_in, L)``; output as for :class:`padkit.nn.Conv1d`.

    Example:
        >>> conv = ConvertedConv1d(1, 1, 3, padding="causal")
        >>> conv(torch.ones(1, 1, 5), inference=False).shape
        torch.Size([1, 1, 5])
    """


class ConvertedConv2d(_KeywordTolerant, pnn.Conv2d):
    """:class:`ConvertedConv1d` for 2-d convs.

    Shape:
        - Input: ``(N, C_in, H, W)``; output as for :class:`padkit.nn.Conv2d`.

    Example:
        >>> ConvertedConv2d(1, 1, 3, padding=("causal", "same"))(torch.ones(1, 1, 4, 4)).shape
        torch.Size([1, 1, 4, 4])
    """


class ConvertedConv3d(_KeywordTolerant, pnn.Conv3d):
    """:class:`ConvertedConv1d` for 3-d convs.

    Shape:
        - Input: ``(N, C_in, D, H, W)``; output as for :class:`padkit.nn.Conv3d`.

    Example:
        >>> conv = ConvertedConv3d(1, 1, 3, padding=("causal", "same", "same"))
        >>> conv(torch.ones(1, 1, 2, 4, 4)).shape
        torch.Size([1, 1, 2, 4, 4])
    """


_CONVERTED: dict[int, type[nn.Module]] = {
    1: ConvertedConv1d,
    2: ConvertedConv2d,
    3: ConvertedConv3d,
}
_PLAIN_PADKIT: dict[int, type[nn.Module]] = {1: pnn.Conv1d, 2: pnn.Conv2d, 3: pnn.Conv3d}

Pairs = list[tuple[int, int]]


def _nd(conv: nn.Module) -> int:
    return 1 if isinstance(conv, nn.Conv1d) else 2 if isinstance(conv, nn.Conv2d) else 3


def _native_pairs(conv: Any, nd: int) -> Pairs:
    """The (lo, hi) pads of a torch conv's ``padding`` attribute (padkit's resolved)."""
    if isinstance(conv, (pnn.Conv1d, pnn.Conv2d, pnn.Conv3d)):
        spec = conv.pad_spec
        if not spec.is_explicit:
            raise SurgeryError("pads that depend on the input size")
        k = _tuple_of(conv.kernel_size, nd, "kernel_size")
        s = _tuple_of(conv.stride, nd, "stride")
        d = _tuple_of(conv.dilation, nd, "dilation")
        return list(spec.resolve(k, s, d))
    p = conv.padding
    if isinstance(p, str):
        if p == "valid":
            return [(0, 0)] * nd
        k = _tuple_of(conv.kernel_size, nd, "kernel_size")
        d = _tuple_of(conv.dilation, nd, "dilation")
        tot = [dd * (kk - 1) for kk, dd in zip(k, d)]
        return [(t // 2, t - t // 2) for t in tot]
    return [(v, v) for v in _tuple_of(p, nd, "padding", minimum=0)]


def _is_plain_forward(conv: nn.Module) -> bool:
    f = type(conv).forward
    return f in (*_BASE_FORWARD.values(), pnn.Conv1d.forward, pnn.Conv2d.forward) or f in (
        pnn.Conv3d.forward,
        _KeywordTolerant.forward,
    )


# ----------------------------------------------------------------------------- weights


def _old_weight_norm_hooks(m: nn.Module) -> list[tuple[int, Any]]:
    from torch.nn.utils.weight_norm import WeightNorm

    return [(k, h) for k, h in m._forward_pre_hooks.items() if isinstance(h, WeightNorm)]


def _modernise_weight_norm(m: nn.Module) -> bool:
    """Old-style weight norm (a pre-hook) -> the parametrization, same g and v."""
    hooks = _old_weight_norm_hooks(m)
    for key, hook in hooks:
        name, dim = hook.name, hook.dim
        g = getattr(m, name + "_g")
        v = getattr(m, name + "_v")
        del m._forward_pre_hooks[key]
        del m._parameters[name + "_g"]
        del m._parameters[name + "_v"]
        if name in m.__dict__:
            delattr(m, name)
        m.register_parameter(name, nn.Parameter(v.detach().clone()))
        torch.nn.utils.parametrizations.weight_norm(m, name, dim)
        plist: Any = m.parametrizations[name]  # type: ignore[index]
        plist.original0 = g
        plist.original1 = v
    return bool(hooks)


def _transfer(old: nn.Module, new: nn.Module) -> None:
    """Move weights, buffers and parametrizations from ``old`` to the freshly built ``new``."""
    if parametrize.is_parametrized(old):
        plists: Any = old.parametrizations
        for name, plist in plists.items():
            for p in plist:
                parametrize.register_parametrization(new, name, p, unsafe=True)
            target: Any = new.parametrizations[name]  # type: ignore[index]
            for pname, value in plist.named_parameters(recurse=False):
                setattr(target, pname, value)
    for name, value in old._parameters.items():
        if value is not None or name in new._parameters:
            new._parameters[name] = value
    for name, buf in old._buffers.items():
        if name in new._buffers:
            new._buffers[name] = buf
    new.train(old.training)


def _build(old: Any, nd: int, pairs: Pairs, cls: type[nn.Module]) -> nn.Module:
    mode = old.padding_mode if any(p != (0, 0) for p in _native_pairs(old, nd)) else "zeros"
    weight = old.weight
    new = cls(
        old.in_channels,
        old.out_channels,
        old.kernel_size,
        stride=old.stride,
        padding=tuple(pairs),
        dilation=old.dilation,
        groups=old.groups,
        bias=old.bias is not None,
        padding_mode=mode,
        device=weight.device,
        dtype=weight.dtype,
    )
    _transfer(old, new)
    return new


def _brief(m: Any) -> str:
    name = type(m).__name__
    if isinstance(m, _TORCH_CONVS):
        nd = _nd(m)
        try:
            pads: Any = tuple(_native_pairs(m, nd))
        except SurgeryError:
            pads = m.pad_spec
        return f"{name} k={tuple(m.kernel_size)} s={tuple(m.stride)} pads={pads}"
    return name


# ----------------------------------------------------------------------------- the probe


class _Call:
    __slots__ = ("inp", "module", "out")

    def __init__(self, module: nn.Module, inp: Any, out: Any) -> None:
        self.module, self.inp, self.out = module, inp, out


class _PadCalls(TorchFunctionMode):
    """Records which module's ``forward`` called ``F.pad``, and each call's output."""

    def __init__(self, stack: list[nn.Module]) -> None:
        super().__init__()
        self.stack = stack
        self.outputs: dict[int, tuple[nn.Module, Tensor]] = {}

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func is F.pad and self.stack and isinstance(out, Tensor):
            self.outputs[id(out)] = (self.stack[-1], out)
        return out


def _probe(model: nn.Module, x: Tensor) -> tuple[Any, list[_Call], set[int]]:
    """Run ``model`` on ``x``: every module call, and the modules whose ``forward`` called
    ``F.pad`` on a tensor that a conv then received."""
    calls: list[_Call] = []
    stack: list[nn.Module] = []

    def pre(mod: nn.Module, args: tuple[Any, ...]) -> None:
        stack.append(mod)

    def hook(mod: nn.Module, args: tuple[Any, ...], out: Any) -> None:
        if stack and stack[-1] is mod:
            stack.pop()
        calls.append(_Call(mod, args[0] if args else None, out))

    handles = [m.register_forward_pre_hook(pre) for m in model.modules()]
    handles += [m.register_forward_hook(hook) for m in model.modules()]
    mode = _PadCalls(stack)
    try:
        with torch.no_grad(), mode:
            y = model(x)
    finally:
        for h in handles:
            h.remove()
    inline: set[int] = set()
    for c in calls:
        if isinstance(c.module, _TORCH_CONVS) and isinstance(c.inp, Tensor):
            hit = mode.outputs.get(id(c.inp))
            if hit is not None and hit[1] is c.inp and hit[0] is not c.module:
                inline.add(id(hit[0]))
    return y, calls, inline


@contextmanager
def _eval(model: nn.Module) -> Iterator[None]:
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for m, t in modes:
            m.train(t)


def _tensors(y: Any) -> list[Tensor]:
    if isinstance(y, Tensor):
        return [y]
    if isinstance(y, (list, tuple)):
        return [t for v in y for t in _tensors(v)]
    if isinstance(y, dict):
        return [t for v in y.values() for t in _tensors(v)]
    return []


def _close(a: Any, b: Any, rtol: float, atol: float) -> bool:
    """Equal to float rounding: every difference within ``atol + rtol * max|b|``. Relative to
    the output's scale, not to each element: a deep model's rounding (kernels summing in
    another order) reaches outputs near zero as much as large ones."""
    ta, tb = _tensors(a), _tensors(b)
    if len(ta) != len(tb) or not ta:
        return False
    for u, v in zip(ta, tb):
        if u.shape != v.shape or u.dtype != v.dtype:
            return False
        if not u.is_floating_point() and not u.is_complex():
            if not bool(torch.equal(u, v)):
                return False
            continue
        if u.numel() == 0:
            continue
        for kind in (torch.isnan, torch.isposinf, torch.isneginf):
            if not bool(torch.equal(kind(u), kind(v))):
                return False  # non-finite values in the same places
        finite = torch.isfinite(v)
        if not bool(finite.any()):
            continue
        scale = float(v[finite].abs().max())
        if float((u[finite] - v[finite]).abs().max()) > atol + rtol * scale:
            return False
    return True


def _solve_self_padding(
    m: Any, nd: int, ti: int, probes: list[tuple[Tensor, Tensor]], tol: float
) -> tuple[int, int] | None:
    """The time pads ``(lo, hi)`` with which ``base_conv(pad(x)) == m(x)`` on every probe."""
    base = _BASE_FORWARD[nd]
    td = 2 + ti
    candidates: set[tuple[int, int]] | None = None
    for x, y in probes:
        if not isinstance(y, Tensor) or not isinstance(x, Tensor) or y.dim() != x.dim():
            return None
        found: set[tuple[int, int]] = set()
        k_eff = m.dilation[ti] * (m.kernel_size[ti] - 1) + 1
        s = m.stride[ti]
        p_lo, p_hi = _native_pairs(m, nd)[ti]
        n, want = int(x.shape[td]), int(y.shape[td])
        first = (want - 1) * s + k_eff - n - p_lo - p_hi
        for total in range(max(first, 0), max(first, 0) + s):
            for lo in range(total + 1):
                pads = [0, 0] * nd
                j = 2 * (nd - 1 - ti)
                pads[j], pads[j + 1] = lo, total - lo
                try:
                    ref = base(m, F.pad(x, pads))
                except RuntimeError:
                    continue
                if ref.shape == y.shape and bool(torch.allclose(ref, y, rtol=tol, atol=tol)):
                    found.add((lo, total - lo))
        candidates = found if candidates is None else candidates & found
    if candidates is None or len(candidates) != 1:
        return None
    return next(iter(candidates))


def _pad_module_pads(
    m: nn.Module, calls: list[_Call], ti: int, nd_in: int, tol: float
) -> Pairs | None:
    """Per spatial axis (of an ``nd_in``-d input) the zero pads ``m`` adds, or None."""
    if isinstance(m, _ZERO_PADS):
        if float(getattr(m, "value", 0.0)) != 0.0:
            return None
        pad_attr: Any = m.padding
        flat = list(pad_attr)
        pairs = [(0, 0)] * nd_in
        for j in range(len(flat) // 2):
            pairs[nd_in - 1 - j] = (int(flat[2 * j]), int(flat[2 * j + 1]))
        return pairs
    if any(True for _ in m.parameters()):
        return None
    found: set[tuple[int, int]] | None = None
    for c in calls:
        x, y = c.inp, c.out
        if not isinstance(x, Tensor) or not isinstance(y, Tensor) or x.dim() != y.dim():
            return None
        td = 2 + ti
        if x.shape[:td] != y.shape[:td] or x.shape[td + 1 :] != y.shape[td + 1 :]:
            return None
        total = int(y.shape[td]) - int(x.shape[td])
        if total <= 0:
            return None
        ok = set()
        for lo in range(total + 1):
            pads = [0, 0] * (x.dim() - 2)
            j = 2 * (x.dim() - 3 - ti)
            pads[j], pads[j + 1] = lo, total - lo
            if bool(torch.allclose(F.pad(x, pads), y, rtol=tol, atol=tol)):
                ok.add((lo, total - lo))
        found = ok if found is None else found & ok
    if not found or len(found) != 1:
        return None
    pairs = [(0, 0)] * nd_in
    pairs[ti] = next(iter(found))
    return pairs


def _end_crop(m: nn.Module, calls: list[_Call], ti: int) -> int | None:
    """The number of samples ``m`` crops from the end of the time axis, or None."""
    if any(True for _ in m.parameters()) or not calls:
        return None
    crop: int | None = None
    for c in calls:
        x, y = c.inp, c.out
        if not isinstance(x, Tensor) or not isinstance(y, Tensor) or x.dim() != y.dim():
            return None
        td = 2 + ti
        if x.shape[:td] != y.shape[:td] or x.shape[td + 1 :] != y.shape[td + 1 :]:
            return None
        c_here = int(x.shape[td]) - int(y.shape[td])
        if c_here <= 0 or (crop is not None and c_here != crop):
            return None
        if not torch.equal(x.narrow(td, 0, int(y.shape[td])), y):
            return None
        crop = c_here
    return crop


# ----------------------------------------------------------------------------- convert


def convert_causal(
    model: nn.Module,
    example: Tensor,
    *,
    axis: int = -1,
    input_axis: int | None = None,
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> tuple[nn.Module, SurgeryReport]:
    """A copy of ``model`` whose causal (or any) time padding is written into padkit convs.

    Recognises the padding forms listed in :mod:`padkit.streaming.convert` (conv subclasses
    that pad themselves, pad modules feeding convs, chomps after convs, old-style weight
    norm), rewrites them with the same weights and checks that the copy computes the
    original's outputs. The copy then streams with :class:`~padkit.streaming.StreamingModule`
    (causal pads) or ``StreamingModule(..., lookahead=...)`` (pads on both sides).

    Args:
        model: the model; not modified.
        example: one input for ``model(example)``, ``(N, C, ..., T, ...)``; the probes are
            random tensors of its shape and of its shape with 5 more time steps.
        axis: the time axis of the convs' inputs, counted in their dims (``-1`` for
            ``(N, C, T)``); pads on other axes are merged as they are.
        input_axis: the time axis of ``example`` (default ``axis``; ``1`` for a model
            taking ``(N, T, D)``).
        rtol, atol: the tolerance of the final check (every difference within
            ``atol + rtol * max|original output|``) and of the pad solving.

    Returns:
        ``(converted_copy, report)``.

    Raises:
        padkit.surgery.SurgeryError: the converted copy does not reproduce the original.

    Example:
        >>> class Chomp(torch.nn.Module):
        ...     def forward(self, x):
        ...         return x[:, :, :-2]
        >>> net = torch.nn.Sequential(torch.nn.Conv1d(1, 1, 3, padding=2), Chomp())
        >>> new, report = convert_causal(net, torch.zeros(1, 1, 8))
        >>> new[0].resolved_padding(), type(new[1]).__name__
        (((2, 0),), 'Identity')
    """
    fname = "convert_causal"
    if not isinstance(model, nn.Module):
        raise TypeError(f"{fname}(): model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(example, Tensor) or example.dim() < 3:
        raise PaddingError(
            f"{fname}(): example must be a batched input tensor (N, C, ..., T, ...), got "
            f"{tuple(example.shape) if isinstance(example, Tensor) else type(example).__name__}"
        )
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise TypeError(f"{fname}(): axis must be an int, got {axis!r}")
    report = SurgeryReport("convert_causal")
    # old-style weight norm keeps the computed weight as a plain (non-leaf) attribute, which
    # deepcopy refuses: copy it detached (the hook recomputes it anyway)
    memo: dict[int, Any] = {}
    for m in model.modules():
        for _, hook in _old_weight_norm_hooks(m):
            w = m.__dict__.get(hook.name)
            if isinstance(w, Tensor):
                memo[id(w)] = w.detach().clone()
    net = copy.deepcopy(model, memo)
    paths: dict[int, list[str]] = {}
    for path, m in net.named_modules(remove_duplicate=False):
        paths.setdefault(id(m), []).append(path)

    def name(m: nn.Module) -> str:
        return paths.get(id(m), ["?"])[0] or "<model>"

    def put(old: nn.Module, new: nn.Module) -> None:
        for p in paths.get(id(old), []):
            if p == "":
                raise SurgeryError(f"{fname}(): cannot replace the root module itself")
            net.set_submodule(p, new, strict=True)

    # old-style weight norm first: the probes then see the parametrized weights
    for m in list(net.modules()):
        if isinstance(m, _TORCH_CONVS) and _modernise_weight_norm(m):
            report.changes.append(
                Change(
                    name(m),
                    _brief(m) + " with a weight_norm hook",
                    _brief(m) + " with the weight_norm parametrization",
                    ("weight_norm",),
                    detail="same g and v",
                )
            )
    gen = torch.Generator(device="cpu").manual_seed(0)
    in_axis = axis if input_axis is None else input_axis
    dim_t = in_axis if in_axis >= 0 else example.dim() + in_axis
    if not 1 <= dim_t < example.dim():
        raise PaddingError(
            f"{fname}(): input_axis={in_axis} is not a time axis of the example of shape "
            f"{tuple(example.shape)}"
        )
    shapes = [list(example.shape), list(example.shape)]
    shapes[1][dim_t] += 5
    probes = [
        torch.randn(sh, generator=gen, dtype=torch.float64).to(example.dtype).to(example.device)
        for sh in shapes
    ]
    with _eval(model), torch.no_grad():
        want = [model(p) for p in probes]
    with _eval(net):
        runs = [_probe(net, p) for p in probes]
    traces = [r[1] for r in runs]
    inline_pads: set[int] = set().union(*(r[2] for r in runs))

    by_module: dict[int, list[_Call]] = {}
    producer: dict[int, nn.Module] = {}
    readers: dict[int, list[nn.Module]] = {}  # by id of a produced tensor
    for calls in traces:
        for c in calls:
            by_module.setdefault(id(c.module), []).append(c)
            for t in _tensors(c.out):
                producer.setdefault(id(t), c.module)  # inner modules' hooks fire first
        for c in calls:
            if isinstance(c.inp, Tensor) and id(c.inp) in producer:
                src = producer[id(c.inp)]
                if src is not c.module and not _contains(c.module, src):
                    readers.setdefault(id(c.inp), []).append(c.module)
    consumers: dict[int, list[nn.Module]] = {}
    for tid, mods in readers.items():
        # a container and the layer inside it that reads the tensor first: keep the layer
        inner = [m for m in mods if not any(o is not m and _contains(m, o) for o in mods)]
        src = producer[tid]
        known = consumers.setdefault(id(src), [])
        known.extend(m for m in inner if all(m is not k for k in known))
    tol = max(atol, 1e-6)
    done: set[int] = set()

    def time_index(nd: int) -> int:
        ti = axis - 2 if axis >= 0 else nd + axis
        return ti if 0 <= ti < nd else -1

    # (w) wrappers whose forward pads before, or crops after, their only conv child (codecs)
    for m in list(net.modules()):
        kids = list(m.children())
        if isinstance(m, _TORCH_CONVS + _TORCH_CONVTS) or len(kids) != 1:
            continue
        nd_w = len(getattr(kids[0], "kernel_size", ()))
        found = find_wrapper(
            m, by_module.get(id(m), []), by_module.get(id(kids[0]), []), time_index(nd_w)
        )
        if found is None:
            continue
        if isinstance(found, str):
            if found:
                report.skipped.append(Skip(name(m), found))
            done.add(id(m))  # its pad code is not a pad the later passes could move either
            continue
        old_child = kids[0]
        _transfer(old_child, found.new)
        m._modules[found.child] = found.new
        m.__class__ = unpadded_class(type(m))
        m.__dict__["_padkit_child"] = found.child
        done.update((id(m), id(old_child)))
        report.changes.append(
            Change(name(m), found.before, _brief(found.new), ("padding",), detail=found.detail)
        )

    # (a) conv subclasses that pad themselves
    for m in list(net.modules()):
        if not isinstance(m, _TORCH_CONVS) or _is_plain_forward(m):
            continue
        nd = _nd(m)
        ti = time_index(nd)
        calls = by_module.get(id(m), [])
        if ti < 0 or len(calls) < 2:
            report.skipped.append(Skip(name(m), "not called once per probe on its time axis"))
            continue
        pads = _solve_self_padding(m, nd, ti, [(c.inp, c.out) for c in calls], tol)
        if pads is None:
            report.skipped.append(
                Skip(name(m), "its forward is not the conv on a zero-padded input")
            )
            continue
        pairs = _native_pairs(m, nd)
        pairs[ti] = (pairs[ti][0] + pads[0], pairs[ti][1] + pads[1])
        before = f"{type(m).__name__} (pads {pads} in its forward)"
        new = _build(m, nd, pairs, _CONVERTED[nd])
        put(m, new)
        done.add(id(m))
        report.changes.append(
            Change(
                name(m),
                before,
                _brief(new),
                ("padding",),
                detail="the pads its forward applied, solved from its outputs",
            )
        )

    # (b) pad modules feeding convs
    new_pairs: dict[int, Pairs] = {}
    convs: dict[int, nn.Module] = {}
    removed: list[tuple[nn.Module, str]] = []
    for m in list(net.modules()):
        outs = consumers.get(id(m), [])
        if id(m) in done or isinstance(m, _TORCH_CONVS) or not outs:
            continue
        if not all(isinstance(cv, _TORCH_CONVS) and _is_plain_forward(cv) for cv in outs):
            continue
        nd = _nd(outs[0])
        ti = time_index(nd)
        if ti < 0 or any(_nd(cv) != nd for cv in outs):
            continue
        pp = _pad_module_pads(m, by_module.get(id(m), []), ti, nd, tol)
        if pp is None:
            continue
        why = ""
        for cv in outs:
            try:
                base = new_pairs.get(id(cv)) or _native_pairs(cv, nd)
            except SurgeryError as err:
                why = f"it feeds {name(cv)}, which has {err}"
                break
            if getattr(cv, "padding_mode", "zeros") != "zeros" and any(p != (0, 0) for p in base):
                why = f"it feeds {name(cv)}, which pads in mode {cv.padding_mode!r}"
                break
        if why:
            report.skipped.append(Skip(name(m), why))
            continue
        for cv in outs:
            base = new_pairs.get(id(cv)) or _native_pairs(cv, nd)
            new_pairs[id(cv)] = [(a + x, b + y) for (a, b), (x, y) in zip(base, pp)]
            convs[id(cv)] = cv
        targets = ", ".join(sorted({name(cv) for cv in outs}))
        removed.append((m, f"its zero pads {tuple(pp)} moved into {targets}"))

    # (cv) chomps: a conv whose only reader crops the end of the time axis
    for cv in list(net.modules()):
        if not isinstance(cv, _TORCH_CONVS) or not _is_plain_forward(cv):
            continue
        outs = consumers.get(id(cv), [])
        if len(outs) != 1:
            continue
        nd = _nd(cv)
        ti = time_index(nd)
        chomp = outs[0]
        crop = _end_crop(chomp, by_module.get(id(chomp), []), ti) if ti >= 0 else None
        if crop is None:
            continue
        try:
            base = list(new_pairs.get(id(cv)) or _native_pairs(cv, nd))
        except SurgeryError:
            continue
        s = int(cv.stride[ti])
        lo, hi = base[ti]
        if hi - crop * s < 0:
            report.skipped.append(
                Skip(name(chomp), f"it crops {crop} outputs, more than the right pad {hi} gives")
            )
            continue
        base[ti] = (lo, hi - crop * s)
        new_pairs[id(cv)] = base
        convs[id(cv)] = cv
        removed.append((chomp, f"its end crop of {crop} moved into {name(cv)}'s right pad"))

    for key, cv in convs.items():
        nd = _nd(cv)
        cls = _CONVERTED[nd] if type(cv).forward is _KeywordTolerant.forward else _PLAIN_PADKIT[nd]
        before = _brief(cv)
        new = _build(cv, nd, new_pairs[key], cls)
        put(cv, new)
        report.changes.append(Change(name(cv), before, _brief(new), ("padding",)))
    for m, why in removed:
        before = type(m).__name__
        put(m, nn.Identity())
        report.changes.append(Change(name(m), before, "Identity", ("removed",), detail=why))

    # (d) F.pad written in a module's forward, feeding convs: trace that module, drop the pad
    for m in list(net.modules()):
        if id(m) not in inline_pads or isinstance(m, _TORCH_CONVS) or id(m) in done:
            continue
        traced = _drop_inline_pads(m, time_index)
        if isinstance(traced, str):
            report.skipped.append(Skip(name(m), traced))
            continue
        gm, moved = traced
        if m is net:
            net = gm
        else:
            put(m, gm)
        for target, before, after in moved:
            path = f"{name(m)}.{target}" if m is not net and name(m) != "<model>" else target
            report.changes.append(
                Change(
                    path,
                    before,
                    after,
                    ("padding",),
                    detail=f"F.pad in {type(m).__name__}.forward moved into the conv "
                    "(the module is now its torch.fx trace)",
                )
            )

    for i, (probe, ref) in enumerate(zip(probes, want)):
        try:
            with _eval(net), torch.no_grad():
                got = net(probe)
            why = "" if _close(got, ref, rtol, atol) else "different outputs"
        except RuntimeError as err:
            why = f"it fails: {str(err).splitlines()[0]}"
        if why:
            raise SurgeryError(
                f"{fname}(): the converted model does not reproduce the original on probe {i} "
                f"(input shape {tuple(probe.shape)}; {why}); changes made: "
                f"{[c.path for c in report.changes]}. A pad or crop output is probably used "
                "by more than the conv it was moved into"
            )
    if not report.changes:
        report.notes.append("nothing to convert: no self-padding conv, pad module or chomp")
    return net, report


def _drop_inline_pads(
    module: nn.Module, time_index: Any
) -> tuple[nn.Module, list[tuple[str, str, str]]] | str:
    """``module`` traced with torch.fx, its ``F.pad`` calls that feed only convs removed and
    their zero pads moved into those convs; or why not."""
    import torch.fx as fx

    class _Tracer(fx.Tracer):
        def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
            return isinstance(m, _TORCH_CONVS) or super().is_leaf_module(m, qualname)

    try:
        graph = _Tracer().trace(module)
    except Exception as err:  # tracing fails on data-dependent control flow and the like
        return f"F.pad in its forward, but torch.fx cannot trace it ({type(err).__name__})"
    gm = fx.GraphModule(module, graph, type(module).__name__)
    moved: list[tuple[str, str, str]] = []
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not F.pad:
            continue
        pads = node.args[1] if len(node.args) > 1 else node.kwargs.get("pad")
        mode = node.args[2] if len(node.args) > 2 else node.kwargs.get("mode", "constant")
        value = node.args[3] if len(node.args) > 3 else node.kwargs.get("value")
        users = list(node.users)
        if (
            mode != "constant"
            or value not in (None, 0, 0.0)
            or not isinstance(pads, (list, tuple))
            or not all(isinstance(v, int) for v in pads)
            or not users
        ):
            continue
        convs = [gm.get_submodule(str(u.target)) if u.op == "call_module" else None for u in users]
        if not all(
            isinstance(c, _TORCH_CONVS) and _is_plain_forward(c) and len(pads) <= 2 * _nd(c)
            for c in convs
        ):
            continue
        for u, c in zip(users, convs):
            assert c is not None
            nd = _nd(c)
            if time_index(nd) < 0:
                return "F.pad feeds a conv whose time axis is not the given one"
            pairs = _native_pairs(c, nd)
            if c.padding_mode != "zeros" and any(p != (0, 0) for p in pairs):
                return f"F.pad feeds {u.target}, which pads in mode {c.padding_mode!r}"
            for j in range(len(pads) // 2):
                a, b = pairs[nd - 1 - j]
                pairs[nd - 1 - j] = (a + pads[2 * j], b + pads[2 * j + 1])
            cls = _CONVERTED[nd] if type(c).forward is _KeywordTolerant.forward else None
            new = _build(c, nd, pairs, cls or _PLAIN_PADKIT[nd])
            moved.append((str(u.target), _brief(c), _brief(new)))
            gm.set_submodule(str(u.target), new)
        node.replace_all_uses_with(node.args[0])
        gm.graph.erase_node(node)
    if not moved:
        return (
            "F.pad in its forward either feeds more than convs, or pads by amounts that are not "
            "ints (computed at run time) or in a mode other than constant zeros; such pads are "
            "moved only when the module's only child is the conv it feeds"
        )
    gm.recompile()
    gm.train(module.training)
    return gm, moved


def _contains(parent: nn.Module, child: nn.Module) -> bool:
    return any(m is child for m in parent.modules())
