"""Holding short chunks in a causal stream until they complete an output.

A strided model (an encoder of total stride ``S``) completes an output only every ``S / Q``
input samples. A step whose chunk completes none still walks the whole model, layer by
layer, for an empty output. Instead such a chunk is held in the state (``"<stream>.held"``)
and the model runs once the held samples complete an output: on the held samples and the
new chunk together, which the stream computes exactly as it would the same samples in
several steps (its result does not depend on how the input is cut into chunks).

Whether a chunk completes an output is a matter of counts. After ``n`` input samples a causal
stream has emitted ``L(n)`` outputs, whatever the chunks were: the output of one step of ``n``
samples from a fresh state. ``L`` is measured on such steps on zeros (their state thrown
away): every sample count where it grows below ``start + hop`` (``start`` a multiple of
``hop`` where every layer's window fits), found by bisection; from ``start`` on it is
periodic, ``L(n + hop) = L(n) + Q`` (``hop`` the product of the strides), which is checked
on two more periods. The schedule keeps the input samples until ``L`` next grows; ``n``
itself is read from the state, the sample count of a layer whose input is the model's input
(``pilot``). A model whose lengths are not periodic in the measured periods,
or that emits at least one output every four samples, gets no schedule and is never held.

The held samples live in a buffer with room for every sample until the next output
(``"<stream>.held"``), of which the first ``"<stream>.held_count"`` are held. The step from
the state that holds them writes its chunk after them in place (:class:`HeldBuffer`: a
copy of the chunk and a new count, no tensor op on 1-sample chunks), so a held step costs
about as much as a Python call. Older states sharing the buffer read only their own first
samples, which no later write touches; a step from one of them (a replay, a loaded or
moved state) copies its held samples into a buffer of its own.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

__all__ = ["HeldBuffer", "HoldSchedule", "held_count", "measure_schedule"]

# steps allowed for one measurement (a jump takes about log2(hop) of them)
_MAX_RUNS = 256


@dataclass(frozen=True)
class HoldSchedule:
    """When a causal stream's next output is due (see the module docstring)."""

    start: int  # input samples from which the counts are periodic
    hop: int  # the period, in input samples
    jumps: tuple[int, ...]  # the counts below start + hop where the output count grows
    gaps: tuple[int, ...]  # gaps[n % hop]: from start on, samples after n until it grows
    pilot: str  # the state key counting the model's input samples

    def gap(self, n: int) -> int:
        """Input samples after ``n`` until the next output."""
        if n < self.start:
            return self.jumps[bisect_right(self.jumps, n)] - n
        return self.gaps[n % self.hop]


class _TooMany(Exception):
    pass


