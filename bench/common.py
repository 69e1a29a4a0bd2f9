"""Timing helpers shared by padkit's benchmarks (``bench/layers.py``, ``bench/models.py``).

Method: every variant of one case runs in the same process, interleaved. Each round
times one block of calls per variant (a block lasts about ``block_s`` seconds); the
order of the variants is reversed every other round, so no variant always runs right
after the same neighbour. A variant's score is the **median over rounds of the paired
ratio** ``block(variant) / block(reference)`` of the same round, reported with the
``[min-max]`` of those per-round ratios. Paired ratios cancel slow drifts in machine
speed (other processes, frequency changes) that absolute times do not.

:class:`CpuMonitor` records, per case, the share of the whole machine's CPU time that
went to *other* processes while the case ran (``/proc/stat`` minus this process's own
``/proc/self/stat``), so the tables can say how noisy each measurement was.

The benchmarks that import this module time padkit's torch plans unless they say
otherwise: the optional oneDNN backend (on by default where its extra is installed) is
turned off here, before padkit loads; ``bench/native_*.py`` turn it on per variant.
"""

from __future__ import annotations

import datetime
import gc
import os
import platform
import re
import resource
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("PADKIT_NATIVE", "0")

import torch

__all__ = [
    "CpuMonitor",
    "Timing",
    "command_line",
    "env_header",
    "fmt_ratio",
    "interleaved",
    "markdown_table",
    "max_abs_diff",
    "measure_case",
]

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


# ----------------------------------------------------------------------------- CPU load


def _machine_jiffies() -> tuple[int, int] | None:
    """(busy, total) jiffies of the whole machine, or None where /proc/stat is missing."""
    try:
        with open("/proc/stat") as fh:
            parts = fh.readline().split()
    except OSError:
        return None
    vals = [int(v) for v in parts[1:9]]  # user nice system idle iowait irq softirq steal
    user, nice, system, idle, iowait, irq, softirq, steal = vals + [0] * (8 - len(vals))
    busy = user + nice + system + irq + softirq + steal
    return busy, busy + idle + iowait


def _own_jiffies() -> int | None:
    """utime + stime of this process (all its threads), in clock ticks."""
    try:
        with open("/proc/self/stat") as fh:
            text = fh.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5)


class CpuMonitor:
    """Share of the machine's CPU time used by other processes while the block runs.

    Example:
        >>> with CpuMonitor() as mon:
        ...     _ = sum(range(1000))
        >>> 0.0 <= mon.other_share <= 1.0
        True
    """

    def __init__(self) -> None:
        self.other_share = 0.0
        self.own_share = 0.0
        self._start: tuple[tuple[int, int] | None, int | None] = (None, None)

    def __enter__(self) -> CpuMonitor:
        self._start = (_machine_jiffies(), _own_jiffies())
        return self

    def __exit__(self, *exc: object) -> None:
        m0, o0 = self._start
        m1, o1 = _machine_jiffies(), _own_jiffies()
        if m0 is None or m1 is None or o0 is None or o1 is None:
            return
        total = m1[1] - m0[1]
        if total <= 0:
            return
        own = o1 - o0
        self.own_share = min(1.0, own / total)
        self.other_share = min(1.0, max(0.0, (m1[0] - m0[0] - own) / total))


# ----------------------------------------------------------------------------- timing


@dataclass
class Timing:
    """One variant of one case.

    Attributes:
        ms: median time per call over rounds, in milliseconds.
        ratio: median over rounds of the paired ratio to the reference variant.
        ratio_min: smallest per-round paired ratio.
        ratio_max: largest per-round paired ratio.
        number: calls per timed block.
        per_round_ms: per-call time of every round.
    """

    ms: float
    ratio: float
    ratio_min: float
    ratio_max: float
    number: int
    per_round_ms: list[float] = field(default_factory=list, repr=False)


def _block(fn: Callable[[], object], number: int) -> float:
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    return time.perf_counter() - t0


def interleaved(
    fns: Mapping[str, Callable[[], object]],
    ref: str,
    *,
    rounds: int = 15,
    block_s: float = 0.015,
    warmup: int = 3,
    max_number: int = 1000,
    inference: bool = True,
) -> dict[str, Timing]:
    """Interleaved paired timing of zero-argument callables against ``fns[ref]``.

    Every variant first runs ``warmup`` times (oneDNN primitive creation, allocator
    and plan caches), then gets a block size of about ``block_s`` seconds. Each round
    times one block per variant, the order reversed every other round. The calls run
    under ``torch.inference_mode()`` unless ``inference=False`` (training steps).

    Example:
        >>> r = interleaved({"a": lambda: None, "b": lambda: None}, "a", rounds=3,
        ...                 block_s=1e-4)
        >>> r["a"].ratio
        1.0
    """
    names = list(fns)
    if ref not in fns:
        raise KeyError(f"reference {ref!r} is not one of {names}")
    gc_was_enabled = gc.isenabled()
    with torch.inference_mode(inference):
        for name in names:
            for _ in range(warmup):
                fns[name]()
        number: dict[str, int] = {}
        for name in names:
            one = min(_block(fns[name], 1) for _ in range(3))
            number[name] = int(max(1, min(max_number, block_s / max(one, 1e-7))))
        per: dict[str, list[float]] = {name: [] for name in names}
        gc.collect()
        gc.disable()
        try:
            for r in range(rounds):
                order = names if r % 2 == 0 else names[::-1]
                for name in order:
                    per[name].append(_block(fns[name], number[name]) / number[name])
        finally:
            if gc_was_enabled:
                gc.enable()
    out: dict[str, Timing] = {}
    for name in names:
        paired = [a / b for a, b in zip(per[name], per[ref])]
        out[name] = Timing(
            ms=statistics.median(per[name]) * 1e3,
            ratio=statistics.median(paired),
            ratio_min=min(paired),
            ratio_max=max(paired),
            number=number[name],
            per_round_ms=[v * 1e3 for v in per[name]],
        )
    return out


