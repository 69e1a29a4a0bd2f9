"""Model surgery: exact padkit replacements, padding-convention ports and output-stride dilation.

:func:`convert` returns a copy of a model in which the layers that pad on every forward
(timm's ``Conv2dSame``/``MaxPool2dSame``/``AvgPool2dSame``, torch convs with
``padding='same'``) and explicit pad modules directly followed by a conv or pool in an
``nn.Sequential`` are replaced by padkit layers that compute the same numbers with the
same weights. With ``padding=...`` it also switches the model's padding convention (a
PyTorch-style model to TF ``SAME`` to run weights trained in TF/Keras, or a TF port back
to symmetric padding) and reports every layer whose numbers change.

:func:`dilate` turns a ResNet-family backbone of output stride 32 into one of output
stride 16 or 8 by replacing strides with dilations, and fixes every padding this affects
so that the a-trous identity holds exactly: in eval mode the dilated model's last feature
map, subsampled at the original stride, equals the original model's.

Both return ``(model, report)``; the model is a copy unless ``inplace=True``, and its
``state_dict`` has the original's keys and shapes. torch is the only dependency: timm and
torchvision classes are recognised only when those packages are already imported (a model
holding their layers has imported them).
"""

from __future__ import annotations

import copy
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from . import nn as PN
from .spec import (
    Padding,
    PaddingError,
    _tuple_of,
    conv_output_size,
    pool_output_size,
)

__all__ = [
    "PORT_TARGETS",
    "Change",
    "LatticeGate",
    "Skip",
    "SurgeryError",
    "SurgeryReport",
    "convert",
    "dilate",
]

#: What ``convert(padding=...)`` accepts: a same-family rule, or PyTorch-style symmetric pads.
PORT_TARGETS: tuple[str, ...] = (
    "same",
    "same_lower",
    "same_static",
    "same_static_lower",
    "symmetric",
)
_SAME_RULES = ("same", "same_lower", "same_static", "same_static_lower")


class SurgeryError(PaddingError):
    """A model, or one of its modules, cannot be transformed exactly."""


# ----------------------------------------------------------------------------- the report


@dataclass(frozen=True)
class Change:
    """One module that surgery replaced or modified.

    Attributes:
        path: the module's path in the returned model (``model.get_submodule(path)``).
        before: the original module, briefly (class, kernel, stride, dilation, pads).
        after: the module now at ``path``, briefly.
        what: the aspects that changed, e.g. ``("stride", "dilation", "padding")``.
        numbers_change: whether the layer computes other numbers than before for some
            input size (convention ports); exact replacements and dilations say False.
        detail: why, and where the numbers differ.
        at_input: for ``convert(..., input_shape=...)``: whether the numbers differ at the
            size this layer sees for that input (None when no input shape was given).
    """

    path: str
    before: str
    after: str
    what: tuple[str, ...]
    numbers_change: bool = False
    detail: str = ""
    at_input: bool | None = None


@dataclass(frozen=True)
class Skip:
    """A candidate module that surgery left as it was, and why."""

    path: str
    reason: str


@dataclass
class SurgeryReport:
    """What :func:`convert` or :func:`dilate` did.

    Attributes:
        operation: ``"convert"`` or ``"dilate"``.
        changes: every module replaced or modified, in model order.
        skipped: candidates left unchanged, with the reason.
        notes: remarks that concern the model as a whole.

    Example:
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(1, 1, 3, stride=2, padding=1))
        >>> _, report = convert(net, padding="same")
        >>> print(report)  # doctest: +NORMALIZE_WHITESPACE
        padkit.surgery.convert: 1 change(s)
          0: Conv2d k=(3, 3) s=(2, 2) d=(1, 1) pads=((1, 1), (1, 1))
             -> padkit.Conv2d k=(3, 3) s=(2, 2) d=(1, 1) pads=('same', 'same') [numbers change]
              every axis: at even sizes (e.g. n=12: pads (1, 1) -> (0, 1))
    """

    operation: str
    changes: list[Change] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def paths(self) -> list[str]:
        """The paths of the changed modules."""
        return [c.path for c in self.changes]

    @property
    def numbers_changed(self) -> list[str]:
        """The paths of the layers whose numbers change for some input size."""
        return [c.path for c in self.changes if c.numbers_change]

    def __str__(self) -> str:
        lines = [f"padkit.surgery.{self.operation}: {len(self.changes)} change(s)"]
        for c in self.changes:
            flag = " [numbers change]" if c.numbers_change else ""
            if c.at_input is not None:
                flag += " [differs at the given input]" if c.at_input else " [same at input]"
            lines.append(f"  {c.path or '<root>'}: {c.before} -> {c.after}{flag}")
            if c.detail:
                lines.append(f"      {c.detail}")
        if self.skipped:
            lines.append(f"skipped {len(self.skipped)}:")
            lines.extend(f"  {s.path or '<root>'}: {s.reason}" for s in self.skipped)
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


# ----------------------------------------------------------------------------- optional classes


def _classes(module_name: str, *names: str) -> tuple[type, ...]:
    """Classes from an optional package, only if it is already imported (never imports it)."""
    mod = sys.modules.get(module_name)
    if mod is None:
        return ()
    return tuple(c for c in (getattr(mod, n, None) for n in names) if isinstance(c, type))


def _timm_same_convs() -> tuple[type, ...]:
    return _classes("timm.layers.conv2d_same", "Conv2dSame", "Conv2dSameExport")


def _timm_same_pools() -> tuple[type, ...]:
    return _classes("timm.layers.pool2d_same", "MaxPool2dSame", "AvgPool2dSame")


# ----------------------------------------------------------------------------- layer facts

_CONV: dict[type, int] = {nn.Conv1d: 1, nn.Conv2d: 2, nn.Conv3d: 3}
_MAX: dict[type, int] = {nn.MaxPool1d: 1, nn.MaxPool2d: 2, nn.MaxPool3d: 3}
_AVG: dict[type, int] = {nn.AvgPool1d: 1, nn.AvgPool2d: 2, nn.AvgPool3d: 3}
_LP: dict[type, int] = {nn.LPPool1d: 1, nn.LPPool2d: 2, nn.LPPool3d: 3}
_PK_CONV: dict[type, int] = {PN.Conv1d: 1, PN.Conv2d: 2, PN.Conv3d: 3}
_PK_MAX: dict[type, int] = {PN.MaxPool1d: 1, PN.MaxPool2d: 2, PN.MaxPool3d: 3}
_PK_AVG: dict[type, int] = {PN.AvgPool1d: 1, PN.AvgPool2d: 2, PN.AvgPool3d: 3}
_PK_LP: dict[type, int] = {PN.LPPool1d: 1, PN.LPPool2d: 2, PN.LPPool3d: 3}
_BUILD: dict[tuple[str, int], type[nn.Module]] = {
    ("conv", 1): PN.Conv1d,
    ("conv", 2): PN.Conv2d,
    ("conv", 3): PN.Conv3d,
    ("max", 1): PN.MaxPool1d,
    ("max", 2): PN.MaxPool2d,
    ("max", 3): PN.MaxPool3d,
    ("avg", 1): PN.AvgPool1d,
    ("avg", 2): PN.AvgPool2d,
    ("avg", 3): PN.AvgPool3d,
    ("lp", 1): PN.LPPool1d,
    ("lp", 2): PN.LPPool2d,
    ("lp", 3): PN.LPPool3d,
}


