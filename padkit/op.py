"""One record of a checked conv, transposed conv or pool: :class:`Op`.

Every module that needs to know "what is this conv or pool" asks this record: the layers
(built from their live attributes on each new input shape), the functional API, the ONNX
exporter, surgery, streaming and inspection. :meth:`Op.make` holds every normaliser and
refusal of the arguments; :meth:`Op.from_module` reads torch, timm and padkit layers. The
record is frozen and hashable, and derives what the modules need (static pads, pads for an
input size, output sizes, the ONNX ``auto_pad`` form, the value a torch ``.padding``
attribute shows).
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, compiler, nn

from .spec import (
    Padding,
    PaddingError,
    PaddingLike,
    _as_int,
    _tuple_of,
    conv_output_size,
    conv_transpose_output_size,
    pool_output_size,
)

__all__ = [
    "KINDS",
    "PADDING_MODES",
    "TORCH_KINDS",
    "Op",
    "check_output_padding",
    "check_padding_mode",
    "lowest_value",
    "max_pad_fill",
]

#: The op kinds: convolution, transposed convolution, and max/average/power-average pooling.
KINDS: tuple[str, ...] = ("conv", "conv_transpose", "max", "avg", "lp")
#: Conv ``padding_mode`` values, as torch names them.
PADDING_MODES: tuple[str, ...] = ("zeros", "reflect", "replicate", "circular")

Pairs = tuple[tuple[int, int], ...]


_PER_TENSOR = (torch.per_tensor_affine, torch.per_tensor_symmetric)


def lowest_value(x: Tensor) -> float:
    """What a max pool pads ``x`` with: a value no element of ``x`` is below.

    -inf for a floating-point tensor, the dtype's minimum for an integer one, and for a
    quantized tensor the lowest value its quantization represents, ``(qmin - zero_point) *
    scale`` (per channel: the least over the channels, which every channel's quantization
    clamps to its own ``qmin``). ``F.pad`` quantizes it back to ``qmin`` (exactly for the
    8-bit dtypes; a ``qint32`` fill is quantized in float32); the real 0.0 that
    ``torch.iinfo(torch.quint8).min`` would give is the zero point, above negative inputs.

    Example:
        >>> lowest_value(torch.zeros(2)), lowest_value(torch.zeros(2, dtype=torch.int8))
        (-inf, -128.0)

        A ``quint8`` tensor with scale 0.05 and zero point 60 gives ``(0 - 60) * 0.05``,
        -3.0.
    """
    dtype = x.dtype
    if dtype.is_floating_point:
        return float("-inf")
    if dtype == torch.bool:
        raise TypeError("max pooling does not support bool tensors")
    qmin = int(torch.iinfo(dtype).min)
    if not x.is_quantized:
        return float(qmin)
    if x.qscheme() in _PER_TENSOR:
        return (qmin - x.q_zero_point()) * x.q_scale()
    scales = x.q_per_channel_scales().double()
    zeros = x.q_per_channel_zero_points().double()
    return float(((qmin - zeros) * scales).min())


def check_padding_value(value: Any, *, name: str = "padding_value") -> float:
    """Validate a max pool's ``padding_value``: a real number (an int or a float, -inf
    meaning :func:`lowest_value`, the default), not NaN. Returns it as a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(
            f"{name} must be a float (-inf, the default, pads with the lowest value the input "
            f"holds; any other number pads with that number), got {type(value).__name__} "
            f"({value!r})"
        )
    v = float(value)
    if math.isnan(v):
        raise PaddingError(
            f"{name} must be a number that is not NaN (-inf, the default, or any other "
            f"float), got {value!r}"
        )
    return v


