"""Quantization of models with padkit convs: torch.ao eager mode (PTQ and QAT).

torch's eager quantization finds modules by their exact class: ``fuse_modules`` looks its
fusers up in a table keyed by the module types, ``prepare`` observes and ``convert`` swaps
the types listed in ``torch.ao.quantization.quantization_mappings``. This module adds
padkit's convs to those tables (``padkit.nn`` registers them on import) with modules that
keep padkit's padding at every stage:

- fused float modules (what ``fuse_modules`` / ``fuse_modules_qat`` build):
  :class:`ConvReLU2d`, :class:`ConvBn2d`, :class:`ConvBnReLU2d` (1-D and 3-D alike),
  subclasses of torch's ``torch.ao.nn.intrinsic`` modules holding a padkit conv;
- quantization-aware training modules (``prepare_qat``): :class:`QATConv2d`,
  :class:`QATConvReLU2d`, :class:`QATConvBn2d`, :class:`QATConvBnReLU2d`, subclasses of
  torch's that convolve with padkit's padding;
- quantized modules (``convert``): :class:`QuantizedConv2d`, :class:`QuantizedConvReLU2d`,
  subclasses of torch's quantized convs. A quantized input is padded with the zero point
  (the quantized 0.0, so the pad is exact) or by the layer's ``padding_mode`` (which copies
  quantized values, also exact), and the packed kernel runs with the symmetric part.

Pads that depend on the input size (TF ``"same"`` at stride > 1) are resolved for each
input, so a quantized model stays exact at sizes other than the calibration size.
docs/quantization.md has the recipe for each path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, cast

import torch
import torch.ao.nn.intrinsic as nni
import torch.ao.nn.intrinsic.qat as nniqat
import torch.ao.nn.intrinsic.quantized as nniq
import torch.ao.nn.qat as nnqat
import torch.ao.nn.quantized as nnq
import torch.nn.functional as F
from torch import Tensor, nn
from torch.ao.nn.intrinsic.modules.fused import _FusedModule

from .. import functional as PF
from ..op import Op
from ..spec import Padding

__all__ = [
    "ConvBn1d",
    "ConvBn2d",
    "ConvBn3d",
    "ConvBnReLU1d",
    "ConvBnReLU2d",
    "ConvBnReLU3d",
    "ConvReLU1d",
    "ConvReLU2d",
    "ConvReLU3d",
    "QATConv1d",
    "QATConv2d",
    "QATConv3d",
    "QATConvBn1d",
    "QATConvBn2d",
    "QATConvBn3d",
    "QATConvBnReLU1d",
    "QATConvBnReLU2d",
    "QATConvBnReLU3d",
    "QATConvReLU1d",
    "QATConvReLU2d",
    "QATConvReLU3d",
    "QuantizedConv1d",
    "QuantizedConv2d",
    "QuantizedConv3d",
    "QuantizedConvReLU1d",
    "QuantizedConvReLU2d",
    "QuantizedConvReLU3d",
]

_TORCH_CONV: dict[int, type[nn.Module]] = {1: nn.Conv1d, 2: nn.Conv2d, 3: nn.Conv3d}


def is_padkit_conv(module: Any) -> bool:
    """A (non-transposed) conv that carries a padkit padding spec."""
    return isinstance(module, nn.modules.conv._ConvNd) and isinstance(
        getattr(module, "pad_spec", None), Padding
    )


def _conv_of(module: nn.Module) -> Any:
    """The conv inside a fused module (``module[0]``), or the module itself."""
    return module[0] if isinstance(module, _FusedModule) else module


def _op_of(conv: Any) -> Op:
    return Op.make(
        "conv",
        len(conv.kernel_size),
        conv.kernel_size,
        conv.stride,
        conv.pad_spec,
        conv.dilation,
        groups=conv.groups,
        padding_mode=_padkit_mode(conv),
        where=type(conv).__name__,
    )


def _padkit_mode(conv: Any) -> Any:
    return getattr(conv, "padkit_padding_mode", conv.padding_mode)


def _symmetric_part(op: Op) -> tuple[int, ...]:
    """What the packed (symmetric-only) kernel pads by itself: per axis the smaller of the
    two static zero pads; 0 where pads depend on the input size or a mode pads them."""
    static = op.static_pairs()
    if static is None or op.padding_mode != "zeros":
        return (0,) * len(op.kernel)
    return tuple(max(0, min(lo, hi)) for lo, hi in static)


# ----------------------------------------------------------------------------- fused float


class _FusedPad:
    """Fused float modules holding a padkit conv (torch's constructors accept only torch's
    exact conv class; the computation is the same, the conv pads as padkit does)."""

    def __init__(self, *modules: nn.Module) -> None:
        nn.Sequential.__init__(cast(nn.Sequential, self), *modules)


class ConvReLU1d(_FusedPad, nni.ConvReLU1d):
    """A padkit :class:`padkit.nn.Conv1d` followed by ReLU, as ``fuse_modules`` builds it."""


class ConvReLU2d(_FusedPad, nni.ConvReLU2d):
    """A padkit :class:`padkit.nn.Conv2d` followed by ReLU, as ``fuse_modules`` builds it.

    Shape:
        - Input: :math:`(N, C_{in}, H, W)`; output as the padkit conv's.

    Example:
        >>> import padkit.nn as pn
        >>> m = ConvReLU2d(pn.Conv2d(3, 4, 3, stride=2, padding="same"), torch.nn.ReLU())
        >>> m(torch.randn(1, 3, 9, 9)).shape
        torch.Size([1, 4, 5, 5])
    """


class ConvReLU3d(_FusedPad, nni.ConvReLU3d):
    """A padkit :class:`padkit.nn.Conv3d` followed by ReLU, as ``fuse_modules`` builds it."""


class ConvBn1d(_FusedPad, nni.ConvBn1d):
    """A padkit conv and BatchNorm1d, as ``fuse_modules_qat`` builds them."""


class ConvBn2d(_FusedPad, nni.ConvBn2d):
    """A padkit conv and BatchNorm2d, as ``fuse_modules_qat`` builds them."""


class ConvBn3d(_FusedPad, nni.ConvBn3d):
    """A padkit conv and BatchNorm3d, as ``fuse_modules_qat`` builds them."""


class ConvBnReLU1d(_FusedPad, nni.ConvBnReLU1d):
    """A padkit conv, BatchNorm1d and ReLU, as ``fuse_modules_qat`` builds them."""


class ConvBnReLU2d(_FusedPad, nni.ConvBnReLU2d):
    """A padkit conv, BatchNorm2d and ReLU, as ``fuse_modules_qat`` builds them."""


class ConvBnReLU3d(_FusedPad, nni.ConvBnReLU3d):
    """A padkit conv, BatchNorm3d and ReLU, as ``fuse_modules_qat`` builds them."""


_FUSED_RELU = {1: ConvReLU1d, 2: ConvReLU2d, 3: ConvReLU3d}
_FUSED_BN = {1: ConvBn1d, 2: ConvBn2d, 3: ConvBn3d}
_FUSED_BN_RELU = {1: ConvBnReLU1d, 2: ConvBnReLU2d, 3: ConvBnReLU3d}


def _torch_class(module: nn.Module) -> Any:
    """The torch class a padkit module subclasses (the first class torch defines)."""
    return next(c for c in type(module).__mro__ if c.__module__.startswith("torch."))


def _rest(fused: nn.Module) -> list[nn.Module]:
    """The modules after the conv in a fused module (not its observer)."""
    return [m for name, m in fused.named_children() if name != "activation_post_process"][1:]


def _plain_conv(conv: Any, padding: tuple[int, ...]) -> nn.Module:
    """torch's conv class sharing ``conv``'s parameters and qconfig, with symmetric
    ``padding``: what torch's ``from_float`` methods read (they check the exact class)."""
    nd = len(conv.kernel_size)
    twin = _TORCH_CONV[nd](
        conv.in_channels,
        conv.out_channels,
        conv.kernel_size,
        conv.stride,
        padding,
        conv.dilation,
        conv.groups,
        conv.bias is not None,
        device="meta",
    )
    twin.weight = conv.weight
    twin.bias = conv.bias
    twin.train(conv.training)
    if hasattr(conv, "qconfig"):
        twin.qconfig = conv.qconfig
    return twin


