"""surgery.convert: exact padkit replacements and padding-convention ports."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor, nn

from .. import functional as PF
from ..op import TORCH_KINDS as _TORCH_KINDS_ALL, Op
from ..recognise import layer_kind, record
from ..spec import (
    Padding,
    PaddingError,
    _tuple_of,
    conv_output_size,
    pool_output_size,
)

# _identity and _PadkitCall are named here too: models converted before the pass moved to
# _code_pads.py pickled them under this module
from ._code_pads import _CodePads, _identity as _identity, _PadkitCall as _PadkitCall
from ._common import (
    _CONV,
    _SAME_RULES,
    PORT_TARGETS,
    Change,
    Skip,
    SurgeryError,
    SurgeryReport,
    _brief,
    _build,
    _check_bool,
    _check_model,
    _Layer,
    _layer,
    _layer_kind,
    _pads_text,
    _paths_by_id,
    _replace,
    _timm_same_convs,
    _timm_same_pools,
)
from ._probe import (
    NOT_HANDLED,
    module_op,
    owns,
    rewired,
)

# ----------------------------------------------------------------------------- convert: exact


def _exact_replacement(module: nn.Module) -> tuple[_Layer, str] | None:
    """The padkit layer that computes what a padding-on-every-forward layer computes."""
    m: Any = module
    t = type(module)
    if t in _timm_same_convs() or t in _timm_same_pools():
        rec = Op.from_module(module)  # timm's same-padding layers read as TF 'same'
        if rec is None:  # pragma: no cover - timm's classes subclass torch's
            return None
        if t.__name__.startswith("Conv2dSame"):
            note = "TF SAME resolved per input size, as timm pads on every forward"
            if t.__name__ == "Conv2dSameExport":
                note += (
                    " (timm's export variant caches its first input size's pad; padkit does not)"
                )
            return rec, note
        if t.__name__ == "MaxPool2dSame":
            return rec, "TF SAME; timm pads with -inf, padkit's pads never win"
        return replace(rec, count_include_pad=True), (
            "TF SAME with the pad counted, as timm computes it whatever its count_include_pad "
            f"({m.count_include_pad}) says (TF/Keras exclude it)"
        )
    found = _layer_kind(module)
    if found is not None and found[0] == "conv" and t in _CONV and m.padding == "same":
        conv = _layer(module)
        if conv is not None:
            return conv, "torch's 'same' (static split, odd pixel at the end) without the copy"
    return None


# ----------------------------------------------------------------------------- convert: ports


def _style(layer: _Layer) -> list[str]:
    """Per axis: 'same' (same-style: a same-family rule, or torch/timm 'same'-ish symmetric
    pads), 'valid' (no pad, kernel > 1), 'none' (1-wide kernel, no pad) or 'other'."""
    styles = []
    pre = layer.padding.pre or ((0, 0),) * layer.nd
    for rule, k, s, d, before in zip(
        layer.padding.axes, layer.kernel, layer.stride, layer.dilation, pre
    ):
        k_eff = d * (k - 1) + 1
        if before != (0, 0):  # static pads, then a rule: no one convention's
            styles.append("other")
            continue
        if isinstance(rule, str):
            styles.append(
                "same" if rule in _SAME_RULES else ("valid" if rule == "valid" else "other")
            )
            continue
        lo, hi = rule
        if lo == hi == 0:
            styles.append("none" if k_eff == 1 else "valid")
        elif lo == hi and lo in (d * (k - 1) // 2, ((s - 1) + d * (k - 1)) // 2):
            styles.append("same")
        elif (lo, hi) in _tf_even(k_eff, s):
            styles.append("same")  # TF SAME's pads at sizes divisible by the stride
        else:
            styles.append("other")
    return styles


def _tf_even(k_eff: int, s: int) -> tuple[tuple[int, int], ...]:
    """The per-side pads TF 'same' / 'same_lower' give at sizes divisible by ``s`` (Hugging
    Face EfficientNet's static ``ZeroPad2d`` pads are these)."""
    total = max(k_eff - s, 0)
    return ((total // 2, total - total // 2), (total - total // 2, total // 2))


def _ported(layer: _Layer, target: str, cip: bool | None) -> _Layer:
    styles = _style(layer)
    axes: list[Any] = []
    for style, rule, k, s, d in zip(
        styles, layer.padding.axes, layer.kernel, layer.stride, layer.dilation
    ):
        if style != "same":
            axes.append(rule)
        elif target == "symmetric":
            if isinstance(rule, str):
                p = ((s - 1) + d * (k - 1)) // 2
                axes.append((p, p))
            else:
                axes.append(rule)
        else:
            axes.append(target)
    new = replace(layer, padding=Padding(tuple(axes), pre=layer.padding.pre))
    if target != "symmetric" and "same" in styles and layer.kind != "conv":
        new = replace(new, ceil_mode=False)  # TF/ONNX SAME has no ceil rounding
    if cip is not None and layer.kind == "avg":
        new = replace(new, count_include_pad=cip)
    return new


def _axis_key(layer: _Layer, axis: int, n: int, lo: int, hi: int) -> tuple[int, ...] | None:
    """What determines one axis's numbers: the first window's offset, the window count and,
    for averages, the pad cells counted. None where the layer cannot run at this size."""
    k, s, d = layer.kernel[axis], layer.stride[axis], layer.dilation[axis]
    k_eff = d * (k - 1) + 1
    if n + lo + hi < k_eff:
        return None
    if layer.kind == "conv":
        out = conv_output_size(n, k, s, d, lo, hi)
    else:
        out = pool_output_size(n, k, s, d, lo, hi, layer.ceil_mode)
    if out < 1:
        return None
    if layer.kind != "avg" or layer.divisor_override is not None:
        return (lo, out)
    reach = (out - 1) * s + k_eff - lo - n  # cells past the end the last window covers
    if not layer.count_include_pad:
        return (lo, out, 0, 0)
    return (lo, out, lo, min(max(reach, 0), hi))


def _axis_pairs(layer: _Layer, axis: int, n: int) -> tuple[int, int] | None:
    rule = layer.padding.axes[axis]
    pre = None if layer.padding.pre is None else (layer.padding.pre[axis],)
    try:
        return Padding((rule,), pre=pre).resolve(
            layer.kernel[axis], layer.stride[axis], layer.dilation[axis], n
        )[0]
    except PaddingError:
        return None


def _differs_at(old: _Layer, new: _Layer, axis: int, n: int) -> bool | None:
    a, b = _axis_pairs(old, axis, n), _axis_pairs(new, axis, n)
    if a is None or b is None:
        return None
    ka, kb = _axis_key(old, axis, n, *a), _axis_key(new, axis, n, *b)
    if ka is None or kb is None:
        return None
    return ka != kb


def _axis_change(old: _Layer, new: _Layer, axis: int, n: int) -> str:
    """``'pads (1, 1) -> (0, 1)'`` (and what else differs) for one axis at size ``n``."""
    a, b = _axis_pairs(old, axis, n), _axis_pairs(new, axis, n)
    text = f"pads {a} -> {b}"
    if old.kind == "avg" and old.count_include_pad != new.count_include_pad:
        text += f", count_include_pad {old.count_include_pad} -> {new.count_include_pad}"
    ka = _axis_key(old, axis, n, *a) if a else None
    kb = _axis_key(new, axis, n, *b) if b else None
    if ka and kb and ka[1] != kb[1]:
        text += f", output size {ka[1]} -> {kb[1]}"
    return text


def _port_detail(old: _Layer, new: _Layer) -> tuple[bool, str]:
    """Whether the numbers change for some input size, and where, in words."""
    parts: list[str] = []
    for axis in range(old.nd):
        s = old.stride[axis]
        k_eff = old.dilation[axis] * (old.kernel[axis] - 1) + 1
        diffs = [n for n in range(1, 2 * (k_eff + 2 * s)) if _differs_at(old, new, axis, n)]
        if not diffs:
            parts.append("")
            continue
        large = [n for n in diffs if n >= k_eff + s]
        example = (large or diffs)[-1]
        residues = sorted({n % s for n in large})
        if large and len(residues) == s:
            where = "at every size"
        elif large and s == 2:
            where = "at even sizes" if residues == [0] else "at odd sizes"
        elif large:
            where = f"at sizes n with n % {s} in {residues}"
        else:
            where = f"at sizes {diffs}"
        parts.append(f"{where} (e.g. n={example}: {_axis_change(old, new, axis, example)})")
    if not any(parts):
        return False, ""
    if len(set(parts)) == 1:
        return True, f"every axis: {parts[0]}"
    return True, "; ".join(f"axis {i}: {p}" for i, p in enumerate(parts) if p)


def _trace_shapes(
    model: nn.Module, paths: Sequence[str] | set[str], input_shape: Sequence[int]
) -> dict[str, tuple[tuple[int, ...], tuple[int, ...] | None]]:
    """The (input shape, output shape) each of ``paths`` first sees in one forward of zeros.

    The model runs once in eval mode under ``no_grad`` and its training flags are restored;
    the output shape is None where the module returns no tensor.
    """
    seen: dict[str, tuple[tuple[int, ...], tuple[int, ...] | None]] = {}
    handles = []
    modules = dict(model.named_modules(remove_duplicate=False))
    for path in paths:

        def hook(_m: nn.Module, args: tuple[Any, ...], out: Any, path: str = path) -> None:
            if path in seen or not args or not isinstance(args[0], Tensor):
                return
            y = out[0] if isinstance(out, (tuple, list)) else out
            seen[path] = (tuple(args[0].shape), tuple(y.shape) if isinstance(y, Tensor) else None)

        handles.append(modules[path].register_forward_hook(hook))
    modes = {m: m.training for m in model.modules()}
    param = next(iter(model.parameters()), None)
    try:
        model.eval()
        x = torch.zeros(
            tuple(input_shape),
            dtype=param.dtype if param is not None else torch.float32,
            device=param.device if param is not None else None,
        )
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
        for m, mode in modes.items():
            m.training = mode
    return seen


# ----------------------------------------------------------------------------- convert


def convert(
    model: nn.Module,
    padding: str | None = None,
    *,
    count_include_pad: bool | None = None,
    input_shape: Sequence[int] | None = None,
    inplace: bool = False,
) -> tuple[nn.Module, SurgeryReport]:
    """Replace padding-on-every-forward layers by exact padkit layers; optionally port the
    model's padding convention.

    Always (exact, same weights, same numbers):

    - timm ``Conv2dSame``/``Conv2dSameExport`` -> ``padkit.nn.Conv2d(padding="same")``;
      ``MaxPool2dSame`` -> ``padkit.nn.MaxPool2d(padding="same")``; ``AvgPool2dSame`` ->
      ``padkit.nn.AvgPool2d(padding="same", count_include_pad=True)`` (timm counts its
      pad whatever ``count_include_pad`` says);
    - torch convs with ``padding='same'`` -> padkit convs with ``"same_static"``;
    - an ``nn.ZeroPad*d``/``ConstantPad*d`` (or reflection/replication/circular pad)
      directly followed by a conv or pool in an ``nn.Sequential`` is folded into that
      layer's padding where the result is exact (the pad module becomes ``nn.Identity``);
      the other cases are reported as skipped.

    With ``padding=`` one of :data:`PORT_TARGETS`, every conv and pool whose padding is
    same-style (a same-family rule, or symmetric ``d*(k-1)//2`` or timm's
    ``((s-1) + d*(k-1))//2``) is switched to that rule, or with ``"symmetric"`` back to
    timm's PyTorch-style symmetric pads. Layers whose numbers change for some input size
    are replaced and reported with ``numbers_change=True``; ``valid`` and 1-wide layers are
    left alone. ``count_include_pad`` (if given) is set on every ported average pool.

    Args:
        model: any ``nn.Module``.
        padding: None (exact replacements only) or one of :data:`PORT_TARGETS`.
        count_include_pad: for ports: the divisor rule of the ported average pools
            (TF/Keras: False).
        input_shape: a full input shape; the report then also says, per ported layer,
            whether its numbers differ at the size it sees for that input.
        inplace: modify ``model`` itself instead of a deep copy.

    Returns:
        ``(model, report)``.

    Example:
        >>> net = torch.nn.Sequential(torch.nn.ZeroPad2d((0, 1, 0, 1)),
        ...                           torch.nn.Conv2d(3, 8, 3, stride=2))
        >>> new, report = convert(net)
        >>> report.paths
        ['0', '1']
        >>> new[1].resolved_padding()
        ((0, 1), (0, 1))
        >>> x = torch.randn(1, 3, 8, 8)
        >>> torch.allclose(new(x), net(x))
        True
        >>> torch_style = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2, padding=1))
        >>> tf, report = convert(torch_style, padding="same")
        >>> report.numbers_changed
        ['0']
    """
    _check_model(model, "convert")
    _check_bool(inplace, "inplace", "convert")
    if padding is not None and (
        not isinstance(padding, str) or padding.lower() not in PORT_TARGETS
    ):
        kind = TypeError if not isinstance(padding, str) else SurgeryError
        raise kind(
            f"convert(): padding must be None (exact replacements only) or one of "
            f"{', '.join(repr(t) for t in PORT_TARGETS)}, got {padding!r}"
        )
    target = padding.lower() if isinstance(padding, str) else None
    if count_include_pad is not None:
        _check_bool(count_include_pad, "count_include_pad", "convert")
        if target is None:
            raise SurgeryError(
                "convert(): count_include_pad is for convention ports; pass padding= too "
                f"(one of {', '.join(repr(t) for t in PORT_TARGETS)})"
            )
    if input_shape is not None:
        if target is None:
            raise SurgeryError("convert(): input_shape is for convention ports; pass padding=")
        shape: Any = input_shape
        if not isinstance(shape, Sequence) or isinstance(shape, str):
            raise TypeError(
                "convert(): input_shape must be a full input shape (a tuple of ints such as "
                f"(1, 3, 224, 224)), got {type(input_shape).__name__} ({input_shape!r})"
            )
        input_shape = _tuple_of(input_shape, len(input_shape), "input_shape")
    out = model if inplace else copy.deepcopy(model)
    report = SurgeryReport("convert")

    # 1. layers that pad on every forward -> padkit layers, exactly
    done: set[int] = set()
    by_id = _paths_by_id(out)
    for path, module in list(out.named_modules()):
        found = _exact_replacement(module)
        if found is None or id(module) in done:
            if _is_dynamic_cond_conv(module):
                report.skipped.append(
                    Skip(path, "CondConv2d pads dynamically inside its own forward; not replaced")
                )
            continue
        layer, note = found
        new = _build(layer, module)
        _replace(out, by_id[id(module)], new)
        done.add(id(new))
        report.changes.append(Change(path, _brief(module), _brief(new), ("class",), False, note))

    # 2. pads before a conv or pool, however written (pad modules, F.pad, torch.cat), read
    # from the model's record
    code = _CodePads(out, report)
    if _imported_onnx(out):
        assert isinstance(out, torch.fx.GraphModule)
        _onnx_pads(out, report)
        if input_shape is None and target is not None:
            input_shape = _declared_shape(out)
    else:
        out = code.run()
    listed = {s.path for s in report.skipped} | {c.path for c in report.changes}
    for path, module in out.named_modules():
        if isinstance(module, _PAD_BASES) and path not in listed and path not in code.called:
            reason = (
                "not called in the forward of a probe input: what it feeds is unknown, not folded"
                if code.traced
                else "the model's forward was not recorded: what it feeds is unknown, not folded"
            )
            report.skipped.append(Skip(path, reason))

    # 3. convention port
    if target is not None:
        _port(
            out,
            target,
            count_include_pad,
            input_shape,
            report,
            code.edited if code.traced else set(),
        )
    _foreign_layers(out, report)
    if not report.changes:
        shown = "; ".join(f"{k.path or '<root>'}: {k.reason}" for k in report.skipped[:3])
        why = f"; left as they were: {shown}" if shown else ""
        # with pads found and left (each with its reason), that is all there is to say
        text = (
            "nothing changed"
            + ("" if report.skipped else ": no layer pads on every forward")
            + ("" if target is None else f", and no layer's numbers change under {target!r}")
            + why
        )
        report.notes.append(text)
        warnings.warn(f"convert(): {text}", UserWarning, stacklevel=2)
    return out, report


def _imported_onnx(model: nn.Module) -> bool:
    """A graph :func:`padkit.onnx.load` made (it declares its ONNX inputs)."""
    return isinstance(model, torch.fx.GraphModule) and "onnx_inputs" in model.meta


def _declared_shape(model: torch.fx.GraphModule) -> tuple[int, ...] | None:
    """The probe input of an imported graph: its one declared input's shape (1 for an
    unknown batch, 64 for other unknown dims), None for several inputs."""
    inputs = model.meta["onnx_inputs"]
    return inputs[0].example_shape() if len(inputs) == 1 else None


def _onnx_pads(model: torch.fx.GraphModule, report: SurgeryReport) -> None:
    """Fold the ``Pad`` nodes of an imported graph read only by convs and pools (any layout:
    the graph says which axes each pads), as the import does; report each fold and each
    pad left in place."""
    from ..onnx._fold import fold_graph

    paths = {
        str(n.meta.get("onnx_node")): str(n.target)
        for n in model.graph.nodes
        if n.op == "call_module"
    }
    before = {p: _brief(model.get_submodule(p)) for p in paths.values()}
    folds = fold_graph(model, "pads")
    for fold in folds:
        pad, into = paths.get(fold.node, fold.node), paths.get(fold.into, fold.into)
        if not fold.done:
            report.skipped.append(Skip(pad, f"not folded into {into}: {fold.detail}"))
            continue
        report.changes.append(
            Change(pad, "OnnxPad", "(removed)", ("folded",), False, f"folded into {into}")
        )
        layer = model.get_submodule(into)
        report.changes.append(
            Change(
                into,
                before.get(into, into),
                _brief(layer),
                ("padding",),
                False,
                f"{fold.detail} of {pad}",
            )
        )
    model.meta["onnx_folds"] = (*model.meta.get("onnx_folds", ()), *(f for f in folds if f.done))


#: torch's pad module bases: a pad module the forward never calls is named by its class
_PAD_BASES: tuple[type, ...] = (
    nn.modules.padding._ConstantPadNd,
    nn.modules.padding._ReflectionPadNd,
    nn.modules.padding._ReplicationPadNd,
    nn.modules.padding._CircularPadNd,
)


def _foreign_layers(out: nn.Module, report: SurgeryReport) -> None:
    """List the conv/pool subclasses with a forward of their own (a weight transform, a pad
    in code): convert leaves them, and says so."""
    listed = {s.path for s in report.skipped} | {c.path for c in report.changes}
    for path, module in out.named_modules():
        if path in listed or _layer(module) is not None:
            continue
        cls: Any = type(module)
        kind = layer_kind(module)
        if kind is None or kind[0] == "lp" or layer_kind(module, plain=True) is not None:
            continue
        if _owned_call(module) is not None:
            continue
        report.skipped.append(
            Skip(
                path,
                f"{cls.__name__} subclasses {_torch_base(module).__name__} with a forward of its "
                "own that does not compute one conv with the module's own stride/padding/"
                "dilation/groups (e.g. a pad in code); convert leaves it as it is",
            )
        )


def _torch_base(module: nn.Module) -> type:
    return next((t for t in type(module).__mro__ if t in _TORCH_KINDS_ALL), type(module))


def _owned_call(module: nn.Module) -> Op | None:
    """:func:`_owned_conv`, and for a pool subclass the facts of its one pool call made
    with its own kernel/stride/padding/dilation (Hugging Face BiT's ``BitMaxPool2d``)."""
    if isinstance(module, nn.modules.conv._ConvNd):
        return _owned_conv(module)
    own = module_op(module)
    if own is None:
        return None
    n = max(own.k_eff) + 2 * max(own.stride) + 1
    return own if _makes_one_own_call(module, torch.randn(1, 2, *([n] * own.nd))) else None


def _owned_conv(module: nn.Module) -> Op | None:
    """The facts of a conv subclass whose own forward makes exactly one conv call, with its
    own stride/padding/dilation/groups (a weight transform before it is fine): run alone on
    a small random input to see what it computes."""
    if not isinstance(module, nn.modules.conv._ConvNd) or isinstance(
        module, (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
    ):
        return None
    own = module_op(module)
    if own is None or own.padding_mode != "zeros":
        return None
    m: Any = module
    n = max(own.k_eff) + 2 * max(own.stride) + 1
    x = torch.randn(1, m.in_channels, *([n] * own.nd), dtype=m.weight.dtype, device=m.weight.device)
    return own if _makes_one_own_call(module, x) else None


def _makes_one_own_call(module: nn.Module, x: Tensor) -> bool:
    """Whether ``module``'s own code (its children's excluded), run alone on ``x`` under the
    recogniser's record, makes exactly one conv or pool call, the one its attributes say
    (:func:`owns`), and no pad."""
    try:
        rec = record(module, x)
    except Exception:
        return False
    root = next((mc.index for mc in rec.modules if mc.parent is None), None)
    if root is None:
        return False
    own = list(rec.own_calls(root))
    found = [c.op for c in own if c.op is not None]
    return len(found) == 1 and owns(module, found[0]) and not any(c.pad is not None for c in own)


class _PaddedConvCall:
    """The handler of a ported conv subclass: its one conv call runs as padkit's conv with
    the target padding (a module-level class, so the ported module pickles)."""

    def __init__(self, name: str, stride: Any, rule: Padding, dilation: Any, groups: int) -> None:
        self.name, self.stride, self.rule = name, stride, rule
        self.dilation, self.groups = dilation, groups

    def __call__(self, call: str, i: int, func: Any, args: Any, kwargs: Any) -> Any:
        if call != self.name or i != 0:
            return NOT_HANDLED
        x, w = args[0], args[1] if len(args) > 1 else kwargs["weight"]
        b = args[2] if len(args) > 2 else kwargs.get("bias")
        conv = getattr(PF, self.name)
        return conv(x, w, b, self.stride, self.rule, self.dilation, self.groups)


def _port_owned(
    out: nn.Module,
    by_id: dict[int, list[str]],
    path: str,
    module: nn.Module,
    layer: Op,
    target: str,
    cip: bool | None,
    report: SurgeryReport,
) -> None:
    """Port a conv subclass that owns its conv call: the same class, its weight transform
    kept, the conv call run by padkit with the target rule."""
    if "other" in _style(layer):
        report.skipped.append(
            Skip(path, f"padding {_pads_text(layer)} is neither same-style nor valid; kept")
        )
        return
    new_layer = _ported(layer, target, cip)
    changed, detail = _port_detail(layer, new_layer)
    if not changed:
        return
    rule = new_layer.padding
    handler = _PaddedConvCall(f"conv{layer.nd}d", layer.stride, rule, layer.dilation, layer.groups)
    new = rewired(module, handler, f"padding={rule.describe()}")
    _replace(out, by_id[id(module)], new)
    report.changes.append(
        Change(
            path,
            _brief(module, layer),
            f"{type(module).__name__} (own forward; padkit conv) pads={_pads_text(new_layer)}",
            ("padding",),
            True,
            detail + "; its weight transform is kept",
        )
    )


def _is_dynamic_cond_conv(module: nn.Module) -> bool:
    return type(module).__name__ == "CondConv2d" and bool(getattr(module, "dynamic_padding", False))


def _port(
    out: nn.Module,
    target: str,
    cip: bool | None,
    input_shape: Sequence[int] | None,
    report: SurgeryReport,
    edited: set[int],
) -> None:
    by_id = _paths_by_id(out)
    plans: list[tuple[str, nn.Module, _Layer, _Layer, str]] = []
    seen: set[int] = set(edited)
    for path, module in list(out.named_modules()):
        layer = _layer(module)
        if layer is None and id(module) not in seen:
            owned = _owned_conv(module)
            if owned is not None:
                seen.add(id(module))
                _port_owned(out, by_id, path, module, owned, target, cip, report)
            continue
        if layer is None or id(module) in seen:
            continue
        seen.add(id(module))
        if layer.padding.ceil_mode:
            report.skipped.append(
                Skip(path, "Caffe ceil rounding: not a same/symmetric convention")
            )
            continue
        styles = _style(layer)
        if "other" in styles:
            report.skipped.append(
                Skip(path, f"padding {_pads_text(layer)} is neither same-style nor valid; kept")
            )
            continue
        new = _ported(layer, target, cip)
        changed, detail = _port_detail(layer, new)
        if not changed:
            continue
        plans.append((path, module, layer, new, detail))
    shapes: dict[str, Any] = {}
    if input_shape is not None:
        shapes = _trace_shapes(out, {p for p, *_ in plans}, input_shape)
    for path, module, layer, new_layer, detail in plans:
        at: bool | None = None
        if input_shape is not None:
            traced = shapes.get(path)
            if traced is None:
                at = None
            else:
                spatial = tuple(traced[0][-layer.nd :])
                at = any(_differs_at(layer, new_layer, i, n) for i, n in enumerate(spatial))
                sees = ", ".join(
                    f"axis {i} n={n}: {_axis_change(layer, new_layer, i, n)}"
                    for i, n in enumerate(spatial)
                )
                detail += f". At input {tuple(input_shape)} it sees {spatial}: {sees}"
        built = _build(new_layer, module)
        _replace(out, by_id[id(module)], built)
        what = (
            ("padding",)
            if layer.count_include_pad == new_layer.count_include_pad
            else (
                "padding",
                "count_include_pad",
            )
        )
        report.changes.append(
            Change(path, _brief(module, layer), _brief(built, new_layer), what, True, detail, at)
        )