def measure_case(
    fns: Mapping[str, Callable[[], object]],
    ref: str,
    *,
    rounds: int = 15,
    block_s: float = 0.015,
    max_other: float | None = None,
    retries: int = 1,
    inference: bool = True,
) -> tuple[dict[str, Timing], float, int]:
    """:func:`interleaved` under a :class:`CpuMonitor`, rerun while others load the CPU.

    ``max_other`` defaults to the share of the CPUs this process's threads do not use
    (plus 5 points): on 2 CPUs at 1 thread, another process may use one CPU, not more.
    Returns the timings of the quietest attempt, its other-process CPU share and the
    number of attempts made.
    """
    if max_other is None:
        cpus = os.cpu_count() or 1
        max_other = max(0.0, 1.0 - torch.get_num_threads() / cpus) + 0.05
    best: tuple[dict[str, Timing], float] | None = None
    attempts = 0
    while attempts <= retries:
        attempts += 1
        with CpuMonitor() as mon:
            res = interleaved(fns, ref, rounds=rounds, block_s=block_s, inference=inference)
        if best is None or mon.other_share < best[1]:
            best = (res, mon.other_share)
        if mon.other_share <= max_other:
            break
    assert best is not None
    return best[0], best[1], attempts


# ----------------------------------------------------------------------------- reporting


def fmt_ratio(t: Timing | None, digits: int = 2) -> str:
    """``1.03 [0.98–1.10]``; blank for a missing variant."""
    if t is None:
        return ""
    return f"{t.ratio:.{digits}f} [{t.ratio_min:.{digits}f}–{t.ratio_max:.{digits}f}]"


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest absolute difference; inf when the shapes differ."""
    if a.shape != b.shape:
        return float("inf")
    return float((a.double() - b.double()).abs().max())


def randomize_bn(model: torch.nn.Module, seed: int = 0, *, affine: bool = True) -> torch.nn.Module:
    """``model`` in eval mode with random BatchNorm2d statistics (and, with ``affine``, scales
    and shifts): a model built with random weights then computes more than the identity in
    each BatchNorm, so a wrong pad or crop shows in its output."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d) and m.running_mean is not None:
                c = m.num_features
                m.running_mean.copy_(torch.randn(c, generator=g) * 0.2)
                m.running_var.copy_(torch.rand(c, generator=g) + 0.5)
                if affine and m.affine:
                    m.weight.copy_(torch.rand(c, generator=g) + 0.5)
                    m.bias.copy_(torch.randn(c, generator=g) * 0.2)
    return model.eval()


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _onednn_version() -> str:
    m = re.search(r"(?:oneDNN|MKL-DNN) v([\w.]+)", torch.__config__.show())
    return m.group(1) if m else "?"


def _git_rev() -> str:
    """The commit the benchmark runs, ``-modified`` where tracked files differ from it, or
    ``?`` outside a git checkout (a copied tree)."""
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty=-modified", "--abbrev=7"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def command_line() -> str:
    """The command that is running, for the docs."""
    return "python " + " ".join(shlex.quote(a) for a in sys.argv)


def isa_line() -> str:
    """What the kernels dispatch to: torch's own (ATen) kernels, and oneDNN as padkit's
    backend reports it (``ONEDNN_MAX_CPU_ISA`` / ``ATEN_CPU_CAPABILITY`` lower them)."""
    aten = torch.backends.cpu.get_cpu_capability()
    try:
        import padkit.native as native

        onednn = native.load().isa
    except Exception as err:  # the backend is optional: say why there is no ISA
        onednn = f"unknown ({type(err).__name__})"
    names = ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")
    caps = ", ".join(f"{k}={os.environ[k]}" for k in names if k in os.environ)
    return f"ATen {aten}, oneDNN {onednn}" + (f" (capped: {caps})" if caps else "")


def env_header(threads: int) -> str:
    """Machine, versions, threads, date and load: the header every benchmark prints."""
    try:
        import timm

        timm_v = timm.__version__
    except ImportError:
        timm_v = "not installed"
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return "\n".join(
        [
            f"- command: `{command_line()}`",
            f"- date: {now}; padkit commit {_git_rev()}",
            f"- machine: {_cpu_model()}, {os.cpu_count()} logical CPUs, {platform.system()}",
            f"- torch {torch.__version__} (oneDNN {_onednn_version()}), timm {timm_v}, "
            f"Python {platform.python_version()}",
            f"- instruction sets: {isa_line()}",
            f"- threads: torch.set_num_threads({threads}); float32; "
            f"load average at start {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}",
        ]
    )


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (inductor's compile workers)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
