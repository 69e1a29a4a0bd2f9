"""What a padkit layer runs under ``torch.compile``: its plan, made once per traced graph.

Eagerly a layer remembers, per input shape and live attributes, the plan its first (fully
checked) call ran (``nn``'s fast path). Traced by dynamo, the same planning is Python that
dynamo follows line by line, and every global, helper and attribute it reads becomes a
guard that the compiled model evaluates on each call (477 guards for a ten-layer model
whose twin, torch layers after ``F.pad``, has 267). Here the layer reads its key (the
live attributes the plan depends on, which dynamo then guards, and the input's static
shape, dtype and layout) and the plan for that key is made outside the trace, by a
function whose result dynamo takes as a constant
(``torch.compiler.assume_constant_result``); the traced code only runs it.

Each planner first runs the layer's full path on meta tensors of the same shapes; where
that fails (a bad input) it answers None and the layer takes its full path in the trace,
which raises what an eager call raises. The result is plain data (the plan's fields, ints
and tuples), which dynamo embeds without guards of its own.

Only for static shapes (``dynamic=False``, or sizes dynamo has specialised) and never under
``torch.export`` (which keeps its own lowering): with symbolic sizes the layers take their
full path, whose pads stay symbolic. A pool planner answers None where the layer's fast
path would not run either (Caffe rounding, non-float pools): the layer then takes its
full path.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any, TypeVar, cast

import torch
from torch import Tensor
from torch.overrides import has_torch_function

from . import functional as PF
from ._sym import has_static_value
from .op import Op
from .plan import Plan, plan_conv

Fields = tuple[Any, ...]
_Fn = TypeVar("_Fn", bound=Callable[..., Any])


def _constant(fn: _Fn) -> _Fn:
    """``fn`` runs when dynamo traces a call of it, and its result is a constant of the
    graph (``torch.compiler.assume_constant_result``): what the trace read to call it is
    guarded, ``fn`` itself is not traced.

    ``torch.compiler.assume_constant_result`` imports dynamo (~0.7 s); until something else
    has, ``fn`` is marked as dynamo marks it (tests/test_compile.py checks the two agree).
    """
    if "torch._dynamo" in sys.modules:
        return cast(_Fn, torch.compiler.assume_constant_result(fn))  # type: ignore[no-untyped-call]
    return _mark_constant(fn)


def _mark_constant(fn: _Fn) -> _Fn:
    """What ``torch._dynamo.assume_constant_result`` does to ``fn``, without importing dynamo."""
    fn._dynamo_marked_constant = True  # type: ignore[attr-defined]
    return fn


def static_batched(x: Any, nd: int) -> bool:
    """``x`` is traced by ``torch.compile`` (not exported) as a batched input of static
    shape (asked of dynamo without a guard)."""
    return (
        torch.compiler.is_compiling()
        and not torch.compiler.is_exporting()
        and isinstance(x, Tensor)
        and x.dim() == nd + 2
        and all(has_static_value(n) for n in x.shape)
    )


def _empty(shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def _meta(shape: tuple[int, ...] | None, dtype: torch.dtype) -> Tensor | None:
    return None if shape is None else _empty(shape, dtype)


def _runs(full: Any, *args: Any) -> bool:
    """The layer's full path succeeds on these (meta) arguments."""
    try:
        full(*args)
    except Exception:  # the full path, traced, raises it as an eager call does
        return False
    return True


def _fields(record: Plan | Op) -> Fields:
    return tuple(getattr(record, f.name) for f in dataclasses.fields(record))


#: A planner's answer: steps that :func:`run` applies to the input, each a tuple whose first
#: item names it: ``("pad", flat, value)`` (a constant pad, ``F.pad``'s last-axis-first
#: list), ``("steps", steps, fname)`` (padding-mode pads, :func:`padkit.functional.pad_steps`),
#: ``("wpad", flat)`` (the weight padded by zeros: a kernel grown by zero taps),
#: ``("call", name, *args)`` (``torch.<name>(x, weight, bias, *args)``) and
#: ``("narrow", dim, start, length)``.
Program = tuple[tuple[Any, ...], ...]


