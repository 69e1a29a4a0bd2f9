"""Norms over space on the a-trous lattice: statistics per phase.

A norm whose statistics span the spatial axes (``group_norm``, ``instance_norm``, a
``layer_norm`` over H and W) reads every position of its map. After :func:`dilate` the map
past the output stride is dense: the original's map is its lattice ``x[..., ::f, ::f]``
(phase ``(0, 0)``), and the other ``f * f`` phases are the maps of the same network shifted
by a fraction of its old stride. Statistics over the dense map would mix the phases; taken
per phase they are, on phase ``(0, 0)``, exactly the original's. :class:`LatticeNorm`
replaces the norm call in the module's own code by the same call on each phase in turn,
with the same parameters (same ``state_dict`` keys; the module keeps its class).
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
from torch import Tensor

__all__ = ["LatticeNorm", "lattice_norm"]

#: the norms over space that a lattice makes exact, and the argument that holds the input
NORMS = ("group_norm", "instance_norm", "layer_norm")


def lattice_norm(
    func: Any, x: Tensor, spec: tuple[tuple[int, int], ...], args: Any, kwargs: Any
) -> Tensor:
    """``func(x, *args, **kwargs)`` with its statistics taken per phase of the lattice
    ``spec`` (``(axis, factor)`` pairs): each phase ``x[..., p::f, ...]`` normalised on its
    own and written back in place of the dense map's cells. Phases with no cells (a map
    shorter than its factor) are skipped."""
    out = torch.empty_like(x)
    axes = [a for a, _ in spec]
    for phase in itertools.product(*(range(f) for _, f in spec)):
        index: list[Any] = [slice(None)] * x.dim()
        for a, p, (_, f) in zip(axes, phase, spec):
            index[a] = slice(p, None, f)
        sub = x[tuple(index)]
        if sub.numel() == 0:
            continue
        out[tuple(index)] = func(sub, *args, **kwargs)
    return out


class LatticeNorm:
    """A replacement for one norm call in a module's own code (a :func:`~padkit.surgery.
    _probe.rewired` edit): the call with statistics per phase of the lattice ``spec``.
    A module-level class holding plain data, so a module rewired with it pickles."""

    def __init__(self, spec: tuple[tuple[int, int], ...]) -> None:
        self.spec = tuple(spec)

    def __call__(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if args:
            x, rest, kw = args[0], tuple(args[1:]), dict(kwargs)
        else:
            kw = dict(kwargs)
            x, rest = kw.pop("input"), ()
        rank = x.dim()
        spec = tuple((a if a >= 0 else a + rank, f) for a, f in self.spec)
        if getattr(func, "__name__", "") == "layer_norm":
            # the normalised shape is the phase's own (no affine weight over space: checked)
            k = len(rest[0] if rest else kw["normalized_shape"])

            def per_phase(sub: Tensor, *a: Any, **kk: Any) -> Tensor:
                if a:
                    a = (tuple(sub.shape[rank - k :]), *a[1:])
                else:
                    kk["normalized_shape"] = tuple(sub.shape[rank - k :])
                return func(sub, *a, **kk)  # type: ignore[no-any-return]

            return lattice_norm(per_phase, x, spec, rest, kw)
        return lattice_norm(func, x, spec, rest, kw)

    def __repr__(self) -> str:
        return f"LatticeNorm({self.spec})"
