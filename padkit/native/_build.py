"""Find oneDNN, compile ``padkit_dnnl.cpp`` once per (source, oneDNN, compiler), load it.

The library is a few hundred lines of C++ over oneDNN's C++ API with no torch headers, so
it builds in seconds with any C++17 compiler. oneDNN comes from the ``onednn-cpu-gomp``
and ``onednn-devel-cpu-gomp`` wheels (the ``native`` extra), or from a directory with
``include/`` and ``lib/`` named by ``PADKIT_ONEDNN_ROOT``. Built libraries are cached in
``PADKIT_NATIVE_CACHE``, else ``$XDG_CACHE_HOME/padkit/native``, else
``~/.cache/padkit/native``; the compiler is ``$CXX``, else ``g++``, else ``c++``.

A build says so before it starts (it takes seconds): through the ``padkit.native`` logger
at INFO where the application has configured logging, else as one line on stderr. A new
build removes the builds in the cache that no process has loaded for a week
(:func:`prune`).
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.metadata as md
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BuildError", "Library", "NotInstalled", "build", "find_onednn", "prune"]

log = logging.getLogger("padkit.native")

SOURCE = Path(__file__).with_name("padkit_dnnl.cpp")
ABI = 1
#: a cached build that no process has loaded for this long is removed by the next build
STALE_AFTER_S = 7 * 24 * 3600
#: a build's modification time is its last load, refreshed at most this often
_TOUCH_EVERY_S = 3600


#: oneDNN's ``dnnl_cpu_isa_t`` values (oneapi/dnnl/dnnl_types.h) by name
ISA_NAMES = {
    0x0: "default",
    0x1: "sse41",
    0x3: "avx",
    0x7: "avx2",
    0xF: "avx2_vnni",
    0x1F: "avx2_vnni_2",
    0x27: "avx512_core",
    0x67: "avx512_core_vnni",
    0xE7: "avx512_core_bf16",
    0x1EF: "avx512_core_fp16",
    0xFEF: "avx512_core_amx",
    0x1FEF: "avx512_core_amx_fp16",
}


class BuildError(RuntimeError):
    """The native backend cannot be built or loaded here (the message says why and what
    to do: its first line alone is a complete sentence)."""


class NotInstalled(BuildError):
    """Neither of the native extra's oneDNN wheels is installed and ``PADKIT_ONEDNN_ROOT``
    is unset: the backend was not asked for (padkit does not warn about it)."""


@dataclass(frozen=True)
class OneDNN:
    include: Path
    lib: Path
    version: tuple[int, int, int]


def _dist_file(dist: str, suffix: str) -> Path | None:
    try:
        files = md.distribution(dist).files or []
    except md.PackageNotFoundError:
        return None
    for f in files:
        if str(f).replace("\\", "/").endswith(suffix):
            return Path(str(md.distribution(dist).locate_file(f))).resolve()
    return None


def _version(include: Path) -> tuple[int, int, int]:
    text = (include / "oneapi" / "dnnl" / "dnnl_version.h").read_text()
    parts = [re.search(rf"#define DNNL_VERSION_{n}\s+(\d+)", text) for n in ("MAJOR", "MINOR")]
    patch = re.search(r"#define DNNL_VERSION_PATCH\s+(\d+)", text)
    if parts[0] is None or parts[1] is None:
        raise BuildError(f"cannot read oneDNN's version from {include}")
    return (int(parts[0].group(1)), int(parts[1].group(1)), int(patch.group(1)) if patch else 0)


def find_onednn() -> OneDNN:
    """oneDNN's headers and library: ``PADKIT_ONEDNN_ROOT``, else the ``onednn-*-gomp`` wheels."""
    root = os.environ.get("PADKIT_ONEDNN_ROOT")
    if root:
        include, lib = Path(root) / "include", Path(root) / "lib"
        if not (include / "oneapi" / "dnnl" / "dnnl.hpp").is_file():
            raise BuildError(f"PADKIT_ONEDNN_ROOT={root!r} has no include/oneapi/dnnl/dnnl.hpp")
    else:
        header = _dist_file("onednn-devel-cpu-gomp", "oneapi/dnnl/dnnl.hpp")
        so = _dist_file("onednn-cpu-gomp", "libdnnl.so.3") or _dist_file(
            "onednn-cpu-gomp", "libdnnl.so"
        )
        if header is None or so is None:
            kind = NotInstalled if header is None and so is None else BuildError
            raise kind(
                "oneDNN is not installed: pip install 'padkit[native]' (the onednn-cpu-gomp and "
                "onednn-devel-cpu-gomp wheels), or set PADKIT_ONEDNN_ROOT to a directory with "
                "include/ and lib/"
            )
        include, lib = header.parent.parent.parent, so.parent
    version = _version(include)
    if version[0] != 3:
        raise BuildError(f"padkit's native backend needs oneDNN 3.x, found {version}")
    return OneDNN(include, lib, version)


