"""FX graph mode quantization (``prepare_fx``/``convert_fx``) of models with padkit convs.

FX graph mode finds what to fuse, observe and swap through a *backend config* keyed by
module class, and traces into every module outside ``torch.nn``. Two configs make padkit
convs quantize exactly as torch's do:

- :func:`prepare_custom_config` keeps padkit convs whole in the traced graph (one
  ``call_module`` node each, as torch's convs are);
- :func:`backend_config` is torch's native backend config (or the one given) with every
  conv entry repeated for padkit's classes: conv + BatchNorm (+ ReLU) fuse with BatchNorm
  folded, QAT swaps in :mod:`padkit.quantization.eager`'s QAT modules, ``convert_fx``
  builds :class:`ReferenceConv2d` (a reference quantized conv that pads its dequantized
  input) and lowers it to :class:`~padkit.quantization.QuantizedConv2d`.

Recipe (docs/quantization.md)::

    prepared = padkit.quantization.fx.prepare_fx(model, qconfig_mapping, example_inputs)
    ...  # calibrate
    quantized = padkit.quantization.fx.convert_fx(prepared)

or torch's own ``prepare_fx(..., prepare_custom_config=pfx.prepare_custom_config(),
backend_config=pfx.backend_config())`` and ``convert_fx(..., backend_config=...)``.

Example:
    >>> import padkit.nn as pn
    >>> config = backend_config()   # torch's native entries and padkit's
    >>> convs = (pn.Conv2d, torch.nn.Conv2d)
    >>> sorted({c.pattern.__module__ for c in config.configs if c.pattern in convs})
    ['padkit.nn', 'torch.nn.modules.conv']
"""

from __future__ import annotations

from typing import Any

import torch
import torch.ao.nn.intrinsic as nni
import torch.ao.nn.intrinsic.qat as nniqat
import torch.ao.nn.qat as nnqat
import torch.ao.nn.quantized.reference as nnqr
import torch.ao.quantization.backend_config.utils  # noqa: F401  (get_native_backend_config needs it)
from torch import Tensor, nn
from torch.ao.quantization import QConfigMapping, quantize_fx
from torch.ao.quantization.backend_config import (
    BackendConfig,
    BackendPatternConfig,
    get_native_backend_config,
)
from torch.ao.quantization.fx import _lower_to_native_backend as lower
from torch.ao.quantization.fx.custom_config import PrepareCustomConfig
from torch.fx import GraphModule

from .. import nn as pn
from . import eager as pq
from .eager import _conv_of, _op_of, _plain_conv, _symmetric_part, pad_input

__all__ = [
    "ReferenceConv1d",
    "ReferenceConv2d",
    "ReferenceConv3d",
    "backend_config",
    "convert_fx",
    "prepare_custom_config",
    "prepare_fx",
    "prepare_qat_fx",
]


class _ReferencePad:
    """torch's reference quantized convs (weights quantized and dequantized, float
    arithmetic) with padkit's padding: the dequantized input is padded, then the conv runs
    with the symmetric part ``padding``."""

    pad_spec: Any
    padkit_padding_mode: Any

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = super().forward(pad_input(self, x))  # type: ignore[misc]
        return out

    @classmethod
    def from_float(cls, float_conv: nn.Module, weight_qparams: dict[str, Any]) -> Any:
        conv: Any = _conv_of(float_conv)
        twin = _plain_conv(conv, _symmetric_part(_op_of(conv)))
        ref = super().from_float(twin, weight_qparams)  # type: ignore[misc]
        ref.pad_spec = conv.pad_spec
        ref.padkit_padding_mode = getattr(conv, "padkit_padding_mode", conv.padding_mode)
        return ref

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, pad_spec=[{self.pad_spec.describe()}]"  # type: ignore[misc]


class ReferenceConv1d(_ReferencePad, nnqr.Conv1d):  # type: ignore[misc]
    """``torch.ao.nn.quantized.reference.Conv1d`` with a padkit conv's padding."""


class ReferenceConv2d(_ReferencePad, nnqr.Conv2d):  # type: ignore[misc]
    """``torch.ao.nn.quantized.reference.Conv2d`` with a padkit conv's padding.

    Shape:
        - Input: :math:`(N, C_{in}, H, W)` (float); output as the padkit conv's.
    """


class ReferenceConv3d(_ReferencePad, nnqr.Conv3d):  # type: ignore[misc]
    """``torch.ao.nn.quantized.reference.Conv3d`` with a padkit conv's padding."""


_PADKIT_CONVS: dict[int, type[nn.Module]] = {1: pn.Conv1d, 2: pn.Conv2d, 3: pn.Conv3d}


