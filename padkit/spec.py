"""The padding spec: one canonical form for every framework's padding convention.

This module imports no torch. It parses every accepted ``padding=`` form into a
frozen :class:`Padding`, resolves it to one ``(lo, hi)`` pair per spatial axis,
and converts between the layouts of PyTorch, ONNX, TF/JAX, Flux and Caffe.

Notation, per spatial axis: input length ``n``, kernel ``k``, stride ``s``,
dilation ``d``, effective kernel ``k_eff = d*(k-1) + 1``.

Rules (strings are case-insensitive):

============================  ==============================================================
``"valid"``                   ``(0, 0)``
``"same"``                    TF/XLA ``SAME`` = ONNX ``SAME_UPPER``: total
                              ``max((ceil(n/s)-1)*s + k_eff - n, 0)``, odd pixel at the end.
                              Depends on ``n`` when ``s > 1``.
``"same_lower"``              ONNX/JAX ``SAME_LOWER``: the same total, odd pixel at the start.
``"same_static"``             total ``k_eff - 1`` split as torch splits it (odd pixel at the
                              end), independent of ``n`` (PyTorch ``'same'``, Flax
                              ``CIRCULAR``/``REFLECT``), allowed with ``s > 1``.
``"same_static_lower"``       total ``k_eff - 1``, odd pixel at the start (Flux ``SamePad``).
``"causal"``                  ``(k_eff - 1, 0)``: output ``t`` sees inputs up to ``t*s``
                              (Keras/TF ``causal``, TCNs).
``"causal_block"``            ``(k_eff - s, 0)``: output ``t`` sees inputs up to ``(t+1)*s - 1``,
                              the end of its stride block (EnCodec/SEANet streaming
                              convention); equals ``"causal"`` at stride 1.
``"full"``                    ``(k_eff - 1, k_eff - 1)``
============================  ==============================================================
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, Union

__all__ = [
    "RULES",
    "TRANSPOSE_RULES",
    "AxisRule",
    "Padding",
    "PaddingError",
    "PaddingLike",
    "conv_output_size",
    "conv_transpose_output_size",
    "conv_transpose_padding",
    "pool_output_size",
    "resolve_padding",
]


class PaddingError(ValueError):
    """A padding argument, or an input it is applied to, cannot be honoured exactly."""


#: The named per-axis rules, in the order error messages list them.
RULES: tuple[str, ...] = (
    "valid",
    "same",
    "same_lower",
    "same_static",
    "same_static_lower",
    "causal",
    "causal_block",
    "full",
)

#: One axis of a spec: an explicit ``(lo, hi)`` pair or a rule name from :data:`RULES`.
AxisRule: TypeAlias = tuple[int, int] | str

#: Every form a ``padding=`` argument accepts.
PaddingLike: TypeAlias = Union[int, str, "Padding", Sequence[Any]]

_FORMS = (
    "an int (both sides of every axis), a tuple of ints (symmetric, one per spatial axis), "
    "a tuple of (lo, hi) pairs (one per spatial axis), one of the strings "
    + ", ".join(repr(r) for r in RULES)
    + " (case-insensitive), a tuple mixing these per axis, or a padkit.Padding"
)
_LAYOUTS = (
    "Padding.from_torch_pad(...) for F.pad order (last axis first), "
    "Padding.from_onnx(pads=...) for ONNX order (all begins, then all ends), "
    "Padding.from_flux(...) for Flux order, "
    "or a tuple of (lo, hi) pairs in axis order"
)
_ONNX_AUTO_PAD = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
_SIZE_DEPENDENT = ("same", "same_lower")


# ----------------------------------------------------------------------------- small helpers


def _is_tensor(value: Any) -> bool:
    # a 0-d integer tensor passes operator.index, but a padding held in a tensor is a
    # mistake (it would be synchronised to the host on every call): refuse it by its type
    if isinstance(value, (int, str, tuple, list)):
        return False
    module = type(value).__module__
    return module == "torch" or module.startswith("torch.")


def _as_int(value: Any, name: str) -> int:
    """``value`` as a Python int; booleans, floats, tensors and other types raise TypeError."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got a bool ({value!r})")
    if isinstance(value, int):
        return value
    if _is_tensor(value):
        raise TypeError(
            f"{name} must be an int, got a Tensor ({value!r}); use int(t) or t.tolist()"
        )
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})") from None


def _is_int_like(value: Any) -> bool:
    if isinstance(value, int):
        return not isinstance(value, bool)
    if _is_tensor(value):
        return False
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def _is_pair(value: Any) -> bool:
    return (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and len(value) == 2
        and all(_is_int_like(v) for v in value)
    )


def _tuple_of(value: Any, ndim: int, name: str, *, minimum: int = 1) -> tuple[int, ...]:
    """Normalise an int-or-tuple argument (kernel_size, stride, dilation) to ``ndim`` ints."""
    if _is_int_like(value) or isinstance(value, bool):
        items: tuple[int, ...] = (_as_int(value, name),) * ndim
    elif isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != ndim:
            raise PaddingError(
                f"{name} must be an int or a tuple of {ndim} ints (one per spatial axis), "
                f"got {tuple(value)!r} of length {len(value)}"
            )
        items = tuple(_as_int(v, f"{name}[{i}]") for i, v in enumerate(value))
    else:
        raise TypeError(
            f"{name} must be an int or a tuple of {ndim} ints, got {type(value).__name__} "
            f"({value!r})"
        )
    for i, v in enumerate(items):
        if v < minimum:
            where = name if ndim == 1 else f"{name}[{i}]"
            raise PaddingError(f"{where} must be >= {minimum}, got {v} (in {name}={value!r})")
    return items


