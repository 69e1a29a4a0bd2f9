"""The hook padkit.functional calls when the backend is on: eligibility, policy, fallback.

Each method returns the op's result, or ``None`` to let padkit run its pure-torch plan.
Never while tracing, compiling, exporting or under functorch transforms / forward AD /
autocast, only for plain CPU float32 / bfloat16 tensors, never where oneDNN has only its
reference loops, and only where the backend is faster: measured on this machine on the
first call of each op signature (:mod:`padkit.native._tune`), or, in the deterministic
mode, where :mod:`padkit.native._policy` says. An op oneDNN refuses falls back (counted in
``fallbacks``, shown by ``padkit.native.info()``).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from .._finite import all_finite
from ..plan import Plan
from . import _ops, _policy, _tune

Pairs = tuple[tuple[int, int], ...]
FastFn = Callable[[Tensor], Any]
#: padkit's torch plan for the op being decided: (input, weight, bias) -> output
ConvRun = Callable[[Tensor, Tensor, "Tensor | None"], Tensor]
PoolRun = Callable[[Tensor], Any]

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
    """What :mod:`padkit.functional` consults (:data:`active`) when the backend is on."""

    def __init__(self) -> None:
        #: route every eligible op to the backend, ignoring the policy (tests use it)
        self.force = False
        self.fallbacks: Counter[str] = Counter()
        self.tuner = _tune.Tuner()
        #: decisions by call signature (shapes, strides, dtype, pads, threads, mode): True
        #: (oneDNN), False (torch), or None for a signature seen once, which ran on torch
        self._decided: dict[tuple[Any, ...], bool | None] = {}
        #: how many call signatures have been seen
        self.seen = 0
        #: first calls of call signatures per op signature (size class) not measured yet
        self._unmeasured: dict[_tune.Key, int] = {}
        #: inference classes being timed on their own calls (:class:`_tune.Samples`), and
        #: what each layer's oneDNN turns may still cost (per configuration)
        self._sampling: dict[_tune.Key, _tune.Samples] = {}
        self._budgets: dict[_tune.Key, _tune.Budget] = {}
        #: paired calls per kernel check whose outputs could not be compared (not finite)
        self._uncompared: dict[tuple[Any, ...], int] = {}

    def restart_timings(self) -> None:
        """Forget the timings under way on the workload's own calls and what each layer's
        paired calls have cost (with the choices forgotten, or another choices file)."""
        self._sampling.clear()
        self._budgets.clear()
        self._uncompared.clear()

    def _first_sighting(self, memo: tuple[Any, ...]) -> None:
        if len(self._decided) > 4096:
            self._decided.clear()
        self._decided[memo] = None
        self.seen += 1

    def _time_unseen(self, key: _tune.Key) -> bool:
        """For a training call signature's first call, in the measured mode, whose op
        signature (size class) has no measured side yet: whether to time the class now. The
        first
        :data:`TIME_UNSEEN` such calls of a class run on torch untimed; the next one times
        it (a workload whose sizes never repeat); a size met again times it at once."""
        n = self._unmeasured.get(key, 0)
        if n >= TIME_UNSEEN:
            self._unmeasured.pop(key, None)
            return True
        if len(self._unmeasured) >= 4096:
            self._unmeasured.clear()
        self._unmeasured[key] = n + 1
        return False

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
            if not _windows_read_input(int(n), kk, ss, dd, lo, o):
                return False  # a dilated window whose taps all fall on padding
        return self._go(x)

    def _measured(
        self,
        key: _tune.Key,
        inputs: tuple[Tensor | None, ...],
        run_torch: Callable[..., Any],
        run_native: Callable[..., Any],
        training: bool,
    ) -> bool:
        """The tuner's choice for ``key``, timing both sides on these inputs if it has none."""
        got = self.tuner.known(key)
        if got is None:
            got = self.tuner.near(key)
        if got is not None:
            return got
        bench = _Bench(inputs, training)
        return self.tuner.decide(
            key, lambda: bench.run(run_torch), lambda: bench.run(run_native), _torch_only
        )

    def _conv_choice(
        self,
        strategy: str,
        x: Tensor,
        w: Tensor,
        b: Tensor | None,
        s: Sequence[int],
        d: Sequence[int],
        pads: Pairs,
        groups: int,
        training: bool,
        torch_run: ConvRun | None,
        transposed: bool,
        first: bool,
    ) -> tuple[bool | _Turn, bool]:
        """Whether this conv call runs on oneDNN (or a :class:`_Turn` of its class's timing),
        and whether that holds for its call signature (False: a first call of a class not
        measured yet, see :meth:`_by_class`; the signature's next call decides)."""
        if transposed and not _policy.conv_transpose(x, w, groups, pads):
            return False, True  # symmetric crops: torch's own op
        measure = self.tuner.measure and torch_run is not None
        if measure:
            key = _conv_key(
                "conv_transpose" if transposed else "conv", x, w, s, d, pads, groups, training
            )
            decided = self._by_class(key, first, training)
            if decided is not None:
                return decided
        if not _ops.conv_is_fast(
            x, w, b, s, d, pads, groups, transposed=transposed, training=training
        ):
            return False, True  # oneDNN has only its reference loops for a pass
        if measure and not training:
            check = _ops.conv_agree_key(
                x, w, b, s, d, pads, groups, transposed=transposed, training=training
            )
            turn = self._turn(key, check)
            if turn is not None:  # its check, where needed, is a paired call
                return turn, False
        if not _ops.conv_agrees(
            x, w, b, s, d, pads, groups, transposed=transposed, training=training
        ):
            return False, True  # oneDNN computes something else for this signature
        if not measure or torch_run is None:
            return transposed or _policy.conv(strategy, x, w, groups, pads, d, training), True

        def native(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
            out = _ops.conv(x, w, b, s, d, pads, groups, transposed=transposed)
            if out.dtype == torch.bfloat16:
                all_finite(out)  # what each call pays: the finite check of its output
            return out

        return self._measured(key, (x, w, b), torch_run, native, training), True

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
        torch_run: ConvRun | None = None,
        *,
        note: list[bool] | None = None,
    ) -> Tensor | None:
        """``note`` gets an entry where the call is declined by a decision made for its
        signature (as :meth:`pool`)."""
        return self._conv_call(strategy, x, w, b, s, d, pads, groups, torch_run, False, note)

    def conv_transpose(
        self,
        x: Tensor,
        w: Tensor,
        b: Tensor | None,
        s: Sequence[int],
        d: Sequence[int],
        crops: Pairs,
        groups: int,
        torch_run: ConvRun | None = None,
        note: list[bool] | None = None,
    ) -> Tensor | None:
        """``crops``: what to remove from the full output per side (>= 0); ``note`` as for
        :meth:`conv`."""
        if any(lo < 0 or hi < 0 for lo, hi in crops):
            return None
        return self._conv_call("crop", x, w, b, s, d, crops, groups, torch_run, True, note)

    def _conv_call(
        self,
        strategy: str,
        x: Tensor,
        w: Tensor,
        b: Tensor | None,
        s: Sequence[int],
        d: Sequence[int],
        pads: Pairs,
        groups: int,
        torch_run: ConvRun | None,
        transposed: bool,
        note: list[bool] | None = None,
    ) -> Tensor | None:
        # tracing first: dynamo must not see the checks on the tensors below; then the
        # types, before any attribute of a tensor subclass (ExpandedWeights, ...) is read
        if _traced() or type(x) not in _TYPES or type(w) not in _TYPES:
            return None
        if (b is not None and type(b) not in _TYPES) or x.layout != torch.strided or x.is_nested:
            return None
        training = torch.is_grad_enabled() and (
            x.requires_grad or w.requires_grad or (b is not None and b.requires_grad)
        )
        turn: _Turn | None = None
        if self.force:
            if not self._go(x, w, b) or not _ops.conv_agrees(
                x, w, b, s, d, pads, groups, transposed=transposed, training=training
            ):
                return None
        else:
            # everything the decision depends on, cheap to read: a hit costs one lookup
            memo = (
                transposed,
                strategy,
                type(x),
                type(w),
                type(b),
                x.is_cpu,
                w.is_cpu,
                x.dtype,
                w.dtype,
                None if b is None else (b.dtype, b.is_cpu),
                x.shape,
                x.stride(),
                w.shape,
                w.stride(),
                s,
                d,
                pads,
                groups,
                training,
                torch.get_num_threads(),
                self.tuner.version,
                self.tuner.measure and torch_run is not None,
            )
            use = self._decided.get(memo, _NEW)
            settled = True
            if use is None or use is _NEW:
                # measured mode: a signature's first call takes its size class's measured
                # side (one on torch asks oneDNN nothing), or, while the class has none, a
                # turn of the class's timing on its own first calls (inference; torch's
                # side in training), so a size seen once (variable-length audio, detection
                # resizes, a stream's last chunk) never waits for a timing; a signature's
                # second call in a class still unmeasured times it (the tuner's decide)
                first = use is _NEW and memo[-1]
                if first:
                    self._first_sighting(memo)
                mark = _ops.cache_mark()
                use, settled = False, True
                if self._go(x, w, b):
                    use, settled = self._conv_choice(
                        strategy,
                        x,
                        w,
                        b,
                        s,
                        d,
                        pads,
                        groups,
                        training,
                        torch_run,
                        transposed,
                        first,
                    )
                if not use:  # left to torch: what the checks and the timing built goes
                    _ops.drop_since(mark)
                if settled:
                    self._decided[memo] = use
            if not use:
                if note is not None and settled:
                    note.append(True)
                return None
            if isinstance(use, _Turn):
                if (use.paired or not use.native) and torch_run is not None:
                    run = torch_run
                    got: Tensor = self._paired(
                        use,
                        lambda: run(x, w, b),
                        lambda: _ops.conv(x, w, b, s, d, pads, groups, transposed=transposed),
                    )
                    return got
                turn = use
        try:
            out = self._native_timed(
                turn, lambda: _ops.conv(x, w, b, s, d, pads, groups, transposed=transposed)
            )
        except _ops.NativeError as err:
            self.fallbacks[f"{'conv_transpose' if transposed else 'conv'}: {err}"] += 1
            return None
        # oneDNN's bfloat16 kernels put a NaN or an infinity of the input into other outputs
        # than torch does (its float32 kernels place them as torch does: the IEEE fuzz): a
        # bfloat16 output that is not all finite is computed again by torch's plan
        return out if out.dtype != torch.bfloat16 or all_finite(out) else None

    def _paired(
        self, turn: _Turn, run_torch: Callable[[], Any], run_native: Callable[[], Any]
    ) -> Any:
        """A call in its class's timing (:class:`_tune.Samples`) or kernel check: torch
        alone (timed), or paired: both sides on this input, torch's output returned and
        oneDNN's compared with it where torch's is finite (a class whose oneDNN result
        differs, or that oneDNN refuses, runs on torch). oneDNN's turns whose kernels were
        checked run as the op's other oneDNN calls (:meth:`_native_timed`)."""
        samples = turn.samples
        if not turn.native:
            t0 = time.perf_counter()
            with _torch_only():
                out = run_torch()
            t1 = time.perf_counter()
            if samples is not None:
                first = out[0] if isinstance(out, tuple) else out
                self._sampled(samples, samples.add(False, t1 - t0, t1 - t0, first.numel()))
            return out
        try:
            t0 = time.perf_counter()
            got = run_native()
            t1 = time.perf_counter()
            with _torch_only():
                out = run_torch()
            t2 = time.perf_counter()
        except _ops.NativeError as err:
            self.fallbacks[f"{turn.what}: {err}"] += 1
            if turn.check is not None:
                _ops.note_agreement(turn.check, False)
            return run_torch()
        ref = out[0] if isinstance(out, tuple) else out
        if not all_finite(ref):  # where oneDNN places a NaN may differ: no comparison
            if samples is not None:
                samples.wasted(t1 - t0)
            if turn.check is not None:
                if len(self._uncompared) >= 4096:
                    self._uncompared.clear()
                self._uncompared[turn.check] = self._uncompared.get(turn.check, 0) + 1
            return out
        ok = _ops.close_enough(got, ref, ref.dtype)
        if turn.check is not None:
            _ops.note_agreement(turn.check, ok)
        if samples is None:
            return out
        if not ok:  # the class runs on torch (the check above: its signatures too)
            self._sampling.pop(samples.key, None)
            self.tuner.record(samples.key, 1.0, math.inf, False)
            return out
        total = time.perf_counter() - samples.started
        self._sampled(samples, samples.add_pair(t2 - t1, t1 - t0, total, int(ref.numel())))
        return out

    def _native_timed(self, turn: _Turn | None, run: Callable[[], Tensor]) -> Tensor:
        """``run()`` (oneDNN), timed as a sample of ``turn``'s class where it is one."""
        if turn is None or turn.samples is None:
            return run()
        t0 = time.perf_counter()
        out = run()
        t1 = time.perf_counter()
        samples = turn.samples
        self._sampled(samples, samples.add(True, t1 - t0, t1 - samples.started, out.numel()))
        return out

    def _sampled(self, samples: _tune.Samples, ready: bool) -> None:
        """After a sample: the class's choice, once it can be made."""
        if ready:
            self._sampling.pop(samples.key, None)
            self.tuner.record(samples.key, *samples.result())

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
        torch_run: PoolRun | None = None,
        *,
        value: float = -math.inf,
        note: list[bool] | None = None,
    ) -> Tensor | None:
        """``kind``: ``max``, ``avg_include`` or ``avg_exclude``; floor-mode ``outs``.
        ``value``: a max pool's ``padding_value``; oneDNN pads a max pool with -inf only,
        so any other value is declined (torch's plan pads with it). ``note`` gets an entry
        where the call is declined by a decision made for its signature (not by the
        input's values, nor by a first sighting)."""
        if value != -math.inf and any(lo or hi for lo, hi in pads):
            return None
        if _traced() or type(x) not in _TYPES or x.layout != torch.strided or x.is_nested:
            return None
        training = torch.is_grad_enabled() and x.requires_grad
        turn: _Turn | None = None
        if self.force:
            if not self._pool_ok(k, s, d, pads, outs, x) or not _ops.pool_agrees(
                kind, x, outs, k, s, d, pads, training=training
            ):
                return None
        else:
            measure = self.tuner.measure and torch_run is not None
            memo = (
                kind,
                strategy,
                type(x),
                x.is_cpu,
                x.shape,
                x.stride(),
                x.dtype,
                tuple(k),
                tuple(s),
                tuple(d),
                tuple(pads),
                tuple(outs),
                training,
                torch.get_num_threads(),
                self.tuner.version,
                measure,
            )
            use = self._decided.get(memo, _NEW)
            settled = True
            if use is None or use is _NEW:
                first = use is _NEW and measure
                if first:  # as for convs: the class's measured side, or torch's
                    self._first_sighting(memo)
                mark = _ops.cache_mark()
                use, settled = self._pool_choice(
                    kind, strategy, x, k, s, d, pads, outs, training, torch_run, first
                )
                if not use:  # left to torch: what the checks and the timing built goes
                    _ops.drop_since(mark)
                if settled and not isinstance(use, _Turn):
                    self._decided[memo] = use
            if not use:
                if note is not None and settled:
                    note.append(True)
                return None
            if isinstance(use, _Turn):
                if (use.paired or not use.native) and torch_run is not None:
                    run = torch_run
                    got: Tensor = self._paired(
                        use, lambda: run(x), lambda: _ops.pool(kind, x, outs, k, s, d, pads)
                    )
                    return got
                turn = use
        if kind == "max" and not all_finite(x):
            # oneDNN's max pooling drops NaN and starts a window at the lowest finite value
            # (a window of -inf gives -3.4e38): torch's plan keeps IEEE semantics
            return None
        try:
            out = self._native_timed(turn, lambda: _ops.pool(kind, x, outs, k, s, d, pads))
        except _ops.NativeError as err:
            self.fallbacks[f"pool: {err}"] += 1
            return None
        # a bfloat16 average with a NaN or an infinity: torch's plan places it (as for convs)
        if kind == "max" or out.dtype != torch.bfloat16 or all_finite(out):
            return out
        return None

    def _by_class(self, key: Any, first: bool, training: bool) -> tuple[bool | _Turn, bool] | None:
        """What a call's size class already decides (as ``_conv_choice`` returns it): torch,
        for a class measured for torch, or taking the choice of a neighbouring size class
        (:meth:`_tune.Tuner.near`): oneDNN is asked nothing (no kernel query, check or
        primitive). For a class not measured yet, in inference, a call of its timing on
        its own calls (:class:`_tune.Samples`): torch's turn here, or None for oneDNN's
        after the kernel query (:meth:`_turn`); in training (whose backward
        runs later) torch for a first call, not for the signature (:meth:`_time_unseen`).
        None: the call goes on to the checks."""
        known = self.tuner.known(key)
        if known is None:
            known = self.tuner.near(key)
        if known is False:
            return False, True
        if known is None:
            if not training and not _tune.timing():
                samples = self._sampling.get(key)
                if samples is None:
                    if len(self._sampling) >= 4096:
                        self._sampling.clear()
                        self._budgets.clear()
                    budget = self._budgets.setdefault(_tune.config(key), _tune.Budget())
                    samples = self._sampling[key] = _tune.Samples(key, budget)
                if not samples.native_turn():
                    return _Turn(samples, False), False
                samples.started = time.perf_counter()  # the kernel query counts
                return None
            if first and not self._time_unseen(key):
                return False, False
        return None

    def _turn(self, key: Any, check: tuple[Any, ...]) -> _Turn | None:
        """oneDNN's turn (inference, after :meth:`_by_class` and the kernel query) in the
        timing of ``key`` on its own calls, or the kernel check ``check`` made on this call
        where it was not made yet (in place of random stand-ins: the same comparison, the
        call's output torch's)."""
        agreed = _ops.agreement(check)
        if agreed is False:
            return None  # the stand-in check's answer: torch (conv_agrees)
        samples = self._sampling.get(key)
        if (
            samples is not None
            and samples.native_turn()
            and self.tuner.known(key) is None
            and self.tuner.near(key) is None
        ):
            return _Turn(samples, True, check, paired=agreed is None)
        if agreed is None and self._uncompared.get(check, 0) < _UNCOMPARED:
            return _Turn(None, True, check, paired=True)
        return None  # checked, or its outputs were not finite: on random stand-ins

    def _pool_choice(
        self,
        kind: str,
        strategy: str,
        x: Tensor,
        k: Sequence[int],
        s: Sequence[int],
        d: Sequence[int],
        pads: Pairs,
        outs: Sequence[int],
        training: bool,
        torch_run: PoolRun | None,
        first: bool,
    ) -> tuple[bool | _Turn, bool]:
        """Whether this pool call runs on oneDNN, and whether that holds for its call
        signature (as :meth:`_conv_choice`)."""
        measure = self.tuner.measure and torch_run is not None
        if measure:
            key = _pool_key(kind, x, k, s, d, pads, training)
            decided = self._by_class(key, first, training)
            if decided is not None:
                return decided
        if not self._pool_ok(k, s, d, pads, outs, x) or not _ops.pool_is_fast(
            kind, x, outs, k, s, d, pads, training=training
        ):
            return False, True
        if measure and not training:
            check = _ops.pool_agree_key(kind, x, outs, k, s, d, pads, training=training)
            turn = self._turn(key, check)
            if turn is not None:  # its check, where needed, is a paired call
                return turn, False
        if not _ops.pool_agrees(kind, x, outs, k, s, d, pads, training=training):
            return False, True
        if not measure or torch_run is None:
            return _policy.pool(kind, strategy, x, k, s, pads), True

        def native(x: Tensor) -> Tensor:
            if kind == "max":  # what each call pays: the finite checks
                all_finite(x)
            out = _ops.pool(kind, x, outs, k, s, d, pads)
            if kind != "max" and out.dtype == torch.bfloat16:
                all_finite(out)
            return out

        return self._measured(key, (x,), torch_run, native, training), True

    def pool_layer(
        self, layer: Any, op: str, plan: Plan, x: Tensor, torch_fn: FastFn | None = None
    ) -> FastFn | None:
        """A per-layer closure (``padkit.nn``'s fast path) running the pool on the backend
        where it is the faster side, else ``torch_fn`` (the layer's torch plan; by default
        its full forward); None where the backend is never used for this layer and input."""
        rec = layer._op()  # the layer's checked record, from its live attributes
        if op == "max_pool":
            if rec.return_indices or not rec.neutral_pads:
                return None  # oneDNN pads a max pool with -inf only
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
        if (
            not self.force
            and not self.tuner.measure
            and not _policy.pool(kind, plan.strategy, x, k, s, plan.pads)
        ):
            return None
        if not self.force:
            # the layer's closure serves inference and training calls alike
            for training in (False, True):
                if not _ops.pool_is_fast(
                    kind, x, plan.out_size, k, s, d, plan.pads, training=training
                ):
                    return None
        pads, outs, strategy = plan.pads, plan.out_size, plan.strategy
        fallback: FastFn = layer._forward if torch_fn is None else torch_fn

        # the layouts, training flags and thread counts for which the backend decided on
        # torch's side: those calls go to the torch plan without asking again (the torch
        # plan is exact for every input; a tiny pool's call costs a few microseconds)
        declined: set[tuple[Any, ...]] = set()

        def run(x: Tensor) -> Any:
            key = (
                x.stride(),
                x.requires_grad and torch.is_grad_enabled(),
                torch.get_num_threads(),
                self.tuner.version,
                self.tuner.measure,
                self.force,
            )
            if key in declined:
                return fallback(x)
            note: list[bool] = []
            out = self.pool(kind, strategy, x, k, s, d, pads, outs, fallback, note=note)
            if out is None:
                if note and len(declined) < 64:
                    declined.add(key)
                return fallback(x)
            return out

        return run