def _substitutes() -> dict[Any, Any]:
    """torch's class -> padkit's, for every class a conv entry of a backend config names."""
    out: dict[Any, Any] = {}
    for nd in (1, 2, 3):
        i = nd - 1
        out.update(
            {
                (nn.Conv1d, nn.Conv2d, nn.Conv3d)[i]: _PADKIT_CONVS[nd],
                (nni.ConvReLU1d, nni.ConvReLU2d, nni.ConvReLU3d)[i]: pq._FUSED_RELU[nd],
                (nni.ConvBn1d, nni.ConvBn2d, nni.ConvBn3d)[i]: pq._FUSED_BN[nd],
                (nni.ConvBnReLU1d, nni.ConvBnReLU2d, nni.ConvBnReLU3d)[i]: pq._FUSED_BN_RELU[nd],
                (nnqat.Conv1d, nnqat.Conv2d, nnqat.Conv3d)[i]: (
                    pq.QATConv1d,
                    pq.QATConv2d,
                    pq.QATConv3d,
                )[i],
                (nniqat.ConvReLU1d, nniqat.ConvReLU2d, nniqat.ConvReLU3d)[i]: (
                    pq.QATConvReLU1d,
                    pq.QATConvReLU2d,
                    pq.QATConvReLU3d,
                )[i],
                (nniqat.ConvBn1d, nniqat.ConvBn2d, nniqat.ConvBn3d)[i]: (
                    pq.QATConvBn1d,
                    pq.QATConvBn2d,
                    pq.QATConvBn3d,
                )[i],
                (nniqat.ConvBnReLU1d, nniqat.ConvBnReLU2d, nniqat.ConvBnReLU3d)[i]: (
                    pq.QATConvBnReLU1d,
                    pq.QATConvBnReLU2d,
                    pq.QATConvBnReLU3d,
                )[i],
                (nnqr.Conv1d, nnqr.Conv2d, nnqr.Conv3d)[i]: (
                    ReferenceConv1d,
                    ReferenceConv2d,
                    ReferenceConv3d,
                )[i],
            }
        )
    return out


def _swap(value: Any, table: dict[Any, Any]) -> Any:
    if isinstance(value, tuple):
        return tuple(_swap(v, table) for v in value)
    if isinstance(value, type):
        return table.get(value, value)
    return value


def _mentions(value: Any, classes: dict[Any, Any]) -> bool:
    if isinstance(value, tuple):
        return any(_mentions(v, classes) for v in value)
    return isinstance(value, type) and value in classes


def _fuser_for(pattern: tuple[Any, ...]) -> Any:
    """padkit's fuser for a (conv, ...) pattern in torch's simple (forward-order) format."""
    if len(pattern) == 3:
        return pq.fuse_conv_bn_relu
    if isinstance(pattern[1], type) and issubclass(pattern[1], nn.modules.batchnorm._BatchNorm):
        return pq.fuse_conv_bn
    return pq.fuse_conv_relu


def backend_config(base: BackendConfig | None = None) -> BackendConfig:
    """``base`` (torch's native backend config by default) with each conv entry repeated
    for padkit's conv, fused, QAT and reference classes. Pass it to ``prepare_fx`` and
    ``convert_fx`` together with :func:`prepare_custom_config`."""
    if base is None:
        base = get_native_backend_config()
    elif not isinstance(base, BackendConfig):
        raise TypeError(
            "backend_config(base): base must be a torch.ao.quantization.backend_config."
            f"BackendConfig or None (torch's native config), got {base!r}"
        )
    table = _substitutes()
    config = BackendConfig(base.name)
    config.set_backend_pattern_configs(base.configs)
    for entry in base.configs:
        spec = entry.to_dict()
        pattern = spec.get("pattern")
        if not _mentions(pattern, table):
            continue
        ours = {key: _swap(value, table) for key, value in spec.items()}
        if isinstance(pattern, tuple) and spec.get("fuser_method") is not None:
            ours["fuser_method"] = _fuser_for(pattern)
        config.set_backend_pattern_config(BackendPatternConfig.from_dict(ours))
    return config


def prepare_custom_config(base: PrepareCustomConfig | None = None) -> PrepareCustomConfig:
    """``base`` (or a new ``PrepareCustomConfig``) with padkit's convs as modules the FX
    tracer keeps whole, so that the backend config's entries see them."""
    config = PrepareCustomConfig() if base is None else base
    if not isinstance(config, PrepareCustomConfig):
        raise TypeError(
            "prepare_custom_config(base): base must be a torch.ao.quantization.fx."
            f"custom_config.PrepareCustomConfig or None, got {base!r}"
        )
    for conv in _PADKIT_CONVS.values():
        if conv not in config.non_traceable_module_classes:
            config.set_non_traceable_module_classes([*config.non_traceable_module_classes, conv])
    return config


