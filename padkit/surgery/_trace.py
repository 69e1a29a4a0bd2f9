"""dilate's stride tracer: every module and tensor function a forward calls, with strides.

The model runs twice, in eval mode and without gradients, on small random inputs of
spatial size ``PROBE`` and ``PROBE + STEP`` (its modes are restored afterwards). The dims
of a tensor whose sizes differ between the two runs are its spatial axes, and
``STEP / (difference)`` is the stride of that axis relative to the input: exact for any
conv or pool whose strides divide ``STEP``, whatever its padding or ceil mode. Nothing is
matched by class: a module is known by what it calls.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from ._common import SurgeryError, _layer
from ._probe import call_op, call_pad

PROBE = 64
STEP = 256

Shape = tuple[int, ...]


@dataclass
class Event:
    """One module call or one tensor function called by a module's own code."""

    kind: str  # "module" or "function"
    path: str  # the module, or for a function the innermost module running it
    call: int  # which call of that module (0 for the first)
    name: str  # the class name, or the function name
    info: dict[str, Any] = field(default_factory=dict)
    ins: list[list[Shape]] = field(default_factory=list)  # per run
    outs: list[list[Shape]] = field(default_factory=list)  # per run


def _tensors(value: Any) -> Iterator[Tensor]:
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


def _shapes(value: Any) -> list[Shape]:
    return [tuple(t.shape) for t in _tensors(value)]


def _name(func: Any) -> str:
    name = getattr(func, "__name__", None)
    if name == "__get__":  # a property such as Tensor.shape
        owner = getattr(func, "__self__", None)
        name = f"{getattr(owner, '__name__', 'property')}.__get__"
    return str(name) if name is not None else type(func).__name__


#: reductions over tensor axes (which may be spatial)
REDUCTIONS = frozenset(
    {
        "mean",
        "sum",
        "nansum",
        "nanmean",
        "amax",
        "amin",
        "max",
        "min",
        "std",
        "var",
        "logsumexp",
        "norm",
        "prod",
        "argmax",
        "argmin",
    }
)
_REDUCING = REDUCTIONS | {"softmax", "log_softmax", "normalize"}


def _dims(value: Any, ndim: int) -> frozenset[int] | None:
    if isinstance(value, int):
        return frozenset({value % ndim})
    if isinstance(value, (tuple, list)) and all(isinstance(v, int) for v in value):
        return frozenset(v % ndim for v in value)
    return None


