"""Optional native backend: per-side pads inside one oneDNN primitive, forward and backward.

PyTorch's CPU conv and pool kernels take one symmetric pad per axis, so per-side pads
cost padkit a padded copy of the input on some layers (dense stride-2 convs, the stem,
pools in some layouts). oneDNN, the library under torch's own CPU convolutions, takes
``padding_l`` and ``padding_r`` separately. This package builds a small C++ library over
oneDNN (from the ``onednn-cpu-gomp`` wheels: ``pip install 'padkit[native]'``), loads it
with ctypes and lets padkit's planner route the ops where it measured faster
(:mod:`padkit.native._policy`). Without the extra or a compiler padkit runs exactly as
before.

Turn it on with :func:`enable` (or ``PADKIT_NATIVE=1`` in the environment before
``padkit.functional`` is imported); :func:`disable` turns it off. See docs/native.md.

Example:
    >>> import padkit.native as native
    >>> native.enable(required=False) in (True, False)
    True
    >>> native.disable()
"""

from __future__ import annotations

from typing import Any

from . import _build, _dispatch, _ops
from ._build import BuildError
from ._ops import NativeError

__all__ = [
    "BuildError",
    "NativeError",
    "available",
    "clear_cache",
    "disable",
    "enable",
    "enabled",
    "info",
    "load",
]

_state: dict[str, Any] = {"lib": None, "error": None}


def load() -> _build.Library:
    """Build (once, cached on disk) and load the library; raises :class:`BuildError`."""
    lib: _build.Library | None = _state["lib"]
    if lib is None:
        try:
            lib = _build.build()
        except BuildError as err:
            _state["error"] = str(err)
            raise
        _state["lib"] = lib
        _ops.set_library(lib)
    return lib


def available() -> bool:
    """Whether the backend builds and loads here (builds it on the first call)."""
    try:
        load()
    except BuildError:
        return False
    return True


def enable(*, required: bool = True) -> bool:
    """Route padkit's ops to the backend where it wins; returns whether it is on.

    ``required=False`` returns False (instead of raising :class:`BuildError`) where the
    backend cannot be built or loaded.
    """
    try:
        load()
    except BuildError:
        if required:
            raise
        return False
    from .. import functional

    functional._native = _dispatch.HOOK
    _dispatch.HOOK.generation += 1
    return True


def disable() -> None:
    """Back to padkit's pure-torch plans."""
    from .. import functional

    functional._native = None
    _dispatch.HOOK.generation += 1


def enabled() -> bool:
    """Whether padkit currently routes ops to the backend."""
    from .. import functional

    return functional._native is not None


def clear_cache() -> None:
    """Drop the library's cached primitives and reordered weights.

    Reordered weights are reused while the weight tensor, its data pointer and its version
    counter are unchanged; a write through ``weight.data`` bypasses the version counter,
    so call this after one.
    """
    lib: _build.Library | None = _state["lib"]
    if lib is not None:
        lib.lib.padkit_clear_cache()


def info() -> dict[str, Any]:
    """What is loaded: library path, oneDNN version, and why not, if it is not."""
    lib: _build.Library | None = _state["lib"]
    return {
        "enabled": enabled(),
        "library": None if lib is None else str(lib.path),
        "onednn": None if lib is None else lib.runtime_version,
        "onednn_root": None if lib is None else str(lib.onednn.lib),
        "error": _state["error"],
        "fallbacks": dict(_dispatch.HOOK.fallbacks),
    }
