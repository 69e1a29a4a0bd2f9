"""The a-trous lattice of a dilated model: reading it (``x[..., ::f, ::f]``, fx-wrapped; the
gate whose global pool reads it; the handlers that make a pad or a global read in code work
on it), and which computations keep it (position-wise ops, layout, reductions)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from ..recognise import REDUCTIONS
from ..spec import _tuple_of
from ._common import SurgeryError, _Layer
from ._probe import NOT_HANDLED, Pairs, lattice_pairs


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


_GATES: dict[tuple[str, str], str] = {
    ("timm.layers.squeeze_excite", "SEModule"): "se",
    ("timm.layers.squeeze_excite", "EffectiveSEModule"): "ese",
    ("timm.layers.eca", "EcaModule"): "eca",
}
_GATE_MODES = ("lattice", "dense")

# ----------------------------------------------------------------------------- what mixes positions

#: position-wise besides torch's pointwise-tagged ops (in eval mode dropout is the identity)
_POSITIONWISE = frozenset(
    {
        "hardswish",
        "prelu",
        "rrelu",
        "selu",
        "celu",
        "softsign",
        "tanhshrink",
        "logsigmoid",
        "hardshrink",
        "softshrink",
        "dropout",
        "dropout1d",
        "dropout2d",
        "dropout3d",
        "alpha_dropout",
        "feature_alpha_dropout",
        "bernoulli",
        "linear",  # on a channels-last map: mixes the last dim, checked not to be spatial
    }
)
#: layout and copies: position-wise as long as every spatial axis keeps its sizes
_LAYOUT = frozenset(
    {
        "reshape",
        "view",
        "view_as",
        "reshape_as",
        "permute",
        "transpose",
        "movedim",
        "flatten",
        "unflatten",
        "unsqueeze",
        "squeeze",
        "expand",
        "expand_as",
        "chunk",
        "split",
        "tensor_split",
        "unbind",
        "cat",
        "concat",
        "concatenate",
        "stack",
        "contiguous",
        "clone",
        "detach",
        "to",
        "float",
        "double",
        "half",
        "bfloat16",
        "type",
        "type_as",
        "getitem",
        "new_empty",
        "new_zeros",
        "new_ones",
        "new_full",
        "empty_like",
        "zeros_like",
        "ones_like",
        "full_like",
        "requires_grad",
    }
)
#: reductions that read the lattice exactly once their spatial input is subsampled
_LATTICE_READS = REDUCTIONS | frozenset(
    {
        "adaptive_avg_pool1d",
        "adaptive_avg_pool2d",
        "adaptive_avg_pool3d",
        "adaptive_max_pool1d",
        "adaptive_max_pool2d",
        "adaptive_max_pool3d",
    }
)
_DUNDER = {"truediv": "div", "floordiv": "floor_divide", "mod": "remainder", "and": "bitwise_and"}


def _base(name: str) -> str:
    """``'__radd__'`` -> ``'add'``, ``'mul_'`` -> ``'mul'``, ``'_adaptive_max_pool2d'``..."""
    if name.startswith("__") and name.endswith("__"):
        name = name[2:-2]
        if name not in ("getitem",) and name[:1] in ("r", "i") and name[1:] in _DUNDER_NAMES:
            name = name[1:]
        name = _DUNDER.get(name, name)
    name = name.strip("_")
    if name.endswith("_with_indices"):
        name = name[: -len("_with_indices")]
    return name


_DUNDER_NAMES = frozenset(
    {"add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "matmul"}
)


@functools.cache
def _pointwise(name: str) -> bool:
    if name in _POSITIONWISE:
        return True
    packet = getattr(torch.ops.aten, name, None)
    if packet is None or not hasattr(packet, "overloads"):
        return False
    try:
        return any(torch.Tag.pointwise in getattr(packet, o).tags for o in packet.overloads())
    except (AttributeError, RuntimeError):  # pragma: no cover - an odd registration
        return False


def _lattice(x: Tensor, spec: tuple[tuple[int, int], ...]) -> Tensor:
    """``x`` subsampled at ``::f`` along each ``(dim, f)`` of ``spec``: the a-trous lattice."""
    index: list[Any] = [slice(None)] * x.dim()
    for dim, f in spec:
        index[dim] = slice(None, None, f)
    return x[tuple(index)]


# torch.fx records the lattice read as one call, so that a dilated model (whose global reads
# call it) can be traced again, e.g. by torchvision's create_feature_extractor
torch.fx.wrap("_lattice")


class _LatticePad:
    """A replacement for a pad call in code: the pads of ``rules`` (for ``op``) on the
    lattice of ``factor``, from the size of the call's own input (a module-level class, so
    a module rewired with it pickles). On an axis where ``restrided`` (the reader's stride
    became dilation) a TF 'same' rule keeps the dense length (:func:`lattice_pairs`);
    ``more`` adds end cells that no lattice output reads (dilate's join check). For a pad
    written as ``torch.cat`` of the input with constant pieces, ``piece`` is the input's
    index among the pieces (the whole ``cat`` becomes the pad)."""

    def __init__(
        self,
        op: _Layer,
        rules: tuple[str | tuple[int, int], ...],
        factor: tuple[int, ...],
        value: float,
        restrided: tuple[bool, ...] | None = None,
        more: tuple[int, ...] | None = None,
        piece: int | None = None,
    ) -> None:
        self.op, self.rules, self.factor, self.value = op, rules, factor, value
        self.piece = piece
        self.restrided = restrided if restrided is not None else (False,) * op.nd
        self.more = more if more is not None else (0,) * op.nd

    def pairs(self, sizes: Sequence[int]) -> Pairs:
        """The pads of each spatial axis for an input of spatial size ``sizes``."""
        restrided = getattr(self, "restrided", (False,) * self.op.nd)
        more = getattr(self, "more", (0,) * self.op.nd)
        return tuple(
            (lo, hi + more[a])
            for a in range(self.op.nd)
            for lo, hi in (
                lattice_pairs(self.rules[a], self.op, a, sizes[a], self.factor[a], restrided[a]),
            )
        )

    def __call__(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        piece = getattr(self, "piece", None)
        if piece is not None:
            x = (args[0] if args else kwargs["tensors"])[piece]
        else:
            x = args[0] if args else kwargs["input"]
        pairs = self.pairs(tuple(x.shape[-self.op.nd :]))
        flat = [p for lo_hi in reversed(pairs) for p in lo_hi]
        return torch.nn.functional.pad(x, flat, "constant", self.value)


class _LatticeReads:
    """A :func:`rewired` handler whose listed calls (``(function name, ordinal) -> spec``,
    ``_base`` names) read the lattice ``spec`` of their input (a module-level class, so a
    module rewired with it pickles)."""

    def __init__(self, table: dict[tuple[str, int], tuple[tuple[int, int], ...]]) -> None:
        self.table = dict(table)

    def __call__(self, call: str, k: int, func: Any, args: Any, kwargs: Any) -> Any:
        spec = self.table.get((_base(call), k))
        if spec is None:
            return NOT_HANDLED
        if args:
            return func(_lattice(args[0], spec), *args[1:], **kwargs)
        kwargs = dict(kwargs)
        kwargs["input"] = _lattice(kwargs["input"], spec)
        return func(**kwargs)


def _reads_lattice(module: nn.Module) -> bool:
    """Whether ``module`` is a traced copy made by an earlier :func:`dilate`."""
    graph = getattr(module, "graph", None)
    nodes = getattr(graph, "nodes", ())
    return any(getattr(n, "target", None) is _lattice for n in nodes)
