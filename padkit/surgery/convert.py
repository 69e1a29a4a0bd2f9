"""surgery.convert: exact padkit replacements and padding-convention ports."""

from __future__ import annotations

import copy
import math
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor, nn

from .. import functional as PF
from ..op import TORCH_KINDS as _TORCH_KINDS_ALL, Op
from ..spec import (
    Padding,
    PaddingError,
    _tuple_of,
    conv_output_size,
    pool_output_size,
)
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
    Dispatch,
    PadCall,
    Pairs,
    base_name,
    call_op,
    call_pad,
    module_op,
    own_calls,
    own_run,
    owns,
    pad_rule,
    passthrough,
    rewired,
    rewired_fast,
    sample_sizes,
)
from ._trace import Event, _tensors, probe_like, record

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


_PAD_MODULES: dict[type, tuple[int, str]] = {
    nn.ZeroPad1d: (1, "constant"),
    nn.ZeroPad2d: (2, "constant"),
    nn.ZeroPad3d: (3, "constant"),
    nn.ConstantPad1d: (1, "constant"),
    nn.ConstantPad2d: (2, "constant"),
    nn.ConstantPad3d: (3, "constant"),
    nn.ReflectionPad1d: (1, "reflect"),
    nn.ReflectionPad2d: (2, "reflect"),
    nn.ReflectionPad3d: (3, "reflect"),
    nn.ReplicationPad1d: (1, "replicate"),
    nn.ReplicationPad2d: (2, "replicate"),
    nn.ReplicationPad3d: (3, "replicate"),
    nn.CircularPad1d: (1, "circular"),
    nn.CircularPad2d: (2, "circular"),
    nn.CircularPad3d: (3, "circular"),
}


def _fold(pad: nn.Module, target: nn.Module) -> tuple[_Layer | None, str]:
    """The padkit layer equal to ``target(pad(x))``, or None and the reason it is not exact."""
    nd, mode = _PAD_MODULES[type(pad)]
    p: Any = pad
    value = float(getattr(p, "value", 0.0))
    if isinstance(target, (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)):
        return None, "padding a transposed conv's input is not a crop of its output"
    layer = _layer(target)
    if layer is None:
        return None, f"{type(target).__name__} is not a torch or padkit conv/pool"
    if layer.nd != nd:
        return None, f"a {nd}-d pad before a {layer.nd}-d {type(target).__name__}"
    pads = Padding.from_torch_pad(p.padding, allow_negative=True)
    added = tuple(a for a in pads.axes if isinstance(a, tuple))
    if any(min(a) < 0 for a in added):
        return None, f"the pad {tuple(p.padding)} crops (negative pads)"
    return _fold_into(layer, type(target).__name__, added, mode, value)


Rule = str | tuple[int, int]


def _fold_into(
    layer: _Layer, name: str, added: Sequence[Rule], mode: str, value: float
) -> tuple[_Layer | None, str]:
    """The padkit layer equal to ``layer`` run on its input padded by ``added`` (per axis:
    static ``(lo, hi)`` pads or a same-family rule), or None and the reason it is not
    exact."""
    own = layer.static_pairs()
    if own is None:
        return None, f"its padding {layer.padding.describe()} depends on the input size"
    has_own = any(v != 0 for pair in own for v in pair)
    axes: list[Rule] = []
    for rule, pair in zip(added, own):
        if isinstance(rule, str):
            if pair != (0, 0):
                return None, f"a {rule!r} pad followed by {name}'s own padding {own}"
            axes.append(rule)
        else:
            axes.append((rule[0] + pair[0], rule[1] + pair[1]))
    total = Padding(tuple(axes))
    if mode != "constant":
        if layer.kind != "conv":
            return None, f"{mode} padding before a pool has no padkit pool equivalent"
        if has_own:
            return None, f"{mode} padding followed by the conv's own padding {own}"
        return replace(layer, padding=total, padding_mode=mode), mode
    if layer.kind == "conv":
        if value != 0.0:
            return None, f"constant value {value} (a conv pads with zeros)"
        if has_own and layer.padding_mode != "zeros":
            return None, f"the conv pads again with padding_mode={layer.padding_mode!r}"
        return replace(layer, padding=total, padding_mode="zeros"), "zeros"
    if layer.ceil_mode:
        return None, "ceil_mode on the explicitly padded input drops windows differently"
    if layer.kind == "max":
        if value != -math.inf:
            return None, (
                f"a max pool after padding with {value} is exact only if no input is below "
                f"{value}; padkit's max pools pad with -inf"
            )
        if layer.return_indices:
            return None, "return_indices refer to the padded input"
        return replace(layer, padding=total), "-inf"
    if value != 0.0:
        return None, f"constant value {value} (padkit's {layer.kind} pools pad with zeros)"
    if layer.kind == "avg" and has_own and not layer.count_include_pad:
        return None, "the pool excludes its own pad but counts the explicit zeros"
    return replace(layer, padding=total, count_include_pad=True), "zeros"


