"""The clocks of a lookahead stream: how many samples of each layer's input a sample of the
model's input stands for, the delay each layer adds, and which samples a step commits.

A lookahead step runs the model on the span of input samples ``[start, n)`` (the samples not
yet committed and the new chunk), each layer as if the stream ended at ``n`` (its right pad
appended). A tensor whose clock runs at ``rate`` samples per model-input sample covers its
samples from ``start * rate`` on: ``start`` is a multiple of :attr:`Clocks.hop`, so that this
is a whole sample on every clock (and a whole window of every strided layer). Its first
:meth:`Clocks.committed` samples are final (they read none of the appended pads).

Times are counted in ticks, :attr:`Clocks.ticks` per model-input sample, so that a sample of
every clock is a whole number of ticks (a decoder's ticks are its output samples). Sample
``j`` of a clock at ``rate`` sits at tick ``j * ticks / rate``; after ``n`` input samples it is
committed when that tick is before ``n * ticks - delay``. A conv or pool whose output ``j``
reads its input up to ``j*s + a`` (``a = k_eff - 1 - lo``) adds ``a`` of its input samples;
a transposed conv whose output ``j`` (after its start crop ``lo``) reads inputs up to
``(j + lo) // s`` adds ``lo`` of its output samples. A module measured to read its inputs up to
``t + b`` for its output ``t`` (a non-causal local attention streamed on its window) adds
``b`` of its input samples. ``lookahead="auto"`` is their sum:
the model's delay when the layers that read ahead are in series (residual blocks), an upper
bound where they sit on parallel branches.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from ._plan import _Plan

__all__ = ["Clocks", "make_clocks", "span_at"]


@dataclass(frozen=True)
class Clocks:
    """A lookahead stream's clocks (see the module docstring)."""

    rates: dict[str, Fraction]  # each layer's input samples per model-input sample
    out: Fraction  # the model output's samples per model-input sample
    ticks: int  # ticks per model-input sample
    hop: int  # span starts are multiples of it (model-input samples)
    delay: int  # ticks
    auto: int  # ticks: the sum of the layers' delays
    adds: dict[str, int]  # ticks each layer adds

    def start(self, n: int) -> int:
        """The first input sample of the span after ``n`` samples (a multiple of ``hop``):
        every clock's samples before it are committed."""
        free = n * self.ticks - self.delay
        if free <= 0:
            return 0
        return self.hop * (free // (self.hop * self.ticks))

    def committed(self, rate: Fraction, n: int) -> int:
        """The samples of a clock at ``rate`` that are final after ``n`` input samples."""
        free = n * self.ticks - self.delay
        if free <= 0:
            return 0
        num = free * rate.numerator
        den = self.ticks * rate.denominator
        return -(-num // den)

    def at(self, rate: Fraction, start: int) -> int:
        """The sample of a clock at ``rate`` where a span starting at input ``start`` starts."""
        v = start * rate
        assert v.denominator == 1, (start, rate)
        return int(v)

    def samples(self, ticks: int, rate: Fraction) -> Fraction:
        """``ticks`` in samples of a clock at ``rate``."""
        return Fraction(ticks) * rate / self.ticks


def span_at(
    clocks: Clocks | None, lookahead: tuple[int, int, int], rate: Fraction
) -> tuple[int, int]:
    """A step's span ``lookahead`` (start, next start, end, in input samples) on a clock at
    ``rate``: its first sample and the next span's. A span from the stream's start that
    commits nothing starts both at 0 (``init_state``'s shape probe runs without clocks)."""
    start, nxt, _ = lookahead
    if not (start or nxt) or clocks is None:
        return 0, 0
    return clocks.at(rate, start), clocks.at(rate, nxt)


def _out_rate(plan: _Plan, rate: Fraction) -> Fraction:
    return rate * plan.stride if plan.kind == "convt" else rate / plan.stride


def make_clocks(
    plans: dict[str, _Plan],
    rates: dict[str, Fraction],
    out: Fraction,
    lookahead: int | str,
    windows: Mapping[str, tuple[Fraction, int]] | None = None,
) -> Clocks:
    """The clocks for measured (or, at stride 1, known) rates. ``windows``: modules measured
    to read ahead (``_window.py``), by name: their input's clock and how many of its samples
    they read ahead, which they add to the delay as a layer's right pad does."""
    windows = windows or {}
    every = [out, *rates.values(), *(r for r, _ in windows.values())]
    every += [_out_rate(p, rates[n]) for n, p in plans.items() if n in rates]
    ticks = 1
    hop = 1
    for r in every:
        if r > 0:
            ticks = math.lcm(ticks, r.numerator)
            hop = math.lcm(hop, r.denominator)
    adds: dict[str, int] = {}
    for name, plan in plans.items():
        rate = rates.get(name)
        if rate is None or rate <= 0:
            continue
        per = Fraction(ticks) / (rate * plan.stride if plan.kind == "convt" else rate)
        assert per.denominator == 1
        adds[name] = plan.ahead * int(per)
    for name, (rate, ahead) in windows.items():
        if rate > 0:
            per = Fraction(ticks) / rate
            assert per.denominator == 1
            adds[name] = ahead * int(per)
    auto = sum(adds.values())
    delay = auto if lookahead == "auto" else int(lookahead) * ticks
    return Clocks(rates, out, ticks, hop, delay, auto, adds)
