"""Drop-in ``torch.nn`` conv, transposed-conv and pooling layers with exact padding.

Each layer subclasses its torch namesake (``isinstance(padkit.nn.Conv2d(...),
torch.nn.Conv2d)`` holds), takes the same arguments, and has the same
``state_dict`` keys, so pretrained weights load unchanged. ``padding=`` accepts
every padkit form (see :class:`padkit.Padding`). Padding that does not depend on
the input size is resolved at construction; ``"same"`` with stride > 1 is resolved
per input shape and cached.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import functional as PF
from .plan import Plan, plan_conv, plan_pool
from .spec import Padding, PaddingError, PaddingLike, _tuple_of

__all__ = [
    "AvgPool1d",
    "AvgPool2d",
    "AvgPool3d",
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "ConvTranspose3d",
    "LPPool1d",
    "LPPool2d",
    "LPPool3d",
    "MaxPool1d",
    "MaxPool2d",
    "MaxPool3d",
]


def _spec(padding: PaddingLike, nd: int, cls: str) -> Padding:
    try:
        return Padding.parse(padding, nd)
    except (PaddingError, TypeError) as err:
        raise type(err)(f"{cls}: {err}") from None


def _torch_form(spec: Padding, static: tuple[tuple[int, int], ...] | None) -> Any:
    """What ``.padding`` shows: torch's symmetric tuple where one exists, else the spec."""
    if static is not None and all(lo == hi for lo, hi in static) and not spec.ceil_mode:
        return tuple(lo for lo, _ in static)
    return spec


def _static_pairs(
    spec: Padding, k: tuple[int, ...], s: tuple[int, ...], d: tuple[int, ...]
) -> tuple[tuple[int, int], ...] | None:
    if spec.needs_input_size(s):
        return None
    return spec.resolve(k, s, d)