def _windows_read_input(n: int, k: int, s: int, d: int, lo: int, outs: int) -> bool:
    """Whether each of ``outs`` windows (``k`` taps ``d`` apart, ``s`` apart, on an axis of
    ``n`` inputs after ``lo`` pads) has a tap on an input element. Windows lying wholly
    inside the input need no look; the edge windows are checked tap by tap."""
    ke = d * (k - 1) + 1
    first_inside = -(-lo // s)  # windows from here start inside the input
    last_inside = (lo + n - ke) // s  # ... and end inside it up to here
    head = range(min(max(first_inside, 0), outs))
    tail = range(max(last_inside + 1, len(head)), outs)
    for i in (*head, *tail):
        start = i * s
        if not any(lo <= start + j * d < lo + n for j in range(k)):
            return False
    return True


def _conv_key(
    op: str,
    x: Tensor,
    w: Tensor,
    s: Sequence[int],
    d: Sequence[int],
    pads: Pairs,
    groups: int,
    training: bool,
) -> _tune.Key:
    cin, cout = int(x.shape[1]), int(w.shape[1 if op == "conv_transpose" else 0])
    if op == "conv_transpose":
        cout *= groups
    return (
        op,
        tuple(int(v) for v in w.shape[2:]),
        tuple(s),
        tuple(d),
        tuple(pads),
        groups,
        (cin, cout),
        "channels_last" if _ops.is_channels_last(x) else "contiguous",
        str(x.dtype).replace("torch.", ""),
        _tune.bucket(int(x.shape[0])),
        tuple(_tune.bucket(int(n)) for n in x.shape[2:]),
        training,
        torch.get_num_threads(),
    )


def _pool_key(
    kind: str,
    x: Tensor,
    k: Sequence[int],
    s: Sequence[int],
    d: Sequence[int],
    pads: Pairs,
    training: bool,
) -> _tune.Key:
    return (
        f"{kind}_pool",
        tuple(k),
        tuple(s),
        tuple(d),
        tuple(pads),
        1,
        (int(x.shape[1]),),
        "channels_last" if _ops.is_channels_last(x) else "contiguous",
        str(x.dtype).replace("torch.", ""),
        _tune.bucket(int(x.shape[0])),
        tuple(_tune.bucket(int(n)) for n in x.shape[2:]),
        training,
        torch.get_num_threads(),
    )


class _Bench:
    """Runs one side of an op for timing: under ``no_grad`` in inference; forward and
    backward on detached copies of the inputs in training (the caller's tensors, their
    ``.grad`` and their autograd graph are left alone)."""

    def __init__(self, inputs: tuple[Tensor | None, ...], training: bool) -> None:
        self.training = training
        self.inputs = tuple(
            None if t is None else t.detach().requires_grad_(training and t.requires_grad)
            for t in inputs
        )
        self.grad: Tensor | None = None

    def run(self, fn: Callable[..., Any]) -> None:
        if not self.training:
            with torch.no_grad():
                fn(*self.inputs)
            return
        for t in self.inputs:
            if t is not None:
                t.grad = None
        with torch.enable_grad():
            out = fn(*self.inputs)
            if self.grad is None:
                self.grad = torch.ones_like(out)
            out.backward(self.grad)


@contextlib.contextmanager
def _torch_only() -> Iterator[None]:
    """padkit's torch plans, with the backend detached (while the tuner times them)."""
    global active
    before = active
    active = None
    try:
        yield
    finally:
        active = before


#: paired calls whose torch output is not finite (nothing to compare) after which a kernel
#: check is made on random stand-ins instead
_UNCOMPARED = 2


class _Turn:
    """One call's part in its class's timing on the workload's own calls (``samples``),
    or in a kernel check (``check``, :func:`_ops.conv_agree_key`): torch alone, oneDNN
    alone, or paired (both sides, :meth:`Hook._paired`)."""

    __slots__ = ("check", "native", "paired", "samples", "what")

    def __init__(
        self,
        samples: _tune.Samples | None,
        native: bool,
        check: tuple[Any, ...] | None = None,
        *,
        paired: bool = False,
    ) -> None:
        self.samples = samples
        self.native = native
        self.check = check
        #: both sides on this call (a kernel check), torch's output returned
        self.paired = paired
        #: the op, as the backend's fallback counts name it
        self.what = "pool" if check is not None and check[0] == "pool" else "conv"


#: a call signature not seen before
_NEW: Any = object()
#: first calls of new call signatures that a training op signature (size class) with no
#: measured side runs on torch before one of them times it (inference classes are timed
#: on their own calls instead, :class:`_tune.Samples`). A timing with its kernel check
#: costs about 10 to 40 calls: a workload whose sizes never repeat pays it once per class
#: after this many calls; one whose sizes repeat has its class timed at a size's second
#: call
TIME_UNSEEN = 256

HOOK = Hook()


def _routes_timed() -> bool:
    return HOOK.tuner.timing_on()


# the backend's own timed routes (a conv's input gradient) follow the tuning switch
_ops.routes_timed = _routes_timed

#: what padkit.functional and padkit.nn consult before each op: :data:`HOOK` when the
#: backend is on, None when it is off, or (by default, until the first op) an object that
#: turns it on where it builds (:mod:`padkit.native` sets it)
active: Any = None