#: padkit's conv classes by dimension (set by :func:`register_layers`; padkit.nn imports
#: this module, so it cannot be imported here)
_PADKIT_CONVS: dict[int, type[nn.Module]] = {}


def padkit_conv(torch_conv: Any, pad_spec: Padding, padding_mode: Any, nd: int) -> nn.Module:
    """A padkit conv with ``torch_conv``'s parameters and arguments and padkit's padding."""
    conv = _PADKIT_CONVS[nd](
        torch_conv.in_channels,
        torch_conv.out_channels,
        torch_conv.kernel_size,
        torch_conv.stride,
        padding=pad_spec,
        dilation=torch_conv.dilation,
        groups=torch_conv.groups,
        bias=torch_conv.bias is not None,
        padding_mode=padding_mode,
        device="meta",
    )
    conv.weight = torch_conv.weight
    conv.bias = torch_conv.bias
    conv.train(torch_conv.training)
    return conv


# ----------------------------------------------------------------------------- fusers


def _check_zero_transpose(conv: Any, what: str) -> None:
    if isinstance(conv, nn.modules.conv._ConvTransposeNd):
        raise NotImplementedError(
            f"padkit.nn.{type(conv).__name__}: {what} is not available for transposed convs "
            "(torch.ao has no fused transposed-conv modules); fuse it with BatchNorm in eval "
            "mode (model.eval()), which folds the BatchNorm into the padkit layer's weights"
        )


