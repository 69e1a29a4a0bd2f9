"""surgery.fuse_pads: the op before a padded conv writes straight into its padded input.

A conv with per-side pads that torch cannot take (TF ``"same"`` at stride 2, causal
pads ``(2d, 0)``) pays for a zero-padded copy of its input on every call, or computes
outputs it throws away. Inside a model that copy is avoidable when the op that produces
the conv's input is elementwise (a ReLU, an addition, ...): that op can write its result
into the interior of a buffer whose border is already zero, and the conv then reads the
buffer with no padding at all. The numbers are those of ``F.pad`` followed by the
unpadded conv, the explicit reference of every padkit plan.

:func:`fuse_pads` finds such producer -> conv pairs in a model's computation (an
``torch.fx`` trace: the graph, not a list of class names), rewrites them, and returns a
``torch.fx.GraphModule`` over a copy of the model with the same ``state_dict`` keys.
Every other reader of the producer's output reads the buffer's interior (a view). The
rewritten pair decides on every call: it writes into a buffer only where the conv's plan
at that input size would copy or over-compute, and only in inference (no input needs a
gradient, no autocast, not under ``torch.compile``); otherwise it runs the two ops as
they were. With ``measure=True`` it times the model before and after on the example
inputs and keeps whichever was faster.
"""

from __future__ import annotations

import copy
import operator
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, fx, nn
from torch.fx.passes.shape_prop import ShapeProp
from torch.utils._pytree import tree_leaves

from .. import nn as PN
from ..nn import _hashable
from ..plan import _crop_layout, _surplus_ok
from ._common import Change, Skip, SurgeryReport, _brief, _check_bool, _check_model

__all__ = ["fuse_pads"]

_nn: Any = torch._C._nn  # the activations' out= forms

#: the conv plans that copy the input (``residual_pad``, ``explicit``): a zero-bordered
#: buffer avoids the copy. ``crop`` plans (causal convs without dilation, ``causal_block``
#: strided convs) and ``zero_extend`` plans (depthwise convs) copy nothing and stay: in
#: whole models (a codec encoder, tf_efficientnet_b0) the buffer did not beat them.
_COSTLY = ("residual_pad", "explicit")

#: the buffer is used only where each contiguous run of its interior holds at least this
#: many elements: an elementwise op writing rows of 56-112 elements into a strided view
#: ran up to 2.3x slower than into a dense tensor (SiLU, NCHW), which ate the saved copy
_MIN_RUN = 1024

Writer = Callable[[Any, tuple[Any, ...], dict[str, Any], Tensor], object]


def _arg(args: tuple[Any, ...], kwargs: dict[str, Any], i: int, name: str, default: Any) -> Any:
    return args[i] if len(args) > i else kwargs.get(name, default)


def _relu(_: Any, a: tuple[Any, ...], k: dict[str, Any], out: Tensor) -> object:
    return torch.clamp_min(a[0], 0, out=out)


def _hardtanh(lo: float, hi: float) -> Writer:
    def write(_: Any, a: tuple[Any, ...], k: dict[str, Any], out: Tensor) -> object:
        return _nn.hardtanh(
            a[0], _arg(a, k, 1, "min_val", lo), _arg(a, k, 2, "max_val", hi), out=out
        )

    return write


def _leaky(_: Any, a: tuple[Any, ...], k: dict[str, Any], out: Tensor) -> object:
    return _nn.leaky_relu(a[0], _arg(a, k, 1, "negative_slope", 0.01), out=out)


def _elu(_: Any, a: tuple[Any, ...], k: dict[str, Any], out: Tensor) -> object:
    return _nn.elu(a[0], _arg(a, k, 1, "alpha", 1.0), 1, 1, out=out)


def _gelu_into(x: Tensor, approximate: str, out: Tensor) -> object:
    if approximate == "none":  # torch's erf GELU writes wrong values into strided out=
        return out.copy_(F.gelu(x))
    return _nn.gelu(x, approximate=approximate, out=out)


def _gelu(_: Any, a: tuple[Any, ...], k: dict[str, Any], out: Tensor) -> object:
    return _gelu_into(a[0], k.get("approximate", "none"), out)


def _unary(fn: Callable[..., object]) -> Writer:
    def write(_: Any, a: tuple[Any, ...], k: dict[str, Any], out: Tensor) -> object:
        return fn(a[0], out=out)

    return write


