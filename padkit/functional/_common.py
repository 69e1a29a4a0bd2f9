"""What every functional op shares: pad modes, argument validation, padding resolution."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from .. import _export
from .._sym import statically_known_true
from ..spec import (
    Padding,
    PaddingError,
    PaddingLike,
    _needs_input_size,
)

#: ``pad`` modes: torch names first, then the ONNX/numpy aliases.
PAD_MODES: tuple[str, ...] = (
    "constant",
    "reflect",
    "replicate",
    "circular",
    "zeros",
    "edge",
    "wrap",
)
_PAD_MODE_CANON = {
    "constant": "constant",
    "zeros": "constant",
    "reflect": "reflect",
    "replicate": "replicate",
    "edge": "replicate",
    "circular": "circular",
    "wrap": "circular",
}

Pairs = tuple[tuple[int, int], ...]


# ----------------------------------------------------------------------------- validation


def _pad_mode(mode: Any) -> str:
    if not isinstance(mode, str) or mode.lower() not in _PAD_MODE_CANON:
        raise PaddingError(f"mode must be one of {PAD_MODES}, got {mode!r}")
    return _PAD_MODE_CANON[mode.lower()]


def _check_input(fname: str, input: Any, nd: int) -> tuple[Tensor, bool]:
    """Returns a batched view of ``input`` and whether the input was unbatched."""
    if not isinstance(input, Tensor):
        raise TypeError(f"{fname}(): input must be a Tensor, got {type(input).__name__}")
    if input.dim() not in (nd + 1, nd + 2):
        raise PaddingError(
            f"{fname}(): expected a {nd + 1}-D (unbatched) or {nd + 2}-D (batched) input, got "
            f"a {input.dim()}-D input of shape {tuple(input.shape)}"
        )
    if input.dim() == nd + 1:
        return input.unsqueeze(0), True
    return input, False


def _check_spatial(fname: str, x: Tensor, nd: int) -> tuple[int, ...]:
    sizes = tuple(x.shape[2:])
    if torch._C._get_tracing_state() and not _export.exporting():
        # torch.jit.trace records sizes as tensors; a traced graph is specialised to the
        # example's shape (torch warns where a size is read), as for any size-dependent Python
        sizes = tuple(int(n) for n in sizes)
    for i, n in enumerate(sizes):
        if n == 0:
            raise PaddingError(
                f"{fname}(): input has size 0 along spatial axis {i} (shape "
                f"{tuple(x.shape)}); every spatial axis needs at least one element"
            )
    return sizes


def _check_fits(fname: str, sizes: Sequence[int], pairs: Pairs, k_eff: Sequence[int]) -> None:
    for i, (n, (lo, hi), ke) in enumerate(zip(sizes, pairs, k_eff)):
        if n + lo + hi < ke:
            raise PaddingError(
                f"{fname}(): along spatial axis {i} the padded input ({n} + {lo} + {hi} = "
                f"{n + lo + hi}) is smaller than the effective kernel ({ke})"
            )


def _parse(padding: PaddingLike, nd: int, fname: str, *, negative: bool = False) -> Padding:
    try:
        return Padding.parse(padding, nd, allow_negative=negative)
    except (PaddingError, TypeError) as err:
        raise type(err)(f"{fname}(): {err}") from None


# ----------------------------------------------------------------------------- resolution


@functools.lru_cache(maxsize=8192)
def _resolve_cached(
    spec: Padding,
    k: tuple[int, ...],
    s: tuple[int, ...],
    d: tuple[int, ...],
    n: tuple[int, ...] | None,
) -> Pairs:
    # the kernel, stride and dilation are an Op's (checked); the sizes a tensor's
    return spec.resolve_checked(k, s, d, n)


def resolve(
    spec: Padding,
    k: tuple[int, ...],
    s: tuple[int, ...],
    d: tuple[int, ...],
    n: Sequence[int],
) -> Pairs:
    """Resolve ``spec`` for an input of spatial size ``n`` (cached per shape)."""
    if _compiling():
        return spec.resolve_checked(k, s, d, tuple(n) if spec.needs_input_size(s) else None)
    if _needs_input_size(spec, s):  # remembered: asked on every eager call
        sizes = tuple(n)
        if all(type(v) is int and v >= 0 for v in sizes):
            return _resolve_cached(spec, k, s, d, sizes)
        return spec.resolve(k, s, d, sizes)
    return _resolve_cached(spec, k, s, d, None)


def _compiling() -> bool:
    """Inside torch.compile/export tracing, where Python-side caches must be bypassed."""
    return bool(torch.compiler.is_compiling())


def _symbolic(sizes: Sequence[Any], strides: Sequence[int], sized: bool) -> bool:
    """Pads that depend on the input size (``sized``: ``same`` at stride > 1) while it is
    traced with dynamic shapes: plans must not branch on them.

    Under ``torch.compile`` a symbolic size is not a ``torch.SymInt`` to Python code (dynamo
    passes it as an int), so the test is what the trace can tell without a guard: a static
    size has a known remainder modulo the stride (all that ``same`` pads depend on), a
    symbolic one has none.
    """
    if not sized or not _compiling():
        return False
    return any(
        s > 1 and not any(statically_known_true(n % s == r) for r in range(s))
        for n, s in zip(sizes, strides)
    )


def _k_eff(k: Sequence[int], d: Sequence[int]) -> tuple[int, ...]:
    return tuple(dd * (kk - 1) + 1 for kk, dd in zip(k, d))


def _torch_pad(pairs: Pairs) -> list[int]:
    return [v for lo_hi in reversed(pairs) for v in lo_hi]


# ----------------------------------------------------------------------------- native backend

#: The optional oneDNN backend: ``_backend.active`` is a hook that runs ops with per-side
#: pads in one oneDNN primitive where that is faster, returning None to decline; None runs
#: the pure-torch plans below unchanged (see padkit.native).
