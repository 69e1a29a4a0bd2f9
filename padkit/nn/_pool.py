"""The drop-in pooling layers: max, average and LP pools in 1, 2 and 3 dimensions."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from .. import _compiled, functional as PF
from ..native import _dispatch as _backend
from ..op import Op
from ..plan import Plan, plan_pool
from ..spec import PaddingLike
from ._common import (
    SEEN_ONCE,
    _fast_cache,
    _FastFn,
    _fx_padding,
    _hashable,
    _is_proxy,
    _Live,
    _padding_repr,
    _scriptable,
    _tracing,
)

_POOL_OPS = {"max": "max_pool", "avg": "avg_pool", "lp": "lp_pool"}


class _PadPool(_Live):
    _kind: str
    # provided by the torch base class
    kernel_size: Any
    stride: Any
    ceil_mode: bool

    def _op(self) -> Op:
        """The checked record of this layer, from its live attributes."""
        return Op.make(
            self._kind,
            self._nd,
            self.kernel_size,
            self.stride,
            self.pad_spec,
            getattr(self, "dilation", 1),
            ceil_mode=self.ceil_mode,
            count_include_pad=getattr(self, "count_include_pad", True),
            divisor_override=getattr(self, "divisor_override", None),
            return_indices=getattr(self, "return_indices", False),
            norm_type=getattr(self, "norm_type", None),
            padding_value=getattr(self, "padding_value", -math.inf),
            where=type(self).__name__,
        )

    def plan(self, input_size: Sequence[int], *, channels_last: bool = False) -> Plan:
        """What runs for an input of this shape (full or spatial), and why.

        ``channels_last``: the input's memory layout, which average pools plan by.

        Example:
            >>> print(MaxPool2d(3, 2, padding="same").plan((1, 8, 112, 112)))  # doctest: +ELLIPSIS
            max_pool: ceil_mode (pads [(0, 1), (0, 1)]) - the end pads are ...ceil_mode overhang...
        """
        op = self._op()
        sizes = tuple(int(v) for v in tuple(input_size)[-self._nd :])
        pairs = self._pairs(op, sizes)
        k, s, d = op.kernel, op.stride, op.dilation
        ceil = op.ceil_mode or op.padding.ceil_mode
        if op.kind == "max":
            return plan_pool(
                "max_pool", pairs, k, s, d, sizes, ceil_mode=ceil, neutral_pads=op.neutral_pads
            )
        if op.kind == "avg":
            return plan_pool(
                "avg_pool",
                pairs,
                k,
                s,
                d,
                sizes,
                ceil_mode=ceil,
                count_include_pad=op.count_include_pad,
                channels_last=channels_last,
            )
        return plan_pool("lp_pool", pairs, k, s, d, sizes, ceil_mode=ceil, native_dtype=False)

    def __prepare_scriptable__(self) -> nn.Module:
        """torch.jit.script: the plain torch layer where it computes the same numbers (static
        symmetric pads), else a clear refusal (TorchScript cannot run padkit's Python). torch
        puts the returned layer into the scripted model in place of this one."""
        return _scriptable(self)

    def _pad_repr(self) -> str:
        spec = self.pad_spec
        if spec.is_explicit and all(a == (0, 0) for a in spec.axes):
            return ""
        return f", padding={_padding_repr(spec)}"

    def _fx_args(self) -> tuple[Any, Any, Any]:
        """kernel_size, stride and padding as plain values for torch.fx."""
        return (
            _hashable(self.kernel_size),
            _hashable(self.stride),
            _fx_padding(self.pad_spec, type(self).__name__),
        )


def _pool_fast(layer: Any, x: Tensor, op: str) -> _FastFn | None:
    nd = layer._nd
    if x.dim() != nd + 2 or layer.pad_spec.ceil_mode or x.is_quantized:
        # quantized inputs take the functional path: the cache key does not tell per-tensor
        # from per-channel quantization, which torch's quantized pools do not run
        return None
    if op == "avg_pool" and (
        not x.dtype.is_floating_point
        or (nd == 3 and x.device.type == "cpu" and x.dtype in (torch.float16, torch.bfloat16))
    ):
        return None
    rec = layer._op()
    plan = layer.plan(tuple(x.shape), channels_last=PF.channels_last(x))
    torch_fn = _pool_torch_fn(plan, rec)
    hook = _backend.active
    if hook is not None:  # the optional oneDNN backend (padkit.native)
        fast: _FastFn | None = hook.pool_layer(layer, op, plan, x, torch_fn)
        if fast is not None:
            return fast
    return torch_fn


def _pool_torch_fn(plan: Any, rec: Any) -> _FastFn | None:
    """The pool's torch plan as a closure; None for ``explicit`` plans (the full path)."""
    if plan.strategy == "explicit":
        return None
    if plan.strategy == "zero_extend":  # an average pool as a depthwise conv
        weights: dict[tuple[Any, ...], Tensor] = {}

        def as_conv(x: Tensor) -> Tensor:
            key = (x.shape[1], x.dtype, x.device)
            w = weights.get(key)
            if w is None:
                w = weights[key] = PF.mean_kernel(
                    x, rec.kernel, plan.kernel_ext, rec.divisor_override
                )
            return PF.run_pool_plan(plan, rec, x, mean_weight=w)  # type: ignore[no-any-return]

        return as_conv
    return lambda x: PF.run_pool_plan(plan, rec, x)


def _pool_forward(layer: Any, input: Tensor, op: str, full: Callable[[Tensor], Any]) -> Any:
    if _tracing() or not isinstance(input, Tensor):
        if _compiled.static_batched(input, layer._nd):
            got = _compiled.pool_plan(
                layer,
                layer.pad_spec,
                tuple(input.shape),
                input.dtype,
                PF.channels_last(input),
                layer._compiled_key(),
            )
            if got is not None:
                how, fields, plan_or_pads, padded = got
                rec = Op(*fields)
                if how == "plan":
                    return PF.run_pool_plan(Plan(*plan_or_pads), rec, input)
                if how == "pad_then_pool":
                    return PF.padded_avg_pool(input, rec, plan_or_pads)
                if rec.kind == "avg":
                    return PF.explicit_avg_traced(input, rec, plan_or_pads, padded)
                return PF.explicit_max_pool(input, rec, padded, plan_or_pads)
        return full(input)
    active = _backend.active
    cl = PF.channels_last(input) if active is not None or op == "avg_pool" else False
    key = (
        input.shape,
        input.dtype,
        input.device.type,
        _hashable(layer.kernel_size),
        _hashable(layer.stride),
        layer.ceil_mode,
        layer.pad_spec,
        _hashable(getattr(layer, "dilation", 1)),
        getattr(layer, "return_indices", False),
        getattr(layer, "count_include_pad", True),
        getattr(layer, "divisor_override", None),
        getattr(layer, "padding_value", None),
        op == "avg_pool" and cl,
        None if active is None else cl,
    )
    cache = _fast_cache(layer)
    fn = cache.get(key, False)
    if fn is False or fn is SEEN_ONCE:
        fn = cache.settle(key, fn, lambda: _pool_fast(layer, input, op))
    if fn is None:
        return full(input)
    return fn(input)  # type: ignore[operator]


class _MaxPoolMixin(_PadPool):
    _kind = "max"
    dilation: Any
    return_indices: bool
    #: what the pads hold: -inf (the lowest value the input holds) or any other number; a
    #: class default, so layers pickled before it existed load with -inf
    padding_value: float = -math.inf

    def _compiled_key(self) -> tuple[Any, ...]:
        """The attributes the plan depends on, read (so guarded) under torch.compile."""
        k, s, ceil, d = self.kernel_size, self.stride, self.ceil_mode, self.dilation
        return (k, s, ceil, d, self.return_indices, self.padding_value)

    def forward(self, input: Tensor) -> Any:
        return _pool_forward(self, input, "max_pool", self._forward)

    def _forward(self, input: Tensor) -> Any:
        if _is_proxy(input):
            pool = (PF.max_pool1d, PF.max_pool2d, PF.max_pool3d)[self._nd - 1]
            k, s, p = self._fx_args()
            return pool(
                input,
                k,
                s,
                p,
                _hashable(self.dilation),
                self.ceil_mode,
                self.return_indices,
                self.padding_value,
            )
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
            self.padding_value,
        )

    def extra_repr(self) -> str:
        value = "" if self.padding_value == -math.inf else f", padding_value={self.padding_value}"
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride}"
            f"{self._pad_repr()}, dilation={self.dilation}, "
            f"ceil_mode={self.ceil_mode}{value}"
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
    padding_value: float,
) -> None:
    self._nd = nd
    op = Op.make(
        "max",
        nd,
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode=ceil_mode,
        return_indices=return_indices,
        padding_value=padding_value,
        where=type(self).__name__,
    )
    base.__init__(self, kernel_size, stride, 0, dilation, return_indices, ceil_mode)
    self.pad_spec = op.padding
    if not op.neutral_pads:  # the default stays the class's (and out of the instance)
        self.padding_value = op.padding_value


