"""Drop-in ``torch.nn`` conv, transposed-conv and pooling layers with exact padding.

Each layer subclasses its torch namesake (``isinstance(padkit.nn.Conv2d(...),
torch.nn.Conv2d)`` holds), takes the same arguments, and has the same
``state_dict`` keys, so pretrained weights load unchanged. ``padding=`` accepts
every padkit form (see :class:`padkit.Padding`). Padding that does not depend on
the input size is resolved at construction; ``"same"`` with stride > 1 is resolved
per input shape and cached.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import _compiled, functional as PF, quantization as _quantization
from .native import _dispatch as _backend
from .op import Op
from .plan import Plan, plan_conv, plan_pool
from .spec import Padding, PaddingError, PaddingLike, _as_int, _tuple_of

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


def _hashable(value: Any) -> Any:
    """A list argument (JSON configs give lists) as a tuple, for the per-shape memo key."""
    return tuple(value) if type(value) is list else value


def _check_channels(cls: str, in_channels: Any, out_channels: Any, groups: int) -> None:
    """torch's channel/group rules, with the values in the message."""
    try:
        cin = _as_int(in_channels, "in_channels")
        cout = _as_int(out_channels, "out_channels")
    except TypeError as err:
        raise TypeError(f"{cls}: {err}") from None
    for name, value in (("in_channels", cin), ("out_channels", cout)):
        if value < 1 or value % groups:
            raise ValueError(
                f"{cls}: {name}={value} must be a positive multiple of groups={groups}"
            )


def _padding_repr(spec: Padding) -> str:
    return (
        spec.describe()
        if spec.ndim is None
        else repr(spec.to_jax())
        if spec.is_explicit
        else ("(" + ", ".join(repr(a) for a in spec.axes) + ")")
    )


def _is_proxy(value: Any) -> bool:
    """An input traced by torch.fx: layers then call padkit.functional (fx-wrapped)."""
    return isinstance(value, torch.fx.Proxy)


def _fx_padding(spec: Padding, cls: str) -> Any:
    """The spec as plain values that torch.fx can write into generated code."""
    if spec.ceil_mode:
        raise PaddingError(
            f"{cls}: torch.fx cannot carry Caffe ceil-rounded padding ({spec.describe()}) into "
            "generated code; trace the model with torch.jit.trace, torch.export or torch.compile"
        )
    return tuple(spec.axes)


# ----------------------------------------------------------------------------- fast path
#
# A layer called again with an input of the same shape runs exactly what its first call
# ran, without re-parsing its arguments or re-planning: the first call (the full path, with
# every check) stores a closure per key, later calls look it up. Tracing (torch.compile,
# torch.export, the ONNX exporters, torch.jit) always takes the full path.

_FastFn = Callable[..., Any]


def _tracing() -> bool:
    return bool(torch.compiler.is_compiling() or torch._C._get_tracing_state())


class _FastCache(dict[tuple[Any, ...], "_FastFn | None"]):
    """Per-layer memo: key -> closure (None: this key always takes the full path)."""

    MAX_ENTRIES = 64

    def remember(self, key: tuple[Any, ...], fn: _FastFn | None) -> None:
        if len(self) >= self.MAX_ENTRIES:
            self.clear()
        self[key] = fn


# The memo of each layer lives here, keyed by the layer object, never in the layer's
# ``__dict__``: a layer's ``__dict__`` holds only plain data, so pickling or copying it
# (torch-pruning's ``state_dict``, ``copy.copy``, multiprocessing) never meets a closure, and a
# copy starts with an empty memo of its own (no entry can go stale when its attributes change).
_FAST: weakref.WeakKeyDictionary[Any, _FastCache] = weakref.WeakKeyDictionary()


