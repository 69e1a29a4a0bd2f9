"""surgery.lower: a copy of a model in torch's own modules only.

Tools that find layers by their exact class (FLOP counters such as ptflops, converters in
the style of TensorRT or Core ML, older quantization toolkits) do not know padkit's layers.
:func:`lower` hands them a copy in which every padkit layer is torch's pad module for the
layer's mode (``nn.ZeroPad2d``, ``nn.ConstantPad2d`` with ``-inf`` before a max pool,
``nn.ReflectionPad2d``, ...) followed by the torch layer with the symmetric part of the
pads, in an ``nn.Sequential``; a layer whose pads are symmetric becomes the torch layer
alone. Pads that depend on the input size (``"same"`` at stride > 1, ...) are resolved for
the size each layer sees in a forward of the example inputs; such a layer then refuses, at
run time, an input of another size with a :class:`~padkit.PaddingError` that names the
layer and both sizes, rather than compute other numbers.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from torch import Tensor, nn

from .. import nn as PN
from ..functional import _PAD_MODE_CANON, _torch_pad
from ..op import Op
from ..spec import PaddingError
from ._common import (
    Change,
    SurgeryError,
    SurgeryReport,
    _brief,
    _check_bool,
    _check_model,
    _paths_by_id,
    _replace,
)

__all__ = ["lower"]

Pairs = tuple[tuple[int, int], ...]

_PADKIT_LAYERS: tuple[type, ...] = tuple(getattr(PN, name) for name in PN.__all__)

_PAD_CLASS: dict[str, tuple[Any, ...]] = {
    "constant": (nn.ZeroPad1d, nn.ZeroPad2d, nn.ZeroPad3d),
    "reflect": (nn.ReflectionPad1d, nn.ReflectionPad2d, nn.ReflectionPad3d),
    "replicate": (nn.ReplicationPad1d, nn.ReplicationPad2d, nn.ReplicationPad3d),
    "circular": (nn.CircularPad1d, nn.CircularPad2d, nn.CircularPad3d),
}
_CONV: tuple[Any, ...] = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
_CONV_T: tuple[Any, ...] = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
_MAX: tuple[Any, ...] = (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d)
_AVG: tuple[Any, ...] = (nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d)
_LP: tuple[Any, ...] = (nn.LPPool1d, nn.LPPool2d, nn.LPPool3d)


class InputSizeGuard:
    """A forward pre-hook of a lowered layer whose pads were resolved for one input size:
    another size raises :class:`~padkit.PaddingError` (the pads would be other pads)."""

    def __init__(self, path: str, sizes: tuple[int, ...], why: str) -> None:
        self.path = path
        self.sizes = sizes
        self.why = why

    def __call__(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        x = args[0] if args else None
        if not isinstance(x, Tensor):
            return
        got = tuple(int(n) for n in x.shape[x.dim() - len(self.sizes) :])
        if got != self.sizes:
            raise PaddingError(
                f"padkit.surgery.lower: layer {self.path or '<root>'!r} was lowered for input "
                f"size {self.sizes} ({self.why}), got input size {got}; lower the model again "
                "with an example of this size, or run the padkit model"
            )

    def __repr__(self) -> str:
        return f"InputSizeGuard({self.path!r}, {self.sizes})"


# ----------------------------------------------------------------------------- one layer


def _pad_module(mode: str, nd: int, pairs: Pairs, value: float = 0.0) -> nn.Module:
    pad = tuple(_torch_pad(pairs))
    if mode == "constant" and value != 0.0:
        const: Any = (nn.ConstantPad1d, nn.ConstantPad2d, nn.ConstantPad3d)[nd - 1]
        return const(pad, value)  # type: ignore[no-any-return]
    return _PAD_CLASS[mode][nd - 1](pad)  # type: ignore[no-any-return]


def _split(pairs: Pairs) -> tuple[tuple[int, ...], Pairs]:
    """The symmetric part a torch layer takes, and the rest for a pad module."""
    sym = tuple(max(0, min(lo, hi)) for lo, hi in pairs)
    return sym, tuple((lo - s, hi - s) for (lo, hi), s in zip(pairs, sym))


def _nonzero(pairs: Pairs) -> bool:
    return any(v for pair in pairs for v in pair)


def _chain(pads: list[nn.Module], layer: nn.Module) -> nn.Module:
    return nn.Sequential(*pads, layer) if pads else layer


def _lower_conv(m: Any, rec: Op, pairs: Pairs) -> nn.Module:
    nd = rec.nd
    modes = rec.padding_mode if isinstance(rec.padding_mode, tuple) else (rec.padding_mode,) * nd
    canon = tuple(_PAD_MODE_CANON[str(mode).lower()] for mode in modes)
    pads: list[nn.Module] = []
    zero_pairs = list(pairs)
    if any(c != "constant" for c in canon):
        if len(set(canon)) == 1:  # one mode: one pad module, as padkit pads in one F.pad
            pads.append(_pad_module(canon[0], nd, pairs))
            zero_pairs = [(0, 0)] * nd
        else:  # axes with a non-zero mode one at a time, in axis order (padkit's order)
            for i, c in enumerate(canon):
                if c != "constant" and pairs[i] != (0, 0):
                    one = tuple(pairs[i] if j == i else (0, 0) for j in range(nd))
                    pads.append(_pad_module(c, nd, one))
                    zero_pairs[i] = (0, 0)
    sym, rest = _split(tuple(zero_pairs))
    if _nonzero(rest):
        pads.append(_pad_module("constant", nd, rest))
    conv = _CONV[nd - 1](
        m.in_channels,
        m.out_channels,
        rec.kernel,
        stride=rec.stride,
        padding=sym,
        dilation=rec.dilation,
        groups=rec.groups,
        bias=m.bias is not None,
        device="meta",
        dtype=m.weight.dtype,
    )
    conv.weight = m.weight
    conv.bias = m.bias
    return _chain(pads, conv)


def _lower_conv_t(m: Any, rec: Op, sizes: tuple[int, ...]) -> nn.Module:
    nd = rec.nd
    crops = m.resolved_crops(sizes)
    op = rec.output_padding or (0,) * nd
    # the result is the full output (n-1)*s + k_eff cropped by (lo, hi - op)
    ends = tuple((lo, hi - o) for (lo, hi), o in zip(crops, op))
    if all(hi >= 0 for _, hi in ends):
        sym, rest = _split(ends)
        torch_op: tuple[int, ...] = (0,) * nd
        crop = tuple((-lo, -hi) for lo, hi in rest)
    elif all(lo == hi for lo, hi in crops) and all(
        o < max(s, d) for o, s, d in zip(op, rec.stride, rec.dilation)
    ):
        sym, torch_op, crop = tuple(lo for lo, _ in crops), tuple(op), ((0, 0),) * nd
    else:
        raise SurgeryError(
            f"crops {crops} with output_padding {op}: the output reaches past the full "
            "transposed conv on one side and torch's ConvTranspose cannot take per-side crops"
        )
    conv = _CONV_T[nd - 1](
        m.in_channels,
        m.out_channels,
        rec.kernel,
        stride=rec.stride,
        padding=sym,
        output_padding=torch_op,
        groups=rec.groups,
        bias=m.bias is not None,
        dilation=rec.dilation,
        device="meta",
        dtype=m.weight.dtype,
    )
    conv.weight = m.weight
    conv.bias = m.bias
    if _nonzero(crop):
        return nn.Sequential(conv, _pad_module("constant", nd, crop))  # negative pads crop
    return conv  # type: ignore[no-any-return]


def _fitted(rec: Op, sizes: tuple[int, ...], pairs: Pairs, outs: tuple[int, ...]) -> Pairs:
    """The pads that make a floor-mode pool give exactly ``outs`` windows from ``lo`` on
    (the end pad trimmed or grown to the last window; padkit's ceil overhang included)."""
    k_effs = (d * (k - 1) + 1 for k, d in zip(rec.kernel, rec.dilation))
    return tuple(
        (lo, (o - 1) * s + k_eff - n - lo)
        for (lo, _), n, o, s, k_eff in zip(pairs, sizes, outs, rec.stride, k_effs)
    )


def _lower_pool(rec: Op, pairs: Pairs, sizes: tuple[int, ...], outs: tuple[int, ...]) -> nn.Module:
    nd = rec.nd
    fit = _fitted(rec, sizes, pairs, outs)
    if rec.kind == "max" and not rec.neutral_pads:
        # the pads hold padding_value: all of them in a ConstantPad, none in torch's pool
        if any(f_hi > hi for (_, f_hi), (_, hi) in zip(fit, pairs)):
            raise SurgeryError(
                f"padding_value={rec.padding_value} with ceil_mode: the ceil overhang holds "
                "no value, which one ConstantPad before torch's pool cannot express"
            )
        pool = _MAX[nd - 1](rec.kernel, rec.stride, 0, rec.dilation, False, ceil_mode=False)
        pads = [_pad_module("constant", nd, fit, rec.padding_value)] if _nonzero(fit) else []
        return _chain(pads, pool)
    if rec.kind == "max":
        sym, rest = _split(fit)
        if any(2 * p > k for p, k in zip(sym, rec.kernel)):  # torch: pad <= kernel / 2
            sym, rest = (0,) * nd, fit
        if rec.return_indices and _nonzero(rest):
            raise SurgeryError(
                "return_indices with per-side pads: the indices would refer to the padded input"
            )
        pool = _MAX[nd - 1](
            rec.kernel, rec.stride, sym, rec.dilation, rec.return_indices, ceil_mode=False
        )
        pads = [_pad_module("constant", nd, rest, -math.inf)] if _nonzero(rest) else []
        return _chain(pads, pool)
    if any(d != 1 for d in rec.dilation):
        raise SurgeryError(f"dilation {rec.dilation}: torch's {rec.kind} pools have no dilation")
    if rec.kind == "lp":
        return _chain(
            [_pad_module("constant", nd, fit)] if _nonzero(fit) else [],
            _LP[nd - 1](rec.norm_type, rec.kernel, rec.stride, ceil_mode=False),
        )
    avg = _AVG[nd - 1]
    extra: dict[str, Any] = {} if nd == 1 else {"divisor_override": rec.divisor_override}
    if rec.count_include_pad or rec.divisor_override is not None:
        # every window lies inside the pads; padkit's ceil overhang adds nothing to a sum
        real = all(hi <= p_hi for (_, hi), (_, p_hi) in zip(fit, pairs))
        if rec.count_include_pad and rec.divisor_override is None and not real:
            raise SurgeryError(
                "a ceil_mode window past the end pads: padkit does not count the overhang, "
                "a zero pad module would"
            )
        sym, rest = _split(fit)
        if any(2 * p > k for p, k in zip(sym, rec.kernel)):
            sym, rest = (0,) * nd, fit
        pool = avg(rec.kernel, rec.stride, sym, False, True, **extra)
        return _chain([_pad_module("constant", nd, rest)] if _nonzero(rest) else [], pool)
    # pads left out of the divisor: only torch's own symmetric pads do that; its ceil_mode
    # may give the last window, which then counts only its input elements, as padkit does
    lows = tuple(lo for lo, _ in pairs)
    if all(2 * lo <= k and lo >= 0 for lo, k in zip(lows, rec.kernel)):
        for ceil in (False, True):
            got = tuple(
                _torch_pool_out(n, k, s, lo, ceil)
                for n, k, s, lo in zip(sizes, rec.kernel, rec.stride, lows)
            )
            if got == outs:
                return avg(rec.kernel, rec.stride, lows, ceil, False, **extra)  # type: ignore[no-any-return]
    raise SurgeryError(
        f"pads {pairs} left out of the divisor (count_include_pad=False): torch's average "
        "pools exclude only their own symmetric pads, which give other windows here"
    )


def _torch_pool_out(n: int, k: int, s: int, p: int, ceil: bool) -> int:
    span = n + 2 * p - k
    out = (-(-span // s) if ceil else span // s) + 1
    if ceil and (out - 1) * s >= n + p:  # torch: the last window starts inside
        out -= 1
    return out


def _lower_layer(m: Any, inp: Tensor, out: Any) -> nn.Module:
    rec = Op.from_module(m)
    if rec is None:  # pragma: no cover - every padkit layer has a record
        raise SurgeryError("no checked record")
    sizes = tuple(int(n) for n in inp.shape[-rec.nd :])
    if rec.kind == "conv_transpose":
        return _lower_conv_t(m, rec, sizes)
    pairs: Pairs = m.resolved_padding(sizes)
    if rec.kind == "conv":
        return _lower_conv(m, rec, pairs)
    first = out[0] if isinstance(out, tuple) else out
    outs = tuple(int(n) for n in first.shape[-rec.nd :])
    return _lower_pool(rec, pairs, sizes, outs)


# ----------------------------------------------------------------------------- the model


def _same(want: Any, got: Any) -> bool:
    if isinstance(want, tuple):
        return isinstance(got, tuple) and all(_same(a, b) for a, b in zip(want, got))
    if not isinstance(got, Tensor) or got.shape != want.shape:
        return False
    if not want.dtype.is_floating_point:
        return bool(torch.equal(want, got))
    scale = float(want.abs().nan_to_num(0.0, 0.0, 0.0).max()) if want.numel() else 0.0
    return bool(torch.allclose(got, want, rtol=1e-5, atol=1e-6 * max(1.0, scale), equal_nan=True))


def lower(
    model: nn.Module, *example_inputs: Any, inplace: bool = False
) -> tuple[nn.Module, SurgeryReport]:
    """A copy of ``model`` in which every padkit layer is torch's pad module and torch's layer.

    Each padkit conv, transposed conv and pool becomes the torch layer with the symmetric
    part of its pads, after the pad module of its mode (``nn.ZeroPad2d``, ``nn.ConstantPad2d``
    with ``-inf`` before a max pool, ``nn.ReflectionPad2d``, ``nn.ReplicationPad2d``,
    ``nn.CircularPad2d``) where a per-side part remains, in an ``nn.Sequential`` (so the
    layer's ``state_dict`` keys gain its position: ``conv.weight`` becomes ``conv.1.weight``);
    a layer with symmetric pads becomes the torch layer alone. The model runs once on
    ``example_inputs`` (in eval mode, without gradients; training flags are restored) to
    learn the size each layer sees; every lowered layer is checked against the padkit layer
    on that input. Pads that depend on the input size are resolved for it, and the lowered
    layer refuses another size at run time (a forward pre-hook raising
    :class:`~padkit.PaddingError` that names the layer and both sizes); the report lists
    those layers in :attr:`~padkit.surgery.SurgeryReport.size_dependent`.

    Refused (:class:`~padkit.surgery.SurgeryError`) where torch's layers cannot compute the
    same numbers: average pools that leave per-side pads out of the divisor, dilated
    average and LP pools, transposed convs cropped per side past their full output, a max
    pool with ``return_indices`` and per-side pads, a size-dependent layer that the example
    did not reach or reached at two sizes, and subclasses of padkit layers.

    Example:
        >>> import padkit.nn as pnn
        >>> net = torch.nn.Sequential(pnn.Conv2d(3, 4, 3, stride=2, padding="same"))
        >>> torch_net, report = lower(net, torch.ones(1, 3, 8, 8))
        >>> torch_net
        Sequential(
          (0): Sequential(
            (0): ZeroPad2d((0, 1, 0, 1))
            (1): Conv2d(3, 4, kernel_size=(3, 3), stride=(2, 2))
          )
        )
        >>> report.size_dependent
        ['0']
    """
    fname = "padkit.surgery.lower"
    model = _check_model(model, fname)
    _check_bool(inplace, "inplace", fname)
    if not example_inputs:
        raise TypeError(
            f"{fname}(): pass example inputs after the model (lower(model, x)): the pads of "
            "'same'-style layers depend on the input size"
        )
    target = model if inplace else copy.deepcopy(model)
    paths = _paths_by_id(target)
    layers = {id(m): m for m in target.modules() if isinstance(m, _PADKIT_LAYERS)}
    for m in layers.values():
        if type(m).__module__ == PN.__name__:
            continue
        where = paths[id(m)][0] or "<root>"
        if nn.utils.parametrize.is_parametrized(m):
            raise SurgeryError(
                f"{fname}(): {where!r} is parametrized ({type(m).__qualname__}, e.g. weight "
                "norm): torch's layer would need the computed weight as a parameter; remove the "
                "parametrization first (torch.nn.utils.parametrize.remove_parametrizations)"
            )
        raise SurgeryError(
            f"{fname}(): {where!r} is a {type(m).__qualname__}, a subclass of a padkit layer "
            "whose forward lower cannot know; lower its padkit base instead"
        )
    lowered: dict[int, tuple[nn.Module, tuple[int, ...], str]] = {}
    errors: list[str] = []

    def record(m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        path = paths[id(m)][0]
        if len(args) != 1 or kwargs:
            errors.append(f"{path!r}: called with more than the input ({len(args)} args)")
            return
        x = args[0]
        sizes = tuple(int(n) for n in x.shape[-m._nd :])  # type: ignore[operator]
        if id(m) in lowered:
            if lowered[id(m)][1] != sizes and not _static(m):
                errors.append(
                    f"{path!r}: its pads depend on the input size, and the example reaches it "
                    f"at sizes {lowered[id(m)][1]} and {sizes}"
                )
            return
        try:
            new = _lower_layer(m, x, out)
            got = new(x)
        except SurgeryError as err:
            errors.append(f"{path!r} ({_brief(m)}): {err}")
            return
        if not _same(out, got):
            errors.append(f"{path!r} ({_brief(m)}): the torch layers did not reproduce its output")
            return
        lowered[id(m)] = (new, sizes, path)

    training = {id(m): m.training for m in target.modules()}
    handles = [m.register_forward_hook(record, with_kwargs=True) for m in layers.values()]
    try:
        target.eval()
        with torch.no_grad():
            target(*example_inputs)
    finally:
        for h in handles:
            h.remove()
        for m in target.modules():
            m.training = training[id(m)]
    for i, m in layers.items():
        if i not in lowered and not errors:
            if not _static(m):
                errors.append(
                    f"{paths[i][0]!r} ({_brief(m)}): its pads depend on the input size and the "
                    "example does not reach it"
                )
                continue
            try:
                lowered[i] = (_lower_unreached(m), (), paths[i][0])
            except SurgeryError as err:
                errors.append(f"{paths[i][0]!r}: {err}")
    if errors:
        raise SurgeryError(f"{fname}(): cannot lower exactly:\n  " + "\n  ".join(errors))
    report = SurgeryReport("lower")
    root: nn.Module = target
    for i, m in layers.items():
        new, sizes, path = lowered[i]
        new.train(m.training)
        what: tuple[str, ...] = ("class", "padding")
        detail = ""
        if not _static(m):
            rec = Op.from_module(m)
            why = f"padding {rec.padding.describe() if rec else m.pad_spec}"
            new.register_forward_pre_hook(InputSizeGuard(path, sizes, why))
            what += ("input_size",)
            detail = f"resolved for input size {sizes}; other sizes are refused"
        if paths[i] == [""]:
            root = new
        else:
            _replace(target, paths[i], new)
        report.changes.append(Change(path, _brief(m), _brief_torch(new), what, detail=detail))
    if not layers:
        report.notes.append("no padkit layers: the model is unchanged")
    leftover = sorted(
        {type(m).__qualname__ for m in root.modules() if type(m).__module__.startswith("padkit.")}
    )
    if leftover:
        report.notes.append(
            "padkit modules that are not layers stay as they are: " + ", ".join(leftover)
        )
    return root, report


def _static(m: Any) -> bool:
    rec = Op.from_module(m)
    return rec is not None and rec.static_pairs() is not None


def _lower_unreached(m: Any) -> nn.Module:
    """A layer with static pads that the example does not reach (its output size is the
    padkit formula's)."""
    rec = Op.from_module(m)
    if rec is None:  # pragma: no cover
        raise SurgeryError("no checked record")
    if rec.kind == "conv":
        pairs: Pairs = m.resolved_padding()
        return _lower_conv(m, rec, pairs)
    raise SurgeryError(
        f"{_brief(m)}: the example does not reach this layer; lower needs its input size"
    )


def _brief_torch(new: nn.Module) -> str:
    parts = [type(c).__name__ for c in new.modules() if c is not new] or [type(new).__name__]
    return " + ".join(parts)