def max_pad_fill(x: Tensor, value: float = -math.inf, *, where: str = "") -> float:
    """What a max pool pads ``x`` with for ``padding_value=value``: :func:`lowest_value` for
    -inf (the default), else ``value`` itself, which must be one ``x`` can hold exactly.

    An integer tensor takes an integral value in its dtype's range; a quantized tensor a
    value its quantization represents exactly, ``(q - zero_point) * scale`` for an integer
    ``q`` in ``[qmin, qmax]`` (per channel: the same ``q`` on every channel, since a pad
    holds one integer). A floating-point tensor takes any value, rounded to its dtype as
    ``F.pad`` rounds it. Returns the float to pad ``x`` with (for a quantized tensor, the
    value whose quantization is ``q``)."""
    if value == -math.inf:
        return lowest_value(x)
    dtype = x.dtype
    if dtype.is_floating_point:
        return value
    prefix = f"{where}: " if where else ""
    if dtype == torch.bool:
        raise TypeError(f"{prefix}max pooling does not support bool tensors")
    info = torch.iinfo(dtype)
    if not x.is_quantized:
        if value != math.floor(value) or not info.min <= value <= info.max:
            raise PaddingError(
                f"{prefix}padding_value={value!r} cannot pad a {dtype} input exactly: it takes "
                f"an integer in [{info.min}, {info.max}] (or -inf, its minimum)"
            )
        return value
    q = quantized_pad(x, value, where=where)
    if x.qscheme() in _PER_TENSOR:
        return float((q - x.q_zero_point()) * x.q_scale())
    return value


def quantized_pad(x: Tensor, value: float, *, where: str = "") -> int:
    """The integer ``q`` whose dequantization is exactly ``value`` on quantized ``x`` (on
    every channel for per-channel quantization), or a :class:`PaddingError`."""
    info = torch.iinfo(x.dtype)
    if x.qscheme() in _PER_TENSOR:
        pairs = [(float(x.q_scale()), int(x.q_zero_point()))]
    else:
        scales = x.q_per_channel_scales().double().tolist()
        zeros = x.q_per_channel_zero_points().tolist()
        pairs = list(zip(scales, (int(z) for z in zeros)))
    found: set[int] = set()
    for scale, zero in pairs:
        q = round(value / scale) + zero
        if not info.min <= q <= info.max or not math.isclose(
            (q - zero) * scale, value, rel_tol=1e-9, abs_tol=1e-12 * scale
        ):
            found.add(info.min - 1)  # no q represents it
            break
        found.add(q)
    if len(found) != 1 or next(iter(found)) < info.min:
        prefix = f"{where}: " if where else ""
        raise PaddingError(
            f"{prefix}padding_value={value!r} is not exactly representable by the input's "
            f"quantization ({x.qscheme()}, {x.dtype}, scales and zero points "
            f"{pairs[:4]}{'...' if len(pairs) > 4 else ''}); pass a value (q - zero_point) * "
            "scale for an integer q in the dtype's range (the same q on every channel), or "
            "-inf for the lowest representable value"
        )
    return next(iter(found))


def check_padding_mode(
    padding_mode: Any, nd: int | None = None, *, name: str = "padding_mode"
) -> str | tuple[str, ...]:
    """Validate a conv ``padding_mode``: one of :data:`PADDING_MODES`, or one per spatial axis
    (e.g. ``("replicate", "zeros", "zeros")`` to repeat the first frame of a causal video
    conv while padding space with zeros). Returns it (a tuple for a per-axis list)."""
    if isinstance(padding_mode, (tuple, list)):
        modes = tuple(padding_mode)
        if nd is not None and len(modes) != nd:
            raise PaddingError(
                f"{name} must be one of {PADDING_MODES} or a tuple of {nd} of them (one per "
                f"spatial axis), got {padding_mode!r}"
            )
        for m in modes:
            if not isinstance(m, str) or m not in PADDING_MODES:
                raise PaddingError(
                    f"{name} entries must be one of {PADDING_MODES}, got {m!r} in {padding_mode!r}"
                )
        return modes[0] if len(set(modes)) == 1 and nd is None else modes
    if not isinstance(padding_mode, str) or padding_mode not in PADDING_MODES:
        raise PaddingError(
            f"{name} must be one of {PADDING_MODES} (or a tuple of them, one per spatial axis), "
            f"got {padding_mode!r}"
        )
    return padding_mode


def check_output_padding(op: Sequence[int], s: Sequence[int], d: Sequence[int]) -> None:
    """torch's rule: ``output_padding`` < max(stride, dilation) per axis."""
    for i, (o, ss, dd) in enumerate(zip(op, s, d)):
        if o >= max(ss, dd):
            raise PaddingError(
                f"output_padding[{i}]={o} must be smaller than stride ({ss}) or dilation ({dd}); "
                f"got output_padding={tuple(op)!r}"
            )


