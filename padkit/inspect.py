"""Report every conv and pool layer of a model: its padding, resolved per side, and what bites.

:func:`inspect_model` takes a torch module, a ``"module:factory"`` string, or an ONNX model
(path, bytes or ``onnx.ModelProto``) and returns one :class:`LayerReport` per conv,
transposed conv and pool: kernel, stride, dilation, the ``(lo, hi)`` pads per spatial axis,
``auto_pad``, whether the pads are symmetric and whether they depend on the input size, what
the layer exports to (torch and padkit layers) or how :func:`padkit.onnx.load` imports it
(ONNX nodes), and warnings for the padding that breaks ports: asymmetric pads, ``SAME_LOWER``,
``count_include_pad`` defaults that differ between torch and ONNX, ``auto_pad`` with
dilation, and Caffe-style ceil pooling. ``padkit inspect`` prints it as a table.

Every number comes from :mod:`padkit.spec` (:meth:`Padding.resolve`,
:func:`padkit.conv_output_size`, :func:`padkit.pool_output_size`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from .op import Op, pads_same_every_forward
from .spec import (
    Padding,
    PaddingError,
    conv_output_size,
    conv_transpose_output_size,
    pool_output_size,
)

__all__ = ["LayerReport", "format_table", "inspect_model", "load_factory"]

Pairs = tuple[tuple[int, int], ...]

_ONNX_OPS = {
    "Conv": "conv",
    "ConvTranspose": "conv_transpose",
    "MaxPool": "max_pool",
    "AveragePool": "avg_pool",
    "LpPool": "lp_pool",
}
_EXPORT_OP = {
    "conv": "Conv",
    "conv_transpose": "ConvTranspose",
    "max_pool": "MaxPool",
    "avg_pool": "AveragePool",
    "lp_pool": "LpPool",
}
_PADKIT_CLASS = {
    "conv": "Conv",
    "conv_transpose": "ConvTranspose",
    "max_pool": "MaxPool",
    "avg_pool": "AvgPool",
    "lp_pool": "LPPool",
}
_ONNX_PAD_MODE = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


@dataclass(frozen=True)
class LayerReport:
    """The padding facts of one conv or pool layer.

    Attributes:
        name: the module path (torch) or node name (ONNX; its first output when unnamed).
        op: the class name (torch) or ONNX op type.
        source: ``"torch"``, ``"padkit"``, ``"timm"`` (or another package) or ``"onnx"``.
        kind: ``"conv"``, ``"conv_transpose"``, ``"max_pool"``, ``"avg_pool"`` or ``"lp_pool"``.
        kernel, stride, dilation: one value per spatial axis.
        padding: the declared padding, as text (a padkit spec, or the ONNX attributes).
        pads: the ``(lo, hi)`` pads per spatial axis (crops for a transposed conv); None when
            they depend on an input size that is not known.
        auto_pad: the ONNX ``auto_pad``: the node's own, or what the layer exports with.
        symmetric: ``lo == hi`` on every axis (None when ``pads`` is None).
        size_dependent: the pads depend on the input size (TF ``SAME`` at stride > 1,
            Caffe ceil rounding).
        input_size, output_size: spatial sizes where known (traced, or from ONNX shapes).
        ceil_mode: the pool rounds its output size up.
        count_include_pad: average pools: whether pad cells count in the divisor.
        padding_mode: ``"zeros"``, ``"reflect"``, ``"replicate"``, ``"circular"`` (per axis
            when they differ).
        exports_to: torch and padkit layers: the ONNX form padkit's export gives.
        imports_as: ONNX nodes: the padkit layer :func:`padkit.onnx.load` builds.
        warnings: what to watch for when this layer moves between frameworks.
        macs: multiply-accumulates of the declared op for one sample at the traced size
            (convs: ``C_out * prod(out) * C_in/groups * prod(kernel)``, transposed convs
            ``C_in * prod(in) * C_out/groups * prod(kernel)``, pools: one per window tap,
            ``C * prod(out) * prod(kernel)``); None where the sizes are not known.
        plan: padkit layers: the plan that runs at the traced size (see
            :meth:`padkit.nn.Conv2d.plan`); None for other layers.
        plan_macs: the same count for what runs: a ``crop`` plan's torch kernel computes
            outputs it then drops, a ``zero_extend`` plan's kernel has zero taps. It equals
            ``macs`` for every other plan and layer. The plan is the inference one: where a
            gradient is needed a ``zero_extend`` conv runs as ``residual_pad`` (``macs``).
        folded: ONNX nodes: what :func:`padkit.onnx.load` (default ``fold="pads"``) folds
            into this layer, or leaves before it and why, one line per ``Pad`` (see
            ``onnx_folds`` in ``docs/onnx-import.md``); empty where the model does not
            import.
    """

    name: str
    op: str
    source: str
    kind: str
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    padding: str
    pads: Pairs | None
    auto_pad: str
    symmetric: bool | None
    size_dependent: bool
    input_size: tuple[int, ...] | None
    output_size: tuple[int, ...] | None
    ceil_mode: bool
    count_include_pad: bool | None
    padding_mode: str
    exports_to: str | None
    imports_as: str | None
    warnings: tuple[str, ...]
    macs: int | None = None
    plan: str | None = None
    plan_macs: int | None = None
    folded: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready plain data (tuples become lists).

        Example:
            >>> import padkit.nn as pnn
            >>> report = inspect_model(pnn.MaxPool1d(2, padding=((0, 1),)))[0]
            >>> report.to_dict()["pads"]
            [[0, 1]]
        """
        data = asdict(self)
        return _listify(data)  # type: ignore[no-any-return]


