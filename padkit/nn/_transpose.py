"""The drop-in transposed conv layers (``ConvTranspose1d``, ``ConvTranspose2d``,
``ConvTranspose3d``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import Tensor, nn

from .. import _compiled, functional as PF
from ..native import _dispatch as _backend
from ..op import Op
from ..spec import PaddingError, PaddingLike, _tuple_of
from ._common import (
    SEEN_ONCE,
    _check_channels,
    _fast_cache,
    _FastFn,
    _fx_padding,
    _hashable,
    _is_proxy,
    _tracing,
    declined_key,
)
from ._conv import _PadConv


def _transpose_fast(layer: Any, x: Tensor) -> _FastFn | None:
    """What a transposed layer's first call on a batched input of ``x``'s shape ran, as a
    closure of (input, weight, bias): its crops resolved for that size."""
    nd = layer._nd
    if x.dim() != nd + 2:
        return None
    op = layer._op()
    s, d, g, o = op.stride, op.dilation, op.groups, op.output_padding
    crops = PF.transpose_crops(op.padding, op.kernel, s, d, tuple(x.shape[2:]))
    name = type(layer).__name__
    # the layouts, training flags and thread counts for which the backend decided on
    # torch's side: those calls run the torch plan without asking the backend again (its
    # signature lookup costs a tenth of a tiny layer), as conv and pool layers do
    declined: set[tuple[Any, ...]] = set()

    def run(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
        hook = _backend.active
        if hook is not _backend.HOOK or hook is None:  # off, or not started: as ever
            return PF._conv_transpose_crops(nd, x, w, b, s, crops, o, d, g, name)
        key = declined_key(hook, x, w, b)
        if key in declined:
            return PF._conv_transpose_crops(nd, x, w, b, s, crops, o, d, g, name, backend=False)
        note: list[bool] = []
        out = PF._conv_transpose_crops(nd, x, w, b, s, crops, o, d, g, name, note=note)
        if note and len(declined) < 64:
            declined.add(key)
        return out

    return run


class _ConvTransposeMixin(_PadConv):
    _kind = "conv_transpose"

    def _forward_t(self, input: Tensor, output_size: Sequence[int] | None) -> Tensor:
        if not _tracing() and isinstance(input, Tensor) and output_size is None:
            # eager: a repeated call runs what the first (fully checked) call ran
            key = (
                input.shape,
                input.dtype,
                self.weight.shape,
                _hashable(self.stride),
                _hashable(self.output_padding),
                _hashable(self.dilation),
                self.groups,
                self.pad_spec,
            )
            cache = _fast_cache(self)
            fn = cache.get(key, False)
            if fn is False or fn is SEEN_ONCE:
                fn = cache.settle(key, fn, lambda: _transpose_fast(self, input))
            if fn is not None:
                return fn(input, self.weight, self.bias)  # type: ignore[operator,no-any-return]
            return self._full_t(input, None)
        if _compiled.static_batched(input, self._nd):
            got = self._compiled_plan(input, output_size)
            if got is not None:
                return _compiled.run(got, input, self.weight, self.bias)
        return self._full_t(input, output_size)

    def _compiled_plan(
        self, input: Tensor, output_size: Sequence[int] | None
    ) -> _compiled.Program | None:
        """The plan a static-shape ``torch.compile`` trace runs for ``input``
        (:func:`padkit._compiled.conv_transpose_plan`, which dynamo takes as a constant)."""
        return _compiled.conv_transpose_plan(
            self,
            self.pad_spec,
            tuple(input.shape),
            input.dtype,
            tuple(self.weight.shape),
            None if self.bias is None else tuple(self.bias.shape),
            self.weight.dtype,
            None if output_size is None else tuple(output_size),
            _compiled.timed_layout(input, self.weight, self.bias),
            (self.stride, self.output_padding, self.groups, self.dilation),
        )

    def _full_t(
        self,
        input: Tensor,
        output_size: Sequence[int] | None,
        weights: tuple[Tensor, Tensor | None] | None = None,
    ) -> Tensor:
        """The full path (``weights``: in place of the layer's weight and bias)."""
        weight, bias = (self.weight, self.bias) if weights is None else weights
        if _is_proxy(input):
            conv_t = (PF.conv_transpose1d, PF.conv_transpose2d, PF.conv_transpose3d)[self._nd - 1]
            return conv_t(
                input,
                weight,
                bias,
                _hashable(self.stride),
                _fx_padding(self.pad_spec, type(self).__name__),
                _hashable(self.output_padding),
                self.groups,
                _hashable(self.dilation),
                output_size=output_size,
            )
        return PF._conv_transpose(
            type(self).__name__,
            self._nd,
            input,
            weight,
            bias,
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
    try:
        k = _tuple_of(kernel_size, nd, "kernel_size")
    except (PaddingError, TypeError) as err:
        raise type(err)(f"{cls}: {err}") from None
    padding, output_padding = PF.transpose_args(
        cls, nd, padding, output_padding, k, stride, dilation
    )
    op = Op.make(
        "conv_transpose",
        nd,
        kernel_size,
        stride,
        padding,
        dilation,
        groups=groups,
        padding_mode=padding_mode,
        output_padding=output_padding,
        where=cls,
    )
    _check_channels(cls, in_channels, out_channels, op.groups)
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
    self.pad_spec = op.padding


class ConvTranspose1d(_ConvTransposeMixin, nn.ConvTranspose1d):
    """``torch.nn.ConvTranspose1d`` with per-side crops and TF ``"same"``.

    ``padding`` says what to crop from the full output ``(L-1)*stride + k_eff``: explicit
    pairs crop per side (torch's ``p`` is ``(p, p)``); ``"same"`` gives ``L*stride`` (TF
    ``Conv1DTranspose``, ONNX ``SAME_UPPER``), ``"same_lower"`` the ONNX ``SAME_LOWER``
    variant; ``"causal"``/``"causal_block"`` crop ``k_eff - stride`` at the end, so that
    output ``t`` reads no input after ``t // stride``; other rules crop what they would pad
    in the forward conv. ``output_padding``
    (or ``output_size`` at call time) extends the end. Where frameworks disagree on the
    output length, name the framework: ``"keras_same"``/``"keras_valid"`` (Keras
    ``Conv1DTranspose``, where ``output_padding=None`` is Keras's default) and
    ``"onnx_same_upper"``/``"onnx_same_lower"`` (ONNX ``auto_pad``) resolve to explicit
    crops at construction (:func:`padkit.conv_transpose_padding`); ``"same"`` with a
    nonzero ``output_padding`` is refused as ambiguous.

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
        output_padding: int | Sequence[int] | None = None,
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
        output_padding: int | Sequence[int] | None = None,
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
        output_padding: int | Sequence[int] | None = None,
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