def _check_bool(value: Any, name: str) -> bool:
    """torch's flags are bools; 0/1 (ints) are accepted as torch accepts them."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {type(value).__name__} ({value!r})")


def _pool_stride(stride: Any, kernel: tuple[int, ...], nd: int) -> tuple[int, ...]:
    """A pool's stride: None or an empty list means "the kernel size", as in torch."""
    if stride is None or (
        (isinstance(stride, Sequence) and not isinstance(stride, str)) and (len(stride) == 0)
    ):
        return kernel
    return _tuple_of(stride, nd, "stride")


def _prefixed(where: str, err: Exception) -> Exception:
    return type(err)(f"{where}: {err}") if where else err


@dataclass(frozen=True)
class Op:
    """The checked facts of one conv, transposed conv or pool, in padkit's terms.

    Attributes:
        kind: one of :data:`KINDS`.
        nd: the number of spatial axes.
        kernel, stride, dilation: one int per spatial axis.
        padding: the padding rule, expanded to ``nd`` axes (for a transposed conv, what it
            crops from the full output).
        groups: conv groups (1 for pools).
        padding_mode: a conv's mode, or one per axis.
        ceil_mode, count_include_pad, divisor_override, return_indices, norm_type: the pool
            flags (their torch defaults for other kinds).
        output_padding: a transposed conv's extra end length (zeros for other kinds).
        padding_value: what a max pool's pads hold: -inf (the default) for the lowest value
            the input holds (:func:`lowest_value`), or any other number (-inf for other
            kinds).

    Example:
        >>> op = Op.make("max", 2, [3, 3], [], padding="same")
        >>> op.stride, op.pairs_at((8, 7))
        ((3, 3), ((0, 1), (1, 1)))
    """

    kind: str
    nd: int
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    padding: Padding
    ceil_mode: bool = False
    count_include_pad: bool = True
    divisor_override: int | None = None
    return_indices: bool = False
    padding_mode: str | tuple[str, ...] = "zeros"
    groups: int = 1
    output_padding: tuple[int, ...] = ()
    norm_type: float | None = None
    padding_value: float = -math.inf

    # ------------------------------------------------------------------ building

    @classmethod
    def make(
        cls,
        kind: str,
        nd: int,
        kernel_size: Any,
        stride: Any = None,
        padding: PaddingLike = 0,
        dilation: Any = 1,
        *,
        groups: Any = 1,
        padding_mode: Any = "zeros",
        ceil_mode: Any = False,
        count_include_pad: Any = True,
        divisor_override: Any = None,
        return_indices: Any = False,
        output_padding: Any = 0,
        norm_type: Any = None,
        padding_value: Any = -math.inf,
        where: str = "",
    ) -> Op:
        """Normalise and check every argument; ``where`` prefixes error messages.

        Raises:
            TypeError: an argument has a wrong type.
            PaddingError: the padding (or a size that padding depends on) is malformed.
            ValueError: another argument has an invalid value (groups, divisor_override...).
        """
        args = (kind, nd, kernel_size, stride, padding, dilation, groups, padding_mode)
        flags = (ceil_mode, count_include_pad, divisor_override, return_indices)
        # (torch.compile traces the checks themselves: no Python-side cache there)
        key = (
            None
            if compiler.is_compiling()
            else _typed((*args, *flags, output_padding, norm_type, padding_value, where))
        )
        if key is not None:
            return _make_cached(key)
        return cls._make(
            kind,
            nd,
            kernel_size,
            stride,
            padding,
            dilation,
            groups=groups,
            padding_mode=padding_mode,
            ceil_mode=ceil_mode,
            count_include_pad=count_include_pad,
            divisor_override=divisor_override,
            return_indices=return_indices,
            output_padding=output_padding,
            norm_type=norm_type,
            padding_value=padding_value,
            where=where,
        )

    @classmethod
    def _make(
        cls,
        kind: str,
        nd: int,
        kernel_size: Any,
        stride: Any,
        padding: PaddingLike,
        dilation: Any,
        *,
        groups: Any,
        padding_mode: Any,
        ceil_mode: Any,
        count_include_pad: Any,
        divisor_override: Any,
        return_indices: Any,
        output_padding: Any,
        norm_type: Any,
        padding_value: Any = -math.inf,
        where: str = "",
    ) -> Op:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        try:
            k = _tuple_of(kernel_size, nd, "kernel_size")
            if kind in ("conv", "conv_transpose"):
                s = _tuple_of(1 if stride is None else stride, nd, "stride")
            else:
                s = _pool_stride(stride, k, nd)
            d = _tuple_of(dilation, nd, "dilation")
            spec = Padding.parse(padding, nd)
            mode = check_padding_mode(padding_mode, nd)
            if isinstance(mode, tuple) and len(set(mode)) == 1:
                mode = mode[0]
            g = _as_int(groups, "groups")
            if g < 1:
                raise ValueError(f"groups must be a positive int, got groups={groups!r}")
            ceil = _check_bool(ceil_mode, "ceil_mode")
            include = _check_bool(count_include_pad, "count_include_pad")
            indices = _check_bool(return_indices, "return_indices")
            divisor = None
            if divisor_override is not None:
                divisor = _as_int(divisor_override, "divisor_override")
                if divisor == 0:
                    raise PaddingError(
                        f"divisor_override must not be zero, got {divisor_override!r}"
                    )
            op: tuple[int, ...] = ()
            if kind == "conv_transpose":
                op = _tuple_of(output_padding, nd, "output_padding", minimum=0)
                check_output_padding(op, s, d)
            norm: float | None = None
            if kind == "lp":
                numeric = isinstance(norm_type, (int, float)) and not isinstance(norm_type, bool)
                if not numeric or not (norm_type > 0 or norm_type == -math.inf):
                    # the divisor and the norm shape the pool's padded windows: PaddingError
                    # (-inf, torch's smallest |x| per window, reads zero pads as zero)
                    raise PaddingError(
                        f"norm_type must be a positive number or -inf, got {norm_type!r}"
                    )
                norm = float(norm_type)
            fill = check_padding_value(padding_value)
            if kind != "max" and fill != -math.inf:
                raise PaddingError(
                    f"padding_value is a max pool's (a {kind} op pads as its kind does), "
                    f"got padding_value={padding_value!r}"
                )
            if fill != -math.inf and indices:
                raise PaddingError(
                    f"return_indices=True needs padding_value=-inf (a window whose maximum is "
                    f"a pad has no input index), got padding_value={padding_value!r}"
                )
            if kind == "conv_transpose" and spec.pre is not None:
                raise PaddingError(
                    f"a transposed conv crops its output rather than padding its input, so "
                    f"static pads before a rule mean nothing there, got padding "
                    f"{spec.describe()}"
                )
            if kind == "conv_transpose" and mode != "zeros":
                raise PaddingError(
                    f"padding_mode must be 'zeros' for a transposed conv (it crops its output "
                    f"rather than padding its input), got {padding_mode!r}"
                )
        except (PaddingError, TypeError, ValueError) as err:
            raise _prefixed(where, err) from None
        record = cls(
            kind,
            nd,
            k,
            s,
            d,
            spec,
            ceil_mode=ceil,
            count_include_pad=include,
            divisor_override=divisor,
            return_indices=indices,
            padding_mode=mode,
            groups=g,
            output_padding=op,
            norm_type=norm,
            padding_value=fill,
        )
        if kind != "conv_transpose":  # a transposed conv's rules crop (functional.transpose_crops)
            try:
                record.static_pairs()  # a rule that cannot hold for these sizes fails here
            except (PaddingError, TypeError, ValueError) as err:
                raise _prefixed(where, err) from None
        return record

    @classmethod
    def from_module(cls, module: Any, *, where: str = "", subclasses: bool = False) -> Op | None:
        """The record of a torch, timm or padkit conv/pool (live attributes), else None.

        A torch layer's ``padding='same'`` reads as ``'same_static'`` (torch's split, odd
        pixel at the end) and ``'valid'`` as 0; a padkit layer's padding is its spec; timm's
        ``Conv2dSame``/``MaxPool2dSame``/``AvgPool2dSame`` (and layers flagged ``same_pad``,
        such as ``StdConv2dSame``) read as TF ``'same'``. A subclass that overrides
        ``forward`` (other than padkit's own layers) is foreign: None, unless
        ``subclasses=True`` asks for what its attributes say (inspection).
        """
        found = _kind_of(module, subclasses=subclasses)
        if found is None:
            return None
        kind, nd = found
        m: Any = module
        spec: PaddingLike
        timm_same = pads_same_every_forward(module)
        if timm_same:
            spec = "same"
        elif isinstance(getattr(m, "pad_spec", None), Padding):
            spec = m.pad_spec
        else:
            spec = getattr(m, "padding", 0)  # torch's LPPool has none
            if isinstance(spec, str):
                spec = "same_static" if spec == "same" else spec
        common: dict[str, Any] = {"where": where or type(module).__name__}
        if kind in ("conv", "conv_transpose"):
            mode = m.padding_mode
            return cls.make(
                kind,
                nd,
                m.kernel_size,
                m.stride,
                spec,
                m.dilation,
                groups=m.groups,
                padding_mode=mode,
                output_padding=getattr(m, "output_padding", 0),
                **common,
            )
        return cls.make(
            kind,
            nd,
            m.kernel_size,
            m.stride,
            spec,
            getattr(m, "dilation", 1),
            ceil_mode=m.ceil_mode,
            count_include_pad=getattr(m, "count_include_pad", True),
            divisor_override=getattr(m, "divisor_override", None),
            # timm's MaxPool2dSame hands its ceil_mode to torch as return_indices, and its
            # forward never returns indices
            return_indices=getattr(m, "return_indices", False) and not timm_same,
            norm_type=getattr(m, "norm_type", None),
            # (a padkit max pool's: another class's attribute of that name may mean other pads)
            padding_value=getattr(m, "padding_value", -math.inf)
            if kind == "max" and any(c.__module__.startswith("padkit.") for c in type(m).__mro__)
            else -math.inf,
            **common,
        )

    # ------------------------------------------------------------------ derived

    @property
    def is_pool(self) -> bool:
        return self.kind in ("max", "avg", "lp")

    @property
    def neutral_pads(self) -> bool:
        """Whether the pads never win a max pool (``padding_value`` -inf, the lowest value):
        torch's own symmetric pool padding and ceil-mode overhang compute the same, so the
        plans that rely on them apply. True for other kinds."""
        return self.padding_value == -math.inf

    @property
    def k_eff(self) -> tuple[int, ...]:
        """The dilated kernel extent per axis, ``d*(k-1)+1``."""
        return tuple(d * (k - 1) + 1 for k, d in zip(self.kernel, self.dilation))

    @property
    def needs_input_size(self) -> bool:
        """Whether the pads depend on the input size (TF ``'same'`` at stride > 1, Caffe)."""
        return self.padding.ceil_mode or self.padding.needs_input_size(self.stride)

    def static_pairs(self) -> Pairs | None:
        """The ``(lo, hi)`` pads per axis when they do not depend on the input size."""
        if self.needs_input_size:
            return None
        return self.padding.resolve(self.kernel, self.stride, self.dilation)

    def pairs_at(self, sizes: Sequence[int]) -> Pairs:
        """The ``(lo, hi)`` pads per axis for an input of spatial size ``sizes``."""
        return self.padding.resolve(self.kernel, self.stride, self.dilation, tuple(sizes))

    def output_size(self, sizes: Sequence[int]) -> tuple[int, ...]:
        """The spatial output size for an input of spatial size ``sizes``.

        Example:
            >>> Op.make("conv", 2, 3, 2, "same").output_size((7, 8))
            (4, 4)
        """
        pairs = self.pairs_at(sizes)
        if self.kind == "conv":
            return tuple(
                conv_output_size(n, k, s, d, lo, hi)
                for n, k, s, d, (lo, hi) in zip(
                    sizes, self.kernel, self.stride, self.dilation, pairs
                )
            )
        if self.kind == "conv_transpose":
            return tuple(
                conv_transpose_output_size(n, k, s, d, lo, hi, op)
                for n, k, s, d, (lo, hi), op in zip(
                    sizes, self.kernel, self.stride, self.dilation, pairs, self.output_padding
                )
            )
        ceil = self.ceil_mode or self.padding.ceil_mode
        return tuple(
            pool_output_size(n, k, s, d, lo, hi, ceil)
            for n, k, s, d, (lo, hi) in zip(sizes, self.kernel, self.stride, self.dilation, pairs)
        )

    def torch_padding(self) -> Any:
        """What a torch ``.padding`` attribute shows: torch's symmetric tuple where one
        exists (an int for pools whose axes agree), else the :class:`Padding` itself."""
        static = self.static_pairs()
        if static is None or self.padding.ceil_mode or any(lo != hi for lo, hi in static):
            return self.padding
        form = tuple(lo for lo, _ in static)
        if self.is_pool and len(set(form)) == 1:
            return form[0]
        return form

    def onnx_padding(self) -> dict[str, Any]:
        """The ONNX attributes for this padding (``auto_pad`` or ``pads``)."""
        return self.padding.to_onnx(self.kernel, self.stride, self.dilation)


