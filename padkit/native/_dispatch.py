"""The hook padkit.functional calls when the backend is on: eligibility, policy, fallback.

Each method returns the op's result, or ``None`` to let padkit run its pure-torch plan.
Never while tracing, compiling, exporting or under functorch transforms / forward AD /
autocast, only for plain CPU float32 / bfloat16 tensors, and only where
:mod:`padkit.native._policy` says the backend measured faster. An op oneDNN refuses
falls back (counted in ``fallbacks``, shown by ``padkit.native.info()``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ..plan import Plan
from . import _ops, _policy

Pairs = tuple[tuple[int, int], ...]
FastFn = Callable[[Tensor], Any]

_TYPES = (Tensor, nn.Parameter)


def _plain(*ts: Tensor | None) -> bool:
    dtype = None
    for t in ts:
        if t is None:
            continue
        if type(t) not in _TYPES or t.device.type != "cpu" or t.dtype not in _ops.DTYPES:
            return False
        if dtype is not None and t.dtype != dtype:
            return False
        dtype = t.dtype
        if t.is_sparse or t.is_quantized or t.is_nested:
            return False
        if torch._C._functorch.is_functorch_wrapped_tensor(t):
            return False
    return True


def _training(*ts: Tensor | None) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in ts)


def _traced() -> bool:
    if torch._C._get_tracing_state() is not None:  # torch.jit.trace
        return True
    if torch.compiler.is_compiling():
        return True
    if torch._C._are_functorch_transforms_active():
        return True
    if torch.is_autocast_enabled("cpu"):
        return True
    level = getattr(torch.autograd.forward_ad, "_current_level", -1)
    return bool(level >= 0)


class Hook:
    """What :mod:`padkit.functional` consults (``functional._native``) when enabled."""

    def __init__(self) -> None:
        self.generation = 0
        #: route every eligible op to the backend, ignoring the policy (tests use it)
        self.force = False
        self.fallbacks: Counter[str] = Counter()

    def _go(self, x: Tensor, *rest: Tensor | None) -> bool:
        # tracing first: dynamo must not see the checks on the tensors below
        return not _traced() and x.numel() > 0 and _plain(x, *rest)

    def _pool_ok(
        self,
        k: Sequence[int],
        s: Sequence[int],
        d: Sequence[int],
        pads: Pairs,
        outs: Sequence[int],
        x: Tensor,
    ) -> bool:
        if _traced() or x.dim() != len(k) + 2:
            return False
        for n, kk, ss, dd, (lo, hi), o in zip(x.shape[2:], k, s, d, pads, outs):
            ke = dd * (kk - 1) + 1
            # every window starts and ends inside the padded input and holds an input element
            if lo >= ke or hi >= ke or (o - 1) * ss + ke > n + lo + hi or o < 1:
                return False
        return self._go(x)

    def conv(
        self,
        strategy: str,
        x: Tensor,
        w: Tensor,
        b: Tensor | None,
        s: Sequence[int],
        d: Sequence[int],
        pads: Pairs,
        groups: int,
    ) -> Tensor | None:
        if not self._go(x, w, b):
            return None
        if not self.force:
            training = _training(x, w, b)
            if not _policy.conv(strategy, x, w, groups, pads, d, training) or not _ops.conv_is_fast(
                x, w, b, s, d, pads, groups, training=training
            ):
                return None
        try:
            return _ops.conv(x, w, b, s, d, pads, groups)
        except _ops.NativeError as err:
            self.fallbacks[f"conv: {err}"] += 1
            return None

    def conv_transpose(
        self,
        x: Tensor,
        w: Tensor,
        b: Tensor | None,
        s: Sequence[int],
        d: Sequence[int],
        crops: Pairs,
        groups: int,
    ) -> Tensor | None:
        """``crops``: what to remove from the full output per side (>= 0)."""
        if any(lo < 0 or hi < 0 for lo, hi in crops) or not self._go(x, w, b):
            return None
        if not self.force:
            training = _training(x, w, b)
            if not _policy.conv_transpose(x, w, groups, crops) or not _ops.conv_is_fast(
                x, w, b, s, d, crops, groups, transposed=True, training=training
            ):
                return None
        try:
            return _ops.conv(x, w, b, s, d, crops, groups, transposed=True)
        except _ops.NativeError as err:
            self.fallbacks[f"conv_transpose: {err}"] += 1
            return None

    def pool(
        self,
        kind: str,
        strategy: str,
        x: Tensor,
        k: Sequence[int],
        s: Sequence[int],
        d: Sequence[int],
        pads: Pairs,
        outs: Sequence[int],
    ) -> Tensor | None:
        """``kind``: ``max``, ``avg_include`` or ``avg_exclude``; floor-mode ``outs``."""
        if not self._pool_ok(k, s, d, pads, outs, x):
            return None
        if not self.force and not (
            _policy.pool(kind, strategy, x, k, s, pads)
            and _ops.pool_is_fast(kind, x, outs, k, s, d, pads, training=_training(x))
        ):
            return None
        try:
            return _ops.pool(kind, x, outs, k, s, d, pads)
        except _ops.NativeError as err:
            self.fallbacks[f"pool: {err}"] += 1
            return None

    def pool_layer(self, layer: Any, op: str, plan: Plan, x: Tensor) -> FastFn | None:
        """A per-layer closure (``padkit.nn``'s fast path) running the pool on the backend,
        or None where the backend is not used for this layer and input."""
        rec = layer._op()  # the layer's checked record, from its live attributes
        if op == "max_pool":
            if rec.return_indices:
                return None
            kind = "max"
        elif op == "avg_pool":
            if rec.divisor_override is not None:
                return None
            kind = "avg_include" if rec.count_include_pad else "avg_exclude"
        else:
            return None
        k, s, d = rec.kernel, rec.stride, rec.dilation
        if plan.strategy == "native" or not self._pool_ok(k, s, d, plan.pads, plan.out_size, x):
            return None
        if not self.force and not _policy.pool(kind, plan.strategy, x, k, s, plan.pads):
            return None
        if not self.force:
            # the layer's closure serves inference and training calls alike
            for training in (False, True):
                if not _ops.pool_is_fast(
                    kind, x, plan.out_size, k, s, d, plan.pads, training=training
                ):
                    return None
        pads, outs, strategy = plan.pads, plan.out_size, plan.strategy

        def run(x: Tensor) -> Any:
            out = self.pool(kind, strategy, x, k, s, d, pads, outs)
            return layer._forward(x) if out is None else out

        return run


HOOK = Hook()
