"""Invertible padding for reversible networks (RevNet, i-RevNet, memcnn).

Reversible networks save memory by recomputing each block's input from its output
during backward, so their couplings need inputs and outputs of the same shape. A
network whose input has fewer channels than its couplings (3-channel images into a
128-channel chain) has to pad somewhere. Padding is injective: the padded tensor holds
the original one unchanged, so cropping inverts it *exactly*. This module makes that
usable inside a reversible chain:

- :class:`ChannelPad` adds zero channels; :class:`SpatialPad` pads the spatial axes in
  any :func:`padkit.functional.pad` mode. Both have ``forward`` and an exact-crop
  ``inverse``, so ``inverse(forward(x))`` equals ``x`` bit for bit. They pass memcnn's
  ``is_invertible_module`` and run inside memcnn's ``InvertibleModuleWrapper``.
- :class:`AdditiveCoupling` is the RevNet coupling (the same arithmetic as memcnn's).
- :class:`PaddedCoupling` puts a padding module *inside* a coupling: it maps the
  unpadded input straight to the coupling's output, and the padded tensor exists only
  transiently inside the block.
- :class:`ReversibleSequential` runs a chain of invertible blocks through one
  ``torch.autograd.Function`` that keeps only the chain's output (and, with
  ``keep_input=True``, its input) for backward and recomputes every intermediate
  activation from the output, so the memory for activations does not grow with depth.
  It needs no memcnn, never frees or overwrites a tensor you passed in, and works with
  both ``loss.backward()`` and ``torch.autograd.grad``.

memcnn is optional: nothing here imports it.
"""

from __future__ import annotations

import contextlib
import copy
import math
import operator
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable
from torch.nn import functional as F

from . import functional as PF
from .spec import Padding, PaddingError, PaddingLike

__all__ = [
    "AdditiveCoupling",
    "ChannelPad",
    "NotInvertibleError",
    "PaddedCoupling",
    "ReversibleSequential",
    "SpatialPad",
    "Unpad",
]

_SIDES = ("end", "start", "both")


# ----------------------------------------------------------------------------- helpers


def _int_arg(cls: str, name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{cls}: {name} must be an int, got a bool ({value!r})")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(
            f"{cls}: {name} must be an int, got {type(value).__name__} ({value!r})"
        ) from None
    if v < minimum:
        raise PaddingError(f"{cls}: {name} must be >= {minimum}, got {v}")
    return v