def _typed(value: Any) -> Any:
    """A cache key that tells ``1`` from ``1.0`` and ``True`` (equal, and equally hashed, in
    Python), or None where a value is unhashable (a list) and must be checked uncached."""
    t = type(value)
    if t is tuple:
        items = tuple(_typed(v) for v in value)
        return None if None in items else (tuple, items)
    if t is list or t is dict or t is set:
        return None
    return (t, value)


def _untyped(key: Any) -> Any:
    t, value = key
    return tuple(_untyped(v) for v in value) if t is tuple else value


@functools.lru_cache(maxsize=4096)
def _make_cached(key: Any) -> Op:
    """``Op.make`` for hashable arguments: a layer or function called again with the same
    arguments gets the same (immutable) record without re-checking them."""
    (
        kind,
        nd,
        kernel,
        stride,
        padding,
        dilation,
        groups,
        mode,
        ceil,
        include,
        divisor,
        indices,
        output_padding,
        norm_type,
        padding_value,
        where,
    ) = _untyped(key)
    return Op._make(
        kind,
        nd,
        kernel,
        stride,
        padding,
        dilation,
        groups=groups,
        padding_mode=mode,
        ceil_mode=ceil,
        count_include_pad=include,
        divisor_override=divisor,
        return_indices=indices,
        output_padding=output_padding,
        norm_type=norm_type,
        padding_value=padding_value,
        where=where,
    )