def _fold_eval(conv: Any, bn: Any) -> nn.Module:
    if conv.training or bn.training:
        raise ValueError(
            f"padkit.nn.{type(conv).__name__}: fuse_modules folds BatchNorm only in eval mode "
            f"(conv.training={conv.training}, bn.training={bn.training}); call model.eval() "
            "first, or use fuse_modules_qat in training mode"
        )
    transpose = isinstance(conv, nn.modules.conv._ConvTransposeNd)
    fused: nn.Module = nn.utils.fusion.fuse_conv_bn_eval(conv, bn, transpose=transpose)
    return fused


def _check_qat_bn(conv: Any, bn: Any) -> None:
    if conv.training != bn.training:
        raise ValueError(
            f"padkit.nn.{type(conv).__name__}: the conv and the BatchNorm must both be in "
            f"training or both in eval mode (conv.training={conv.training}, "
            f"bn.training={bn.training})"
        )
    if bn.num_features != conv.out_channels or not bn.affine or not bn.track_running_stats:
        raise ValueError(
            f"padkit.nn.{type(conv).__name__}: quantization-aware fusion needs a BatchNorm "
            f"with num_features={conv.out_channels}, affine=True and track_running_stats=True, "
            f"got {bn}"
        )


def fuse_conv_bn(is_qat: bool, conv: Any, bn: Any) -> nn.Module:
    """torch.ao fuser for (padkit conv, BatchNorm): in QAT a :class:`ConvBn2d` (1-D, 3-D
    alike), else the padkit conv with the BatchNorm folded into its weights."""
    if is_qat:
        _check_zero_transpose(conv, "quantization-aware fusion")
        _check_qat_bn(conv, bn)
        return _FUSED_BN[len(conv.kernel_size)](conv, bn)
    return _fold_eval(conv, bn)


