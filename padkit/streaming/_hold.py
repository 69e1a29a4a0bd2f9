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
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["HoldSchedule", "measure_schedule"]

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
