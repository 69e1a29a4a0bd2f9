"""Gradients: gradcheck / gradgradcheck in float64, and equality with F.pad + padding-0 ops.

Shapes are tiny so that the numerical Jacobians stay cheap.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from backward_ops import backward_ops
from torch import Tensor
from torch.autograd import gradcheck, gradgradcheck

import padkit.functional as PF
import padkit.nn as pn

torch.set_num_threads(1)

Pairs = tuple[tuple[int, int], ...]
NONDET_TOL = 1e-12  # what torch's OpInfos pass for conv/pool/pad


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def tf_same(n: int, k: int, s: int, d: int = 1) -> tuple[int, int]:
    k_eff = d * (k - 1) + 1
    total = max((ceil_div(n, s) - 1) * s + k_eff - n, 0)
    return total // 2, total - total // 2


def torch_pad(pairs: Pairs) -> list[int]:
    return [v for lo_hi in reversed(pairs) for v in lo_hi]


def rand(*shape: int, seed: int = 0) -> Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float64).requires_grad_()


def distinct(*shape: int, seed: int = 0) -> Tensor:
    """Well-separated values (a permutation of a ramp): no max-pool ties within eps."""
    gen = torch.Generator().manual_seed(seed)
    n = math.prod(shape)
    perm = torch.randperm(n, generator=gen).to(torch.float64)
    return (perm / n - 0.5).view(*shape).requires_grad_()


def check(fn: Callable[..., Tensor], *inputs: Tensor, second: bool = False) -> None:
    assert gradcheck(fn, inputs, nondet_tol=NONDET_TOL, check_batched_grad=True)
    if second:
        assert gradgradcheck(fn, inputs, nondet_tol=NONDET_TOL)


# ----------------------------------------------------------------------------- conv

CONV_CASES: list[tuple[str, int, dict[str, object], bool]] = [
    ("1d-asym", 1, {"padding": ((2, 1),)}, True),
    ("1d-same-s2", 1, {"padding": "same", "stride": 2}, False),
    ("1d-causal-d2", 1, {"padding": "causal", "dilation": 2}, True),
    ("1d-same_lower-k4", 1, {"padding": "same_lower", "kernel": (4,)}, False),
    ("2d-asym", 2, {"padding": ((0, 2), (1, 0))}, False),
    ("2d-same-s2", 2, {"padding": "same", "stride": 2}, True),
    ("2d-mixed", 2, {"padding": ("causal", (0, 1)), "dilation": (2, 1)}, False),
    ("2d-same-groups", 2, {"padding": "same", "stride": 2, "groups": 2}, False),
    ("3d-same-s2", 3, {"padding": "same", "stride": 2}, False),
]


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
@pytest.mark.parametrize(
    ("nd", "kwargs", "second"),
    [c[1:] for c in CONV_CASES],
    ids=[c[0] for c in CONV_CASES],
)
def test_conv_gradcheck(nd: int, kwargs: dict[str, object], second: bool, mode: str) -> None:
    sizes = (5, 4, 3)[:nd]
    groups = int(kwargs.get("groups", 1))  # type: ignore[call-overload]
    x = rand(1, 2, *sizes)
    kwargs = dict(kwargs)
    k = kwargs.pop("kernel", (3, 2, 2)[:nd])
    w = rand(2, 2 // groups, *k, seed=1)
    b = rand(2, seed=2)
    conv = {1: PF.conv1d, 2: PF.conv2d, 3: PF.conv3d}[nd]

    def fn(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
        return conv(x, w, b, padding_mode=mode, **kwargs)  # type: ignore[arg-type]

    check(fn, x, w, b, second=second and mode in ("zeros", "reflect"))


@pytest.mark.parametrize(
    ("nd", "padding", "stride"),
    [(1, ((0, 1),), 2), (1, "same", 2), (2, ((1, 0), (0, 2)), 2), (2, "same_lower", 3)],
    ids=["1d-asym", "1d-same", "2d-asym", "2d-same_lower-s3"],
)
def test_conv_transpose_gradcheck(nd: int, padding: object, stride: int) -> None:
    x = rand(1, 2, *(3, 2)[:nd])
    w = rand(2, 2, *(3, 4)[:nd], seed=1)
    b = rand(2, seed=2)
    tconv = {1: PF.conv_transpose1d, 2: PF.conv_transpose2d}[nd]

    def fn(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
        return tconv(x, w, b, stride=stride, padding=padding)  # type: ignore[arg-type]

    check(fn, x, w, b, second=nd == 1)


def test_conv_transpose_layer_gradcheck_with_output_padding() -> None:
    layer = pn.ConvTranspose2d(2, 2, 3, stride=2, padding=((0, 1), (1, 1)), output_padding=1)
    layer.double()
    check(layer, rand(1, 2, 3, 3))


# ----------------------------------------------------------------------------- pools

POOL_CASES: list[tuple[str, str, int, dict[str, object], bool]] = [
    ("max1d-asym", "max", 1, {"kernel_size": 3, "stride": 2, "padding": ((2, 1),)}, False),
    ("max1d-large", "max", 1, {"kernel_size": 3, "stride": 1, "padding": 2}, False),
    ("max2d-same-s2", "max", 2, {"kernel_size": 3, "stride": 2, "padding": "same"}, True),
    ("max2d-causal-d2", "max", 2, {"kernel_size": 2, "padding": "causal", "dilation": 2}, False),
    ("max3d-same", "max", 3, {"kernel_size": 2, "stride": 2, "padding": "same"}, False),
    (
        "avg1d-asym-excl",
        "avg",
        1,
        {"kernel_size": 3, "padding": ((2, 0),), "count_include_pad": False},
        True,
    ),
    (
        "avg2d-same-dil-excl",
        "avg",
        2,
        {
            "kernel_size": 2,
            "stride": 2,
            "padding": "same",
            "dilation": 2,
            "count_include_pad": False,
        },
        True,
    ),
    (
        "avg2d-asym-dil-ceil",
        "avg",
        2,
        {
            "kernel_size": 3,
            "stride": 2,
            "padding": ((0, 1), (1, 0)),
            "dilation": 2,
            "ceil_mode": True,
        },
        False,
    ),
    ("avg3d-same", "avg", 3, {"kernel_size": 3, "stride": 2, "padding": "same"}, False),
    ("lp1d-asym", "lp", 1, {"kernel_size": 3, "stride": 2, "padding": ((1, 2),)}, True),
    ("lp2d-same-dil", "lp", 2, {"kernel_size": 2, "padding": "same", "dilation": 2}, False),
    ("lp2d-causal", "lp", 2, {"kernel_size": 3, "stride": 2, "padding": "causal"}, False),
]


@pytest.mark.parametrize(
    ("kind", "nd", "kwargs", "second"),
    [c[1:] for c in POOL_CASES],
    ids=[c[0] for c in POOL_CASES],
)
def test_pool_gradcheck(kind: str, nd: int, kwargs: dict[str, object], second: bool) -> None:
    sizes = (6, 5, 4)[:nd]
    if kind == "max":
        pool: Callable[..., Tensor] = {1: PF.max_pool1d, 2: PF.max_pool2d, 3: PF.max_pool3d}[nd]
        x = distinct(1, 2, *sizes)
        fn: Callable[[Tensor], Tensor] = lambda x: pool(x, **kwargs)  # noqa: E731
    elif kind == "avg":
        pool = {1: PF.avg_pool1d, 2: PF.avg_pool2d, 3: PF.avg_pool3d}[nd]
        x = rand(1, 2, *sizes)
        fn = lambda x: pool(x, **kwargs)  # noqa: E731
    else:
        pool = {1: PF.lp_pool1d, 2: PF.lp_pool2d}[nd]
        x = (rand(1, 2, *sizes).detach().abs() + 0.5).requires_grad_()
        fn = lambda x: pool(x, 3.0, **kwargs)  # noqa: E731
    check(fn, x, second=second)


@pytest.mark.parametrize("include", [True, False], ids=["include_pad", "exclude_pad"])
def test_avg_pool_layer_gradcheck(include: bool) -> None:
    layer = pn.AvgPool2d(3, 2, padding=((0, 2), (1, 0)), count_include_pad=include, dilation=2)
    check(layer, rand(1, 1, 6, 5), second=True)


# ----------------------------------------------------------------------------- grad equality

CONV_F = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
PAD_MODE = {"zeros": "constant", "reflect": "reflect", "replicate": "replicate"}
PAD_MODE["circular"] = "circular"


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("which", ["asymmetric", "same_s2", "causal"])
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_conv_grads_equal_f_pad_then_valid_conv(nd: int, which: str, mode: str) -> None:
    sizes = (7, 6, 5)[:nd]
    k = (4, 3, 2)[:nd]
    stride, dilation = 1, 1
    if which == "asymmetric":
        padding: object = ((2, 0), (0, 1), (1, 0))[:nd]
        pairs: Pairs = padding  # type: ignore[assignment]
    elif which == "same_s2":
        padding, stride = "same", 2
        pairs = tuple(tf_same(n, kk, 2) for n, kk in zip(sizes, k))
    else:
        padding, dilation = "causal", 2
        pairs = tuple((2 * (kk - 1), 0) for kk in k)
    conv = getattr(pn, f"Conv{nd}d")(
        2, 3, k, stride=stride, padding=padding, dilation=dilation, padding_mode=mode
    ).double()
    x = rand(2, 2, *sizes)
    gy = torch.randn(conv(x).shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3))

    out = conv(x)
    gx, gw, gb = torch.autograd.grad(out, (x, conv.weight, conv.bias), gy)
    ref = CONV_F[nd](
        F.pad(x, torch_pad(pairs), mode=PAD_MODE[mode]), conv.weight, conv.bias, stride, 0, dilation
    )
    rx, rw, rb = torch.autograd.grad(ref, (x, conv.weight, conv.bias), gy)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gx, rx, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gw, rw, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gb, rb, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("nd", [1, 2])
def test_conv_transpose_grads_equal_full_then_crop(nd: int) -> None:
    crops = ((0, 1), (1, 2))[:nd]
    layer = getattr(pn, f"ConvTranspose{nd}d")(2, 3, 3, stride=2, padding=crops).double()
    x = rand(1, 2, *(4, 3)[:nd])
    out = layer(x)
    full = {1: F.conv_transpose1d, 2: F.conv_transpose2d}[nd](x, layer.weight, layer.bias, 2)
    ref = full
    for i, (lo, hi) in enumerate(crops):
        ref = ref.narrow(2 + i, lo, ref.shape[2 + i] - lo - hi)
    gy = torch.randn(ref.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    got = torch.autograd.grad(out, (x, layer.weight), gy)
    want = torch.autograd.grad(ref, (x, layer.weight), gy)
    for g, r in zip(got, want):
        torch.testing.assert_close(g, r, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- max pool -inf pads

MAXPOOL_GRAD_CASES: list[tuple[str, int, dict[str, object]]] = [
    ("1d-same-s2", 1, {"kernel_size": 3, "stride": 2, "padding": "same"}),
    ("1d-large", 1, {"kernel_size": 3, "stride": 1, "padding": 2}),
    ("2d-asym", 2, {"kernel_size": 3, "stride": 2, "padding": ((0, 2), (2, 0))}),
    ("2d-same_lower", 2, {"kernel_size": 4, "stride": 3, "padding": "same_lower"}),
    ("2d-dilated", 2, {"kernel_size": 2, "stride": 2, "padding": 1, "dilation": 2}),
    ("3d-full", 3, {"kernel_size": 2, "stride": 1, "padding": "full"}),
]


@pytest.mark.parametrize(
    ("nd", "kwargs"),
    [c[1:] for c in MAXPOOL_GRAD_CASES],
    ids=[c[0] for c in MAXPOOL_GRAD_CASES],
)
def test_max_pool_gradient_never_reaches_padding(nd: int, kwargs: dict[str, object]) -> None:
    sizes = (7, 6, 5)[:nd]
    # all negative: with zero padding the pad would win every border window
    x = (distinct(2, 2, *sizes).detach() - 10.0).requires_grad_()
    layer = getattr(pn, f"MaxPool{nd}d")(**kwargs)
    out = layer(x)
    assert torch.isfinite(out).all(), "a window lies entirely in padding: pick another case"
    out.backward(torch.ones_like(out))
    assert x.grad is not None
    # every output routes its unit gradient to exactly one input element
    assert x.grad.sum().item() == out.numel()
    assert (x.grad >= 0).all()
    # and the routed-to elements are the maxima themselves
    _, idx = getattr(pn, f"MaxPool{nd}d")(return_indices=True, **kwargs)(x)
    counts = torch.zeros_like(x).flatten(2)
    counts.scatter_add_(2, idx.flatten(2), torch.ones_like(idx.flatten(2), dtype=x.dtype))
    torch.testing.assert_close(x.grad.flatten(2), counts, rtol=0, atol=0)


@pytest.mark.parametrize(
    "make, value, crop_in_training",
    [
        (lambda: pn.MaxPool2d(4, 1, padding="same"), float("-inf"), False),
        (lambda: pn.AvgPool2d(2, 1, padding="same", count_include_pad=True), 0.0, False),
        # excluding the pads from the count: F.pad would count them, so the crop view stays
        (lambda: pn.AvgPool2d(2, 1, padding="same", count_include_pad=False), None, True),
    ],
)
@pytest.mark.usefixtures("torch_plans")
def test_channels_last_crop_pools_under_autograd(
    make: Callable[[], torch.nn.Module], value: float | None, crop_in_training: bool
) -> None:
    # channels-last crop pools: under autograd, padkit's torch plan is F.pad + the unpadded
    # pool (the crop view's backward is 5-7x slower there; the oneDNN backend, which may
    # take the pool where it is faster, is detached); the gradients equal those of the F.pad
    # reference
    pool: Any = make()
    x = torch.randn(2, 5, 9, 10).contiguous(memory_format=torch.channels_last)
    plan = pool.plan(tuple(x.shape), channels_last=True)
    assert plan.strategy == "crop"
    xg = x.clone().requires_grad_()
    for _ in range(2):  # the first call and the layer's fast path
        out = pool(xg)
    ops = backward_ops(out)
    assert ("ConstantPadNdBackward0" in ops) is not crop_in_training
    g = torch.randn_like(out)
    (got,) = torch.autograd.grad(out, xg, g)
    xr = x.clone().requires_grad_()
    pads = [v for lo_hi in reversed(plan.pads) for v in lo_hi]
    if value is None:  # the mean over the input elements of each window
        ones = F.pad(torch.ones_like(xr), pads)
        ref = F.avg_pool2d(F.pad(xr, pads), 2, 1) / F.avg_pool2d(ones, 2, 1)
    elif value == 0.0:
        ref = F.avg_pool2d(F.pad(xr, pads), 2, 1)
    else:
        ref = F.max_pool2d(F.pad(xr, pads, value=value), 4, 1)
    (want,) = torch.autograd.grad(ref, xr, g)
    torch.testing.assert_close(out, ref.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    with torch.no_grad():  # inference keeps the crop view, same numbers
        torch.testing.assert_close(pool(x), ref.detach(), rtol=1e-5, atol=1e-6)