def _check_sizes(
    cls: str, nd: int, kernel_size: Any, stride: Any, dilation: Any
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    try:
        k = _tuple_of(kernel_size, nd, "kernel_size")
        s = _tuple_of(stride, nd, "stride")
        d = _tuple_of(dilation, nd, "dilation")
    except (PaddingError, TypeError) as err:
        raise type(err)(f"{cls}: {err}") from None
    return k, s, d


def _check_groups(cls: str, in_channels: Any, out_channels: Any, groups: Any) -> None:
    """torch's channel/group rules, with the values in the message."""
    from .spec import _as_int

    try:
        g = _as_int(groups, "groups")
        cin = _as_int(in_channels, "in_channels")
        cout = _as_int(out_channels, "out_channels")
    except TypeError as err:
        raise TypeError(f"{cls}: {err}") from None
    if g < 1:
        raise PaddingError(f"{cls}: groups must be a positive int, got groups={groups!r}")
    for name, value in (("in_channels", cin), ("out_channels", cout)):
        if value < 1 or value % g:
            raise PaddingError(f"{cls}: {name}={value} must be a positive multiple of groups={g}")


def _padding_repr(spec: Padding) -> str:
    return (
        spec.describe()
        if spec.ndim is None
        else repr(spec.to_jax())
        if spec.is_explicit
        else ("(" + ", ".join(repr(a) for a in spec.axes) + ")")
    )


# ----------------------------------------------------------------------------- fast path
#
# A layer called again with an input of the same shape runs exactly what its first call
# ran, without re-parsing its arguments or re-planning: the first call (the full path, with
# every check) stores a closure per key, later calls look it up. Tracing (torch.compile,
# torch.export, the ONNX exporters, torch.jit) always takes the full path.

_FastFn = Callable[[Any, Tensor], Any]


def _tracing() -> bool:
    return bool(torch.compiler.is_compiling() or torch._C._get_tracing_state())


class _FastCache(dict[tuple[Any, ...], "_FastFn | None"]):
    """Per-layer memo: key -> closure (None: this key always takes the full path)."""

    MAX_ENTRIES = 64

    def remember(self, key: tuple[Any, ...], fn: _FastFn | None) -> None:
        if len(self) >= self.MAX_ENTRIES:
            self.clear()
        self[key] = fn


class _Memo:
    """Drops the fast-path memo (closures) from pickles and copies."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_padkit_fast", None)
        return state


def _fast_cache(module: Any) -> _FastCache:
    cache: _FastCache | None = module.__dict__.get("_padkit_fast")
    if cache is None:
        cache = _FastCache()
        module.__dict__["_padkit_fast"] = cache
    return cache


class _PaddedWeight:
    """The zero-extended kernel of a frozen weight, rebuilt when the weight changes."""

    def __init__(self, ext: Sequence[int]) -> None:
        self.ext = ext
        self.source: Tensor | None = None
        self.stamp: tuple[int, int] = (0, -1)
        self.padded: Tensor | None = None

    def __call__(self, weight: Tensor) -> Tensor:
        if torch.is_grad_enabled() and weight.requires_grad:
            return F.pad(weight, self.ext)
        stamp = (weight.data_ptr(), weight._version)
        if self.source is not weight or self.stamp != stamp or self.padded is None:
            self.padded = F.pad(weight.detach(), self.ext)
            self.source, self.stamp = weight, stamp
        return self.padded


def _conv_fast(layer: Any, x: Tensor) -> _FastFn | None:
    nd = layer._nd
    if x.dim() != nd + 2 or layer.padding_mode != "zeros":
        return None
    plan = layer.plan(tuple(x.shape))
    conv = PF._CONV[nd]
    s, d, g = tuple(layer.stride), tuple(layer.dilation), layer.groups
    extend = (
        _PaddedWeight(PF._torch_pad(plan.kernel_ext)) if plan.strategy == "zero_extend" else None
    )
    # the closure takes the layer as an argument: replicas (DataParallel) share the memo
    return lambda m, x: PF.run_conv_plan(plan, conv, x, m.weight, m.bias, s, d, g, extend=extend)


# ----------------------------------------------------------------------------- convolution


class _PadConv(_Memo):
    """Shared behaviour of the padkit conv layers (mixed into the torch classes)."""

    pad_spec: Padding
    _nd: int
    _static: tuple[tuple[int, int], ...] | None
    # provided by the torch base class
    in_channels: int
    out_channels: int
    kernel_size: Any
    stride: Any
    dilation: Any
    groups: int
    padding_mode: Any
    output_padding: Any
    weight: Tensor
    bias: Tensor | None

    def _setup(self, padding: PaddingLike, padding_mode: Any) -> str:
        """Validates the padding; returns the padding_mode to hand to the torch base class."""
        cls = type(self).__name__
        try:
            mode = PF.check_padding_mode(padding_mode, self._nd)
        except PaddingError as err:
            raise PaddingError(f"{cls}: {err}") from None
        self.pad_spec = _spec(padding, self._nd, cls)
        return mode if isinstance(mode, str) else "zeros"

    def _finish(self) -> None:
        k = tuple(self.kernel_size)
        s = tuple(self.stride)
        d = tuple(self.dilation)
        self._static = _static_pairs(self.pad_spec, k, s, d)
        self.padding = _torch_form(self.pad_spec, self._static)

    def resolved_padding(
        self, input_size: Sequence[int] | None = None
    ) -> tuple[tuple[int, int], ...]:
        """The ``(lo, hi)`` pads per spatial axis (``input_size`` where they depend on it)."""
        if self._static is not None:
            return self._static
        if input_size is None:
            raise PaddingError(
                f"{type(self).__name__}: padding {self.pad_spec.describe()} depends on the input "
                "size; pass input_size"
            )
        return PF.resolve(
            self.pad_spec,
            tuple(self.kernel_size),
            tuple(self.stride),
            tuple(self.dilation),
            tuple(input_size)[-self._nd :],
        )

    def plan(self, input_size: Sequence[int]) -> Plan:
        """What runs for an input of this shape (full or spatial), and why.

        Example:
            >>> Conv2d(32, 32, 3, stride=2, padding="same", groups=32).plan((1, 32, 56, 56))
            ... # doctest: +ELLIPSIS
            Plan(op='conv', strategy='zero_extend', ...)
        """
        sizes = tuple(int(v) for v in tuple(input_size)[-self._nd :])
        pairs = self.resolved_padding(sizes)
        mode = self.padding_mode if isinstance(self.padding_mode, str) else "mixed"
        return plan_conv(
            pairs,
            tuple(self.kernel_size),
            tuple(self.stride),
            tuple(self.dilation),
            sizes,
            groups=self.groups,
            in_channels=self.in_channels,
            padding_mode=mode,
        )

    def extra_repr(self) -> str:
        s = "{in_channels}, {out_channels}, kernel_size={kernel_size}, stride={stride}".format(
            **self.__dict__
        )
        spec = self.pad_spec
        if not (spec.is_explicit and all(a == (0, 0) for a in spec.axes)):
            s += f", padding={_padding_repr(spec)}"
        if self.dilation != (1,) * self._nd:
            s += f", dilation={self.dilation}"
        if getattr(self, "output_padding", (0,) * self._nd) != (0,) * self._nd:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class _ConvMixin(_PadConv):
    def forward(self, input: Tensor) -> Tensor:
        if _tracing():
            return self._forward(input, self.weight, self.bias)
        key = (
            input.shape,
            self.weight.shape,
            self.stride,
            self.dilation,
            self.groups,
            self.padding_mode,
            self.pad_spec,
        )
        cache = _fast_cache(self)
        fn = cache.get(key, False)
        if fn is False:
            out = self._forward(input, self.weight, self.bias)
            cache.remember(key, _conv_fast(self, input))
            return out
        if fn is None:
            return self._forward(input, self.weight, self.bias)
        return fn(self, input)  # type: ignore[operator,no-any-return]

    def _forward(self, input: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        return PF._conv(
            type(self).__name__,
            self._nd,
            input,
            weight,
            bias,
            self.stride,
            self.pad_spec,
            self.dilation,
            self.groups,
            self.padding_mode,
        )


def _conv_init(
    self: Any,
    base: type[nn.Module],
    nd: int,
    in_channels: int,
    out_channels: int,
    kernel_size: Any,
    stride: Any,
    padding: PaddingLike,
    dilation: Any,
    groups: int,
    bias: bool,
    padding_mode: Any,
    device: Any,
    dtype: Any,
) -> None:
    cls = type(self).__name__
    self._nd = nd
    _check_sizes(cls, nd, kernel_size, stride, dilation)
    _check_groups(cls, in_channels, out_channels, groups)
    torch_mode = self._setup(padding, padding_mode)
    base.__init__(
        self,
        in_channels,
        out_channels,
        kernel_size,
        stride,
        0,
        dilation,
        groups,
        bias,
        torch_mode,
        device,
        dtype,
    )
    if not isinstance(padding_mode, str):
        self.padding_mode = tuple(padding_mode)
    self._finish()


class Conv1d(_ConvMixin, nn.Conv1d):
    """``torch.nn.Conv1d`` with every padkit ``padding=`` form, exact at any stride.

    Shape:
        - Input: ``(N, C_in, L)`` or ``(C_in, L)``
        - Output: ``(N, C_out, L_out)`` with
          ``L_out = (L + lo + hi - dilation*(kernel_size-1) - 1) // stride + 1``, where
          ``(lo, hi)`` are the resolved pads (``"same"``: ``L_out = ceil(L / stride)``).

    Example:
        >>> conv = Conv1d(1, 1, 3, stride=2, padding="same", bias=False)
        >>> conv(torch.ones(1, 1, 8)).shape
        torch.Size([1, 1, 4])
        >>> Conv1d(2, 4, 3, padding="causal", dilation=2).resolved_padding()
        ((4, 0),)
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: PaddingLike = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str | Sequence[str] = "zeros",
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        _conv_init(
            self,
            nn.Conv1d,
            1,
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            bias,
            padding_mode,
            device,
            dtype,
        )


class Conv2d(_ConvMixin, nn.Conv2d):
    """``torch.nn.Conv2d`` with every padkit ``padding=`` form, exact at any stride.

    Shape:
        - Input: ``(N, C_in, H, W)`` or ``(C_in, H, W)``
        - Output: ``(N, C_out, H_out, W_out)``, per axis
          ``(n + lo + hi - dilation*(kernel_size-1) - 1) // stride + 1`` with the resolved
          pads ``(lo, hi)`` (``"same"``: ``ceil(n / stride)``).

    Example:
        >>> conv = Conv2d(3, 8, 3, stride=2, padding="same")     # TF/Keras 'same'
        >>> conv(torch.ones(1, 3, 224, 224)).shape
        torch.Size([1, 8, 112, 112])
        >>> conv.resolved_padding((224, 224))
        ((0, 1), (0, 1))
        >>> list(conv.state_dict()) == list(torch.nn.Conv2d(3, 8, 3).state_dict())
        True
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: PaddingLike = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str | Sequence[str] = "zeros",
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        _conv_init(
            self,
            nn.Conv2d,
            2,
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            bias,
            padding_mode,
            device,
            dtype,
        )


class Conv3d(_ConvMixin, nn.Conv3d):
    """``torch.nn.Conv3d`` with every padkit ``padding=`` form, exact at any stride.

    Shape:
        - Input: ``(N, C_in, D, H, W)`` or ``(C_in, D, H, W)``
        - Output: ``(N, C_out, D_out, H_out, W_out)``, per axis as for :class:`Conv2d`.

    Example:
        >>> conv = Conv3d(3, 4, 3, padding=("causal", "same", "same"))   # video
        >>> conv(torch.ones(1, 3, 5, 8, 8)).shape
        torch.Size([1, 4, 5, 8, 8])
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: PaddingLike = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str | Sequence[str] = "zeros",
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        _conv_init(
            self,
            nn.Conv3d,
            3,
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            dilation,
            groups,
            bias,
            padding_mode,
            device,
            dtype,
        )


# ----------------------------------------------------------------------------- transposed


class _ConvTransposeMixin(_PadConv):
    def _forward_t(self, input: Tensor, output_size: Sequence[int] | None) -> Tensor:
        return PF._conv_transpose(
            type(self).__name__,
            self._nd,
            input,
            self.weight,
            self.bias,
            self.stride,
            self.pad_spec,
            self.output_padding,
            self.groups,
            self.dilation,
            output_size,
        )

    def resolved_crops(self, input_size: Sequence[int]) -> tuple[tuple[int, int], ...]:
        """What the layer crops from the full output ``(n-1)*stride + k_eff``, per side."""
        return PF.transpose_crops(
            self.pad_spec,
            tuple(self.kernel_size),
            tuple(self.stride),
            tuple(self.dilation),
            tuple(input_size)[-self._nd :],
        )


def _conv_t_init(
    self: Any,
    base: type[nn.Module],
    nd: int,
    in_channels: int,
    out_channels: int,
    kernel_size: Any,
    stride: Any,
    padding: PaddingLike,
    output_padding: Any,
    groups: int,
    bias: bool,
    dilation: Any,
    padding_mode: str,
    device: Any,
    dtype: Any,
) -> None:
    cls = type(self).__name__
    self._nd = nd
    k, s, d = _check_sizes(cls, nd, kernel_size, stride, dilation)
    _check_groups(cls, in_channels, out_channels, groups)
    if padding_mode != "zeros":
        raise PaddingError(
            f"{cls}: padding_mode must be 'zeros' for a transposed conv (it crops its output "
            f"rather than padding its input), got {padding_mode!r}"
        )
    self._setup(padding, padding_mode)
    try:
        op = _tuple_of(output_padding, nd, "output_padding", minimum=0)
        PF.check_output_padding(op, s, d)
    except (PaddingError, TypeError) as err:
        raise type(err)(f"{cls}: {err}") from None
    base.__init__(
        self,
        in_channels,
        out_channels,
        kernel_size,
        stride,
        0,
        output_padding,
        groups,
        bias,
        dilation,
        padding_mode,
        device,
        dtype,
    )
    self._static = None
    self.padding = (
        _torch_form(self.pad_spec, self.pad_spec.resolve(k, s, d))
        if (self.pad_spec.is_explicit)
        else self.pad_spec
    )


class ConvTranspose1d(_ConvTransposeMixin, nn.ConvTranspose1d):
    """``torch.nn.ConvTranspose1d`` with per-side crops and TF ``"same"``.

    ``padding`` says what to crop from the full output ``(L-1)*stride + k_eff``: explicit
    pairs crop per side (torch's ``p`` is ``(p, p)``); ``"same"`` gives ``L*stride`` (TF
    ``Conv1DTranspose``, ONNX ``SAME_UPPER``), ``"same_lower"`` the ONNX ``SAME_LOWER``
    variant; other rules crop what they would pad in the forward conv. ``output_padding``
    (or ``output_size`` at call time) extends the end.

    Shape:
        - Input: ``(N, C_in, L)`` or ``(C_in, L)``
        - Output: ``(N, C_out, L_out)``,
          ``L_out = (L-1)*stride + dilation*(kernel_size-1) + 1 - lo - hi + output_padding``.

    Example:
        >>> up = ConvTranspose1d(1, 1, 3, stride=2, padding="same", bias=False)
        >>> up(torch.ones(1, 1, 5)).shape
        torch.Size([1, 1, 10])
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: PaddingLike = 0,
        output_padding: int | Sequence[int] = 0,
        groups: int = 1,
        bias: bool = True,
        dilation: int | Sequence[int] = 1,
        padding_mode: str = "zeros",
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        _conv_t_init(
            self,
            nn.ConvTranspose1d,
            1,
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            output_padding,
            groups,
            bias,
            dilation,
            padding_mode,
            device,
            dtype,
        )

    def forward(self, input: Tensor, output_size: list[int] | None = None) -> Tensor:
        return self._forward_t(input, output_size)


class ConvTranspose2d(_ConvTransposeMixin, nn.ConvTranspose2d):
    """``torch.nn.ConvTranspose2d`` with per-side crops and TF ``"same"``.

    See :class:`ConvTranspose1d` for what ``padding`` means.

    Shape:
        - Input: ``(N, C_in, H, W)`` or ``(C_in, H, W)``
        - Output: ``(N, C_out, H_out, W_out)``, per axis
          ``(n-1)*stride + dilation*(kernel_size-1) + 1 - lo - hi + output_padding``.

    Example:
        >>> up = ConvTranspose2d(8, 4, 4, stride=2, padding="same")
        >>> up(torch.ones(1, 8, 7, 9)).shape
        torch.Size([1, 4, 14, 18])
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: PaddingLike = 0,
        output_padding: int | Sequence[int] = 0,
        groups: int = 1,
        bias: bool = True,
        dilation: int | Sequence[int] = 1,
        padding_mode: str = "zeros",
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        _conv_t_init(
            self,
            nn.ConvTranspose2d,
            2,
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            output_padding,
            groups,
            bias,
            dilation,
            padding_mode,
            device,
            dtype,
        )

    def forward(self, input: Tensor, output_size: list[int] | None = None) -> Tensor:
        return self._forward_t(input, output_size)


class ConvTranspose3d(_ConvTransposeMixin, nn.ConvTranspose3d):
    """``torch.nn.ConvTranspose3d`` with per-side crops and TF ``"same"``.

    See :class:`ConvTranspose1d` for what ``padding`` means.

    Shape:
        - Input: ``(N, C_in, D, H, W)`` or ``(C_in, D, H, W)``
        - Output: ``(N, C_out, D_out, H_out, W_out)``, per axis as for :class:`ConvTranspose2d`.

    Example:
        >>> up = ConvTranspose3d(2, 2, 3, stride=2, padding="same")
        >>> up(torch.ones(1, 2, 2, 3, 4)).shape
        torch.Size([1, 2, 4, 6, 8])
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        padding: PaddingLike = 0,
        output_padding: int | Sequence[int] = 0,
        groups: int = 1,
        bias: bool = True,
        dilation: int | Sequence[int] = 1,
        padding_mode: str = "zeros",
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        _conv_t_init(
            self,
            nn.ConvTranspose3d,
            3,
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            output_padding,
            groups,
            bias,
            dilation,
            padding_mode,
            device,
            dtype,
        )

    def forward(self, input: Tensor, output_size: list[int] | None = None) -> Tensor:
        return self._forward_t(input, output_size)


# ----------------------------------------------------------------------------- pooling


class _PadPool(_Memo):
    pad_spec: Padding
    _nd: int
    _static: tuple[tuple[int, int], ...] | None
    # provided by the torch base class
    kernel_size: Any
    stride: Any
    ceil_mode: bool

    def _pool_setup(
        self, kernel_size: Any, stride: Any, padding: PaddingLike, dilation: Any
    ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        cls = type(self).__name__
        k, _, d = _check_sizes(cls, self._nd, kernel_size, 1, dilation)
        s = (
            k
            if stride is None or (isinstance(stride, Sequence) and len(stride) == 0)
            else (_check_sizes(cls, self._nd, 1, stride, 1)[1])
        )
        self.pad_spec = _spec(padding, self._nd, cls)
        self._static = None if self.pad_spec.ceil_mode else _static_pairs(self.pad_spec, k, s, d)
        return k, s, d

    def resolved_padding(
        self, input_size: Sequence[int] | None = None
    ) -> tuple[tuple[int, int], ...]:
        """The ``(lo, hi)`` pads per spatial axis (``input_size`` where they depend on it)."""
        if self._static is not None:
            return self._static
        if input_size is None:
            raise PaddingError(
                f"{type(self).__name__}: padding {self.pad_spec.describe()} depends on the input "
                "size; pass input_size"
            )
        k = _tuple_of(self.kernel_size, self._nd, "kernel_size")
        s = _tuple_of(self.stride, self._nd, "stride")
        d = _tuple_of(getattr(self, "dilation", 1), self._nd, "dilation")
        return PF.resolve(self.pad_spec, k, s, d, tuple(input_size)[-self._nd :])

    def plan(self, input_size: Sequence[int], *, channels_last: bool = False) -> Plan:
        """What runs for an input of this shape (full or spatial), and why.

        ``channels_last``: the input's memory layout, which average pools plan by.

        Example:
            >>> print(MaxPool2d(3, 2, padding="same").plan((1, 8, 112, 112)))  # doctest: +ELLIPSIS
            max_pool: ceil_mode (pads [(0, 1), (0, 1)]) - the end pads are ...ceil_mode overhang...
        """
        sizes = tuple(int(v) for v in tuple(input_size)[-self._nd :])
        pairs = self.resolved_padding(sizes)
        k = _tuple_of(self.kernel_size, self._nd, "kernel_size")
        s = _pool_stride(self)
        d = _tuple_of(getattr(self, "dilation", 1), self._nd, "dilation")
        ceil = bool(self.ceil_mode) or self.pad_spec.ceil_mode
        if isinstance(self, _MaxPoolMixin):
            return plan_pool("max_pool", pairs, k, s, d, sizes, ceil_mode=ceil)
        if isinstance(self, _AvgPoolMixin):
            return plan_pool(
                "avg_pool",
                pairs,
                k,
                s,
                d,
                sizes,
                ceil_mode=ceil,
                count_include_pad=self.count_include_pad,
                channels_last=channels_last,
            )
        return plan_pool("lp_pool", pairs, k, s, d, sizes, ceil_mode=ceil, native_dtype=False)

    def _pad_repr(self) -> str:
        spec = self.pad_spec
        if spec.is_explicit and all(a == (0, 0) for a in spec.axes):
            return ""
        return f", padding={_padding_repr(spec)}"


def _pool_padding_attr(spec: Padding, static: tuple[tuple[int, int], ...] | None, nd: int) -> Any:
    form = _torch_form(spec, static)
    if isinstance(form, tuple) and nd >= 1:
        return form[0] if len(set(form)) == 1 else form
    return form


def _pool_fast(layer: Any, x: Tensor, op: str) -> _FastFn | None:
    nd = layer._nd
    if x.dim() != nd + 2 or layer.pad_spec.ceil_mode:
        return None
    if op == "avg_pool" and (
        not x.dtype.is_floating_point
        or (nd == 3 and x.device.type == "cpu" and x.dtype in (torch.float16, torch.bfloat16))
    ):
        return None
    plan = layer.plan(tuple(x.shape), channels_last=PF.channels_last(x))
    if PF._native is not None:  # the optional oneDNN backend (padkit.native)
        fast: _FastFn | None = PF._native.pool_layer(layer, op, plan, x)
        if fast is not None:
            return fast
    if plan.strategy == "explicit":
        return None
    k = PF._lift(nd, _tuple_of(layer.kernel_size, nd, "kernel_size"), 1)
    s = PF._lift(nd, _pool_stride(layer), 1)
    p = PF._lift(nd, plan.native_padding, 0)
    ceil = plan.ceil_mode
    crop = plan.strategy == "crop"

    def finish(out: Tensor) -> Tensor:
        out = PF._from2d(out, nd)
        return PF._narrow_out(out, plan) if crop else out

    if op == "avg_pool" and plan.strategy == "zero_extend":
        conv, native = PF._CONV[nd], plan.native_padding
        kernel = _tuple_of(layer.kernel_size, nd, "kernel_size")
        weights: dict[tuple[Any, ...], Tensor] = {}

        def as_conv(m: Any, x: Tensor) -> Tensor:
            key = (x.shape[1], x.dtype, x.device)
            w = weights.get(key)
            if w is None:
                w = weights[key] = PF.mean_kernel(x, kernel, plan.kernel_ext, m.divisor_override)
            return conv(x, w, None, s[-nd:], native, 1, x.shape[1])

        return as_conv
    if op == "avg_pool":
        pool = PF._AVG_POOL[max(nd, 2)]
        include, div = bool(layer.count_include_pad), layer.divisor_override
        return lambda m, x: finish(pool(PF._to2d(x, nd), k, s, p, ceil, include, div))
    d = PF._lift(nd, _tuple_of(layer.dilation, nd, "dilation"), 1)
    if layer.return_indices:
        mp = PF._MAX_POOL[max(nd, 2)]

        def with_indices(m: Any, x: Tensor) -> tuple[Tensor, Tensor]:
            out, idx = mp(PF._to2d(x, nd), k, s, p, d, ceil, True)
            return finish(out), finish(idx)

        return with_indices
    mp = torch.max_pool3d if nd == 3 else torch.max_pool2d
    return lambda m, x: finish(mp(PF._to2d(x, nd), k, s, p, d, ceil))


def _pool_stride(layer: Any) -> tuple[int, ...]:
    k = _tuple_of(layer.kernel_size, layer._nd, "kernel_size")
    return k if layer.stride is None else _tuple_of(layer.stride, layer._nd, "stride")


def _pool_forward(layer: Any, input: Tensor, op: str, full: Callable[[Tensor], Any]) -> Any:
    if _tracing():
        return full(input)
    key = (
        input.shape,
        input.dtype,
        input.device.type,
        layer.kernel_size,
        layer.stride,
        layer.ceil_mode,
        layer.pad_spec,
        getattr(layer, "dilation", 1),
        getattr(layer, "return_indices", False),
        getattr(layer, "count_include_pad", True),
        getattr(layer, "divisor_override", None),
        op == "avg_pool" and PF.channels_last(input),
        None if PF._native is None else PF.channels_last(input),
    )
    cache = _fast_cache(layer)
    fn = cache.get(key, False)
    if fn is False:
        out = full(input)
        cache.remember(key, _pool_fast(layer, input, op))
        return out
    if fn is None:
        return full(input)
    return fn(layer, input)  # type: ignore[operator]


class _MaxPoolMixin(_PadPool):
    dilation: Any
    return_indices: bool

    def forward(self, input: Tensor) -> Any:
        return _pool_forward(self, input, "max_pool", self._forward)

    def _forward(self, input: Tensor) -> Any:
        return PF._max_pool(
            type(self).__name__,
            self._nd,
            input,
            self.kernel_size,
            self.stride,
            self.pad_spec,
            self.dilation,
            self.ceil_mode,
            self.return_indices,
        )

    def extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride}"
            f"{self._pad_repr()}, dilation={self.dilation}, "
            f"ceil_mode={self.ceil_mode}"
        )


def _max_init(
    self: Any,
    base: type[nn.Module],
    nd: int,
    kernel_size: Any,
    stride: Any,
    padding: PaddingLike,
    dilation: Any,
    return_indices: bool,
    ceil_mode: bool,
) -> None:
    self._nd = nd
    _k, _s, _d = self._pool_setup(kernel_size, stride, padding, dilation)
    base.__init__(self, kernel_size, stride, 0, dilation, return_indices, ceil_mode)
    self.padding = _pool_padding_attr(self.pad_spec, self._static, nd)


class MaxPool1d(_MaxPoolMixin, nn.MaxPool1d):
    """``torch.nn.MaxPool1d`` with every padkit ``padding=`` form (pads never win).

    Pads may exceed half the kernel; a window entirely in padding gives −∞ (the dtype's
    minimum for integers).

    Shape:
        - Input: ``(N, C, L)`` or ``(C, L)``
        - Output: ``(N, C, L_out)``, ``L_out`` from :func:`padkit.pool_output_size`.

    Example:
        >>> pool = MaxPool1d(3, 2, padding="same")
        >>> pool(torch.tensor([[[1.0, 5.0, 2.0, 4.0]]]))
        tensor([[[5., 4.]]])
    """

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: PaddingLike = 0,
        dilation: int | Sequence[int] = 1,
        return_indices: bool = False,
        ceil_mode: bool = False,
    ) -> None:
        _max_init(
            self, nn.MaxPool1d, 1, kernel_size, stride, padding, dilation, return_indices, ceil_mode
        )


class MaxPool2d(_MaxPoolMixin, nn.MaxPool2d):
    """``torch.nn.MaxPool2d`` with every padkit ``padding=`` form (pads never win).

    Shape:
        - Input: ``(N, C, H, W)`` or ``(C, H, W)``
        - Output: ``(N, C, H_out, W_out)``, per axis from :func:`padkit.pool_output_size`.

    Example:
        >>> pool = MaxPool2d(2, 1, padding=((0, 1), (0, 1)))    # tiny-YOLOv2's last pool
        >>> pool(torch.ones(1, 125, 13, 13)).shape
        torch.Size([1, 125, 13, 13])
    """

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: PaddingLike = 0,
        dilation: int | Sequence[int] = 1,
        return_indices: bool = False,
        ceil_mode: bool = False,
    ) -> None:
        _max_init(
            self, nn.MaxPool2d, 2, kernel_size, stride, padding, dilation, return_indices, ceil_mode
        )


class MaxPool3d(_MaxPoolMixin, nn.MaxPool3d):
    """``torch.nn.MaxPool3d`` with every padkit ``padding=`` form (pads never win).

    Shape:
        - Input: ``(N, C, D, H, W)`` or ``(C, D, H, W)``
        - Output: ``(N, C, D_out, H_out, W_out)``, per axis from :func:`padkit.pool_output_size`.

    Example:
        >>> MaxPool3d(3, 2, padding="same")(torch.ones(1, 1, 5, 6, 7)).shape
        torch.Size([1, 1, 3, 3, 4])
    """

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: PaddingLike = 0,
        dilation: int | Sequence[int] = 1,
        return_indices: bool = False,
        ceil_mode: bool = False,
    ) -> None:
        _max_init(
            self, nn.MaxPool3d, 3, kernel_size, stride, padding, dilation, return_indices, ceil_mode
        )


class _AvgPoolMixin(_PadPool):
    dilation: Any
    count_include_pad: bool
    divisor_override: int | None

    def forward(self, input: Tensor) -> Tensor:
        return _pool_forward(self, input, "avg_pool", self._forward)  # type: ignore[no-any-return]

    def _forward(self, input: Tensor) -> Tensor:
        return PF._avg_pool(
            type(self).__name__,
            self._nd,
            input,
            self.kernel_size,
            self.stride,
            self.pad_spec,
            self.ceil_mode,
            self.count_include_pad,
            self.divisor_override,
            self.dilation,
        )

    def extra_repr(self) -> str:
        s = f"kernel_size={self.kernel_size}, stride={self.stride}{self._pad_repr()}"
        if self.dilation not in (1, (1,) * self._nd):
            s += f", dilation={self.dilation}"
        s += f", ceil_mode={self.ceil_mode}, count_include_pad={self.count_include_pad}"
        if self.divisor_override is not None:
            s += f", divisor_override={self.divisor_override}"
        return s


def _avg_init(
    self: Any,
    base: type[nn.Module],
    nd: int,
    kernel_size: Any,
    stride: Any,
    padding: PaddingLike,
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: int | None,
    dilation: Any,
) -> None:
    self._nd = nd
    self._pool_setup(kernel_size, stride, padding, dilation)
    if divisor_override is not None:
        PF._check_divisor(type(self).__name__, divisor_override)
    if nd == 1:
        base.__init__(self, kernel_size, stride, 0, ceil_mode, count_include_pad)
        self.divisor_override = divisor_override
    else:
        base.__init__(self, kernel_size, stride, 0, ceil_mode, count_include_pad, divisor_override)
    self.dilation = dilation
    self.padding = _pool_padding_attr(self.pad_spec, self._static, nd)


class AvgPool1d(_AvgPoolMixin, nn.AvgPool1d):
    """``torch.nn.AvgPool1d`` with every padkit ``padding=`` form and dilation.

    ``count_include_pad=False`` gives TF/ONNX semantics (pads excluded from the divisor);
    the ``ceil_mode`` overhang is never counted.

    Shape:
        - Input: ``(N, C, L)`` or ``(C, L)``
        - Output: ``(N, C, L_out)``, ``L_out`` from :func:`padkit.pool_output_size`.

    Example:
        >>> pool = AvgPool1d(3, 2, padding="same", count_include_pad=False)
        >>> pool(torch.arange(1.0, 9.0).view(1, 1, 8))                  # TF: last is 7.5
        tensor([[[2.0000, 4.0000, 6.0000, 7.5000]]])
    """

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: PaddingLike = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
        dilation: int | Sequence[int] = 1,
    ) -> None:
        _avg_init(
            self,
            nn.AvgPool1d,
            1,
            kernel_size,
            stride,
            padding,
            ceil_mode,
            count_include_pad,
            divisor_override,
            dilation,
        )


class AvgPool2d(_AvgPoolMixin, nn.AvgPool2d):
    """``torch.nn.AvgPool2d`` with every padkit ``padding=`` form, and dilation.

    Shape:
        - Input: ``(N, C, H, W)`` or ``(C, H, W)``
        - Output: ``(N, C, H_out, W_out)``, per axis from :func:`padkit.pool_output_size`.

    Example:
        >>> pool = AvgPool2d(2, 1, padding=((0, 1), (0, 1)), count_include_pad=False)
        >>> pool(torch.ones(1, 1, 4, 4)).unique()                     # all 1, unlike T19
        tensor([1.])
    """

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: PaddingLike = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
        dilation: int | Sequence[int] = 1,
    ) -> None:
        _avg_init(
            self,
            nn.AvgPool2d,
            2,
            kernel_size,
            stride,
            padding,
            ceil_mode,
            count_include_pad,
            divisor_override,
            dilation,
        )


class AvgPool3d(_AvgPoolMixin, nn.AvgPool3d):
    """``torch.nn.AvgPool3d`` with every padkit ``padding=`` form, and dilation.

    Shape:
        - Input: ``(N, C, D, H, W)`` or ``(C, D, H, W)``
        - Output: ``(N, C, D_out, H_out, W_out)``, per axis from :func:`padkit.pool_output_size`.

    Example:
        >>> AvgPool3d(2, 2, padding="same", dilation=2)(torch.ones(1, 1, 3, 4, 4)).shape
        torch.Size([1, 1, 2, 2, 2])
    """

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: PaddingLike = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
        dilation: int | Sequence[int] = 1,
    ) -> None:
        _avg_init(
            self,
            nn.AvgPool3d,
            3,
            kernel_size,
            stride,
            padding,
            ceil_mode,
            count_include_pad,
            divisor_override,
            dilation,
        )


class _LPPoolMixin(_PadPool):
    dilation: Any
    norm_type: float

    def forward(self, input: Tensor) -> Tensor:
        return PF._lp_pool(
            type(self).__name__,
            self._nd,
            input,
            self.norm_type,
            self.kernel_size,
            self.stride,
            self.ceil_mode,
            self.pad_spec,
            self.dilation,
        )

    def extra_repr(self) -> str:
        return (
            f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}{self._pad_repr()}, ceil_mode={self.ceil_mode}"
            + (f", dilation={self.dilation}" if self.dilation not in (1, (1,) * self._nd) else "")
        )


def _lp_init(
    self: Any,
    base: type[nn.Module],
    nd: int,
    norm_type: float,
    kernel_size: Any,
    stride: Any,
    ceil_mode: bool,
    padding: PaddingLike,
    dilation: Any,
) -> None:
    self._nd = nd
    if isinstance(norm_type, bool) or not isinstance(norm_type, (int, float)) or norm_type <= 0:
        raise PaddingError(
            f"{type(self).__name__}: norm_type must be a positive number, got {norm_type!r}"
        )
    self._pool_setup(kernel_size, stride, padding, dilation)
    base.__init__(self, norm_type, kernel_size, stride, ceil_mode)
    self.dilation = dilation
    self.padding = _pool_padding_attr(self.pad_spec, self._static, nd)


class LPPool1d(_LPPoolMixin, nn.LPPool1d):
    """``torch.nn.LPPool1d`` with padding (zeros) and dilation.

    Shape:
        - Input: ``(N, C, L)`` or ``(C, L)``
        - Output: ``(N, C, L_out)``, ``L_out`` from :func:`padkit.pool_output_size`.

    Example:
        >>> LPPool1d(2, 3, 1, padding="same")(torch.ones(1, 1, 5)).shape
        torch.Size([1, 1, 5])
    """

    def __init__(
        self,
        norm_type: float,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        ceil_mode: bool = False,
        *,
        padding: PaddingLike = 0,
        dilation: int | Sequence[int] = 1,
    ) -> None:
        _lp_init(self, nn.LPPool1d, 1, norm_type, kernel_size, stride, ceil_mode, padding, dilation)


class LPPool2d(_LPPoolMixin, nn.LPPool2d):
    """``torch.nn.LPPool2d`` with padding (zeros) and dilation.

    Shape:
        - Input: ``(N, C, H, W)`` or ``(C, H, W)``
        - Output: ``(N, C, H_out, W_out)``, per axis from :func:`padkit.pool_output_size`.

    Example:
        >>> LPPool2d(2, 3, 2, padding="same")(torch.ones(1, 1, 5, 6)).shape
        torch.Size([1, 1, 3, 3])
    """

    def __init__(
        self,
        norm_type: float,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        ceil_mode: bool = False,
        *,
        padding: PaddingLike = 0,
        dilation: int | Sequence[int] = 1,
    ) -> None:
        _lp_init(self, nn.LPPool2d, 2, norm_type, kernel_size, stride, ceil_mode, padding, dilation)


class LPPool3d(_LPPoolMixin, nn.LPPool3d):
    """``torch.nn.LPPool3d`` with padding (zeros) and dilation.

    Shape:
        - Input: ``(N, C, D, H, W)`` or ``(C, D, H, W)``
        - Output: ``(N, C, D_out, H_out, W_out)``, per axis from :func:`padkit.pool_output_size`.

    Example:
        >>> LPPool3d(1, 2, 2, padding=((0, 1), 0, 0))(torch.ones(1, 1, 3, 4, 4)).shape
        torch.Size([1, 1, 2, 2, 2])
    """

    def __init__(
        self,
        norm_type: float,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        ceil_mode: bool = False,
        *,
        padding: PaddingLike = 0,
        dilation: int | Sequence[int] = 1,
    ) -> None:
        _lp_init(self, nn.LPPool3d, 3, norm_type, kernel_size, stride, ceil_mode, padding, dilation)
