"""Probing a model at lengths it accepts, on copies.

:func:`probe` records the model (:func:`padkit.recognise.record`) on random inputs shaped
like an example, at several lengths of one axis. The lengths come from the model's layers:
the example's own length and one 5 longer first (residues that tell a fixed right pad from
one completing the last stride window), then multiples of the product of the strides, at
least the widest window. A length the model refuses (its own assert, a reflect pad longer
than the input, attention that wants multiples of a window) is skipped and the next one
tried; when too few run, :class:`ProbeError` names the module that raised and every length
tried. Each run is on a fresh copy: the model's parameters and buffers never change.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import Tensor, nn

from ..spec import PaddingError
from ._calls import module_op
from ._record import Record, failing_module, record

__all__ = ["ProbeError", "model_copy", "probe", "probe_lengths"]


class ProbeError(PaddingError):
    """The model runs on none (or too few) of the probe lengths tried."""


def model_copy(model: nn.Module) -> nn.Module:
    """A deep copy of ``model``. Old-style weight norm keeps its computed weight as a
    non-leaf attribute, which ``deepcopy`` refuses: it is copied detached (the hook computes
    it again before each call)."""
    memo: dict[int, Any] = {}
    for m in model.modules():
        for hook in m._forward_pre_hooks.values():
            name = getattr(hook, "name", None)
            w = m.__dict__.get(name) if isinstance(name, str) else None
            if isinstance(w, Tensor) and not w.is_leaf:
                memo[id(w)] = w.detach().clone()
    return copy.deepcopy(model, memo)


def probe_lengths(model: nn.Module, length: int, *, limit: int = 4096) -> list[int]:
    """Candidate lengths for :func:`probe`, the example's ``length`` first."""
    step, window = 1, 1
    for m in model.modules():
        op = module_op(m)
        if op is None or op.kind == "conv_transpose":
            continue
        step = min(step * max(op.stride), limit)
        k_eff = max(d * (k - 1) + 1 for k, d in zip(op.kernel, op.dilation))
        window = max(window, k_eff)
    base = -(-max(length, window) // step) * step
    cands = [length, length + 5, length + 1, length + 3]
    cands += [base + i * step for i in range(4)] + [2 * base, 2 * base + step, 4 * base]
    out: list[int] = []
    for n in cands:
        if n >= 1 and n not in out:
            out.append(n)
    return out


def probe(
    model: nn.Module,
    example: Tensor,
    *,
    dim: int = -1,
    count: int = 2,
    lengths: list[int] | None = None,
    seed: int = 0,
    where: str = "probe",
) -> list[Record]:
    """Records of ``model`` (in eval mode, on copies) on random inputs shaped like
    ``example`` at ``count`` lengths of axis ``dim`` that it accepts.

    Raises:
        ProbeError: the model raised on all but fewer than ``count`` of the lengths tried;
            the message names the module that raised, what it raised and the lengths.
    """
    d = dim % example.dim()
    pristine = model_copy(model)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    tried: list[int] = []
    failures: list[str] = []
    found: list[Record] = []
    for n in lengths or probe_lengths(pristine, int(example.shape[d])):
        shape = list(example.shape)
        shape[d] = n
        x = torch.randn(shape, generator=gen, dtype=torch.float64)
        x = x.to(example.dtype) if example.is_floating_point() else x.round().to(example.dtype)
        x = x.to(example.device)
        net = model_copy(pristine)
        net.eval()
        tried.append(n)
        try:
            rec = record(net, x)
        except Exception as err:
            bad = failing_module(err)
            who = "the model" if bad is None else f"{bad.cls} {bad.path or '<model>'!r}"
            first = (str(err).splitlines() or ["(no message)"])[0][:200]
            failures.append(f"length {n}: {who} raised {type(err).__name__}: {first}")
            continue
        rec.length = n
        found.append(rec)
        if len(found) == count:
            return found
    raise ProbeError(
        f"{where}(): the model runs on {len(found)} of the probe lengths tried on axis {dim} "
        f"({tried}), {count} are needed; "
        + "; ".join(failures[:3])
        + ". Pass an example whose length the model accepts"
    )