def _binary(fn: Callable[..., object], with_alpha: bool = False) -> Writer:
    def write(_: Any, a: tuple[Any, ...], k: dict[str, Any], out: Tensor) -> object:
        extra = {"alpha": k["alpha"]} if with_alpha and "alpha" in k else {}
        return fn(a[0], a[1], **extra, out=out)

    return write


def _module_writer(kind: type[nn.Module]) -> Writer:
    def write(m: Any, a: tuple[Any, ...], k: dict[str, Any], out: Tensor) -> object:
        x = a[0]
        if kind in (nn.ReLU,):
            return torch.clamp_min(x, 0, out=out)
        if kind in (nn.ReLU6, nn.Hardtanh):
            return _nn.hardtanh(x, m.min_val, m.max_val, out=out)
        if kind is nn.LeakyReLU:
            return _nn.leaky_relu(x, m.negative_slope, out=out)
        if kind is nn.ELU:
            return _nn.elu(x, m.alpha, 1, 1, out=out)
        if kind is nn.GELU:
            return _gelu_into(x, m.approximate, out)
        if kind is nn.SiLU:
            return _nn.silu(x, out=out)
        if kind is nn.Hardswish:
            return _nn.hardswish(x, out=out)
        if kind is nn.Sigmoid:
            return torch.sigmoid(x, out=out)
        return torch.tanh(x, out=out)

    return write


#: graph key -> (call_function target, writer, in-place). The key names the op in the graph.
_FUNCTIONS: dict[str, tuple[Callable[..., Any], Writer, bool]] = {
    "torch.relu": (torch.relu, _relu, False),
    "F.relu": (F.relu, _relu, False),
    "torch.relu_": (torch.relu_, _relu, True),
    "F.relu6": (F.relu6, _hardtanh(0.0, 6.0), False),
    "F.hardtanh": (F.hardtanh, _hardtanh(-1.0, 1.0), False),
    "F.leaky_relu": (F.leaky_relu, _leaky, False),
    "F.elu": (F.elu, _elu, False),
    "F.gelu": (F.gelu, _gelu, False),
    "F.silu": (F.silu, _unary(_nn.silu), False),
    "F.hardswish": (F.hardswish, _unary(_nn.hardswish), False),
    "torch.sigmoid": (torch.sigmoid, _unary(torch.sigmoid), False),
    "torch.tanh": (torch.tanh, _unary(torch.tanh), False),
    "operator.add": (operator.add, _binary(torch.add), False),
    "torch.add": (torch.add, _binary(torch.add, True), False),
    "operator.iadd": (operator.iadd, _binary(torch.add), True),
    "operator.sub": (operator.sub, _binary(torch.sub), False),
    "torch.sub": (torch.sub, _binary(torch.sub, True), False),
    "operator.isub": (operator.isub, _binary(torch.sub), True),
    "operator.mul": (operator.mul, _binary(torch.mul), False),
    "torch.mul": (torch.mul, _binary(torch.mul), False),
    "operator.imul": (operator.imul, _binary(torch.mul), True),
}
_FUNCTION_KEYS: dict[Any, str] = {f: key for key, (f, _, _) in _FUNCTIONS.items()}
#: call_method names -> (writer, in-place)
_METHODS: dict[str, tuple[Writer, bool]] = {
    "relu": (_relu, False),
    "relu_": (_relu, True),
    "sigmoid": (_unary(torch.sigmoid), False),
    "tanh": (_unary(torch.tanh), False),
    "add": (_binary(torch.add, True), False),
    "add_": (_binary(torch.add, True), True),
    "sub": (_binary(torch.sub, True), False),
    "sub_": (_binary(torch.sub, True), True),
    "mul": (_binary(torch.mul), False),
    "mul_": (_binary(torch.mul), True),
}
#: activation modules (exact classes: a subclass may compute something else)
_MODULES: dict[type[nn.Module], Writer] = {
    t: _module_writer(t)
    for t in (
        nn.ReLU,
        nn.ReLU6,
        nn.Hardtanh,
        nn.LeakyReLU,
        nn.ELU,
        nn.GELU,
        nn.SiLU,
        nn.Hardswish,
        nn.Sigmoid,
        nn.Tanh,
    )
}


# ----------------------------------------------------------------------------- runtime


