"""The optional oneDNN backend (padkit.native) against the explicit F.pad reference.

The test extra installs the backend's oneDNN wheels and CI has a compiler, so the
library is built here (once per cache directory, a few seconds) and every case runs
with the backend forced on, with the planner choosing, and with the backend off.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import padkit.functional as PF
import padkit.native as native
import padkit.nn as pnn
from padkit import PaddingError
from padkit.native import _build, _dispatch, _ops

Pairs = tuple[tuple[int, int], ...]
CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
PCONV = {1: PF.conv1d, 2: PF.conv2d, 3: PF.conv3d}
PCONV_T = {1: PF.conv_transpose1d, 2: PF.conv_transpose2d, 3: PF.conv_transpose3d}
CL = {4: torch.channels_last, 5: torch.channels_last_3d}
ROOT = Path(__file__).resolve().parent.parent

#: the native extra's oneDNN wheels exist for Linux x86-64 only; elsewhere the extra
#: installs nothing and only the tests of padkit without the backend apply
requires_backend = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")),
    reason="the oneDNN wheels of padkit[native] are built for Linux x86-64 only",
)


def torch_pad(pairs: Pairs) -> list[int]:
    return [v for p in reversed(pairs) for v in p]


@pytest.fixture(scope="module", autouse=True)
def _threads() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module", autouse=True)
def _backend_as_found() -> Iterator[None]:
    """The tests turn the backend on and off; the modules after them get it as it was."""
    before = _dispatch.active
    yield
    _dispatch.active = before


@pytest.fixture(params=["forced", "planner", "off"])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    """The backend forced onto every eligible op, chosen by the planner, or off."""
    if request.param == "off":
        native.disable()
    else:
        assert native.enable(), native.info()
    _dispatch.HOOK.force = request.param == "forced"
    _dispatch.HOOK.fallbacks.clear()
    yield request.param
    _dispatch.HOOK.force = False
    native.disable()


def _layout(t: torch.Tensor, cl: bool) -> torch.Tensor:
    return t.contiguous(memory_format=CL[t.dim()]) if cl and t.dim() in CL else t


def _grads(
    out: torch.Tensor, inputs: list[torch.Tensor], g: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    return torch.autograd.grad(out, inputs, g)


def _ran_native(out: torch.Tensor) -> bool:
    """The autograd graph of ``out`` holds one of the backend's functions."""
    todo, seen = [out.grad_fn], 0
    while todo and seen < 20:
        fn = todo.pop()
        seen += 1
        if fn is None:
            continue
        if "_ConvFunction" in type(fn).__name__ or "_PoolFunction" in type(fn).__name__:
            return True
        todo += [nxt for nxt, _ in fn.next_functions]
    return False


def _close(a: torch.Tensor, b: torch.Tensor, tol: float = 2e-5) -> None:
    scale = max(1.0, float(b.detach().abs().max()))
    torch.testing.assert_close(a, b, rtol=tol, atol=tol * scale)


# ----------------------------------------------------------------------------- conv

CONV_CASES = [
    # (name, nd, k, s, d, pairs, groups, cin, cout)
    ("dense-tf-same-s2", 2, (3, 3), (2, 2), (1, 1), ((0, 1), (0, 1)), 1, 16, 32),
    ("stem-7x7-s2", 2, (7, 7), (2, 2), (1, 1), ((2, 3), (2, 3)), 1, 3, 16),
    ("tf-same-s1-even", 2, (4, 4), (1, 1), (1, 1), ((1, 2), (1, 2)), 1, 8, 8),
    ("same-lower-s2", 2, (3, 3), (2, 2), (1, 1), ((1, 0), (1, 0)), 1, 16, 16),
    ("dw-tf-same-s2", 2, (3, 3), (2, 2), (1, 1), ((0, 1), (0, 1)), 16, 16, 16),
    ("dw-5x5-s2", 2, (5, 5), (2, 2), (1, 1), ((1, 2), (1, 2)), 16, 16, 16),
    ("dw-dilated", 2, (3, 3), (2, 2), (2, 2), ((0, 2), (2, 4)), 4, 4, 4),
    ("grouped", 2, (3, 3), (1, 2), (1, 1), ((2, 0), (0, 1)), 2, 8, 6),
    ("causal-tcn", 1, (3,), (1,), (4,), ((8, 0),), 1, 16, 16),
    ("causal-k2-s2", 1, (2,), (2,), (1,), ((1, 0),), 1, 5, 7),
    ("video-causal", 3, (3, 3, 3), (1, 2, 2), (1, 1, 1), ((2, 0), (0, 1), (0, 1)), 1, 4, 8),
    ("symmetric", 2, (3, 3), (2, 2), (1, 1), ((1, 1), (1, 1)), 1, 8, 8),
]


