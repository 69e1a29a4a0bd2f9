"""Which side runs an op: measured on the machine that runs it, remembered on disk.

For each op signature (kind, kernel, stride, dilation, pads, groups, channels, layout,
dtype, a batch and size bucket, training or not, thread count) padkit's torch plan and the
oneDNN primitive are timed and the faster is kept, the way ``torch.backends.cudnn.benchmark``
does: in inference on the workload's own calls, a side a call (:class:`Samples`, within
each layer's :class:`Budget`), where a neighbouring size class of the same layer has no
choice yet (:meth:`Tuner.near`); in training in interleaved rounds on a signature's second
call (:func:`_time_pair`). The choices are written to a
JSON file in the backend's cache directory whose name is a hash of what makes timings
comparable: the CPU model, the instruction set oneDNN dispatches to, and the oneDNN,
torch and padkit versions. Another machine, ``ONEDNN_MAX_CPU_ISA`` setting or upgrade
starts a new file.

``PADKIT_NATIVE_TUNE=0`` (or :func:`padkit.native.set_tuning` ``(False)``) is the
deterministic mode: no timing; the static rules of :mod:`padkit.native._policy` (the
choices measured when the backend was written) decide every op.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

Key = tuple[Any, ...]

#: timed rounds per side after one warm-up run each; fewer for slow ops
ROUNDS = 7
#: an op whose warm-up takes longer than this (seconds) is timed with SLOW_ROUNDS rounds
SLOW = 0.05
SLOW_ROUNDS = 3
#: a round times a block of calls lasting about this long (seconds), at most BLOCK_CALLS
BLOCK = 0.003
BLOCK_CALLS = 20
#: oneDNN is kept only where it is at least this much faster (a ratio of the median
#: paired round): torch's own kernels are padkit's reference, and a smaller gain is within
#: what one short measurement can tell apart
MARGIN = 0.95
#: a measurement is kept on disk only where it was steady: its paired per-round ratios
#: within this factor of each other (fastest to slowest), and each side's rounds too. A
#: stall (another process, a frequency drop) during the measurement leaves a choice that
#: holds for this process only and is measured again by the next.
STEADY = 1.5
#: the most choices kept (in memory and in the file): past it the oldest are dropped first
#: (loaded ones before those measured in this process), and are measured again if met
MAX_CHOICES = 2048


#: the most bucket steps between a size class and the measured one it takes its choice
#: from (:meth:`Tuner.near`)
NEAR = 2
#: where a key holds its pads, its batch bucket and its size buckets
_PADS, _BATCH, _SIZE = 4, 9, 10


def config(key: Key) -> Key:
    """``key`` without its pads, batch and size buckets."""
    return key[:_PADS] + key[_PADS + 1 : _BATCH] + key[_SIZE + 1 :]


def _steps(a: int, b: int) -> int:
    """Bucket steps (factors of two) between two buckets."""
    return abs(int(a).bit_length() - int(b).bit_length())


def bucket(n: int) -> int:
    """The power of two at or above ``n``: sizes that share a bucket share a choice."""
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _median(v: Sequence[float]) -> float:
    s = sorted(v)
    return s[len(s) // 2]


def _low_median(v: Sequence[float]) -> float:
    s = sorted(v)
    return s[(len(s) - 1) // 2]


class Tuner:
    """The choices made so far and the file they are kept in."""

    def __init__(self) -> None:
        env = os.environ.get("PADKIT_NATIVE_TUNE", "1").strip().lower()
        #: time each new signature (True) or follow the static rules (False)
        self.measure = env not in ("0", "false", "off", "no")
        self.choices: dict[Key, bool] = {}
        self.timings: dict[Key, tuple[float, float]] = {}
        #: choices measured while the machine was not steady: in memory only, never saved
        self.unsteady: set[Key] = set()
        self.path: Path | None = None
        self.machine: dict[str, Any] = {}
        self._loaded = False
        self._lock = threading.Lock()
        #: bumped whenever remembered choices may change meaning (another file, forget)
        self.version = 0
        #: :meth:`near`'s answers, with the (version, number of choices) they were made at
        self._near: dict[Key, tuple[tuple[int, int], bool | None]] = {}

    def timing_on(self) -> bool:
        """Whether padkit may choose anything by timing: this tuner measures
        (``PADKIT_NATIVE_TUNE``, ``padkit.native.set_tuning``) and deterministic algorithms
        are off (``torch.use_deterministic_algorithms``)."""
        return self.measure and not torch.are_deterministic_algorithms_enabled()

    def reset_lock(self) -> None:
        """A new lock (a forked child: the parent's may have been held by another thread)."""
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ the file

    def attach(self, cache_dir: Path, isa: str, onednn: tuple[int, int, int]) -> None:
        """Name the file for this machine and read what it holds."""
        from .. import __version__

        self.machine = {
            "cpu": cpu_model(),
            "isa": isa,
            "onednn": ".".join(map(str, onednn)),
            "torch": torch.__version__,
            "padkit": __version__,
        }
        digest = hashlib.sha256(json.dumps(self.machine, sort_keys=True).encode()).hexdigest()
        path = cache_dir / f"choices-{digest[:16]}.json"
        if path != self.path:  # choices made for other facts do not carry over
            self.choices.clear()
            self.timings.clear()
            self.unsteady.clear()
            self.version += 1
        self.path = path
        self._loaded = False

    def _load(self) -> None:
        self._loaded = True
        if self.path is None or not self.path.is_file():
            return
        try:
            data = json.loads(self.path.read_text())
            for row in data.get("choices", []):
                key = _key_from_json(row["key"])
                self.timings.setdefault(key, (float(row["torch"]), float(row["native"])))
                self.choices.setdefault(key, bool(row["native"] < row["torch"] * MARGIN))
            self._evict()
        except (OSError, ValueError, KeyError, TypeError):
            return  # a damaged file is measured again and rewritten

    def _save(self) -> None:
        if self.path is None:
            return
        rows = [
            {"key": _key_to_json(k), "torch": t, "native": n}
            for k, (t, n) in self.timings.items()
            if k not in self.unsteady
        ]
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(suffix=".json", dir=self.path.parent)
            with os.fdopen(fd, "w") as f:
                json.dump({"machine": self.machine, "choices": rows}, f)
            os.replace(tmp, self.path)
        except OSError:
            pass  # a read-only cache: the choices stay in memory

    # ------------------------------------------------------------------ choosing

    def known(self, key: Key) -> bool | None:
        """The remembered choice for ``key``: True (oneDNN), False (torch), None (none yet)."""
        got = self.choices.get(key)
        if got is None and not self._loaded:
            with self._lock:
                if not self._loaded:
                    self._load()
            got = self.choices.get(key)
        return got

    def near(self, key: Key) -> bool | None:
        """The choice measured for the nearest other size class of ``key``'s configuration
        (every field but the batch and size buckets and the pads equal: TF-'same' pads
        change with each size's parity), at most :data:`NEAR` bucket steps away (a step: a
        factor of two in the batch or one size); None where there is none. What an
        unmeasured class of a layer already measured at neighbouring sizes runs, so that a
        workload of new sizes measures each layer about once."""
        memo = self._near.get(key)
        stamp = (self.version, len(self.choices))
        if memo is not None and memo[0] == stamp:
            return memo[1]
        best: tuple[int, bool] | None = None
        layer = config(key)
        for other, choice in self.choices.items():
            if len(other) != len(key) or config(other) != layer:
                continue
            steps = _steps(key[_BATCH], other[_BATCH]) + sum(
                _steps(a, b) for a, b in zip(key[_SIZE], other[_SIZE])
            )
            if steps <= NEAR and (best is None or steps < best[0]):
                best = (steps, choice)
        got = None if best is None else best[1]
        if len(self._near) >= 4096:
            self._near.clear()
        self._near[key] = (stamp, got)
        return got

    def decide(
        self,
        key: Key,
        run_torch: Callable[[], Any],
        run_native: Callable[[], Any],
        quiet: Callable[[], contextlib.AbstractContextManager[Any]],
        *,
        rounds: int | None = None,
    ) -> bool:
        """Time both sides (``quiet()`` keeps the torch side off the backend) and remember.
        ``rounds``: at most this many rounds of one call a side (a quick look, for a choice
        between two exact executors that differ by much where they differ)."""
        with self._lock:
            got = self.choices.get(key)
            if got is not None:
                return got
            with quiet(), _timing():
                if rounds is None:
                    t_torch, t_native, steady = _time_pair(run_torch, run_native)
                else:
                    t_torch, t_native, steady = _time_pair(run_torch, run_native, rounds)
            return self._keep(key, t_torch, t_native, steady)

    def record(self, key: Key, t_torch: float, t_native: float, steady: bool) -> bool:
        """Remember a choice timed elsewhere (on the workload's own calls, see
        :class:`Samples`); a choice already made for ``key`` stands."""
        with self._lock:
            got = self.choices.get(key)
            if got is not None:
                return got
            return self._keep(key, t_torch, t_native, steady)

    def _keep(self, key: Key, t_torch: float, t_native: float, steady: bool) -> bool:
        self.timings[key] = (t_torch, t_native)
        choice = self.choices[key] = t_native < t_torch * MARGIN
        self._evict()
        if steady:
            self._save()
        else:
            self.unsteady.add(key)
        return choice

    def _evict(self) -> None:
        """Keep at most :data:`MAX_CHOICES`, dropping the oldest (dicts keep insertion order:
        the file's rows first, then this process's measurements)."""
        while len(self.choices) > MAX_CHOICES:
            old = next(iter(self.choices))
            del self.choices[old]
            self.timings.pop(old, None)
            self.unsteady.discard(old)

    def forget(self) -> None:
        """Drop every choice, in memory and on disk (they are measured again)."""
        with self._lock:
            self.choices.clear()
            self.timings.clear()
            self.unsteady.clear()
            self.version += 1
            self._loaded = True
            if self.path is not None:
                with contextlib.suppress(OSError):
                    self.path.unlink()

    def table(self) -> list[dict[str, Any]]:
        """The choices made, one row each (for ``padkit.native.info()``)."""
        if not self._loaded:
            self._load()
        rows = []
        for key, choice in self.choices.items():
            t, n = self.timings.get(key, (float("nan"), float("nan")))
            rows.append(
                {
                    "op": describe(key),
                    "runs": "onednn" if choice else "torch",
                    "torch_us": round(t * 1e6, 1),
                    "onednn_us": round(n * 1e6, 1),
                    "saved": key not in self.unsteady,
                }
            )
        return rows


class Budget:
    """What one layer's oneDNN calls in its timing (:class:`Samples`, every size class of
    one configuration: :func:`config`) may still cost: the first :attr:`FREE` is free,
    later ones while what they cost beyond the torch side stays within :data:`BUDGET` of
    the time the layer's calls have run."""

    __slots__ = ("elapsed", "spent", "tried")

    #: oneDNN calls made whatever the budget (the first is a paired kernel check where one is
    #: due; two let a layer whose oneDNN side is faster on new sizes show it at once:
    #: bench/new_sizes.py's 2-D first pass 1.27 with one, 1.13-1.15 with two, the 1-D one
    #: unchanged)
    FREE = 2

    def __init__(self) -> None:
        #: seconds the calls took; seconds the oneDNN calls cost beyond the torch side;
        #: oneDNN calls made
        self.elapsed = 0.0
        self.spent = 0.0
        self.tried = 0

    def allows(self) -> bool:
        """Whether the next call may run the oneDNN side."""
        return self.tried < self.FREE or self.spent <= BUDGET * self.elapsed


class Samples:
    """Timings of an op signature (size class) taken on the workload's own calls, a side a
    call in turn, each timed per output element (the sizes of one class differ) with what
    it cost: a new size's primitive included (oneDNN's, or torch's own where its conv
    builds one), which is what a workload of new sizes pays. A oneDNN call whose kernels
    were not checked at its size class yet is *paired*: it runs both sides on its input,
    returns torch's output and compares oneDNN's with it (the kernel check), and gives a
    sample of each side.

    oneDNN takes its turns as the layer's :class:`Budget` allows (torch the others), so a
    workload is never stalled by more than :data:`BUDGET`, and a class is decided in a few
    of its calls where the sides differ clearly."""

    __slots__ = ("budget", "key", "native", "native_n", "started", "torch", "torch_n")

    #: samples a side after which the choice is made
    PAIRS = 5
    #: samples a side after which a clear difference decides early: a ratio beyond
    #: :attr:`CLEAR` either way
    EARLY = 2
    CLEAR = 1.5
    #: the most torch samples kept (oneDNN's turns may wait for the budget)
    KEEP = 16

    def __init__(self, key: Key, budget: Budget | None = None) -> None:
        self.key = key
        self.budget = Budget() if budget is None else budget
        #: seconds per output element of each side's calls, and their output elements
        self.torch: list[float] = []
        self.native: list[float] = []
        self.torch_n: list[int] = []
        self.native_n: list[int] = []
        #: when the pending oneDNN call started (its kernel query counts)
        self.started = 0.0

    def native_turn(self) -> bool:
        """Whether the next call runs the oneDNN side (its turn, as the budget allows)."""
        return len(self.native) < len(self.torch) and self.budget.allows()

    def add(self, native: bool, seconds: float, total: float, elements: int) -> bool:
        """One side's call: its run took ``seconds``, ``total`` with its checks. True once
        the choice can be made: :attr:`PAIRS` samples a side, or :attr:`EARLY` that differ
        clearly."""
        elements = max(elements, 1)
        budget = self.budget
        budget.elapsed += total
        if native:
            budget.tried += 1
            budget.spent += total - self._torch_per_element() * elements
            self.native.append(seconds / elements)
            self.native_n.append(elements)
        else:
            self.torch.append(seconds / elements)
            self.torch_n.append(elements)
            if len(self.torch) > self.KEEP:
                del self.torch[0], self.torch_n[0]
        return self._ready()

    def add_pair(self, t_torch: float, t_native: float, total: float, elements: int) -> bool:
        """A paired call: each side's run, ``total`` with everything the pair cost (its
        oneDNN run and checks are what it cost beyond torch's)."""
        elements = max(elements, 1)
        budget = self.budget
        budget.tried += 1
        budget.elapsed += total
        budget.spent += total - t_torch
        self.torch.append(t_torch / elements)
        self.torch_n.append(elements)
        self.native.append(t_native / elements)
        self.native_n.append(elements)
        return self._ready()

    def wasted(self, seconds: float) -> None:
        """A paired call that compared nothing (torch's output held a NaN): its oneDNN run
        cost ``seconds`` beyond torch's."""
        self.budget.tried += 1
        self.budget.elapsed += seconds
        self.budget.spent += seconds

    def _torch_per_element(self) -> float:
        return _median(self.torch) if self.torch else 0.0

    def _ready(self) -> bool:
        n = min(len(self.torch), len(self.native))
        if n >= self.PAIRS:
            return True
        if n < self.EARLY:
            return False
        ratio = self._ratio()
        return ratio > self.CLEAR or ratio * self.CLEAR < 1

    def _ratio(self) -> float:
        """oneDNN's time over torch's per element: the lower medians of the samples (of two,
        the faster: a call whose oneDNN side built a primitive for a size that then repeats
        does not outvote one that did not, and one torch call slowed by something else, a
        garbage collection or the pair's oneDNN run before it, does not decide a class for
        oneDNN: bench/new_sizes.py's causal stack had such a 1.6 ms call among 0.3-0.5 ms
        ones)."""
        return _low_median(self.native) / max(_low_median(self.torch), 1e-15)

    def result(self) -> tuple[float, float, bool]:
        """Seconds per call of each side at the median call's size and whether both sides'
        samples were steady (as :func:`_time_pair` judges it)."""
        t = _low_median(self.torch) * _median(self.torch_n + self.native_n)
        steady = _spread(self.torch) <= STEADY and _spread(self.native) <= STEADY
        return t, t * self._ratio(), steady


#: what a layer's oneDNN calls in its timing may cost beyond its torch side, as a fraction
#: of the time the layer has run (:class:`Budget`)
BUDGET = 0.05


_TIMING = threading.local()


@contextlib.contextmanager
def _timing() -> Any:
    _TIMING.depth = getattr(_TIMING, "depth", 0) + 1
    try:
        yield
    finally:
        _TIMING.depth -= 1


def timing() -> bool:
    """Whether this thread is inside a tuner's timing: a choice made there (one timed
    choice inside another's side) would distort both and multiply their cost, so nested
    choices take their untimed default meanwhile."""
    return getattr(_TIMING, "depth", 0) > 0


def _time_pair(
    run_torch: Callable[[], Any], run_native: Callable[[], Any], quick: int | None = None
) -> tuple[float, float, bool]:
    """Seconds per call of each side, and whether the measurement was steady.

    One warm-up call each, then interleaved rounds of a block of calls (about a
    millisecond or more) per side; the medians of the per-call times. The second value is
    scaled so that its ratio to the first is the median of the paired per-round ratios,
    which cancels slow drifts in machine speed. Steady: the paired ratios, and each side's
    round times, lie within :data:`STEADY` of each other."""
    t0 = time.perf_counter()
    run_torch()
    t1 = time.perf_counter()
    run_native()
    t2 = time.perf_counter()
    slowest = max(t1 - t0, t2 - t1)
    fastest = max(min(t1 - t0, t2 - t1), 1e-7)
    rounds = SLOW_ROUNDS if slowest > SLOW else ROUNDS
    calls = max(1, min(BLOCK_CALLS, int(BLOCK / fastest)))
    if quick is not None:
        rounds, calls = min(rounds, quick), 1
    ts: list[float] = []
    ns: list[float] = []
    ratios: list[float] = []
    for r in range(rounds):
        order = (run_torch, run_native) if r % 2 == 0 else (run_native, run_torch)
        got = {}
        for fn in order:
            a = time.perf_counter()
            for _ in range(calls):
                fn()
            got[fn is run_torch] = (time.perf_counter() - a) / calls
        ts.append(got[True])
        ns.append(got[False])
        ratios.append(got[False] / max(got[True], 1e-12))
    t = _median(ts)
    steady = all(_spread(v) <= STEADY for v in (ts, ns, ratios))
    return t, t * _median(ratios), steady


def _spread(v: list[float]) -> float:
    """Slowest to fastest of ``v``, one outlier dropped at each end where there are 5 or
    more (a single interrupted round does not make a measurement unsteady)."""
    s = sorted(v)
    if len(s) >= 5:
        s = s[1:-1]
    return s[-1] / max(s[0], 1e-12)


_FIELDS = (
    "op",
    "kernel",
    "stride",
    "dilation",
    "pads",
    "groups",
    "channels",
    "layout",
    "dtype",
    "batch",
    "size",
    "training",
    "threads",
)


def describe(key: Key) -> str:
    """``key`` in words, e.g. ``conv k(3, 3) s(2, 2) ... training``."""
    parts = []
    for name, v in zip(_FIELDS, key):
        if name == "op":
            parts.append(str(v))
        elif name == "training":
            parts.append("training" if v else "inference")
        else:
            parts.append(f"{name}={v}")
    return " ".join(parts)


def _key_to_json(v: Any) -> Any:
    return [_key_to_json(x) for x in v] if isinstance(v, tuple) else v


def _key_from_json(v: Any) -> Any:
    return tuple(_key_from_json(x) for x in v) if isinstance(v, list) else v