class MaxPool1d(_MaxPoolMixin, nn.MaxPool1d):
    """``torch.nn.MaxPool1d`` with every padkit ``padding=`` form (pads never win).

    Pads may exceed half the kernel; a window entirely in padding gives −∞ (the dtype's
    minimum for integers, the lowest representable value for quantized tensors).
    ``padding_value`` (a keyword after torch's arguments) makes the pads hold that number
    instead, as ``F.pad(x, pads, value=padding_value)`` before an unpadded pool would (TF
    ports that pad with zeros before a max pool); integer and quantized inputs take a
    value they hold exactly (:func:`padkit.op.max_pad_fill`).

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
        padding_value: float = -math.inf,
    ) -> None:
        _max_init(
            self,
            nn.MaxPool1d,
            1,
            kernel_size,
            stride,
            padding,
            dilation,
            return_indices,
            ceil_mode,
            padding_value,
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
        padding_value: float = -math.inf,
    ) -> None:
        _max_init(
            self,
            nn.MaxPool2d,
            2,
            kernel_size,
            stride,
            padding,
            dilation,
            return_indices,
            ceil_mode,
            padding_value,
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
        padding_value: float = -math.inf,
    ) -> None:
        _max_init(
            self,
            nn.MaxPool3d,
            3,
            kernel_size,
            stride,
            padding,
            dilation,
            return_indices,
            ceil_mode,
            padding_value,
        )


class _AvgPoolMixin(_PadPool):
    _kind = "avg"
    dilation: Any
    count_include_pad: bool
    divisor_override: int | None

    def _compiled_key(self) -> tuple[Any, ...]:
        """The attributes the plan depends on, read (so guarded) under torch.compile."""
        k, s, ceil, d = self.kernel_size, self.stride, self.ceil_mode, self.dilation
        return (k, s, ceil, d, self.count_include_pad, self.divisor_override)

    def forward(self, input: Tensor) -> Tensor:
        return _pool_forward(self, input, "avg_pool", self._forward)  # type: ignore[no-any-return]

    def _forward(self, input: Tensor) -> Tensor:
        if _is_proxy(input):
            pool = (PF.avg_pool1d, PF.avg_pool2d, PF.avg_pool3d)[self._nd - 1]
            k, s, p = self._fx_args()
            return pool(
                input,
                k,
                s,
                p,
                self.ceil_mode,
                self.count_include_pad,
                self.divisor_override,
                _hashable(self.dilation),
            )
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
    count_include_pad: bool | None,
    divisor_override: int | None,
    dilation: Any,
) -> None:
    self._nd = nd
    if count_include_pad is None:
        count_include_pad = PF.default_count_include_pad(padding, nd, type(self).__name__)
    op = Op.make(
        "avg",
        nd,
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode=ceil_mode,
        count_include_pad=count_include_pad,
        divisor_override=divisor_override,
        where=type(self).__name__,
    )
    if nd == 1:
        base.__init__(self, kernel_size, stride, 0, ceil_mode, count_include_pad)
        self.divisor_override = divisor_override
    else:
        base.__init__(self, kernel_size, stride, 0, ceil_mode, count_include_pad, divisor_override)
    self.dilation = dilation
    self.pad_spec = op.padding


class AvgPool1d(_AvgPoolMixin, nn.AvgPool1d):
    """``torch.nn.AvgPool1d`` with every padkit ``padding=`` form and dilation.

    ``count_include_pad=False`` gives TF/ONNX semantics (pads excluded from the divisor);
    the ``ceil_mode`` overhang is never counted. Not given, it follows the convention the
    padding names: ``"same"``/``"same_lower"`` leave the pads out (as TensorFlow and ONNX
    do), torch ints and pairs count them (as torch does).

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
        count_include_pad: bool | None = None,
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
        >>> pool(torch.ones(1, 1, 4, 4)).unique()  # all 1: the pads are not counted
        tensor([1.])
    """

    def __init__(
        self,
        kernel_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        padding: PaddingLike = 0,
        ceil_mode: bool = False,
        count_include_pad: bool | None = None,
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
        count_include_pad: bool | None = None,
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
    _kind = "lp"
    dilation: Any
    norm_type: float

    def forward(self, input: Tensor) -> Tensor:
        if _is_proxy(input):
            pool = (PF.lp_pool1d, PF.lp_pool2d, PF.lp_pool3d)[self._nd - 1]
            k, s, p = self._fx_args()
            return pool(
                input,
                self.norm_type,
                k,
                s,
                self.ceil_mode,
                padding=p,
                dilation=_hashable(self.dilation),
            )
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
    op = Op.make(
        "lp",
        nd,
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode=ceil_mode,
        norm_type=norm_type,
        where=type(self).__name__,
    )
    base.__init__(self, norm_type, kernel_size, stride, ceil_mode)
    self.dilation = dilation
    self.pad_spec = op.padding


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