@dataclass(frozen=True)
class _Layer:
    """The padding-relevant facts of a conv or pool, in padkit's terms."""

    kind: str  # "conv", "max", "avg" or "lp"
    nd: int
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    padding: Padding
    ceil_mode: bool = False
    count_include_pad: bool = True
    divisor_override: int | None = None
    return_indices: bool = False
    padding_mode: Any = "zeros"

    def static_pairs(self) -> tuple[tuple[int, int], ...] | None:
        """The pads when they do not depend on the input size (no Caffe ceil rounding)."""
        if self.padding.ceil_mode or self.padding.needs_input_size(self.stride):
            return None
        return self.padding.resolve(self.kernel, self.stride, self.dilation)

    def pairs_at(self, sizes: Sequence[int]) -> tuple[tuple[int, int], ...]:
        return self.padding.resolve(self.kernel, self.stride, self.dilation, tuple(sizes))


def _layer_kind(module: nn.Module) -> tuple[str, int] | None:
    """(kind, nd) for a torch or padkit conv/pool of exactly that class, else None."""
    t = type(module)
    for table, kind in (
        (_CONV, "conv"),
        (_PK_CONV, "conv"),
        (_MAX, "max"),
        (_PK_MAX, "max"),
        (_AVG, "avg"),
        (_PK_AVG, "avg"),
        (_LP, "lp"),
        (_PK_LP, "lp"),
    ):
        if t in table:
            return kind, table[t]
    return None


def _layer(module: nn.Module) -> _Layer | None:
    """The facts of a torch or padkit conv/pool (exact classes only; subclasses are foreign)."""
    found = _layer_kind(module)
    if found is None:
        return None
    kind, nd = found
    m: Any = module
    kernel = _tuple_of(m.kernel_size, nd, "kernel_size")
    stride = kernel if m.stride is None else _tuple_of(m.stride, nd, "stride")
    dilation = _tuple_of(getattr(m, "dilation", 1), nd, "dilation")
    spec = getattr(m, "pad_spec", None)
    if not isinstance(spec, Padding):
        pad = getattr(m, "padding", 0)
        if isinstance(pad, str):
            # torch convs: 'same' is the static split (odd pixel at the end), 'valid' is 0
            pad = "same_static" if pad == "same" else pad
        spec = Padding.parse(pad, nd)
    if kind == "conv":
        return _Layer(kind, nd, kernel, stride, dilation, spec, padding_mode=m.padding_mode)
    return _Layer(
        kind,
        nd,
        kernel,
        stride,
        dilation,
        spec,
        ceil_mode=bool(m.ceil_mode),
        count_include_pad=bool(getattr(m, "count_include_pad", True)),
        divisor_override=getattr(m, "divisor_override", None),
        return_indices=bool(getattr(m, "return_indices", False)),
    )


def _build(layer: _Layer, old: nn.Module) -> nn.Module:
    """A padkit layer computing ``layer``; a conv takes over ``old``'s parameter objects."""
    cls = _BUILD[(layer.kind, layer.nd)]
    m: Any = old
    new: nn.Module
    if layer.kind == "conv":
        new = cls(
            m.in_channels,
            m.out_channels,
            layer.kernel,
            stride=layer.stride,
            padding=layer.padding,
            dilation=layer.dilation,
            groups=m.groups,
            bias=m.bias is not None,
            padding_mode=layer.padding_mode,
            device="meta",
            dtype=m.weight.dtype,
        )
        new.weight = m.weight
        if m.bias is not None:
            new.bias = m.bias
    elif layer.kind == "max":
        new = cls(
            layer.kernel,
            layer.stride,
            padding=layer.padding,
            dilation=layer.dilation,
            return_indices=layer.return_indices,
            ceil_mode=layer.ceil_mode,
        )
    elif layer.kind == "avg":
        new = cls(
            layer.kernel,
            layer.stride,
            padding=layer.padding,
            ceil_mode=layer.ceil_mode,
            count_include_pad=layer.count_include_pad,
            divisor_override=layer.divisor_override,
            dilation=layer.dilation,
        )
    else:
        new = cls(
            m.norm_type,
            layer.kernel,
            layer.stride,
            layer.ceil_mode,
            padding=layer.padding,
            dilation=layer.dilation,
        )
    new.train(old.training)
    return new


def _pads_text(layer: _Layer) -> str:
    pairs = layer.static_pairs()
    if pairs is not None:
        return str(tuple(pairs))
    return (
        "(" + ", ".join(repr(a) if isinstance(a, str) else str(a) for a in layer.padding.axes) + ")"
    )


def _brief(module: nn.Module, layer: _Layer | None = None) -> str:
    """``'Conv2d k=(3, 3) s=(2, 2) d=(1, 1) pads=((1, 1), (1, 1))'`` and the like."""
    name = type(module).__name__
    if any(type(module) in table for table in (_PK_CONV, _PK_MAX, _PK_AVG, _PK_LP)):
        name = "padkit." + name
    layer = layer if layer is not None else _layer(module)
    if layer is None:
        m: Any = module
        facts = [
            f"{key}={tuple(v) if isinstance(v, (list, tuple)) else v}"
            for key, attr in (("k", "kernel_size"), ("s", "stride"), ("d", "dilation"))
            if (v := getattr(m, attr, None)) is not None
        ]
        return " ".join([name, *facts])
    text = f"{name} k={layer.kernel} s={layer.stride} d={layer.dilation} pads={_pads_text(layer)}"
    if layer.kind != "conv" and layer.ceil_mode:
        text += " ceil_mode"
    if layer.kind == "avg":
        text += f" count_include_pad={layer.count_include_pad}"
    return text


def _replace(root: nn.Module, paths: Sequence[str], new: nn.Module) -> None:
    """Put ``new`` at every path (a module shared by several paths stays shared)."""
    for path in paths:
        if path == "":
            raise SurgeryError("surgery cannot replace the root module itself")
        root.set_submodule(path, new, strict=True)


def _paths_by_id(root: nn.Module) -> dict[int, list[str]]:
    paths: dict[int, list[str]] = {}
    for path, m in root.named_modules(remove_duplicate=False):
        paths.setdefault(id(m), []).append(path)
    return paths


def _check_model(model: Any, fname: str) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"{fname}(): model must be a torch.nn.Module, got {type(model).__name__} ({model!r})"
        )
    return model


