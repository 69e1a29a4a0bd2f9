"""surgery.dilate: output-stride dilation with every padding it affects fixed."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, ClassVar

from torch import Tensor, nn

from ..spec import (
    Padding,
    _tuple_of,
)
from ._common import (
    Change,
    SurgeryError,
    SurgeryReport,
    _brief,
    _build,
    _check_bool,
    _check_model,
    _classes,
    _Layer,
    _layer,
    _paths_by_id,
    _replace,
    _timm_same_convs,
    _timm_same_pools,
)

# ----------------------------------------------------------------------------- dilate


class LatticeGate(nn.Module):
    """A squeeze-and-excitation style channel gate whose global pool reads only the a-trous
    lattice ``x[..., ::f, ::f]``, so that a dilated backbone's gate equals the original's.

    It holds the original gate's submodules under their own names, so ``state_dict`` keys
    are unchanged. ``kind`` is ``"se"`` (timm ``SEModule``), ``"ese"``
    (``EffectiveSEModule``) or ``"eca"`` (``EcaModule``).

    Example:
        >>> se = torch.nn.Module()
        >>> se.fc = torch.nn.Conv2d(4, 4, 1)
        >>> se.gate = torch.nn.Sigmoid()
        >>> gate = LatticeGate(se, "ese", (2, 2))
        >>> x = torch.randn(1, 4, 6, 6)
        >>> ref = x * torch.sigmoid(se.fc(x[..., ::2, ::2].mean((2, 3), keepdim=True)))
        >>> torch.allclose(gate(x), ref)
        True
    """

    _KINDS: ClassVar[dict[str, tuple[str, ...]]] = {
        "se": ("fc1", "fc2", "gate"),
        "ese": ("fc", "gate"),
        "eca": ("conv", "gate"),
    }

    def __init__(self, gate: nn.Module, kind: str, factor: Sequence[int]) -> None:
        super().__init__()
        if kind not in self._KINDS:
            raise SurgeryError(
                f"LatticeGate: kind must be one of {', '.join(map(repr, self._KINDS))}, "
                f"got {kind!r}"
            )
        missing = [n for n in self._KINDS[kind] if not isinstance(gate._modules.get(n), nn.Module)]
        if missing:
            raise SurgeryError(
                f"LatticeGate: a {kind!r} gate needs submodules {self._KINDS[kind]}; "
                f"{type(gate).__name__} lacks {missing}"
            )
        own = [n for n, v in (*gate._parameters.items(), *gate._buffers.items()) if v is not None]
        if own:
            raise SurgeryError(
                f"LatticeGate: {type(gate).__name__} holds tensors of its own ({own}); "
                "only gates made of submodules are supported"
            )
        for name, child in gate._modules.items():
            self.add_module(name, child)
        self.kind = kind
        self.factor = tuple(_tuple_of(factor, len(tuple(factor)), "factor"))
        self.add_maxpool = bool(getattr(gate, "add_maxpool", False))
        self.train(gate.training)

    def _run(self, name: str, x: Tensor) -> Tensor:
        module = self._modules.get(name)
        return x if module is None else module(x)

    def forward(self, x: Tensor) -> Tensor:
        dims = tuple(range(2, x.dim()))
        index: list[Any] = [Ellipsis, *(slice(None, None, f) for f in self.factor)]
        lattice = x[tuple(index)]
        if self.kind == "eca":
            y = lattice.mean(dims).view(x.shape[0], 1, -1)
            y = self._run("conv", y)
            if self._modules.get("conv2") is not None:
                y = self._run("conv2", self._run("act", y))
            y = self._run("gate", y).view(x.shape[0], -1, *([1] * len(dims)))
            return x * y.expand_as(x)
        x_se = lattice.mean(dims, keepdim=True)
        if self.add_maxpool:
            x_se = 0.5 * x_se + 0.5 * lattice.amax(dims, keepdim=True)
        if self.kind == "se":
            x_se = self._run("fc2", self._run("act", self._run("bn", self._run("fc1", x_se))))
        else:
            x_se = self._run("fc", x_se)
        return x * self._run("gate", x_se)

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, lattice={self.factor}"


_POINTWISE: tuple[type, ...] = (
    nn.BatchNorm2d,
    nn.SyncBatchNorm,
    nn.Identity,
    nn.ReLU,
    nn.ReLU6,
    nn.LeakyReLU,
    nn.PReLU,
    nn.ELU,
    nn.SELU,
    nn.CELU,
    nn.GELU,
    nn.SiLU,
    nn.Mish,
    nn.Hardswish,
    nn.Hardsigmoid,
    nn.Hardtanh,
    nn.Sigmoid,
    nn.Tanh,
    nn.Softplus,
    nn.Dropout,
    nn.Dropout2d,
)

# block class (module, name) -> (residual branch in order, shortcut, after the sum)
_BLOCKS: dict[tuple[str, str], tuple[tuple[str, ...], str, tuple[str, ...]]] = {
    ("torchvision.models.resnet", "BasicBlock"): (
        ("conv1", "bn1", "relu", "conv2", "bn2"),
        "downsample",
        ("relu",),
    ),
    ("torchvision.models.resnet", "Bottleneck"): (
        ("conv1", "bn1", "relu", "conv2", "bn2", "relu", "conv3", "bn3"),
        "downsample",
        ("relu",),
    ),
    ("timm.models.resnet", "BasicBlock"): (
        ("conv1", "bn1", "drop_block", "act1", "aa", "conv2", "bn2", "se", "drop_path"),
        "downsample",
        ("act2",),
    ),
    ("timm.models.resnet", "Bottleneck"): (
        (
            "conv1",
            "bn1",
            "act1",
            "conv2",
            "bn2",
            "drop_block",
            "act2",
            "aa",
            "conv3",
            "bn3",
            "se",
            "drop_path",
        ),
        "downsample",
        ("act3",),
    ),
}
# model class -> (stem in order, stages in order, head: left alone)
_ROOTS: dict[tuple[str, str], tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    ("torchvision.models.resnet", "ResNet"): (
        ("conv1", "bn1", "relu", "maxpool"),
        ("layer1", "layer2", "layer3", "layer4"),
        ("avgpool", "fc"),
    ),
    ("timm.models.resnet", "ResNet"): (
        ("conv1", "bn1", "act1", "maxpool"),
        ("layer1", "layer2", "layer3", "layer4"),
        ("global_pool", "fc"),
    ),
}
_GATES: dict[tuple[str, str], str] = {
    ("timm.layers.squeeze_excite", "SEModule"): "se",
    ("timm.layers.squeeze_excite", "EffectiveSEModule"): "ese",
    ("timm.layers.eca", "EcaModule"): "eca",
}
_SUPPORTED = (
    "dilate supports torchvision ResNet/ResNeXt/Wide-ResNet and timm ResNet-family models "
    "(BasicBlock/Bottleneck, -D average-pool shortcuts, SE/ECA gates) built of torch or padkit "
    "convs and pools"
)


def _known(table: dict[tuple[str, str], Any]) -> dict[type, Any]:
    found: dict[type, Any] = {}
    for (module_name, name), value in table.items():
        for cls in _classes(module_name, name):
            found[cls] = value
    return found


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


_State = tuple[tuple[int, ...], tuple[int, ...]]  # (actual stride, lattice factor) per axis


class _Dilation:
    """One walk of a ResNet in data-flow order, tracking the actual stride and the a-trous
    lattice factor per axis, and planning the replacement of every layer they affect."""

    def __init__(self, root: nn.Module, output_stride: int | None, gates: str) -> None:
        self.root = root
        self.output_stride = output_stride
        self.gates = gates
        self.blocks = _known(_BLOCKS)
        self.gate_kinds = _known(_GATES)
        timm_pointwise = _classes("timm.layers.drop", "DropPath", "DropBlock2d")
        self.pointwise = (*_POINTWISE, *timm_pointwise)
        self.by_id = _paths_by_id(root)
        self.points: list[int] = []
        self.plans: dict[int, tuple[nn.Module, Change]] = {}
        self.states: dict[int, _State] = {}
        self.outputs: dict[str, int] = {}
        self.dense_gates: list[str] = []

    def refuse(self, path: str, module: nn.Module, why: str) -> SurgeryError:
        return SurgeryError(
            f"dilate(): cannot handle {path or '<root>'!r} ({type(module).__name__}): {why}. "
            f"{_SUPPORTED}"
        )

    def run(self) -> _State:
        spec = _known(_ROOTS).get(type(self.root))
        if spec is None:
            raise self.refuse("", self.root, "not a torchvision or timm ResNet")
        stem, stages, head = spec
        for name in self.root._modules:
            if name not in (*stem, *stages, *head):
                raise self.refuse(
                    name, self.root._modules[name] or nn.Identity(), "unexpected child"
                )
        st: _State = ((1, 1), (1, 1))
        for name in (*stem, *stages):
            st = self.visit(name, self.root._modules.get(name), st)
            self.outputs[name] = st[0][0]
        return st

    def visit(self, path: str, module: nn.Module | None, st: _State) -> _State:
        if module is None:
            return st
        t = type(module)
        if t is nn.Sequential:
            for name, child in module._modules.items():
                st = self.visit(_join(path, name), child, st)
            return st
        block = self.blocks.get(t)
        if block is not None:
            return self.block(path, module, block, st)
        layer = _layer(module)
        if layer is not None:
            return self.spatial(path, module, layer, st)
        if t in self.pointwise:
            m: Any = module
            if isinstance(module, nn.BatchNorm2d) and m.running_mean is None:
                raise self.refuse(path, module, "it normalises with batch statistics")
            return st
        if t.__module__.startswith("timm.layers.activations"):
            return st
        kind = self.gate_kinds.get(t)
        if kind is not None:
            self.gate(path, module, kind, st)
            return st
        if t in _timm_same_pools() or t in _timm_same_convs():
            why = "a timm 'same' layer pads per input size"
            if t.__name__ == "AvgPool2dSame":
                why += (
                    " (this is timm's own dilated average downsample, which is not exact: "
                    "conventions T19); build the model at output stride 32 and dilate that"
                )
            raise self.refuse(path, module, why)
        raise self.refuse(path, module, "not a conv, pool, pointwise layer or known gate")

    def block(
        self,
        path: str,
        block: nn.Module,
        spec: tuple[tuple[str, ...], str, tuple[str, ...]],
        st: _State,
    ) -> _State:
        main, shortcut, tail = spec
        for name, child in block._modules.items():
            if name not in (*main, shortcut, *tail):
                raise self.refuse(_join(path, name), child or nn.Identity(), "unexpected child")
        out = st
        for name in main:
            out = self.visit(_join(path, name), block._modules.get(name), out)
        short = self.visit(_join(path, shortcut), block._modules.get(shortcut), st)
        if short != out:
            raise self.refuse(path, block, "its residual branch and shortcut end at other strides")
        for name in tail:
            self.visit(_join(path, name), block._modules.get(name), out)
        return out

    def spatial(self, path: str, module: nn.Module, layer: _Layer, st: _State) -> _State:
        actual, factor = st
        if layer.nd != len(actual):
            raise self.refuse(path, module, f"a {layer.nd}-d layer in a {len(actual)}-d backbone")
        limit = self.output_stride
        convert = tuple(
            s > 1 and limit is not None and a * s > limit for a, s in zip(actual, layer.stride)
        )
        new_actual = tuple(a if c else a * s for a, s, c in zip(actual, layer.stride, convert))
        new_factor = tuple(f * s if c else f for f, s, c in zip(factor, layer.stride, convert))
        if limit is None:
            self.points.extend(a for a, s in zip(new_actual[:1], layer.stride[:1]) if s > 1)
        if not any(convert) and all(f == 1 for f in factor):
            return new_actual, new_factor
        seen = self.states.get(id(module))
        if seen is not None:
            if seen != st:
                raise self.refuse(path, module, "it is shared by places of other strides")
            return new_actual, new_factor
        self.states[id(module)] = st
        new_layer = self.transform(path, module, layer, factor, convert)
        if new_layer == layer:
            return new_actual, new_factor  # a 1x1 stride-1 layer: the same on any grid
        new = _build(new_layer, module)
        what = tuple(
            name
            for name, a, b in (
                ("stride", layer.stride, new_layer.stride),
                ("dilation", layer.dilation, new_layer.dilation),
                ("padding", layer.static_pairs(), new_layer.static_pairs()),
                ("ceil_mode", layer.ceil_mode, new_layer.ceil_mode),
            )
            if a != b
        )
        detail = f"on the lattice of factor {factor}"
        if any(convert):
            detail = f"stride -> dilation: lattice factor {factor} -> {new_factor}"
        self.plans[id(module)] = (
            new,
            Change(path, _brief(module, layer), _brief(new, new_layer), what, False, detail),
        )
        return new_actual, new_factor

    def transform(
        self,
        path: str,
        module: nn.Module,
        layer: _Layer,
        factor: tuple[int, ...],
        convert: tuple[bool, ...],
    ) -> _Layer:
        """The layer on the dilated grid: a stride that becomes 1 multiplies the later
        factors; each pad scales by the factor; a ceil-mode pool's overhang of up to
        ``s-1`` cells becomes explicit end padding (excluded or never winning)."""
        pairs = layer.static_pairs()
        if pairs is None:
            raise self.refuse(path, module, f"padding {layer.padding.describe()} is not static")
        if layer.kind == "conv" and layer.padding_mode != "zeros":
            raise self.refuse(
                path, module, f"padding_mode={layer.padding_mode!r} does not commute with dilation"
            )
        if layer.return_indices:
            raise self.refuse(path, module, "return_indices would index the dilated grid")
        new_pairs = []
        for (lo, hi), k, s, d, f, c in zip(
            pairs, layer.kernel, layer.stride, layer.dilation, factor, convert
        ):
            extra = 0
            if layer.kind != "conv" and layer.ceil_mode:
                k_eff = d * (k - 1) + 1
                if hi + s - 1 >= k_eff:
                    raise self.refuse(
                        path, module, "ceil_mode may drop a window that starts in the padding"
                    )
                if c:
                    if (
                        layer.kind == "avg"
                        and layer.count_include_pad
                        and layer.divisor_override is None
                    ):
                        raise self.refuse(
                            path,
                            module,
                            "ceil_mode with count_include_pad=True leaves its overhang "
                            "uncounted, which no padding reproduces",
                        )
                    extra = s - 1
            new_pairs.append((f * lo, f * (hi + extra)))
        stride = tuple(1 if c else s for s, c in zip(layer.stride, convert))
        return replace(
            layer,
            stride=stride,
            dilation=tuple(
                d * f if k > 1 else d for k, d, f in zip(layer.kernel, layer.dilation, factor)
            ),
            padding=Padding(tuple(new_pairs)),
            ceil_mode=layer.ceil_mode and any(s > 1 for s in stride),
        )

    def gate(self, path: str, module: nn.Module, kind: str, st: _State) -> None:
        factor = st[1]
        if all(f == 1 for f in factor):
            return
        if self.gates == "dense":
            self.dense_gates.append(path)
            return
        seen = self.states.get(id(module))
        if seen is not None:
            if seen != st:
                raise self.refuse(path, module, "it is shared by places of other strides")
            return
        self.states[id(module)] = st
        new = LatticeGate(module, kind, factor)
        self.plans[id(module)] = (
            new,
            Change(
                path,
                f"{type(module).__name__} (pools the whole map)",
                f"LatticeGate(lattice={factor})",
                ("global pool",),
                False,
                "the gate pools the a-trous lattice, as the original pools its map",
            ),
        )


_GATE_MODES = ("lattice", "dense")


def dilate(
    model: nn.Module,
    output_stride: int,
    *,
    gates: str = "lattice",
    inplace: bool = False,
) -> tuple[nn.Module, SurgeryReport]:
    """Trade the later strides of a ResNet for dilation, exactly (the a-trous identity).

    Once the actual stride reaches ``output_stride``, each later stride ``s`` becomes 1
    and multiplies the lattice factor ``f`` of everything after it; every later conv and
    pool gets dilation ``d*f`` and pads ``(f*lo, f*hi)`` (a ceil-mode pool's overhang
    becomes ``f*(s-1)`` explicit end padding, excluded from averages). ResNet-D's
    average-pool shortcut, ``AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False)``,
    thus becomes a stride-1 pool with pads ``(0, 1)`` at the first dilated stage and pads
    ``(0, 2)`` with dilation 2 one stage deeper. In eval mode the dilated model's last
    feature map subsampled at ``[..., ::r, ::r]`` (``r`` = old / new output stride)
    equals the original's.

    Squeeze-excitation gates (timm SE/ESE/ECA) in dilated stages become
    :class:`LatticeGate` modules that pool the lattice (``gates="lattice"``, exact);
    ``gates="dense"`` keeps them pooling the whole dense map, as timm's own
    ``output_stride`` does (not exact). No weight is touched and the ``state_dict`` keys
    and shapes stay the same.

    Args:
        model: a torchvision ResNet/ResNeXt/Wide-ResNet or a timm ResNet-family model.
        output_stride: the new output stride: a stride the model reaches (1, 2, 4, 8, 16
            for a ResNet), at most its current one.
        gates: ``"lattice"`` or ``"dense"``.
        inplace: modify ``model`` itself instead of a deep copy.

    Returns:
        ``(model, report)``; the report lists every changed module.

    Raises:
        SurgeryError: naming the first module it cannot handle, or for an output stride
            the model cannot reach.

    Example:
        >>> from torchvision.models import resnet18
        >>> net = resnet18().eval()
        >>> os8, report = dilate(net, 8)
        >>> os8.layer4[0].conv1.dilation, os8.layer4[0].conv1.padding
        ((2, 2), (2, 2))
        >>> x = torch.randn(1, 3, 64, 64)
        >>> body = lambda m: torch.nn.Sequential(*list(m.children())[:-2])
        >>> bool((body(os8)(x)[..., ::4, ::4] - body(net)(x)).abs().max() < 1e-4)
        True
    """
    _check_model(model, "dilate")
    _check_bool(inplace, "inplace", "dilate")
    if isinstance(output_stride, bool) or not isinstance(output_stride, int):
        raise TypeError(
            f"dilate(): output_stride must be an int (8 or 16 for a ResNet), got "
            f"{type(output_stride).__name__} ({output_stride!r})"
        )
    if not isinstance(gates, str) or gates not in _GATE_MODES:
        raise SurgeryError(
            f"dilate(): gates must be one of {', '.join(map(repr, _GATE_MODES))}, got {gates!r}"
        )
    dry = _Dilation(model, None, gates)
    final = dry.run()[0]
    reachable = sorted({1, *dry.points})
    if output_stride not in reachable:
        raise SurgeryError(
            f"dilate(): output_stride={output_stride!r} is not a stride this model reaches; "
            f"accepted: {reachable} (its current output stride is {final[0]})"
        )
    out = model if inplace else copy.deepcopy(model)
    walk = _Dilation(out, output_stride, gates)
    reached = walk.run()[0]
    if any(a != output_stride for a in reached):  # pragma: no cover - a walk invariant
        raise SurgeryError(f"dilate(): reached output stride {reached}, not {output_stride}")
    report = SurgeryReport("dilate")
    for key, (new, change) in walk.plans.items():
        _replace(out, walk.by_id[key], new)
        report.changes.append(change)
    order = {p: i for i, (p, _) in enumerate(out.named_modules(remove_duplicate=False))}
    report.changes.sort(key=lambda c: order.get(c.path, len(order)))
    info = getattr(out, "feature_info", None)
    if isinstance(info, list):
        for entry in info:
            if isinstance(entry, dict) and entry.get("module") in walk.outputs:
                entry["reduction"] = walk.outputs[entry["module"]]
    if walk.dense_gates:
        report.notes.append(
            f"gates='dense': {len(walk.dense_gates)} gate(s) pool the dense map "
            f"({', '.join(walk.dense_gates[:3])}{', ...' if len(walk.dense_gates) > 3 else ''}); "
            "the identity is approximate"
        )
    if walk.plans:
        report.notes.append(
            "the classifier head pools the whole dense map: the identity holds for the "
            "last feature map, and for BatchNorm in eval mode"
        )
    return out, report