# ----------------------------------------------------------------------------- module kinds

#: torch's conv and pool classes: (kind, number of spatial axes)
TORCH_KINDS: dict[type, tuple[str, int]] = {
    nn.Conv1d: ("conv", 1),
    nn.Conv2d: ("conv", 2),
    nn.Conv3d: ("conv", 3),
    nn.ConvTranspose1d: ("conv_transpose", 1),
    nn.ConvTranspose2d: ("conv_transpose", 2),
    nn.ConvTranspose3d: ("conv_transpose", 3),
    nn.MaxPool1d: ("max", 1),
    nn.MaxPool2d: ("max", 2),
    nn.MaxPool3d: ("max", 3),
    nn.AvgPool1d: ("avg", 1),
    nn.AvgPool2d: ("avg", 2),
    nn.AvgPool3d: ("avg", 3),
    nn.LPPool1d: ("lp", 1),
    nn.LPPool2d: ("lp", 2),
    nn.LPPool3d: ("lp", 3),
}


def pads_same_every_forward(module: Any) -> bool:
    """timm's layers that pad TF ``'same'`` on every forward (only if timm is imported), and
    layers that say so with ``same_pad=True`` (timm's ``StdConv2dSame`` family)."""
    if getattr(module, "same_pad", False) is True:
        return True
    return _timm_same(module)