def _compiler() -> str:
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        raise BuildError("no C++ compiler found: install g++, or set CXX to a C++17 compiler")
    if shutil.which(cxx) is None:
        raise BuildError(
            f"compiling the native backend failed: cannot run CXX={cxx!r} (not found); "
            "install g++, or set CXX to a C++17 compiler"
        )
    return cxx


def _cache_dir() -> Path:
    env = os.environ.get("PADKIT_NATIVE_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "padkit" / "native"


class Library:
    """The loaded shared library with its C signatures."""

    def __init__(self, path: Path, onednn: OneDNN) -> None:
        self.path = path
        self.onednn = onednn
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as err:
            raise BuildError(f"cannot load {path} (remove it to build it again): {err}") from None
        if lib.padkit_dnnl_abi() != ABI:
            raise BuildError(f"{path} has another ABI than this padkit")
        p, i64 = ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64)
        sigs = {
            "padkit_conv_fwd": [i64, p, p, p, p],
            "padkit_conv_bwd_data": [i64, p, p, p],
            "padkit_conv_bwd_weights": [i64, p, p, p, p],
            "padkit_pool_workspace": [i64, i64],
            "padkit_pool_fwd": [i64, p, p, p],
            "padkit_pool_bwd": [i64, p, p, p],
        }
        for name, args in sigs.items():
            fn = getattr(lib, name)
            fn.argtypes = args
            fn.restype = ctypes.c_int
        lib.padkit_impl.argtypes = [i64, ctypes.c_int, ctypes.c_char_p, ctypes.c_int64]
        lib.padkit_impl.restype = ctypes.c_int
        lib.padkit_cache_mark.argtypes = []
        lib.padkit_cache_mark.restype = ctypes.c_int64
        lib.padkit_cache_drop_since.argtypes = [ctypes.c_int64]
        lib.padkit_cache_drop_since.restype = ctypes.c_int
        lib.padkit_dnnl_error.restype = ctypes.c_char_p
        lib.padkit_dnnl_version.argtypes = [i64]
        lib.padkit_cpu_isa.argtypes = [i64]
        self.lib = lib
        v = (ctypes.c_int64 * 3)()
        lib.padkit_dnnl_version(v)
        self.runtime_version = (int(v[0]), int(v[1]), int(v[2]))
        lib.padkit_cpu_isa(v)
        #: the instruction set oneDNN dispatches to here (``ONEDNN_MAX_CPU_ISA`` lowers it)
        self.isa = ISA_NAMES.get(int(v[0]), hex(int(v[0])))

    def error(self) -> str:
        msg: bytes = self.lib.padkit_dnnl_error()
        return msg.decode(errors="replace")


def _announce(message: str) -> None:
    """``message`` through the ``padkit.native`` logger at INFO where the application has
    configured logging (any handler on it or above it), else as one line on stderr."""
    if log.hasHandlers():
        log.info(message)
    else:
        print(f"padkit: {message}", file=sys.stderr, flush=True)