# ----------------------------------------------------------------------------- convert: ports


def _style(layer: _Layer) -> list[str]:
    """Per axis: 'same' (same-style: a same-family rule, or torch/timm 'same'-ish symmetric
    pads), 'valid' (no pad, kernel > 1), 'none' (1-wide kernel, no pad) or 'other'."""
    styles = []
    for rule, k, s, d in zip(layer.padding.axes, layer.kernel, layer.stride, layer.dilation):
        k_eff = d * (k - 1) + 1
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
    new = replace(layer, padding=Padding(tuple(axes)))
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
    try:
        return Padding((rule,)).resolve(
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

    # 2. explicit pad modules folded into the next conv/pool of an nn.Sequential
    by_id = _paths_by_id(out)
    in_sequence: set[int] = set()
    for path, seq in list(out.named_modules()):
        if type(seq) is not nn.Sequential:
            continue
        names = list(seq._modules)
        for i, name in enumerate(names):
            pad = seq._modules[name]
            if pad is None or type(pad) not in _PAD_MODULES:
                continue
            in_sequence.add(id(pad))
            pad_path = f"{path}.{name}" if path else name
            if i + 1 == len(names) or seq._modules[names[i + 1]] is None:
                report.skipped.append(
                    Skip(pad_path, "last in its nn.Sequential: nothing to fold into")
                )
                continue
            nxt = seq._modules[names[i + 1]]
            nxt_path = f"{path}.{names[i + 1]}" if path else names[i + 1]
            if _layer(nxt) is None and not isinstance(
                nxt, (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
            ):
                continue  # not a conv or pool: not a candidate
            if len(by_id[id(nxt)]) > 1 or len(by_id[id(pad)]) > 1:
                report.skipped.append(Skip(pad_path, "the pad or the next layer is shared"))
                continue
            folded, why = _fold(pad, nxt)
            if folded is None:
                report.skipped.append(Skip(pad_path, f"not folded into {nxt_path}: {why}"))
                continue
            new = _build(folded, nxt)
            before = _brief(nxt)
            _replace(out, [nxt_path], new)
            _replace(out, [pad_path], nn.Identity())
            report.changes.append(
                Change(
                    pad_path, repr(pad), "Identity", ("folded",), False, f"folded into {nxt_path}"
                )
            )
            report.changes.append(
                Change(
                    nxt_path,
                    before,
                    _brief(new),
                    ("padding",),
                    False,
                    f"takes the {why} pad of {pad_path}",
                )
            )
    # 3. pads written in code (pad modules outside an nn.Sequential, F.pad in a forward)
    code = _CodePads(out, report)
    out = code.run()
    listed = {s.path for s in report.skipped} | {c.path for c in report.changes}
    for path, module in out.named_modules():
        if type(module) in _PAD_MODULES and path not in listed:
            reason = (
                "not called in the forward of a probe input: what it feeds is unknown, not folded"
                if code.traced and path not in code.called
                else "not inside an nn.Sequential: what it feeds is unknown, not folded"
            )
            report.skipped.append(Skip(path, reason))

    # 4. convention port
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
        text = (
            "nothing changed: no layer pads on every forward"
            + ("" if target is None else f", and no layer's numbers change under {target!r}")
            + why
        )
        report.notes.append(text)
        warnings.warn(f"convert(): {text}", UserWarning, stacklevel=2)
    return out, report


def _foreign_layers(out: nn.Module, report: SurgeryReport) -> None:
    """List the conv/pool subclasses with a forward of their own (a weight transform, a pad
    in code): convert leaves them, and says so."""
    listed = {s.path for s in report.skipped} | {c.path for c in report.changes}
    for path, module in out.named_modules():
        if path in listed or _layer(module) is not None:
            continue
        cls: Any = type(module)
        if not isinstance(module, _SUBCLASSED) or cls in _PLAIN_OR_PADKIT:
            continue
        if cls.forward in _TORCH_FORWARDS or _owned_call(module) is not None:
            continue
        report.skipped.append(
            Skip(
                path,
                f"{cls.__name__} subclasses {_torch_base(module).__name__} with a forward of its "
                "own that does not compute one conv with the module's own stride/padding/"
                "dilation/groups (e.g. a pad in code); convert leaves it as it is",
            )
        )


_SUBCLASSED: tuple[type[nn.Module], ...] = (
    nn.modules.conv._ConvNd,
    nn.modules.pooling._MaxPoolNd,
    nn.modules.pooling._AvgPoolNd,
)
_PLAIN_OR_PADKIT: frozenset[type] = frozenset(_CONV) | frozenset(
    t for t in _TORCH_KINDS_ALL if not t.__name__.startswith("ConvTranspose")
)
_TORCH_FORWARDS = frozenset(getattr(t, "forward", None) for t in _TORCH_KINDS_ALL)


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
    m: Any = module
    n = max(own.k_eff) + 2 * max(own.stride) + 1
    x = torch.randn(1, 2, *([n] * own.nd))
    try:
        calls = own_calls(module, x)
    except Exception:
        return None
    found = [op for op in (call_op(c[0], c[1], c[2]) for c in calls) if op is not None]
    if len(found) != 1 or not owns(m, found[0]):
        return None
    if any(call_pad(c[0], c[1], c[2]) is not None for c in calls):
        return None
    return own


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
    try:
        calls = own_calls(module, x)
    except Exception:
        return None
    ops = [call_op(name, args, kwargs) for name, args, kwargs, _ in calls]
    found = [op for op in ops if op is not None]
    if len(found) != 1 or not owns(module, found[0]):
        return None
    if any(call_pad(name, args, kwargs) is not None for name, args, kwargs, _ in calls):
        return None
    return own


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


# ----------------------------------------------------------------------------- pads in code

_Edit = Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]


def _identity(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return args[0] if args else kwargs["input"]


class _PadkitCall:
    """A replacement for a functional conv/pool call: padkit's functional with ``layer``'s
    padding, the call's own tensors (input, weight, bias). A module-level class (holding
    the record), so a module rewired with it pickles."""

    def __init__(self, layer: _Layer) -> None:
        self.layer = layer

    def __call__(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        layer, nd = self.layer, self.layer.nd
        x = args[0] if args else kwargs["input"]
        if layer.kind == "conv":
            w = args[1] if len(args) > 1 else kwargs["weight"]
            b = args[2] if len(args) > 2 else kwargs.get("bias")
            return getattr(PF, f"conv{nd}d")(
                x,
                w,
                b,
                layer.stride,
                layer.padding,
                layer.dilation,
                layer.groups,
                padding_mode=layer.padding_mode,
            )
        if layer.kind == "max":
            return getattr(PF, f"max_pool{nd}d")(
                x,
                layer.kernel,
                layer.stride,
                layer.padding,
                layer.dilation,
                layer.ceil_mode,
                layer.return_indices,
            )
        return getattr(PF, f"avg_pool{nd}d")(
            x,
            layer.kernel,
            layer.stride,
            layer.padding,
            layer.ceil_mode,
            layer.count_include_pad,
            layer.divisor_override,
        )


def _rule_text(rules: Sequence[Rule]) -> str:
    if all(isinstance(r, tuple) for r in rules):
        return f"static {tuple(rules)}"
    return (
        "TF "
        + "/".join(sorted({repr(r) for r in rules if isinstance(r, str)}))
        + (" (amounts computed from the input size)")
    )


class _CodePads:
    """Pads a model computes in code (a pad module outside an nn.Sequential, ``F.pad`` with
    amounts from the input size, from int attributes or 0-d buffers) folded into the conv
    or pool that reads them. One traced forward finds each pad call and the one call that
    reads its output; the module running the pad, alone at many input sizes, tells the rule
    behind its amounts (static, or TF 'same'/'same_lower' for the reader's kernel, stride
    and dilation)."""

    def __init__(self, out: nn.Module, report: SurgeryReport) -> None:
        self.out = out
        self.report = report
        self.swaps: dict[str, nn.Module] = {}
        self.edits: dict[str, dict[tuple[str, int], _Edit]] = {}
        self.notes: dict[str, list[str]] = {}
        self.changes: list[Change] = []
        self.skips: list[Skip] = []
        self.called: set[str] = set()
        self.traced = False
        self.edited: set[int] = set()

    @staticmethod
    def opaque(m: nn.Module) -> bool:
        return Op.from_module(m) is not None

    def run(self) -> nn.Module:
        try:
            shape, like = probe_like(self.out, "convert")
        except SurgeryError:
            return self.out
        try:
            events = record(self.out, shape, self.opaque, like, once=True)
        except SurgeryError as exc:
            self.report.notes.append(f"pads written in code were not searched: {exc}")
            return self.out
        self.traced = True
        self.events = events
        self.modules = dict(self.out.named_modules())
        self.calls = Counter(e.path for e in events if e.kind == "module")
        self.called = set(self.calls)
        self.by_id = _paths_by_id(self.out)
        for i, event in enumerate(events):
            if event.kind == "function" and "pad" in event.info:
                why = self.fold(i, event)
                if why is not None:
                    self.skips.append(Skip(event.path, why))
        return self.apply()

    def fold(self, i: int, event: Event) -> str | None:
        """Plan the fold of one pad call; the reason it is left in place, or None."""
        pad: PadCall = event.info["pad"]
        owner_path = event.path
        owner = self.modules[owner_path]
        readers = [
            (j, e)
            for j, e in enumerate(self.events)
            if e.info.get("src") == i
            and (
                (e.kind == "function" and "op" in e.info)
                or (e.kind == "module" and self.opaque(self.modules[e.path]))
            )
        ]
        uses = event.info.get("uses", 0)
        if uses != 1 or len(readers) != 1:
            if uses > 1:
                return (
                    f"its {event.name}() output is read {uses} times; only a pad read by one "
                    "conv or pool is folded"
                )
            return f"its {event.name}() output is not read by a conv or pool; left in place"
        j, reader = readers[0]
        reader_path = reader.path
        if reader.kind == "module":
            op = Op.from_module(self.modules[reader_path])
        else:
            op = reader.info["op"]
        if op is None:  # pragma: no cover - readers are conv/pool calls
            return "its reader is not a conv or pool"
        if op.kind == "conv_transpose":
            return "padding a transposed conv's input is not a crop of its output"
        if op.kind not in ("conv", "max", "avg") and reader.kind == "function":
            return f"its reader {reader.name}() has no padkit functional form"
        for path in {owner_path, reader_path}:
            if self.calls.get(path, 0) != 1 or len(self.by_id.get(id(self.modules[path]), [])) > 1:
                return (
                    f"{path or '<root>'!r} is called {self.calls.get(path, 0)} times per forward "
                    "or shared; pads are folded in modules called once"
                )
        if reader_path in self.swaps or (
            reader.kind == "function" and reader_path in self.edits and owner_path != reader_path
        ):
            return f"{reader_path!r} already takes another pad"
        nd = op.nd
        pairs = self._spatial(pad.pairs, nd)
        if pairs is None:
            return f"it pads non-spatial axes ({pad.pairs}) before {reader_path!r}"
        if any(min(p) < 0 for p in pairs):
            return f"it crops (negative pads {pairs})"
        sampled = self.sample(event, i, op)
        if isinstance(sampled, str):
            return sampled
        samples, pad_only, ordinal = sampled
        rules = [pad_rule(samples, op, axis) for axis in range(nd)]
        if any(r is None for r in rules):
            return (
                f"its amounts follow no rule padkit has: neither static nor TF 'same'/"
                f"'same_lower' for the kernel/stride/dilation of {reader_path!r} (samples "
                f"{[(n, p) for n, p in samples[:4]]}...)"
            )
        rules_: list[Rule] = [r for r in rules if r is not None]
        name = type(self.modules[reader_path]).__name__
        folded, why = _fold_into(op, name, rules_, pad.mode, pad.value)
        if folded is None:
            return f"not folded into {reader_path!r}: {why}"
        text = _rule_text(rules_)
        reader_module = self.modules[reader_path]
        if reader.kind == "module":
            new = _build(folded, reader_module)
            self.swaps[reader_path] = new
            after = _brief(new, folded)
        else:
            fname = base_name(reader.name)
            k = sum(
                1
                for e in self.events[:j]
                if e.kind == "function" and e.path == reader_path and base_name(e.name) == fname
            )
            self.edits.setdefault(reader_path, {})[(fname, k)] = _PadkitCall(folded)
            self.notes.setdefault(reader_path, []).append(f"{fname} #{k} padkit {text}")
            after = (
                f"{name} (own forward; its {fname}() runs as padkit's) pads={_pads_text(folded)}"
            )
        self.changes.append(
            Change(
                reader_path,
                _brief(reader_module, op),
                after,
                ("padding",),
                False,
                f"takes the {text} {why} pad of {owner_path or '<root>'!r}",
            )
        )
        pname = base_name(event.name)
        if pad_only and owner_path != reader_path and owner_path not in self.edits:
            self.swaps[owner_path] = passthrough(owner, f"its pad is folded into {reader_path}")
            after = f"{type(owner).__name__} (passthrough: returns its input)"
        else:
            self.edits.setdefault(owner_path, {})[(pname, ordinal)] = _identity
            self.notes.setdefault(owner_path, []).append(f"{pname} #{ordinal} skipped")
            after = f"{type(owner).__name__} (own forward; its {pname}() call #{ordinal} skipped)"
        self.changes.append(
            Change(
                owner_path,
                type(owner).__name__,
                after,
                ("folded",),
                False,
                f"its {text} pad is folded into {reader_path!r}",
            )
        )
        return None

    @staticmethod
    def _spatial(pairs: Sequence[tuple[int, int]], nd: int) -> list[tuple[int, int]] | None:
        pairs = list(pairs)
        while len(pairs) < nd:
            pairs.insert(0, (0, 0))
        extra, spatial = pairs[: len(pairs) - nd], pairs[len(pairs) - nd :]
        if any(p != (0, 0) for p in extra):
            return None
        return spatial

    def sample(
        self, event: Event, i: int, op: Op
    ) -> str | tuple[list[tuple[int, Pairs]], bool, int]:
        """Run the module holding the pad alone at many input sizes: the pads it makes per
        size, whether padding is all it computes, and the pad's ordinal in its own code."""
        owner_path = event.path
        owner = self.modules[owner_path]
        own_event = next(e for e in self.events if e.kind == "module" and e.path == owner_path)
        pad_in = event.ins[0][0]
        if len(own_event.ins[0]) != 1 or own_event.ins[0][0] != pad_in:
            return (
                "its input is not the input of the module running it, which padkit runs "
                "alone to learn the rule behind the amounts; left in place"
            )
        mine = [
            k
            for k, e in enumerate(self.events)
            if e.kind == "function" and e.path == owner_path and "pad" in e.info
        ]
        ordinal, total = mine.index(i), len(mine)
        pname = base_name(event.name)
        same_name = [
            k
            for k, e in enumerate(self.events)
            if e.kind == "function" and e.path == owner_path and base_name(e.name) == pname
        ]
        name_ordinal = same_name.index(i)
        nd = op.nd
        sizes = sorted(
            {pad_in[-nd + a] for a in range(nd)}
            | {n for a in range(nd) for n in sample_sizes(op, a, pad_in[-nd + a])}
        )
        lead = (1, *pad_in[1:-nd])
        param = next(iter(owner.parameters()), None)
        dtype = param.dtype if param is not None else torch.float32
        device = param.device if param is not None else None
        samples: list[tuple[int, Pairs]] = []
        pad_only = True
        modes = {m: m.training for m in owner.modules()}
        probe: PadCall = event.info["pad"]
        try:
            owner.eval()
            for n in sizes:
                x = torch.randn(*lead, *([n] * nd), dtype=dtype, device=device)
                try:
                    calls, y = own_run(owner, x)
                except Exception:
                    continue
                pads = [(c, p) for c in calls if (p := call_pad(c[0], c[1], c[2])) is not None]
                if len(pads) == total:
                    (_, cargs, ckw, cout), found = pads[ordinal]
                    src = cargs[0] if cargs else ckw.get("input")
                    if not isinstance(src, Tensor) or tuple(src.shape[-nd:]) != (n,) * nd:
                        return "its input is not the input of its module at other sizes"
                    if (found.mode, found.value) != (probe.mode, probe.value):
                        return "its mode or value changes with the input size"
                    got = self._spatial(found.pairs, nd)
                    if got is None:
                        return "it pads non-spatial axes at other sizes"
                    pairs: Pairs = tuple(got)
                    result = cout
                elif total == 1 and not pads:
                    pairs, result = tuple((0, 0) for _ in range(nd)), x
                else:
                    return "its module pads a varying number of times with the input size"
                others = [
                    c for c in calls if call_pad(c[0], c[1], c[2]) is None and list(_tensors(c[3]))
                ]
                pad_only = pad_only and not others and y is result
                samples.append((n, pairs))
        finally:
            for m, mode in modes.items():
                m.training = mode
        for axis in range(nd):
            s = op.stride[axis]
            if len({n % s for n, _ in samples}) < s or len(samples) < 3:
                return "its module does not run at enough input sizes to tell the rule of its pads"
        return samples, pad_only, name_ordinal

    def _examples(self, path: str, module: nn.Module) -> list[Tensor]:
        """Random inputs for ``module`` at its traced size and two larger ones (an odd and
        an even step), to check a fast rewired copy against the rewired one."""
        event = next((e for e in self.events if e.kind == "module" and e.path == path), None)
        if event is None or len(event.ins[0]) != 1 or len(event.ins[0][0]) < 3:
            return []
        shape = event.ins[0][0]
        param = next(iter(module.parameters()), None)
        dtype = param.dtype if param is not None else torch.float32
        device = param.device if param is not None else None
        g = torch.Generator().manual_seed(0)
        return [
            torch.randn(*shape[:2], *(n + extra for n in shape[2:]), generator=g).to(
                device=device, dtype=dtype
            )
            for extra in (0, 1, 2)
        ]

    def apply(self) -> nn.Module:
        out = self.out
        for path, new in self.swaps.items():
            _replace(out, self.by_id[id(self.modules[path])], new)
        for path, table in self.edits.items():
            module = out.get_submodule(path)
            note = "; ".join(self.notes.get(path, []))
            new = rewired_fast(module, Dispatch(table), note, self._examples(path, module))
            if path == "":
                out = new
            else:
                _replace(out, self.by_id[id(self.modules[path])], new)
        order = {p: k for k, (p, _) in enumerate(out.named_modules(remove_duplicate=False))}
        self.changes.sort(key=lambda c: order.get(c.path, -1))
        self.report.changes.extend(self.changes)
        changed = {c.path for c in self.changes}
        self.report.skipped = [s for s in self.report.skipped if s.path not in changed]
        listed = {s.path for s in self.report.skipped}
        for skip in self.skips:
            if skip.path not in listed:
                self.report.skipped.append(skip)
                listed.add(skip.path)
        self.edited = {id(out.get_submodule(p)) for p in self.edits}
        return out
