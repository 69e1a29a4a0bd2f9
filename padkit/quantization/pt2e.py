"""PT2E quantization (``torch.export`` + torchao's ``prepare_pt2e``/``convert_pt2e``) of
models with padkit convs.

Under ``torch.export`` a padkit conv records ``F.pad`` + torch's conv with the symmetric
part (the form every graph quantizer knows), but both nodes carry the padkit layer's class
in their ``nn_module_stack``, and quantizers match convs by torch's class name, so they
would leave padkit convs float. :func:`expose_convs` rewrites that metadata: the conv node
is recorded as the torch conv class whose computation it is, the pad node as its parent
module's. :class:`PadkitQuantizer` wraps any quantizer (``X86InductorQuantizer``,
``XNNPACKQuantizer``, ...) and applies it before annotation.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch import nn
from torchao.quantization.pt2e.quantizer import Quantizer

__all__ = ["PadkitQuantizer", "expose_convs"]

_CONV_OPS = {
    torch.ops.aten.conv1d.default,
    torch.ops.aten.conv2d.default,
    torch.ops.aten.conv3d.default,
    torch.ops.aten.convolution.default,
}


def _torch_conv_of(cls: Any) -> type | None:
    """torch's conv class that a recorded padkit conv class (a type, or its dotted name as
    ``torch.export`` writes it) subclasses; None for anything else."""
    if isinstance(cls, str):
        module, _, name = cls.rpartition(".")
        cls = getattr(sys.modules.get(module), name, None)
    if not (
        isinstance(cls, type)
        and issubclass(cls, nn.modules.conv._ConvNd)
        and cls.__module__.split(".")[0] == "padkit"
    ):
        return None
    return next(c for c in cls.__mro__ if c.__module__.startswith("torch.nn."))


def _name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def expose_convs(model: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Record each padkit conv's conv node as torch's conv class and its other nodes (the
    explicit pad) as the parent module's, in place, so that graph quantizers annotate it.

    Example:
        >>> import padkit.nn as pn
        >>> m = torch.nn.Sequential(pn.Conv2d(3, 4, 3, stride=2, padding="same"))
        >>> gm = expose_convs(torch.export.export(m, (torch.randn(1, 3, 8, 8),)).module())
        >>> [list(n.meta["nn_module_stack"].values())[-1][1] for n in gm.graph.nodes
        ...  if n.op == "call_function" and "nn_module_stack" in n.meta]
        ['torch.nn.modules.container.Sequential', 'torch.nn.modules.conv.Conv2d']
    """
    for node in model.graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if stack:
            key, (fqn, cls) = list(stack.items())[-1]
            base = _torch_conv_of(cls)
            if base is not None:
                if node.target in _CONV_OPS:
                    stack[key] = (fqn, base if isinstance(cls, type) else _name(base))
                elif len(stack) > 1:
                    del stack[key]
        sources = node.meta.get("source_fn_stack")
        if sources:
            name, cls = sources[-1]
            base = _torch_conv_of(cls)
            if base is not None:
                if node.target in _CONV_OPS:
                    sources[-1] = (name, base)
                else:
                    sources.pop()
                    if not sources:
                        del node.meta["source_fn_stack"]
    return model


class PadkitQuantizer(Quantizer):  # type: ignore[misc]  # torchao has no type hints
    """A PT2E quantizer that annotates padkit convs as ``quantizer`` annotates torch's.

    Args:
        quantizer: any torchao PT2E quantizer, configured as usual.

    Example:
        >>> from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
        ...     X86InductorQuantizer, get_default_x86_inductor_quantization_config)
        >>> x86 = X86InductorQuantizer().set_global(get_default_x86_inductor_quantization_config())
        >>> quantizer = PadkitQuantizer(x86)   # then prepare_pt2e(exported, quantizer)
    """

    def __init__(self, quantizer: Quantizer) -> None:
        super().__init__()
        if not isinstance(quantizer, Quantizer):
            raise TypeError(
                "PadkitQuantizer(quantizer): quantizer must be a torchao PT2E Quantizer "
                f"(e.g. X86InductorQuantizer, XNNPACKQuantizer), got {quantizer!r}"
            )
        self.quantizer = quantizer

    def transform_for_annotation(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        gm: torch.fx.GraphModule = self.quantizer.transform_for_annotation(expose_convs(model))
        return gm

    def annotate(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        gm: torch.fx.GraphModule = self.quantizer.annotate(model)
        return gm

    def validate(self, model: torch.fx.GraphModule) -> None:
        self.quantizer.validate(model)

    def prepare_obs_or_fq_callback(
        self, model: torch.fx.GraphModule, edge_or_node_to_obs_or_fq: dict[Any, Any]
    ) -> None:
        self.quantizer.prepare_obs_or_fq_callback(model, edge_or_node_to_obs_or_fq)