def _describe(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments that decide whether a function mixes positions."""
    first = args[0] if args else kwargs.get("input")
    if not isinstance(first, Tensor) or first.dim() == 0:
        return {}
    nd = first.dim()
    base = name.rstrip("_")
    if base in _REDUCING:
        dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
        if base == "normalize":
            dim = kwargs.get("dim", args[2] if len(args) > 2 else 1)
        if isinstance(dim, Tensor):
            return {"elementwise": True}  # torch.max(a, b) and the like
        if dim is None:
            return {"reduce": frozenset(range(nd))}
        dims = _dims(dim, nd)
        return {} if dims is None else {"reduce": dims}
    if base.startswith(("adaptive_avg_pool", "adaptive_max_pool")):
        k = int(base[-2])
        return {"reduce": frozenset(range(nd - k, nd)), "adaptive": True}
    if base == "batch_norm":
        training = kwargs.get("training", args[5] if len(args) > 5 else False)
        return {"training": bool(training)}
    op = call_op(name, args, kwargs)
    if op is not None:
        return {"op": op}
    pad = call_pad(name, args, kwargs)
    if pad is not None:
        return {"pad": pad}
    if base == "layer_norm":
        shape = kwargs.get("normalized_shape", args[1] if len(args) > 1 else None)
        k = len(shape) if isinstance(shape, (tuple, list, torch.Size)) else 1
        return {"reduce": frozenset(range(nd - k, nd)), "norm": True}
    return {}


class _Recorder(TorchFunctionMode):
    def __init__(self, opaque: Callable[[nn.Module], bool]) -> None:
        super().__init__()
        self.opaque = opaque
        self.events: list[Event] = []
        self.stack: list[tuple[str, int, bool]] = []  # (path, call, opaque)
        self.calls: dict[str, int] = {}
        self.made: dict[int, tuple[int, Tensor]] = {}  # id of a pad's output -> (event, it)
        self.uses: dict[int, int] = {}  # pad event -> calls that read its output

    def __torch_function__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.stack and not self.stack[-1][2]:
            path, call, _ = self.stack[-1]
            ins = _shapes((args, kwargs))
            if ins:
                name = _name(func)
                event = Event("function", path, call, name, _describe(name, args, kwargs))
                event.ins.append(ins)
                event.outs.append(_shapes(out))
                self._link(event, args[0] if args else kwargs.get("input"))
                if event.outs[0]:  # a size read is no use of the numbers
                    self._count((args, kwargs))
                if "pad" in event.info and isinstance(out, Tensor):
                    self.made[id(out)] = (len(self.events), out)
                self.events.append(event)
        return out

    def _link(self, event: Event, first: Any) -> None:
        """``info["src"]``: the index of the pad event whose output is this call's input."""
        if isinstance(first, Tensor):
            made = self.made.get(id(first))
            if made is not None and made[1] is first:
                event.info["src"] = made[0]

    def _count(self, value: Any) -> None:
        """Count a read of every pad output among ``value``'s tensors."""
        for t in _tensors(value):
            made = self.made.get(id(t))
            if made is not None and made[1] is t:
                self.uses[made[0]] = self.uses.get(made[0], 0) + 1

    def hooks(self, root: nn.Module) -> list[Any]:
        handles = []
        for path, module in root.named_modules():
            handles.append(module.register_forward_pre_hook(self._pre(path, module)))
            handles.append(module.register_forward_hook(self._post(), always_call=True))
        return handles

    def _pre(self, path: str, module: nn.Module) -> Callable[..., None]:
        def pre(_m: nn.Module, args: tuple[Any, ...]) -> None:
            inside = bool(self.stack) and self.stack[-1][2]
            call = self.calls.get(path, 0)
            self.calls[path] = call + 1
            self.stack.append((path, call, inside or self.opaque(module)))
            if inside:
                self._open.append(None)
                return
            event = Event("module", path, call, type(module).__name__)
            event.ins.append(_shapes(args))
            self._link(event, args[0] if args else None)
            if self.opaque(module):
                self._count(args)
            event.outs.append([])
            self.events.append(event)
            self._open.append(event)

        return pre

    def _post(self) -> Callable[..., None]:
        def post(_m: nn.Module, _args: tuple[Any, ...], out: Any) -> None:
            self.stack.pop()
            event = self._open.pop()
            if event is not None:
                event.outs[-1] = _shapes(out)

        return post

    _open: list[Event | None]


def _probe(shape: Shape, extra: int, like: Tensor | None) -> Tensor:
    grown = (*shape[:2], *(n + extra for n in shape[2:]))
    if like is None:
        return torch.randn(grown, generator=torch.Generator().manual_seed(0))
    g = torch.Generator(like.device).manual_seed(0)
    return torch.randn(grown, generator=g, device=like.device, dtype=like.dtype)


def record(
    model: nn.Module,
    shape: Shape,
    opaque: Callable[[nn.Module], bool],
    like: Tensor | None = None,
) -> list[Event]:
    """Run ``model`` on a random input of ``shape`` and on one ``STEP`` larger per spatial
    axis (on ``like``'s device and dtype); return the merged events (``ins``/``outs`` hold
    both runs' shapes). Nothing is recorded inside a module for which ``opaque`` is true,
    except its call. Each pad event's ``info["uses"]`` counts the calls that read its
    output in the first run (size reads excepted)."""
    runs: list[list[Event]] = []
    modes = [(m, m.training) for m in model.modules()]
    try:
        model.eval()
        for extra in (0, STEP):
            rec = _Recorder(opaque)
            rec._open = []
            handles = rec.hooks(model)
            x = _probe(shape, extra, like)
            try:
                with torch.no_grad(), rec:
                    model(x)
            except SurgeryError:
                raise
            except Exception as exc:
                raise SurgeryError(
                    f"the model does not run on a probe of shape {tuple(x.shape)} "
                    f"({type(exc).__name__}: {exc}); padkit traces its strides that way"
                ) from exc
            finally:
                for h in handles:
                    h.remove()
            for i, n in rec.uses.items():
                rec.events[i].info["uses"] = n
            runs.append(rec.events)
    finally:
        for m, training in modes:
            m.training = training
    first, second = runs
    if [(e.kind, e.path, e.name) for e in first] != [(e.kind, e.path, e.name) for e in second]:
        raise SurgeryError(
            "the model calls other modules or functions at other input sizes; "
            "its strides cannot be traced"
        )
    for a, b in zip(first, second):
        if len(a.ins[0]) != len(b.ins[0]) or len(a.outs[0]) != len(b.outs[0]):
            raise SurgeryError(
                f"{a.path or '<root>'!r} passes other tensors at other input sizes; "
                "its strides cannot be traced"
            )
        a.ins.append(b.ins[0])
        a.outs.append(b.outs[0])
    return first


def probe_like(model: nn.Module, fname: str) -> tuple[tuple[int, ...], Tensor]:
    """(1, channels, PROBE, ...) from the first conv in the model, and its weight (for the
    device and dtype of the probe)."""
    for module in model.modules():
        m: Any = module
        if isinstance(module, nn.modules.conv._ConvNd) or _layer(module) is not None:
            channels = getattr(m, "in_channels", None)
            weight = getattr(m, "weight", None)
            if isinstance(channels, int) and isinstance(weight, Tensor):
                nd = weight.dim() - 2
                return (1, channels, *([PROBE] * nd)), weight
    raise SurgeryError(
        f"{fname}(): {type(model).__name__} holds no convolution to take the input's channels "
        f"from; {fname} works on convolutional networks"
    )


def strides(first: Shape, second: Shape) -> dict[int, Fraction]:
    """The spatial dims of one tensor (those that grew) and their strides."""
    return {d: Fraction(STEP, b - a) for d, (a, b) in enumerate(zip(first, second)) if a != b}