def _check_bool(value: Any, name: str, fname: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(
            f"{fname}(): {name} must be True or False, got {type(value).__name__} ({value!r})"
        )
    return value


# ----------------------------------------------------------------------------- convert: exact


def _exact_replacement(module: nn.Module) -> tuple[_Layer, str] | None:
    """The padkit layer that computes what a padding-on-every-forward layer computes."""
    m: Any = module
    t = type(module)
    if t in _timm_same_convs():
        layer = _Layer(
            "conv",
            2,
            _tuple_of(m.kernel_size, 2, "kernel_size"),
            _tuple_of(m.stride, 2, "stride"),
            _tuple_of(m.dilation, 2, "dilation"),
            Padding.parse("same", 2),
            padding_mode="zeros",
        )
        note = "TF SAME resolved per input size, as timm pads on every forward"
        if t.__name__ == "Conv2dSameExport":
            note += " (timm's export variant caches its first input size's pad; padkit does not)"
        return layer, note
    if t in _timm_same_pools():
        k = _tuple_of(m.kernel_size, 2, "kernel_size")
        s = k if m.stride is None else _tuple_of(m.stride, 2, "stride")
        if t.__name__ == "MaxPool2dSame":
            layer = _Layer(
                "max",
                2,
                k,
                s,
                _tuple_of(m.dilation, 2, "dilation"),
                Padding.parse("same", 2),
                ceil_mode=bool(m.ceil_mode),
            )
            return layer, "TF SAME; timm pads with -inf, padkit's pads never win"
        layer = _Layer(
            "avg",
            2,
            k,
            s,
            (1, 1),
            Padding.parse("same", 2),
            ceil_mode=bool(m.ceil_mode),
            count_include_pad=True,
        )
        return layer, (
            "TF SAME with the pad counted, as timm computes it whatever its count_include_pad "
            f"({m.count_include_pad}) says (TF/Keras exclude it: conventions T8)"
        )
    found = _layer_kind(module)
    if found is not None and found[0] == "conv" and t in _CONV and m.padding == "same":
        conv = _layer(module)
        if conv is not None:
            return conv, "torch's 'same' (static split, odd pixel at the end) without the copy"
    return None


_PAD_MODULES: dict[type, tuple[int, str]] = {
    nn.ZeroPad1d: (1, "constant"),
    nn.ZeroPad2d: (2, "constant"),
    nn.ZeroPad3d: (3, "constant"),
    nn.ConstantPad1d: (1, "constant"),
    nn.ConstantPad2d: (2, "constant"),
    nn.ConstantPad3d: (3, "constant"),
    nn.ReflectionPad1d: (1, "reflect"),
    nn.ReflectionPad2d: (2, "reflect"),
    nn.ReflectionPad3d: (3, "reflect"),
    nn.ReplicationPad1d: (1, "replicate"),
    nn.ReplicationPad2d: (2, "replicate"),
    nn.ReplicationPad3d: (3, "replicate"),
    nn.CircularPad1d: (1, "circular"),
    nn.CircularPad2d: (2, "circular"),
    nn.CircularPad3d: (3, "circular"),
}


def _fold(pad: nn.Module, target: nn.Module) -> tuple[_Layer | None, str]:
    """The padkit layer equal to ``target(pad(x))``, or None and the reason it is not exact."""
    nd, mode = _PAD_MODULES[type(pad)]
    p: Any = pad
    value = float(getattr(p, "value", 0.0))
    if isinstance(target, (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)):
        return None, "padding a transposed conv's input is not a crop of its output"
    layer = _layer(target)
    if layer is None:
        return None, f"{type(target).__name__} is not a torch or padkit conv/pool"
    if layer.nd != nd:
        return None, f"a {nd}-d pad before a {layer.nd}-d {type(target).__name__}"
    own = layer.static_pairs()
    if own is None:
        return None, f"its padding {layer.padding.describe()} depends on the input size"
    pads = Padding.from_torch_pad(p.padding, allow_negative=True)
    added = tuple(a for a in pads.axes if isinstance(a, tuple))
    if any(min(a) < 0 for a in added):
        return None, f"the pad {tuple(p.padding)} crops (negative pads)"
    total = tuple((a[0] + b[0], a[1] + b[1]) for a, b in zip(added, own))
    has_own = any(v != 0 for pair in own for v in pair)
    if mode != "constant":
        if layer.kind != "conv":
            return None, f"{mode} padding before a pool has no padkit pool equivalent"
        if has_own:
            return None, f"{mode} padding followed by the conv's own padding {own}"
        return replace(layer, padding=Padding.parse(total), padding_mode=mode), mode
    if layer.kind == "conv":
        if value != 0.0:
            return None, f"constant value {value} (a conv pads with zeros)"
        if has_own and layer.padding_mode != "zeros":
            return None, f"the conv pads again with padding_mode={layer.padding_mode!r}"
        return replace(layer, padding=Padding.parse(total), padding_mode="zeros"), "zeros"
    if layer.ceil_mode:
        return None, "ceil_mode on the explicitly padded input drops windows differently"
    if layer.kind == "max":
        if value != -math.inf:
            return None, (
                f"a max pool after padding with {value} is exact only if no input is below "
                f"{value}; padkit's max pools pad with -inf"
            )
        if layer.return_indices:
            return None, "return_indices refer to the padded input"
        return replace(layer, padding=Padding.parse(total)), "-inf"
    if value != 0.0:
        return None, f"constant value {value} (padkit's {layer.kind} pools pad with zeros)"
    if layer.kind == "avg" and has_own and not layer.count_include_pad:
        return None, "the pool excludes its own pad but counts the explicit zeros"
    return replace(layer, padding=Padding.parse(total), count_include_pad=True), "zeros"


# ----------------------------------------------------------------------------- convert: ports


def _style(layer: _Layer) -> list[str]:
    """Per axis: 'same' (same-style: a same-family rule, or torch/timm 'same'-ish symmetric
    pads), 'valid' (no pad, kernel > 1), 'none' (1-wide kernel, no pad) or 'other'."""
    styles = []
    for rule, k, s, d in zip(layer.padding.axes, layer.kernel, layer.stride, layer.dilation):
        k_eff = d * (k - 1) + 1
        if isinstance(rule, str):
            styles.append(
                "same" if rule in _SAME_RULES else ("valid" if rule == "valid" else "other")
            )
            continue
        lo, hi = rule
        if lo == hi == 0:
            styles.append("none" if k_eff == 1 else "valid")
        elif lo == hi and lo in (d * (k - 1) // 2, ((s - 1) + d * (k - 1)) // 2):
            styles.append("same")
        else:
            styles.append("other")
    return styles


def _ported(layer: _Layer, target: str, cip: bool | None) -> _Layer:
    styles = _style(layer)
    axes: list[Any] = []
    for style, rule, k, s, d in zip(
        styles, layer.padding.axes, layer.kernel, layer.stride, layer.dilation
    ):
        if style != "same":
            axes.append(rule)
        elif target == "symmetric":
            if isinstance(rule, str):
                p = ((s - 1) + d * (k - 1)) // 2
                axes.append((p, p))
            else:
                axes.append(rule)
        else:
            axes.append(target)
    new = replace(layer, padding=Padding(tuple(axes)))
    if target != "symmetric" and "same" in styles and layer.kind != "conv":
        new = replace(new, ceil_mode=False)  # TF/ONNX SAME has no ceil rounding
    if cip is not None and layer.kind == "avg":
        new = replace(new, count_include_pad=cip)
    return new


def _axis_key(layer: _Layer, axis: int, n: int, lo: int, hi: int) -> tuple[int, ...] | None:
    """What determines one axis's numbers: the first window's offset, the window count and,
    for averages, the pad cells counted. None where the layer cannot run at this size."""
    k, s, d = layer.kernel[axis], layer.stride[axis], layer.dilation[axis]
    k_eff = d * (k - 1) + 1
    if n + lo + hi < k_eff:
        return None
    if layer.kind == "conv":
        out = conv_output_size(n, k, s, d, lo, hi)
    else:
        out = pool_output_size(n, k, s, d, lo, hi, layer.ceil_mode)
    if out < 1:
        return None
    if layer.kind != "avg" or layer.divisor_override is not None:
        return (lo, out)
    reach = (out - 1) * s + k_eff - lo - n  # cells past the end the last window covers
    if not layer.count_include_pad:
        return (lo, out, 0, 0)
    return (lo, out, lo, min(max(reach, 0), hi))


def _axis_pairs(layer: _Layer, axis: int, n: int) -> tuple[int, int] | None:
    rule = layer.padding.axes[axis]
    try:
        return Padding((rule,)).resolve(
            layer.kernel[axis], layer.stride[axis], layer.dilation[axis], n
        )[0]
    except PaddingError:
        return None


def _differs_at(old: _Layer, new: _Layer, axis: int, n: int) -> bool | None:
    a, b = _axis_pairs(old, axis, n), _axis_pairs(new, axis, n)
    if a is None or b is None:
        return None
    ka, kb = _axis_key(old, axis, n, *a), _axis_key(new, axis, n, *b)
    if ka is None or kb is None:
        return None
    return ka != kb


def _axis_change(old: _Layer, new: _Layer, axis: int, n: int) -> str:
    """``'pads (1, 1) -> (0, 1)'`` (and what else differs) for one axis at size ``n``."""
    a, b = _axis_pairs(old, axis, n), _axis_pairs(new, axis, n)
    text = f"pads {a} -> {b}"
    if old.kind == "avg" and old.count_include_pad != new.count_include_pad:
        text += f", count_include_pad {old.count_include_pad} -> {new.count_include_pad}"
    ka = _axis_key(old, axis, n, *a) if a else None
    kb = _axis_key(new, axis, n, *b) if b else None
    if ka and kb and ka[1] != kb[1]:
        text += f", output size {ka[1]} -> {kb[1]}"
    return text


def _port_detail(old: _Layer, new: _Layer) -> tuple[bool, str]:
    """Whether the numbers change for some input size, and where, in words."""
    parts: list[str] = []
    for axis in range(old.nd):
        s = old.stride[axis]
        k_eff = old.dilation[axis] * (old.kernel[axis] - 1) + 1
        diffs = [n for n in range(1, 2 * (k_eff + 2 * s)) if _differs_at(old, new, axis, n)]
        if not diffs:
            parts.append("")
            continue
        large = [n for n in diffs if n >= k_eff + s]
        example = (large or diffs)[-1]
        residues = sorted({n % s for n in large})
        if large and len(residues) == s:
            where = "at every size"
        elif large and s == 2:
            where = "at even sizes" if residues == [0] else "at odd sizes"
        elif large:
            where = f"at sizes n with n % {s} in {residues}"
        else:
            where = f"at sizes {diffs}"
        parts.append(f"{where} (e.g. n={example}: {_axis_change(old, new, axis, example)})")
    if not any(parts):
        return False, ""
    if len(set(parts)) == 1:
        return True, f"every axis: {parts[0]}"
    return True, "; ".join(f"axis {i}: {p}" for i, p in enumerate(parts) if p)


def _trace_shapes(
    model: nn.Module, paths: Sequence[str] | set[str], input_shape: Sequence[int]
) -> dict[str, tuple[tuple[int, ...], tuple[int, ...] | None]]:
    """The (input shape, output shape) each of ``paths`` first sees in one forward of zeros.

    The model runs once in eval mode under ``no_grad`` and its training flags are restored;
    the output shape is None where the module returns no tensor.
    """
    seen: dict[str, tuple[tuple[int, ...], tuple[int, ...] | None]] = {}
    handles = []
    modules = dict(model.named_modules(remove_duplicate=False))
    for path in paths:

        def hook(_m: nn.Module, args: tuple[Any, ...], out: Any, path: str = path) -> None:
            if path in seen or not args or not isinstance(args[0], Tensor):
                return
            y = out[0] if isinstance(out, (tuple, list)) else out
            seen[path] = (tuple(args[0].shape), tuple(y.shape) if isinstance(y, Tensor) else None)

        handles.append(modules[path].register_forward_hook(hook))
    modes = {m: m.training for m in model.modules()}
    param = next(iter(model.parameters()), None)
    try:
        model.eval()
        x = torch.zeros(
            tuple(input_shape),
            dtype=param.dtype if param is not None else torch.float32,
            device=param.device if param is not None else None,
        )
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
        for m, mode in modes.items():
            m.training = mode
    return seen


# ----------------------------------------------------------------------------- convert


def convert(
    model: nn.Module,
    padding: str | None = None,
    *,
    count_include_pad: bool | None = None,
    input_shape: Sequence[int] | None = None,
    inplace: bool = False,
) -> tuple[nn.Module, SurgeryReport]:
    """Replace padding-on-every-forward layers by exact padkit layers; optionally port the
    model's padding convention.

    Always (exact, same weights, same numbers):

    - timm ``Conv2dSame``/``Conv2dSameExport`` -> ``padkit.nn.Conv2d(padding="same")``;
      ``MaxPool2dSame`` -> ``padkit.nn.MaxPool2d(padding="same")``; ``AvgPool2dSame`` ->
      ``padkit.nn.AvgPool2d(padding="same", count_include_pad=True)`` (timm counts its
      pad whatever ``count_include_pad`` says);
    - torch convs with ``padding='same'`` -> padkit convs with ``"same_static"``;
    - an ``nn.ZeroPad*d``/``ConstantPad*d`` (or reflection/replication/circular pad)
      directly followed by a conv or pool in an ``nn.Sequential`` is folded into that
      layer's padding where the result is exact (the pad module becomes ``nn.Identity``);
      the other cases are reported as skipped.

    With ``padding=`` one of :data:`PORT_TARGETS`, every conv and pool whose padding is
    same-style (a same-family rule, or symmetric ``d*(k-1)//2`` or timm's
    ``((s-1) + d*(k-1))//2``) is switched to that rule, or with ``"symmetric"`` back to
    timm's PyTorch-style symmetric pads. Layers whose numbers change for some input size
    are replaced and reported with ``numbers_change=True``; ``valid`` and 1-wide layers are
    left alone. ``count_include_pad`` (if given) is set on every ported average pool.

    Args:
        model: any ``nn.Module``.
        padding: None (exact replacements only) or one of :data:`PORT_TARGETS`.
        count_include_pad: for ports: the divisor rule of the ported average pools
            (TF/Keras: False).
        input_shape: a full input shape; the report then also says, per ported layer,
            whether its numbers differ at the size it sees for that input.
        inplace: modify ``model`` itself instead of a deep copy.

    Returns:
        ``(model, report)``.

    Example:
        >>> net = torch.nn.Sequential(torch.nn.ZeroPad2d((0, 1, 0, 1)),
        ...                           torch.nn.Conv2d(3, 8, 3, stride=2))
        >>> new, report = convert(net)
        >>> report.paths
        ['0', '1']
        >>> new[1].resolved_padding()
        ((0, 1), (0, 1))
        >>> x = torch.randn(1, 3, 8, 8)
        >>> torch.allclose(new(x), net(x))
        True
        >>> torch_style = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2, padding=1))
        >>> tf, report = convert(torch_style, padding="same")
        >>> report.numbers_changed
        ['0']
    """
    _check_model(model, "convert")
    _check_bool(inplace, "inplace", "convert")
    if padding is not None and (
        not isinstance(padding, str) or padding.lower() not in PORT_TARGETS
    ):
        kind = TypeError if not isinstance(padding, str) else SurgeryError
        raise kind(
            f"convert(): padding must be None (exact replacements only) or one of "
            f"{', '.join(repr(t) for t in PORT_TARGETS)}, got {padding!r}"
        )
    target = padding.lower() if isinstance(padding, str) else None
    if count_include_pad is not None:
        _check_bool(count_include_pad, "count_include_pad", "convert")
        if target is None:
            raise SurgeryError(
                "convert(): count_include_pad is for convention ports; pass padding= too "
                f"(one of {', '.join(repr(t) for t in PORT_TARGETS)})"
            )
    if input_shape is not None:
        if target is None:
            raise SurgeryError("convert(): input_shape is for convention ports; pass padding=")
        shape: Any = input_shape
        if not isinstance(shape, Sequence) or isinstance(shape, str):
            raise TypeError(
                "convert(): input_shape must be a full input shape (a tuple of ints such as "
                f"(1, 3, 224, 224)), got {type(input_shape).__name__} ({input_shape!r})"
            )
        input_shape = _tuple_of(input_shape, len(input_shape), "input_shape")
    out = model if inplace else copy.deepcopy(model)
    report = SurgeryReport("convert")

    # 1. layers that pad on every forward -> padkit layers, exactly
    done: set[int] = set()
    by_id = _paths_by_id(out)
    for path, module in list(out.named_modules()):
        found = _exact_replacement(module)
        if found is None or id(module) in done:
            if _is_dynamic_cond_conv(module):
                report.skipped.append(
                    Skip(path, "CondConv2d pads dynamically inside its own forward; not replaced")
                )
            continue
        layer, note = found
        new = _build(layer, module)
        _replace(out, by_id[id(module)], new)
        done.add(id(new))
        report.changes.append(Change(path, _brief(module), _brief(new), ("class",), False, note))

    # 2. explicit pad modules folded into the next conv/pool of an nn.Sequential
    by_id = _paths_by_id(out)
    in_sequence: set[int] = set()
    for path, seq in list(out.named_modules()):
        if type(seq) is not nn.Sequential:
            continue
        names = list(seq._modules)
        for i, name in enumerate(names):
            pad = seq._modules[name]
            if pad is None or type(pad) not in _PAD_MODULES:
                continue
            in_sequence.add(id(pad))
            pad_path = f"{path}.{name}" if path else name
            if i + 1 == len(names) or seq._modules[names[i + 1]] is None:
                report.skipped.append(
                    Skip(pad_path, "last in its nn.Sequential: nothing to fold into")
                )
                continue
            nxt = seq._modules[names[i + 1]]
            nxt_path = f"{path}.{names[i + 1]}" if path else names[i + 1]
            if _layer(nxt) is None and not isinstance(
                nxt, (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
            ):
                continue  # not a conv or pool: not a candidate
            if len(by_id[id(nxt)]) > 1 or len(by_id[id(pad)]) > 1:
                report.skipped.append(Skip(pad_path, "the pad or the next layer is shared"))
                continue
            folded, why = _fold(pad, nxt)
            if folded is None:
                report.skipped.append(Skip(pad_path, f"not folded into {nxt_path}: {why}"))
                continue
            new = _build(folded, nxt)
            before = _brief(nxt)
            _replace(out, [nxt_path], new)
            _replace(out, [pad_path], nn.Identity())
            report.changes.append(
                Change(
                    pad_path, repr(pad), "Identity", ("folded",), False, f"folded into {nxt_path}"
                )
            )
            report.changes.append(
                Change(
                    nxt_path,
                    before,
                    _brief(new),
                    ("padding",),
                    False,
                    f"takes the {why} pad of {pad_path}",
                )
            )
    for path, module in out.named_modules():
        if type(module) in _PAD_MODULES and id(module) not in in_sequence:
            report.skipped.append(
                Skip(path, "not inside an nn.Sequential: what it feeds is unknown, not folded")
            )

    # 3. convention port
    if target is not None:
        _port(out, target, count_include_pad, input_shape, report)
    return out, report


def _is_dynamic_cond_conv(module: nn.Module) -> bool:
    return type(module).__name__ == "CondConv2d" and bool(getattr(module, "dynamic_padding", False))


def _port(
    out: nn.Module,
    target: str,
    cip: bool | None,
    input_shape: Sequence[int] | None,
    report: SurgeryReport,
) -> None:
    by_id = _paths_by_id(out)
    plans: list[tuple[str, nn.Module, _Layer, _Layer, str]] = []
    seen: set[int] = set()
    for path, module in out.named_modules():
        layer = _layer(module)
        if layer is None or id(module) in seen:
            continue
        seen.add(id(module))
        if layer.padding.ceil_mode:
            report.skipped.append(
                Skip(path, "Caffe ceil rounding: not a same/symmetric convention")
            )
            continue
        styles = _style(layer)
        if "other" in styles:
            report.skipped.append(
                Skip(path, f"padding {_pads_text(layer)} is neither same-style nor valid; kept")
            )
            continue
        new = _ported(layer, target, cip)
        changed, detail = _port_detail(layer, new)
        if not changed:
            continue
        plans.append((path, module, layer, new, detail))
    shapes: dict[str, Any] = {}
    if input_shape is not None:
        shapes = _trace_shapes(out, {p for p, *_ in plans}, input_shape)
    for path, module, layer, new_layer, detail in plans:
        at: bool | None = None
        if input_shape is not None:
            traced = shapes.get(path)
            if traced is None:
                at = None
            else:
                spatial = tuple(traced[0][-layer.nd :])
                at = any(_differs_at(layer, new_layer, i, n) for i, n in enumerate(spatial))
                sees = ", ".join(
                    f"axis {i} n={n}: {_axis_change(layer, new_layer, i, n)}"
                    for i, n in enumerate(spatial)
                )
                detail += f". At input {tuple(input_shape)} it sees {spatial}: {sees}"
        built = _build(new_layer, module)
        _replace(out, by_id[id(module)], built)
        what = (
            ("padding",)
            if layer.count_include_pad == new_layer.count_include_pad
            else (
                "padding",
                "count_include_pad",
            )
        )
        report.changes.append(
            Change(path, _brief(module, layer), _brief(built, new_layer), what, True, detail, at)
        )


# ----------------------------------------------------------------------------- dilate


class LatticeGate(nn.Module):
    """A squeeze-and-excitation style channel gate whose global pool reads only the a-trous
    lattice ``x[..., ::f, ::f]``, so that a dilated backbone's gate equals the original's.

    It holds the original gate's submodules under their own names, so ``state_dict`` keys
    are unchanged. ``kind`` is ``"se"`` (timm ``SEModule``), ``"ese"``
    (``EffectiveSEModule``) or ``"eca"`` (``EcaModule``).

    Example:
        >>> se = torch.nn.Module()
        >>> se.fc = torch.nn.Conv2d(4, 4, 1)
        >>> se.gate = torch.nn.Sigmoid()
        >>> gate = LatticeGate(se, "ese", (2, 2))
        >>> x = torch.randn(1, 4, 6, 6)
        >>> ref = x * torch.sigmoid(se.fc(x[..., ::2, ::2].mean((2, 3), keepdim=True)))
        >>> torch.allclose(gate(x), ref)
        True
    """

    _KINDS: ClassVar[dict[str, tuple[str, ...]]] = {
        "se": ("fc1", "fc2", "gate"),
        "ese": ("fc", "gate"),
        "eca": ("conv", "gate"),
    }

    def __init__(self, gate: nn.Module, kind: str, factor: Sequence[int]) -> None:
        super().__init__()
        if kind not in self._KINDS:
            raise SurgeryError(
                f"LatticeGate: kind must be one of {', '.join(map(repr, self._KINDS))}, "
                f"got {kind!r}"
            )
        missing = [n for n in self._KINDS[kind] if not isinstance(gate._modules.get(n), nn.Module)]
        if missing:
            raise SurgeryError(
                f"LatticeGate: a {kind!r} gate needs submodules {self._KINDS[kind]}; "
                f"{type(gate).__name__} lacks {missing}"
            )
        own = [n for n, v in (*gate._parameters.items(), *gate._buffers.items()) if v is not None]
        if own:
            raise SurgeryError(
                f"LatticeGate: {type(gate).__name__} holds tensors of its own ({own}); "
                "only gates made of submodules are supported"
            )
        for name, child in gate._modules.items():
            self.add_module(name, child)
        self.kind = kind
        self.factor = tuple(_tuple_of(factor, len(tuple(factor)), "factor"))
        self.add_maxpool = bool(getattr(gate, "add_maxpool", False))
        self.train(gate.training)

    def _run(self, name: str, x: Tensor) -> Tensor:
        module = self._modules.get(name)
        return x if module is None else module(x)

    def forward(self, x: Tensor) -> Tensor:
        dims = tuple(range(2, x.dim()))
        index: list[Any] = [Ellipsis, *(slice(None, None, f) for f in self.factor)]
        lattice = x[tuple(index)]
        if self.kind == "eca":
            y = lattice.mean(dims).view(x.shape[0], 1, -1)
            y = self._run("conv", y)
            if self._modules.get("conv2") is not None:
                y = self._run("conv2", self._run("act", y))
            y = self._run("gate", y).view(x.shape[0], -1, *([1] * len(dims)))
            return x * y.expand_as(x)
        x_se = lattice.mean(dims, keepdim=True)
        if self.add_maxpool:
            x_se = 0.5 * x_se + 0.5 * lattice.amax(dims, keepdim=True)
        if self.kind == "se":
            x_se = self._run("fc2", self._run("act", self._run("bn", self._run("fc1", x_se))))
        else:
            x_se = self._run("fc", x_se)
        return x * self._run("gate", x_se)

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, lattice={self.factor}"


_POINTWISE: tuple[type, ...] = (
    nn.BatchNorm2d,
    nn.SyncBatchNorm,
    nn.Identity,
    nn.ReLU,
    nn.ReLU6,
    nn.LeakyReLU,
    nn.PReLU,
    nn.ELU,
    nn.SELU,
    nn.CELU,
    nn.GELU,
    nn.SiLU,
    nn.Mish,
    nn.Hardswish,
    nn.Hardsigmoid,
    nn.Hardtanh,
    nn.Sigmoid,
    nn.Tanh,
    nn.Softplus,
    nn.Dropout,
    nn.Dropout2d,
)

# block class (module, name) -> (residual branch in order, shortcut, after the sum)
_BLOCKS: dict[tuple[str, str], tuple[tuple[str, ...], str, tuple[str, ...]]] = {
    ("torchvision.models.resnet", "BasicBlock"): (
        ("conv1", "bn1", "relu", "conv2", "bn2"),
        "downsample",
        ("relu",),
    ),
    ("torchvision.models.resnet", "Bottleneck"): (
        ("conv1", "bn1", "relu", "conv2", "bn2", "relu", "conv3", "bn3"),
        "downsample",
        ("relu",),
    ),
    ("timm.models.resnet", "BasicBlock"): (
        ("conv1", "bn1", "drop_block", "act1", "aa", "conv2", "bn2", "se", "drop_path"),
        "downsample",
        ("act2",),
    ),
    ("timm.models.resnet", "Bottleneck"): (
        (
            "conv1",
            "bn1",
            "act1",
            "conv2",
            "bn2",
            "drop_block",
            "act2",
            "aa",
            "conv3",
            "bn3",
            "se",
            "drop_path",
        ),
        "downsample",
        ("act3",),
    ),
}
# model class -> (stem in order, stages in order, head: left alone)
_ROOTS: dict[tuple[str, str], tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    ("torchvision.models.resnet", "ResNet"): (
        ("conv1", "bn1", "relu", "maxpool"),
        ("layer1", "layer2", "layer3", "layer4"),
        ("avgpool", "fc"),
    ),
    ("timm.models.resnet", "ResNet"): (
        ("conv1", "bn1", "act1", "maxpool"),
        ("layer1", "layer2", "layer3", "layer4"),
        ("global_pool", "fc"),
    ),
}
_GATES: dict[tuple[str, str], str] = {
    ("timm.layers.squeeze_excite", "SEModule"): "se",
    ("timm.layers.squeeze_excite", "EffectiveSEModule"): "ese",
    ("timm.layers.eca", "EcaModule"): "eca",
}
_SUPPORTED = (
    "dilate supports torchvision ResNet/ResNeXt/Wide-ResNet and timm ResNet-family models "
    "(BasicBlock/Bottleneck, -D average-pool shortcuts, SE/ECA gates) built of torch or padkit "
    "convs and pools"
)


def _known(table: dict[tuple[str, str], Any]) -> dict[type, Any]:
    found: dict[type, Any] = {}
    for (module_name, name), value in table.items():
        for cls in _classes(module_name, name):
            found[cls] = value
    return found


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


_State = tuple[tuple[int, ...], tuple[int, ...]]  # (actual stride, lattice factor) per axis


class _Dilation:
    """One walk of a ResNet in data-flow order, tracking the actual stride and the a-trous
    lattice factor per axis, and planning the replacement of every layer they affect."""

    def __init__(self, root: nn.Module, output_stride: int | None, gates: str) -> None:
        self.root = root
        self.output_stride = output_stride
        self.gates = gates
        self.blocks = _known(_BLOCKS)
        self.gate_kinds = _known(_GATES)
        timm_pointwise = _classes("timm.layers.drop", "DropPath", "DropBlock2d")
        self.pointwise = (*_POINTWISE, *timm_pointwise)
        self.by_id = _paths_by_id(root)
        self.points: list[int] = []
        self.plans: dict[int, tuple[nn.Module, Change]] = {}
        self.states: dict[int, _State] = {}
        self.outputs: dict[str, int] = {}
        self.dense_gates: list[str] = []

    def refuse(self, path: str, module: nn.Module, why: str) -> SurgeryError:
        return SurgeryError(
            f"dilate(): cannot handle {path or '<root>'!r} ({type(module).__name__}): {why}. "
            f"{_SUPPORTED}"
        )

    def run(self) -> _State:
        spec = _known(_ROOTS).get(type(self.root))
        if spec is None:
            raise self.refuse("", self.root, "not a torchvision or timm ResNet")
        stem, stages, head = spec
        for name in self.root._modules:
            if name not in (*stem, *stages, *head):
                raise self.refuse(
                    name, self.root._modules[name] or nn.Identity(), "unexpected child"
                )
        st: _State = ((1, 1), (1, 1))
        for name in (*stem, *stages):
            st = self.visit(name, self.root._modules.get(name), st)
            self.outputs[name] = st[0][0]
        return st

    def visit(self, path: str, module: nn.Module | None, st: _State) -> _State:
        if module is None:
            return st
        t = type(module)
        if t is nn.Sequential:
            for name, child in module._modules.items():
                st = self.visit(_join(path, name), child, st)
            return st
        block = self.blocks.get(t)
        if block is not None:
            return self.block(path, module, block, st)
        layer = _layer(module)
        if layer is not None:
            return self.spatial(path, module, layer, st)
        if t in self.pointwise:
            m: Any = module
            if isinstance(module, nn.BatchNorm2d) and m.running_mean is None:
                raise self.refuse(path, module, "it normalises with batch statistics")
            return st
        if t.__module__.startswith("timm.layers.activations"):
            return st
        kind = self.gate_kinds.get(t)
        if kind is not None:
            self.gate(path, module, kind, st)
            return st
        if t in _timm_same_pools() or t in _timm_same_convs():
            why = "a timm 'same' layer pads per input size"
            if t.__name__ == "AvgPool2dSame":
                why += (
                    " (this is timm's own dilated average downsample, which is not exact: "
                    "conventions T19); build the model at output stride 32 and dilate that"
                )
            raise self.refuse(path, module, why)
        raise self.refuse(path, module, "not a conv, pool, pointwise layer or known gate")

    def block(
        self,
        path: str,
        block: nn.Module,
        spec: tuple[tuple[str, ...], str, tuple[str, ...]],
        st: _State,
    ) -> _State:
        main, shortcut, tail = spec
        for name, child in block._modules.items():
            if name not in (*main, shortcut, *tail):
                raise self.refuse(_join(path, name), child or nn.Identity(), "unexpected child")
        out = st
        for name in main:
            out = self.visit(_join(path, name), block._modules.get(name), out)
        short = self.visit(_join(path, shortcut), block._modules.get(shortcut), st)
        if short != out:
            raise self.refuse(path, block, "its residual branch and shortcut end at other strides")
        for name in tail:
            self.visit(_join(path, name), block._modules.get(name), out)
        return out

    def spatial(self, path: str, module: nn.Module, layer: _Layer, st: _State) -> _State:
        actual, factor = st
        if layer.nd != len(actual):
            raise self.refuse(path, module, f"a {layer.nd}-d layer in a {len(actual)}-d backbone")
        limit = self.output_stride
        convert = tuple(
            s > 1 and limit is not None and a * s > limit for a, s in zip(actual, layer.stride)
        )
        new_actual = tuple(a if c else a * s for a, s, c in zip(actual, layer.stride, convert))
        new_factor = tuple(f * s if c else f for f, s, c in zip(factor, layer.stride, convert))
        if limit is None:
            self.points.extend(a for a, s in zip(new_actual[:1], layer.stride[:1]) if s > 1)
        if not any(convert) and all(f == 1 for f in factor):
            return new_actual, new_factor
        seen = self.states.get(id(module))
        if seen is not None:
            if seen != st:
                raise self.refuse(path, module, "it is shared by places of other strides")
            return new_actual, new_factor
        self.states[id(module)] = st
        new_layer = self.transform(path, module, layer, factor, convert)
        if new_layer == layer:
            return new_actual, new_factor  # a 1x1 stride-1 layer: the same on any grid
        new = _build(new_layer, module)
        what = tuple(
            name
            for name, a, b in (
                ("stride", layer.stride, new_layer.stride),
                ("dilation", layer.dilation, new_layer.dilation),
                ("padding", layer.static_pairs(), new_layer.static_pairs()),
                ("ceil_mode", layer.ceil_mode, new_layer.ceil_mode),
            )
            if a != b
        )
        detail = f"on the lattice of factor {factor}"
        if any(convert):
            detail = f"stride -> dilation: lattice factor {factor} -> {new_factor}"
        self.plans[id(module)] = (
            new,
            Change(path, _brief(module, layer), _brief(new, new_layer), what, False, detail),
        )
        return new_actual, new_factor

    def transform(
        self,
        path: str,
        module: nn.Module,
        layer: _Layer,
        factor: tuple[int, ...],
        convert: tuple[bool, ...],
    ) -> _Layer:
        """The layer on the dilated grid: a stride that becomes 1 multiplies the later
        factors; each pad scales by the factor; a ceil-mode pool's overhang of up to
        ``s-1`` cells becomes explicit end padding (excluded or never winning)."""
        pairs = layer.static_pairs()
        if pairs is None:
            raise self.refuse(path, module, f"padding {layer.padding.describe()} is not static")
        if layer.kind == "conv" and layer.padding_mode != "zeros":
            raise self.refuse(
                path, module, f"padding_mode={layer.padding_mode!r} does not commute with dilation"
            )
        if layer.return_indices:
            raise self.refuse(path, module, "return_indices would index the dilated grid")
        new_pairs = []
        for (lo, hi), k, s, d, f, c in zip(
            pairs, layer.kernel, layer.stride, layer.dilation, factor, convert
        ):
            extra = 0
            if layer.kind != "conv" and layer.ceil_mode:
                k_eff = d * (k - 1) + 1
                if hi + s - 1 >= k_eff:
                    raise self.refuse(
                        path, module, "ceil_mode may drop a window that starts in the padding"
                    )
                if c:
                    if (
                        layer.kind == "avg"
                        and layer.count_include_pad
                        and layer.divisor_override is None
                    ):
                        raise self.refuse(
                            path,
                            module,
                            "ceil_mode with count_include_pad=True leaves its overhang "
                            "uncounted, which no padding reproduces",
                        )
                    extra = s - 1
            new_pairs.append((f * lo, f * (hi + extra)))
        stride = tuple(1 if c else s for s, c in zip(layer.stride, convert))
        return replace(
            layer,
            stride=stride,
            dilation=tuple(
                d * f if k > 1 else d for k, d, f in zip(layer.kernel, layer.dilation, factor)
            ),
            padding=Padding(tuple(new_pairs)),
            ceil_mode=layer.ceil_mode and any(s > 1 for s in stride),
        )

    def gate(self, path: str, module: nn.Module, kind: str, st: _State) -> None:
        factor = st[1]
        if all(f == 1 for f in factor):
            return
        if self.gates == "dense":
            self.dense_gates.append(path)
            return
        seen = self.states.get(id(module))
        if seen is not None:
            if seen != st:
                raise self.refuse(path, module, "it is shared by places of other strides")
            return
        self.states[id(module)] = st
        new = LatticeGate(module, kind, factor)
        self.plans[id(module)] = (
            new,
            Change(
                path,
                f"{type(module).__name__} (pools the whole map)",
                f"LatticeGate(lattice={factor})",
                ("global pool",),
                False,
                "the gate pools the a-trous lattice, as the original pools its map",
            ),
        )


_GATE_MODES = ("lattice", "dense")


def dilate(
    model: nn.Module,
    output_stride: int,
    *,
    gates: str = "lattice",
    inplace: bool = False,
) -> tuple[nn.Module, SurgeryReport]:
    """Trade the later strides of a ResNet for dilation, exactly (the a-trous identity).

    Once the actual stride reaches ``output_stride``, each later stride ``s`` becomes 1
    and multiplies the lattice factor ``f`` of everything after it; every later conv and
    pool gets dilation ``d*f`` and pads ``(f*lo, f*hi)`` (a ceil-mode pool's overhang
    becomes ``f*(s-1)`` explicit end padding, excluded from averages). ResNet-D's
    average-pool shortcut, ``AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False)``,
    thus becomes a stride-1 pool with pads ``(0, 1)`` at the first dilated stage and pads
    ``(0, 2)`` with dilation 2 one stage deeper. In eval mode the dilated model's last
    feature map subsampled at ``[..., ::r, ::r]`` (``r`` = old / new output stride)
    equals the original's.

    Squeeze-excitation gates (timm SE/ESE/ECA) in dilated stages become
    :class:`LatticeGate` modules that pool the lattice (``gates="lattice"``, exact);
    ``gates="dense"`` keeps them pooling the whole dense map, as timm's own
    ``output_stride`` does (not exact). No weight is touched and the ``state_dict`` keys
    and shapes stay the same.

    Args:
        model: a torchvision ResNet/ResNeXt/Wide-ResNet or a timm ResNet-family model.
        output_stride: the new output stride: a stride the model reaches (1, 2, 4, 8, 16
            for a ResNet), at most its current one.
        gates: ``"lattice"`` or ``"dense"``.
        inplace: modify ``model`` itself instead of a deep copy.

    Returns:
        ``(model, report)``; the report lists every changed module.

    Raises:
        SurgeryError: naming the first module it cannot handle, or for an output stride
            the model cannot reach.

    Example:
        >>> from torchvision.models import resnet18
        >>> net = resnet18().eval()
        >>> os8, report = dilate(net, 8)
        >>> os8.layer4[0].conv1.dilation, os8.layer4[0].conv1.padding
        ((2, 2), (2, 2))
        >>> x = torch.randn(1, 3, 64, 64)
        >>> body = lambda m: torch.nn.Sequential(*list(m.children())[:-2])
        >>> bool((body(os8)(x)[..., ::4, ::4] - body(net)(x)).abs().max() < 1e-4)
        True
    """
    _check_model(model, "dilate")
    _check_bool(inplace, "inplace", "dilate")
    if isinstance(output_stride, bool) or not isinstance(output_stride, int):
        raise TypeError(
            f"dilate(): output_stride must be an int (8 or 16 for a ResNet), got "
            f"{type(output_stride).__name__} ({output_stride!r})"
        )
    if not isinstance(gates, str) or gates not in _GATE_MODES:
        raise SurgeryError(
            f"dilate(): gates must be one of {', '.join(map(repr, _GATE_MODES))}, got {gates!r}"
        )
    dry = _Dilation(model, None, gates)
    final = dry.run()[0]
    reachable = sorted({1, *dry.points})
    if output_stride not in reachable:
        raise SurgeryError(
            f"dilate(): output_stride={output_stride!r} is not a stride this model reaches; "
            f"accepted: {reachable} (its current output stride is {final[0]})"
        )
    out = model if inplace else copy.deepcopy(model)
    walk = _Dilation(out, output_stride, gates)
    reached = walk.run()[0]
    if any(a != output_stride for a in reached):  # pragma: no cover - a walk invariant
        raise SurgeryError(f"dilate(): reached output stride {reached}, not {output_stride}")
    report = SurgeryReport("dilate")
    for key, (new, change) in walk.plans.items():
        _replace(out, walk.by_id[key], new)
        report.changes.append(change)
    order = {p: i for i, (p, _) in enumerate(out.named_modules(remove_duplicate=False))}
    report.changes.sort(key=lambda c: order.get(c.path, len(order)))
    info = getattr(out, "feature_info", None)
    if isinstance(info, list):
        for entry in info:
            if isinstance(entry, dict) and entry.get("module") in walk.outputs:
                entry["reduction"] = walk.outputs[entry["module"]]
    if walk.dense_gates:
        report.notes.append(
            f"gates='dense': {len(walk.dense_gates)} gate(s) pool the dense map "
            f"({', '.join(walk.dense_gates[:3])}{', ...' if len(walk.dense_gates) > 3 else ''}); "
            "the identity is approximate"
        )
    if walk.plans:
        report.notes.append(
            "the classifier head pools the whole dense map: the identity holds for the "
            "last feature map, and for BatchNorm in eval mode"
        )
    return out, report
