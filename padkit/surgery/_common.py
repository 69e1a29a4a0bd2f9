"""What convert and dilate share: the report, the facts of a conv or pool, module paths."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import torch
from torch import Tensor, nn

from .. import nn as PN
from .._made import stand_in
from ..op import TORCH_KINDS, Op
from ..recognise import layer_kind
from ..spec import (
    PaddingError,
)

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
class FoldedPad:
    """A pad the model computed before a layer, which the layer now computes (convert).

    Attributes:
        source: the path of the module that padded: a pad module, or the module whose own
            code calls the pad (``''`` the model itself).
        rule: the pads, e.g. ``"static ((0, 1), (0, 1))"`` or ``"TF 'same' (amounts
            computed from the input size)"``.
        fill: what the pads hold: ``"zeros"``, a pad mode (``"reflect"``, ...) or, before a
            max pool, the value.
    """

    source: str
    rule: str
    fill: str

    def __str__(self) -> str:
        return f"{self.rule} {self.fill} pad of {self.source or '<root>'!r}"


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
        takes: the pad made before this layer that it now computes (convert's folds), or
            None.
    """

    path: str
    before: str
    after: str
    what: tuple[str, ...]
    numbers_change: bool = False
    detail: str = ""
    at_input: bool | None = None
    takes: FoldedPad | None = None


@dataclass(frozen=True)
class Skip:
    """A candidate module that surgery left as it was, and why."""

    path: str
    reason: str


