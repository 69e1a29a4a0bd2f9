"""convert_causal: rewrite third-party causal conv models into padkit layers that stream.

Causal padding is written many ways in the wild, and none of them streams as written (a
pad in ``forward`` pads every chunk, a chomp crops every chunk). :func:`convert_causal`
records the model (:func:`padkit.recognise.probe`: fresh copies, at two lengths the model
accepts) and rewrites what the record shows:

* **codec wrappers** whose only child is a conv and whose forward pads before it or crops
  after it (EnCodec, Mimi): the child becomes a padkit layer with those pads or crops and the
  wrapper's class is swapped for one that only calls it (``_wrappers.py``);
* **a conv subclass that pads in its own forward** (pytorch-tcn's ``TemporalConv1d``,
  WaveNet's ``CausalConv1d(nn.Conv1d)``): the pads are solved from what the module returns
  (where the probes fit several right pads, a strided conv's shorter than its stride, the
  module runs at ``stride`` more lengths, which leave one) and the module becomes a
  :class:`ConvertedConv1d` (2d, 3d) with those pads;
* **a transposed conv subclass that crops its own output** (``y[..., :-(k - s)]`` after
  torch's forward): the crops are solved the same way and it becomes padkit's transposed
  conv with them;
* **pads and crops written in code at any depth above a conv**: ``F.pad`` in any mode (so
  pad modules and their subclasses), ``torch.cat`` of the input with zeros, computed from
  the input's size or not (a right pad completing the last stride window becomes
  ``stride - 1``), and slices of a conv's or transposed conv's output (chomps, ``unpad1d``)
  by any ancestor. The pads move into every conv that reads the padded tensor, the crops
  into the conv's pads (``(p, p)`` and an end crop of ``c`` outputs at stride ``s`` become
  ``(p, p - c*s)``) or the padkit transposed conv's crop; the call in code becomes the
  identity: the module that made it is replaced by ``nn.Identity`` where that call was all
  it computed, else by its rewired copy (:func:`padkit.surgery._probe.rewired`), an
  instance of its class whose own code runs with that call returning its input;
* **old-style weight norm** (``torch.nn.utils.weight_norm``, a forward pre-hook) on convs
  and transposed convs becomes the ``torch.nn.utils.parametrizations.weight_norm``
  parametrization with the same ``g`` and ``v``; parametrizations move to the new layers as
  they are, so the converted model still trains.

A pad or crop that cannot move (its output is read by more than the convs, a constant
other than zero, a left pad that changes with the length, a crop larger than the pads) is
listed in the report's skipped entries with the reason. The result is checked: the
converted model must give the original's outputs on both probes (else
:class:`padkit.surgery.SurgeryError`). The model is copied; the report lists every change.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils import parametrize

from .. import nn as pnn
from ..recognise import (
    ModuleCall,
    ProbeError,
    Record,
    layer_kind,
    model_copy,
    padding_pairs,
    probe,
)
from ..spec import PaddingError
from ..surgery._common import Change, Skip, SurgeryError, SurgeryReport
from ..surgery._probe import Dispatch, rewired
from ._wrappers import find_wrapper, right_pad_rule, unpadded_class

__all__ = ["ConvertedConv1d", "ConvertedConv2d", "ConvertedConv3d", "convert_causal"]

_TORCH_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
_TORCH_CONVTS = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
_BASE_FORWARD: dict[int, Any] = {1: nn.Conv1d.forward, 2: nn.Conv2d.forward, 3: nn.Conv3d.forward}
_BASE_T_FORWARD: dict[int, Any] = {
    1: nn.ConvTranspose1d.forward,
    2: nn.ConvTranspose2d.forward,
    3: nn.ConvTranspose3d.forward,
}
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
    try:
        return padding_pairs(conv, nd)
    except PaddingError as err:
        raise SurgeryError("pads that depend on the input size") from err


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


def _modernise_spectral_norm(m: nn.Module) -> bool:
    """Old-style spectral norm (a pre-hook computing ``weight`` from ``weight_orig`` and the
    stored ``weight_u`` / ``weight_v``) -> the parametrization, with the same original
    weight and vectors: in eval mode both divide by ``u . (W v)`` with no iteration."""
    from torch.nn.utils.spectral_norm import SpectralNorm

    done = False
    for key, hook in list(m._forward_pre_hooks.items()):
        if not isinstance(hook, SpectralNorm):
            continue
        name = hook.name
        w = m._parameters[name + "_orig"]
        u, v = m._buffers[name + "_u"], m._buffers[name + "_v"]
        if w is None or u is None or v is None:
            continue
        del m._forward_pre_hooks[key]
        for hooks in (m._state_dict_hooks, m._load_state_dict_pre_hooks):
            for k, h in list(hooks.items()):
                if (
                    getattr(h, "fn", None) is hook
                    or getattr(getattr(h, "hook", None), "fn", None) is hook
                ):
                    del hooks[k]
        del m._parameters[name + "_orig"]
        del m._buffers[name + "_u"]
        del m._buffers[name + "_v"]
        if name in m.__dict__:
            delattr(m, name)
        m.register_parameter(name, nn.Parameter(w.detach().clone()))
        torch.nn.utils.parametrizations.spectral_norm(
            m, name, n_power_iterations=hook.n_power_iterations, eps=hook.eps, dim=hook.dim
        )
        plist: Any = m.parametrizations[name]  # type: ignore[index]
        plist.original = w
        with torch.no_grad():
            plist[0]._u.copy_(u)
            plist[0]._v.copy_(v)
        done = True
    return done


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


def _build(
    old: Any, nd: int, pairs: Pairs, cls: type[nn.Module], mode: str | None = None
) -> nn.Module:
    if mode is None:
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
        mode = m.padding_mode
        tail = f" mode={mode!r}" if mode != "zeros" else ""
        return f"{name} k={tuple(m.kernel_size)} s={tuple(m.stride)} pads={pads}{tail}"
    return name


# ----------------------------------------------------------------------------- the probe


class _Call:
    __slots__ = ("inp", "module", "out")

    def __init__(self, module: str, inp: Any, out: Any) -> None:
        self.module, self.inp, self.out = module, inp, out


def _module_call(rec: Record, mc: ModuleCall) -> _Call:
    """One module call of a record as ``(module path, input, output)`` tensors."""
    inp = rec.tensor(mc.inputs[0]) if mc.inputs else None
    out = rec.tensor(mc.outputs[0]) if len(mc.outputs) == 1 else None
    return _Call(mc.path, inp, out)


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


def _other_lengths(m: Any, x0: Tensor, td: int, count: int) -> Iterator[tuple[Tensor, Any]]:
    """``m`` run on random inputs shaped like ``x0`` at the next ``count`` lengths of its
    axis ``td`` (those it refuses passed over): ``(input, output)`` pairs."""
    gen = torch.Generator(device=x0.device).manual_seed(0)
    shape = list(x0.shape)
    for extra in range(1, count + 1):
        shape[td] = int(x0.shape[td]) + extra
        x = torch.randn(shape, generator=gen, dtype=x0.dtype, device=x0.device)
        try:
            with torch.no_grad():
                y = m(x)
        except Exception:  # (a length the module refuses: the next)
            continue
        yield x, y


def _solve_self_padding(
    m: Any, nd: int, ti: int, probes: list[tuple[Tensor, Tensor]], tol: float
) -> tuple[tuple[int, int], ...] | None:
    """The pads, one ``(lo, hi)`` per spatial axis, with which ``base_conv(pad(x)) == m(x)``
    on every probe (a subclass may pad the other axes too: NeMo's ``CausalConv2D`` pads time
    and frequency). Where the probes leave several (a right time pad shorter than the stride
    adds no window at their lengths), ``m`` runs at the next ``stride`` lengths, which leave
    one: the pad it applies, or the constant one that gives as many outputs at every
    length."""
    base = _BASE_FORWARD[nd]
    natives = _native_pairs(m, nd)

    def axis_pairs(a: int, n: int, want: int) -> list[tuple[int, int]]:
        k_eff = m.dilation[a] * (m.kernel_size[a] - 1) + 1
        s = m.stride[a]
        p_lo, p_hi = natives[a]
        first = max((want - 1) * s + k_eff - n - p_lo - p_hi, 0)
        return [(lo, total - lo) for total in range(first, first + s) for lo in range(total + 1)]

    def fits(x: Any, y: Any) -> set[tuple[tuple[int, int], ...]] | None:
        if not isinstance(y, Tensor) or not isinstance(x, Tensor) or y.dim() != x.dim():
            return None
        per_axis = [axis_pairs(a, int(x.shape[2 + a]), int(y.shape[2 + a])) for a in range(nd)]
        found: set[tuple[tuple[int, int], ...]] = set()
        combos = 1
        for options in per_axis:
            combos *= len(options)
        if combos > 4096:
            return None
        for combo in itertools.product(*per_axis):
            pads: list[int] = []
            for lo, hi in reversed(combo):  # F.pad lists the last axis first
                pads += [lo, hi]
            try:
                ref = base(m, F.pad(x, pads))
            except RuntimeError:
                continue
            if ref.shape == y.shape and bool(torch.allclose(ref, y, rtol=tol, atol=tol)):
                found.add(tuple(combo))
        return found

    # several left: the next lengths of each axis in turn (time first) tell them apart (a
    # right pad no window reads at these sizes: a frequency axis's too)
    tries = [(2 + a, int(m.stride[a])) for a in [ti, *(a for a in range(nd) if a != ti)]]
    every: tuple[tuple[int, int], ...] | None = _one_fit(m, probes, tries, fits)
    return every


def _one_fit(
    m: Any, probes: list[tuple[Tensor, Tensor]], tries: list[tuple[int, int]], fits: Any
) -> Any:
    """The one answer (a ``(lo, hi)``, or one per axis) that ``fits`` every probe; while
    several do, ``m`` runs at the next ``more`` lengths of each axis ``td`` of ``tries`` in
    turn. None where none or several remain."""
    candidates: set[Any] | None = None
    for x, y in probes:
        found = fits(x, y)
        if found is None:
            return None
        candidates = found if candidates is None else candidates & found
    for td, more in tries:
        if candidates is None or len(candidates) <= 1:
            break
        for x, y in _other_lengths(m, probes[0][0], td, more):
            found = fits(x, y)
            if found is not None:
                candidates &= found
            if len(candidates) <= 1:
                break
    if candidates is None or len(candidates) != 1:
        return None
    return next(iter(candidates))


def _solve_self_crop(
    m: Any, nd: int, ti: int, probes: list[tuple[Tensor, Tensor]], tol: float
) -> tuple[int, int] | None:
    """The time crops ``(lo, hi)`` with which ``base_conv_transpose(x)`` cropped by them
    equals ``m(x)`` on every probe (a transposed conv subclass that crops its own output)."""
    base = _BASE_T_FORWARD[nd]
    td = 2 + ti

    def fits(x: Any, y: Any) -> set[tuple[int, int]] | None:
        if not isinstance(y, Tensor) or not isinstance(x, Tensor) or y.dim() != x.dim():
            return None
        try:
            full = base(m, x)
        except RuntimeError:
            return None
        n, want = int(full.shape[td]), int(y.shape[td])
        found: set[tuple[int, int]] = set()
        for lo in range(max(n - want + 1, 0)):
            part = full.narrow(td, lo, want)
            if part.shape == y.shape and bool(torch.allclose(part, y, rtol=tol, atol=tol)):
                found.add((lo, n - want - lo))
        return found

    crops: tuple[int, int] | None = _one_fit(m, probes, [(td, 1)], fits)
    return crops


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
    try:
        return _convert_causal(model, example, axis, input_axis, rtol, atol)
    except _OtherLengths as err:
        # the probes' lengths left two rules apart that differ elsewhere (an example whose
        # length is a multiple of the hop, where a pad completing the last stride window is
        # 0 and reads as a fixed pad): the probes of an example one step longer tell them
        # apart; the copy is checked the same way
        dim_t = err.dim
        longer = torch.cat([example, example.narrow(dim_t, example.shape[dim_t] - 1, 1)], dim_t)
        try:
            net, report = _convert_causal(model, longer, axis, input_axis, rtol, atol)
            # (and at the first example's lengths: both probe sets' rules must hold)
            _check_other_lengths(
                model, net, example, dim_t, rtol, atol, "convert_causal", report, (0, 1, 2, 3, 5)
            )
        except SurgeryError:
            raise SurgeryError(str(err)) from None
        report.notes.append(
            f"the probes at the example's length {example.shape[dim_t]} could not tell a "
            f"pad's rule apart ({err.lengths}); converted from probes one step longer"
        )
        return net, report


class _OtherLengths(SurgeryError):
    """The copy differs at lengths the probes did not use (``lengths``; ``dim``: the
    example's time axis)."""

    def __init__(self, message: str, dim: int, lengths: str) -> None:
        super().__init__(message)
        self.dim, self.lengths = dim, lengths


def _convert_causal(
    model: nn.Module,
    example: Tensor,
    axis: int,
    input_axis: int | None,
    rtol: float,
    atol: float,
) -> tuple[nn.Module, SurgeryReport]:
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
    net = model_copy(model)
    paths: dict[int, list[str]] = {}
    for path, m in net.named_modules(remove_duplicate=False):
        paths.setdefault(id(m), []).append(path)

    def name(m: nn.Module) -> str:
        return paths.get(id(m), ["?"])[0] or "<model>"

    def put(old: nn.Module, new: nn.Module) -> None:
        where = paths.get(id(old))
        if not where:  # made by an earlier pass of this call: find it where it is now
            where = [p for p, m in net.named_modules(remove_duplicate=False) if m is old]
        paths[id(new)] = list(where)
        for p in where:
            if p == "":
                raise SurgeryError(
                    f"{fname}(): the model itself ({type(old).__name__}) is the layer to "
                    "replace, and a copy cannot replace the object passed in: convert "
                    "nn.Sequential(model) and stream that"
                )
            net.set_submodule(p, new, strict=True)

    # old-style weight and spectral norm first: the probes then see the parametrized weights
    for m in list(net.modules()):
        if isinstance(m, _TORCH_CONVS + _TORCH_CONVTS) and _modernise_spectral_norm(m):
            report.changes.append(
                Change(
                    name(m),
                    _brief(m) + " with a spectral_norm hook",
                    _brief(m) + " with the spectral_norm parametrization",
                    ("spectral_norm",),
                    detail="same original weight and u, v",
                )
            )
        if isinstance(m, _TORCH_CONVS + _TORCH_CONVTS) and _modernise_weight_norm(m):
            report.changes.append(
                Change(
                    name(m),
                    _brief(m) + " with a weight_norm hook",
                    _brief(m) + " with the weight_norm parametrization",
                    ("weight_norm",),
                    detail="same g and v",
                )
            )
    in_axis = axis if input_axis is None else input_axis
    dim_t = in_axis if in_axis >= 0 else example.dim() + in_axis
    if not 1 <= dim_t < example.dim():
        raise PaddingError(
            f"{fname}(): input_axis={in_axis} is not a time axis of the example of shape "
            f"{tuple(example.shape)}"
        )
    try:
        recs = probe(net, example, dim=dim_t, count=2, where=fname)
    except ProbeError as err:
        raise SurgeryError(str(err)) from None
    probes = [r.inputs[0] for r in recs]
    want = [r.output for r in recs]
    by_module: dict[str, list[_Call]] = {}
    for rec in recs:
        for mc in rec.modules:
            by_module.setdefault(mc.path, []).append(_module_call(rec, mc))

    def calls_of(m: nn.Module) -> list[_Call]:
        return by_module.get(paths.get(id(m), ["?"])[0], [])

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
        nd_w = _conv_dims(kids[0])
        found = find_wrapper(m, calls_of(m), calls_of(kids[0]), time_index(nd_w))
        if found is None:
            continue
        if isinstance(found, str):
            continue  # not a plain padding wrapper: the record's pass reads its code
        old_child = kids[0]
        _transfer(old_child, found.new)
        m._modules[found.child] = found.new
        m.__class__ = unpadded_class(type(m))
        m.__dict__["_padkit_child"] = found.child
        done.update((id(m), id(old_child)))
        report.changes.append(
            Change(name(m), found.before, _brief(found.new), ("padding",), detail=found.detail)
        )

    # (a) conv subclasses that pad themselves, transposed conv subclasses that crop their
    # own output: the pads or crops solved from what the module returns
    for m in list(net.modules()):
        transposed = isinstance(m, _TORCH_CONVTS)
        if id(m) in done or not (
            (isinstance(m, _TORCH_CONVS) and layer_kind(m, plain=True) is None)
            or (
                transposed
                and not hasattr(m, "pad_spec")
                and type(m).forward not in _BASE_T_FORWARD.values()
            )
        ):
            continue
        nd = _conv_dims(m)
        ti = time_index(nd)
        calls = calls_of(m)
        if ti < 0 or len(calls) < 2:
            report.skipped.append(Skip(name(m), "not called once per probe on its time axis"))
            continue
        pairs = _native_pairs(m, nd)
        io = [(c.inp, c.out) for c in calls]
        every: tuple[tuple[int, int], ...] | None = None
        if not transposed:
            every = _solve_self_padding(m, nd, ti, io, tol)
            solved = None if every is None else every[ti]
            what = "pads"
        else:
            solved = (
                None
                if tuple(getattr(m, "output_padding", ()))[ti : ti + 1] not in ((), (0,))
                else _solve_self_crop(m, nd, ti, io, tol)
            )
            what = "crops"
        if solved is None:
            why = (
                "the conv on a zero-padded input"
                if not transposed
                else "the transposed conv and a crop of its output"
            )
            report.skipped.append(Skip(name(m), f"its forward is not {why}"))
            continue
        if every is not None:  # (a pad of the other axes merges as it is)
            pairs = [(a + c, b + d) for (a, b), (c, d) in zip(pairs, every)]
        else:
            pairs[ti] = (pairs[ti][0] + solved[0], pairs[ti][1] + solved[1])
        new = (
            _build(m, nd, pairs, _CONVERTED[nd])
            if not transposed
            else _build_transposed(m, nd, pairs)
        )
        put(m, new)
        done.add(id(m))
        report.changes.append(
            Change(
                name(m),
                f"{type(m).__name__} ({what} "
                f"{every if every is not None and nd > 1 else solved} in its forward)",
                _brief(new) if not transposed else f"{type(new).__name__} pads={tuple(pairs)}",
                ("padding",),
                detail=f"the {what} its forward applied, solved from its outputs",
            )
        )

    # (c) pads and crops in code at any depth above a conv: read from the record
    net = _move_code_pads(net, recs, report, done, paths, time_index, put)

    for i, (probe_x, ref) in enumerate(zip(probes, want)):
        why = _differs(net, probe_x, ref, rtol, atol)
        if why:
            raise SurgeryError(
                f"{fname}(): the converted model does not reproduce the original on probe {i} "
                f"(input shape {tuple(probe_x.shape)}; {why}); changes made: "
                f"{[c.path for c in report.changes]}. A pad or crop output is probably used "
                "by more than the conv it was moved into"
            )
    if report.changes:
        _check_other_lengths(model, net, example, dim_t, rtol, atol, fname, report)
    if not report.changes and not report.skipped:
        report.notes.append("nothing to convert: no pad or crop in code, no self-padding conv")
    return net, report


def _differs(net: nn.Module, x: Tensor, ref: Any, rtol: float, atol: float) -> str:
    """Why the converted ``net`` does not give ``ref`` on ``x`` ("" where it does). Run on
    a fresh copy, as the original was: a module that keeps state across calls (a cache
    buffer it writes) starts from the same state."""
    try:
        fresh = model_copy(net)
        with _eval(fresh), torch.no_grad():
            got = fresh(x)
        return "" if _close(got, ref, rtol, atol) else "different outputs"
    except Exception as err:
        return f"it fails: {type(err).__name__}: {(str(err).splitlines() or [''])[0]}"


def _check_other_lengths(
    model: nn.Module,
    net: nn.Module,
    example: Tensor,
    dim: int,
    rtol: float,
    atol: float,
    fname: str,
    report: SurgeryReport,
    extras: tuple[int, ...] = (1, 2, 3),
) -> None:
    """The copy against the original at lengths the probes did not use (the example's plus
    ``extras`` time steps, which the model may refuse: those are skipped): a pad whose amount
    follows the length by a rule the two probes could not tell apart from another would
    differ there. Raises naming the lengths where it differs."""
    gen = torch.Generator().manual_seed(5)
    bad: list[str] = []
    for extra in extras:
        shape = list(example.shape)
        shape[dim] += extra
        x = torch.randn(shape, generator=gen, dtype=torch.float64)
        x = x.to(dtype=example.dtype if example.is_floating_point() else torch.float32)
        x = x.to(example.device)
        try:
            ref_model = model_copy(model)
            with _eval(ref_model), torch.no_grad():
                ref = ref_model(x)
        except Exception:  # the original refuses this length: nothing to compare
            continue
        why = _differs(net, x, ref, rtol, atol)
        if why:
            bad.append(f"{shape[dim]} ({why})")
    if bad:
        raise _OtherLengths(
            f"{fname}(): the converted model reproduces the original on the probes but not "
            f"at other lengths: {', '.join(bad)}; a pad amount that follows the input length "
            f"was moved into a layer with a rule the probes could not tell apart. Changes "
            f"made: {[c.path for c in report.changes]}",
            dim,
            ", ".join(bad),
        )


def _contains(parent: nn.Module, child: nn.Module) -> bool:
    return any(m is child for m in parent.modules())


# ----------------------------------------------------------------------------- code pads

_Key = tuple[str, str, int]  # (owner path, call name, ordinal in the owner's own code)
_TRANSPOSED: dict[int, type[nn.Module]] = {
    1: pnn.ConvTranspose1d,
    2: pnn.ConvTranspose2d,
    3: pnn.ConvTranspose3d,
}


def _build_transposed(old: Any, nd: int, pairs: Any) -> nn.Module:
    """padkit's transposed conv of ``old``'s weights whose pads (crops) are ``pairs``."""
    new = _TRANSPOSED[nd](
        old.in_channels,
        old.out_channels,
        old.kernel_size,
        stride=old.stride,
        padding=tuple(pairs),
        output_padding=old.output_padding,
        groups=old.groups,
        bias=old.bias is not None,
        dilation=old.dilation,
        device=old.weight.device,
        dtype=old.weight.dtype,
    )
    _transfer(old, new)
    return new


class _Source:
    """An edit of :func:`padkit.surgery._probe.rewired`: the call returns the tensor it pads
    or crops (``piece`` of a ``torch.cat``), unchanged."""

    def __init__(self, piece: int | None) -> None:
        self.piece = piece

    def __call__(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        first = args[0] if args else next(iter(kwargs.values()))
        return first[self.piece] if self.piece is not None else first


class _Found:
    """What one pad or crop call (a key) does on one probe: per conv path it feeds or crops,
    ``('pad', spatial pairs, mode, source sizes)`` or ``('crop', axis, lo, hi)``."""

    def __init__(self, kind: str, piece: int | None) -> None:
        self.kind, self.piece = kind, piece
        self.zero = False  # a pad call that pads nothing
        self.convs: dict[str, tuple[Any, ...]] = {}


def _where(rec: Record, owner: int | None) -> str:
    return "<outside>" if owner is None else rec.modules[owner].path or "<model>"


def _conv_dims(module: nn.Module) -> int:
    ks: Any = getattr(module, "kernel_size", ())
    return len(ks) if isinstance(ks, tuple) else 1


def _move_code_pads(
    net: nn.Module,
    recs: list[Record],
    report: SurgeryReport,
    done: set[int],
    paths: dict[int, list[str]],
    time_index: Any,
    put: Any,
) -> nn.Module:
    """Pads and crops written in code at any depth above a conv (``F.pad`` in any mode,
    pad modules, ``torch.cat`` with constants, slices of a conv's output), moved into the
    convs they feed or crop; the calls in code become the identity (the module that made
    them is its rewired copy, or ``nn.Identity`` when the call was all it computed)."""
    mods = dict(net.named_modules(remove_duplicate=False))
    bad: dict[_Key, str] = {}
    per_probe: list[dict[_Key, list[_Found]]] = []
    whole: dict[_Key, bool] = {}  # the owner computes this call and nothing else

    def plain(path: str) -> nn.Module | None:
        m = mods.get(path)
        if m is None or id(m) in done:
            return None
        if isinstance(m, _TORCH_CONVS) and layer_kind(m, plain=True) is not None:
            return m
        if isinstance(m, _TORCH_CONVTS) and not hasattr(m, "pad_spec"):
            base = type(m).forward
            if base in (nn.ConvTranspose1d.forward, nn.ConvTranspose2d.forward):
                return m
            if base is nn.ConvTranspose3d.forward:
                return m
        return None

    for rec in recs:
        found: dict[_Key, list[_Found]] = {}
        per_probe.append(found)
        convs = [mc for mc in rec.modules if mc.op is not None and mc.op.kind != "max"]
        convs = [
            mc for mc in convs if mc.op is not None and mc.op.kind in ("conv", "conv_transpose")
        ]
        in_conv: list[bool] = []
        for mc in rec.modules:  # parents come before their children
            in_conv.append(mc.op is not None or (mc.parent is not None and in_conv[mc.parent]))

        def inside(i: int | None, in_conv: list[bool] = in_conv) -> bool:
            return i is not None and in_conv[i]

        live = rec.live()

        for call in rec.calls:
            if (call.pad is None and call.crop is None) or inside(call.owner):
                continue
            if call.owner is None:
                continue
            owner = rec.modules[call.owner]
            key = (owner.path, call.name, call.ordinal)
            if call.pad is not None:
                pad = call.pad
                t = call.makes[0]
                readers = rec.readers(t)
                feeds = [mc for mc in convs if mc.inputs and mc.inputs[0] == t]
                if not readers:
                    continue
                f = _Found("pad", pad.piece if pad.form == "cat" else None)
                found.setdefault(key, []).append(f)
                f.zero = not pad.padded_dims()
                if pad.mode == "state":
                    bad[key] = f"it concatenates the buffer {pad.state!r} (a state) to its input"
                    continue
                if not feeds:
                    r0 = next((r for r in readers if r.index in live), readers[0])
                    bad[key] = (
                        f"its output is read by {r0.name} in {_where(rec, r0.owner)}, "
                        "not by a conv module"
                    )
                    continue
                other = [
                    r
                    for r in readers
                    if r.index in live and not any(rec.within(r.owner, c.index) for c in feeds)
                ]
                if other:
                    r0 = other[0]
                    bad[key] = (
                        f"its output is also read by {r0.name} in {_where(rec, r0.owner)}, "
                        "not only by the convs it pads for"
                    )
                    continue
                if any(p != (0, 0) for p in pad.pairs[:2]):
                    bad[key] = "it pads the batch or channel axis"
                    continue
                if pad.mode == "constant" and pad.value != 0.0:
                    bad[key] = f"it pads with the constant {pad.value}; a conv pads with zeros"
                    continue
                mode = "zeros" if pad.mode == "constant" else pad.mode
                sizes = tuple(rec.tensor(pad.source).shape[2:])
                for c in feeds:
                    if c.op is not None and c.op.kind == "conv_transpose":
                        # a transposed conv's own pads crop its output: none reads its
                        # input padded
                        bad[key] = (
                            f"it pads the input of the transposed conv {c.cls} "
                            f"{c.path or '<model>'!r}, whose pads crop its output instead"
                        )
                        break
                    if plain(c.path) is None or c.op is None or c.op.kind != "conv":
                        bad[key] = f"it feeds {c.cls} {c.path or '<model>'!r}, not a plain conv"
                        break
                    f.convs[c.path] = ("pad", pad.pairs[2:], mode, sizes)
            else:
                crop = call.crop
                assert crop is not None
                made = [mc for mc in convs if mc.outputs and mc.outputs[0] == crop.source]
                if not made:
                    continue  # a slice of something other than a conv's output
                c = max(made, key=lambda mc: mc.index)
                f = _Found("crop", None)
                found.setdefault(key, []).append(f)
                others = [
                    r
                    for r in rec.readers(crop.source)
                    if r is not call and r.index in live and not rec.within(r.owner, c.index)
                ]
                if others:
                    r0 = others[0]
                    bad[key] = (
                        f"the output of {c.path!r} it crops is also read by {r0.name} in "
                        f"{_where(rec, r0.owner)}"
                    )
                elif crop.dim < 2:
                    bad[key] = "it crops the batch or channel axis"
                elif plain(c.path) is None:
                    bad[key] = f"it crops {c.cls} {c.path or '<model>'!r}, not a plain conv"
                else:
                    f.convs[c.path] = ("crop", crop.dim - 2, crop.lo, crop.hi)
            fact = call.pad if call.pad is not None else call.crop
            src = fact.source if fact is not None else -1
            outs = owner.outputs
            same_out = len(outs) == 1 and (
                outs[0] == call.makes[0]
                or (
                    rec.tensor(outs[0]).shape == rec.tensor(call.makes[0]).shape
                    and bool(torch.equal(rec.tensor(outs[0]), rec.tensor(call.makes[0])))
                )
            )
            whole[key] = whole.get(key, True) and owner.inputs[:1] == (src,) and same_out

    keys = set().union(*per_probe)
    # pad calls that pad nothing on every probe: the identity wherever they are; they move
    # nothing, and count only where they are all a module adds around its child
    nothing = {
        k for k in keys if all(k in found and all(f.zero for f in found[k]) for found in per_probe)
    }
    keys -= nothing
    for key in keys:
        held = mods.get(key[0])
        if held is not None and id(held) in done:
            bad[key] = ""  # converted with its wrapper already
        if key in bad:
            continue
        shapes = set()
        for found in per_probe:
            fs = found.get(key)
            if fs is None:
                bad[key] = "it runs on some probe lengths only"
                break
            for f in fs:
                shapes.add((f.kind, f.piece, tuple(sorted(f.convs))))
        else:
            if len(shapes) != 1:
                bad[key] = "it pads or crops for different convs on different calls"
        if held is None:
            bad[key] = "it is made by a module outside the model"

    # resolve each conv's pads from the keys that feed or crop it, dropping bad keys
    plans: dict[str, tuple[tuple[int, int], ...]] = {}
    modes: dict[str, str] = {}
    for _ in range(len(keys) + 1):
        good = [k for k in keys if k not in bad]
        into: dict[str, list[_Key]] = {}
        for k in good:
            for cpath in next(f for f in per_probe[0][k]).convs:
                into.setdefault(cpath, []).append(k)
        plans.clear()
        modes.clear()
        failed = False
        for cpath, ks in into.items():
            conv: Any = mods[cpath]
            why = _resolve(conv, cpath, ks, per_probe, plans, modes, time_index)
            if why:
                for k in ks:
                    bad[k] = why
                failed = True
        if not failed:
            break

    for key in sorted(keys):
        if bad.get(key):
            report.skipped.append(
                Skip(key[0] or "<model>", f"{key[1]} call {key[2]} in its forward: {bad[key]}")
            )
    good = sorted(k for k in keys if k not in bad)
    if not good and not nothing:
        return net
    for cpath, pairs in plans.items():
        old: Any = mods[cpath]
        nd = _conv_dims(old)
        before = _brief(old)
        if isinstance(old, _TORCH_CONVTS):
            new: nn.Module = _build_transposed(old, nd, pairs)
        else:
            cls = _CONVERTED[nd] if type(old).forward is _KeywordTolerant.forward else None
            new = _build(old, nd, list(pairs), cls or _PLAIN_PADKIT[nd], modes.get(cpath))
        put(old, new)
        done.add(id(old))
        ks = [k for k in good if cpath in per_probe[0][k][0].convs]
        report.changes.append(
            Change(
                cpath,
                before,
                _brief(new)
                if not isinstance(new, _TORCH_CONVTS)
                else f"{type(new).__name__} pads={tuple(pairs)}",
                ("padding",),
                detail="the "
                + ", ".join(f"{k[1]} call {k[2]} in {k[0] or '<model>'}.forward" for k in ks)
                + " (code) moved into the layer",
            )
        )
    tables: dict[str, dict[tuple[str, int], Any]] = {}
    for key in good:
        piece = per_probe[0][key][0].piece
        tables.setdefault(key[0], {})[(key[1], key[2])] = _Source(piece)
    idle: dict[str, set[tuple[str, int]]] = {}
    for key in nothing:
        idle.setdefault(key[0], set()).add((key[1], key[2]))
    # modules whose own code computes only what their output does not read around one
    # child call (state objects made and dropped, checks of the length): they are that
    # child's call, and the code that would run on every chunk goes
    rec0 = recs[0]
    live0 = rec0.live()
    for mc in rec0.modules:
        if mc.path and mc.op is None and mc.path not in idle and mc.path not in tables:
            own = list(rec0.own_calls(mc.index))
            if own and not any(c.index in live0 for c in own):
                idle[mc.path] = set()
    for opath in sorted(set(tables) | set(idle)):
        table = tables.get(opath, {})
        holder = mods.get(opath)
        if holder is None or id(holder) in done:
            continue
        moved = set(table) | idle.get(opath, set())
        child = _passes_to_child(recs, opath, moved, holder) if opath else None
        if child is not None:
            put(holder, _calling_child(holder, child))
            calls = ", ".join(f"{n} call {i}" for n, i in sorted(moved))
            cname = type(holder).__name__
            report.changes.append(
                Change(
                    opath,
                    cname,
                    f"{cname} that calls its {child!r} only",
                    ("code",),
                    detail=(
                        f"its {calls} moved into the conv(s) it fed or cropped (or padded "
                        "nothing); the rest of its forward computed nothing its output reads"
                    )
                    if moved
                    else f"its forward computed nothing its output reads besides calling "
                    f"{child!r} on its input",
                )
            )
            continue
        if not table:
            continue
        names = ", ".join(f"{n} call {i}" for n, i in sorted(table))
        simple = (
            all(whole.get((opath, n, i), False) for n, i in table)
            and not list(holder.children())
            and not list(holder.parameters(recurse=False))
            and not list(holder.buffers(recurse=False))
            and opath != ""
        )
        if simple:
            put(holder, nn.Identity())
            report.changes.append(
                Change(
                    opath,
                    type(holder).__name__,
                    "Identity",
                    ("removed",),
                    detail=f"its {names} moved into the conv(s) it fed or cropped",
                )
            )
            continue
        new_holder = rewired(holder, Dispatch(table), f"{names} moved into padkit convs")
        if opath == "":
            net = new_holder
        else:
            put(holder, new_holder)
        report.changes.append(
            Change(
                opath or "<model>",
                type(holder).__name__,
                f"{type(holder).__name__} without its {names}",
                ("code",),
                detail=f"its {names} moved into the conv(s) it fed or cropped",
            )
        )
    return net


def _calling_child(module: nn.Module, child: str) -> nn.Module:
    """A shallow copy of ``module``, an instance of its class, whose forward calls ``child``."""
    new = copy.copy(module)
    new.__class__ = unpadded_class(getattr(type(module), "_padkit_base", type(module)))
    new.__dict__["_padkit_child"] = child
    return new


def _passes_to_child(
    recs: list[Record], opath: str, moved: set[tuple[str, int]], owner: nn.Module
) -> str | None:
    """The name of ``owner``'s child when, on every probe, ``owner``'s output is that child's
    output run on ``owner``'s input, through the moved pads before it and crops after it
    only (by tensor identity), and ``owner`` writes no parameter or buffer: with those calls
    moved into the conv, ``owner`` computes ``child(input)``. None otherwise."""
    names = {f"{opath}.{n}": n for n, _ in owner.named_children()}
    found: set[str] = set()
    for rec in recs:
        calls = rec.module_calls(opath)
        if not calls:
            return None
        for oc in calls:
            kids = [mc for mc in rec.modules if mc.parent == oc.index]
            if len(kids) != 1 or kids[0].path not in names:
                return None
            kid = kids[0]
            if len(oc.inputs) < 1 or len(oc.outputs) != 1 or len(kid.outputs) != 1:
                return None
            own = [c for c in rec.own_calls(oc.index)]
            if any(c.persistent for c in own):
                return None
            steps = {c.makes[0]: c for c in own if (c.name, c.ordinal) in moved and c.makes}
            used = 0
            t = oc.outputs[0]
            while t != kid.outputs[0]:  # back from the output through the moved crops
                c = steps.get(t)
                if c is None or c.crop is None:
                    return None
                t, used = c.crop.source, used + 1
            t = kid.inputs[0] if kid.inputs else -1
            while t != oc.inputs[0]:  # back from the child's input through the moved pads
                c = steps.get(t)
                if c is None or c.pad is None:
                    return None
                t, used = c.pad.source, used + 1
            if used != len(steps):
                return None
            found.add(names[kid.path])
    return found.pop() if len(found) == 1 else None


def _resolve(
    conv: Any,
    cpath: str,
    keys: list[_Key],
    per_probe: list[dict[_Key, list[_Found]]],
    plans: dict[str, tuple[tuple[int, int], ...]],
    modes: dict[str, str],
    time_index: Any,
) -> str:
    """The pads of ``conv`` with the moved pads and crops of ``keys`` (into ``plans`` and
    ``modes``), or why none."""
    nd = _conv_dims(conv)
    transposed = isinstance(conv, _TORCH_CONVTS)
    try:
        native = padding_pairs(conv, nd)
    except PaddingError as err:
        return f"it feeds {cpath!r}, whose {err}"
    mode = conv.padding_mode if any(p != (0, 0) for p in native) else None
    k = list(conv.kernel_size)
    st = list(conv.stride)
    dl = list(conv.dilation)
    pads: list[list[tuple[int, int]]] = [[] for _ in per_probe]  # per probe, added pads
    sizes: list[tuple[int, ...]] = [() for _ in per_probe]
    crops = [(0, 0)] * nd
    added = [[(0, 0)] * nd for _ in per_probe]
    for key in keys:
        for r, found in enumerate(per_probe):
            facts = {f.convs[cpath] for f in found[key] if cpath in f.convs}
            if len(facts) != 1:
                return f"it pads or crops {cpath!r} differently on different calls"
            (fact,) = facts
            if fact[0] == "pad":
                _, pairs, pmode, src = fact
                if mode is not None and pmode != mode:
                    return f"it pads in mode {pmode!r} for {cpath!r}, which pads in {mode!r}"
                mode = pmode
                added[r] = [(a + x, b + y) for (a, b), (x, y) in zip(added[r], pairs)]
                sizes[r] = src
            else:
                _, ax, lo, hi = fact
                if r == 0:
                    crops[ax] = (crops[ax][0] + lo, crops[ax][1] + hi)
                elif fact != ("crop", ax, *crops[ax]) and crops[ax] != (lo, hi):
                    return f"its crop of {cpath!r} changes with the input length"
    del pads
    if transposed:
        if any(p != (0, 0) for a in added for p in a):
            return f"it pads the input of the transposed conv {cpath!r}"
        extra = tuple(getattr(conv, "output_padding", ())) or (0,) * nd
        if any(op and c != (0, 0) for op, c in zip(extra, crops)):
            # output_padding on another axis (a frequency axis) stays as it is
            return f"it crops {cpath!r} on an axis where it has output_padding {extra}"
        plans[cpath] = tuple((a + x, b + y) for (a, b), (x, y) in zip(native, crops))
        return ""
    out: list[tuple[int, int]] = []
    for i in range(nd):
        los = {a[i][0] for a in added}
        if len(los) != 1:
            return f"its left pad for {cpath!r} changes with the input length"
        lo = native[i][0] + los.pop()
        his = [
            (int(sizes[r][i]) if sizes[r] else 0, native[i][1] + added[r][i][1])
            for r in range(len(added))
        ]
        k_eff = dl[i] * (k[i] - 1) + 1
        s = st[i]
        if all(sizes):
            rule = right_pad_rule(his, lo, k_eff, s)
        else:  # (the lengths unknown: a pad that does not change only)
            rule = his[0][1] if len({h for _, h in his}) == 1 else None
        if rule is not None:
            hi = rule
        else:
            return (
                f"its right pad for {cpath!r} ({[h for _, h in his]} on the probes) changes "
                "with the input length in a way that is not the completion of the last "
                "stride window"
            )
        a, b = crops[i]
        if lo - a * s < 0 or hi - b * s < 0:
            return f"it crops {(a, b)} outputs of {cpath!r}, more than its pads {(lo, hi)} give"
        out.append((lo - a * s, hi - b * s))
    plans[cpath] = tuple(out)
    if mode is not None and mode != "zeros":
        modes[cpath] = mode
    elif any(p != (0, 0) for p in out):
        modes[cpath] = "zeros"
    return ""