class _Live:
    """``.padding`` read and written as on the torch layer, kept as one canonical spec.

    The spec (``pad_spec``) is the only stored copy; what ``.padding`` shows (torch's
    symmetric tuple where one exists, else the spec) is derived from it and the layer's
    live ``kernel_size``/``stride``/``dilation``, and assigning ``.padding`` (any padkit
    form, torch ints and tuples included) re-parses it. The checked-op record is built
    from the live attributes whenever the layer meets a new input shape or arguments.
    """

    pad_spec: Padding
    _nd: int

    def _op(self) -> Op:
        raise NotImplementedError  # each layer family builds its record

    def resolved_padding(
        self, input_size: Sequence[int] | None = None
    ) -> tuple[tuple[int, int], ...]:
        """The ``(lo, hi)`` pads per spatial axis (``input_size`` where they depend on it)."""
        return self._pairs(self._op(), input_size)

    def _pairs(self, op: Op, input_size: Sequence[int] | None) -> tuple[tuple[int, int], ...]:
        static = op.static_pairs()
        if static is not None:
            return static
        if input_size is None:
            raise PaddingError(
                f"{type(self).__name__}: padding {self.pad_spec.describe()} depends on the input "
                "size; pass input_size"
            )
        return PF.resolve(
            op.padding, op.kernel, op.stride, op.dilation, tuple(input_size)[-self._nd :]
        )

    @property
    def padding(self) -> Any:
        spec = self.__dict__.get("pad_spec")
        if spec is None:  # inside the torch base class's __init__
            return (0,) * self._nd
        try:
            op = self._op()
        except AttributeError:  # inside the torch base class's __init__
            return (0,) * self._nd
        except (PaddingError, TypeError, ValueError):
            return spec
        if op.kind == "conv_transpose" and not spec.is_explicit:
            return spec
        return op.torch_padding()

    @padding.setter
    def padding(self, value: PaddingLike) -> None:
        self.pad_spec = _spec(value, self._nd, type(self).__name__)


def _fast_cache(module: Any) -> _FastCache:
    """The layer's memo (created empty on first use; a layer that cannot be weakly referenced
    or hashed gets a fresh one per call, i.e. always takes the full path)."""
    try:
        cache = _FAST.get(module)
        if cache is None:
            cache = _FAST[module] = _FastCache()
    except TypeError:
        return _FastCache()
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
    op = layer._op()
    plan = layer.plan(tuple(x.shape))
    conv = PF._CONV[nd]
    s, d, g = op.stride, op.dilation, op.groups
    extend = (
        _PaddedWeight(PF._torch_pad(plan.kernel_ext)) if plan.strategy == "zero_extend" else None
    )
    # the closure takes the weight and bias as arguments: replicas (DataParallel) and
    # _conv_forward callers (weight norm, fake-quant wrappers) share the memo
    return lambda x, w, b: PF.run_conv_plan(plan, conv, x, w, b, s, d, g, extend=extend)


# ----------------------------------------------------------------------------- TorchScript


def _script_refusal(layer: Any, op: Op) -> str | None:
    """Why the plain torch layer would not compute what ``layer`` computes, or None."""
    static = op.static_pairs()
    if static is None:
        return f"its padding {op.padding.describe()} depends on the input size"
    if any(lo != hi for lo, hi in static):
        return f"its pads {static} differ per side, which torch's layer cannot express"
    if isinstance(op.padding_mode, tuple):
        return f"its padding_mode {op.padding_mode} differs per axis"
    if op.kind == "max" and any(2 * lo > k for (lo, _), k in zip(static, op.kernel)):
        return f"its pads {static} exceed half the kernel {op.kernel}, which torch refuses"
    if op.kind == "avg" and op.dilation != (1,) * op.nd:
        return f"it is a dilated average pool (dilation={op.dilation}), which torch lacks"
    if op.kind == "lp" and (any(lo for lo, _ in static) or op.dilation != (1,) * op.nd):
        return "torch's LPPool has no padding or dilation"
    return None


def _scriptable(layer: Any) -> nn.Module:
    cls = type(layer).__name__
    op = layer._op()
    why = _script_refusal(layer, op)
    if why is not None:
        raise TypeError(
            f"torch.jit.script cannot compile padkit.nn.{cls}: {why}, and TorchScript cannot "
            "run padkit's Python padding. Use torch.jit.trace, torch.export or torch.compile "
            "(or padkit's ONNX export), which run padkit exactly"
        )
    base: Any = next(c for c in type(layer).__mro__ if c.__module__.startswith("torch.nn.modules"))
    plain: Any = base.__new__(base)
    state = {k: v for k, v in layer.__dict__.items() if k != "pad_spec"}
    for key in ("_parameters", "_buffers", "_modules"):
        state[key] = dict(state[key])
    plain.__dict__.update(state)
    pads = tuple(lo for lo, _ in op.static_pairs())
    plain.padding = pads[0] if op.is_pool and len(set(pads)) == 1 else pads
    plain.stride = op.stride
    if op.kind in ("conv", "conv_transpose"):
        plain._reversed_padding_repeated_twice = [p for p in reversed(pads) for _ in range(2)]
    return plain  # type: ignore[no-any-return]