def _run_original(kind: str, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if kind == "module":
        return target(*args, **kwargs)
    if kind == "method":
        return getattr(args[0], target)(*args[1:], **kwargs)
    return _FUNCTIONS[target][0](*args, **kwargs)


def _writer(kind: str, target: Any) -> Writer:
    if kind == "module":
        return _MODULES[type(target)]
    if kind == "method":
        return _METHODS[target][0]
    return _FUNCTIONS[target][1]


def _result_meta(args: tuple[Any, ...]) -> tuple[torch.Size, torch.dtype, Tensor] | None:
    """Shape, dtype and the tensor that sets the layout of an elementwise op's result."""
    x = args[0] if args else None
    if not isinstance(x, Tensor):
        return None
    other = args[1] if len(args) > 1 else None
    if not isinstance(other, Tensor):
        if isinstance(other, (int, float, bool)):
            return x.shape, torch.result_type(x, other), x
        return x.shape, x.dtype, x
    if other.shape == x.shape:
        shape, like = x.shape, x
    else:
        try:
            shape = torch.Size(torch.broadcast_shapes(x.shape, other.shape))  # type: ignore[no-untyped-call]
        except RuntimeError:
            return None
        like = x if x.dim() >= other.dim() else other
    dtype = x.dtype if other.dtype == x.dtype else torch.result_type(x, other)
    return shape, dtype, like


def _inference(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Plain tensors, no gradient needed, no autocast, not compiling: the buffer may be used."""
    if torch.compiler.is_compiling():
        return False
    grad = torch.is_grad_enabled()
    for v in (*args, *kwargs.values()):
        if isinstance(v, Tensor):
            if type(v) is not Tensor or (grad and v.requires_grad):
                return False  # subclasses, fake and functional tensors: the plain ops
            if torch.is_autocast_enabled(v.device.type):
                return False
        elif not isinstance(v, (int, float, bool, str)):
            return False
    return True


Pairs = tuple[tuple[int, int], ...]
#: a ``crop`` layout: native padding, outputs skipped at the start, output size
Crop = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]

#: (input shape, the conv's live attributes) -> what :func:`_copy_facts` says
_FACTS: dict[tuple[Any, ...], tuple[Pairs | None, Crop | None]] = {}


def _copy_facts(conv: Any, shape: torch.Size) -> tuple[Pairs | None, Crop | None]:
    """Where the conv's plan at this input size copies its input: its per-side pads (the
    buffer's border) and the exact ``crop`` layout that avoids the copy (if any); else
    ``(None, None)``. Cached by the conv's live attributes, so mutation is followed."""
    key = (
        tuple(shape),
        _hashable(conv.kernel_size),
        _hashable(conv.stride),
        _hashable(conv.dilation),
        conv.groups,
        conv.in_channels,
        _hashable(conv.padding_mode),
        conv.pad_spec,
    )
    hit = _FACTS.get(key)
    if hit is None:
        hit = _FACTS[key] = _facts(conv, shape)
        if len(_FACTS) > 4096:
            _FACTS.clear()
    return hit


def _facts(conv: Any, shape: torch.Size) -> tuple[Pairs | None, Crop | None]:
    if len(shape) != conv._nd + 2 or conv.padding_mode != "zeros":
        return None, None
    plan = conv.plan(tuple(shape))
    if plan.strategy not in _COSTLY or any(lo < 0 or hi < 0 for lo, hi in plan.pads):
        return None, None
    op = conv._op()
    found = _crop_layout(plan.pads, op.kernel, op.stride, op.dilation, tuple(shape[2:]))
    if found is None or not _surplus_ok(found[2]):
        return plan.pads, None
    return plan.pads, (found[0], found[1], plan.out_size)


def _interior_run(shape: torch.Size, pairs: Pairs, cl: bool) -> int:
    """Elements per contiguous run of the buffer's interior (channels-last: channels
    innermost), i.e. the row length an elementwise op writes at a time."""
    run = int(shape[1]) if cl else 1
    for n, (lo, hi) in zip(reversed(shape[2:]), reversed(pairs)):
        run *= int(n)
        if lo or hi:
            break
    return run


def fused_producer(
    conv: nn.Module,
    kind: str,
    target: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> tuple[Tensor | None, Any]:
    """Run the producer; where it pays, into the interior of a zero-bordered buffer.

    Returns ``(buffer, value)``: ``value`` is what the producer computes (a view of the
    buffer's interior when there is a buffer), ``buffer`` the padded input of ``conv``
    or None.
    """
    meta = _result_meta(args) if _inference(args, kwargs) else None
    pairs = None
    if meta is not None and meta[1].is_floating_point:
        pairs = _copy_facts(conv, meta[0])[0]
    if pairs is None or meta is None:
        return None, _run_original(kind, target, args, kwargs)
    shape, dtype, like = meta
    lead, sizes = tuple(shape[:2]), tuple(shape[2:])
    full = lead + tuple(n + lo + hi for n, (lo, hi) in zip(sizes, pairs))
    cl = {4: torch.channels_last, 5: torch.channels_last_3d}.get(len(full))
    is_cl = cl is not None and like.is_contiguous(memory_format=cl) and not like.is_contiguous()
    if _interior_run(shape, pairs, is_cl) < _MIN_RUN:
        return None, _run_original(kind, target, args, kwargs)
    fmt = cl if is_cl and cl is not None else torch.contiguous_format
    buf = torch.empty(full, dtype=dtype, device=like.device, memory_format=fmt)
    view = buf
    for i, ((lo, hi), n) in enumerate(zip(pairs, sizes)):
        if lo:
            buf.narrow(2 + i, 0, lo).zero_()
        if hi:
            buf.narrow(2 + i, lo + n, hi).zero_()
        view = view.narrow(2 + i, lo, n)
    _writer(kind, target)(target, args, kwargs, view)
    return buf, view


def _training(conv: Any, value: Any) -> bool:
    if not isinstance(value, Tensor) or not torch.is_grad_enabled():
        return False
    if torch.compiler.is_compiling() or type(value) is not Tensor:
        return False
    return bool(value.requires_grad or conv.weight.requires_grad)


def fused_conv(conv: nn.Module, buffer: Tensor | None, value: Any, crop: bool = False) -> Tensor:
    """``conv(value)``: read from ``buffer`` (``value`` padded per side) when there is one; with
    ``crop``, in training, a conv with symmetric padding and a view of the outputs kept."""
    c: Any = conv
    fn = (F.conv1d, F.conv2d, F.conv3d)[c._nd - 1]
    if buffer is not None:
        res: Tensor = fn(buffer, c.weight, c.bias, list(c.stride), 0, list(c.dilation), c.groups)
        return res
    layout = _copy_facts(c, value.shape)[1] if crop and _training(c, value) else None
    if layout is None:
        out: Tensor = conv(value)
        return out
    native, skip, size = layout
    y: Tensor = fn(
        value, c.weight, c.bias, list(c.stride), list(native), list(c.dilation), c.groups
    )
    for i, (start, n) in enumerate(zip(skip, size)):
        if start or y.shape[2 + i] != n:
            y = y.narrow(2 + i, start, n)
    return y


torch.fx.wrap("fused_producer")
torch.fx.wrap("fused_conv")


# ----------------------------------------------------------------------------- rewrite


class _Tracer(fx.Tracer):
    """torch's tracer, with padkit's layers kept as single calls."""

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return isinstance(m, PN._Live) or super().is_leaf_module(m, qualname)


def _producer(gm: fx.GraphModule, node: fx.Node) -> tuple[str, Any, bool] | str:
    """(kind, graph target, in-place) of an elementwise producer, or why it is not one."""
    if _erf_gelu(gm, node):
        return "its input comes from the erf GELU, which torch cannot write into a strided view"
    if node.op == "call_function" and node.target in _FUNCTION_KEYS:
        key = _FUNCTION_KEYS[node.target]
        inplace = _FUNCTIONS[key][2] or bool(node.kwargs.get("inplace", False))
        return "function", key, inplace
    if node.op == "call_method" and node.target in _METHODS:
        return "method", node.target, _METHODS[str(node.target)][1]
    if node.op == "call_module":
        mod = gm.get_submodule(str(node.target))
        if type(mod) in _MODULES:
            return "module", node.target, bool(getattr(mod, "inplace", False))
        return f"its input comes from {type(mod).__name__}, which cannot write into a buffer"
    if node.op == "placeholder":
        return "its input is the model's input"
    return f"its input comes from {node.op} {getattr(node.target, '__name__', node.target)}"


def _erf_gelu(gm: fx.GraphModule, node: fx.Node) -> bool:
    if node.op == "call_function" and node.target is F.gelu:
        return bool(node.kwargs.get("approximate", "none") == "none")
    if node.op == "call_module":
        mod = gm.get_submodule(str(node.target))
        return type(mod) is nn.GELU and mod.approximate == "none"
    return False


def _own_forward(gm: fx.GraphModule, conv_node: fx.Node) -> str | None:
    cls: Any = type(gm.get_submodule(str(conv_node.target)))
    if (cls.forward, cls._conv_forward) != (PN._ConvMixin.forward, PN._ConvMixin._conv_forward):
        return "a subclass with its own forward (it may change the weight or the input)"
    if len(conv_node.args) != 1 or conv_node.kwargs or not isinstance(conv_node.args[0], fx.Node):
        return "called with more than one input"
    return None


def _candidate(
    gm: fx.GraphModule, conv_node: fx.Node, taken: set[fx.Node]
) -> tuple[fx.Node, tuple[str, Any, bool]] | str:
    """The producer node to fuse into ``conv_node``, or why not."""
    prod = conv_node.args[0]
    assert isinstance(prod, fx.Node)  # checked by _own_forward
    what = _producer(gm, prod)
    if isinstance(what, str):
        return what
    if prod in taken:
        return "its producer already writes the padded input of another conv"
    if any(u.op == "output" for u in prod.users):
        return "its input is also an output of the model (a view would be returned)"
    if what[2]:  # in-place: the fused op writes a new buffer and leaves its input alone
        first = prod.args[0] if prod.args else None
        if not isinstance(first, fx.Node) or len(first.users) != 1:
            return "an in-place producer whose input is read elsewhere"
    return prod, what


def _elementwise_readers(gm: fx.GraphModule, node: fx.Node) -> bool:
    """Every reader of ``node`` is an elementwise op (a view reads at no extra cost)."""
    return bool(node.users) and all(
        u.op != "output" and (_erf_gelu(gm, u) or not isinstance(_producer(gm, u), str))
        for u in node.users
    )


def _rewrite(gm: fx.GraphModule, report: SurgeryReport) -> None:
    graph = gm.graph
    taken: set[fx.Node] = set()
    for node in list(graph.nodes):
        if node.op != "call_module" or not isinstance(
            gm.get_submodule(str(node.target)), PN._ConvMixin
        ):
            continue
        path = str(node.target)
        conv: Any = gm.get_submodule(path)
        arg = node.args[0] if node.args else None
        meta = arg.meta.get("tensor_meta") if isinstance(arg, fx.Node) else None
        shape = getattr(meta, "shape", None)
        if shape is None:
            continue
        shape = torch.Size(shape)
        pairs, crop_layout = _copy_facts(conv, shape)
        if pairs is None:
            continue  # at the example's size this conv pads without a copy
        why = _own_forward(gm, node)
        if why is not None:
            report.skipped.append(Skip(path, why))
            continue
        crop = crop_layout is not None and _elementwise_readers(gm, node)
        found = _candidate(gm, node, taken)
        if not isinstance(found, str):
            is_cl = getattr(meta, "memory_format", None) in (
                torch.channels_last,
                torch.channels_last_3d,
            )
            run = _interior_run(shape, pairs, is_cl)
            if run < _MIN_RUN:
                found = (
                    f"the buffer's rows would hold {run} elements at the example's size "
                    f"(under {_MIN_RUN}, an elementwise op writes them slower than one copy)"
                )
        notes: list[str] = []
        with graph.inserting_before(node if isinstance(found, str) else found[0]):
            conv_ref = graph.get_attr(path)
        if isinstance(found, str):
            if not crop:
                report.skipped.append(Skip(path, found))
                continue
            buf: Any = None
            val: Any = node.args[0]
            notes.append(f"inference: as before ({found})")
        else:
            prod, (kind, target, _) = found
            taken.add(prod)
            with graph.inserting_before(prod):
                target_arg = graph.get_attr(str(target)) if kind == "module" else str(target)
                pair = graph.call_function(
                    fused_producer, (conv_ref, kind, target_arg, prod.args, dict(prod.kwargs))
                )
                buf = graph.call_function(operator.getitem, (pair, 0))
                val = graph.call_function(operator.getitem, (pair, 1))
            prod.replace_all_uses_with(val)
            graph.erase_node(prod)
            name = type(gm.get_submodule(str(target))).__name__ if kind == "module" else target
            notes.append(f"inference: its producer ({kind} {name}) writes the buffer's interior")
        if crop:
            notes.append(
                "training: symmetric padding and a view of the outputs kept (only "
                "elementwise ops read them)"
            )
        with graph.inserting_before(node):
            new = graph.call_function(fused_conv, (conv_ref, buf, val, crop))
        node.replace_all_uses_with(new)
        graph.erase_node(node)
        after = ("buffer" if buf is not None else "") + (" + crop view" if crop else "")
        report.changes.append(
            Change(
                path,
                _brief(conv),
                f"{_brief(conv)} ({after.strip(' +')})",
                ("padding",),
                detail="; ".join(notes),
            )
        )
    graph.lint()
    gm.recompile()


def _time(fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median over interleaved rounds of each callable's time (seconds)."""
    per: dict[str, list[float]] = {k: [] for k in fns}
    for f in fns.values():
        f()
    for r in range(rounds):
        for k in list(fns)[:: 1 if r % 2 == 0 else -1]:
            t0 = time.perf_counter()
            fns[k]()
            per[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v) for k, v in per.items()}


def fuse_pads(
    model: nn.Module,
    *example_inputs: Any,
    inplace: bool = False,
    measure: bool = False,
    rounds: int = 7,
) -> tuple[nn.Module, SurgeryReport]:
    """Let the elementwise op before each per-side-padded conv write its padded input.

    Args:
        model: a model with padkit convs (after :func:`convert`, for timm / TF ports).
        example_inputs: inputs the model is run on to check the rewrite (and to time it
            with ``measure=True``); at least one.
        inplace: build the returned graph over ``model``'s own modules (shared
            parameters) instead of a copy.
        measure: time the model before and after on ``example_inputs`` (inference,
            ``rounds`` interleaved rounds) and return the rewritten one only if faster;
            the report's notes give the two times.
        rounds: timed rounds per model when ``measure=True``.

    Returns:
        ``(model, report)``: a ``torch.fx.GraphModule`` (or, when nothing was rewritten
        or ``measure`` kept the original, the model or its copy), and what changed.

    Example:
        >>> import padkit
        >>> net = torch.nn.Sequential(
        ...     torch.nn.Conv1d(4, 4, 1), torch.nn.ReLU(),
        ...     padkit.nn.Conv1d(4, 4, 3, padding="causal", dilation=2))
        >>> fused, report = fuse_pads(net, torch.randn(1, 4, 2048))
        >>> report.paths
        ['2']
        >>> x = torch.randn(2, 4, 3000)
        >>> with torch.no_grad():
        ...     print(torch.allclose(fused(x), net(x), atol=1e-6))
        True
    """
    fname = "padkit.surgery.fuse_pads"
    model = _check_model(model, fname)
    inplace = _check_bool(inplace, "inplace", fname)
    measure = _check_bool(measure, "measure", fname)
    if not example_inputs:
        raise TypeError(f"{fname}(): give at least one example input, got none")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"{fname}(): rounds must be a positive int, got {rounds!r}")
    report = SurgeryReport("fuse_pads")
    base = model if inplace else copy.deepcopy(model)
    try:
        graph = _Tracer().trace(base)
    except Exception as err:  # any tracing failure: report it, leave the model as is
        report.notes.append(
            f"torch.fx could not trace the model ({type(err).__name__}: {err}); unchanged"
        )
        return base, report
    gm = fx.GraphModule(base, graph, class_name=type(base).__name__ + "FusedPads")
    with torch.no_grad():
        ShapeProp(gm).propagate(*example_inputs)  # the size each conv sees
    _rewrite(gm, report)
    if not report.changes:
        return base, report
    with torch.no_grad():
        want = base(*example_inputs)
        got = gm(*example_inputs)
    _check_same(want, got, fname)
    if measure:
        with torch.inference_mode():
            t = _time(
                {"before": lambda: base(*example_inputs), "after": lambda: gm(*example_inputs)},
                rounds,
            )
        ratio = t["after"] / t["before"]
        report.notes.append(
            f"measured on the example inputs: {t['before'] * 1e3:.3f} ms before, "
            f"{t['after'] * 1e3:.3f} ms after ({ratio:.3f}x; median of {rounds} rounds)"
        )
        if ratio >= 1.0:
            report.skipped.extend(Skip(c.path, "not faster in this model") for c in report.changes)
            report.changes.clear()
            return base, report
    return gm, report


def _check_same(want: Any, got: Any, fname: str) -> None:
    a, b = tree_leaves(want), tree_leaves(got)
    ok = len(a) == len(b) and all(
        not isinstance(x, Tensor)
        or (
            isinstance(y, Tensor)
            and x.shape == y.shape
            and torch.allclose(x, y, rtol=1e-4, atol=1e-5, equal_nan=True)
        )
        for x, y in zip(a, b)
    )
    if not ok:  # pragma: no cover - a bug in the rewrite; never return wrong numbers
        raise RuntimeError(f"{fname}(): the rewritten model computes other numbers")
