"""Optional native backend: per-side pads inside one oneDNN primitive, forward and backward.

PyTorch's CPU conv and pool kernels take one symmetric pad per axis, so per-side pads
cost padkit a padded copy of the input on some layers (dense stride-2 convs, the stem,
pools in some layouts). oneDNN, the library under torch's own CPU convolutions, takes
``padding_l`` and ``padding_r`` separately. This package builds a small C++ library over
oneDNN (from the ``onednn-cpu-gomp`` wheels: ``pip install 'padkit[native]'``), loads it
with ctypes and runs an op there where it is faster than padkit's torch plan, timed on
this machine on the op's first call and remembered on disk (:mod:`padkit.native._tune`).

With the extra installed and a compiler present the backend is on: it is built (once,
cached) on the first eligible op. ``PADKIT_NATIVE=0`` in the environment, or
:func:`disable`, turns it off; ``PADKIT_NATIVE=1`` builds it at import and raises if it
cannot. The first build says so (one line: "building padkit's oneDNN kernels"). A build
that fails leaves padkit on its torch plans and warns once per process
(:class:`BackendWarning`: the reason and the fix), with the details in :func:`info`;
where oneDNN is not installed at all (the extra was not asked for) it stays silent.
:func:`status` says in one line which of these holds. ``PADKIT_NATIVE_TUNE=0`` or
:func:`set_tuning` ``(False)`` is the deterministic mode (no timing; the static rules of
:mod:`padkit.native._policy`).

Example:
    >>> import padkit.native as native
    >>> native.enable(required=False) in (True, False)
    True
    >>> sorted(k for k in native.info() if k in ("enabled", "isa", "tuning"))
    ['enabled', 'isa', 'tuning']
    >>> native.disable()
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from typing import Any

from . import _build, _dispatch, _ops, _tune
from ._build import BuildError, NotInstalled
from ._ops import NativeError

__all__ = [
    "BackendWarning",
    "BuildError",
    "NativeError",
    "available",
    "clear_cache",
    "disable",
    "enable",
    "enabled",
    "forget_choices",
    "info",
    "load",
    "set_tuning",
    "status",
]

_state: dict[str, Any] = {"lib": None, "error": None, "failure": None, "warned": False}

#: how the CLI recognises (and replaces with its own line) the warning below
WARNING_PREFIX = "padkit's oneDNN backend is off"


class BackendWarning(RuntimeWarning):
    """The backend is on by default (the native extra is installed) but cannot be built
    or loaded here: padkit runs its pure-torch plans. Issued once per process, by the
    first op that would have used the backend; ``PADKIT_NATIVE=0`` turns the backend off
    and with it this warning."""


def load() -> _build.Library:
    """Build (once, cached on disk) and load the library; raises :class:`BuildError`."""
    lib: _build.Library | None = _state["lib"]
    if lib is None:
        try:
            lib = _build.build()
        except BuildError as err:
            _state["error"] = str(err)
            _state["failure"] = err
            raise
        _state["lib"] = lib
        _ops.set_library(lib)
        _dispatch.HOOK.tuner.attach(_build._cache_dir(), lib.isa, lib.runtime_version)
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
    _dispatch.active = _dispatch.HOOK
    return True


def disable() -> None:
    """Back to padkit's pure-torch plans."""
    _dispatch.active = None


def enabled() -> bool:
    """Whether padkit currently routes ops to the backend (building it first if it is on
    by default and no op has run yet)."""
    if isinstance(_dispatch.active, _AutoStart):
        _dispatch.active.start()
    return _dispatch.active is _dispatch.HOOK


def set_tuning(measure: bool) -> None:
    """``True``: time each new op signature (on the workload's own calls in inference)
    and keep the faster side (the default). ``False``: the deterministic mode, where the
    static rules decide. The same switch governs padkit's other timed choice, the layout
    of a transposed conv that would slice its output's end
    (:func:`padkit.functional.shifted_layout`): off, the slice. A model compiled with
    ``torch.compile`` keeps the layout chosen when it was compiled."""
    _dispatch.HOOK.tuner.measure = bool(measure)


def forget_choices() -> None:
    """Drop the measured choices (in memory and the file on disk): ops are timed again."""
    _dispatch.HOOK.tuner.forget()
    _dispatch.HOOK.restart_timings()


def clear_cache() -> None:
    """Drop the library's cached primitives (they are built again on next use).

    Nothing else needs it: the backend keeps no tensor's values between calls (a weight is
    read on every call, however it was changed), its primitives are built per thread
    count, and a forked child starts with an empty cache.
    """
    lib: _build.Library | None = _state["lib"]
    if lib is not None:
        lib.lib.padkit_clear_cache()