# ----------------------------------------------------------------------------- convolution


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
        pairs = self._pairs(op, sizes)
        mode = op.padding_mode if isinstance(op.padding_mode, str) else "mixed"
        return plan_conv(
            pairs,
            op.kernel,
            op.stride,
            op.dilation,
            sizes,
            groups=op.groups,
            in_channels=self.in_channels,
            padding_mode=mode,
        )

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
                    (self.stride, self.dilation, self.groups, self.padding_mode),
                )
                if got is not None:
                    steps, fields, s, d, g = got
                    x = PF.pad_steps(input, steps, type(self).__name__)
                    conv = PF._CONV[self._nd]
                    return PF.run_conv_torch(Plan(*fields), conv, x, weight, bias, s, d, g)
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
            out = self._forward(input, weight, bias)
            cache.remember(key, _conv_fast(self, input))
            return out
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


# ----------------------------------------------------------------------------- transposed


class _ConvTransposeMixin(_PadConv):
    _kind = "conv_transpose"

    def _forward_t(self, input: Tensor, output_size: Sequence[int] | None) -> Tensor:
        if _compiled.static_batched(input, self._nd):
            got = _compiled.conv_transpose_plan(
                self,
                self.pad_spec,
                tuple(input.shape),
                input.dtype,
                tuple(self.weight.shape),
                None if self.bias is None else tuple(self.bias.shape),
                self.weight.dtype,
                None if output_size is None else tuple(output_size),
                (self.stride, self.output_padding, self.groups, self.dilation),
            )
            if got is not None:
                s, p, op, g, d, slices = got
                return PF.run_transpose(input, self.weight, self.bias, s, p, op, g, d, slices)
        return self._full_t(input, output_size)

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


# ----------------------------------------------------------------------------- pooling


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
            return plan_pool("max_pool", pairs, k, s, d, sizes, ceil_mode=ceil)
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
    if x.dim() != nd + 2 or layer.pad_spec.ceil_mode:
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
                return PF.explicit_max_pool(input, rec, padded)
        return full(input)
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
        op == "avg_pool" and PF.channels_last(input),
        None if _backend.active is None else PF.channels_last(input),
    )
    cache = _fast_cache(layer)
    fn = cache.get(key, False)
    if fn is False:
        out = full(input)
        cache.remember(key, _pool_fast(layer, input, op))
        return out
    if fn is None:
        return full(input)
    return fn(input)  # type: ignore[operator]


class _MaxPoolMixin(_PadPool):
    _kind = "max"
    dilation: Any
    return_indices: bool

    def _compiled_key(self) -> tuple[Any, ...]:
        """The attributes the plan depends on, read (so guarded) under torch.compile."""
        k, s, ceil, d = self.kernel_size, self.stride, self.ceil_mode, self.dilation
        return (k, s, ceil, d, self.return_indices)

    def forward(self, input: Tensor) -> Any:
        return _pool_forward(self, input, "max_pool", self._forward)

    def _forward(self, input: Tensor) -> Any:
        if _is_proxy(input):
            pool = (PF.max_pool1d, PF.max_pool2d, PF.max_pool3d)[self._nd - 1]
            k, s, p = self._fx_args()
            return pool(
                input, k, s, p, _hashable(self.dilation), self.ceil_mode, self.return_indices
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
    op = Op.make(
        "max",
        nd,
        kernel_size,
        stride,
        padding,
        dilation,
        ceil_mode=ceil_mode,
        return_indices=return_indices,
        where=type(self).__name__,
    )
    base.__init__(self, kernel_size, stride, 0, dilation, return_indices, ceil_mode)
    self.pad_spec = op.padding


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


# ----------------------------------------------------------------------------- quantization

# fuse_modules, prepare, prepare_qat and convert find modules by exact class: padkit's convs
# go into their tables with fused, QAT and quantized modules that keep padkit's padding
_quantization.register_layers(
    {1: Conv1d, 2: Conv2d, 3: Conv3d},
    {1: ConvTranspose1d, 2: ConvTranspose2d, 3: ConvTranspose3d},
)