@requires_backend
@pytest.mark.parametrize("cl", [False, True], ids=["nchw", "cl"])
@pytest.mark.parametrize(
    ("nd", "k", "s", "d", "pairs", "groups", "cin", "cout"),
    [c[1:] for c in CONV_CASES],
    ids=[c[0] for c in CONV_CASES],
)
def test_conv_forward_and_backward_match_the_reference(
    backend: str,
    cl: bool,
    nd: int,
    k: tuple[int, ...],
    s: tuple[int, ...],
    d: tuple[int, ...],
    pairs: Pairs,
    groups: int,
    cin: int,
    cout: int,
) -> None:
    torch.manual_seed(0)
    sizes = (11, 12, 9)[:nd]
    x = _layout(torch.randn(2, cin, *sizes), cl).requires_grad_()
    w = _layout(torch.randn(cout, cin // groups, *k), cl).requires_grad_()
    b = torch.randn(cout, requires_grad=True)
    out = PCONV[nd](x, w, b, s, pairs, d, groups)
    ref = CONV[nd](F.pad(x, torch_pad(pairs)), w, b, s, 0, d, groups)
    assert out.shape == ref.shape
    _close(out, ref)
    g = torch.randn_like(ref)
    for got, want in zip(_grads(out, [x, w, b], g), _grads(ref, [x, w, b], g)):
        _close(got, want)
    if backend == "forced" and pairs[0][0] != pairs[0][1]:
        assert _ran_native(out)
    if backend == "off":
        assert not _ran_native(out)
    assert not _dispatch.HOOK.fallbacks


@requires_backend
@pytest.mark.parametrize("cl", [False, True], ids=["nchw", "cl"])
def test_conv_without_grad_and_bias(backend: str, cl: bool) -> None:
    torch.manual_seed(0)
    x = _layout(torch.randn(3, 16, 15, 14), cl)
    w = torch.randn(16, 16, 3, 3)
    with torch.no_grad():
        out = PF.conv2d(x, w, None, 2, "same")
    ref = F.conv2d(F.pad(x, [0, 1, 1, 1]), w, None, 2)
    _close(out, ref)
    assert out.is_contiguous(memory_format=CL[4] if cl else torch.contiguous_format)


TRANSPOSE_CASES = [
    # (name, nd, k, s, d, padding, output_padding, groups)
    ("tf-same-s2-k3", 2, (3, 3), (2, 2), (1, 1), "same", 0, 1),
    ("tf-same-s2-k4", 2, (4, 4), (2, 2), (1, 1), "same", 0, 1),
    ("per-side-crops", 2, (3, 4), (2, 3), (1, 1), ((0, 2), (1, 0)), 0, 1),
    ("grouped-dilated", 2, (3, 3), (2, 2), (2, 1), ((1, 3), (0, 1)), 0, 2),
    ("output-padding", 2, (3, 3), (2, 2), (1, 1), ((1, 2), (1, 2)), 1, 1),
    ("1d-same", 1, (5,), (2,), (1,), "same", 0, 1),
    ("3d-same", 3, (3, 3, 3), (1, 2, 2), (1, 1, 1), "same", 0, 1),
]


@requires_backend
@pytest.mark.parametrize("cl", [False, True], ids=["nchw", "cl"])
@pytest.mark.parametrize(
    ("nd", "k", "s", "d", "padding", "op", "groups"),
    [c[1:] for c in TRANSPOSE_CASES],
    ids=[c[0] for c in TRANSPOSE_CASES],
)
def test_conv_transpose_forward_and_backward_match_the_reference(
    backend: str,
    cl: bool,
    nd: int,
    k: tuple[int, ...],
    s: tuple[int, ...],
    d: tuple[int, ...],
    padding: object,
    op: int,
    groups: int,
) -> None:
    torch.manual_seed(0)
    sizes = (7, 6, 5)[:nd]
    cin, cout = 8, 6
    x = _layout(torch.randn(2, cin, *sizes), cl).requires_grad_()
    w = torch.randn(cin, cout // groups, *k, requires_grad=True)
    b = torch.randn(cout, requires_grad=True)
    out = PCONV_T[nd](x, w, b, s, padding, op, groups, d)
    # reference: the full transposed conv, then the crops as slices
    full = CONV_T[nd](x, w, b, s, 0, 0, groups, d)
    crops = PF.transpose_crops(PF._parse(padding, nd, "t"), k, s, d, sizes)  # type: ignore[arg-type]
    ref = full
    for i, (lo, hi) in enumerate(crops):
        end = hi - op
        if end < 0:
            ref = F.pad(ref, [0, 0] * (nd - 1 - i) + [0, -end])
            end = 0
        ref = ref.narrow(2 + i, lo, ref.shape[2 + i] - lo - end)
    assert out.shape == ref.shape
    _close(out, ref)
    g = torch.randn_like(ref)
    for got, want in zip(_grads(out, [x, w, b], g), _grads(ref, [x, w, b], g)):
        _close(got, want)
    assert not _dispatch.HOOK.fallbacks


# ----------------------------------------------------------------------------- pools

POOL_CASES = [
    # (name, op, k, s, pairs, include_pad)
    ("max-tf-same-s2", "max", (3, 3), (2, 2), ((0, 1), (0, 1)), True),
    ("max-same-lower", "max", (3, 3), (2, 2), ((1, 0), (1, 0)), True),
    ("max-yolo", "max", (2, 2), (1, 1), ((0, 1), (0, 1)), True),
    ("max-big-pads", "max", (3, 3), (1, 1), ((2, 2), (0, 2)), True),
    ("avg-excl-s1", "avg", (2, 2), (1, 1), ((0, 1), (0, 1)), False),
    ("avg-incl-s1", "avg", (2, 2), (1, 1), ((0, 1), (0, 1)), True),
    ("avg-tf-same", "avg", (3, 3), (2, 2), ((0, 1), (0, 1)), False),
    ("avg-incl-s2", "avg", (3, 3), (2, 2), ((0, 1), (0, 1)), True),
    ("avg-lower-excl", "avg", (3, 3), (2, 2), ((1, 0), (1, 0)), False),
]


def _pool_reference(
    x: torch.Tensor, op: str, k: tuple[int, ...], s: tuple[int, ...], pairs: Pairs, incl: bool
) -> torch.Tensor:
    """Windows over the explicitly padded input; the exclude-pad divisor from a ones map."""
    if op == "max":
        return F.max_pool2d(F.pad(x, torch_pad(pairs), value=-float("inf")), k, s)
    total = F.avg_pool2d(F.pad(x, torch_pad(pairs)), k, s, divisor_override=1)
    if incl:
        return total / (k[0] * k[1])
    ones = F.pad(torch.ones_like(x[:1, :1]), torch_pad(pairs))
    return total / F.avg_pool2d(ones, k, s, divisor_override=1)


@requires_backend
@pytest.mark.parametrize("layer", [False, True], ids=["functional", "layer"])
@pytest.mark.parametrize("cl", [False, True], ids=["nchw", "cl"])
@pytest.mark.parametrize(
    ("op", "k", "s", "pairs", "incl"), [c[1:] for c in POOL_CASES], ids=[c[0] for c in POOL_CASES]
)
def test_pool_forward_and_backward_match_the_reference(
    backend: str,
    layer: bool,
    cl: bool,
    op: str,
    k: tuple[int, ...],
    s: tuple[int, ...],
    pairs: Pairs,
    incl: bool,
) -> None:
    torch.manual_seed(0)
    x = _layout(torch.randn(2, 16, 13, 12), cl).requires_grad_()
    if layer:
        m: torch.nn.Module = (
            pnn.MaxPool2d(k, s, padding=pairs)
            if op == "max"
            else pnn.AvgPool2d(k, s, padding=pairs, count_include_pad=incl)
        )
        outs = [m(x) for _ in range(2)]  # the second call takes the layer's fast path
    elif op == "max":
        outs = [PF.max_pool2d(x, k, s, pairs)]
    else:
        outs = [PF.avg_pool2d(x, k, s, pairs, count_include_pad=incl)]
    ref = _pool_reference(x, op, k, s, pairs, incl)
    g = torch.randn_like(ref)
    (want,) = _grads(ref, [x], g)
    for out in outs:
        _close(out, ref)
        (got,) = _grads(out, [x], g)
        _close(got, want)
    if backend == "forced":
        assert all(_ran_native(o) for o in outs)
    assert not _dispatch.HOOK.fallbacks


@requires_backend
def test_pools_the_backend_does_not_take(backend: str) -> None:
    torch.manual_seed(0)
    x = torch.randn(1, 4, 10, 10)
    out, idx = PF.max_pool2d(x, 3, 2, "same", return_indices=True)
    ref = F.max_pool2d(F.pad(x, [0, 1, 0, 1], value=-float("inf")), 3, 2)
    _close(out, ref)
    assert idx.max() < 100
    # Caffe ceil rounding and divisor_override stay on padkit's torch plans
    _close(
        PF.avg_pool2d(x, 3, 2, "same", divisor_override=2),
        9 / 2 * PF.avg_pool2d(x, 3, 2, "same", count_include_pad=True),
    )
    with pytest.raises(PaddingError, match="holds no input element"):
        PF.avg_pool2d(x, 2, 1, ((0, 3), (0, 0)), count_include_pad=False)


# ----------------------------------------------------------------------------- training


def _tiny_model() -> torch.nn.Module:
    return torch.nn.Sequential(
        pnn.Conv2d(3, 16, 3, stride=2, padding="same"),
        torch.nn.ReLU(),
        pnn.Conv2d(16, 16, 3, stride=2, padding="same", groups=16),
        pnn.MaxPool2d(3, 2, padding="same"),
        pnn.ConvTranspose2d(16, 8, 4, stride=2, padding="same"),
        pnn.AvgPool2d(2, 1, padding="same", count_include_pad=False),
    )


def _train(model: torch.nn.Module, steps: int, cl: bool) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for _ in range(steps):
        x = _layout(torch.randn(2, 3, 19, 18, generator=gen), cl)
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


@requires_backend
@pytest.mark.parametrize("cl", [False, True], ids=["nchw", "cl"])
def test_training_steps_match_the_torch_plans(cl: bool) -> None:
    torch.manual_seed(0)
    model = _tiny_model()
    twin = copy.deepcopy(model)
    native.disable()
    want = _train(model, 3, cl)
    assert native.enable()
    _dispatch.HOOK.force = True
    try:
        got = _train(twin, 3, cl)
    finally:
        _dispatch.HOOK.force = False
        native.disable()
    assert not _dispatch.HOOK.fallbacks
    for a, b in zip(got, want):
        _close(a, b, 1e-4)


@requires_backend
def test_reordered_weights_follow_in_place_updates() -> None:
    assert native.enable()
    _dispatch.HOOK.force = True
    try:
        torch.manual_seed(0)
        conv = pnn.Conv2d(16, 16, 3, stride=2, padding="same", bias=False).eval()
        x = torch.randn(1, 16, 10, 10)
        with torch.inference_mode():
            first = conv(x)
        with torch.no_grad():
            conv.weight.mul_(2.0)
        with torch.inference_mode():
            second = conv(x)
        _close(second, 2 * first)
        with torch.no_grad():
            conv.weight.data = torch.randn(16, 16, 3, 3)  # new storage
            third = conv(x)
        _close(third, F.conv2d(F.pad(x, [0, 1, 0, 1]), conv.weight, None, 2))
        # a write through .data bypasses the version counter: clear_cache() after it
        conv.weight.data.copy_(torch.randn(16, 16, 3, 3))
        native.clear_cache()
        with torch.no_grad():
            fourth = conv(x)
        _close(fourth, F.conv2d(F.pad(x, [0, 1, 0, 1]), conv.weight, None, 2))
    finally:
        _dispatch.HOOK.force = False
        native.disable()


@requires_backend
@pytest.mark.parametrize(
    "op",
    ["conv", "conv_bias", "conv_transpose", "max", "avg_include", "avg_exclude"],
)
def test_second_derivatives_equal_the_reference(op: str) -> None:
    """A gradient penalty (``create_graph=True``) through the backend: the backward is then
    built from torch's ops, so the second derivative exists and equals the F.pad one."""
    torch.manual_seed(3)
    x = torch.randn(2, 4, 9, 8, dtype=torch.float64).float().requires_grad_()
    w = (torch.randn(4, 4, 3, 3) / 6).requires_grad_()
    b = torch.randn(4).requires_grad_()
    pairs = ((0, 1), (1, 2))

    def padkit_out() -> torch.Tensor:
        if op.startswith("conv_t"):
            return PF.conv_transpose2d(x, w, b, 2, ((0, 1), (1, 0)))
        if op.startswith("conv"):
            return PF.conv2d(x, w, b if op == "conv_bias" else None, 2, pairs)
        if op == "max":
            return PF.max_pool2d(x, 3, 2, pairs)
        return PF.avg_pool2d(x, 3, 2, pairs, count_include_pad=op == "avg_include")

    def reference() -> torch.Tensor:
        if op.startswith("conv_t"):
            full = F.conv_transpose2d(x, w, b, 2)
            return full[:, :, : full.shape[2] - 1, 1:]
        if op.startswith("conv"):
            return F.conv2d(F.pad(x, [1, 2, 0, 1]), w, b if op == "conv_bias" else None, 2)
        if op == "max":
            return F.max_pool2d(F.pad(x, [1, 2, 0, 1], value=float("-inf")), 3, 2)
        total = F.avg_pool2d(F.pad(x, [1, 2, 0, 1]), 3, 2) * 9
        if op == "avg_include":
            return total / 9
        inside = F.pad(torch.ones(1, 1, 9, 8), [1, 2, 0, 1])
        return total / (F.avg_pool2d(inside, 3, 2) * 9)

    def penalty(out: torch.Tensor) -> list[torch.Tensor]:
        params = [x, w] if op.startswith("conv") else [x]
        gx = torch.autograd.grad(out.pow(3).sum(), x, create_graph=True)[0]
        return list(torch.autograd.grad(gx.pow(2).sum(), params, allow_unused=True))

    assert native.enable()
    _dispatch.HOOK.force = True
    try:
        out = padkit_out()
        if requires_backend.args[0] is False:
            assert _ran_native(out), "the case must exercise the backend"
        got = penalty(out)
    finally:
        _dispatch.HOOK.force = False
        native.disable()
    want = penalty(reference())
    assert len(got) == len(want)
    for g, r in zip(got, want):
        assert r is not None and float(r.abs().max()) > 0  # the case has a second derivative
        assert g is not None
        _close(g, r, 1e-4)


@requires_backend
def test_bfloat16_matches_the_float32_reference() -> None:
    assert native.enable()
    _dispatch.HOOK.force = True
    try:
        torch.manual_seed(0)
        x = torch.randn(2, 16, 12, 12)
        w = torch.randn(16, 16, 3, 3) / 12
        out = PF.conv2d(x.bfloat16(), w.bfloat16(), None, 2, "same")
        assert out.dtype == torch.bfloat16
        ref = F.conv2d(F.pad(x.bfloat16().float(), [0, 1, 0, 1]), w.bfloat16().float(), None, 2)
        torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2)
        pooled = PF.max_pool2d(x.bfloat16(), 3, 2, "same")
        xp = F.pad(x.bfloat16().float(), [0, 1, 0, 1], value=-float("inf"))
        _close(pooled.float(), F.max_pool2d(xp, 3, 2))
    finally:
        _dispatch.HOOK.force = False
        native.disable()


# ----------------------------------------------------------------------------- dispatch


@requires_backend
def test_tracing_and_compiling_take_the_torch_plans() -> None:
    assert native.enable()
    _dispatch.HOOK.force = True
    try:
        conv = pnn.Conv2d(4, 4, 3, stride=2, padding="same").eval()
        x = torch.randn(1, 4, 9, 8)
        # fullgraph: a call into the library (ctypes) while dynamo traces would break the graph
        compiled = torch.compile(conv, backend="eager", fullgraph=True)
        _close(compiled(x), conv(x))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert PF.conv2d(x, conv.weight, None, 2, "same").dtype == torch.bfloat16
        # vmap: functorch-wrapped tensors never reach the library
        ws = torch.randn(3, 4, 4, 3, 3)
        batched = torch.vmap(lambda w: PF.conv2d(x, w, None, 2, "same"))(ws)
        for i in range(3):
            _close(batched[i], F.conv2d(F.pad(x, [0, 1, 1, 1]), ws[i], None, 2))
    finally:
        _dispatch.HOOK.force = False
        native.disable()


@requires_backend
def test_threads_follow_torch() -> None:
    assert native.enable()
    # other wheels loaded by the suite (scikit-learn, via fastai) vendor a libgomp of their
    # own under "<name>.libs/": padkit's library must share torch's, and no other
    gomp = {
        line.split()[-1]
        for line in Path("/proc/self/maps").read_text().splitlines()
        if "libgomp" in line and not (".libs/" in line and "/torch/" not in line)
    }
    assert len(gomp) == 1, f"two OpenMP runtimes for torch and padkit: {sorted(gomp)}"
    omp = ctypes.CDLL(next(iter(gomp)))
    before = torch.get_num_threads()
    _dispatch.HOOK.force = True
    try:
        x, w = torch.randn(1, 16, 9, 9), torch.randn(16, 16, 3, 3)
        for n in (2, 1):
            torch.set_num_threads(n)
            PF.conv2d(x, w, None, 2, "same")
            assert omp.omp_get_max_threads() == n
    finally:
        torch.set_num_threads(before)
        _dispatch.HOOK.force = False
        native.disable()


def test_static_rules() -> None:
    """The deterministic mode's table (padkit's own rules, the same on every machine)."""
    from padkit.native import _policy

    x = torch.randn(1, 64, 4096)
    w = torch.randn(64, 64, 3)
    # causal dilated convs: oneDNN leaves its direct kernel for pads like (8, 0)
    assert not _policy.conv("residual_pad", x, w, 1, ((8, 0),), (4,))
    assert not _policy.conv("residual_pad", x, w, 1, ((2, 0),), (1,))
    # ... but its backward passes win in training
    assert _policy.conv("residual_pad", x, w, 1, ((8, 0),), (4,), training=True)
    dense = torch.randn(128, 128, 3, 3)
    x2 = torch.randn(1, 128, 56, 56)
    assert _policy.conv("residual_pad", x2, dense, 1, ((0, 1), (0, 1)), (1, 1))
    assert not _policy.conv("native", x2, dense, 1, ((1, 1), (1, 1)), (1, 1))


@pytest.fixture
def deterministic() -> Iterator[None]:
    before = _dispatch.HOOK.tuner.measure
    native.set_tuning(False)
    yield
    native.set_tuning(before)


@requires_backend
@pytest.mark.parametrize(
    "n, c, length, d, pads",
    [
        (1, 32, 300, 4, ((8, 0),)),
        (3, 48, 400, 2, ((4, 0),)),  # long rows: reordered an (image, channel block) at a time
        (2, 16, 37, 3, ((1, 5),)),
        (3, 16, 9, 1, ((2, 0),)),
    ],
)
def test_inference_convs_with_pads_in_the_source_buffer_stay_exact(
    n: int, c: int, length: int, d: int, pads: Pairs
) -> None:
    """NCHW inference where oneDNN's blocked kernels take no such pads (causal dilated
    convs): the pads go into the blocked source buffer around the reordered input. Every
    call, on new values, equals the F.pad reference (the pads are never written, so they
    stay zero: a call after an input of infinities and NaN is exact too; so is a strided
    view of a longer input)."""
    assert native.enable(), native.info()
    _dispatch.HOOK.force = True
    try:
        torch.manual_seed(5)
        w, b = torch.randn(c, c, 3), torch.randn(c)
        loud = torch.full((n, c, length), float("inf"))
        loud[..., ::2] = float("nan")
        view = torch.randn(n, c + 16, length + 9)[:, 16:, 5 : 5 + length]
        with torch.no_grad():
            for x in (torch.randn(n, c, length), loud, torch.randn(n, c, length), view):
                got = PF.conv1d(x, w, b, 1, pads, d)
                want = F.conv1d(F.pad(x, torch_pad(pads)), w, b, 1, 0, d)
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, equal_nan=True)
                assert _ops.conv_is_fast(x, w, b, (1,), (d,), pads, 1)
    finally:
        _dispatch.HOOK.force = False
        native.disable()


@requires_backend
@pytest.mark.parametrize(
    "n, c, length, d, pads", [(1, 64, 300, 4, ((8, 0),)), (2, 32, 57, 8, ((16, 0),))]
)
def test_training_with_pads_in_the_source_buffer_matches_the_reference(
    n: int, c: int, length: int, d: int, pads: Pairs
) -> None:
    """Training's forward pass may run on a source buffer holding the pads (where oneDNN's
    direct kernels take no such pads) while its backward passes keep them: the output and
    every gradient equal the F.pad reference's, over steps of new values."""
    assert native.available(), native.info()
    torch.manual_seed(7)
    w0, b0 = torch.randn(c, c, 3), torch.randn(c)
    for _ in range(2):
        x0 = torch.randn(n, c, length)
        g = torch.randn(n, c, length)
        x, w, b = (t.clone().requires_grad_() for t in (x0, w0, b0))
        got = _ops.conv(x, w, b, (1,), (d,), pads, 1)
        got.backward(g)
        rx, rw, rb = (t.clone().requires_grad_() for t in (x0, w0, b0))
        want = F.conv1d(F.pad(rx, torch_pad(pads)), rw, rb, 1, 0, d)
        want.backward(g)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        for a, r in ((x, rx), (w, rw), (b, rb)):
            torch.testing.assert_close(a.grad, r.grad, rtol=1e-4, atol=1e-3)
        w0 = w0 + 0.1  # the next step's weight


@requires_backend
@pytest.mark.parametrize(
    "shape, k, d, pads, groups",
    [
        ((2, 32, 50), (3,), (4,), ((8, 0),), 1),
        ((2, 16, 40), (5,), (1,), ((1, 3),), 4),
        ((1, 16, 12, 15), (3, 4), (1, 2), ((0, 2), (3, 3)), 2),
    ],
)
@pytest.mark.parametrize("as_forward", [True, False])
def test_input_gradient_as_a_forward_conv_matches_the_reference(
    shape: tuple[int, ...],
    k: tuple[int, ...],
    d: tuple[int, ...],
    pads: Pairs,
    groups: int,
    as_forward: bool,
) -> None:
    """A stride-1 conv with per-side pads may compute its input gradient as a forward conv
    of the output gradient (the weight flipped, its channels swapped per group, the pads
    mirrored) where its first calls timed that faster than oneDNN's backward-data
    primitive: either route equals the F.pad reference's gradients, grouped and 2-D too."""
    assert native.available(), native.info()
    torch.manual_seed(3)
    c = shape[1]
    x0, w0, b0 = torch.randn(shape), torch.randn(c, c // groups, *k), torch.randn(c)
    s = (1,) * len(k)
    _ops._GRAD_ROUTE.clear()
    before = _dispatch.HOOK.tuner.measure
    native.set_tuning(True)
    try:
        for step in range(6):  # past the timed calls, then on the route forced below
            x, w, b = (t.clone().requires_grad_() for t in (x0, w0, b0))
            got = _ops.conv(x, w, b, s, d, pads, groups)
            g = torch.randn_like(got)
            got.backward(g)
            rx, rw, rb = (t.clone().requires_grad_() for t in (x0, w0, b0))
            want = CONV[len(k)](F.pad(rx, torch_pad(pads)), rw, rb, 1, 0, d, groups)
            want.backward(g)
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
            for a, r in ((x, rx), (w, rw), (b, rb)):
                torch.testing.assert_close(a.grad, r.grad, rtol=1e-4, atol=1e-3)
            if step == 3:
                assert len(_ops._GRAD_ROUTE) == 1
                for key in _ops._GRAD_ROUTE:
                    _ops._GRAD_ROUTE[key] = as_forward
        # the deterministic mode times nothing: the backward-data primitive runs
        _ops._GRAD_ROUTE.clear()
        native.set_tuning(False)
        x = x0.clone().requires_grad_()
        _ops.conv(x, w0, None, s, d, pads, groups).sum().backward()
        assert not _ops._GRAD_ROUTE
    finally:
        native.set_tuning(before)
        _ops._GRAD_ROUTE.clear()


@requires_backend
def test_signatures_sharing_staging_memory_stay_exact() -> None:
    """Inference calls of every signature reorder into one staging buffer per role, grown to
    the largest call: oneDNN's own calls (no kernel check behind them) that alternate sizes
    (growing and shrinking), layouts, convs, pools and convs whose pads live in their own
    source buffer each equal the F.pad reference, a small call after a large one included
    (no stale values read, no role's buffer shared with another's in one call)."""
    assert native.available(), native.info()
    torch.manual_seed(11)
    w, b = torch.randn(16, 16, 3, 3), torch.randn(16)
    w1, b1 = torch.randn(32, 32, 3), torch.randn(32)
    pads2 = ((0, 1), (1, 2))
    with torch.no_grad():
        for size in (9, 40, 7, 33, 12, 40, 5):
            for cl in (False, True):
                x = torch.randn(2, 16, size, size + 3)
                if cl:
                    x = x.contiguous(memory_format=torch.channels_last)
                got = _ops.conv(x, w, b, (2, 2), (1, 1), pads2, 1)
                want = F.conv2d(F.pad(x, torch_pad(pads2)), w, b, 2)
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
                want = F.max_pool2d(F.pad(x, torch_pad(pads2), value=-math.inf), 3, 2)
                got = _ops.pool("max", x, want.shape[2:], (3, 3), (2, 2), (1, 1), pads2)
                torch.testing.assert_close(got, want)
            # pads in the source buffer: two geometries in turn take the one buffer, each
            # zeroing its own pads' regions, where the other's input (infinities and NaN
            # on every other call) was written
            for i, (pads, dil) in enumerate(
                ((((16, 0),), 8), (((24, 0),), 12), (((16, 0),), 8), (((0, 8),), 4))
            ):
                x1 = torch.randn(2, 32, 8 * size)
                if i % 2:
                    x1[..., ::2] = float("inf")
                    x1[..., 1::2] = float("nan")
                got = _ops.conv(x1, w1, b1, (1,), (dil,), pads, 1)
                want = F.conv1d(F.pad(x1, torch_pad(pads)), w1, b1, 1, 0, dil)
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, equal_nan=True)


@requires_backend
def test_deterministic_mode_follows_the_rules_and_asks_onednn(deterministic: None) -> None:
    conv = pnn.Conv1d(4, 4, 3, padding="causal", dilation=4)
    assert native.enable()
    try:
        x1 = torch.randn(1, 4, 50, requires_grad=True)
        assert _ran_native(conv(x1))
        with torch.no_grad():
            _close(conv(x1), F.conv1d(F.pad(x1, [8, 0]), conv.weight, conv.bias, 1, 0, 4))
        x2 = torch.randn(1, 4, 8, 8, requires_grad=True)
        assert _ran_native(PF.conv2d(x2, torch.randn(4, 4, 3, 3), None, 2, "same"))
        # the planner never runs a pass on oneDNN's reference loops (many times slower):
        # which kernels oneDNN has depends on the CPU, so ask it (on some AVX-512 CPUs a
        # depthwise 5x5 stride-2 backward in NCHW has only reference loops; on AVX2 a jit one)
        x5 = torch.randn(1, 144, 56, 56, requires_grad=True)
        w5 = torch.randn(144, 1, 5, 5, requires_grad=True)
        args = (x5, w5, None, (2, 2), (1, 1), ((1, 2), (1, 2)), 144)
        impls = _ops.conv_impls(*args, training=True)
        assert len(impls) == 3 and all(impls), impls
        fast = not any(name.startswith("ref") for name in impls)
        assert _ops.conv_is_fast(*args, training=True) == fast
        assert _ran_native(PF.conv2d(x5, w5, None, 2, "same", 1, 144)) == fast
        with torch.no_grad():
            y = PF.conv2d(x5, w5, None, 2, "same", 1, 144)
        _close(y, F.conv2d(F.pad(x5, [1, 2, 1, 2]), w5, None, 2, 0, 1, 144))
    finally:
        native.disable()


# ----------------------------------------------------------------------------- measured choices


def test_tuner_keeps_the_faster_side(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from padkit.native import _tune

    def slow() -> None:
        time.sleep(0.003)

    def quick() -> None:
        pass

    # the real clock decides; whether a machine this busy counts as steady is another test's
    real = _tune._time_pair
    monkeypatch.setattr(_tune, "_time_pair", lambda a, b: (*real(a, b)[:2], True))
    tuner = _tune.Tuner()
    tuner.attach(tmp_path, "avx2", (3, 2, 0))
    key_a = ("conv", (3, 3), (2, 2), (1, 1), ((0, 1), (0, 1)), 1, (8, 8), "contiguous")
    key_b = ("max_pool", (3, 3), (2, 2), (1, 1), ((0, 1), (0, 1)), 1, (8,), "contiguous")
    assert tuner.decide(key_a, slow, quick, contextlib.nullcontext) is True
    assert tuner.decide(key_b, quick, slow, contextlib.nullcontext) is False
    # remembered: neither side runs again
    assert tuner.decide(key_a, quick, slow, contextlib.nullcontext) is True
    assert tuner.path is not None and tuner.path.is_file()
    # a new process on the same machine reads the choices from disk
    again = _tune.Tuner()
    again.attach(tmp_path, "avx2", (3, 2, 0))
    assert again.known(key_a) is True and again.known(key_b) is False
    assert {row["runs"] for row in again.table()} == {"onednn", "torch"}
    # another instruction set (or oneDNN, torch, CPU) is another file: measured anew
    other = _tune.Tuner()
    other.attach(tmp_path, "avx512_core", (3, 2, 0))
    assert other.path != tuner.path and other.known(key_a) is None
    tuner.forget()
    assert not tuner.path.is_file() and tuner.known(key_a) is None


def test_unsteady_measurements_hold_for_the_process_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A choice timed while the machine stalled is used, shown, and never written to disk;
    the next process measures it again."""
    from padkit.native import _tune

    steady = {"a": True, "b": False}
    current: list[str] = []

    def timer(run_torch: Any, run_native: Any) -> tuple[float, float, bool]:
        run_torch()
        run_native()
        return 2e-3, 1e-3, steady[current[-1]]

    monkeypatch.setattr(_tune, "_time_pair", timer)
    tuner = _tune.Tuner()
    tuner.attach(tmp_path, "avx2", (3, 2, 0))
    keys = {
        n: ("conv", (3, 3), (2, 2), (1, 1), ((0, 1), (0, 1)), 1, (i, i))
        for i, n in enumerate(steady, 4)
    }
    for name in steady:
        current.append(name)
        assert tuner.decide(keys[name], lambda: None, lambda: None, contextlib.nullcontext)
    assert [row["saved"] for row in tuner.table()] == [True, False]
    again = _tune.Tuner()
    again.attach(tmp_path, "avx2", (3, 2, 0))
    assert again.known(keys["a"]) is True and again.known(keys["b"]) is None


def test_time_pair_reports_a_stall_as_unsteady(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a clock the timed functions advance themselves (no real time, no load), a side
    that stalls for a few rounds makes the measurement unsteady; an even pair is steady."""
    from padkit.native import _tune

    now = [0.0]
    monkeypatch.setattr(_tune.time, "perf_counter", lambda: now[0])
    calls = {"n": 0}

    def stalls_for_a_while() -> None:  # 6 calls a round: rounds 3 to 5 stall
        calls["n"] += 1
        now[0] += 0.004 if 14 <= calls["n"] <= 31 else 0.0005

    def even() -> None:
        now[0] += 0.0005

    def also_even() -> None:
        now[0] += 0.00025

    *_, steady = _tune._time_pair(even, stalls_for_a_while)
    assert steady is False
    t, n, steady = _tune._time_pair(even, also_even)
    assert steady is True and n < t


@pytest.fixture
def measured_tuner(tmp_path: Path) -> Iterator[None]:
    """The backend on, measuring, with an empty choices file of its own; as before after."""
    assert native.enable()
    tuner = _dispatch.HOOK.tuner
    before = (tuner.measure, tuner.path)
    lib = native.load()
    tuner.attach(tmp_path, lib.isa, lib.runtime_version)
    native.set_tuning(True)
    _dispatch.HOOK.restart_timings()  # classes being timed on their own calls
    try:
        yield
    finally:
        _dispatch.HOOK.restart_timings()
        tuner.measure = before[0]
        tuner.path = before[1]
        tuner.choices.clear()
        tuner.timings.clear()
        tuner._loaded = False
        native.disable()


@requires_backend
@pytest.mark.usefixtures("measured_tuner")
def test_measured_choice_is_recorded_and_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    from padkit.native import _tune

    monkeypatch.setattr(_tune, "BUDGET", 1e9)  # oneDNN takes every other inference call
    torch.manual_seed(1)
    x = torch.randn(2, 8, 15, 14, requires_grad=True)
    w = torch.randn(8, 8, 3, 3, requires_grad=True)
    # inference: the class is timed on its own calls (a side a call, torch's output; the
    # first oneDNN call paired with torch's for the kernel check): decided by PAIRS samples
    # a side at the latest, whatever the machine's timings; training: a signature's first
    # call runs on torch and measures nothing, the second times the class
    calls = (False, True, False, True) + (False,) * (2 * _tune.Samples.PAIRS)
    for call, training in enumerate(calls):
        if call == 2:  # each training signature has been seen once: nothing measured yet
            assert not any("training" in row["op"] for row in native.info()["choices"])
        with torch.set_grad_enabled(training):
            out = PF.conv2d(x, w, None, 2, ((0, 1), (1, 2)))
            pooled = PF.max_pool2d(x, 3, 2, ((0, 1), (1, 0)))
        _close(out, F.conv2d(F.pad(x, [1, 2, 0, 1]), w, None, 2))
        _close(pooled, F.max_pool2d(F.pad(x, [1, 0, 0, 1], value=float("-inf")), 3, 2))
        if training:
            gx, gw = torch.autograd.grad(out.sum(), (x, w))
            ref = F.conv2d(F.pad(x, [1, 2, 0, 1]), w, None, 2).sum()
            rx, rw = torch.autograd.grad(ref, (x, w))
            _close(gx, rx)
            _close(gw, rw)
    rows = native.info()["choices"]
    ops = {(row["op"].split()[0], "training" in row["op"]) for row in rows}
    assert ops == {("conv", False), ("conv", True), ("max_pool", False), ("max_pool", True)}
    for row in rows:
        margin = _tune.MARGIN * row["torch_us"]
        faster = "onednn" if row["onednn_us"] < margin else "torch"
        assert row["runs"] == faster, row
    # the caller's tensors kept no gradient from the timing runs
    assert x.grad is None and w.grad is None


@requires_backend
@pytest.mark.usefixtures("measured_tuner")
def test_stored_torch_choice_asks_onednn_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    # a signature remembered for torch builds no oneDNN query, check or primitive: they
    # would page in oneDNN's code (megabytes) for ops that run on torch
    tuner = _dispatch.HOOK.tuner
    asked: list[Any] = []
    monkeypatch.setattr(tuner, "known", lambda key: asked.append(key) or False)

    def refuse(*args: Any, **kwargs: Any) -> bool:
        raise AssertionError("oneDNN was asked about a signature stored for torch")

    for name in ("conv_is_fast", "conv_agrees", "pool_is_fast", "pool_agrees"):
        monkeypatch.setattr(_ops, name, refuse)
    torch.manual_seed(2)
    x = torch.randn(2, 8, 15, 14, requires_grad=True)
    w = torch.randn(8, 8, 3, 3, requires_grad=True)
    mark = _ops.cache_mark()
    for _ in range(3):  # a first sighting, then the stored choice
        out = PF.conv2d(x, w, None, 2, ((0, 1), (1, 2)))
        pooled = PF.max_pool2d(x, 3, 2, ((0, 1), (1, 0)))
        _close(out, F.conv2d(F.pad(x, [1, 2, 0, 1]), w, None, 2))
        _close(pooled, F.max_pool2d(F.pad(x, [1, 0, 0, 1], value=float("-inf")), 3, 2))
        out.sum().backward()
    assert {key[0] for key in asked} == {"conv", "max_pool"}
    assert _ops.cache_mark() == mark  # no primitive built


@requires_backend
@pytest.mark.usefixtures("measured_tuner")
def test_conv_layer_decided_for_torch_stops_asking_the_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # what a layer's call costs on the side the tuner kept: a conv layer whose signature
    # was decided for torch runs its torch plan without the backend's per-call lookup, as
    # the layer runs with the backend off; a new layout, or another tuner, asks again
    tuner = _dispatch.HOOK.tuner
    monkeypatch.setattr(tuner, "known", lambda key: False)
    asked: list[int] = []
    real = _dispatch.HOOK.conv

    def counted(*args: Any, **kwargs: Any) -> Any:
        asked.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(_dispatch.HOOK, "conv", counted)
    torch.manual_seed(3)
    conv = pnn.Conv2d(8, 8, 3, 2, padding="same").eval()
    x = torch.randn(1, 8, 8, 8)
    ref = F.conv2d(F.pad(x, [0, 1, 0, 1]), conv.weight, conv.bias, 2)
    with torch.no_grad():
        for _ in range(6):  # the layer's fast path from its first call
            _close(conv(x), ref)
        assert len(asked) == 1  # a first sighting, the class stored for torch
        xc = x.contiguous(memory_format=torch.channels_last)
        for _ in range(3):
            _close(conv(xc), ref)
        assert len(asked) == 2  # the size class is stored for torch: asked once
        tuner.version += 1  # choices that may mean something else: asked again
        _close(conv(x), ref)
        assert len(asked) == 3


@requires_backend
@pytest.mark.usefixtures("measured_tuner")
def test_transposed_layer_decided_for_torch_stops_asking_the_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # as for conv layers: a transposed layer whose signature was decided for torch (a
    # measured choice: with tuning off, transposed convs go to oneDNN by the static rules)
    # runs its torch plan without the backend's per-call lookup; another tuner asks again
    tuner = _dispatch.HOOK.tuner
    monkeypatch.setattr(tuner, "known", lambda key: False)
    asked: list[int] = []
    real = _dispatch.HOOK.conv_transpose

    def counted(*args: Any, **kwargs: Any) -> Any:
        asked.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(_dispatch.HOOK, "conv_transpose", counted)
    torch.manual_seed(4)
    up = pnn.ConvTranspose2d(8, 4, 3, 2, padding="same").eval()
    x = torch.randn(1, 8, 8, 8)
    # the full output (15 x 15 for 8 inputs), cropped as TF 'same' crops: (0, 1) per axis
    ref = F.conv_transpose2d(x, up.weight, up.bias, 2)[:, :, :16, :16]
    ref = F.pad(ref, [0, 16 - ref.shape[-1], 0, 16 - ref.shape[-2]])
    expect = up(x)
    assert expect.shape == (1, 4, 16, 16)
    with torch.no_grad():
        for _ in range(6):
            _close(up(x), expect)
        n = len(asked)
        for _ in range(4):
            _close(up(x), expect)
        assert len(asked) == n  # decided for torch: not asked again
        tuner.version += 1
        _close(up(x), expect)
        assert len(asked) == n + 1


@requires_backend
def test_info_reports_the_isa_onednn_dispatches_to() -> None:
    code = "import padkit.native as n\nn.load()\nprint(n.info()['isa'])"
    capped = _run(code, ONEDNN_MAX_CPU_ISA="AVX2")
    assert capped.returncode == 0, capped.stderr
    # the cap holds on any x86-64 CPU: AVX2 or below, never an AVX-512 ISA
    assert capped.stdout.strip() in ("avx2", "avx", "sse41"), capped.stdout
    free = _run(code)
    assert free.returncode == 0 and free.stdout.strip(), free.stderr


# ----------------------------------------------------------------------------- without it


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=full,
        timeout=300,
    )


def test_without_a_compiler_padkit_runs_as_before(tmp_path: Path) -> None:
    code = (
        "import torch, torch.nn.functional as F, padkit.native as n, padkit.functional as PF\n"
        "assert not n.available(), n.info()\n"
        "assert n.enable(required=False) is False and not n.enabled()\n"
        "print(n.info()['error'])\n"
        "x, w = torch.randn(1, 2, 7, 7), torch.randn(3, 2, 3, 3)\n"
        "ref = F.conv2d(F.pad(x, [1, 1, 1, 1]), w, None, 2)\n"
        "assert torch.allclose(PF.conv2d(x, w, None, 2, 'same'), ref, atol=1e-6)\n"
    )
    res = _run(code, CXX=str(tmp_path / "no-such-compiler"), PADKIT_NATIVE_CACHE=str(tmp_path))
    assert res.returncode == 0, res.stderr
    # on Linux x86-64 (the extra installed) the compiler is what is missing
    assert res.stdout.strip() not in ("", "None")
    if requires_backend.args[0] is False:
        assert "compiling the native backend failed" in res.stdout, res.stdout


def test_without_onednn_the_error_says_what_to_install(tmp_path: Path) -> None:
    res = _run(
        "import padkit.native as n\nn.load()",
        PADKIT_ONEDNN_ROOT=str(tmp_path),
        PADKIT_NATIVE_CACHE=str(tmp_path),
    )
    assert res.returncode != 0
    assert "PADKIT_ONEDNN_ROOT" in res.stderr and "include/oneapi/dnnl/dnnl.hpp" in res.stderr


@requires_backend
def test_environment_variable_turns_it_on() -> None:
    res = _run(
        "import padkit.native as n, padkit.functional\nprint(n.enabled())", PADKIT_NATIVE="1"
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "True"


@requires_backend
@pytest.mark.parametrize(("env", "on"), [(None, True), ("0", False)])
def test_installed_extra_turns_it_on(env: str | None, on: bool) -> None:
    """With the extra installed and a compiler present the backend is on by default (built
    on the first op that could use it); PADKIT_NATIVE=0 turns it off."""
    code = (
        "import torch, torch.nn.functional as F, padkit.functional as PF, padkit.native as n\n"
        "x, w = torch.randn(1, 8, 9, 9), torch.randn(8, 8, 3, 3)\n"
        "y = PF.conv2d(x, w, None, 2, ((0, 1), (1, 0)))\n"
        "assert torch.allclose(y, F.conv2d(F.pad(x, [1, 0, 0, 1]), w, None, 2), atol=1e-5)\n"
        "print(n.enabled(), n.info()['error'])\n"
    )
    env_vars = {} if env is None else {"PADKIT_NATIVE": env}
    full = {k: v for k, v in os.environ.items() if k != "PADKIT_NATIVE"}
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**full, "PYTHONPATH": str(ROOT), "PADKIT_NATIVE_TUNE": "0", **env_vars},
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == [str(on), "None"]


@requires_backend
def test_build_is_cached() -> None:
    lib = _build.build()
    assert lib.path.is_file()
    assert _build.build().path == lib.path
    assert lib.runtime_version[0] == 3


def test_choices_are_bounded_oldest_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from padkit.native import _tune

    monkeypatch.setattr(_tune, "MAX_CHOICES", 3)
    monkeypatch.setattr(_tune, "_time_pair", lambda a, b: (2e-3, 1e-3, True))
    tuner = _tune.Tuner()
    tuner.attach(tmp_path, "avx2", (3, 2, 0))
    keys = [("conv", (3, 3), (1, 1), (1, 1), ((0, 1), (0, 1)), 1, (c, c)) for c in range(5)]
    for key in keys:
        tuner.decide(key, lambda: None, lambda: None, contextlib.nullcontext)
    assert list(tuner.choices) == keys[2:]
    again = _tune.Tuner()
    again.attach(tmp_path, "avx2", (3, 2, 0))
    assert [again.known(k) for k in keys] == [None, None, True, True, True]


@requires_backend
@pytest.mark.usefixtures("measured_tuner")
def test_new_sizes_are_measured_on_their_own_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Variable-size inputs (every size new) never wait for a measurement of their own: a
    class is timed on its calls (a paired call runs both sides once and returns torch's
    output), checked on them too (no stand-ins), and decided within a few of them; every
    output equals the reference."""
    from padkit.native import _tune

    monkeypatch.setattr(_tune, "BUDGET", 1e9)
    conv = pnn.Conv2d(4, 8, 3, stride=2, padding="same")
    timed: list[int] = []
    monkeypatch.setattr(_tune, "_time_pair", lambda *a, **k: timed.append(1) or (1.0, 1.0, True))
    stand_ins: list[int] = []
    real_stand_in = _ops._stand_in
    monkeypatch.setattr(
        _ops, "_stand_in", lambda *a, **k: stand_ins.append(1) or real_stand_in(*a, **k)
    )
    runs: list[int] = []
    real_conv = _ops.conv
    monkeypatch.setattr(_ops, "conv", lambda *a, **k: runs.append(1) or real_conv(*a, **k))

    def ref(x: Tensor) -> Tensor:  # TF 'same', k3 s2: total max(2 - (n - 1) % 2, 0)
        pads = []
        for n in reversed(x.shape[2:]):
            total = max((-(-n // 2) - 1) * 2 + 3 - n, 0)
            pads += [total // 2, total - total // 2]
        return F.conv2d(F.pad(x, pads), conv.weight, conv.bias, 2)

    seen = _dispatch.HOOK.seen
    sizes = [(n, m) for n in range(18, 32, 2) for m in (18, 20)]  # even: pads (0, 1)
    with torch.no_grad():
        for n, m in sizes:  # 14 new sizes of one class, (32, 32)
            x = torch.randn(1, 4, n, m)
            _close(conv(x), ref(x))
    assert _dispatch.HOOK.seen == seen + len(sizes)
    assert not timed and not stand_ins  # no timing of its own, no stand-in check
    assert len(runs) <= len(sizes)  # at most one oneDNN run a call
    assert len(native.info()["choices"]) == 1  # decided: 5 calls a side at most


@requires_backend
@pytest.mark.usefixtures("measured_tuner")
def test_a_measured_size_class_decides_its_new_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new size in a class measured on torch asks oneDNN nothing; in a class measured on
    oneDNN it runs there (after its kernel query); the results stay exact either way."""

    conv = pnn.Conv2d(4, 8, 3, stride=2, padding="same")

    def ref(x: Tensor) -> Tensor:
        pads = []
        for n in reversed(x.shape[2:]):
            total = max((-(-n // 2) - 1) * 2 + 3 - n, 0)
            pads += [total // 2, total - total // 2]
        return F.conv2d(F.pad(x, pads), conv.weight, conv.bias, 2)

    from padkit.native import _tune

    monkeypatch.setattr(_tune.Samples, "PAIRS", 2)  # decided at two samples a side
    monkeypatch.setattr(_tune, "BUDGET", 1e9)
    tuner = _dispatch.HOOK.tuner
    asked: list[int] = []
    real = _ops.conv_is_fast
    monkeypatch.setattr(_ops, "conv_is_fast", lambda *a, **k: asked.append(1) or real(*a, **k))
    with torch.no_grad():
        x = torch.randn(1, 4, 20, 22)  # sizes 20..32 share the class (32, 32); pads (0, 1)
        for _ in range(4):  # its class is measured on these calls: torch, oneDNN, twice
            _close(conv(x), ref(x))
        ((key, _),) = tuner.choices.items()
        for side in (False, True):
            tuner.choices[key] = side
            asked.clear()
            ran = _ops.cache_mark()
            x = torch.randn(1, 4, 24 + 2 * side, 28)
            _close(conv(x), ref(x))
            assert bool(asked) == side  # a class on torch: no kernel query
            assert (_ops.cache_mark() > ran) == side  # a oneDNN primitive only on oneDNN


@requires_backend
@pytest.mark.usefixtures("measured_tuner")
def test_a_pool_class_runs_its_new_sizes_on_its_measured_side(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An asymmetric max pool's class is measured on its own first calls (each output
    torch's), then its new sizes run on the side measured; every result equals the F.pad
    reference."""
    from padkit.native import _tune

    monkeypatch.setattr(_tune.Samples, "PAIRS", 2)  # decided at two samples a side
    monkeypatch.setattr(_tune, "BUDGET", 1e9)
    pool = pnn.MaxPool2d(3, 2, padding="same")
    used: list[int] = []
    real = _ops.pool
    monkeypatch.setattr(_ops, "pool", lambda *a, **k: used.append(1) or real(*a, **k))
    tuner = _dispatch.HOOK.tuner

    def check(x: Tensor) -> None:
        want = F.max_pool2d(F.pad(x, [0, 1, 0, 1], value=-math.inf), 3, 2)
        assert torch.equal(pool(x), want)

    with torch.no_grad():
        for n in (20, 22, 24, 26):  # one class (sizes up to 32), pads (0, 1) on both axes
            check(torch.randn(1, 8, n, n + 2))  # the class measured: torch, oneDNN, twice
        ((key, _),) = tuner.choices.items()
        for side, n in ((True, 28), (False, 30)):  # sizes not met yet
            tuner.choices[key] = side
            used.clear()
            check(torch.randn(1, 8, n, n + 2))
            assert bool(used) == side


def test_onednn_turns_stay_within_the_budget_and_decide_clear_cases_early() -> None:
    """The sides take turns; a layer's first oneDNN call is made whatever it costs, later
    ones (in any of its size classes) only while what they cost beyond the torch side
    stays within BUDGET of the time the layer has run. Two samples a side that differ
    clearly decide; close ones wait for PAIRS."""
    from padkit.native import _tune

    slow = _tune.Samples(("conv",))
    assert not slow.native_turn()  # torch first
    for _ in range(_tune.Budget.FREE):
        slow.add(False, 1e-3, 1e-3, 100)
        assert slow.native_turn()
        # oneDNN costs 9 ms more than torch's 1 ms (a new size's primitive, its checks)
        slow.add(True, 1.2e-3, 1e-2, 100)
    assert not slow.add(False, 1e-3, 1e-3, 100)  # close: not decided
    assert not slow.native_turn()  # 9 ms a turn spent beyond torch, against 11 ms a turn
    while not slow.native_turn():
        slow.add(False, 1e-3, 1e-3, 100)
    assert slow.budget.spent <= _tune.BUDGET * slow.budget.elapsed
    other = _tune.Samples(("conv", "another size class"), slow.budget)
    other.add(False, 1e-3, 1e-3, 100)
    assert other.native_turn()  # the layer's budget, shared by its size classes
    other.add(True, 1.2e-3, 1e-2, 100)
    slow.add(False, 1e-3, 1e-3, 100)
    assert not slow.native_turn()
    fast = _tune.Samples(("conv",))
    for _ in range(2):
        assert not fast.add(False, 1e-3, 1e-3, 100)
        assert fast.native_turn()  # faster than torch: costs nothing beyond it
        done = fast.add(True, 0.2e-3, 0.3e-3, 100)
    assert done  # 5x faster twice: decided
    t, n, steady = fast.result()
    assert n < t * _tune.MARGIN and steady


def test_one_slow_torch_call_does_not_decide_a_class_for_onednn() -> None:
    """A torch call slowed by something else (a collection, the paired oneDNN run before
    it) is outvoted by the other: each side's faster sample of two decides."""
    from padkit.native import _tune

    samples = _tune.Samples(("conv",))
    for torch_s in (1e-3, 5e-3):  # the second torch call stalled
        samples.add(False, torch_s, torch_s, 100)
        assert samples.native_turn()
        done = samples.add(True, 2e-3, 2e-3, 100)
    assert done  # 2x slower than torch's undisturbed call: clear
    t, n, _ = samples.result()
    assert n > t * _tune.MARGIN  # torch


def test_a_size_class_takes_the_choice_of_its_measured_neighbours(tmp_path: Path) -> None:
    """An unmeasured size class takes the choice measured for the same layer (kernel,
    stride, channels...; pads aside) at sizes up to NEAR bucket steps away."""
    from padkit.native import _tune

    tuner = _tune.Tuner()
    tuner.attach(tmp_path, "avx2", (3, 2, 0))

    def key(pads: Any, batch: int, size: tuple[int, int], cout: int = 8) -> _tune.Key:
        k = ("conv", (3, 3), (2, 2), (1, 1), pads, 1, (4, cout), "contiguous", "float32")
        return (*k, batch, size, False, 1)

    tuner.record(key(((0, 1), (0, 1)), 1, (64, 64)), 2e-3, 1e-3, True)
    assert tuner.near(key(((1, 1), (0, 1)), 1, (128, 64))) is True  # one step, other pads
    assert tuner.near(key(((0, 1), (0, 1)), 2, (128, 64))) is True  # two steps
    assert tuner.near(key(((0, 1), (0, 1)), 1, (512, 64))) is None  # three steps
    assert tuner.near(key(((0, 1), (0, 1)), 1, (64, 64), cout=16)) is None  # another layer
    tuner.record(key(((0, 1), (0, 1)), 1, (256, 64)), 1e-3, 2e-3, True)
    assert tuner.near(key(((0, 1), (0, 1)), 1, (256, 128))) is False  # the nearest


@requires_backend
@pytest.mark.usefixtures("measured_tuner")
def test_a_paired_call_whose_onednn_result_differs_keeps_the_class_on_torch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """oneDNN computing something else on a paired call: the output is torch's, and the
    class runs on torch from then on (no oneDNN call)."""
    real = _ops.conv
    runs: list[int] = []

    def garbage(*a: Any, **k: Any) -> Tensor:
        runs.append(1)
        return real(*a, **k) + 1.0

    monkeypatch.setattr(_ops, "conv", garbage)
    monkeypatch.setattr(_ops, "_agrees", {})  # the checks this garbage fails stay here
    torch.manual_seed(4)
    w = torch.randn(8, 4, 3, 3)
    with torch.no_grad():
        for n in range(20, 30, 2):
            x = torch.randn(1, 4, n, n)
            _close(
                PF.conv2d(x, w, None, 2, ((0, 1), (0, 1))),
                F.conv2d(F.pad(x, [0, 1, 0, 1]), w, None, 2),
            )
    assert len(runs) == 1
    rows = native.info()["choices"]
    assert [row["runs"] for row in rows] == ["torch"]


@requires_backend
@pytest.mark.usefixtures("measured_tuner")
def test_a_paired_call_on_an_input_with_nan_compares_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where torch's output of a paired call holds a NaN (oneDNN may place it elsewhere),
    the call returns torch's output and neither checks nor times the class; its oneDNN
    run counts against the class's budget, so inputs that always hold one are not paired
    for long."""
    from padkit.native import _tune

    runs: list[int] = []
    real = _ops.conv
    monkeypatch.setattr(_ops, "conv", lambda *a, **k: runs.append(1) or real(*a, **k))
    w = torch.randn(8, 4, 3, 3)
    x = torch.randn(1, 4, 20, 20)
    x[0, 1, 5, 7] = float("nan")
    want = F.conv2d(F.pad(x, [0, 1, 0, 1]), w, None, 2)
    with torch.no_grad():
        for _ in range(12):
            got = PF.conv2d(x, w, None, 2, ((0, 1), (0, 1)))
            torch.testing.assert_close(got, want, equal_nan=True)
    assert native.info()["choices"] == []
    ((samples),) = _dispatch.HOOK._sampling.values()
    assert samples.native == [] and samples.budget.elapsed > 0
    assert _tune.Budget.FREE <= len(runs) < 12


def test_first_sightings_of_an_unmeasured_class_are_bounded() -> None:
    """A class whose sizes never repeat runs TIME_UNSEEN first calls untimed, then one of
    them times it; the counters stay bounded."""
    hook = _dispatch.Hook()
    key = ("conv", (3, 3))
    got = [hook._time_unseen(key) for _ in range(_dispatch.TIME_UNSEEN + 1)]
    assert got == [False] * _dispatch.TIME_UNSEEN + [True]
    for i in range(5000):
        hook._time_unseen(("conv", i))
    assert len(hook._unmeasured) <= 4096


@requires_backend
@pytest.mark.usefixtures("measured_tuner")
def test_ten_thousand_distinct_sizes_keep_the_choices_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """10,000 distinct input sizes (no size repeats): the choices held and written stay
    within ``choices_limit``, the per-signature memos within their bounds, every output
    exact."""
    from padkit.native import _tune

    timed: list[int] = []
    monkeypatch.setattr(_tune, "MAX_CHOICES", 6)
    monkeypatch.setattr(_tune, "NEAR", 0)  # every size class measured on its own calls
    monkeypatch.setattr(_tune, "BUDGET", 1e9)
    real_record = _tune.Tuner.record
    monkeypatch.setattr(
        _tune.Tuner, "record", lambda *a, **k: timed.append(1) or real_record(*a, **k)
    )
    conv = pnn.Conv2d(2, 2, 3, stride=2, padding="same")
    tuner = _dispatch.HOOK.tuner
    with torch.no_grad():
        for i in range(10_000):
            x = torch.randn(1, 2, 3 + i % 100, 3 + i // 100)
            if i % 997 == 0:
                pads = []
                for n in reversed(x.shape[2:]):
                    total = max((-(-n // 2) - 1) * 2 + 3 - n, 0)
                    pads += [total // 2, total - total // 2]
                want = F.conv2d(F.pad(x, pads), conv.weight, conv.bias, 2)
                _close(conv(x), want)
            else:
                conv(x)
    info = native.info()
    assert len(timed) > 6  # more classes timed than kept: the oldest were dropped
    assert info["choices_limit"] == 6 and 0 < info["choices_kept"] <= 6
    assert tuner.path is not None and tuner.path.is_file()
    rows = json.loads(tuner.path.read_text())["choices"]
    assert 0 < len(rows) <= info["choices_limit"]
    assert len(_dispatch.HOOK._decided) <= 4097
    assert len(_dispatch.HOOK._unmeasured) <= 4096
    assert len(_dispatch.HOOK._sampling) <= 4096


# ----------------------------------------------------------------------------- first use

#: a first op that the backend would take (asymmetric pads), run three times
_FIRST_OPS = (
    "import warnings\n"
    "warnings.simplefilter('always')\n"
    "import torch, torch.nn.functional as F, padkit.functional as PF, padkit.native as n\n"
    "x, w = torch.randn(1, 8, 9, 9), torch.randn(8, 8, 3, 3)\n"
    "ref = F.conv2d(F.pad(x, [1, 0, 0, 1]), w, None, 2)\n"
    "with warnings.catch_warnings(record=True) as seen:\n"
    "    warnings.simplefilter('always')\n"
    "    for _ in range(3):\n"
    "        assert torch.allclose(PF.conv2d(x, w, None, 2, ((0, 1), (1, 0))), ref, atol=1e-5)\n"
    "    n.status()\n"
    "for s in seen:\n"
    "    print('WARNING', s.category.__name__, s.message)\n"
    "print('STATUS', n.status())\n"
)


def _first_ops(**env: str) -> tuple[list[str], str, str]:
    """(the warnings, the status line, stderr) of a fresh process running _FIRST_OPS."""
    full = {k: v for k, v in os.environ.items() if k != "PADKIT_NATIVE"}
    full.update({"PYTHONPATH": str(ROOT), "PADKIT_NATIVE_TUNE": "0", **env})
    res = subprocess.run(
        [sys.executable, "-c", _FIRST_OPS],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=full,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    warned = [line.removeprefix("WARNING ") for line in lines if line.startswith("WARNING ")]
    (status,) = [line.removeprefix("STATUS ") for line in lines if line.startswith("STATUS ")]
    return warned, status, res.stderr


@requires_backend
@pytest.mark.parametrize(
    ("case", "fix"),
    [
        ("no compiler", "install g++, or set CXX"),
        ("unwritable cache", "set PADKIT_NATIVE_CACHE to a writable directory"),
        ("no oneDNN", "PADKIT_ONEDNN_ROOT"),
    ],
)
def test_a_backend_that_cannot_be_built_warns_once(tmp_path: Path, case: str, fix: str) -> None:
    # one warning per process, whatever the number of ops: the reason, the fix, and how to
    # turn it off; the ops still run (on the torch plans); status() says the same
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = {
        "no compiler": {"CXX": str(tmp_path / "no-such-compiler")},
        "unwritable cache": {"PADKIT_NATIVE_CACHE": str(blocker / "cache")},
        "no oneDNN": {"PADKIT_ONEDNN_ROOT": str(tmp_path)},
    }[case]
    env.setdefault("PADKIT_NATIVE_CACHE", str(tmp_path / "cache"))
    warned, status, stderr = _first_ops(**env)
    assert len(warned) == 1, warned
    assert warned[0].startswith(f"BackendWarning {native.WARNING_PREFIX}: ")
    assert fix in warned[0] and "PADKIT_NATIVE=0" in warned[0]
    assert status.startswith("off: ") and fix in status and "pure-torch" in status
    assert "building" not in stderr  # nothing was announced that did not happen
    # PADKIT_NATIVE=0: off, and silent
    warned, status, _ = _first_ops(**env, PADKIT_NATIVE="0")
    assert warned == [] and status.startswith("off (PADKIT_NATIVE=0")


def test_without_onednn_installed_padkit_stays_silent() -> None:
    # neither oneDNN wheel (the extra was not asked for): no warning, status() says why
    code = (
        "import padkit.native._build as b\n"
        "def missing():\n"
        "    raise b.NotInstalled(\"oneDNN is not installed: pip install 'padkit[native]'\")\n"
        "b.find_onednn = missing\n" + _FIRST_OPS
    )
    full = {k: v for k, v in os.environ.items() if k != "PADKIT_NATIVE"}
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**full, "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    assert "WARNING" not in res.stdout and res.stderr == ""
    assert "STATUS off: oneDNN is not installed: pip install 'padkit[native]'" in res.stdout


@requires_backend
def test_first_build_says_so_once(tmp_path: Path) -> None:
    # a build announces itself in one line on stderr (no logging configured); a process
    # that finds the build cached says nothing
    _, status, stderr = _first_ops(PADKIT_NATIVE_CACHE=str(tmp_path))
    assert status.startswith("on (oneDNN 3.")
    assert stderr.splitlines() == [
        f"padkit: building padkit's oneDNN kernels (once, a few seconds) in {tmp_path}"
    ]
    warned, status, stderr = _first_ops(PADKIT_NATIVE_CACHE=str(tmp_path))
    assert warned == [] and stderr == "" and status.startswith("on (oneDNN 3.")


def test_build_message_goes_to_logging_where_configured(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    # pytest's caplog is a configured handler: the message is a log record, not a print
    with caplog.at_level("INFO", logger="padkit.native"):
        _build._announce("building padkit's oneDNN kernels (once, a few seconds) in /x")
    assert [r.getMessage() for r in caplog.records if r.name == "padkit.native"] == [
        "building padkit's oneDNN kernels (once, a few seconds) in /x"
    ]
    assert capsys.readouterr().err == ""


def test_stale_builds_are_pruned(tmp_path: Path) -> None:
    # builds no process loaded for a week go, and leftovers of interrupted builds as old;
    # recent builds (another padkit may use them), the current one and other files stay
    day = 24 * 3600.0
    now = time.time()
    ages = {
        "padkit_dnnl-0000000000000000.so": 8 * day,
        "padkit_dnnl-1111111111111111.so": 2 * day,
        "padkit_dnnl-building-abc.so": 8 * day,
        "padkit_dnnl-current.so": 30 * day,
        "choices-0000000000000000.json": 30 * day,
    }
    for name, age in ages.items():
        (tmp_path / name).write_text("")
        os.utime(tmp_path / name, (now - age, now - age))
    removed = _build.prune(tmp_path, tmp_path / "padkit_dnnl-current.so", now)
    assert sorted(p.name for p in removed) == [
        "padkit_dnnl-0000000000000000.so",
        "padkit_dnnl-building-abc.so",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "choices-0000000000000000.json",
        "padkit_dnnl-1111111111111111.so",
        "padkit_dnnl-current.so",
    ]
    # loading refreshes a build's age (at most hourly), so a build in use is never stale
    current = tmp_path / "padkit_dnnl-current.so"
    _build._touch(current)
    assert now - current.stat().st_mtime < 60
    recent = tmp_path / "padkit_dnnl-1111111111111111.so"
    os.utime(recent, (now - 60, now - 60))
    _build._touch(recent)
    assert abs(recent.stat().st_mtime - (now - 60)) < 1


def test_a_build_pruned_before_it_loads_is_built_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # another process removed the build between this one's two looks at it (is_file, load)
    built: list[Path] = []
    loads: list[Path] = []

    def compile_(cxx: str, flags: list[str], onednn: Any, out: Path, verbose: bool) -> None:
        out.write_text("")
        built.append(out)

    class FakeLibrary:
        def __init__(self, path: Path, onednn: Any) -> None:
            loads.append(path)
            if len(loads) == 1:
                path.unlink()  # pruned by someone else just now
                raise _build.BuildError(f"cannot load {path}")
            self.path = path

    monkeypatch.setenv("PADKIT_NATIVE_CACHE", str(tmp_path))
    monkeypatch.setattr(_build, "_compile", compile_)
    monkeypatch.setattr(_build, "Library", FakeLibrary)
    monkeypatch.setattr(_build, "find_onednn", lambda: _build.OneDNN(tmp_path, tmp_path, (3, 2, 0)))
    monkeypatch.setattr(_build, "_compiler", lambda: "g++")
    lib = _build.build()  # built, removed before its load, built again
    assert len(built) == 2 and len(loads) == 2 and lib.path == built[0] == built[1]
    # a build that is there but does not load is an error, not a loop
    monkeypatch.setattr(
        _build, "Library", lambda p, o: (_ for _ in ()).throw(_build.BuildError("bad"))
    )
    with pytest.raises(_build.BuildError, match="bad"):
        _build.build()


@requires_backend
def test_cli_says_what_the_backend_did(tmp_path: Path) -> None:
    # padkit verify and padkit inspect print one line on the backend instead of the warning
    from padkit import cli

    assert cli._BACKEND_OFF == native.WARNING_PREFIX
    full = {k: v for k, v in os.environ.items() if k != "PADKIT_NATIVE"}
    env = {
        **full,
        "PYTHONPATH": str(ROOT),
        "PADKIT_NATIVE_TUNE": "0",
        "CXX": str(tmp_path / "no-such-compiler"),
        "PADKIT_NATIVE_CACHE": str(tmp_path),
    }
    for args in (["verify", "-q"], ["inspect", "torchvision.models:resnet18"]):
        res = subprocess.run(
            [sys.executable, "-m", "padkit", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=300,
        )
        assert res.returncode == 0, res.stderr
        (line,) = [x for x in res.stdout.splitlines() if x.startswith("native backend: ")]
        assert line.startswith("native backend: off: compiling the native backend failed")
        assert "install g++" in line
        assert "Warning" not in res.stderr