def fuse_conv_bn_relu(is_qat: bool, conv: Any, bn: Any, relu: nn.Module) -> nn.Module:
    """torch.ao fuser for (padkit conv, BatchNorm, ReLU): :class:`ConvBnReLU2d` in QAT,
    else :class:`ConvReLU2d` around the conv with the BatchNorm folded (1-D, 3-D alike)."""
    _check_zero_transpose(conv, "fusion with an activation")
    if is_qat:
        _check_qat_bn(conv, bn)
        return _FUSED_BN_RELU[len(conv.kernel_size)](conv, bn, relu)
    return _FUSED_RELU[len(conv.kernel_size)](_fold_eval(conv, bn), relu)


def fuse_conv_relu(is_qat: bool, conv: Any, relu: nn.Module) -> nn.Module:
    """torch.ao fuser for (padkit conv, ReLU): :class:`ConvReLU2d` (1-D, 3-D alike)."""
    _check_zero_transpose(conv, "fusion with an activation")
    return _FUSED_RELU[len(conv.kernel_size)](conv, relu)


# ----------------------------------------------------------------------------- QAT


class _QATPad:
    """QAT convs of torch (which convolve through ``_conv_forward``) with padkit's padding.

    torch's base class is built with ``padding=0``; ``pad_spec`` holds the padding and
    ``padkit_padding_mode`` the mode (torch's ``padding_mode`` stays ``"zeros"``)."""

    pad_spec: Padding
    padkit_padding_mode: Any
    kernel_size: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int

    def _conv_forward(self, input: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
        return PF._conv(
            type(self).__name__,
            len(self.kernel_size),
            input,
            weight,
            bias,
            self.stride,
            self.pad_spec,
            self.dilation,
            self.groups,
            self.padkit_padding_mode,
        )

    @classmethod
    def from_float(cls, mod: nn.Module, use_precomputed_fake_quant: bool = False) -> Any:
        """The QAT module for a padkit conv or a fused module holding one."""
        conv = _conv_of(mod)
        op = _op_of(conv)  # the checks, with the layer's name
        twin: nn.Module = _plain_conv(conv, (0,) * len(op.kernel))
        if isinstance(mod, _FusedModule):
            twin = _torch_class(mod)(twin, *_rest(mod))
        twin.qconfig = mod.qconfig
        qat = super().from_float(twin, use_precomputed_fake_quant)  # type: ignore[misc]
        qat.pad_spec = conv.pad_spec
        qat.padkit_padding_mode = _padkit_mode(conv)
        return qat

    def to_float(self) -> nn.Module:
        """The float module (BatchNorm folded where there is one) with padkit's conv."""
        plain: nn.Module = super().to_float()  # type: ignore[misc]
        torch_conv = _conv_of(plain)
        conv = padkit_conv(
            torch_conv, self.pad_spec, self.padkit_padding_mode, len(self.kernel_size)
        )
        if isinstance(plain, _FusedModule):
            return _FUSED_RELU[len(self.kernel_size)](conv, *_rest(plain))
        return conv

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, padding={self.pad_spec.describe()}"  # type: ignore[misc]


class QATConv1d(_QATPad, nnqat.Conv1d):  # type: ignore[misc]
    """``torch.ao.nn.qat.Conv1d`` with a padkit conv's padding."""


class QATConv2d(_QATPad, nnqat.Conv2d):  # type: ignore[misc]
    """``torch.ao.nn.qat.Conv2d`` with a padkit conv's padding (weights fake-quantized)."""


class QATConv3d(_QATPad, nnqat.Conv3d):  # type: ignore[misc]
    """``torch.ao.nn.qat.Conv3d`` with a padkit conv's padding."""


class QATConvReLU1d(_QATPad, nniqat.ConvReLU1d):  # type: ignore[misc]
    """``torch.ao.nn.intrinsic.qat.ConvReLU1d`` with a padkit conv's padding."""


class QATConvReLU2d(_QATPad, nniqat.ConvReLU2d):  # type: ignore[misc]
    """``torch.ao.nn.intrinsic.qat.ConvReLU2d`` with a padkit conv's padding."""


class QATConvReLU3d(_QATPad, nniqat.ConvReLU3d):  # type: ignore[misc]
    """``torch.ao.nn.intrinsic.qat.ConvReLU3d`` with a padkit conv's padding."""


class QATConvBn1d(_QATPad, nniqat.ConvBn1d):
    """``torch.ao.nn.intrinsic.qat.ConvBn1d`` with a padkit conv's padding."""


class QATConvBn2d(_QATPad, nniqat.ConvBn2d):
    """``torch.ao.nn.intrinsic.qat.ConvBn2d`` (BatchNorm simulated, folded at convert)
    with a padkit conv's padding."""


class QATConvBn3d(_QATPad, nniqat.ConvBn3d):
    """``torch.ao.nn.intrinsic.qat.ConvBn3d`` with a padkit conv's padding."""


class QATConvBnReLU1d(_QATPad, nniqat.ConvBnReLU1d):
    """``torch.ao.nn.intrinsic.qat.ConvBnReLU1d`` with a padkit conv's padding."""


class QATConvBnReLU2d(_QATPad, nniqat.ConvBnReLU2d):
    """``torch.ao.nn.intrinsic.qat.ConvBnReLU2d`` with a padkit conv's padding."""


class QATConvBnReLU3d(_QATPad, nniqat.ConvBnReLU3d):
    """``torch.ao.nn.intrinsic.qat.ConvBnReLU3d`` with a padkit conv's padding."""


# ----------------------------------------------------------------------------- quantized


def _fold_qat_bn(mod: Any) -> None:
    """Fold a QAT conv-BN's running statistics into its weights (what torch's
    ``from_float`` does for its own exact classes only)."""
    if isinstance(mod, nniqat.ConvBn1d | nniqat.ConvBn2d | nniqat.ConvBn3d):
        bn: Any = mod.bn
        mod.weight, mod.bias = nn.utils.fusion.fuse_conv_bn_weights(
            mod.weight, mod.bias, bn.running_mean, bn.running_var, bn.eps, bn.weight, bn.bias
        )


def pad_input(conv: Any, input: Tensor) -> Tensor:
    """Pad ``input`` (float, or quantized per tensor) by what ``conv``'s ``pad_spec`` asks
    for an input of this size beyond the symmetric part the kernel pads (``conv.padding``).

    A quantized input is padded with the zero point (the quantized 0.0: exact) or, for a
    ``padding_mode``, by the mode's copy of quantized values (exact as well).
    """
    nd = len(conv.kernel_size)
    name = type(conv).__name__
    if not isinstance(input, Tensor) or input.dim() != nd + 2:
        got = tuple(input.shape) if isinstance(input, Tensor) else type(input).__name__
        raise ValueError(f"{name}: input must be a {nd + 2}-D tensor (N, C, *spatial), got {got}")
    op = _op_of(conv)
    pairs = op.pairs_at(tuple(int(v) for v in input.shape[2:]))
    rest = tuple((lo - s, hi - s) for (lo, hi), s in zip(pairs, conv.padding))
    if not any(lo or hi for lo, hi in rest):
        return input
    modes = op.padding_mode
    if not isinstance(modes, str):
        raise NotImplementedError(
            f"{name}: a different padding_mode per axis ({modes}) is not available in "
            "quantized models; use one padding_mode for every axis"
        )
    torch_pad = PF._torch_pad(rest)
    mode = PF._PAD_MODE_CANON.get(modes, modes)
    if mode == "constant":
        return F.pad(input, torch_pad, value=0.0)
    if not input.is_quantized:
        return F.pad(input, torch_pad, mode=mode)
    # replicate/reflect/circular copy quantized values: pad the dequantized tensor and
    # quantize it again with the same parameters (every value is on the grid, so exact)
    padded = F.pad(input.dequantize(), torch_pad, mode=mode)
    return torch.quantize_per_tensor(padded, input.q_scale(), input.q_zero_point(), input.dtype)


class _QuantizedPad:
    """torch's quantized convs with padkit's padding: the quantized input is padded (zero
    point, or the mode's copy of quantized values), then the packed kernel runs with the
    symmetric part ``padding``."""

    pad_spec: Padding
    padkit_padding_mode: Any
    kernel_size: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    padding: tuple[int, ...]
    groups: int
    _FLOAT_MODULE: ClassVar[Any]

    def _padkit_op(self) -> Op:
        return _op_of(self)

    def _pad_input(self, input: Tensor) -> Tensor:
        return pad_input(self, input)

    def forward(self, input: Tensor) -> Tensor:
        out: Tensor = super().forward(self._pad_input(input))  # type: ignore[misc]
        return out

    @classmethod
    def from_float(cls, mod: nn.Module, use_precomputed_fake_quant: bool = False) -> Any:
        """The quantized module for an observed padkit conv, fused module or QAT module."""
        if isinstance(mod, _QATPad):
            qat: Any = mod
            spec, mode = qat.pad_spec, qat.padkit_padding_mode
            sym = _symmetric_part(_op_of(qat))
            _fold_qat_bn(qat)
            saved = qat.padding
            qat.padding = sym  # the packed kernel pads the symmetric part
            try:
                q = super().from_float(qat, use_precomputed_fake_quant)  # type: ignore[misc]
            finally:
                qat.padding = saved
        else:
            conv = _conv_of(mod)
            spec, mode = conv.pad_spec, _padkit_mode(conv)
            sym = _symmetric_part(_op_of(conv))
            twin: nn.Module = _plain_conv(conv, sym)
            if isinstance(mod, _FusedModule):
                twin = _torch_class(mod)(twin, *_rest(mod))
            twin.qconfig = mod.qconfig
            if hasattr(mod, "activation_post_process"):
                twin.activation_post_process = mod.activation_post_process
            q = super().from_float(twin, use_precomputed_fake_quant)  # type: ignore[misc]
        q.pad_spec = spec
        q.padkit_padding_mode = mode
        return q

    @classmethod
    def from_reference(cls, ref_qconv: Any, output_scale: float, output_zero_point: int) -> Any:
        """The quantized module for a padkit reference module (FX graph mode's lowering)."""
        conv = _conv_of(ref_qconv)
        q = super().from_reference(ref_qconv, output_scale, output_zero_point)  # type: ignore[misc]
        q.pad_spec, q.padkit_padding_mode = conv.pad_spec, conv.padkit_padding_mode
        return q

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, pad_spec=[{self.pad_spec.describe()}]"  # type: ignore[misc]

    def __getstate__(self) -> Any:
        return (super().__getstate__(), self.pad_spec, self.padkit_padding_mode)  # type: ignore[misc]

    def __setstate__(self, state: Any) -> None:
        super().__setstate__(state[0])  # type: ignore[misc]
        self.pad_spec, self.padkit_padding_mode = state[1], state[2]


class QuantizedConv1d(_QuantizedPad, nnq.Conv1d):  # type: ignore[misc]
    """``torch.ao.nn.quantized.Conv1d`` with a padkit conv's padding."""


class QuantizedConv2d(_QuantizedPad, nnq.Conv2d):  # type: ignore[misc]
    """``torch.ao.nn.quantized.Conv2d`` with a padkit conv's padding.

    Shape:
        - Input: quantized :math:`(N, C_{in}, H, W)`; output as the padkit conv's.
    """


class QuantizedConv3d(_QuantizedPad, nnq.Conv3d):  # type: ignore[misc]
    """``torch.ao.nn.quantized.Conv3d`` with a padkit conv's padding."""


class QuantizedConvReLU1d(_QuantizedPad, nniq.ConvReLU1d):  # type: ignore[misc]
    """``torch.ao.nn.intrinsic.quantized.ConvReLU1d`` with a padkit conv's padding."""


class QuantizedConvReLU2d(_QuantizedPad, nniq.ConvReLU2d):  # type: ignore[misc]
    """``torch.ao.nn.intrinsic.quantized.ConvReLU2d`` with a padkit conv's padding."""


class QuantizedConvReLU3d(_QuantizedPad, nniq.ConvReLU3d):  # type: ignore[misc]
    """``torch.ao.nn.intrinsic.quantized.ConvReLU3d`` with a padkit conv's padding."""


# ----------------------------------------------------------------------------- registration


def register_layers(convs: dict[int, type[nn.Module]], transposed: dict[int, type]) -> None:
    """Add padkit's convs (``convs``: nd -> padkit conv class) and the fused, QAT and
    quantized modules above to torch.ao's type-keyed tables, so that ``fuse_modules``,
    ``fuse_modules_qat``, ``prepare``, ``prepare_qat`` and ``convert`` handle them.
    ``padkit.nn`` calls this once on import. Entries torch already has are kept."""
    _PADKIT_CONVS.update(convs)
    from torch.ao.quantization import fuser_method_mappings as fmm, quantization_mappings as qm

    fusers: dict[tuple[Any, ...], Callable[..., nn.Module]] = {}
    bns = {1: nn.BatchNorm1d, 2: nn.BatchNorm2d, 3: nn.BatchNorm3d}
    static: dict[Any, Any] = {}
    qat: dict[Any, Any] = {}
    for nd, conv in convs.items():
        fusers[(conv, bns[nd])] = fuse_conv_bn
        fusers[(conv, bns[nd], nn.ReLU)] = fuse_conv_bn_relu
        fusers[(conv, nn.ReLU)] = fuse_conv_relu
        q_conv = (QuantizedConv1d, QuantizedConv2d, QuantizedConv3d)[nd - 1]
        q_relu = (QuantizedConvReLU1d, QuantizedConvReLU2d, QuantizedConvReLU3d)[nd - 1]
        t_conv = (QATConv1d, QATConv2d, QATConv3d)[nd - 1]
        t_relu = (QATConvReLU1d, QATConvReLU2d, QATConvReLU3d)[nd - 1]
        t_bn = (QATConvBn1d, QATConvBn2d, QATConvBn3d)[nd - 1]
        t_bn_relu = (QATConvBnReLU1d, QATConvBnReLU2d, QATConvBnReLU3d)[nd - 1]
        static.update(
            {
                conv: q_conv,
                _FUSED_RELU[nd]: q_relu,
                t_conv: q_conv,
                t_bn: q_conv,
                t_relu: q_relu,
                t_bn_relu: q_relu,
            }
        )
        qat.update(
            {
                conv: t_conv,
                _FUSED_RELU[nd]: t_relu,
                _FUSED_BN[nd]: t_bn,
                _FUSED_BN_RELU[nd]: t_bn_relu,
            }
        )
    for nd, conv in transposed.items():
        if nd in bns:
            fusers[(conv, bns[nd])] = fuse_conv_bn
    tables = (
        (getattr(fmm, "_DEFAULT_OP_LIST_TO_FUSER_METHOD", None), fusers),
        (getattr(qm, "DEFAULT_STATIC_QUANT_MODULE_MAPPINGS", None), static),
        (getattr(qm, "DEFAULT_QAT_MODULE_MAPPINGS", None), qat),
    )
    for table, entries in tables:
        if not isinstance(table, dict):  # pragma: no cover - a torch that reorganised it
            continue
        for key, value in entries.items():
            table.setdefault(key, value)