def info() -> dict[str, Any]:
    """What is loaded and what it chose.

    ``enabled``; ``library`` (path), ``onednn`` (version), ``onednn_root``; ``isa``: the
    instruction set oneDNN dispatches to on this CPU (after ``ONEDNN_MAX_CPU_ISA``);
    ``cpu``; ``error``: why the backend is not loaded, if it is not; ``fallbacks``: ops
    oneDNN refused; ``tuning``: ``"measured"`` or ``"deterministic"``; ``choices``: each op
    signature timed so far, the side that runs it, both times and whether it was saved
    (measured steadily); ``choices_file``; ``choices_kept``: how many choices are held (at
    most ``choices_limit``, the oldest dropped first); ``signatures_seen``: call signatures
    met so far (the first call of each runs on torch and measures nothing).
    """
    on = enabled()
    lib: _build.Library | None = _state["lib"]
    tuner = _dispatch.HOOK.tuner
    return {
        "enabled": on,
        "library": None if lib is None else str(lib.path),
        "onednn": None if lib is None else lib.runtime_version,
        "onednn_root": None if lib is None else str(lib.onednn.lib),
        "isa": None if lib is None else lib.isa,
        "cpu": tuner.machine.get("cpu"),
        "error": _state["error"],
        "fallbacks": dict(_dispatch.HOOK.fallbacks),
        "tuning": "measured" if tuner.measure else "deterministic",
        "choices": tuner.table() if lib is not None else [],
        "choices_file": None if tuner.path is None else str(tuner.path),
        "choices_kept": len(tuner.choices),
        "choices_limit": _tune.MAX_CHOICES,
        "signatures_seen": _dispatch.HOOK.seen,
    }


def _reason(err: BuildError) -> str:
    """The first line of ``err``: why, and what to do (a complete sentence on its own)."""
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def _warn_unbuilt() -> None:
    """Once per process: the backend that is on by default cannot be built here."""
    err: BuildError | None = _state["failure"]
    if err is None or _state["warned"]:
        return
    _state["warned"] = True
    if isinstance(err, NotInstalled):  # the extra was not asked for: nothing to warn about
        _build.log.info("oneDNN backend off: %s", _reason(err))
        return
    warnings.warn(
        f"{WARNING_PREFIX}: {_reason(err)}. padkit runs its pure-torch plans (slower on some "
        "layers); PADKIT_NATIVE=0 turns the backend off and silences this warning.",
        BackendWarning,
        stacklevel=_caller_level(),
    )


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside padkit and torch (the user's call of
    a layer or function), so that the warning names the user's line."""
    import torch

    here, there = os.path.dirname(os.path.dirname(__file__)), os.path.dirname(torch.__file__)
    inside = (here + os.sep, there + os.sep)
    frame, level = sys._getframe(1), 1  # _warn_unbuilt, which calls warnings.warn
    while frame.f_back is not None and frame.f_code.co_filename.startswith(inside):
        frame, level = frame.f_back, level + 1
    return level


def status() -> str:
    """One line: whether padkit's ops can run on the backend here, and if not, why and
    what to do. Where the backend is on by default and no op has asked for it yet, this
    builds it (as the first op would) to tell."""
    on = enabled()
    lib: _build.Library | None = _state["lib"]
    if on and lib is not None:
        v = ".".join(map(str, lib.runtime_version))
        return f"on (oneDNN {v}, {lib.isa}, {lib.path})"
    err: BuildError | None = _state["failure"]
    if lib is None and err is not None:
        if isinstance(err, NotInstalled):
            return f"off: {_reason(err)}"
        return f"off: {_reason(err)}; padkit runs its pure-torch plans"
    return "off (PADKIT_NATIVE=0 or padkit.native.disable()); padkit runs its pure-torch plans"


class _AutoStart:
    """The backend's default state: on, but not built until the first op asks for it.

    The first call builds and loads the library (once; the build is cached on disk) and
    puts the real hook in place, or, where it cannot be built, turns the backend off and
    keeps the reason for :func:`info`; either way the op then runs.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def start(self) -> Any:
        if _dispatch._traced():  # a tracer or compiler never builds or loads the library
            return None
        with self._lock:
            if _dispatch.active is self:
                on = enable(required=False)
                _dispatch.active = _dispatch.HOOK if on else None
                if not on:
                    _warn_unbuilt()
        return _dispatch.active

    def conv(self, *args: Any, **kwargs: Any) -> Any:
        hook = self.start()
        return None if hook is None else hook.conv(*args, **kwargs)

    def conv_transpose(self, *args: Any, **kwargs: Any) -> Any:
        hook = self.start()
        return None if hook is None else hook.conv_transpose(*args, **kwargs)

    def pool(self, *args: Any, **kwargs: Any) -> Any:
        hook = self.start()
        return None if hook is None else hook.pool(*args, **kwargs)

    def pool_layer(self, *args: Any) -> Any:
        hook = self.start()
        return None if hook is None else hook.pool_layer(*args)


def _after_fork_in_child() -> None:
    """A forked child: locks another thread of the parent may have held are new ones (the
    library's own fork handler empties its primitive cache)."""
    _dispatch.HOOK.tuner.reset_lock()
    if isinstance(_dispatch.active, _AutoStart):
        _dispatch.active._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _from_environment() -> None:
    mode = os.environ.get("PADKIT_NATIVE", "").strip().lower()
    if mode in ("0", "false", "off", "no"):
        _dispatch.active = None
    elif mode in ("1", "true", "on", "yes"):
        enable()  # asked for explicitly: a build failure raises
    else:
        _dispatch.active = _AutoStart()


_from_environment()