def _timm_same(module: Any) -> bool:
    name = type(module).__name__
    where = {
        "Conv2dSame": "timm.layers.conv2d_same",
        "Conv2dSameExport": "timm.layers.conv2d_same",
        "MaxPool2dSame": "timm.layers.pool2d_same",
        "AvgPool2dSame": "timm.layers.pool2d_same",
    }.get(name)
    mod = sys.modules.get(where) if where else None
    return mod is not None and getattr(mod, name, None) is type(module)


def _kind_of(
    module: Any, *, subclasses: bool = False, plain: bool = False
) -> tuple[str, int] | None:
    """(kind, nd) of a torch/padkit conv or pool whose forward is torch's or padkit's own,
    or timm's same-padding layers (any subclass with ``subclasses=True``; with ``plain``,
    timm's layers too only if asked by ``subclasses``). The one walk of a class's bases that
    :func:`padkit.recognise.layer_kind` asks (``op`` sits below ``recognise``)."""
    for base in type(module).__mro__:
        found = TORCH_KINDS.get(base)
        if found is None:
            continue
        if subclasses or (_timm_same(module) and not plain) or _own_forward(type(module), base):
            return found
        return None
    return None


def _own_forward(cls: type, torch_base: type) -> bool:
    """``cls.forward`` is torch's (``torch_base``'s) or a padkit layer's (padkit.nn, or the
    streaming converter's layers, which only add call arguments)."""
    forward = cls.forward  # type: ignore[attr-defined]
    if forward is torch_base.forward:  # type: ignore[attr-defined]
        return True
    owner = next((c for c in cls.__mro__ if "forward" in c.__dict__), None)
    return owner is not None and owner.__module__.startswith("padkit.")