_with_padkit_convs = backend_config
_with_padkit_tracing = prepare_custom_config


def _register_lowering() -> None:
    """convert_fx lowers reference modules through tables keyed by exact class."""
    modules: dict[Any, Any] = getattr(lower, "STATIC_LOWER_MODULE_MAP", {})
    fused: dict[Any, Any] = getattr(lower, "STATIC_LOWER_FUSED_MODULE_MAP", {})
    refs = {1: ReferenceConv1d, 2: ReferenceConv2d, 3: ReferenceConv3d}
    quantized = {1: pq.QuantizedConv1d, 2: pq.QuantizedConv2d, 3: pq.QuantizedConv3d}
    relu = {1: pq.QuantizedConvReLU1d, 2: pq.QuantizedConvReLU2d, 3: pq.QuantizedConvReLU3d}
    for nd in (1, 2, 3):
        modules.setdefault(refs[nd], quantized[nd])
        fused.setdefault(pq._FUSED_RELU[nd], (refs[nd], relu[nd]))


_register_lowering()


def _assign_qconfigs(model: nn.Module, qconfig_mapping: Any) -> None:
    """Give each padkit conv the qconfig torch's propagation would give it (module name,
    then class, then the parent's), because ``propagate_qconfig_`` skips the modules the
    tracer keeps whole, and QAT swaps modules before FX assigns them theirs."""
    if isinstance(qconfig_mapping, dict):
        qconfig_mapping = QConfigMapping.from_dict(qconfig_mapping)
    if not isinstance(qconfig_mapping, QConfigMapping):
        raise TypeError(
            "qconfig_mapping must be a torch.ao.quantization.QConfigMapping (or its dict "
            f"form), got {type(qconfig_mapping).__name__}"
        )
    flat: dict[Any, Any] = {"": qconfig_mapping.global_qconfig}
    flat.update(qconfig_mapping.object_type_qconfigs)
    flat.update(qconfig_mapping.module_name_qconfigs)

    def walk(module: nn.Module, prefix: str, parent: Any) -> None:
        qconfig = flat.get(type(module), parent)
        qconfig = flat.get(prefix, qconfig)
        qconfig = getattr(module, "qconfig", qconfig)
        if isinstance(module, tuple(_PADKIT_CONVS.values())):
            module.qconfig = qconfig
            return
        for name, child in module.named_children():
            walk(child, f"{prefix}.{name}" if prefix else name, qconfig)

    walk(model, "", None)


def prepare_fx(
    model: nn.Module,
    qconfig_mapping: Any,
    example_inputs: tuple[Any, ...],
    prepare_custom_config: PrepareCustomConfig | None = None,
    backend_config: BackendConfig | None = None,
) -> GraphModule:
    """``torch.ao.quantization.quantize_fx.prepare_fx`` with padkit's configs added."""
    prepared: GraphModule = quantize_fx.prepare_fx(
        model,
        qconfig_mapping,
        example_inputs,
        prepare_custom_config=_with_padkit_tracing(prepare_custom_config),
        backend_config=_with_padkit_convs(backend_config),
    )
    return prepared


def prepare_qat_fx(
    model: nn.Module,
    qconfig_mapping: Any,
    example_inputs: tuple[Any, ...],
    prepare_custom_config: PrepareCustomConfig | None = None,
    backend_config: BackendConfig | None = None,
) -> GraphModule:
    """``torch.ao.quantization.quantize_fx.prepare_qat_fx`` with padkit's configs added;
    padkit convs get their qconfig first (see the module docstring)."""
    _assign_qconfigs(model, qconfig_mapping)
    prepared: GraphModule = quantize_fx.prepare_qat_fx(
        model,
        qconfig_mapping,
        example_inputs,
        prepare_custom_config=_with_padkit_tracing(prepare_custom_config),
        backend_config=_with_padkit_convs(backend_config),
    )
    return prepared


def convert_fx(
    graph_module: GraphModule, backend_config: BackendConfig | None = None, **kwargs: Any
) -> GraphModule:
    """``torch.ao.quantization.quantize_fx.convert_fx`` with padkit's backend config."""
    converted: GraphModule = quantize_fx.convert_fx(
        graph_module, backend_config=_with_padkit_convs(backend_config), **kwargs
    )
    return converted