def _ndim_of(*values: Any) -> int | None:
    for v in values:
        if isinstance(v, Sequence) and not isinstance(v, str):
            return len(v)
    return None


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _same_total(n: int, k_eff: int, s: int) -> int:
    """TF/XLA SAME total padding for one axis."""
    if s == 1:
        return k_eff - 1
    out = _ceil_div(n, s)
    if k_eff >= s:  # never negative then; no max(), so a symbolic n stays unspecialised
        return (out - 1) * s + k_eff - n
    return max((out - 1) * s + k_eff - n, 0)


def _caffe_pool_out(n: int, k: int, s: int, p: int) -> int:
    out = _ceil_div(n + 2 * p - k, s) + 1
    if p > 0 and (out - 1) * s >= n + p:
        out -= 1
    return out


# ----------------------------------------------------------------------------- the spec


@dataclass(frozen=True)
class Padding:
    """A padding rule per spatial axis, resolved to ``(lo, hi)`` pairs on demand.

    Build one with :meth:`Padding.parse` (every ``padding=`` form) or a layout
    constructor (:meth:`from_torch_pad`, :meth:`from_onnx`, :meth:`from_jax`,
    :meth:`from_flux`, :meth:`from_caffe`). Instances are immutable and hashable.

    Attributes:
        axes: one :data:`AxisRule` per spatial axis, or a single rule that applies
            to every axis when ``broadcast`` is true.
        broadcast: the spec came from a single int or string and fits any number
            of spatial axes.
        ceil_mode: Caffe-style ceil rounding (see :meth:`from_caffe`). Pools run it
            natively as ``ceil_mode=True``; convs resolve it to the tight end pad
            that gives the same output size.
        pre: static ``(lo, hi)`` pads per axis applied before the rules (None: none). An
            axis ``rule`` with ``pre=(a, b)`` pads ``(a + lo, b + hi)``, where ``(lo, hi)``
            is ``rule`` resolved on the padded size ``n + a + b``: a constant pad followed
            by a TF ``'same'`` pad computed from its output's size (Hugging Face BiT's stem,
            which :func:`padkit.surgery.convert` folds into one padkit pool). Built by
            passing ``pre=`` only; on an axis holding ``(lo, hi)`` it is added to the pair.

    Example:
        >>> p = Padding.parse(((0, 1), "same"))
        >>> p.resolve(kernel_size=3, stride=2, input_size=(8, 8))
        ((0, 1), (0, 1))
        >>> Padding.parse("same").resolve(kernel_size=4, ndim=1)
        ((1, 2),)
        >>> Padding.parse(((1, 2), (3, 4))).to_torch_pad()
        (3, 4, 1, 2)
    """

    axes: tuple[AxisRule, ...]
    broadcast: bool = False
    ceil_mode: bool = False
    pre: tuple[tuple[int, int], ...] | None = None

    def __post_init__(self) -> None:
        # built directly (not through parse): check and canonicalise the fields, so that a
        # malformed spec fails here, naming what is wrong, rather than deep inside a layer
        axes: Any = self.axes
        if isinstance(axes, (str, bytes)) or not isinstance(axes, Sequence):
            raise TypeError(
                f"Padding(axes=...) must be a tuple of per-axis rules, got "
                f"{type(axes).__name__} ({axes!r}); use Padding.parse(...) for every "
                f"padding= form"
            )
        if len(axes) == 0:
            raise PaddingError("Padding(axes=...) must hold at least one axis rule, got ()")
        canon: list[AxisRule] = []
        for i, rule in enumerate(axes):
            if isinstance(rule, str):
                if rule not in RULES:
                    raise PaddingError(
                        f"Padding(axes=...)[{i}]: unknown rule {rule!r}; accepted: "
                        + ", ".join(repr(r) for r in RULES)
                        + " (lowercase), or a (lo, hi) pair of ints"
                    )
                canon.append(rule)
            elif _is_pair(rule):
                canon.append((_as_int(rule[0], f"axes[{i}][0]"), _as_int(rule[1], f"axes[{i}][1]")))
            else:
                raise TypeError(
                    f"Padding(axes=...)[{i}] must be a (lo, hi) pair of ints or one of "
                    + ", ".join(repr(r) for r in RULES)
                    + f", got {type(rule).__name__} ({rule!r})"
                )
        for name in ("broadcast", "ceil_mode"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise TypeError(
                    f"Padding({name}=...) must be True or False, got "
                    f"{type(value).__name__} ({value!r})"
                )
        if self.broadcast and len(canon) != 1:
            raise PaddingError(
                f"Padding(broadcast=True) needs exactly one axis rule, got {len(canon)}: {axes!r}"
            )
        pre = self._check_pre(len(canon))
        if pre is not None:
            for i, (a, b) in enumerate(pre):
                rule = canon[i]
                if isinstance(rule, tuple):  # a static axis: the pads add up
                    canon[i] = (rule[0] + a, rule[1] + b)
                    pre[i] = (0, 0)
                elif rule == "valid":
                    canon[i], pre[i] = (a, b), (0, 0)
            if self.ceil_mode and any(p != (0, 0) for p in pre):
                raise PaddingError(
                    f"Padding(pre={self.pre!r}) with Caffe ceil rounding: rounding after pads "
                    "that come before the rules has no single convention; padkit refuses it"
                )
        kept = tuple(pre) if pre is not None and any(p != (0, 0) for p in pre) else None
        if kept != self.pre:
            object.__setattr__(self, "pre", kept)
        if not isinstance(axes, tuple) or any(a is not b for a, b in zip(canon, axes)):
            object.__setattr__(self, "axes", tuple(canon))

    def _check_pre(self, n: int) -> list[tuple[int, int]] | None:
        pre: Any = self.pre
        if pre is None:
            return None
        if isinstance(pre, (str, bytes)) or not isinstance(pre, Sequence):
            raise TypeError(
                f"Padding(pre=...) must be None or a tuple of (lo, hi) pairs, one per axis, got "
                f"{type(pre).__name__} ({pre!r})"
            )
        if len(pre) != n or not all(_is_pair(p) for p in pre):
            raise PaddingError(
                f"Padding(pre=...) must hold one (lo, hi) pair per axis rule ({n}), got {pre!r}"
            )
        pairs = [
            (_as_int(p[0], f"pre[{i}][0]"), _as_int(p[1], f"pre[{i}][1]"))
            for i, p in enumerate(pre)
        ]
        if any(min(p) < 0 for p in pairs):
            raise PaddingError(f"Padding(pre=...) must be non-negative, got {pre!r}")
        return pairs

    # ------------------------------------------------------------------ parsing

    @classmethod
    def parse(
        cls,
        padding: PaddingLike,
        ndim: int | None = None,
        *,
        name: str = "padding",
        allow_negative: bool = False,
    ) -> Padding:
        """Parse any accepted ``padding=`` form.

        Args:
            padding: see the module docstring and ``PaddingLike``.
            ndim: the number of spatial axes, when known; a spec of another length
                raises, a broadcast spec is expanded to it.
            name: the argument name used in error messages.
            allow_negative: accept negative pads (crops), as :func:`padkit.functional.pad` does.

        Raises:
            TypeError: ``padding`` has a wrong type (bool, float, tensor, ...).
            PaddingError: the value is malformed, negative, ambiguous or of the wrong length.
        """
        if isinstance(padding, Padding):
            spec = padding
        elif isinstance(padding, bool):
            raise TypeError(f"{name} must not be a bool, got {padding!r}; accepted: {_FORMS}")
        elif _is_int_like(padding):
            v = operator.index(padding)  # type: ignore[arg-type]
            spec = cls(((v, v),), broadcast=True)
        elif isinstance(padding, str):
            spec = cls((cls._parse_rule(padding, name),), broadcast=True)
        elif isinstance(padding, Sequence) and not isinstance(padding, (bytes, bytearray)):
            spec = cls._parse_sequence(tuple(padding), ndim, name)
        else:
            raise TypeError(
                f"{name} must be an int, a str, a tuple or a padkit.Padding, got "
                f"{type(padding).__name__} ({padding!r}); accepted: {_FORMS}"
            )
        if ndim is not None:
            if not spec.broadcast and len(spec.axes) != ndim:
                raise PaddingError(
                    f"{name} has {len(spec.axes)} axis/axes ({name}={padding!r}) but the operation "
                    f"has {ndim} spatial axis/axes; give one entry per spatial axis"
                )
            spec = spec.expand(ndim, name=name)
        if not allow_negative:
            for i, rule in enumerate(spec.axes):
                if isinstance(rule, tuple) and min(rule) < 0:
                    raise PaddingError(
                        f"{name} must be non-negative, got {padding!r} (axis {i}: {rule}); "
                        "to crop, use padkit.functional.pad with negative pads"
                    )
        return spec

    @staticmethod
    def _parse_rule(text: str, name: str) -> str:
        rule = text.lower()
        if rule not in RULES:
            raise PaddingError(
                f"{name}: unknown padding string {text!r}; accepted strings (any case): "
                + ", ".join(repr(r) for r in RULES)
            )
        return rule

    @classmethod
    def _parse_sequence(cls, items: tuple[Any, ...], ndim: int | None, name: str) -> Padding:
        if len(items) == 0:
            raise PaddingError(f"{name} must not be empty; accepted: {_FORMS}")
        if all(_is_int_like(v) for v in items):
            if ndim is not None and len(items) == 2 * ndim:
                raise PaddingError(
                    f"{name}={items!r} is a flat tuple of {len(items)} ints for {ndim} spatial "
                    f"axis/axes: ambiguous (torch F.pad order or ONNX order?). Use one of "
                    f"{_LAYOUTS}"
                )
            return cls(tuple((operator.index(v), operator.index(v)) for v in items))
        axes: list[AxisRule] = []
        for i, item in enumerate(items):
            where = f"{name}[{i}]"
            if isinstance(item, bool):
                raise TypeError(f"{where} must not be a bool, got {item!r}; accepted: {_FORMS}")
            if _is_int_like(item):
                v = operator.index(item)
                axes.append((v, v))
            elif isinstance(item, str):
                axes.append(cls._parse_rule(item, where))
            elif isinstance(item, Sequence) and not isinstance(item, (bytes, bytearray)):
                if len(item) != 2:
                    raise PaddingError(
                        f"{where} must be a (lo, hi) pair, got {tuple(item)!r} of length "
                        f"{len(item)}; accepted: {_FORMS}"
                    )
                lo = _as_int(item[0], f"{where}[0]")
                hi = _as_int(item[1], f"{where}[1]")
                axes.append((lo, hi))
            else:
                raise TypeError(
                    f"{where} must be an int, a (lo, hi) pair or a str, got "
                    f"{type(item).__name__} ({item!r}); accepted: {_FORMS}"
                )
        return cls(tuple(axes))

    def expand(self, ndim: int, *, name: str = "padding") -> Padding:
        """This spec for exactly ``ndim`` spatial axes (a broadcast spec is repeated)."""
        if self.broadcast:
            pre = None if self.pre is None else self.pre * ndim
            return Padding(self.axes * ndim, broadcast=False, ceil_mode=self.ceil_mode, pre=pre)
        if len(self.axes) != ndim:
            raise PaddingError(
                f"{name} has {len(self.axes)} axis/axes ({self.describe()}) but the operation "
                f"has {ndim} spatial axis/axes; give one entry per spatial axis"
            )
        return self

    # ------------------------------------------------------------------ queries

    @property
    def ndim(self) -> int | None:
        """The number of spatial axes, or None for a broadcast spec."""
        return None if self.broadcast else len(self.axes)

    @property
    def is_explicit(self) -> bool:
        """Every axis is an explicit ``(lo, hi)`` pair (no rule, no ceil rounding)."""
        return not self.ceil_mode and all(isinstance(a, tuple) for a in self.axes)

    def needs_input_size(self, stride: int | Sequence[int] = 1) -> bool:
        """Whether resolving needs the input size: ``same``/``same_lower`` (or Caffe ceil
        rounding) on an axis with stride > 1."""
        return self._needs_input_size(stride)

    def _needs_input_size(self, stride: int | Sequence[int]) -> bool:
        nd = self.ndim or _ndim_of(stride) or 1
        spec = self.expand(nd)
        strides = _tuple_of(stride, nd, "stride")
        return any(
            s > 1 and (rule in _SIZE_DEPENDENT or (spec.ceil_mode and isinstance(rule, tuple)))
            for rule, s in zip(spec.axes, strides)
        )

    def describe(self) -> str:
        """A short human-readable form, e.g. ``'(0, 1), same'``."""
        parts = [repr(a) if isinstance(a, str) else f"({a[0]}, {a[1]})" for a in self.axes]
        if self.pre is not None:
            parts = [
                part if p == (0, 0) else f"({p[0]}, {p[1]}) then {part}"
                for part, p in zip(parts, self.pre)
            ]
        text = ", ".join(parts) + (" on every axis" if self.broadcast else "")
        return text + (" with ceil rounding" if self.ceil_mode else "")

    def __str__(self) -> str:
        return f"Padding({self.describe()})"

    # ------------------------------------------------------------------ resolution

    def resolve(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        dilation: int | Sequence[int] = 1,
        input_size: int | Sequence[int] | None = None,
        *,
        ndim: int | None = None,
    ) -> tuple[tuple[int, int], ...]:
        """Resolve to one ``(lo, hi)`` pair per spatial axis.

        Args:
            kernel_size, stride, dilation: an int or one per spatial axis.
            input_size: the spatial input size (an int or one per axis); needed only by
                ``"same"``/``"same_lower"`` with stride > 1 and by Caffe ceil rounding.
            ndim: the number of spatial axes when nothing else says it.

        Raises:
            PaddingError: the rule needs ``input_size`` and none was given, or the
                arguments disagree on the number of axes.
        """
        nd = ndim or self.ndim or _ndim_of(kernel_size, stride, dilation, input_size) or 1
        spec = self.expand(nd)
        ks = _tuple_of(kernel_size, nd, "kernel_size")
        ss = _tuple_of(stride, nd, "stride")
        ds = _tuple_of(dilation, nd, "dilation")
        ns: tuple[int, ...] | None = None
        if input_size is not None:
            ns = _tuple_of(input_size, nd, "input_size", minimum=0)
        return spec.resolve_checked(ks, ss, ds, ns)

    def resolve_checked(
        self,
        kernel_size: tuple[int, ...],
        stride: tuple[int, ...],
        dilation: tuple[int, ...],
        input_size: Sequence[int] | None,
    ) -> tuple[tuple[int, int], ...]:
        """:meth:`resolve` for arguments already checked: one entry per axis each.

        The input sizes are used as given, so symbolic sizes from ``torch.compile`` stay
        symbolic and a shape-dependent rule does not specialise the traced graph.
        """
        spec = self.expand(len(kernel_size))
        return tuple(
            spec._resolve_axis(i, rule, k, s, d, None if input_size is None else input_size[i])
            for i, (rule, k, s, d) in enumerate(zip(spec.axes, kernel_size, stride, dilation))
        )

    def _resolve_axis(
        self, axis: int, rule: AxisRule, k: int, s: int, d: int, n: int | None
    ) -> tuple[int, int]:
        if self.pre is not None:
            a, b = self.pre[axis % len(self.pre)]
            if a or b:
                lo, hi = self._resolve_rule(axis, rule, k, s, d, None if n is None else n + a + b)
                return lo + a, hi + b
        return self._resolve_rule(axis, rule, k, s, d, n)

    def _resolve_rule(
        self, axis: int, rule: AxisRule, k: int, s: int, d: int, n: int | None
    ) -> tuple[int, int]:
        k_eff = d * (k - 1) + 1
        if isinstance(rule, tuple):
            lo, hi = rule
            if not self.ceil_mode:
                return lo, hi
            if s == 1:
                return lo, hi
            if n is None:
                raise PaddingError(
                    f"padding {self.describe()}: Caffe ceil rounding with stride {s} on axis "
                    f"{axis} depends on the input size; pass input_size"
                )
            out = _caffe_pool_out(n, k_eff, s, lo)
            if out < 1 or (out - 1) * s >= n + lo:
                raise PaddingError(
                    f"Caffe ceil rounding on axis {axis} (input {n}, kernel {k_eff}, stride {s}, "
                    f"pad {lo}) puts the last window outside the input; Caffe computes "
                    "-FLT_MAX there and padkit refuses to approximate it"
                )
            return lo, (out - 1) * s + k_eff - n - lo
        if rule == "valid":
            return 0, 0
        if rule in ("same", "same_lower"):
            if s > 1 and n is None:
                raise PaddingError(
                    f"padding {rule!r} with stride {s} on axis {axis} depends on the input size "
                    "(TF/XLA SAME); pass input_size, or use 'same_static' for a padding that "
                    "does not"
                )
            total = _same_total(n if n is not None else 0, k_eff, s)
            small, big = total // 2, total - total // 2
            return (small, big) if rule == "same" else (big, small)
        total = k_eff - 1
        if rule == "same_static":
            return total // 2, total - total // 2
        if rule == "same_static_lower":
            return total - total // 2, total // 2
        if rule == "causal":
            return total, 0
        if rule == "causal_block":
            if k_eff < s:
                raise PaddingError(
                    f"padding 'causal_block' on axis {axis} needs an effective kernel "
                    f"(dilation*(kernel-1)+1 = {k_eff}) of at least the stride ({s})"
                )
            return k_eff - s, 0
        if rule == "full":
            return total, total
        raise AssertionError(f"unreachable rule {rule!r}")  # pragma: no cover

    # ------------------------------------------------------------------ layout: torch

    @classmethod
    def from_torch_pad(cls, pad: Sequence[int], *, allow_negative: bool = False) -> Padding:
        """From an ``F.pad`` tuple: ``(last_lo, last_hi, second_last_lo, ...)``.

        Example:
            >>> Padding.from_torch_pad((3, 4, 1, 2)).axes
            ((1, 2), (3, 4))
        """
        values = _int_list(pad, "pad")
        if len(values) % 2:
            raise PaddingError(
                f"pad (F.pad order) must have an even length, got {tuple(values)!r} of length "
                f"{len(values)}"
            )
        pairs = [(values[i], values[i + 1]) for i in range(0, len(values), 2)]
        return cls.parse(tuple(reversed(pairs)), name="pad", allow_negative=allow_negative)

    def to_torch_pad(self, *args: Any, **kwargs: Any) -> tuple[int, ...]:
        """The ``F.pad`` tuple (last axis first); rules resolve with :meth:`resolve`'s args.

        Example:
            >>> Padding.parse("causal").to_torch_pad(kernel_size=(3, 5), dilation=(2, 1))
            (4, 0, 4, 0)
        """
        pairs = self._pairs(*args, **kwargs)
        return tuple(v for lo_hi in reversed(pairs) for v in lo_hi)

    def to_torch(self, *args: Any, **kwargs: Any) -> tuple[int, ...]:
        """The symmetric per-axis tuple a torch conv/pool ``padding=`` takes, or raise."""
        pairs = self._pairs(*args, **kwargs)
        if any(lo != hi for lo, hi in pairs):
            raise PaddingError(
                f"padding {self.describe()} resolves to {pairs}, which is asymmetric; torch's "
                "padding= argument is symmetric only (use a padkit layer or to_torch_pad())"
            )
        return tuple(lo for lo, _ in pairs)

    def _pairs(self, *args: Any, **kwargs: Any) -> tuple[tuple[int, int], ...]:
        if self.is_explicit and not args and not kwargs:
            if self.broadcast:
                raise PaddingError(
                    f"padding {self.describe()} fits any number of axes; pass ndim= to convert it"
                )
            return tuple(a for a in self.axes if isinstance(a, tuple))
        if not args and not kwargs:
            raise PaddingError(
                f"padding {self.describe()} holds rules; pass kernel_size (and stride, "
                "dilation, input_size where they matter) to resolve it"
            )
        if self.is_explicit and not args and set(kwargs) == {"ndim"}:
            return self.expand(kwargs["ndim"]).axes  # type: ignore[return-value]
        return self.resolve(*args, **kwargs)

    # ------------------------------------------------------------------ layout: ONNX

    @classmethod
    def from_onnx(
        cls,
        pads: Sequence[int] | None = None,
        auto_pad: str | bytes = "NOTSET",
        *,
        ndim: int | None = None,
        ceil_mode: int | bool = False,
    ) -> Padding:
        """From ONNX Conv/Pool attributes: ``pads=[b1, b2, ..., e1, e2, ...]`` and ``auto_pad``.

        ONNX's ``ceil_mode`` is the pool's own rounding, not padding: pass it to the padkit
        pool (``MaxPool2d(..., ceil_mode=True)``). ``ceil_mode=1`` here is refused, because a
        padding spec with rounding is Caffe's (:meth:`from_caffe`), which differs from ONNX's
        where a window would start past the input.

        Example:
            >>> Padding.from_onnx(pads=[0, 0, 1, 1]).axes
            ((0, 1), (0, 1))
            >>> Padding.from_onnx(auto_pad="SAME_LOWER", ndim=2).axes
            ('same_lower', 'same_lower')
        """
        if ceil_mode:
            raise PaddingError(
                f"ceil_mode={ceil_mode!r}: ONNX's ceil_mode is the pool's rounding, not padding; "
                "pass ceil_mode=True to the padkit pool and Padding.from_onnx(pads=..., "
                "auto_pad=...) as its padding (Padding.from_caffe is Caffe's rounding)"
            )
        if isinstance(auto_pad, bytes):
            auto_pad = auto_pad.decode()
        if not isinstance(auto_pad, str) or auto_pad.upper() not in _ONNX_AUTO_PAD:
            raise PaddingError(f"auto_pad must be one of {_ONNX_AUTO_PAD}, got {auto_pad!r}")
        mode = auto_pad.upper()
        if mode != "NOTSET":
            if pads is not None and any(_as_int(v, "pads") != 0 for v in pads):
                raise PaddingError(
                    f"pads={list(pads)!r} cannot be used together with auto_pad={auto_pad!r}"
                )
            rule = {"SAME_UPPER": "same", "SAME_LOWER": "same_lower", "VALID": "valid"}[mode]
            if ndim is None and pads is not None and len(pads) > 0:
                ndim = len(pads) // 2
            spec = cls((rule,), broadcast=True)
            return spec if ndim is None else spec.expand(ndim)
        if pads is None:
            if ndim is None:
                return cls(((0, 0),), broadcast=True)
            return cls(((0, 0),) * ndim)
        values = _int_list(pads, "pads")
        if len(values) % 2 or (ndim is not None and len(values) != 2 * ndim):
            expected = "an even length" if ndim is None else f"length {2 * ndim}"
            raise PaddingError(f"pads must have {expected}, got {values!r}")
        half = len(values) // 2
        return cls.parse(tuple(zip(values[:half], values[half:])), name="pads")

    def to_onnx(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """ONNX attributes: ``{"auto_pad": ...}`` or ``{"pads": [...]}`` (+ ``ceil_mode``).

        ``same``/``same_lower``/``valid`` on every axis become ``auto_pad``; anything else
        is resolved (with :meth:`resolve`'s arguments where it holds rules) to ``pads``.

        Example:
            >>> Padding.parse("same").to_onnx()
            {'auto_pad': 'SAME_UPPER'}
            >>> Padding.parse(((0, 1), (2, 3))).to_onnx()
            {'pads': [0, 2, 1, 3]}
        """
        if (
            not self.ceil_mode
            and self.pre is None
            and len(set(self.axes)) == 1
            and self.axes[0]
            in (
                "same",
                "same_lower",
                "valid",
            )
        ):
            auto = {"same": "SAME_UPPER", "same_lower": "SAME_LOWER", "valid": "VALID"}
            return {"auto_pad": auto[str(self.axes[0])]}
        if self.ceil_mode:
            plain = Padding(self.axes, broadcast=self.broadcast)
            return {"pads": plain.to_onnx_pads(*args, **kwargs), "ceil_mode": 1}
        return {"pads": self.to_onnx_pads(*args, **kwargs)}

    def to_onnx_pads(self, *args: Any, **kwargs: Any) -> list[int]:
        """The ONNX ``pads`` list ``[b1, b2, ..., e1, e2, ...]`` (rules resolved first)."""
        pairs = self._pairs(*args, **kwargs)
        return [lo for lo, _ in pairs] + [hi for _, hi in pairs]

    # ------------------------------------------------------------------ layout: TF / JAX

    @classmethod
    def from_jax(cls, padding: str | Sequence[Sequence[int]]) -> Padding:
        """From a ``lax`` padding: ``"SAME"``, ``"SAME_LOWER"``, ``"VALID"`` or pairs."""
        if isinstance(padding, str):
            mapping = {"SAME": "same", "SAME_LOWER": "same_lower", "VALID": "valid"}
            if padding.upper() not in mapping:
                raise PaddingError(
                    f"padding must be 'SAME', 'SAME_LOWER', 'VALID' or (lo, hi) pairs, got "
                    f"{padding!r}"
                )
            return cls((mapping[padding.upper()],), broadcast=True)
        pairs = tuple(padding)
        if not all(_is_pair(p) for p in pairs):
            raise PaddingError(f"padding must be a sequence of (lo, hi) pairs, got {padding!r}")
        return cls.parse(tuple((int(p[0]), int(p[1])) for p in pairs), allow_negative=True)

    def to_jax(self, *args: Any, **kwargs: Any) -> str | list[tuple[int, int]]:
        """A ``lax`` padding: ``"SAME"``/``"SAME_LOWER"``/``"VALID"``, or ``(lo, hi)`` pairs.

        Example:
            >>> Padding.parse("same_lower").to_jax()
            'SAME_LOWER'
            >>> Padding.parse(((0, 1), 2)).to_jax()
            [(0, 1), (2, 2)]
        """
        onnx = self.to_onnx(*args, **kwargs)
        if "auto_pad" in onnx:
            return {"SAME_UPPER": "SAME", "SAME_LOWER": "SAME_LOWER", "VALID": "VALID"}[
                onnx["auto_pad"]
            ]
        if self.ceil_mode:
            raise PaddingError(
                "Caffe ceil rounding has no lax equivalent without the input size; resolve it "
                "first (resolve(..., input_size=...))"
            )
        return list(self._pairs(*args, **kwargs))

    # ------------------------------------------------------------------ layout: Flux

    @classmethod
    def from_flux(cls, pad: int | str | Sequence[int], ndim: int) -> Padding:
        """From a Flux/NNlib ``pad``: an int, an N-tuple, a 2N-tuple ``(w_lo, w_hi, h_lo, h_hi)``
        in array-dim order (WHCN, so the last torch axis first), or ``"SamePad"``.

        Flux ``SamePad()`` is static (total ``k_eff - 1``) with the odd pixel at the start.

        Example:
            >>> Padding.from_flux((1, 0, 1, 0), ndim=2).axes
            ((1, 0), (1, 0))
            >>> Padding.from_flux("SamePad", ndim=2).axes
            ('same_static_lower', 'same_static_lower')
        """
        if isinstance(pad, str):
            if pad.replace("()", "").lower() != "samepad":
                raise PaddingError(f"pad must be an int, a tuple or 'SamePad', got {pad!r}")
            return cls(("same_static_lower",) * ndim)
        if _is_int_like(pad) or isinstance(pad, bool):
            return cls.parse(_as_int(pad, "pad"), ndim, name="pad")
        values = _int_list(pad, "pad")  # type: ignore[arg-type]
        if len(values) == ndim:
            return cls.parse(tuple(reversed(values)), ndim, name="pad")
        if len(values) == 2 * ndim:
            return cls.from_torch_pad(values)
        raise PaddingError(
            f"pad must have {ndim} (symmetric) or {2 * ndim} (lo, hi per dim) entries for "
            f"{ndim} spatial dims, got {tuple(values)!r}"
        )

    def to_flux(self, *args: Any, **kwargs: Any) -> tuple[int, ...]:
        """The Flux 2N-tuple ``(w_lo, w_hi, h_lo, h_hi, ...)`` (numerically the F.pad tuple)."""
        return self.to_torch_pad(*args, **kwargs)

    # ------------------------------------------------------------------ layout: Caffe

    @classmethod
    def from_caffe(
        cls, pad: int | Sequence[int] = 0, *, ndim: int = 2, ceil: bool = True
    ) -> Padding:
        """From Caffe's symmetric ``pad`` (``pad`` or ``(pad_h, pad_w)``).

        Caffe pooling always rounds up (``ceil=True``): the pools run that natively with
        ``ceil_mode=True``, including Caffe's average divisor; convs and ONNX export get the
        tight end pad that gives the same output size (GoogLeNet pool1: 112 → 56 with pads
        ``(0, 1)``). Caffe convolution rounds down: use ``ceil=False``.

        Example:
            >>> Padding.from_caffe(0).resolve(kernel_size=3, stride=2, input_size=112)
            ((0, 1), (0, 1))
        """
        spec = cls.parse(pad, ndim, name="pad")
        return cls(spec.axes, ceil_mode=ceil)

    # ------------------------------------------------------------------ misc

    def with_axes(self, axes: Iterable[AxisRule]) -> Padding:
        """A copy with other axes (same ceil rounding; no pads before the rules)."""
        return Padding(tuple(axes), ceil_mode=self.ceil_mode)


def _int_list(values: Sequence[Any], name: str) -> list[int]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a sequence of ints, got {type(values).__name__}")
    return [_as_int(v, f"{name}[{i}]") for i, v in enumerate(values)]


# ----------------------------------------------------------------------------- free functions


def resolve_padding(
    padding: PaddingLike,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] = 1,
    dilation: int | Sequence[int] = 1,
    input_size: int | Sequence[int] | None = None,
) -> tuple[tuple[int, int], ...]:
    """Resolve any ``padding=`` form to one ``(lo, hi)`` pair per spatial axis.

    Raises :class:`PaddingError` when the rule needs ``input_size`` and none is given.

    Example:
        >>> resolve_padding("same", kernel_size=3, stride=2, input_size=8)
        ((0, 1),)
        >>> resolve_padding("same_static", kernel_size=3, stride=2)
        ((1, 1),)
        >>> resolve_padding(("causal", "same"), kernel_size=(3, 3), dilation=(2, 1))
        ((4, 0), (1, 1))
    """
    nd = _ndim_of(kernel_size, stride, dilation, input_size)
    spec = Padding.parse(padding, nd)
    return spec.resolve(kernel_size, stride, dilation, input_size, ndim=nd)


def conv_output_size(n: int, k: int, s: int = 1, d: int = 1, lo: int = 0, hi: int = 0) -> int:
    """Floor-mode output length of a conv (or pool) along one axis.

    Example:
        >>> conv_output_size(8, 3, 2, lo=0, hi=1)
        4
    """
    return (n + lo + hi - (d * (k - 1) + 1)) // s + 1


def pool_output_size(
    n: int, k: int, s: int = 1, d: int = 1, lo: int = 0, hi: int = 0, ceil_mode: bool = False
) -> int:
    """Output length of a pool along one axis, with torch/ONNX ``ceil_mode`` rules.

    In ceil mode a window that would start in the right padding is dropped.

    Example:
        >>> pool_output_size(5, 2, 2, lo=1, hi=1, ceil_mode=True)
        3
    """
    k_eff = d * (k - 1) + 1
    span = n + lo + hi - k_eff
    if not ceil_mode:
        return span // s + 1
    out = _ceil_div(span, s) + 1
    if (out - 1) * s >= n + lo:
        out -= 1
    return out


def conv_transpose_output_size(
    n: int, k: int, s: int = 1, d: int = 1, lo: int = 0, hi: int = 0, output_padding: int = 0
) -> int:
    """Output length of a transposed conv that crops ``(lo, hi)`` from the full output.

    Example:
        >>> conv_transpose_output_size(3, 3, 2, lo=0, hi=1)   # TF 'SAME'
        6
    """
    return (n - 1) * s + d * (k - 1) + 1 - lo - hi + output_padding


#: Transposed-conv length rules named after the framework whose rule each one is. A
#: transposed conv given one of these as ``padding=`` resolves it, with the framework's
#: meaning of ``output_padding``, to explicit crops and an output padding
#: (:func:`conv_transpose_padding`).
TRANSPOSE_RULES: tuple[str, ...] = (
    "keras_same",
    "keras_valid",
    "onnx_same_upper",
    "onnx_same_lower",
)


def conv_transpose_padding(
    rule: str,
    kernel_size: int | Sequence[int],
    stride: int | Sequence[int] = 1,
    dilation: int | Sequence[int] = 1,
    output_padding: int | Sequence[int] | None = None,
    *,
    ndim: int | None = None,
) -> tuple[tuple[tuple[int, int], ...], tuple[int, ...]]:
    """A framework's transposed-conv rule as torch-style crops and output padding.

    Returns ``(pairs, output_padding)``: a transposed conv that crops ``pairs[i] = (lo, hi)``
    from its full output ``(n-1)*s + k_eff`` and then extends the end by
    ``output_padding[i]`` (torch's meaning; ``hi - output_padding`` is what is removed at the
    end) gives exactly what the framework gives. Every rule here is independent of the
    input length ``n``. Per axis, with ``k_eff = d*(k-1) + 1`` and ``op`` the given
    ``output_padding`` (``None``: not given):

    =====================  ==================================  ===============================
    rule                   output length                       crops
    =====================  ==================================  ===============================
    ``"keras_same"``       ``n*s`` (op None);                  TF ``SAME`` of the output
                           ``(n-1)*s + k_eff%2 + op``          length: total ``t``, ``t//2``
                                                               at the start
    ``"keras_valid"``      ``(n-1)*s + max(k_eff, s)`` (op     none; the end is extended
                           None); ``(n-1)*s + k_eff + op``
    ``"onnx_same_upper"``  ``(n-1)*s + k_eff + op - t`` with   ``t//2`` at the start (odd
                           ``t = max(k_eff + op - s, 0)``      pixel at the end)
    ``"onnx_same_lower"``  as ``onnx_same_upper``              odd pixel at the start
    =====================  ==================================  ===============================

    ``keras_*`` are Keras ``Conv{1,2,3}DTranspose`` on the TensorFlow backend (which hands
    ``tf.nn.conv_transpose`` the output length above); ``onnx_*`` are ONNX ``ConvTranspose``
    with ``auto_pad`` and no ``output_shape``, as onnxruntime computes them (which keeps
    ``(n-1)*s + k_eff + op`` when that is below ``n*s``).

    Raises:
        PaddingError: an unknown rule, or ``output_padding`` not below the stride for a
            Keras rule (Keras refuses it too).

    Example:
        >>> conv_transpose_padding("keras_same", 3, 2, output_padding=1)   # 5 -> 10
        (((0, 2),), (1,))
        >>> conv_transpose_padding("keras_valid", 2, 3)                    # 5 -> 15
        (((0, 0),), (1,))
        >>> conv_transpose_padding("onnx_same_upper", 4, 2, output_padding=1)
        (((1, 2),), (1,))
    """
    name = rule.lower() if isinstance(rule, str) else rule
    if name not in TRANSPOSE_RULES:
        raise PaddingError(
            f"unknown transposed-conv rule {rule!r}; accepted: "
            + ", ".join(repr(r) for r in TRANSPOSE_RULES)
        )
    nd = ndim or _ndim_of(kernel_size, stride, dilation, output_padding) or 1
    ks = _tuple_of(kernel_size, nd, "kernel_size")
    ss = _tuple_of(stride, nd, "stride")
    ds = _tuple_of(dilation, nd, "dilation")
    given = output_padding is not None
    ops = _tuple_of(output_padding if given else 0, nd, "output_padding", minimum=0)
    pairs: list[tuple[int, int]] = []
    out_ops: list[int] = []
    for i, (k, s, d, op) in enumerate(zip(ks, ss, ds, ops)):
        k_eff = d * (k - 1) + 1
        if name.startswith("keras") and given and op >= s:
            raise PaddingError(
                f"output_padding[{i}]={op} must be smaller than the stride ({s}) for "
                f"padding={rule!r} (Keras refuses it too); got output_padding={output_padding!r}"
            )
        if name == "keras_valid":
            pairs.append((0, 0))
            out_ops.append(op if given else max(s - k_eff, 0))
        elif name == "keras_same" and not given:
            total = k_eff - s  # TF SAME for an output of n*s
            pairs.append((total // 2, total - total // 2) if total >= 0 else (0, 0))
            out_ops.append(0 if total >= 0 else -total)
        elif name == "keras_same":
            # the output is (n-1)*s + k_eff%2 + op; TF pads that length's forward SAME conv
            # with max(total, 0)//2 at the start and crops the rest at the end
            whole = 2 * (k_eff // 2)
            lo = max(whole - op, 0) // 2
            pairs.append((lo, whole - lo))
            out_ops.append(op)
        else:
            total = max(k_eff + op - s, 0)
            small, big = total // 2, total - total // 2
            pairs.append((small, big) if name == "onnx_same_upper" else (big, small))
            out_ops.append(op)
    return tuple(pairs), tuple(out_ops)


@functools.lru_cache(maxsize=1024)
def _needs_input_size(spec: Padding, stride: tuple[int, ...]) -> bool:
    """:meth:`Padding.needs_input_size` for a layer's checked stride, remembered (an eager
    layer asks it on every call; a compiler tracing a call asks the method itself, since a
    cache wrapper is state it cannot see)."""
    return spec._needs_input_size(stride)