@dataclass
class SurgeryReport:
    """What :func:`convert` or :func:`dilate` did.

    Attributes:
        operation: ``"convert"``, ``"dilate"``, ``"fuse_pads"`` or ``"lower"``.
        changes: every module replaced or modified, in model order.
        skipped: candidates left unchanged, with the reason.
        notes: remarks that concern the model as a whole.

    Example:
        >>> from padkit.surgery import convert
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
    def size_dependent(self) -> list[str]:
        """The paths of the changed layers fixed to one input size (:func:`lower`)."""
        return [c.path for c in self.changes if "input_size" in c.what]

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
#: the padkit classes surgery builds, and the torch classes of the same kinds
_PADKIT: dict[type, tuple[str, int]] = {cls: key for key, cls in _BUILD.items()}
_TORCH: dict[type, tuple[str, int]] = {
    cls: key for cls, key in TORCH_KINDS.items() if key[0] != "conv_transpose"
}
_CONV: dict[type, int] = {cls: nd for cls, (kind, nd) in _TORCH.items() if kind == "conv"}

#: the facts of a checked conv or pool (surgery's name for padkit's record)
_Layer = Op


def _layer_kind(module: nn.Module) -> tuple[str, int] | None:
    """(kind, nd) for a conv or pool (not transposed) that surgery replaces by a padkit
    layer: :func:`padkit.recognise.layer_kind` says its forward runs just its attributes,
    and its class is torch's or padkit's own (or a padkit layer kept in a model's own
    subclass by :func:`_build`). A model's own subclass keeps its class: surgery reads what
    its call computes (:func:`padkit.recognise.owns`) and changes it in place."""
    found = layer_kind(module, plain=True)
    if found is None or found[0] == "conv_transpose":
        return None
    t = type(module)
    return found if t in _TORCH or t in _PADKIT or "_padkit_kind" in t.__dict__ else None


def _layer(module: nn.Module) -> Op | None:
    """The record of a torch or padkit conv/pool (:func:`_layer_kind`; a model's own
    subclass is read from its calls)."""
    if _layer_kind(module) is None:
        return None
    return Op.from_module(module)


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
            padding_value=layer.padding_value,
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
    return _keep_class(new, old)


def _kept_class(padkit_cls: type, orig: type) -> type | None:
    """The class named like ``orig`` deriving from ``padkit_cls`` then ``orig`` (cached);
    None where Python cannot combine them."""
    try:
        return stand_in(
            _kept_class,
            (padkit_cls, orig),
            orig,
            (padkit_cls, orig),
            lambda: {"_padkit_kind": _PADKIT[padkit_cls], "_padkit_orig": orig},
        )
    except TypeError:
        return None


def _keep_class(new: nn.Module, old: nn.Module) -> nn.Module:
    """``new`` (a padkit layer) made an instance of ``old``'s class too when ``old`` is a
    model's own subclass of a torch layer that keeps torch's forward (not timm's
    same-padding layers, whose forward pads) (Hugging Face
    EfficientNet's depthwise conv): the class is named like ``old``'s, derives from the
    padkit layer first (its forward runs) and from ``old``'s class, and the plain
    attributes ``old``'s ``__init__`` set are carried over. Tools that find layers by type
    or class name still find it."""
    t = type(old)
    orig: type = t.__dict__.get("_padkit_orig", t)
    if orig in _TORCH or orig in _PADKIT or not isinstance(old, tuple(_TORCH)):
        return new
    if orig is t and layer_kind(old, plain=True) is None:
        return new  # a forward of its own: a padkit forward would drop what it does
    cls = _kept_class(type(new), orig)
    if cls is None:  # pragma: no cover - a metaclass or layout conflict
        return new
    for name, value in old.__dict__.items():
        if name not in new.__dict__ and not name.startswith("_"):
            new.__dict__[name] = value
    new.__class__ = cls
    return new


def _pads_text(layer: _Layer) -> str:
    pairs = layer.static_pairs()
    if pairs is not None:
        return str(tuple(pairs))
    if layer.padding.pre is not None:
        return f"({layer.padding.describe()})"
    return (
        "(" + ", ".join(repr(a) if isinstance(a, str) else str(a) for a in layer.padding.axes) + ")"
    )


def _brief(module: nn.Module, layer: _Layer | None = None) -> str:
    """``'Conv2d k=(3, 3) s=(2, 2) d=(1, 1) pads=((1, 1), (1, 1))'`` and the like."""
    name = type(module).__name__
    if type(module) in _PADKIT:
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


# ----------------------------------------------------------------------------- probes

#: dilate probes a model at spatial size ``PROBE`` and ``PROBE + STEP``: the dims of a tensor
#: whose sizes differ between the two runs are its spatial axes, and ``STEP / (difference)``
#: is the stride of that axis relative to the input (exact for any conv or pool whose
#: strides divide ``STEP``, whatever its padding or ceil mode)
PROBE = 64
STEP = 256

Shape = tuple[int, ...]


def _tensors(value: Any) -> Iterator[Tensor]:
    """The tensors in ``value`` (a tensor, or nested lists, tuples and dicts), in order."""
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def probe_input(shape: Shape, extra: int, like: Tensor | None) -> Tensor:
    """A seeded random input of ``shape`` grown by ``extra`` per spatial axis, on ``like``'s
    device and dtype."""
    grown = (*shape[:2], *(n + extra for n in shape[2:]))
    if like is None:
        return torch.randn(grown, generator=torch.Generator().manual_seed(0))
    g = torch.Generator(like.device).manual_seed(0)
    return torch.randn(grown, generator=g, device=like.device, dtype=like.dtype)


def probe_like(model: nn.Module, fname: str) -> tuple[tuple[int, ...], Tensor]:
    """(1, channels, PROBE, ...) from the first conv in the model, and its weight (for the
    device and dtype of the probe)."""
    for module in model.modules():
        m: Any = module
        if isinstance(module, nn.modules.conv._ConvNd) or _layer(module) is not None:
            channels = getattr(m, "in_channels", None)
            weight = getattr(m, "weight", None)
            if isinstance(channels, int) and isinstance(weight, Tensor):
                nd = weight.dim() - 2
                return (1, channels, *([PROBE] * nd)), weight
    raise SurgeryError(
        f"{fname}(): {type(model).__name__} holds no convolution to take the input's channels "
        f"from; {fname} works on convolutional networks"
    )


def strides(first: Shape, second: Shape) -> dict[int, Fraction]:
    """The spatial dims of one tensor (those that grew from ``PROBE`` to ``PROBE + STEP``)
    and their strides."""
    return {d: Fraction(STEP, b - a) for d, (a, b) in enumerate(zip(first, second)) if a != b}