def _listify(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _listify(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_listify(v) for v in value]
    return value


# ----------------------------------------------------------------------------- shared text


def _axes_text(values: Sequence[int] | None) -> str:
    if values is None:
        return "?"
    return "x".join(str(v) for v in values)


def _pairs_text(pairs: Pairs | None) -> str:
    if pairs is None:
        return "?"
    return " ".join(f"({lo},{hi})" for lo, hi in pairs)


def _spec_text(spec: Padding) -> str:
    """A spec as one would write it in a padkit ``padding=`` argument."""
    if spec.pre is not None:
        return spec.describe()
    axes = spec.axes
    if len(set(axes)) == 1:
        only = axes[0]
        if isinstance(only, str):
            text = repr(only)
        else:
            text = str(only[0]) if only[0] == only[1] else repr(axes)
    else:
        text = "(" + ", ".join(repr(a) for a in axes) + ")"
    return text + (" + Caffe ceil" if spec.ceil_mode else "")


def _warn_asymmetric(pairs: Pairs) -> str:
    return (
        f"asymmetric pads {_pairs_text(pairs)}: cuDNN has no per-side padding, so GPU "
        "runtimes pad a copy first or (Flux/NNlib pooling) silently use the low pad on "
        "both sides"
    )


_WARN_LOWER = (
    "SAME_LOWER puts the odd pad at the start; onnx2torch maps it to torch 'same' (odd pad "
    "at the end, stride 1 only) and onnx.reference's MaxPool gets it wrong at stride > 1"
)


def _warn_ceil(out: Sequence[int] | None, floor: Sequence[int] | None, pads: Pairs | None) -> str:
    text = "ceil_mode (Caffe-style rounding)"
    if out is not None and floor is not None and tuple(out) != tuple(floor):
        text += f": {_axes_text(out)} outputs where floor rounding gives {_axes_text(floor)}"
    if pads is None or any(lo or hi for lo, hi in pads):
        text += (
            "; with pads, a window that would start in the right pad is dropped (converters "
            "that pad first and then pool with ceil_mode keep it, e.g. onnx2torch)"
        )
    return text


def _ceil_matters(
    out: Sequence[int] | None, floor: Sequence[int] | None, pads: Pairs | None
) -> bool:
    if out is None or floor is None or pads is None:
        return True
    return tuple(out) != tuple(floor) or any(lo or hi for lo, hi in pads)


def _sizes(
    kind: str,
    n: Sequence[int] | None,
    pairs: Pairs | None,
    k: Sequence[int],
    s: Sequence[int],
    d: Sequence[int],
    ceil: bool,
) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """(output size, output size with floor rounding), from padkit.spec."""
    if n is None or pairs is None:
        return None, None
    if kind == "conv_transpose":
        out = tuple(
            conv_transpose_output_size(ni, ki, si, di, lo, hi)
            for ni, ki, si, di, (lo, hi) in zip(n, k, s, d, pairs)
        )
        return out, out
    if kind == "conv":
        out = tuple(
            conv_output_size(ni, ki, si, di, lo, hi)
            for ni, ki, si, di, (lo, hi) in zip(n, k, s, d, pairs)
        )
        return out, out
    floor = tuple(
        pool_output_size(ni, ki, si, di, lo, hi)
        for ni, ki, si, di, (lo, hi) in zip(n, k, s, d, pairs)
    )
    if not ceil:
        return floor, floor
    out = tuple(
        pool_output_size(ni, ki, si, di, lo, hi, ceil_mode=True)
        for ni, ki, si, di, (lo, hi) in zip(n, k, s, d, pairs)
    )
    return out, floor


# ----------------------------------------------------------------------------- torch models


def load_factory(spec: str) -> Any:
    """Build a torch model from ``"package.module:factory"``, calling ``factory()``.

    ``factory`` may be a dotted path inside the module (``"pkg.mod:Class.build"``). When the
    module has no such attribute but has a ``create_model`` function, ``create_model(name)``
    is called instead, so ``"timm:tf_efficientnet_b0"`` builds a timm model (random
    weights). The module is imported normally: it must be on ``sys.path``.

    Raises:
        ValueError: ``spec`` is not of the form ``module:factory``.
        ImportError: the module cannot be imported.
        AttributeError: the module has no such factory.
        TypeError: the factory did not return a ``torch.nn.Module``.

    Example:
        >>> type(load_factory("torch.nn:Identity")).__name__
        'Identity'
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(
            f"model must be an ONNX file or 'module:factory' (e.g. 'torchvision.models:resnet18'), "
            f"got {spec!r}"
        )
    module = importlib.import_module(module_name)
    target: Any = module
    try:
        for part in attr.split("."):
            target = getattr(target, part)
    except AttributeError:
        create = getattr(module, "create_model", None)
        if create is None or not callable(create) or "." in attr:
            raise AttributeError(
                f"module {module_name!r} has no attribute {attr!r} (and no create_model "
                "function to build it by name)"
            ) from None
        model = create(attr)
    else:
        if not callable(target):
            raise TypeError(f"{spec!r} is a {type(target).__name__}, not a callable factory")
        model = target()
    from torch import nn

    if not isinstance(model, nn.Module):
        raise TypeError(f"{spec!r} returned a {type(model).__name__}, not a torch.nn.Module")
    return model


@dataclass(frozen=True)
class _Facts:
    kind: str
    nd: int
    source: str
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]
    spec: Padding
    ceil_mode: bool = False
    count_include_pad: bool | None = None
    padding_mode: str = "zeros"
    timm_same: bool = False
    output_padding: tuple[int, ...] | None = None


def _timm_classes(module_name: str, *names: str) -> tuple[type, ...]:
    mod = sys.modules.get(module_name)
    if mod is None:
        return ()
    return tuple(c for c in (getattr(mod, n, None) for n in names) if isinstance(c, type))


_INSPECT_KIND = {
    "conv": "conv",
    "conv_transpose": "conv_transpose",
    "max": "max_pool",
    "avg": "avg_pool",
    "lp": "lp_pool",
}


def _torch_facts(m: Any) -> _Facts | None:
    rec = Op.from_module(m, subclasses=True)
    if rec is None:
        return None
    name = _INSPECT_KIND[rec.kind]
    timm_same = pads_same_every_forward(m)
    mode = rec.padding_mode
    cip = None
    if name == "avg_pool":
        # timm's AvgPool2dSame zero-pads first: the pad is counted whatever the flag says
        cip = True if timm_same else rec.count_include_pad
    return _Facts(
        kind=name,
        nd=rec.nd,
        source=type(m).__module__.split(".")[0],
        kernel=rec.kernel,
        stride=rec.stride,
        dilation=rec.dilation,
        spec=rec.padding,
        ceil_mode=rec.ceil_mode and rec.is_pool,
        count_include_pad=cip,
        padding_mode=mode if isinstance(mode, str) else ",".join(mode),
        timm_same=timm_same,
        output_padding=rec.output_padding if name == "conv_transpose" else None,
    )


def _trace_sizes(
    model: Any, paths: Sequence[str], input_shape: Sequence[int]
) -> dict[str, tuple[tuple[int, ...], tuple[int, ...] | None]]:
    """The (input shape, output shape) each module sees in one forward of zeros (eval mode)."""
    from .surgery.convert import _trace_shapes

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # only shapes are wanted from this pass
        return _trace_shapes(model, paths, input_shape)


def _torch_report(
    path: str, m: Any, f: _Facts, traced: tuple[tuple[int, ...], tuple[int, ...] | None] | None
) -> LayerReport:
    n = None if traced is None else tuple(traced[0][-f.nd :])
    size_dep = f.spec.needs_input_size(f.stride)
    pairs: Pairs | None = None
    if f.kind == "conv_transpose":
        if hasattr(m, "resolved_crops") and not f.spec.is_explicit:
            pairs = m.resolved_crops(n if n is not None else (1,) * f.nd)
        else:
            pairs = f.spec.resolve(f.kernel, f.stride, f.dilation)
        size_dep = False
    elif not size_dep or n is not None:
        pairs = f.spec.resolve(f.kernel, f.stride, f.dilation, n)
    out, floor = _sizes(f.kind, n, pairs, f.kernel, f.stride, f.dilation, f.ceil_mode)
    if traced is not None and traced[1] is not None:
        out = tuple(traced[1][-f.nd :])
    exports, auto_pad = _export_form(f, pairs)
    notes: list[str] = []
    if pairs is not None and any(lo != hi for lo, hi in pairs) and f.kind != "conv_transpose":
        notes.append(_warn_asymmetric(pairs))
    elif pairs is None and any(a in ("same", "same_lower") for a in f.spec.axes):
        notes.append(
            "TF SAME at stride > 1: the pads depend on the input size and are asymmetric "
            "for some sizes (give an input shape to resolve them)"
        )
    if "same_lower" in f.spec.axes:
        notes.append(_WARN_LOWER)
    if f.kind == "avg_pool" and f.count_include_pad and (pairs is None or any(map(any, pairs))):
        if f.timm_same:
            notes.append(
                "timm AvgPool2dSame zero-pads before pooling, so the pad cells count in the "
                "divisor whatever count_include_pad says (TF SAME leaves them out)"
            )
        else:
            notes.append(
                "count_include_pad=True (torch's default) counts the pad cells in the divisor; "
                "ONNX AveragePool defaults to 0 and TF never counts them (padkit exports "
                "count_include_pad=1 explicitly)"
            )
    if (f.ceil_mode and _ceil_matters(out, floor, pairs)) or f.spec.ceil_mode:
        notes.append(_warn_ceil(out, floor, pairs))
    return LayerReport(
        name=path or "(model)",
        op=type(m).__name__,
        source=f.source,
        kind=f.kind,
        kernel=f.kernel,
        stride=f.stride,
        dilation=f.dilation,
        padding=_spec_text(f.spec) if not f.timm_same else "'same' (timm, padded in forward)",
        pads=pairs,
        auto_pad=auto_pad,
        symmetric=None if pairs is None else all(lo == hi for lo, hi in pairs),
        size_dependent=size_dep,
        input_size=n,
        output_size=out,
        ceil_mode=f.ceil_mode or f.spec.ceil_mode,
        count_include_pad=f.count_include_pad,
        padding_mode=f.padding_mode,
        exports_to=exports,
        imports_as=None,
        warnings=tuple(notes),
        **_mac_counts(m, f, traced, out),
    )


def _prod(values: Sequence[int]) -> int:
    total = 1
    for v in values:
        total *= v
    return total


def _mac_counts(
    m: Any,
    f: _Facts,
    traced: tuple[tuple[int, ...], tuple[int, ...] | None] | None,
    out: tuple[int, ...] | None,
) -> dict[str, Any]:
    """``macs``, ``plan`` and ``plan_macs`` of one torch or padkit layer at its traced size."""
    if traced is None or out is None or len(traced[0]) < f.nd + 1:
        return {}
    shape = traced[0]
    n = tuple(shape[-f.nd :])
    channels = shape[-f.nd - 1]
    if f.kind in ("conv", "conv_transpose"):
        cin, cout, groups = m.in_channels, m.out_channels, m.groups
        if f.kind == "conv_transpose":
            macs = cin * _prod(n) * (cout // groups) * _prod(f.kernel)
            return {"macs": macs, "plan_macs": macs}
        per_out = cout * (cin // groups)
    else:
        per_out = channels
    macs = per_out * _prod(out) * _prod(f.kernel)
    plan_of = getattr(m, "plan", None)
    if type(m).__module__ != "padkit.nn" or not callable(plan_of):
        return {"macs": macs, "plan_macs": macs}
    try:
        plan = plan_of(shape)
    except (PaddingError, TypeError, ValueError):
        return {"macs": macs, "plan_macs": macs}
    run_k = tuple(k + lo + hi for k, (lo, hi) in zip(f.kernel, plan.kernel_ext))
    run_out = tuple(
        pool_output_size(ni + a + b, ki, si, di, p, p, ceil_mode=plan.ceil_mode)
        if plan.ceil_mode
        else conv_output_size(ni + a + b, ki, si, di, p, p)
        for ni, (a, b), ki, si, di, p in zip(
            n, plan.pre_pad, run_k, f.stride, f.dilation, plan.native_padding
        )
    )
    return {
        "macs": macs,
        "plan": plan.strategy,
        "plan_macs": per_out * _prod(run_out) * _prod(run_k),
    }


def _export_form(f: _Facts, pairs: Pairs | None) -> tuple[str, str]:
    """(what padkit's ONNX export gives for this layer, the auto_pad it carries)."""
    op = _EXPORT_OP[f.kind]
    extra = ""
    if f.kind in ("max_pool", "avg_pool", "lp_pool") and (f.ceil_mode or f.spec.ceil_mode):
        extra += ", ceil_mode=1"
    if f.kind == "avg_pool":
        extra += f", count_include_pad={int(bool(f.count_include_pad))}"
    if f.output_padding is not None and any(f.output_padding):
        extra += f", output_padding={list(f.output_padding)}"
    rules = {a for a in f.spec.axes if isinstance(a, str)}
    if f.spec.ceil_mode and not rules and f.kind.endswith("pool"):
        # Caffe rounding on a pool: the declared pads with ceil_mode, whatever the size
        declared = [a for a in f.spec.expand(f.nd).axes if isinstance(a, tuple)]
        flat = [lo for lo, _ in declared] + [hi for _, hi in declared]
        return f"{op}(pads={flat}{extra})", "NOTSET"
    dyn = f.spec.needs_input_size(f.stride) and f.kind != "conv_transpose"
    if f.timm_same and dyn:
        return (
            f"Shape/Pad subgraph + {op}(pads=0{extra}) (timm pads in forward; "
            f"padkit.surgery.convert makes it {op}(auto_pad=SAME_UPPER))",
            "NOTSET",
        )
    if dyn:
        # as padkit._export: auto_pad where onnxruntime computes the pads exactly (one
        # same-family rule on every axis, dilation 1, kernel >= stride, zero padding)
        whole = (
            len(set(f.spec.axes)) == 1 and rules <= {"same", "same_lower"} and f.spec.pre is None
        )
        k_eff = [d * (k - 1) + 1 for k, d in zip(f.kernel, f.dilation)]
        why = " (per-axis rules)"
        if whole and any(d != 1 for d in f.dilation):
            why = " (onnxruntime refuses or mis-sizes auto_pad with dilation)"
        elif whole and any(ke < s for ke, s in zip(k_eff, f.stride)):
            why = " (kernel smaller than the stride)"
        elif whole and f.padding_mode != "zeros":
            why = f" ({f.padding_mode} padding)"
        elif whole and not f.spec.ceil_mode:
            auto = "SAME_UPPER" if rules == {"same"} else "SAME_LOWER"
            fixed = ""
            if pairs is not None:
                flat = [lo for lo, _ in pairs] + [hi for _, hi in pairs]
                fixed = f"; pads={flat} when exported at this fixed size"
            return f"{op}(auto_pad={auto}{extra}){fixed}", auto
        return f"Shape/Pad subgraph + {op}(pads=0{extra}){why}", "NOTSET"
    if pairs is None:
        return f"{op}(pads=?{extra})", "NOTSET"
    if f.kind == "conv_transpose" and rules <= {"same", "same_lower"} and rules:
        auto = "SAME_UPPER" if rules == {"same"} else "SAME_LOWER"
        return f"{op}(auto_pad={auto}{extra})", auto
    flat = [lo for lo, _ in pairs] + [hi for _, hi in pairs]
    if f.kind == "conv" and f.padding_mode != "zeros":
        modes = f.padding_mode.split(",")
        mode = ",".join(_ONNX_PAD_MODE.get(x, x) for x in modes)
        return f"Pad(mode={mode}, pads={flat}) + {op}(pads=0{extra})", "NOTSET"
    return f"{op}(pads={flat}{extra})", "NOTSET"


def _inspect_module(model: Any, input_shape: Sequence[int] | None) -> list[LayerReport]:
    found = []
    for path, m in model.named_modules():
        facts = _torch_facts(m)
        if facts is not None:
            found.append((path, m, facts))
    traced: dict[str, tuple[tuple[int, ...], tuple[int, ...] | None]] = {}
    if input_shape is not None:
        traced = _trace_sizes(model, [p for p, _, _ in found], input_shape)
    folded, folded_traced = _code_pads(model, [p for p, _, _ in found], input_shape)
    reports = []
    for p, m, f in found:
        if p in folded:
            layer, detail = folded[p]
            g = _torch_facts(layer)
            no_pad = g is not None and not g.spec.needs_input_size(g.stride)
            if no_pad and g is not None:
                no_pad = not any(map(any, g.spec.resolve(g.kernel, g.stride, g.dilation)))
            if g is not None and not no_pad:
                r = _torch_report(p, layer, g, folded_traced.get(p))
                note = (
                    f"its input is padded in the model's code ({detail}); the pads shown are "
                    "what the layer computes with them (padkit.surgery.convert folds them)"
                )
                # what runs is the model's own pad and conv: the declared op's count
                reports.append(
                    dataclasses.replace(
                        r,
                        op=type(m).__name__,
                        warnings=(note, *r.warnings),
                        plan=None,
                        plan_macs=r.macs,
                    )
                )
                continue
        reports.append(_torch_report(p, m, f, traced.get(p)))
    return reports


def _code_pads(
    model: Any, paths: Sequence[str], input_shape: Sequence[int] | None
) -> tuple[dict[str, tuple[Any, str]], dict[str, tuple[tuple[int, ...], tuple[int, ...] | None]]]:
    """Layers whose input the model pads in its own code (``F.pad`` in a forward, a pad
    module outside an ``nn.Sequential``, amounts from the input size or a buffer): path ->
    (the padkit layer computing pad and op together, what the pad is), as found by
    ``padkit.surgery.convert``; and the sizes those layers see in that form."""
    from .surgery import convert

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a model with no code pads: nothing to report
            new, report = convert(model)
    except Exception:  # inspection reports what it can; convert raises for its own reasons
        return {}, {}
    folded: dict[str, tuple[Any, str]] = {}
    wanted = set(paths)
    for change in report.changes:
        if change.path in wanted and change.takes is not None:
            folded[change.path] = (new.get_submodule(change.path), str(change.takes))
    traced: dict[str, tuple[tuple[int, ...], tuple[int, ...] | None]] = {}
    if folded and input_shape is not None:
        traced = _trace_sizes(new, list(folded), input_shape)
    return folded, traced


# ----------------------------------------------------------------------------- ONNX models


def _onnx_shapes(
    model: Any, input_shape: Sequence[int] | Mapping[str, Sequence[int]] | None
) -> dict[str, tuple[int | None, ...]]:
    """Value name -> shape (None for unknown dims), after fixing the input dims."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = {t.name for t in m.graph.initializer}
    graph_inputs = [vi for vi in m.graph.input if vi.name not in inits]
    given: dict[str, Sequence[int]] = {}
    if isinstance(input_shape, Mapping):
        given = dict(input_shape)
    elif input_shape is not None and graph_inputs:
        given = {graph_inputs[0].name: input_shape}
    for vi in graph_inputs:
        if vi.name not in given:
            continue
        dims = vi.type.tensor_type.shape.dim
        shape = list(given[vi.name])
        if len(shape) != len(dims):
            raise ValueError(
                f"input {vi.name!r} has rank {len(dims)}, but the input shape given has "
                f"{len(shape)} dims ({_axes_text(shape)})"
            )
        for d, v in zip(dims, shape):
            d.Clear()
            d.dim_value = int(v)
    # shapes are a nicety: the report works without them when inference fails
    with contextlib.suppress(Exception):
        m = onnx.shape_inference.infer_shapes(m)
    shapes: dict[str, tuple[int | None, ...]] = {}
    for vi in [*m.graph.input, *m.graph.value_info, *m.graph.output]:
        tt = vi.type.tensor_type
        if not tt.HasField("shape"):
            continue
        shapes[vi.name] = tuple(
            int(d.dim_value) if d.HasField("dim_value") else None for d in tt.shape.dim
        )
    for t in m.graph.initializer:
        shapes[t.name] = tuple(int(v) for v in t.dims)
    return shapes


def _onnx_report(node: Any, shapes: Mapping[str, tuple[int | None, ...]]) -> LayerReport | None:
    from onnx import helper

    kind = _ONNX_OPS[node.op_type]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    label = node.name or (node.output[0] if node.output else "?")
    kernel = list(attrs.get("kernel_shape", []))
    if not kernel and kind in ("conv", "conv_transpose") and len(node.input) > 1:
        w = shapes.get(node.input[1])
        if w is not None and all(v is not None for v in w[2:]):
            kernel = [int(v) for v in w[2:] if v is not None]
    if not kernel:
        return None
    nd = len(kernel)
    k = tuple(int(v) for v in kernel)
    s = tuple(int(v) for v in attrs.get("strides", [])) or (1,) * nd
    d = tuple(int(v) for v in attrs.get("dilations", [])) or (1,) * nd
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    auto_pad = (auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)).upper()
    raw_pads = [int(v) for v in attrs.get("pads", [])]
    ceil = bool(attrs.get("ceil_mode", 0)) and kind.endswith("pool")
    spec = Padding.from_onnx(pads=raw_pads or None, auto_pad=auto_pad, ndim=nd)
    x_shape = shapes.get(node.input[0]) if node.input else None
    n: tuple[int, ...] | None = None
    if x_shape is not None and len(x_shape) == nd + 2 and all(v is not None for v in x_shape[2:]):
        n = tuple(int(v) for v in x_shape[2:] if v is not None)
    output_shape = [int(v) for v in attrs.get("output_shape", [])]
    size_dep = spec.needs_input_size(s)
    pairs: Pairs | None = None
    if kind == "conv_transpose":
        size_dep = bool(output_shape)
        if not output_shape and auto_pad in ("NOTSET", "VALID"):
            pairs = spec.resolve(k, s, d)
    elif not size_dep or n is not None:
        pairs = spec.resolve(k, s, d, n)
    out, floor = _sizes(kind, n, pairs, k, s, d, ceil)
    y_shape = shapes.get(node.output[0]) if node.output else None
    known = y_shape is not None and len(y_shape) == nd + 2 and None not in y_shape[2:]
    if out is None and y_shape is not None and known:
        out = tuple(int(v) for v in y_shape[2:] if v is not None)
    cip: bool | None = None
    notes: list[str] = []
    if pairs is not None and any(lo != hi for lo, hi in pairs) and kind != "conv_transpose":
        notes.append(_warn_asymmetric(pairs))
    elif pairs is None and auto_pad in ("SAME_UPPER", "SAME_LOWER") and kind != "conv_transpose":
        notes.append(
            f"auto_pad={auto_pad} at stride > 1: the pads depend on the input size and are "
            "asymmetric for some sizes (give an input shape to resolve them)"
        )
    if auto_pad == "SAME_LOWER":
        notes.append(_WARN_LOWER)
    if kind == "avg_pool":
        cip = bool(attrs.get("count_include_pad", 0))
        padded = pairs is None or any(lo or hi for lo, hi in pairs)
        if "count_include_pad" not in attrs and padded:
            notes.append(
                "count_include_pad not set: ONNX's default 0 leaves the pad cells out of the "
                "divisor, torch's AvgPool default (True) counts them; a converter that keeps "
                "torch's default changes the border values"
            )
        elif cip and padded:
            notes.append(
                "count_include_pad=1 counts the pad cells in the divisor (ONNX's default and "
                "TF leave them out)"
            )
    if auto_pad in ("SAME_UPPER", "SAME_LOWER") and any(v != 1 for v in d):
        if kind in ("conv", "conv_transpose"):
            notes.append(
                f"auto_pad={auto_pad} with dilations {list(d)}: onnxruntime refuses it "
                f"('Dilation not supported for AutoPadType::{auto_pad}'); padkit sizes the pad "
                "with the dilated kernel, as the ONNX spec says"
            )
        else:
            notes.append(
                f"auto_pad={auto_pad} with dilations {list(d)}: onnxruntime ignores the "
                "dilation when it sizes the pad (different numbers); padkit follows the spec"
            )
    if ceil and _ceil_matters(out, floor, pairs):
        notes.append(_warn_ceil(out, floor, pairs))
    padding_text = f"auto_pad={auto_pad}" if auto_pad != "NOTSET" else f"pads={raw_pads or 0}"
    if ceil:
        padding_text += ", ceil_mode=1"
    if kind == "avg_pool":
        padding_text += f", count_include_pad={int(bool(cip))}"
    if output_shape:
        padding_text += f", output_shape={output_shape}"
    return LayerReport(
        name=label,
        op=node.op_type,
        source="onnx",
        kind=kind,
        kernel=k,
        stride=s,
        dilation=d,
        padding=padding_text,
        pads=pairs,
        auto_pad=auto_pad,
        symmetric=None if pairs is None else all(lo == hi for lo, hi in pairs),
        size_dependent=size_dep,
        input_size=n,
        output_size=out,
        ceil_mode=ceil,
        count_include_pad=cip,
        padding_mode="zeros",
        exports_to=None,
        imports_as=_import_form(kind, nd, spec, d, ceil, cip, output_shape),
        warnings=tuple(notes),
    )


def _import_form(
    kind: str,
    nd: int,
    spec: Padding,
    d: tuple[int, ...],
    ceil: bool,
    cip: bool | None,
    output_shape: list[int],
) -> str:
    cls = f"padkit.nn.{_PADKIT_CLASS[kind]}{nd}d"
    if kind == "conv_transpose" and output_shape:
        args = "crops from output_shape"
    else:
        args = f"padding={_spec_text(spec)}"
    if any(v != 1 for v in d):
        args += f", dilation={d}"
    if ceil:
        args += ", ceil_mode=True"
    if kind == "avg_pool":
        args += f", count_include_pad={bool(cip)}"
    text = f"{cls}({args})"
    return f"{text} of |x|" if kind == "lp_pool" else text


def _inspect_onnx(
    model: Any, input_shape: Sequence[int] | Mapping[str, Sequence[int]] | None
) -> list[LayerReport]:
    shapes = _onnx_shapes(model, input_shape)
    reports = []
    for node in model.graph.node:
        if node.op_type in _ONNX_OPS and node.domain in ("", "ai.onnx"):
            try:
                report = _onnx_report(node, shapes)
            except PaddingError as err:
                label = node.name or (node.output[0] if node.output else "?")
                raise PaddingError(f"{node.op_type} node {label!r}: {err}") from None
            if report is not None:
                reports.append(report)
    return _with_folds(model, reports)


def _with_folds(model: Any, reports: list[LayerReport]) -> list[LayerReport]:
    """``reports`` with the folds of the default import into each layer (none where the
    model does not import)."""
    from .onnx import load

    try:
        folds = load(model).onnx_folds
    except Exception:  # an import failure is the import check's to report (padkit inspect)
        return reports
    by_layer: dict[str, list[Any]] = {}
    for fold in folds:
        by_layer.setdefault(fold.into, []).append(fold)
    out = []
    for r in reports:
        mine = by_layer.get(r.name, [])
        if mine:
            done = [f"{f.kind} {f.node!r} folded: {f.detail}" for f in mine if f.done]
            form = "; ".join([r.imports_as or "", *done]) if done else r.imports_as
            r = replace(r, folded=tuple(str(f) for f in mine), imports_as=form)
        out.append(r)
    return out


def _read_onnx(model: Any) -> Any:
    try:
        import onnx
    except ImportError:
        raise ImportError(
            'inspecting an ONNX model needs the onnx package: pip install "padkit[onnx]"'
        ) from None
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(model))
    from ._onnxfile import read_onnx_file  # an empty or foreign file is refused, not read as []

    return read_onnx_file(model)


# ----------------------------------------------------------------------------- entry points


def inspect_model(
    model: Any,
    input_shape: Sequence[int] | Mapping[str, Sequence[int]] | None = None,
) -> list[LayerReport]:
    """One :class:`LayerReport` per conv, transposed conv and pool layer of ``model``.

    Args:
        model: a ``torch.nn.Module``; a ``"package.module:factory"`` string (see
            :func:`load_factory`); or an ONNX model: a path to an existing file, its bytes,
            or an ``onnx.ModelProto``.
        input_shape: the full input shape (e.g. ``(1, 3, 224, 224)``). torch models run one
            forward pass of zeros with hooks to record each layer's input size; ONNX models
            fix the first graph input's dims (or those named in a mapping) and run ONNX
            shape inference. Pads that depend on the input size (TF ``SAME`` at stride > 1)
            are resolved only where a size is known.

    Recognised torch layers: ``torch.nn`` Conv/ConvTranspose/MaxPool/AvgPool/LPPool (1-3d)
    and their subclasses, :mod:`padkit.nn` layers, and timm's ``Conv2dSame``,
    ``MaxPool2dSame``, ``AvgPool2dSame`` (TF ``SAME`` per input size). ONNX: Conv,
    ConvTranspose, MaxPool, AveragePool, LpPool.

    Raises:
        ValueError: ``model`` is neither a module, an ONNX model nor ``module:factory``.
        ImportError: ``onnx`` is missing for an ONNX model, or the factory's module.
        padkit.PaddingError: a layer's padding cannot be resolved.

    Example:
        >>> import padkit.nn as pnn
        >>> r = inspect_model(pnn.Conv2d(3, 8, 3, stride=2, padding="same"), (1, 3, 8, 8))[0]
        >>> r.pads, r.symmetric, r.size_dependent, r.auto_pad
        (((0, 1), (0, 1)), False, True, 'SAME_UPPER')
    """
    from_torch = type(model).__module__.split(".")[0] == "torch" or hasattr(model, "named_modules")
    if from_torch and not isinstance(model, (str, Path, bytes, bytearray)):
        if isinstance(input_shape, Mapping):
            raise TypeError("input_shape must be a sequence of ints for a torch model")
        return _inspect_module(model, input_shape)
    if isinstance(model, (str, Path)):
        path = Path(model)
        if path.is_file():
            return _inspect_onnx(_read_onnx(path), input_shape)
        text = str(model)
        if ":" in text and not text.lower().endswith(".onnx"):
            if isinstance(input_shape, Mapping):
                raise TypeError("input_shape must be a sequence of ints for a torch model")
            return _inspect_module(load_factory(text), input_shape)
        if text.lower().endswith(".onnx"):
            raise FileNotFoundError(f"no such ONNX file: {text!r}")
        raise ValueError(
            f"model must be an ONNX file or 'module:factory' (e.g. 'torchvision.models:resnet18'), "
            f"got {text!r}"
        )
    return _inspect_onnx(_read_onnx(model), input_shape)


def _run_macs_text(r: LayerReport) -> str:
    """What runs, where it differs from the declared op: ``'55,488 crop (+13%)'``."""
    if r.macs is None or r.plan_macs is None:
        return "?"
    if r.plan_macs == r.macs:
        return "same"
    extra = f" (+{round(100 * (r.plan_macs - r.macs) / r.macs)}%)" if r.macs else ""
    return f"{r.plan_macs:,} {r.plan or ''}{extra}"


def format_table(reports: Sequence[LayerReport]) -> str:
    """The reports as a text table, followed by their warnings.

    Example:
        >>> import padkit.nn as pnn
        >>> table = format_table(inspect_model(pnn.MaxPool1d(2, padding=((0, 1),))))
        >>> table.splitlines()[1].split()[:9]
        ['(model)', 'MaxPool1d', '2', '2', '1', '?', '?', '(0,1)', 'NOTSET']
        >>> table.splitlines()[3]
        '1 layer(s): 1 asymmetric, 0 input-size dependent, 1 warning(s)'
    """
    if not reports:
        return "no conv or pool layers found"
    onnx_side = all(r.source == "onnx" for r in reports)
    last = "imports as" if onnx_side else "exports to"
    header = [
        "layer",
        "op",
        "kernel",
        "stride",
        "dil",
        "in",
        "out",
        "pads",
        "auto_pad",
        "sym",
        "size-dep",
        "MACs",
        "run MACs",
        last,
    ]
    counted = any(r.macs is not None for r in reports)  # MAC columns only where sizes are known
    rows = [header]
    for r in reports:
        pads = _pairs_text(r.pads) if r.pads is not None else f"{r.padding} (size?)"
        sym = "?" if r.symmetric is None else ("yes" if r.symmetric else "no")
        rows.append(
            [
                r.name,
                r.op,
                _axes_text(r.kernel),
                _axes_text(r.stride),
                _axes_text(r.dilation),
                _axes_text(r.input_size),
                _axes_text(r.output_size),
                pads,
                r.auto_pad,
                sym,
                "yes" if r.size_dependent else "no",
                "?" if r.macs is None else f"{r.macs:,}",
                _run_macs_text(r),
                (r.imports_as if onnx_side else r.exports_to) or "",
            ]
        )
    if not counted:
        rows = [row[:-3] + row[-1:] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths)) + "  " + row[-1]
        for row in rows
    ]
    n_asym = sum(1 for r in reports if r.symmetric is False)
    n_dep = sum(1 for r in reports if r.size_dependent)
    n_warn = sum(len(r.warnings) for r in reports)
    lines.append("")
    lines.append(
        f"{len(reports)} layer(s): {n_asym} asymmetric, {n_dep} input-size dependent, "
        f"{n_warn} warning(s)"
    )
    if any(r.pads is None for r in reports):
        lines.append("  pads marked (size?) depend on the input size: give --input-shape")
    for r in reports:
        for w in r.warnings:
            lines.append(f"  {r.name}: {w}")
    folds = [f for r in reports for f in r.folded]
    if folds:
        lines.append(f"folds at import (padkit.onnx.load): {len(folds)}")
        lines += [f"  {f}" for f in folds]
    return "\n".join(lines)
