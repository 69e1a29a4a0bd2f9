"""Folding a pad into the conv or pool that reads it: the padkit layer equal to ``layer(pad(x))``
(static pads or a same-family rule, in any pad mode), or the reason none is exact. Which pads
reach a layer is read from the model's record (``_code_pads``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..spec import (
    Padding,
)
from ._common import (
    _Layer,
)

Rule = str | tuple[int, int]


def _fold_into(
    layer: _Layer,
    name: str,
    added: Sequence[Rule],
    mode: str,
    value: float,
    pre: Sequence[tuple[int, int]] | None = None,
) -> tuple[_Layer | None, str]:
    """The padkit layer equal to ``layer`` run on its input padded by ``added`` (per axis:
    static ``(lo, hi)`` pads or a same-family rule), or None and the reason it is not
    exact. ``pre`` are static pads made before ``added`` (a pad that another pad reads),
    on whose output a rule resolves (:attr:`padkit.Padding.pre`)."""
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
    total = Padding(tuple(axes), pre=None if pre is None else tuple(pre))
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
        if layer.return_indices:
            return None, "return_indices refer to the padded input"
        if has_own and value != layer.padding_value:
            return None, (
                f"a pad with {value} followed by {name}'s own padding {own}, which holds "
                f"{layer.padding_value}: a padkit max pool's pads hold one value"
            )
        return replace(layer, padding=total, padding_value=value), f"{value}"
    if value != 0.0:
        return None, f"constant value {value} (padkit's {layer.kind} pools pad with zeros)"
    if layer.kind == "avg" and has_own and not layer.count_include_pad:
        return None, "the pool excludes its own pad but counts the explicit zeros"
    return replace(layer, padding=total, count_include_pad=True), "zeros"