def _bool_arg(cls: str, name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(
            f"{cls}: {name} must be True or False, got {type(value).__name__} ({value!r})"
        )
    return value


def _check_invertible(cls: str, name: str, module: Any) -> nn.Module:
    if not isinstance(module, nn.Module) or not callable(getattr(module, "inverse", None)):
        raise TypeError(
            f"{cls}: {name} must be a torch.nn.Module with an inverse() method (padkit.reversible."
            "ChannelPad, SpatialPad, AdditiveCoupling, PaddedCoupling, a memcnn coupling, or your "
            f"own), got {type(module).__name__} ({module!r})"
        )
    return module


def _fresh(x: Tensor) -> Tensor:
    """``x`` in storage of its own, so that freeing the tensor it was cropped from (memcnn
    does that with ``keep_input=False``) cannot touch it."""
    return x.clone(memory_format=torch.contiguous_format)


def _check_batched(cls: str, x: Tensor, what: str) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{cls}: {what} must be a Tensor, got {type(x).__name__}")
    if x.dim() < 2:
        raise PaddingError(f"{cls}: {what} must have shape (N, C, ...), got shape {tuple(x.shape)}")


class NotInvertibleError(ValueError):
    """A block of a reversible chain does not rebuild its input from its output."""


@contextlib.contextmanager
def _running_stats_kept(module: nn.Module) -> Iterator[None]:
    """Run ``module`` again without changing its norm layers' running statistics.

    A reversible chain runs each block once in forward, which updates a train-mode
    BatchNorm's running statistics exactly as the plain network does, and again in
    backward (its inverse and a re-run). This puts back what those extra runs change.
    """
    saved = [
        (buf, buf.clone())
        for m in module.modules()
        if isinstance(m, nn.modules.batchnorm._NormBase) and m.training
        for buf in m.buffers(recurse=False)
    ]
    try:
        yield
    finally:
        with torch.no_grad():
            for buf, old in saved:
                buf.copy_(old)


def _is_pad(module: nn.Module) -> bool:
    """True for padkit's stateless padding modules and PaddedCouplings made only of them."""
    if isinstance(module, (ChannelPad, SpatialPad)):
        return True
    return isinstance(module, PaddedCoupling) and _is_pad(module.pad) and _is_pad(module.coupling)


def _pad_constants(pad: nn.Module, padded: Tensor) -> tuple[Tensor, Tensor] | None:
    """Where ``pad``'s outputs of ``padded``'s shape hold constants, and those constants.

    ``pad`` is run on a NaN-filled input: the positions that come out as numbers are the
    ones the pad fills with a constant (zero channels, constant-mode borders), whatever
    its input; reflect, replicate and circular borders copy the input and stay NaN.
    None when there are none, or when ``pad`` is not one of padkit's padding modules.
    """
    if not padded.is_floating_point() or not _is_pad(pad):
        return None
    meta = torch.empty(padded.shape, dtype=padded.dtype, device="meta")
    shape = pad.inverse(meta).shape  # type: ignore[operator]
    probe: Tensor = pad(torch.full(shape, math.nan, dtype=padded.dtype, device=padded.device))
    known = ~torch.isnan(probe)
    if not bool(known.any()):
        return None
    return known, probe


def _inverse_tolerance(dtype: torch.dtype) -> float:
    return math.sqrt(torch.finfo(dtype).eps) if dtype.is_floating_point else 0.0


# ----------------------------------------------------------------------------- padding


class ChannelPad(nn.Module):
    """Pad the channel axis with zeros; :meth:`inverse` crops them off exactly.

    This is i-RevNet's "injective padding": it lets an input with ``in_channels``
    channels enter a reversible chain of ``out_channels``-channel couplings. ``side``
    says where the ``out_channels - in_channels`` zero channels go: ``"end"`` (after the
    input's channels), ``"start"`` (before them) or ``"both"`` (split, the odd one at
    the end).

    ``inverse(forward(x))`` equals ``x`` exactly and lives in storage of its own.

    Shape:
        - Input: ``(N, in_channels, *)``
        - Output: ``(N, out_channels, *)`` (:meth:`inverse` maps back)

    Example:
        >>> pad = ChannelPad(3, 8)
        >>> x = torch.randn(2, 3, 5, 5)
        >>> y = pad(x)
        >>> y.shape, bool((y[:, 3:] == 0).all())
        (torch.Size([2, 8, 5, 5]), True)
        >>> torch.equal(pad.inverse(y), x)
        True
    """

    def __init__(self, in_channels: int, out_channels: int, side: str = "end") -> None:
        super().__init__()
        cls = type(self).__name__
        self.in_channels = _int_arg(cls, "in_channels", in_channels, 1)
        self.out_channels = _int_arg(cls, "out_channels", out_channels, 1)
        if self.out_channels < self.in_channels:
            raise PaddingError(
                f"{cls}: out_channels must be >= in_channels (padding only adds channels), got "
                f"in_channels={self.in_channels}, out_channels={self.out_channels}"
            )
        if not isinstance(side, str) or side.lower() not in _SIDES:
            raise PaddingError(
                f"{cls}: side must be one of {', '.join(repr(s) for s in _SIDES)}, got {side!r}"
            )
        self.side = side.lower()
        extra = self.out_channels - self.in_channels
        lo = {"end": 0, "start": extra, "both": extra // 2}[self.side]
        self.channel_padding: tuple[int, int] = (lo, extra - lo)

    def _check(self, x: Tensor, channels: int, what: str) -> None:
        cls = type(self).__name__
        _check_batched(cls, x, what)
        if x.shape[1] != channels:
            raise PaddingError(
                f"{cls}: {what} must have {channels} channels (axis 1), got shape {tuple(x.shape)}"
            )

    def forward(self, input: Tensor) -> Tensor:
        self._check(input, self.in_channels, "input")
        lo, hi = self.channel_padding
        if lo == hi == 0:
            return _fresh(input)
        # F.pad's flat list runs from the last axis back to the channel axis
        return F.pad(input, [0, 0] * (input.dim() - 2) + [lo, hi])

    def inverse(self, output: Tensor) -> Tensor:
        """Crop the padded channels off: the exact inverse of :meth:`forward`."""
        self._check(output, self.out_channels, "output")
        return _fresh(output.narrow(1, self.channel_padding[0], self.in_channels))

    def extra_repr(self) -> str:
        return f"{self.in_channels}, {self.out_channels}, side={self.side!r}"


class SpatialPad(nn.Module):
    """Pad the trailing spatial axes (any padkit form and mode); :meth:`inverse` crops.

    ``padding`` is any :class:`padkit.Padding` form in axis order: an int, one int per
    axis, ``(lo, hi)`` pairs, or a rule (``"same_static"``, ``"causal"``, ``"full"``,
    ...) with ``kernel_size`` (and ``dilation``). Rules are resolved at construction, so
    those that depend on the input size (``"same"``/``"same_lower"`` at stride > 1) and
    negative pads (crops, which lose data) are refused: the inverse must know exactly
    what to crop. ``mode`` is any :func:`padkit.functional.pad` mode; every mode keeps
    the input unchanged in the middle, so the crop is an exact inverse.

    ``inverse(forward(x))`` equals ``x`` exactly and lives in storage of its own.

    Shape:
        - Input: ``(N, C, *spatial)``, with one or more spatial axes (as many as
          ``padding`` names, or every axis after the first two for an int or a rule)
        - Output: ``(N, C, *spatial_out)``, ``n + lo + hi`` on each spatial axis

    Example:
        >>> pad = SpatialPad(((0, 1), (2, 2)), mode="reflect")
        >>> x = torch.randn(1, 4, 6, 6)
        >>> pad(x).shape
        torch.Size([1, 4, 7, 10])
        >>> torch.equal(pad.inverse(pad(x)), x)
        True
        >>> SpatialPad("same_static", kernel_size=4).pairs_for(x)
        ((1, 2), (1, 2))
    """

    def __init__(
        self,
        padding: PaddingLike,
        mode: str = "constant",
        value: float = 0.0,
        *,
        kernel_size: int | Sequence[int] | None = None,
        dilation: int | Sequence[int] = 1,
    ) -> None:
        super().__init__()
        cls = type(self).__name__
        try:
            spec = Padding.parse(padding)
        except (PaddingError, TypeError) as err:
            raise type(err)(f"{cls}: {err}") from None
        try:
            self.mode = PF._pad_mode(mode)
        except PaddingError as err:
            raise PaddingError(f"{cls}: {err}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{cls}: value must be a float, got {type(value).__name__} ({value!r})")
        if value != 0 and self.mode != "constant":
            raise PaddingError(
                f"{cls}: value= is only used by mode 'constant', got value={value!r} with "
                f"mode={mode!r}"
            )
        self.value = float(value)
        if not spec.is_explicit and kernel_size is None:
            raise PaddingError(
                f"{cls}: padding {spec.describe()} holds rules; pass kernel_size (and "
                "dilation where it matters) to resolve them"
            )
        self.pad_spec = spec
        self.kernel_size = kernel_size
        self.dilation = dilation
        self._cache: dict[int, tuple[tuple[int, int], ...]] = {}
        if spec.ndim is not None:
            self._cache[spec.ndim] = self._resolve(spec.ndim)

    def _resolve(self, nd: int) -> tuple[tuple[int, int], ...]:
        cls = type(self).__name__
        try:
            spec = self.pad_spec.expand(nd)
            if spec.is_explicit:
                return tuple(a for a in spec.axes if isinstance(a, tuple))
            if self.kernel_size is None:  # refused at construction; kept for type narrowing
                raise PaddingError(f"{cls}: padding {spec.describe()} needs kernel_size")
            return spec.resolve(self.kernel_size, 1, self.dilation, ndim=nd)
        except (PaddingError, TypeError) as err:
            raise type(err)(f"{cls}: {err}") from None

    def pairs_for(self, x: Tensor) -> tuple[tuple[int, int], ...]:
        """The ``(lo, hi)`` pads, in axis order, that :meth:`forward` applies to ``x``."""
        cls = type(self).__name__
        _check_batched(cls, x, "input")
        nd = self.pad_spec.ndim if self.pad_spec.ndim is not None else x.dim() - 2
        if nd < 1 or nd > x.dim() - 2:
            raise PaddingError(
                f"{cls}: padding {self.pad_spec.describe()} needs {max(nd, 1)} spatial axis/axes "
                f"after (N, C), but the tensor has shape {tuple(x.shape)}"
            )
        if nd not in self._cache:
            self._cache[nd] = self._resolve(nd)
        return self._cache[nd]

    def forward(self, input: Tensor) -> Tensor:
        pairs = self.pairs_for(input)
        return PF.pad(input, pairs, self.mode, self.value if self.mode == "constant" else None)

    def inverse(self, output: Tensor) -> Tensor:
        """Crop the pads off: the exact inverse of :meth:`forward`."""
        pairs = self.pairs_for(output)
        first = output.dim() - len(pairs)
        x = output
        for i, (lo, hi) in enumerate(pairs):
            n = x.shape[first + i]
            if n < lo + hi:
                raise PaddingError(
                    f"{type(self).__name__}: output axis {first + i} has size {n}, smaller than "
                    f"the pads {(lo, hi)} it should carry; shape {tuple(output.shape)}"
                )
            x = x.narrow(first + i, lo, n - lo - hi)
        return _fresh(x)

    def extra_repr(self) -> str:
        text = f"padding={self.pad_spec.describe()}, mode={self.mode!r}"
        if self.mode == "constant" and self.value != 0:
            text += f", value={self.value}"
        if not self.pad_spec.is_explicit:
            text += f", kernel_size={self.kernel_size}, dilation={self.dilation}"
        return text


# ----------------------------------------------------------------------------- couplings


class AdditiveCoupling(nn.Module):
    """The RevNet additive coupling, with the same arithmetic as memcnn's.

    The input is split in two halves ``x1, x2`` along ``split_dim``;
    ``y1 = x1 + F(x2)``, ``y2 = x2 + G(y1)``, ``y = cat(y1, y2)``. :meth:`inverse`
    computes ``x2 = y2 - G(y1)``, ``x1 = y1 - F(x2)``, with ``F = Fm`` and ``G = Gm``.
    ``Fm`` and ``Gm`` must keep the shape of a half (stride 1, "same" padding; any padkit
    padding works inside them) and be deterministic; they need not be invertible. ``Gm``
    defaults to a deep copy of ``Fm`` (separate weights). Argument names, attribute
    names and so ``state_dict`` keys are memcnn's, so weights move between the two.

    The inverse is exact up to floating-point rounding (``x1 + F(x2) - F(x2)``).

    Shape:
        - Input: ``(N, C, *)`` with ``C`` even (or, generally, the size along
          ``split_dim`` even)
        - Output: the same shape

    Example:
        >>> import padkit.nn as pnn
        >>> c = AdditiveCoupling(pnn.Conv2d(4, 4, 4, padding="same"))   # even kernel
        >>> x = torch.randn(2, 8, 6, 6)
        >>> y = c(x)
        >>> y.shape, torch.allclose(c.inverse(y), x, atol=1e-5)
        (torch.Size([2, 8, 6, 6]), True)
    """

    def __init__(self, Fm: nn.Module, Gm: nn.Module | None = None, split_dim: int = 1) -> None:
        super().__init__()
        cls = type(self).__name__
        if not isinstance(Fm, nn.Module):
            raise TypeError(
                f"{cls}: Fm must be a torch.nn.Module, got {type(Fm).__name__} ({Fm!r})"
            )
        if Gm is not None and not isinstance(Gm, nn.Module):
            raise TypeError(
                f"{cls}: Gm must be a torch.nn.Module or None, got {type(Gm).__name__} ({Gm!r})"
            )
        if isinstance(split_dim, bool):
            raise TypeError(f"{cls}: split_dim must be an int, got a bool ({split_dim!r})")
        try:
            self.split_dim = operator.index(split_dim)
        except TypeError:
            raise TypeError(
                f"{cls}: split_dim must be an int, got {type(split_dim).__name__} ({split_dim!r})"
            ) from None
        self.Fm = Fm
        self.Gm = copy.deepcopy(Fm) if Gm is None else Gm

    def _halves(self, t: Tensor, what: str) -> tuple[Tensor, Tensor]:
        cls = type(self).__name__
        if not isinstance(t, Tensor):
            raise TypeError(f"{cls}: {what} must be a Tensor, got {type(t).__name__}")
        if not -t.dim() <= self.split_dim < t.dim() or t.shape[self.split_dim] % 2:
            raise PaddingError(
                f"{cls}: {what} must have an even size along split_dim={self.split_dim}, got "
                f"shape {tuple(t.shape)}"
            )
        a, b = torch.chunk(t, 2, dim=self.split_dim)
        return a.contiguous(), b.contiguous()

    def _run(self, name: str, half: Tensor) -> Tensor:
        """``Fm(half)`` or ``Gm(half)``, which must keep the half's shape."""
        out = getattr(self, name)(half)
        if not isinstance(out, Tensor) or out.shape != half.shape:
            got = f"shape {tuple(out.shape)}" if isinstance(out, Tensor) else type(out).__name__
            raise PaddingError(
                f"{type(self).__name__}: {name} returned {got} for a half of shape "
                f"{tuple(half.shape)}; Fm and Gm must return a tensor of the shape they are "
                "given (stride 1 and 'same' padding, e.g. padkit.nn.Conv2d(c, c, k, "
                "padding='same'))"
            )
        return out

    def forward(self, input: Tensor) -> Tensor:
        x1, x2 = self._halves(input, "input")
        y1 = x1 + self._run("Fm", x2)
        y2 = x2 + self._run("Gm", y1)
        return torch.cat([y1, y2], dim=self.split_dim)

    def inverse(self, output: Tensor) -> Tensor:
        """Recover the input from the output."""
        return self._inverse(output, None)

    def _inverse(self, output: Tensor, known: tuple[Tensor, Tensor] | None) -> Tensor:
        """The inverse, for an input known to hold ``value`` where ``mask`` is set.

        ``known = (mask, value)`` (shaped like the input) comes from a padding module
        that fed this coupling. The recovered ``x2`` is set to those values before it goes
        through ``Fm``: the rounding left in ``y2 - Gm(y1)`` is tiny, but ``Fm`` may
        magnify it without bound where its input is constant (a train-mode BatchNorm
        over an all-padding half divides it by ``sqrt(eps)``).
        """
        y1, y2 = self._halves(output, "output")
        x2 = y2 - self._run("Gm", y1)
        if known is not None:
            mask1, mask2 = torch.chunk(known[0], 2, dim=self.split_dim)
            value1, value2 = torch.chunk(known[1], 2, dim=self.split_dim)
            x2 = torch.where(mask2, value2, x2)
        x1 = y1 - self._run("Fm", x2)
        if known is not None:
            x1 = torch.where(mask1, value1, x1)
        return torch.cat([x1, x2], dim=self.split_dim)


class PaddedCoupling(nn.Module):
    """An invertible block that pads and then applies a coupling: ``coupling(pad(x))``.

    Use it as the first block of a reversible chain whose input is narrower than its
    couplings (3-channel images into 128 channels). The block maps the *unpadded* input
    to the coupling's output, so the padded tensor is only a transient inside the block:
    a checkpointing wrapper (:class:`ReversibleSequential`, or memcnn's
    ``InvertibleModuleWrapper``) keeps at most the small unpadded input, never the padded
    one. :meth:`inverse` is ``pad.inverse(coupling.inverse(y))``.

    ``pad`` and ``coupling`` are modules with an ``inverse`` method: padkit's
    :class:`ChannelPad`/:class:`SpatialPad`/:class:`AdditiveCoupling`, a memcnn coupling,
    another :class:`PaddedCoupling` or your own.

    Shape:
        - Input: what ``pad`` takes, e.g. ``(N, C_in, *)`` for :class:`ChannelPad`
        - Output: what ``coupling`` returns for the padded tensor, e.g. ``(N, C_out, *)``

    Example:
        >>> import padkit.nn as pnn
        >>> coupling = AdditiveCoupling(pnn.Conv2d(4, 4, 3, padding=1))
        >>> block = PaddedCoupling(ChannelPad(3, 8), coupling)
        >>> x = torch.randn(2, 3, 5, 5)
        >>> block(x).shape
        torch.Size([2, 8, 5, 5])
        >>> torch.allclose(block.inverse(block(x)), x, atol=1e-5)
        True
    """

    def __init__(self, pad: nn.Module, coupling: nn.Module) -> None:
        super().__init__()
        cls = type(self).__name__
        self.pad = _check_invertible(cls, "pad", pad)
        self.coupling = _check_invertible(cls, "coupling", coupling)

    def forward(self, input: Tensor) -> Tensor:
        out: Tensor = self.coupling(self.pad(input))
        return out

    def inverse(self, output: Tensor) -> Tensor:
        """Invert the coupling, then crop the padding off."""
        inner = _coupling_inverse(self.coupling, output, self.pad)
        out: Tensor = self.pad.inverse(inner)  # type: ignore[operator]
        return out


def _as_additive(coupling: nn.Module) -> AdditiveCoupling | None:
    """padkit's AdditiveCoupling, or a view of memcnn's (same arithmetic), else None."""
    if isinstance(coupling, AdditiveCoupling):
        return coupling
    kind = type(coupling)
    if (
        kind.__name__ == "AdditiveCoupling"
        and kind.__module__.split(".")[0] == "memcnn"
        and getattr(coupling, "implementation_bwd", None) == -1
        and isinstance(getattr(coupling, "Fm", None), nn.Module)
        and isinstance(getattr(coupling, "Gm", None), nn.Module)
        and isinstance(getattr(coupling, "split_dim", None), int)
    ):
        fm: nn.Module = coupling.Fm  # type: ignore[assignment]
        gm: nn.Module = coupling.Gm  # type: ignore[assignment]
        return AdditiveCoupling(fm, gm, coupling.split_dim)  # type: ignore[arg-type]
    return None


def _coupling_inverse(coupling: nn.Module, output: Tensor, before: nn.Module | None) -> Tensor:
    """``coupling.inverse(output)``, told which input values the padding ``before`` fixes.

    That is done for padkit's :class:`AdditiveCoupling` and memcnn's (whose inverse has
    the same arithmetic) when ``before`` is one of padkit's padding modules.
    """
    if before is not None:
        additive = _as_additive(coupling)
        known = _pad_constants(before, output) if additive is not None else None
        if additive is not None and known is not None:
            return additive._inverse(output, known)
    out: Tensor = coupling.inverse(output)  # type: ignore[operator]
    return out


class Unpad(nn.Module):
    """Crop off what a padding module added: ``Unpad(pad)(y)`` is ``pad.inverse(y)``.

    A crop discards data, so it cannot be a block of a reversible chain (its input
    could not be rebuilt in backward): :class:`ReversibleSequential` refuses it. Put it
    *after* the chain, where it costs nothing, since a crop saves no tensor for
    backward. ``pad`` is a :class:`ChannelPad`, a :class:`SpatialPad` or any module with
    an ``inverse`` method.

    Shape:
        - Input: what ``pad`` returns, e.g. ``(N, out_channels, *)`` for :class:`ChannelPad`
        - Output: what ``pad`` takes, e.g. ``(N, in_channels, *)``

    Example:
        >>> pad = ChannelPad(3, 8)
        >>> net = torch.nn.Sequential(
        ...     ReversibleSequential(pad, AdditiveCoupling(torch.nn.Conv2d(4, 4, 3, padding=1))),
        ...     Unpad(pad),   # back to 3 channels, outside the chain
        ... )
        >>> net(torch.randn(2, 3, 5, 5)).shape
        torch.Size([2, 3, 5, 5])
    """

    def __init__(self, pad: nn.Module) -> None:
        super().__init__()
        self.pad = _check_invertible(type(self).__name__, "pad", pad)

    def forward(self, input: Tensor) -> Tensor:
        out: Tensor = self.pad.inverse(input)  # type: ignore[operator]
        return out


# ----------------------------------------------------------------------------- the chain


def _block_inverse(blocks: Sequence[nn.Module], i: int, y: Tensor) -> Tensor:
    """The input of ``blocks[i]`` rebuilt from its output ``y``.

    An :class:`AdditiveCoupling` that follows a padding block is told which of its
    input values that padding fixes (see :meth:`AdditiveCoupling._inverse`).
    """
    return _coupling_inverse(blocks[i], y, blocks[i - 1] if i > 0 else None)


def _check_block_inverse(blocks: Sequence[nn.Module], i: int, x: Tensor, y: Tensor) -> None:
    """Raise :class:`NotInvertibleError` unless ``blocks[i]`` rebuilds ``x`` from ``y``."""
    block = blocks[i]
    with torch.no_grad(), _running_stats_kept(block):
        back = _block_inverse(blocks, i, y)
    what = f"ReversibleSequential: blocks[{i}] ({type(block).__name__})"
    advice = (
        "A block that discards data (a crop, an unpad, a strided op) cannot be rebuilt in "
        "backward and gives wrong gradients; end the chain before it and apply it after "
        "the chain (e.g. nn.Sequential(ReversibleSequential(...), padkit.reversible.Unpad(pad))"
        "), where it costs no memory"
    )
    if not isinstance(back, Tensor) or back.shape != x.shape:
        got = f"shape {tuple(back.shape)}" if isinstance(back, Tensor) else type(back).__name__
        raise NotInvertibleError(
            f"{what}: inverse(forward(x)) has {got} for an input x of shape "
            f"{tuple(x.shape)}. {advice}"
        )
    if x.numel() == 0:
        return
    err = float((back.double() - x.double()).abs().max())
    scale = max(1.0, float(x.abs().max()))
    tol = _inverse_tolerance(x.dtype) * scale
    if not err <= tol:
        raise NotInvertibleError(
            f"{what}: inverse(forward(x)) differs from x by up to {err:.3g} (allowed "
            f"{tol:.3g} in {x.dtype}, for |x| up to {scale:.3g}). {advice}"
        )


class _ReversibleChain(torch.autograd.Function):
    """Run invertible blocks without keeping their activations; rebuild them in backward.

    Inputs: ``(blocks, keep_input, check, x, *params)``. Forward runs the blocks under
    no_grad and saves only the output (and ``x`` when ``keep_input``); with ``check`` it
    also verifies each block's inverse. Backward walks the blocks in reverse: it
    recomputes each block's input with its inverse (block 0 uses the saved input when
    there is one), re-runs the block with grad on, and back-propagates through that one
    block. The norm layers' running statistics are put back after each backward
    re-run, so they change once per step, in forward, as in the plain network.
    """

    @staticmethod
    def forward(
        ctx: Any,
        blocks: tuple[nn.Module, ...],
        keep_input: bool,
        check: bool,
        x: Tensor,
        *params: Tensor,
    ) -> Tensor:
        ctx.blocks = blocks
        ctx.keep_input = keep_input
        ctx.params = params
        y = x
        for i, block in enumerate(blocks):
            block_input, y = y, block(y)
            if check:
                _check_block_inverse(blocks, i, block_input, y)
        if y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr():
            y = y.clone()  # an output that aliases the input would be rebuilt over it
        if keep_input:
            ctx.save_for_backward(x, y)
        else:
            ctx.save_for_backward(y)
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad_output: Tensor) -> tuple[Tensor | None, ...]:
        saved = ctx.saved_tensors
        y: Tensor = saved[-1].detach()
        x0: Tensor | None = saved[0].detach() if ctx.keep_input else None
        blocks: tuple[nn.Module, ...] = ctx.blocks
        params: tuple[Tensor, ...] = ctx.params
        index = {id(p): i for i, p in enumerate(params)}
        param_grads: list[Tensor | None] = [None] * len(params)
        grad: Tensor | None = grad_output
        for i in range(len(blocks) - 1, -1, -1):
            block = blocks[i]
            with _running_stats_kept(block):
                if i == 0 and x0 is not None:
                    x = x0
                else:
                    with torch.no_grad():
                        x = _block_inverse(blocks, i, y)
                x = x.detach().requires_grad_(i > 0 or bool(ctx.needs_input_grad[3]))
                own = [p for p in block.parameters() if id(p) in index]
                with torch.enable_grad():
                    out = block(x)
                wrt = ([x] if x.requires_grad else []) + own
                grads: tuple[Tensor | None, ...] = (None,) * len(wrt)
                if wrt and out.requires_grad:
                    grads = torch.autograd.grad(out, wrt, grad, allow_unused=True)
            if x.requires_grad:
                grad, grads = grads[0], grads[1:]
            else:
                grad = None
            for p, g in zip(own, grads):
                if g is not None:
                    j = index[id(p)]
                    prev = param_grads[j]
                    param_grads[j] = g if prev is None else prev + g
            y = x.detach()
            del out
        return (None, None, None, grad, *param_grads)


class ReversibleSequential(nn.Module):
    """A chain of invertible blocks whose activations are recomputed, not stored.

    Each block needs ``forward`` and ``inverse`` (:class:`AdditiveCoupling`,
    :class:`PaddedCoupling`, :class:`ChannelPad`, :class:`SpatialPad`, memcnn's
    couplings, or your own). When grad is enabled, the chain runs as one
    ``torch.autograd.Function`` that saves for backward only its output and, with
    ``keep_input=True`` (the default), its input; every other activation is rebuilt in
    backward from the output with the blocks' inverses. The memory for activations thus
    does not grow with the number of blocks, and the gradients equal those of running
    the blocks as a plain ``nn.Sequential`` up to the rounding of the inverses (which
    grows with depth in float32; see docs/reversible.md).

    ``keep_input=True`` keeps a reference to the tensor you pass in (which you usually
    hold anyway) so that the first block is recomputed from the exact input; with a
    :class:`PaddedCoupling` first, that is the small unpadded tensor. ``keep_input=False``
    rebuilds the input too and keeps only the output. Either way the chain never frees
    or writes into your tensors (memcnn's ``keep_input=False`` frees the input's storage
    in place). When a padding block (or the padding inside a :class:`PaddedCoupling`)
    feeds a padkit :class:`AdditiveCoupling`, the coupling's inverse sets the padded
    values to what the padding put there, so ``keep_input=False`` is as exact as
    ``keep_input=True`` even when a half holds only padding.

    Blocks must be deterministic (no dropout). They run once in forward and once more
    in backward (plus an inverse); a train-mode BatchNorm's running statistics are put
    back after the backward runs, so they are updated once per step, as in the plain
    network. Double backward is not supported.

    A block whose ``inverse`` does not rebuild its input (a crop) gives wrong gradients
    silently. ``check_inverse=True`` checks every block in every forward that records
    grad (one extra inverse per block) and raises :class:`NotInvertibleError` naming the
    first block whose ``inverse(forward(x))`` is not ``x`` to within ``sqrt(eps)`` of the
    dtype; use it while building a network. To end a chain with a crop, crop after it
    with :class:`Unpad`.

    Shape:
        - Input: what the first block takes, e.g. ``(N, C_in, *)``
        - Output: what the last block returns, e.g. ``(N, C, *)``

    Example:
        >>> import padkit.nn as pnn
        >>> def f():
        ...     return torch.nn.Sequential(pnn.Conv2d(4, 4, 3, padding="same"), torch.nn.Tanh())
        >>> net = ReversibleSequential(
        ...     PaddedCoupling(ChannelPad(3, 8), AdditiveCoupling(f(), f())),
        ...     *[AdditiveCoupling(f(), f()) for _ in range(3)],
        ... )
        >>> x = torch.randn(2, 3, 6, 6, requires_grad=True)
        >>> y = net(x)
        >>> y.shape
        torch.Size([2, 8, 6, 6])
        >>> y.square().sum().backward()
        >>> x.grad.shape
        torch.Size([2, 3, 6, 6])
        >>> torch.allclose(net.inverse(y.detach()), x.detach(), atol=1e-5)
        True
    """

    def __init__(
        self, *blocks: nn.Module, keep_input: bool = True, check_inverse: bool = False
    ) -> None:
        super().__init__()
        cls = type(self).__name__
        if not blocks:
            raise TypeError(f"{cls}: needs at least one block, got none")
        for i, block in enumerate(blocks):
            if isinstance(block, Unpad):
                raise TypeError(
                    f"{cls}: blocks[{i}] is an Unpad, which discards data and cannot be "
                    "rebuilt in backward; end the chain before it and crop after the chain: "
                    "nn.Sequential(ReversibleSequential(...), Unpad(pad))"
                )
            _check_invertible(cls, f"blocks[{i}]", block)
        self.blocks = nn.ModuleList(blocks)
        self.keep_input = _bool_arg(cls, "keep_input", keep_input)
        self.check_inverse = _bool_arg(cls, "check_inverse", check_inverse)

    def __len__(self) -> int:
        return len(self.blocks)

    def forward(self, input: Tensor) -> Tensor:
        if not isinstance(input, Tensor):
            raise TypeError(
                f"{type(self).__name__}: input must be a Tensor, got {type(input).__name__}"
            )
        params = tuple(p for p in self.parameters() if p.requires_grad)
        if not torch.is_grad_enabled() or not (input.requires_grad or params):
            y = input
            for block in self.blocks:
                y = block(y)
            return y
        out: Tensor = _ReversibleChain.apply(
            tuple(self.blocks), self.keep_input, self.check_inverse, input, *params
        )
        return out

    def inverse(self, output: Tensor) -> Tensor:
        """Run the blocks' inverses in reverse order (plain autograd, no memory saving)."""
        blocks = list(self.blocks)
        x = output
        for i in range(len(blocks) - 1, -1, -1):
            x = _block_inverse(blocks, i, x)
        return x

    def extra_repr(self) -> str:
        text = f"keep_input={self.keep_input}"
        return text + (", check_inverse=True" if self.check_inverse else "")
