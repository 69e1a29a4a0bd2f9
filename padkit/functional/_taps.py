"""A 1-d convolution with per-side pads run as one matrix product per kernel tap.

``out[:, t] = bias + sum_k W[:, :, k] @ x[:, t + k*d - lo]``: each tap is one GEMM of the
weight's tap matrix with a shifted view of the input, accumulated into the part of the
output where that tap reads the input (``torch.addmm(..., out=view)``, in place). The pads
are never written: a tap's product over pad positions is zero and is skipped, so there is
no padded copy of the input and no surplus output. For the stride-1, ungrouped 1-d convs of
TCNs and audio codecs (a causal pad of ``d*(k-1)`` samples) torch's own dilated conv is
slow, and this runs at about half its time on the machines measured (docs/performance.md);
for others torch's conv is faster, by up to about 1.2x at wide channels and short lengths
on repeated sizes. On a length not met before torch's conv first builds a oneDNN
primitive for it, which the products never need: on new lengths they measured 0.1-1.03x
the plan's time (16-512 channels, 64-4096 samples, batch 1 and 8). So in inference on real
CPU tensors they run by default, and once a signature class has run often a timing
against the torch plan decides which stays (:func:`taps_if_faster`).

Exactness: every output sums the same products as the ``F.pad`` reference except those
with a pad, which are zero there; summed in another order (float rounding). A NaN or an
infinity of the input meets exactly the outputs whose window holds it. A weight that is
not finite would make ``w * 0`` NaN in the reference where a tap meets a pad: such a
weight runs the torch plan.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from .._finite import all_finite, values_visible
from ..native import _dispatch as _backend, _tune
from ._common import Pairs

#: which of the torch plan and the per-tap products is faster, per signature class: the
#: native backend's key (bucketed batch and length), timed once the class has run
#: :data:`TIME_AFTER` times (on the products, untimed), in memory only. The native
#: backend's tuning switch turns the timing off (``PADKIT_NATIVE_TUNE=0``,
#: ``padkit.native.set_tuning(False)``) and so do deterministic algorithms: then the torch
#: plan runs.
_TAPS = _tune.Tuner()
#: calls of a signature class that run the per-tap products untimed before the timing,
#: and the rounds of that timing (one call a side each, after one warm-up call each: about
#: 8 calls). A timing gains a fraction of a call's time per call after it, so it is made
#: only where the class has already run many times: at 256 it costs about 3 % of what the
#: class has run, and lengths seen a few times (variable-length audio, a stream's last
#: chunk, a first pass over new sizes) never pay it
TIME_AFTER = 256
QUICK_ROUNDS = 3
_SEEN: dict[Any, int] = {}
#: per raw call signature: whether the taps run (what a repeated call looks up)
_RAW: dict[tuple[Any, ...], bool] = {}
#: per raw call signature of a class not timed yet: the class's key (the backend's key
#: costs 5-10 µs a call to build, with its code cold between convs)
_CLASS: dict[tuple[Any, ...], Any] = {}
_DTYPES = (torch.float32, torch.float64)


Span = tuple[int, int, int, int]


@functools.lru_cache(maxsize=1024)
def _spans(
    length: int, k: int, lo: int, hi: int, d: int
) -> tuple[int, Span | None, tuple[Span, ...]]:
    """For an input of ``length``: the output length, the tap that reads the input for
    every output (it starts the sum, with the bias; None where none does) and the taps
    that add to part of it, each ``(tap, offset, first output, end)`` (output ``t`` reads
    input ``t + offset``)."""
    out_len = length + lo + hi - d * (k - 1)
    spans = []
    for j in range(k):
        off = j * d - lo
        t0, t1 = max(0, -off), min(out_len, length - off)
        if t1 > t0:
            spans.append((j, off, t0, t1))
    first = next((s for s in spans if s[2] == 0 and s[3] == out_len), None)
    return out_len, first, tuple(s for s in spans if s != first)


def conv1d_taps(x: Tensor, weight: Tensor, bias: Tensor | None, pads: Pairs, d: int) -> Tensor:
    """The 1-d, stride-1, ungrouped conv of ``x`` (N, C, L) padded by ``pads`` (zeros)."""
    n, _, length = x.shape
    cout, _, k = weight.shape
    ((lo, hi),) = pads
    out_len, first, rest = _spans(int(length), int(k), lo, hi, d)
    out = x.new_empty((n, cout, out_len))
    taps = weight.permute(2, 0, 1).contiguous()  # (k, out, in): one matrix per tap
    start = None if bias is None else bias.unsqueeze(1).expand(cout, out_len)
    for i in range(n):
        o, xi = out[i], x[i]
        if first is not None:  # it writes the output: it runs before the others add to it
            j, off, t0, t1 = first
            if start is None:
                torch.mm(taps[j], xi[:, t0 + off : t1 + off], out=o)
            else:
                torch.addmm(start, taps[j], xi[:, t0 + off : t1 + off], out=o)
        elif start is None:
            o.zero_()
        else:
            o.copy_(start)
        for j, off, t0, t1 in rest:
            part = o[:, t0:t1]
            torch.addmm(part, taps[j], xi[:, t0 + off : t1 + off], out=part)
    return out


def eligible(
    x: Tensor, weight: Tensor, bias: Tensor | None, s: tuple[int, ...], groups: int
) -> bool:
    """A call the per-tap products can run: a 1-d, stride-1, ungrouped float32/float64
    conv on plain CPU tensors whose values may be looked at, outside autograd, with the
    timing switch on (see ``_TAPS``)."""
    if len(s) != 1 or s[0] != 1 or groups != 1 or x.dim() != 3 or x.stride(-1) != 1:
        return False
    if x.dtype not in _DTYPES or weight.dtype != x.dtype:
        return False
    if bias is not None and (bias.dtype != x.dtype or not values_visible(bias)):
        return False
    grad = torch.is_grad_enabled() and (
        x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
    )
    return (
        not grad
        and values_visible(x)
        and values_visible(weight)
        and _backend.HOOK.tuner.timing_on()
    )


def taps_if_faster(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    pads: Pairs,
    d: int,
    torch_plan: Callable[[], Tensor],
) -> Tensor | None:
    """The per-tap result where it was timed faster than ``torch_plan`` for this call's
    signature class, or where the class has not been timed yet; else None (the caller runs
    its plan). The caller checks :func:`eligible` first."""
    threads = torch.get_num_threads()
    raw = (x.shape, x.stride(), x.dtype, weight.shape, pads, d, bias is None, threads)
    use = _RAW.get(raw)
    if use is None:
        key = _CLASS.get(raw)
        if key is None:
            if len(_CLASS) >= 4096:
                _CLASS.clear()
            key = _CLASS[raw] = (
                "conv_taps",
                *_backend._conv_key("conv", x, weight, (1,), (d,), pads, 1, False)[1:],
            )
        got = _TAPS.known(key)
        if got is None:
            seen = _SEEN.get(key, 0)
            if seen < TIME_AFTER and not _tune.timing():
                if len(_SEEN) >= 4096:
                    _SEEN.clear()
                _SEEN[key] = seen + 1
                # untimed until the class has run often: the per-tap products, which need
                # nothing made per input size, where torch's conv builds a oneDNN primitive
                # for each new length (a first pass over unseen lengths pays it per call)
                if not all_finite(weight):
                    return None
                return conv1d_taps(x, weight, bias, pads, d)
            # (inside the native backend's timing of its torch side this is that timing's
            # warm-up call: deciding here lets the backend weigh oneDNN against the faster
            # torch side, and the timed rounds after it run the choice made)
            with torch.no_grad():
                got = _TAPS.decide(
                    key,
                    torch_plan,
                    lambda: conv1d_taps(x, weight, bias, pads, d),
                    contextlib.nullcontext,
                    rounds=QUICK_ROUNDS,
                )
        if len(_RAW) >= 4096:
            _RAW.clear()
        use = _RAW[raw] = got
    if not use or not all_finite(weight):
        return None
    return conv1d_taps(x, weight, bias, pads, d)
