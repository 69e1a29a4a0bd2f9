"""Reading one torch call or one layer into padkit's terms.

A functional conv/pool call (``F.conv2d``, ``F.max_pool2d``, ``F.avg_pool2d`` and the
``torch.*`` names they dispatch to) becomes an :class:`~padkit.op.Op`, a pad call
(``F.pad``/``torch.constant_pad_nd``) a :class:`PadCall`; a conv or pool module is read by
:func:`module_op` (any subclass, by its attributes); :func:`owns` says whether a call made by
a module's own code computes what the module's attributes say; :func:`layer_kind` is the one
answer to "is this module a conv, transposed conv or pool, and does its forward run just
that"; :func:`padding_pairs` (over :func:`torch_pairs`) turns a torch or padkit layer's
``padding`` into ``(lo, hi)`` pairs. Nothing here matches model classes: torch's layer
classes are read as bases, what a subclass computes is read from its calls (:func:`owns`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from torch import Tensor, nn

from ..op import Op, _kind_of
from ..spec import Padding, PaddingError, _tuple_of

__all__ = [
    "FUNCTION_KINDS",
    "REDUCTIONS",
    "PadCall",
    "Pairs",
    "base_name",
    "call_op",
    "call_pad",
    "layer_kind",
    "module_op",
    "owns",
    "padding_pairs",
    "torch_pairs",
]

Pairs = tuple[tuple[int, int], ...]


#: functional names (after stripping underscores and ``_with_indices``) -> (kind, nd)
FUNCTION_KINDS: dict[str, tuple[str, int]] = {
    **{f"conv{n}d": ("conv", n) for n in (1, 2, 3)},
    **{f"max_pool{n}d": ("max", n) for n in (1, 2, 3)},
    **{f"avg_pool{n}d": ("avg", n) for n in (1, 2, 3)},
}


#: reductions over tensor axes (which may be spatial)
REDUCTIONS = frozenset(
    {
        "mean",
        "sum",
        "nansum",
        "nanmean",
        "amax",
        "amin",
        "max",
        "min",
        "std",
        "var",
        "logsumexp",
        "norm",
        "prod",
        "argmax",
        "argmin",
    }
)


def base_name(func: Any) -> str:
    """``torch.conv2d`` -> ``'conv2d'``, ``F._max_pool2d`` -> ``'max_pool2d'``..."""
    name = func if isinstance(func, str) else getattr(func, "__name__", type(func).__name__)
    name = str(name).strip("_")
    if name.endswith("_with_indices"):
        name = name[: -len("_with_indices")]
    return name


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], i: int, name: str, default: Any) -> Any:
    if len(args) > i:
        return args[i]
    return kwargs.get(name, default)


def call_op(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Op | None:
    """The checked record of a functional conv or pool call, or None for anything else
    (or a call whose arguments padkit does not read)."""
    found = FUNCTION_KINDS.get(base_name(func))
    if found is None:
        return None
    kind, nd = found
    x = _arg(args, kwargs, 0, "input", None)
    if not isinstance(x, Tensor):
        return None
    try:
        if kind == "conv":
            weight = _arg(args, kwargs, 1, "weight", None)
            if not isinstance(weight, Tensor) or weight.dim() != nd + 2:
                return None
            padding = _arg(args, kwargs, 4, "padding", 0)
            if isinstance(padding, str):
                padding = "same_static" if padding == "same" else padding
            return Op.make(
                "conv",
                nd,
                tuple(weight.shape[2:]),
                _arg(args, kwargs, 3, "stride", 1),
                padding,
                _arg(args, kwargs, 5, "dilation", 1),
                groups=_arg(args, kwargs, 6, "groups", 1),
                where=base_name(func),
            )
        kernel = _arg(args, kwargs, 1, "kernel_size", None)
        stride = _arg(args, kwargs, 2, "stride", None)
        padding = _arg(args, kwargs, 3, "padding", 0)
        if kind == "max":
            return Op.make(
                "max",
                nd,
                kernel,
                stride if stride not in (None, [], ()) else None,
                padding,
                _arg(args, kwargs, 4, "dilation", 1),
                ceil_mode=bool(_arg(args, kwargs, 5, "ceil_mode", False)),
                return_indices=bool(_arg(args, kwargs, 6, "return_indices", False)),
                where=base_name(func),
            )
        return Op.make(
            "avg",
            nd,
            kernel,
            stride if stride not in (None, [], ()) else None,
            padding,
            1,
            ceil_mode=bool(_arg(args, kwargs, 4, "ceil_mode", False)),
            count_include_pad=bool(_arg(args, kwargs, 5, "count_include_pad", True)),
            divisor_override=_arg(args, kwargs, 6, "divisor_override", None),
            where=base_name(func),
        )
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class PadCall:
    """One ``F.pad`` call on the spatial axes: per-axis ``(lo, hi)`` pairs (first spatial
    axis first, as padkit orders them), its mode and fill value."""

    pairs: Pairs
    mode: str
    value: float


def call_pad(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> PadCall | None:
    """The :class:`PadCall` of a functional pad call (``F.pad``/``torch.constant_pad_nd``),
    or None for anything else."""
    name = base_name(func)
    if name not in ("pad", "constant_pad_nd"):
        return None
    x = _arg(args, kwargs, 0, "input", None)
    pad = _arg(args, kwargs, 1, "pad", None)
    if not isinstance(x, Tensor) or not isinstance(pad, (list, tuple)) or len(pad) % 2:
        return None
    if not all(isinstance(p, int) or (isinstance(p, Tensor) and p.dim() == 0) for p in pad):
        return None
    flat = [int(p) for p in pad]
    mode = (
        "constant" if name == "constant_pad_nd" else str(_arg(args, kwargs, 2, "mode", "constant"))
    )
    value = _arg(args, kwargs, 3 if name == "pad" else 2, "value", 0.0)
    n = len(flat) // 2
    pairs = tuple((flat[2 * i], flat[2 * i + 1]) for i in reversed(range(n)))
    return PadCall(pairs, mode, float(value) if value is not None else 0.0)


def layer_kind(module: Any, *, plain: bool = False) -> tuple[str, int] | None:
    """``(kind, nd)`` of a conv, transposed conv or pool module (``kind`` one of ``'conv'``,
    ``'conv_transpose'``, ``'max'``, ``'avg'``, ``'lp'``): an instance of one of torch's
    layers, padkit's and any subclass included, else None.

    With ``plain``, only a layer whose forward is torch's or padkit's own, so that calling
    it computes exactly what its attributes say; a subclass with a forward of its own
    (a pad in code, a weight transform, timm's same-padding layers) answers None, and what
    it computes is read from its calls (:func:`owns`). Every feature asks this one
    question: surgery's layer facts, convert's foreign-layer listing, streaming's planner
    and converter."""
    return _kind_of(module, subclasses=not plain, plain=plain)


def module_op(module: nn.Module) -> Op | None:
    """What a conv or pool module's attributes say (any subclass of torch's layers), or None."""
    try:
        return Op.from_module(module, subclasses=True)
    except (TypeError, ValueError):
        return None


def owns(module: nn.Module, op: Op, *, as_called: bool = False) -> bool:
    """Whether ``op`` (a call made by ``module``'s own code) computes what ``module``'s
    attributes say: same kind, kernel, stride, dilation, groups, static padding and pool
    flags. Such a module is a conv or pool whatever its class does to its weight first.

    With ``as_called``, the module is held to its ``padding`` attribute as torch keeps it
    (ints), which is what its call hands on, even where padkit reads the layer as padding
    TF 'same' (timm's ``Conv2dSame``, whose own code pads first: dilate re-derives that
    pad in code separately)."""
    own = module_op(module)
    if own is None or own.kind != op.kind or own.nd != op.nd:
        return False
    raw: Any = getattr(module, "padding", None)
    if as_called and raw is not None and not isinstance(raw, str):
        try:
            own = replace(own, padding=Padding.parse(raw, own.nd))
        except (TypeError, ValueError):
            return False
    return (
        own.kernel == op.kernel
        and own.stride == op.stride
        and own.dilation == op.dilation
        and own.groups == op.groups
        and own.static_pairs() is not None
        and own.static_pairs() == op.static_pairs()
        and (op.kind == "conv" or own.ceil_mode == op.ceil_mode)
        and own.count_include_pad == op.count_include_pad
    )


def torch_pairs(
    padding: Any, kernel: tuple[int, ...], dilation: tuple[int, ...]
) -> tuple[tuple[int, int], ...]:
    """The ``(lo, hi)`` pads per spatial axis of a torch layer's ``padding`` attribute (a
    transposed conv's: its crops): ints or a tuple as symmetric pairs, ``'valid'`` as 0,
    ``'same'`` split with the odd pixel at the end (torch's split)."""
    nd = len(kernel)
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * nd
        totals = [dd * (kk - 1) for kk, dd in zip(kernel, dilation)]
        return tuple((t // 2, t - t // 2) for t in totals)
    return tuple((p, p) for p in _tuple_of(padding, nd, "padding", minimum=0))


def padding_pairs(layer: Any, nd: int | None = None) -> list[tuple[int, int]]:
    """The ``(lo, hi)`` pads per spatial axis (first axis first) of a torch or padkit conv,
    transposed conv or pool, read from its ``padding`` (a padkit layer's ``pad_spec``
    resolved; a torch layer's by :func:`torch_pairs`).

    Raises:
        PaddingError: pads that depend on the input size (a padkit ``'same'`` spec), naming
            the layer's class.
    """
    if nd is None:
        ks = layer.kernel_size
        nd = len(ks) if isinstance(ks, (tuple, list)) else 1
    k = _tuple_of(layer.kernel_size, nd, "kernel_size")
    d = _tuple_of(getattr(layer, "dilation", 1), nd, "dilation")
    spec = getattr(layer, "pad_spec", None)
    if spec is not None and hasattr(spec, "is_explicit"):
        if not spec.is_explicit:
            raise PaddingError(
                f"{type(layer).__name__} pads {spec}: pads that depend on the input size"
            )
        s = _tuple_of(layer.stride, nd, "stride")
        return list(spec.resolve(k, s, d))
    return list(torch_pairs(getattr(layer, "padding", 0), k, d))