def run(program: Program, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``program`` on ``x``: what the trace holds of a layer whose plan was made outside it.
    Dynamo unrolls the loop (the program is a constant) and guards only what is read here,
    so this reads as few globals as it can."""
    for step in program:
        kind = step[0]
        if kind == "pad":
            x = torch.constant_pad_nd(x, step[1], step[2])
        elif kind == "steps":
            x = PF.pad_steps(x, step[1], step[2])
        elif kind == "wpad":
            weight = torch.constant_pad_nd(weight, step[1])
        elif kind == "call":
            x = getattr(torch, step[1])(x, weight, bias, *step[2:])
        else:
            x = x.narrow(step[1], step[2], step[3])
    return x


def _narrows(full: tuple[int, ...], skip: tuple[int, ...], size: tuple[int, ...]) -> Program:
    """The narrows that take ``size`` elements from ``skip`` on each spatial axis of an
    output of shape ``full``."""
    nd = len(size)
    return tuple(
        ("narrow", len(full) - nd + i, a, n)
        for i, (a, n) in enumerate(zip(skip, size))
        if a or n != full[len(full) - nd + i]
    )


@_constant
def conv_plan(
    layer: Any,
    spec: Any,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    wshape: tuple[int, ...],
    bshape: tuple[int, ...] | None,
    wdtype: torch.dtype,
    grad: bool,
    key: tuple[Any, ...],
) -> Program | None:
    """A conv layer's :data:`Program` for an input of ``shape``: its padding-mode pads
    (:func:`padkit.functional.mode_pads`), then its plan on torch's conv as
    :func:`padkit.functional.run_conv_torch` runs it under ``torch.compile`` (``grad``:
    the weight takes part in autograd). ``spec`` (the layer's ``pad_spec``) and ``key`` (its
    other live attributes) are what the trace read, so dynamo guards them."""
    x, w, b = _empty(shape, dtype), _empty(wshape, wdtype), _meta(bshape, wdtype)
    if not _runs(layer._forward, x, w, b):
        return None
    op = layer._op()
    pairs = layer.resolved_padding(shape)
    steps, zero_pairs = PF.mode_pads(pairs, op.padding_mode)
    sizes = tuple(n + lo + hi for n, (lo, hi) in zip(shape[2:], _padded(steps, op.nd)))
    plan = plan_conv(
        ((0, 0),) * op.nd if zero_pairs is None else zero_pairs,
        op.kernel,
        op.stride,
        op.dilation,
        sizes,
        groups=op.groups,
        in_channels=shape[1],
    )
    plan = PF.torch_conv_plan(plan, exporting=False, compiling=True, grad=grad)
    program: list[tuple[Any, ...]] = []
    if steps:
        program.append(("steps", steps, type(layer).__name__))
        x = PF.pad_steps(x, steps, type(layer).__name__)
    if plan.strategy == "zero_extend":
        program.append(("wpad", PF._torch_pad(plan.kernel_ext)))
        w = torch.constant_pad_nd(w, PF._torch_pad(plan.kernel_ext))
    elif plan.strategy in ("residual_pad", "explicit") and any(map(any, plan.pre_pad)):
        program.append(("pad", PF._torch_pad(plan.pre_pad), 0.0))
        x = torch.constant_pad_nd(x, PF._torch_pad(plan.pre_pad))
    args = (op.stride, plan.native_padding, op.dilation, op.groups)
    program.append(("call", f"conv{op.nd}d", *args))
    full = tuple(getattr(torch, f"conv{op.nd}d")(x, w, b, *args).shape)
    if plan.strategy == "crop":
        program.extend(_narrows(full, plan.skip, plan.out_size))
    return tuple(program)


def _padded(steps: tuple[tuple[PF.Pairs, str], ...], nd: int) -> PF.Pairs:
    """What the steps add to each axis."""
    return tuple(
        (sum(p[i][0] for p, _ in steps), sum(p[i][1] for p, _ in steps)) for i in range(nd)
    )


@_constant
def conv_transpose_plan(
    layer: Any,
    spec: Any,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    wshape: tuple[int, ...],
    bshape: tuple[int, ...] | None,
    wdtype: torch.dtype,
    output_size: tuple[int, ...] | None,
    timed: str | None,
    key: tuple[Any, ...],
) -> Program | None:
    """A transposed conv layer's :data:`Program` for an input of ``shape``: torch's
    transposed conv with its padding and output_padding, then the slices
    (:func:`padkit.functional.transpose_layout`). ``timed`` (:func:`timed_layout`: the
    input's memory layout, for CPU inference) lets a layout that slices an output's end
    become the shifted layout where that is measured faster, as in an eager call
    (:func:`_shifted`); None keeps the slice."""
    name = type(layer).__name__
    sized = None if output_size is None else list(output_size)
    x, w, b = _empty(shape, dtype), _empty(wshape, wdtype), _meta(bshape, wdtype)
    if not _runs(layer._full_t, x, sized, (w, b)):
        return None
    op = layer._op()
    sizes = shape[2:]
    crops = PF.transpose_crops(op.padding, op.kernel, op.stride, op.dilation, sizes)
    out_pad = op.output_padding
    if output_size is not None:
        out_pad = PF._output_padding_for(
            name, output_size, sizes, op.kernel, op.stride, op.dilation, crops
        )
    native_p, native_op, slices = PF.transpose_layout(
        crops, out_pad, op.kernel, op.stride, op.dilation, sizes, name
    )
    program: list[tuple[Any, ...]] = []
    if timed is not None and any(end for _, end in slices):
        shifted = _shifted(
            shape, dtype, wshape, bshape, wdtype, timed, op, crops, out_pad,
            (native_p, native_op, slices), name,
        )  # fmt: skip
        if shifted is not None:
            pads, native_p, native_op, slices = shifted
            program.append(("pad", PF._torch_pad(pads), 0.0))
            x = torch.constant_pad_nd(x, PF._torch_pad(pads))
    args = (op.stride, native_p, native_op, op.groups, op.dilation)
    fn = f"conv_transpose{op.nd}d"
    full = tuple(getattr(torch, fn)(x, w, b, *args).shape)
    skip = tuple(a for a, _ in slices)
    size = tuple(n - a - e for n, (a, e) in zip(full[2:], slices))
    return (*program, ("call", fn, *args), *_narrows(full, skip, size))


def timed_layout(x: Tensor, weight: Tensor, bias: Tensor | None) -> str | None:
    """Where a compiled transposed conv may take a timed layout: the input's memory
    layout (``"channels_last"`` or ``"contiguous"``) for CPU inference on a plain weight,
    else None (training, other devices, a weight under ``__torch_function__``)."""
    if x.device.type != "cpu" or has_torch_function((weight,)) or PF._needs_grad(x, weight, bias):
        return None
    return "channels_last" if PF.channels_last(x) else "contiguous"


def _shifted(
    shape: tuple[int, ...],
    dtype: torch.dtype,
    wshape: tuple[int, ...],
    bshape: tuple[int, ...] | None,
    wdtype: torch.dtype,
    layout: str,
    op: Op,
    crops: PF.Pairs,
    out_pad: tuple[int, ...],
    sliced: tuple[tuple[int, ...], tuple[int, ...], PF.Pairs],
    name: str,
) -> tuple[PF.Pairs, tuple[int, ...], tuple[int, ...], PF.Pairs] | None:
    """The shifted layout of a compiled transposed conv where eager oneDNN runs it faster
    than the slice (:func:`padkit.functional._timed_shift`, the eager layers' choice and
    cache), timed on stand-in CPU tensors of the traced shapes and layout, outside the
    trace; under inductor's freezing (:func:`_freezing`) always; None where timing is off
    (``padkit.native.set_tuning(False)``) or deterministic algorithms are on. Without
    freezing inductor calls the same deconvolution as eager torch, and ranked the layouts
    as eager does on every shape measured (docs/performance.md). The stand-ins are filled
    without the global random generator, whose state compiling must not change."""
    if not PF.layout_timing_on():
        return None
    if _freezing():
        return PF.shifted_layout(crops, out_pad, op.kernel, op.stride, op.dilation, shape[2:], name)
    with _real_tensors():
        x = torch.full(shape, 0.5, dtype=dtype)
        if layout == "channels_last":
            fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
            x = x.contiguous(memory_format=fmt)
        w = torch.full(wshape, 0.25, dtype=wdtype)
        b = None if bshape is None else torch.full(bshape, 0.125, dtype=wdtype)
        return PF._timed_shift(
            x, w, b, op.stride, op.dilation, op.groups, crops, out_pad, sliced, name
        )


def _freezing() -> bool:
    """Inductor's freezing is on for this compile, as far as the trace can see (set in
    ``torch._inductor.config``; ``options={"freezing": True}`` applies only after the
    trace). Frozen, inductor runs a transposed conv on prepacked weights, where the
    shifted layout was 0.33-0.65x the slice on every shape measured, with AVX-512 and
    AVX2 alike, including shapes where eager oneDNN ranks the slice first."""
    import torch._inductor.config as inductor_config

    return bool(inductor_config.freezing)


def _real_tensors() -> Any:
    """Real (not fake) tensors while dynamo traces."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    return unset_fake_temporarily()


@_constant
def pool_plan(
    layer: Any,
    spec: Any,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    channels_last: bool,
    key: tuple[Any, ...],
) -> tuple[str, Fields, Any, Any] | None:
    """How a max or average pool layer runs on an input of ``shape``, or None (the full
    path): ``("plan", record, plan, None)`` (:func:`padkit.functional.run_pool_plan`),
    ``("pad_then_pool", record, pads, None)`` (an average counting its pads) or
    ``("explicit", record, pads, full)`` (padded by ``full``, then the unpadded pool);
    records and plans as their fields."""
    meta = torch.empty(shape, dtype=dtype, device="meta")
    if channels_last:
        fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
        meta = meta.contiguous(memory_format=fmt)
    if not _runs(layer._forward, meta):
        return None
    rec = layer._op()
    if spec.ceil_mode or not dtype.is_floating_point or rec.kind not in ("max", "avg"):
        return None
    if rec.kind == "avg" and len(shape) == 5 and dtype in (torch.float16, torch.bfloat16):
        return None  # averaged in float32 by the full path
    plan = layer.plan(shape, channels_last=channels_last)
    if rec.kind == "avg" and PF._pad_then_pool(plan, rec, dtype):
        return ("pad_then_pool", _fields(rec), plan.pads, None)
    if plan.strategy != "explicit":
        return ("plan", _fields(rec), _fields(plan), None)
    k_eff = PF._k_eff(rec.kernel, rec.dilation)
    full = PF._explicit_pads(shape[2:], k_eff, rec.stride, plan.pads, plan.out_size, rec.ceil_mode)
    return ("explicit", _fields(rec), plan.pads, full)