def measure_schedule(
    run: Callable[[int], tuple[int, dict[str, int]] | None],
    hop: int,
    start: int,
    pilots: set[str],
) -> HoldSchedule | None:
    """The schedule of a stream whose step of ``n`` samples from a fresh state, ``run(n)``,
    returns its output length and the sample counts it leaves in the state, by key (None
    where it does not run or returns no single tensor); ``pilots`` are the count keys the
    pilot is chosen from. ``start`` is a length every layer's window fits in."""
    if hop <= 1:
        return None
    lengths: dict[int, int] = {}
    layers: dict[int, dict[str, int]] = {}

    def length(n: int) -> int:
        if n not in lengths:
            if len(lengths) >= _MAX_RUNS:
                raise _TooMany
            got = run(n)
            if got is None:
                raise _TooMany
            lengths[n], layers[n] = got
        return lengths[n]

    n0 = hop * max(1, -(-start // hop))
    lengths[0] = 0  # a fresh stream has emitted nothing
    try:
        a, b = length(n0), length(n0 + hop)
        c, d = length(n0 + 2 * hop), length(n0 + 3 * hop)
        per = b - a
        if per <= 0 or c - b != per or d - c != per or 4 * per > hop:
            return None
        pilot = next(
            (
                key
                for key in sorted(pilots)
                if layers[n0].get(key) == n0 and layers[n0 + hop].get(key) == n0 + hop
            ),
            None,
        )
        if pilot is None:
            return None
        jumps: list[int] = []

        def find(lo: int, hi: int) -> None:  # length(lo) < length(hi)
            if hi - lo == 1:
                jumps.append(hi)
                return
            mid = (lo + hi) // 2
            if length(mid) > length(lo):
                find(lo, mid)
            if length(hi) > length(mid):
                find(mid, hi)

        if length(n0) > 0:
            find(0, n0)
        find(n0, n0 + hop)
        # from start on, the same jumps by the same amounts one and two periods later
        for j in jumps:
            if j > n0:
                step = length(j) - length(j - 1)
                for k in (1, 2):
                    if length(j + k * hop) - length(j + k * hop - 1) != step:
                        return None
    except _TooMany:
        return None
    jumps.sort()
    residues = sorted({j % hop for j in jumps if j > n0})
    gaps = tuple(min((r - n - 1) % hop + 1 for r in residues) for n in range(hop))
    return HoldSchedule(n0, hop, tuple(jumps), gaps, pilot)


# the count entries of held states, shared (a state's tensors are never written in place)
_COUNTS: dict[int, Tensor] = {}


def held_count(n: int) -> Tensor:
    """The ``"<stream>.held_count"`` entry for ``n`` held samples (an int64 scalar)."""
    t = _COUNTS.get(n)
    if t is None:
        if len(_COUNTS) >= 1 << 16:
            _COUNTS.clear()
        t = _COUNTS[n] = torch.tensor(n)
    return t


# dtypes a CPU buffer is written through numpy in
_NUMPY = {torch.float32, torch.float64, torch.float16, torch.int16, torch.int32, torch.int64}


class HeldBuffer:
    """The buffer of the latest held state: ``buf`` holds ``count`` samples on the time
    axis ``dim`` (the state's count entry is ``count_t``) and has room for ``cap``;
    :meth:`write` appends a chunk in place and returns the next count entry, or None
    where the chunk must take the full path (it does not fit, does not continue the held
    input, needs autograd, or cannot be copied here)."""

    __slots__ = (
        "arr",
        "buf",
        "cap",
        "count",
        "count_t",
        "cpu",
        "dim",
        "dtype",
        "flat",
        "lead",
        "ndim",
        "one",
        "out",
        "shapes",
        "single",
    )

    def __init__(self, buf: Tensor, count: int, dim: int, out: Any) -> None:
        self.buf = buf
        self.count = count
        self.count_t = held_count(count)
        self.cap = int(buf.shape[dim])
        self.dim = dim
        self.dtype = buf.dtype
        self.ndim = buf.dim()
        self.out = out
        one = list(buf.shape)
        one[dim] = 1
        self.one = torch.Size(one)  # a 1-sample chunk's shape
        self.shapes: dict[int, torch.Size] = {1: self.one}  # a k-sample chunk's, by k
        self.lead = (slice(None),) * dim  # the index of the axes before time
        self.cpu = buf.device.type == "cpu"
        self.arr = buf.numpy() if self.cpu and buf.dtype in _NUMPY else None
        # one element per sample (every other axis of size 1): a sample's flat index, and
        # the store a 1-sample chunk's value is written to (a memoryview of the buffer,
        # cheaper to write than numpy, where its format allows)
        arr = self.arr
        self.flat = arr.reshape(-1) if arr is not None and buf.numel() == self.cap else None
        self.single: Any = None
        if self.flat is not None:
            self.single = self.flat if buf.dtype is torch.float16 else memoryview(self.flat.data)

    def write_one(self, chunk: Tensor) -> Tensor | None:
        """:meth:`write` of a chunk of one element where the buffer holds one per sample,
        the common case (a 1-sample chunk of mono audio): the chunk's value is stored, with
        no tensor op. None where it does not apply."""
        n = self.count
        single = self.single
        if (
            single is None
            or n >= self.cap
            or chunk.dtype is not self.dtype
            or chunk.numel() != 1
            or chunk.dim() != self.ndim
            or not chunk.is_cpu
            or chunk.requires_grad
        ):
            return None
        single[n] = chunk.item()
        n += 1
        count = _COUNTS.get(n)
        if count is None:
            count = held_count(n)
        self.count = n
        self.count_t = count
        return count

    def write(self, chunk: Tensor) -> Tensor | None:
        if chunk.dtype is not self.dtype or chunk.requires_grad:
            return None
        n = self.count
        shape = chunk.shape
        if shape == self.one:
            k = 1
        else:
            if len(shape) != len(self.one):
                return None
            k = shape[self.dim]
            want = self.shapes.get(k)
            if want is None:
                if len(self.shapes) >= 64:
                    self.shapes.clear()
                one = list(self.one)
                one[self.dim] = k
                want = self.shapes[k] = torch.Size(one)
            if shape != want:
                return None
        if n + k > self.cap or chunk.is_cpu is not self.cpu:
            return None
        try:
            if self.flat is not None:
                self.flat[n : n + k] = chunk.numpy().reshape(-1)
            elif self.arr is not None:
                index = (*self.lead, slice(n, n + k))
                self.arr[index] = chunk.numpy()
            else:
                if chunk.device != self.buf.device:
                    return None
                self.buf.narrow(self.dim, n, k).copy_(chunk)
        except (RuntimeError, TypeError, ValueError):  # (a conjugate view, a tensor subclass)
            return None
        self.count = n + k
        self.count_t = held_count(n + k)
        return self.count_t
