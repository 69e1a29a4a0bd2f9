"""torch glue for the oneDNN library: parameter blocks, output allocation, autograd.

Every op takes per-side pads ``(lo, hi)`` per spatial axis and runs as one oneDNN
primitive on the tensors' own memory (NCHW or channels-last; anything else is made
contiguous first). Outputs are allocated here, in the input's memory format. Under
autograd the ops are :class:`torch.autograd.Function` s whose backward runs oneDNN's
backward-data / backward-weights (conv) or pooling-backward primitives. A backward
that must itself be differentiable (``create_graph=True``: gradient penalties, double
backward) runs as torch's ops on the explicitly padded input instead, so second
derivatives work and equal the reference's.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ._build import Library
from ._tune import bucket

__all__ = ["NativeError", "conv", "pool"]

Pairs = tuple[tuple[int, int], ...]

DTYPES = {torch.float32: 0, torch.bfloat16: 1}
_CL = {4: torch.channels_last, 5: torch.channels_last_3d}

_lib: Library | None = None


class NativeError(RuntimeError):
    """oneDNN refused or failed an op (the message is oneDNN's)."""


def set_library(lib: Library | None) -> None:
    global _lib
    _lib = lib


def _library() -> Library:
    if _lib is None:
        raise NativeError("padkit's native backend is not loaded (padkit.native.enable())")
    return _lib


def cache_mark() -> int:
    """A mark in the library's log of the primitives it builds (see :func:`drop_since`)."""
    return -1 if _lib is None else int(_lib.lib.padkit_cache_mark())


def drop_since(mark: int) -> None:
    """Drop the primitives built since ``mark``, with the reorder buffers each keeps for its
    signature (a blocked-layout copy of an input, weight or output, reused from call to
    call): what checking and timing a signature built, where the backend then leaves that
    signature to torch, would otherwise stay for the life of the process."""
    if _lib is not None and mark >= 0:
        _lib.lib.padkit_cache_drop_since(mark)


def is_channels_last(x: Tensor) -> bool:
    fmt = _CL.get(x.dim())
    return fmt is not None and not x.is_contiguous() and x.is_contiguous(memory_format=fmt)


def dense(x: Tensor) -> tuple[Tensor, bool]:
    """``x`` as NCHW-contiguous or channels-last-contiguous, and whether it is the latter."""
    if is_channels_last(x):
        return x, True
    return (x if x.is_contiguous() else x.contiguous()), False


def _empty(shape: Sequence[int], like: Tensor, cl: bool) -> Tensor:
    fmt = _CL[len(shape)] if cl else torch.contiguous_format
    return torch.empty(tuple(shape), dtype=like.dtype, device=like.device, memory_format=fmt)


def _like(t: Tensor, cl: bool) -> Tensor:
    fmt = _CL[t.dim()] if cl else torch.contiguous_format
    return t if t.is_contiguous(memory_format=fmt) else t.contiguous(memory_format=fmt)


def _check(rc: int) -> None:
    if rc != 0:
        raise NativeError(_library().error())


def _ptr(t: Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


# ----------------------------------------------------------------------------- convolution


def _conv_params(
    kind: int,
    x: Tensor,
    w: Tensor,
    has_bias: bool,
    out: Sequence[int],
    s: Sequence[int],
    d: Sequence[int],
    pads: Pairs,
    groups: int,
    training: bool,
    cl: bool,
) -> Any:
    nd = x.dim() - 2
    n, ic = int(x.shape[0]), int(x.shape[1])
    oc = int(w.shape[0]) if kind == 0 else int(w.shape[1]) * groups
    vals = [
        kind,
        torch.get_num_threads(),
        DTYPES[x.dtype],
        nd,
        groups,
        int(has_bias),
        n,
        ic,
        oc,
        int(training),
        int(cl),
    ]
    for a in range(nd):
        vals += [
            int(x.shape[2 + a]),
            int(out[2 + a]),
            int(w.shape[2 + a]),
            int(s[a]),
            int(d[a]) - 1,
            int(pads[a][0]),
            int(pads[a][1]),
        ]
    vals += list(x.stride())
    vals += _out_strides(out, cl)
    vals += list(w.stride())
    return (ctypes.c_int64 * len(vals))(*vals)


def _out_strides(shape: Sequence[int], cl: bool) -> list[int]:
    nd = len(shape) - 2
    if cl:
        st = [0] * len(shape)
        st[1] = 1
        acc = int(shape[1])
        for a in range(nd - 1, -1, -1):
            st[2 + a] = acc
            acc *= int(shape[2 + a])
        st[0] = acc
        return st
    st = [0] * len(shape)
    acc = 1
    for a in range(len(shape) - 1, -1, -1):
        st[a] = acc
        acc *= int(shape[a])
    return st


def conv_out_shape(
    kind: int,
    x: Tensor,
    w: Tensor,
    s: Sequence[int],
    d: Sequence[int],
    pads: Pairs,
    groups: int,
) -> tuple[int, ...]:
    nd = x.dim() - 2
    sizes = []
    for a in range(nd):
        n, k = int(x.shape[2 + a]), int(w.shape[2 + a])
        ke = d[a] * (k - 1) + 1
        lo, hi = pads[a]
        if kind == 0:
            sizes.append((n + lo + hi - ke) // s[a] + 1)
        else:
            sizes.append((n - 1) * s[a] + ke - lo - hi)
    oc = int(w.shape[0]) if kind == 0 else int(w.shape[1]) * groups
    return (int(x.shape[0]), oc, *sizes)


#: per thread: the call's facts -> (output shape, parameter block). The block holds no
#: pointer and no identity of a tensor (the data pointers are passed with each call), so a
#: cached block is the same block rebuilt.
_blocks = threading.local()


def _call_key(
    kind: int,
    x: Tensor,
    w: Tensor,
    has_bias: bool,
    s: Sequence[int],
    d: Sequence[int],
    pads: Pairs,
    groups: int,
    training: bool,
) -> tuple[Any, ...]:
    """What a conv call's parameter block is built from, but the data pointers, the thread
    count and the weight's identity (the layout follows from the strides)."""
    return (
        kind,
        x.shape,
        x.stride(),
        x.dtype,
        w.shape,
        w.stride(),
        has_bias,
        tuple(s),
        tuple(d),
        tuple(pads),
        groups,
        training,
    )


def _forward_block(
    kind: int,
    x: Tensor,
    w: Tensor,
    has_bias: bool,
    s: Sequence[int],
    d: Sequence[int],
    pads: Pairs,
    groups: int,
    training: bool,
    cl: bool,
) -> tuple[tuple[int, ...], Any]:
    cache: dict[tuple[Any, ...], tuple[tuple[int, ...], Any]] | None
    cache = getattr(_blocks, "conv", None)
    if cache is None:
        cache = _blocks.conv = {}
    key = (*_call_key(kind, x, w, has_bias, s, d, pads, groups, training), torch.get_num_threads())
    hit = cache.get(key)
    if hit is None:
        shape = conv_out_shape(kind, x, w, s, d, pads, groups)
        block = _conv_params(kind, x, w, has_bias, shape, s, d, pads, groups, training, cl)
        if len(cache) > 1024:
            cache.clear()
        hit = cache[key] = (shape, block)
    return hit


def _conv_forward(
    kind: int,
    x: Tensor,
    w: Tensor,
    b: Tensor | None,
    s: Sequence[int],
    d: Sequence[int],
    pads: Pairs,
    groups: int,
    training: bool,
    cl: bool,
) -> Tensor:
    shape, p = _forward_block(kind, x, w, b is not None, s, d, pads, groups, training, cl)
    out = _empty(shape, x, cl)
    lib = _library().lib
    _check(lib.padkit_conv_fwd(p, x.data_ptr(), w.data_ptr(), _ptr(b), out.data_ptr()))
    return out


#: per signature of a conv's input gradient that can run as a forward conv (stride 1,
#: per-side pads): whether it does (True), the backward-data primitive does (False), or
#: each side's timed calls so far (decided after :data:`_GRAD_SAMPLES` a side)
_GRAD_ROUTE: dict[tuple[Any, ...], bool | tuple[list[float], list[float]]] = {}
_GRAD_SAMPLES = 2


def _routes_timed() -> bool:
    """Whether a route may be chosen by timing; the backend's dispatcher replaces this
    with its tuning switch (``padkit.native.set_tuning``, ``PADKIT_NATIVE_TUNE``). Off, and
    under ``torch.use_deterministic_algorithms``, the backward-data primitive runs."""
    return not torch.are_deterministic_algorithms_enabled()


routes_timed = _routes_timed


def _grad_as_forward(
    kind: int, w: Tensor, s: Sequence[int], d: Sequence[int], pads: Pairs, groups: int
) -> tuple[Tensor, Pairs] | None:
    """A stride-1 conv's input gradient is a conv of the output gradient with the weight
    flipped and its channels swapped (per group), padded by ``k_eff - 1 - pad`` per side:
    that weight and those pads, or None where the call is not such a conv (transposed, a
    stride, symmetric pads: oneDNN's backward-data kernels run those as fast, or a pad past
    the kernel's extent)."""
    if kind != 0 or any(v != 1 for v in s) or all(lo == hi for lo, hi in pads):
        return None
    ks = tuple(int(k) for k in w.shape[2:])
    back = tuple((di * (k - 1) - lo, di * (k - 1) - hi) for (lo, hi), k, di in zip(pads, ks, d))
    if any(lo < 0 or hi < 0 for lo, hi in back):
        return None
    oc, icg = int(w.shape[0]), int(w.shape[1])
    wt = w.reshape(groups, oc // groups, icg, *ks).transpose(1, 2)
    wt = wt.reshape(icg * groups, oc // groups, *ks).flip(tuple(range(2, w.dim())))
    return wt, back


def _grad_input(
    kind: int,
    x: Tensor,
    w: Tensor,
    grad: Tensor,
    s: Sequence[int],
    d: Sequence[int],
    pads: Pairs,
    groups: int,
    p: Any,
) -> Tensor:
    """The input gradient: oneDNN's backward-data primitive, or, for a stride-1 conv with
    per-side pads, a forward conv of the output gradient (:func:`_grad_as_forward`),
    whichever its first calls timed faster (per signature). oneDNN's direct backward-data
    kernels are slow on some per-side pads that its forward kernels take (a causal 1-d
    conv, k3 d4, 64 channels, 4096 samples, N=8, 2 threads: 5.2 ms against 2.8 ms as a
    forward conv), and as fast or faster on others (2-D 4x4 'same', 256 channels, 32x32,
    N=4: 24.4 ms against 26.6 ms)."""
    lib = _library().lib

    def primitive() -> Tensor:
        gx = torch.empty_like(x)
        _check(lib.padkit_conv_bwd_data(p, grad.data_ptr(), w.data_ptr(), gx.data_ptr()))
        return gx

    key = (*_call_key(kind, x, w, False, s, d, pads, groups, True), torch.get_num_threads())
    route = _GRAD_ROUTE.get(key)
    if route is False or not routes_timed():
        return primitive()
    as_forward = _grad_as_forward(kind, w, s, d, pads, groups)
    if as_forward is None:
        _GRAD_ROUTE[key] = False
        return primitive()
    wt, back = as_forward

    def forward() -> Tensor:
        with torch.no_grad():
            gx = conv(grad, wt, None, (1,) * len(s), d, back, groups)
        return gx

    if route is True:
        return forward()
    if route is None:
        if len(_GRAD_ROUTE) >= 4096:
            _GRAD_ROUTE.clear()
        route = _GRAD_ROUTE[key] = ([], [])
    times_p, times_f = route
    use_forward = len(times_f) < len(times_p)
    t0 = time.perf_counter()
    gx = forward() if use_forward else primitive()
    (times_f if use_forward else times_p).append(time.perf_counter() - t0)
    if len(times_f) >= _GRAD_SAMPLES and len(times_p) >= _GRAD_SAMPLES:
        _GRAD_ROUTE[key] = min(times_f) < min(times_p)
    return gx


class _ConvFunction(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        x: Tensor,
        w: Tensor,
        b: Tensor | None,
        meta: tuple[Any, ...],
    ) -> Tensor:
        kind, s, d, pads, groups, cl = meta
        out = _conv_forward(kind, x, w, b, s, d, pads, groups, True, cl)
        ctx.save_for_backward(x, w)
        ctx.meta = meta
        ctx.has_bias = b is not None
        ctx.out_shape = tuple(out.shape)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        x, w = ctx.saved_tensors
        kind, s, d, pads, groups, cl = ctx.meta
        if torch.is_grad_enabled():  # create_graph=True: a backward with a graph of its own
            b = w.new_zeros(ctx.out_shape[1]) if ctx.has_bias else None
            grads = _reference_grads(
                lambda x, w, b: _conv_reference(kind, x, w, b, s, d, pads, groups),
                (x, w, b),
                ctx.needs_input_grad[:3],
                grad,
            )
            return (*grads, None)
        grad = _like(grad, cl)
        lib = _library().lib
        gx = gw = gb = None
        p = _conv_params(kind, x, w, ctx.has_bias, ctx.out_shape, s, d, pads, groups, True, cl)
        if ctx.needs_input_grad[0]:
            gx = _grad_input(kind, x, w, grad, s, d, pads, groups, p)
        if ctx.needs_input_grad[1] or (ctx.has_bias and ctx.needs_input_grad[2]):
            gw = torch.empty_like(w)
            gb = torch.empty(ctx.out_shape[1], dtype=w.dtype) if ctx.has_bias else None
            _check(
                lib.padkit_conv_bwd_weights(
                    p, x.data_ptr(), grad.data_ptr(), gw.data_ptr(), _ptr(gb)
                )
            )
        return (
            gx,
            gw if ctx.needs_input_grad[1] else None,
            gb if ctx.has_bias and ctx.needs_input_grad[2] else None,
            None,
        )


def conv(
    x: Tensor,
    w: Tensor,
    b: Tensor | None,
    s: Sequence[int],
    d: Sequence[int],
    pads: Pairs,
    groups: int,
    *,
    transposed: bool = False,
) -> Tensor:
    """Conv (or transposed conv, whose ``pads`` are crops) with per-side ``pads``.

    Example:
        >>> import padkit.native as native
        >>> if native.available():  # loads the library; padkit's routing stays as it was
        ...     x, w = torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)
        ...     y = conv(x, w, None, (2, 2), (1, 1), ((0, 1), (0, 1)), 1)
        ...     ref = torch.nn.functional.conv2d(torch.nn.functional.pad(x, (0, 1, 0, 1)), w,
        ...                                      stride=2)
        ...     assert torch.allclose(y, ref, atol=1e-5)
    """
    if x.dim() == 3:
        # as torch does: a 1-D conv is a 2-D one of height 1 (oneDNN's fast kernels are 2-D)
        out2 = conv(
            x.unsqueeze(2),
            w.unsqueeze(2),
            b,
            (1, *s),
            (1, *d),
            ((0, 0), *pads),
            groups,
            transposed=transposed,
        )
        return out2.squeeze(2)
    kind = 1 if transposed else 0
    x, cl = dense(x)
    if w.dim() in _CL and (cl or not w.is_contiguous()):
        w = _like(w, cl) if cl else w.contiguous()
    elif not w.is_contiguous():
        w = w.contiguous()
    if b is not None and not b.is_contiguous():
        b = b.contiguous()
    s, d, pads = tuple(s), tuple(d), tuple(pads)
    needs_grad = torch.is_grad_enabled() and (
        x.requires_grad or w.requires_grad or (b is not None and b.requires_grad)
    )
    if needs_grad:
        out: Tensor = _ConvFunction.apply(x, w, b, (kind, s, d, pads, groups, cl))
        return out
    return _conv_forward(kind, x, w, b, s, d, pads, groups, False, cl)


# ----------------------------------------------------------------------------- kernels

_fast: dict[tuple[int, ...], tuple[str, ...] | None] = {}
#: the kernels oneDNN picks per pass (None: it refuses) by the Python facts of the call
_fast_conv: dict[tuple[Any, ...], tuple[str, ...] | None] = {}


def _impl_names(p: Any, passes: Sequence[int]) -> list[str]:
    lib = _library().lib
    buf = ctypes.create_string_buffer(256)
    names = []
    for which in passes:
        if lib.padkit_impl(p, which, buf, 256) != 0:
            raise NativeError(_library().error())
        names.append(buf.value.decode())
    return names


def conv_impls(
    x: Tensor,
    w: Tensor,
    b: Tensor | None,
    s: Sequence[int],
    d: Sequence[int],
    pads: Pairs,
    groups: int,
    *,
    transposed: bool = False,
    training: bool = False,
) -> list[str]:
    """The implementation oneDNN picks on this CPU for each pass of a conv (forward, and
    backward data and weights when ``training``), e.g. ``brgconv:avx512_core``, ``ref:any``."""
    if x.dim() == 3:
        return conv_impls(
            x.unsqueeze(2),
            w.unsqueeze(2),
            b,
            (1, *s),
            (1, *d),
            ((0, 0), *pads),
            groups,
            transposed=transposed,
            training=training,
        )
    kind = 1 if transposed else 0
    shape = conv_out_shape(kind, x, w, s, d, pads, groups)
    p = _conv_params(
        kind,
        x,
        w,
        b is not None,
        shape,
        s,
        d,
        pads,
        groups,
        training,
        is_channels_last(x),
    )
    p[1] = 0
    return _impl_names(p, (0, 1, 2) if training else (0,))


def _kernels(p: Any, n: int, passes: Sequence[int]) -> tuple[str, ...] | None:
    """The kernel oneDNN picks for each pass (None where it refuses the op)."""
    key = (*(int(p[i]) for i in range(n)), *passes)
    if key not in _fast:
        try:
            names: tuple[str, ...] | None = tuple(_impl_names(p, passes))
        except NativeError:
            names = None
        if len(_fast) > 4096:
            _fast.clear()
        _fast[key] = names
    return _fast[key]


def _optimised(names: tuple[str, ...] | None) -> bool:
    """An optimised kernel (not oneDNN's reference loops) for every pass."""
    return names is not None and not any(name.startswith("ref") for name in names)


def _has_fast_kernels(p: Any, n: int, passes: Sequence[int]) -> bool:
    """Whether oneDNN has an optimised kernel (not its reference loops) for every pass."""
    return _optimised(_kernels(p, n, passes))


def conv_is_fast(
    x: Tensor,
    w: Tensor,
    b: Tensor | None,
    s: Sequence[int],
    d: Sequence[int],
    pads: Pairs,
    groups: int,
    *,
    transposed: bool = False,
    training: bool = False,
) -> bool:
    """oneDNN runs this conv (and, when ``training``, both backward passes) on an optimised
    kernel; some pads / group counts get only its reference loops, many times slower."""
    return _optimised(
        _conv_kernels(x, w, b, s, d, pads, groups, transposed=transposed, training=training)
    )


def _conv_kernels(
    x: Tensor,
    w: Tensor,
    b: Tensor | None,
    s: Sequence[int],
    d: Sequence[int],
    pads: Pairs,
    groups: int,
    *,
    transposed: bool,
    training: bool,
) -> tuple[str, ...] | None:
    kind = 1 if transposed else 0
    key = _call_key(kind, x, w, b is not None, s, d, pads, groups, training)
    if key not in _fast_conv:
        try:
            impls: tuple[str, ...] | None = tuple(
                conv_impls(x, w, b, s, d, pads, groups, transposed=transposed, training=training)
            )
        except NativeError:
            impls = None
        if len(_fast_conv) > 4096:
            _fast_conv.clear()
        _fast_conv[key] = impls
    return _fast_conv[key]


def _size_class(x: Tensor) -> tuple[Any, ...]:
    """What a kernel check generalises over: the batch and sizes rounded up to a power of
    two (the tuner's :func:`~padkit.native._tune.bucket`), the channels, the layout and the
    dtype."""
    sizes = [bucket(int(n)) for n in x.shape[2:]]
    return (bucket(int(x.shape[0])), int(x.shape[1]), *sizes, is_channels_last(x), x.dtype)


#: answers of conv_agrees / pool_agrees by the call's facts
_agrees: dict[tuple[Any, ...], bool] = {}


#: standard normal values (a fixed seed) that the checks' stand-ins are cut from: drawn once
#: and grown as needed up to :data:`_NOISE_MAX` values, so a stand-in costs a copy where a
#: draw of a feature map's values cost more than the op it checks
_noise = torch.empty(0)
_NOISE_MAX = 1 << 18


def _stand_in(t: Tensor, gen: torch.Generator, grad: bool, part: int = 0) -> Tensor:
    """Random values in ``t``'s shape, strides and dtype (never the global generator);
    ``part``: stand-ins of one check start at different places of the values."""
    global _noise
    n, skip = t.numel(), 31 * part % 127
    if n + skip > _NOISE_MAX:
        v = torch.randn(t.shape, generator=gen, dtype=torch.float32)
    else:
        if _noise.numel() < n + skip:
            size = min(max(n + skip, 2 * _noise.numel(), 1 << 16), _NOISE_MAX)
            _noise = torch.randn(size, generator=torch.Generator().manual_seed(0))
        v = _noise[skip : skip + n].view(t.shape)
    out = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype).copy_(v)
    return out.requires_grad_(grad)


def close_enough(got: Tensor | None, want: Tensor | None, dtype: torch.dtype) -> bool:
    """``got`` within a loose tolerance of ``want`` (both computed here, in float32): the
    check is for kernels that compute garbage, not for rounding."""
    if got is None or want is None:
        return got is None and want is None
    if got.shape != want.shape:
        return False
    if got.numel() == 0:
        return True
    with torch.no_grad():
        got, want = got.detach().float(), want.detach().float()
        tol = 3e-2 if dtype == torch.bfloat16 else 1e-3
        scale = max(float(want.abs().max()), 1.0)
        err = float((got - want).abs().max())
    return err <= tol * scale  # False for NaN


def _agree(
    key: tuple[Any, ...],
    inputs: Sequence[Tensor | None],
    native_fn: Any,
    reference: Any,
    training: bool,
) -> bool:
    """Whether oneDNN's result (and, in training, its gradients) equals torch's reference
    on random stand-ins of ``inputs``; remembered per call signature. oneDNN has kernels
    that compute garbage for some signatures (a bf16 3-D transposed conv's weight gradient
    on channels-last inputs, under AVX-512 without AMX): such a signature runs on torch."""
    ok = _agrees.get(key)
    if ok is not None:
        return ok
    gen = torch.Generator().manual_seed(0)
    dtype = next(t for t in inputs if t is not None).dtype
    try:
        with torch.enable_grad() if training else torch.no_grad():
            ins = [
                None if t is None else _stand_in(t, gen, training, i) for i, t in enumerate(inputs)
            ]
            got = native_fn(*ins)
            ref_ins = [
                None if t is None else t.detach().float().requires_grad_(training) for t in ins
            ]
            want = reference(*ref_ins)
            ok = close_enough(got, want, dtype)
            if ok and training:
                g = _stand_in(got, gen, False, len(inputs))
                live = [t for t in ins if t is not None]
                ref_live = [t for t in ref_ins if t is not None]
                grads = torch.autograd.grad(got, live, g)
                ref_grads = torch.autograd.grad(want, ref_live, g.float())
                ok = all(close_enough(a, b, dtype) for a, b in zip(grads, ref_grads))
    except (NativeError, RuntimeError):
        ok = False
    if len(_agrees) > 4096:
        _agrees.clear()
    _agrees[key] = ok
    return ok


def conv_agree_key(
    x: Tensor,
    w: Tensor,
    b: Tensor | None,
    s: Sequence[int],
    d: Sequence[int],
    pads: Pairs,
    groups: int,
    *,
    transposed: bool = False,
    training: bool = False,
) -> tuple[Any, ...]:
    """What :func:`conv_agrees` checks once: the kernels oneDNN picks for each pass (asked
    per exact call) and the input's :func:`_size_class`, with the op's other facts."""
    kernels = _conv_kernels(x, w, b, s, d, pads, groups, transposed=transposed, training=training)
    return (
        1 if transposed else 0,
        _size_class(x),
        tuple(w.shape),
        b is not None,
        tuple(s),
        tuple(d),
        tuple(pads),
        groups,
        training,
        torch.get_num_threads(),
        kernels,
    )


def conv_agrees(
    x: Tensor,
    w: Tensor,
    b: Tensor | None,
    s: Sequence[int],
    d: Sequence[int],
    pads: Pairs,
    groups: int,
    *,
    transposed: bool = False,
    training: bool = False,
) -> bool:
    """oneDNN's conv (forward, and both backward passes when ``training``) equals torch's
    ``F.pad`` + conv on random stand-ins of these tensors: checked once per kernel and
    size class (:func:`conv_agree_key`), so a new size whose class and kernels were
    checked costs nothing here."""
    kind = 1 if transposed else 0
    key = conv_agree_key(x, w, b, s, d, pads, groups, transposed=transposed, training=training)

    def native_fn(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
        return conv(x, w, b, s, d, pads, groups, transposed=transposed)

    def reference(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
        return _conv_reference(kind, x, w, b, s, d, pads, groups)

    return _agree(key, (x, w, b), native_fn, reference, training)


def pool_agree_key(
    kind: str,
    x: Tensor,
    out_sizes: Sequence[int],
    k: Sequence[int],
    s: Sequence[int],
    d: Sequence[int],
    pads: Pairs,
    *,
    training: bool = False,
) -> tuple[Any, ...]:
    """As :func:`conv_agree_key`, for a pool."""
    alg = POOL_ALG[kind]
    shape = (int(x.shape[0]), int(x.shape[1]), *out_sizes)
    p = _pool_params(alg, x, shape, k, s, d, pads, training, is_channels_last(x))
    p[1] = 0
    kernels = _kernels(p, len(p), (0, 1) if training else (0,))
    facts = (tuple(k), tuple(s), tuple(d), tuple(pads), training, torch.get_num_threads())
    return ("pool", alg, _size_class(x), *facts, kernels)


def pool_agrees(
    kind: str,
    x: Tensor,
    out_sizes: Sequence[int],
    k: Sequence[int],
    s: Sequence[int],
    d: Sequence[int],
    pads: Pairs,
    *,
    training: bool = False,
) -> bool:
    """As :func:`conv_agrees`, for a pool."""
    alg = POOL_ALG[kind]
    key = pool_agree_key(kind, x, out_sizes, k, s, d, pads, training=training)

    def native_fn(x: Tensor) -> Tensor:
        return pool(kind, x, out_sizes, k, s, d, pads)

    def reference(x: Tensor) -> Tensor:
        return _pool_reference(alg, x, out_sizes, k, s, d, pads)

    return _agree(key, (x,), native_fn, reference, training)


def agreement(key: tuple[Any, ...]) -> bool | None:
    """What the check of ``key`` found (:func:`conv_agrees`), None where it was not made."""
    return _agrees.get(key)


def note_agreement(key: tuple[Any, ...], ok: bool) -> None:
    """The check of ``key`` made on a workload's own call: oneDNN's output compared with
    torch's (inference; the tuner's paired calls)."""
    if len(_agrees) > 4096:
        _agrees.clear()
    _agrees[key] = ok


def pool_is_fast(
    kind: str,
    x: Tensor,
    out_sizes: Sequence[int],
    k: Sequence[int],
    s: Sequence[int],
    d: Sequence[int],
    pads: Pairs,
    *,
    training: bool = False,
) -> bool:
    """As :func:`conv_is_fast`, for a pool."""
    shape = (int(x.shape[0]), int(x.shape[1]), *out_sizes)
    p = _pool_params(POOL_ALG[kind], x, shape, k, s, d, pads, training, is_channels_last(x))
    p[1] = 0
    return _has_fast_kernels(p, len(p), (0, 1) if training else (0,))


# ----------------------------------------------------------------------------- pooling

POOL_ALG = {"max": 0, "avg_include": 1, "avg_exclude": 2}


def _pool_params(
    alg: int,
    x: Tensor,
    out: Sequence[int],
    k: Sequence[int],
    s: Sequence[int],
    d: Sequence[int],
    pads: Pairs,
    training: bool,
    cl: bool,
    blocked: bool = False,
) -> Any:
    nd = x.dim() - 2
    c = int(x.shape[1])
    vals = [2, torch.get_num_threads(), DTYPES[x.dtype], nd, alg, int(blocked), int(x.shape[0])]
    vals += [c, c]
    vals += [int(training), int(cl)]
    for a in range(nd):
        vals += [
            int(x.shape[2 + a]),
            int(out[2 + a]),
            int(k[a]),
            int(s[a]),
            int(d[a]) - 1,
            int(pads[a][0]),
            int(pads[a][1]),
        ]
    vals += list(x.stride())
    vals += _out_strides(out, cl)
    return (ctypes.c_int64 * len(vals))(*vals)


def _pool_forward(
    alg: int,
    x: Tensor,
    out_sizes: Sequence[int],
    k: Sequence[int],
    s: Sequence[int],
    d: Sequence[int],
    pads: Pairs,
    training: bool,
    cl: bool,
) -> tuple[Tensor, Tensor | None]:
    shape = (int(x.shape[0]), int(x.shape[1]), *out_sizes)
    out = _empty(shape, x, cl)
    p = _pool_params(alg, x, shape, k, s, d, pads, training, cl)
    lib = _library().lib
    ws = None
    if training and alg == 0:
        size = (ctypes.c_int64 * 1)()
        _check(lib.padkit_pool_workspace(p, size))
        ws = torch.empty(max(int(size[0]), 1), dtype=torch.uint8)
    _check(lib.padkit_pool_fwd(p, x.data_ptr(), out.data_ptr(), _ptr(ws)))
    return out, ws


class _PoolFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, meta: tuple[Any, ...]) -> Tensor:
        alg, out_sizes, k, s, d, pads, cl = meta
        out, ws = _pool_forward(alg, x, out_sizes, k, s, d, pads, True, cl)
        ctx.save_for_backward(x)
        ctx.meta = meta
        ctx.x_shape, ctx.x_stride, ctx.dtype = tuple(x.shape), tuple(x.stride()), x.dtype
        ctx.ws = ws
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, None]:
        alg, outs, k, s, d, pads, cl = ctx.meta
        if torch.is_grad_enabled():  # create_graph=True: a backward with a graph of its own
            (x,) = ctx.saved_tensors
            gx = _reference_grads(
                lambda x: _pool_reference(alg, x, outs, k, s, d, pads), (x,), (True,), grad
            )[0]
            return gx, None
        grad = _like(grad, cl)
        gx = torch.empty_strided(ctx.x_shape, ctx.x_stride, dtype=ctx.dtype)
        p = _pool_params(alg, gx, grad.shape, k, s, d, pads, True, cl)
        lib = _library().lib
        _check(lib.padkit_pool_bwd(p, grad.data_ptr(), gx.data_ptr(), _ptr(ctx.ws)))
        return gx, None


# ----------------------------------------------------------------------------- torch references

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
_MAX = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}


def _torch_pad(pads: Pairs) -> list[int]:
    return [v for p in reversed(pads) for v in p]


def _conv_reference(
    kind: int,
    x: Tensor,
    w: Tensor,
    b: Tensor | None,
    s: Sequence[int],
    d: Sequence[int],
    pads: Pairs,
    groups: int,
) -> Tensor:
    """The op in torch's own differentiable ops: ``F.pad`` + the unpadded conv, or the full
    transposed conv with ``pads`` cropped off."""
    nd = x.dim() - 2
    if kind == 0:
        return _CONV[nd](F.pad(x, _torch_pad(pads)), w, b, tuple(s), 0, tuple(d), groups)
    out = _CONV_T[nd](x, w, b, tuple(s), 0, 0, groups, tuple(d))
    for i, (lo, hi) in enumerate(pads):
        out = out.narrow(2 + i, lo, out.shape[2 + i] - lo - hi)
    return out


def _pool_reference(
    alg: int,
    x: Tensor,
    outs: Sequence[int],
    k: Sequence[int],
    s: Sequence[int],
    d: Sequence[int],
    pads: Pairs,
) -> Tensor:
    """A pool in torch's differentiable ops on the explicitly padded input (averages as a
    depthwise conv of ones, divided by the window's size or by its count of inputs)."""
    nd, tp = x.dim() - 2, _torch_pad(pads)
    if alg == 0:
        out = _MAX[nd](F.pad(x, tp, value=float("-inf")), tuple(k), tuple(s), 0, tuple(d))
    else:
        c = int(x.shape[1])
        total = _CONV[nd](F.pad(x, tp), x.new_ones((c, 1, *k)), None, tuple(s), 0, tuple(d), c)
        if alg == 1:
            out = total / float(torch.tensor(k).prod())
        else:
            inside = F.pad(x.new_ones((1, 1, *x.shape[2:])), tp)
            count = _CONV[nd](inside, x.new_ones((1, 1, *k)), None, tuple(s), 0, tuple(d))
            out = total / count
    for i, n in enumerate(outs):
        out = out.narrow(2 + i, 0, n)
    return out


def _reference_grads(
    fn: Any, inputs: tuple[Tensor | None, ...], needed: Sequence[bool], grad: Tensor
) -> tuple[Tensor | None, ...]:
    """Gradients of ``fn(*inputs)`` with a graph (for ``create_graph=True``)."""
    live = [
        None if t is None or not need else (t if t.requires_grad else t.detach().requires_grad_())
        for t, need in zip(inputs, needed)
    ]
    args = [a if a is not None else t for a, t in zip(live, inputs)]
    out = fn(*args)
    wanted = [t for t in live if t is not None]
    got = iter(torch.autograd.grad(out, wanted, grad, create_graph=True, allow_unused=True))
    return tuple(None if t is None else next(got) for t in live)


def pool(
    kind: str,
    x: Tensor,
    out_sizes: Sequence[int],
    k: Sequence[int],
    s: Sequence[int],
    d: Sequence[int],
    pads: Pairs,
) -> Tensor:
    """Max or average pool (``kind``: ``"max"``, ``"avg_include"``, ``"avg_exclude"``) with
    per-side ``pads``; ``out_sizes`` are the spatial output sizes (floor mode)."""
    alg = POOL_ALG[kind]
    x, cl = dense(x)
    meta = (alg, tuple(out_sizes), tuple(k), tuple(s), tuple(d), tuple(pads), cl)
    if torch.is_grad_enabled() and x.requires_grad:
        out: Tensor = _PoolFunction.apply(x, meta)
        return out
    return _pool_forward(alg, x, out_sizes, k, s, d, pads, False, cl)[0]
