"""The drop-in conv layers (``Conv1d``, ``Conv2d``, ``Conv3d``) and what every padkit conv
(transposed ones too) shares."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.overrides import has_torch_function

from .. import _compiled, functional as PF
from ..op import Op
from ..plan import Plan
from ..spec import PaddingLike
from ._common import (
    _check_channels,
    _conv_fast,
    _fast_cache,
    _fx_padding,
    _hashable,
    _is_proxy,
    _Live,
    _padding_repr,
    _scriptable,
    _tracing,
    conv_plan,
)


class _PadConv(_Live):
    """Shared behaviour of the padkit conv layers (mixed into the torch classes)."""

    _kind = "conv"
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

    def _op(self) -> Op:
        """The checked record of this layer, from its live attributes."""
        return Op.make(
            self._kind,
            self._nd,
            self.kernel_size,
            self.stride,
            self.pad_spec,
            self.dilation,
            groups=self.groups,
            padding_mode=self.padding_mode,
            output_padding=getattr(self, "output_padding", 0),
            where=type(self).__name__,
        )

    def plan(self, input_size: Sequence[int]) -> Plan:
        """What runs for an input of this shape (full or spatial), and why.

        Example:
            >>> Conv2d(32, 32, 3, stride=2, padding="same", groups=32).plan((1, 32, 56, 56))
            ... # doctest: +ELLIPSIS
            Plan(op='conv', strategy='zero_extend', ...)
        """
        op = self._op()
        sizes = tuple(int(v) for v in tuple(input_size)[-self._nd :])
        return conv_plan(op, self._pairs(op, sizes), sizes, self.in_channels)

    def __prepare_scriptable__(self) -> nn.Module:
        """torch.jit.script: the plain torch layer where it computes the same numbers (static
        symmetric pads), else a clear refusal (TorchScript cannot run padkit's Python). torch
        puts the returned layer into the scripted model in place of this one."""
        return _scriptable(self)

    def extra_repr(self) -> str:
        s = "{in_channels}, {out_channels}, kernel_size={kernel_size}, stride={stride}".format(
            **self.__dict__
        )
        spec = self.pad_spec
        if not (spec.is_explicit and all(a == (0, 0) for a in spec.axes)):
            s += f", padding={_padding_repr(spec)}"
        if tuple(self.dilation) != (1,) * self._nd:
            s += f", dilation={self.dilation}"
        if tuple(getattr(self, "output_padding", (0,) * self._nd)) != (0,) * self._nd:
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
        return self._conv_forward(input, self.weight, self.bias)

    def _conv_forward(self, input: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        """torch's hook for code that supplies its own weight (weight norm, fake quantisation,
        fused modules): padkit's padding applies here too."""
        if _tracing() or not isinstance(input, Tensor):
            if _compiled.static_batched(input, self._nd):
                got = _compiled.conv_plan(
                    self,
                    self.pad_spec,
                    tuple(input.shape),
                    input.dtype,
                    tuple(weight.shape),
                    None if bias is None else tuple(bias.shape),
                    weight.dtype,
                    torch.is_grad_enabled()
                    and (
                        has_torch_function((weight,))
                        or input.requires_grad
                        or weight.requires_grad
                        or (bias is not None and bias.requires_grad)
                    ),
                    (self.stride, self.dilation, self.groups, self.padding_mode),
                )
                if got is not None:
                    return _compiled.run(got, input, weight, bias)
            return self._forward(input, weight, bias)
        key = (
            input.shape,
            input.dtype,
            weight.shape,
            _hashable(self.stride),
            _hashable(self.dilation),
            self.groups,
            _hashable(self.padding_mode),
            self.pad_spec,
        )
        cache = _fast_cache(self)
        fn = cache.get(key, False)
        if fn is False:
            config = (*key[2:], _hashable(self.kernel_size))
            fn = _conv_fast(self, input, weight, config)
            cache.remember(key, fn)
        if fn is None:
            return self._forward(input, weight, bias)
        return fn(input, weight, bias)  # type: ignore[operator,no-any-return]

    def _forward(self, input: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        if _is_proxy(input):
            conv = (PF.conv1d, PF.conv2d, PF.conv3d)[self._nd - 1]
            return conv(
                input,
                weight,
                bias,
                _hashable(self.stride),
                _fx_padding(self.pad_spec, type(self).__name__),
                _hashable(self.dilation),
                self.groups,
                _hashable(self.padding_mode),
            )
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
    op = Op.make(
        "conv",
        nd,
        kernel_size,
        stride,
        padding,
        dilation,
        groups=groups,
        padding_mode=padding_mode,
        where=cls,
    )
    _check_channels(cls, in_channels, out_channels, op.groups)
    torch_mode = padding_mode if isinstance(padding_mode, str) else "zeros"
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
    self.pad_spec = op.padding


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