def _touch(path: Path) -> None:
    """Record that ``path`` is in use (its modification time), for :func:`prune`; at most
    once an hour, and never an error (a read-only cache keeps its builds)."""
    try:
        if time.time() - path.stat().st_mtime > _TOUCH_EVERY_S:
            os.utime(path)
    except OSError:
        pass


def prune(cache: Path, keep: Path, now: float | None = None) -> list[Path]:
    """Remove the builds in ``cache`` other than ``keep`` that no process has loaded for
    :data:`STALE_AFTER_S` (a week), and the leftovers of builds interrupted as long ago.

    Each load refreshes its build's modification time (:func:`_touch`), so a build that
    another padkit (another version, virtual environment or compiler) still uses stays. A
    process that has a removed build loaded keeps running it (on Linux the file lives on
    until the last mapping goes); one that found it just before it went builds it again
    (:func:`build`).
    """
    now = time.time() if now is None else now
    removed = []
    for path in sorted(cache.glob("padkit_dnnl-*.so")):
        if path == keep:
            continue
        try:
            if now - path.stat().st_mtime > STALE_AFTER_S:
                path.unlink()
                removed.append(path)
        except OSError:
            continue  # gone already, or not ours to remove
    return removed


def _compile(cxx: str, flags: list[str], onednn: OneDNN, out: Path, verbose: bool) -> None:
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix="padkit_dnnl-building-", suffix=".so", dir=out.parent)
    except OSError as err:
        raise BuildError(
            f"cannot write the native backend to {out.parent} ({err}); set "
            "PADKIT_NATIVE_CACHE to a writable directory"
        ) from None
    os.close(fd)
    cmd = [
        cxx,
        *flags,
        str(SOURCE),
        f"-I{onednn.include}",
        f"-L{onednn.lib}",
        "-ldnnl",
        f"-Wl,-rpath,{onednn.lib}",
        "-o",
        tmp,
    ]
    _announce(f"building padkit's oneDNN kernels (once, a few seconds) in {out.parent}")
    start = time.perf_counter()
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as err:
        os.unlink(tmp)
        raise BuildError(
            f"compiling the native backend failed: cannot run {cxx} ({err}); install g++, "
            "or set CXX to a C++17 compiler"
        ) from None
    if res.returncode != 0:
        os.unlink(tmp)
        raise BuildError(
            f"compiling the native backend failed ({cxx} exited with {res.returncode}; its "
            "output is in padkit.native.info()['error'])\n"
            + " ".join(cmd)
            + "\n"
            + res.stderr[-4000:]
        )
    if verbose:
        print(" ".join(cmd), file=sys.stderr)
    os.replace(tmp, out)
    log.info("built %s in %.1f s", out, time.perf_counter() - start)
    for old in prune(out.parent, out):
        log.info("removed %s (not loaded for %d days)", old, STALE_AFTER_S // 86400)


def build(verbose: bool = False) -> Library:
    """Compile (or reuse the cached build of) the backend and load it."""
    onednn = find_onednn()
    cxx = _compiler()
    if not sys.platform.startswith("linux"):
        raise BuildError(f"padkit's native backend is built for Linux only, not {sys.platform}")
    src = SOURCE.read_bytes()
    flags = [
        "-O2",
        "-std=c++17",
        "-shared",
        "-fPIC",
        "-fopenmp",
        "-fvisibility=hidden",
        "-fvisibility-inlines-hidden",
    ]
    digest = hashlib.sha256(
        b"\0".join(
            [src, str(onednn.include).encode(), str(onednn.lib).encode(), cxx.encode()]
            + [f.encode() for f in flags]
        )
    ).hexdigest()[:16]
    out = _cache_dir() / f"padkit_dnnl-{digest}.so"
    for attempt in range(2):
        if not out.is_file():
            _compile(cxx, flags, onednn, out, verbose)
        try:
            lib = Library(out, onednn)
        except BuildError:
            if attempt or out.exists():
                raise
            continue  # pruned by another process between the two looks: build it again
        _touch(out)
        return lib
    raise AssertionError("unreachable")  # pragma: no cover
