"""Every execution plan equals the explicit reference: F.pad, then the unpadded op."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import padkit.functional as PF
import padkit.nn as pnn
from padkit import PaddingError, pool_output_size
from padkit.plan import STRATEGIES, _as_residual_pad, plan_conv, plan_pool

torch.set_num_threads(1)

Pairs = tuple[tuple[int, int], ...]
CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
PCONV = {1: PF.conv1d, 2: PF.conv2d, 3: PF.conv3d}


def torch_pad(pairs: Pairs) -> list[int]:
    return [v for p in reversed(pairs) for v in p]


def conv_reference(
    x: torch.Tensor,
    w: torch.Tensor,
    pairs: Pairs,
    s: tuple[int, ...],
    d: tuple[int, ...],
    groups: int,
) -> torch.Tensor:
    nd = len(pairs)
    return CONV[nd](F.pad(x, torch_pad(pairs)), w, None, s, 0, d, groups)


def pool_reference(
    x: np.ndarray,
    op: str,
    k: tuple[int, ...],
    s: tuple[int, ...],
    d: tuple[int, ...],
    pairs: Pairs,
    ceil: bool,
    include_pad: bool,
) -> np.ndarray:
    """Window by window, straight from the definitions (no torch)."""
    spatial = x.shape[2:]
    outs = [
        pool_output_size(n, kk, ss, dd, lo, hi, ceil)
        for n, kk, ss, dd, (lo, hi) in zip(spatial, k, s, d, pairs)
    ]
    out = np.zeros((*x.shape[:2], *outs))
    for idx in itertools.product(*[range(o) for o in outs]):
        vals, count = [], 0
        for taps in itertools.product(*[range(kk) for kk in k]):
            pos = [o * ss - lo + t * dd for o, ss, (lo, _), t, dd in zip(idx, s, pairs, taps, d)]
            if all(0 <= p < n for p, n in zip(pos, spatial)):
                vals.append(x[(slice(None), slice(None), *pos)])
                count += 1
            elif include_pad and all(
                -lo <= p < n + hi for p, n, (lo, hi) in zip(pos, spatial, pairs)
            ):
                count += 1
        where = (slice(None), slice(None), *idx)
        if op == "max_pool":
            out[where] = np.max(vals, axis=0) if vals else -math.inf
        else:
            out[where] = (np.sum(vals, axis=0) if vals else 0.0) / count
    return out


# ---------------------------------------------------------------------------- conv plans

CONV_CASES = [
    # (name, nd, k, s, d, pairs, groups, strategy)
    ("symmetric", 2, (3, 3), (2, 2), (1, 1), ((1, 1), (1, 1)), 1, "native"),
    ("tf-same-s1-even", 2, (4, 4), (1, 1), (1, 1), ((1, 2), (1, 2)), 1, "crop"),
    ("causal-tcn", 1, (3,), (1,), (4,), ((8, 0),), 1, "residual_pad"),
    ("same-lower-s2", 2, (3, 3), (2, 2), (1, 1), ((1, 0), (1, 0)), 1, "crop"),
    ("dw-tf-same-s2", 2, (3, 3), (2, 2), (1, 1), ((0, 1), (0, 1)), 4, "zero_extend"),
    ("dw-5x5-s2", 2, (5, 5), (2, 2), (1, 1), ((1, 2), (1, 2)), 4, "zero_extend"),
    ("dw-dilated", 2, (3, 3), (2, 2), (2, 2), ((0, 2), (2, 4)), 4, "zero_extend"),
    ("dense-tf-same-s2", 2, (3, 3), (2, 2), (1, 1), ((0, 1), (0, 1)), 1, "residual_pad"),
    ("stem-7x7-s2", 2, (7, 7), (2, 2), (1, 1), ((2, 3), (2, 3)), 1, "residual_pad"),
    (
        "video-causal",
        3,
        (3, 3, 3),
        (1, 2, 2),
        (1, 1, 1),
        ((2, 0), (0, 1), (0, 1)),
        1,
        "residual_pad",
    ),
]


@pytest.mark.parametrize(
    ("nd", "k", "s", "d", "pairs", "groups", "strategy"),
    [c[1:] for c in CONV_CASES],
    ids=[c[0] for c in CONV_CASES],
)
def test_conv_plan_is_exact(
    nd: int,
    k: tuple[int, ...],
    s: tuple[int, ...],
    d: tuple[int, ...],
    pairs: Pairs,
    groups: int,
    strategy: str,
) -> None:
    torch.manual_seed(0)
    sizes = (11, 12, 9)[:nd]
    plan = plan_conv(pairs, k, s, d, sizes, groups=groups, in_channels=4)
    assert plan.strategy == strategy, plan.describe()
    x = torch.randn(2, 4, *sizes, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 4 // groups, *k, dtype=torch.float64, requires_grad=True)
    out = PCONV[nd](x, w, None, s, pairs, d, groups)
    ref = conv_reference(x, w, pairs, s, d, groups)
    assert out.shape == ref.shape
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    g = torch.randn_like(ref)
    gx, gw = torch.autograd.grad(out, (x, w), g)
    rx, rw = torch.autograd.grad(ref, (x, w), g)
    torch.testing.assert_close(gx, rx, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gw, rw, rtol=1e-12, atol=1e-12)


def test_symmetric_padding_is_the_native_op() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 8, 15, 16)
    conv = pnn.Conv2d(8, 8, 3, stride=2, padding=1)
    native = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1)
    native.load_state_dict(conv.state_dict())
    assert torch.equal(conv(x), native(x))
    assert torch.equal(pnn.MaxPool2d(3, 2, 1)(x), torch.nn.MaxPool2d(3, 2, 1)(x))
    assert torch.equal(pnn.AvgPool2d(3, 2, 1)(x), torch.nn.AvgPool2d(3, 2, 1)(x))


def test_zero_extend_keeps_channels_last() -> None:
    torch.manual_seed(0)
    conv = pnn.Conv2d(16, 16, 3, stride=2, padding="same", groups=16)
    x = torch.randn(2, 16, 20, 20).to(memory_format=torch.channels_last)
    assert conv.plan(x.shape).strategy == "zero_extend"
    out = conv(x)
    assert out.is_contiguous(memory_format=torch.channels_last)
    ref = conv_reference(x.contiguous(), conv.weight, ((0, 1), (0, 1)), (2, 2), (1, 1), 16)
    torch.testing.assert_close(out + 0, ref + conv.bias.view(1, -1, 1, 1))


@settings(max_examples=60, deadline=None)
@given(
    nd=st.integers(1, 3),
    data=st.data(),
)
def test_every_conv_plan_matches_the_reference(nd: int, data: st.DataObject) -> None:
    k = tuple(data.draw(st.integers(1, 5)) for _ in range(nd))
    s = tuple(data.draw(st.integers(1, 3)) for _ in range(nd))
    d = tuple(data.draw(st.integers(1, 2)) for _ in range(nd))
    pairs = tuple((data.draw(st.integers(0, 4)), data.draw(st.integers(0, 4))) for _ in range(nd))
    sizes = tuple(data.draw(st.integers(1, 9)) for _ in range(nd))
    groups = data.draw(st.sampled_from([1, 3]))
    if any(n + lo + hi < dd * (kk - 1) + 1 for n, (lo, hi), kk, dd in zip(sizes, pairs, k, d)):
        return
    x = torch.randn(2, 3, *sizes, dtype=torch.float64)
    w = torch.randn(6, 3 // groups, *k, dtype=torch.float64)
    plan = plan_conv(pairs, k, s, d, sizes, groups=groups, in_channels=3)
    assert plan.strategy in STRATEGIES
    out = PCONV[nd](x, w, None, s, pairs, d, groups)
    torch.testing.assert_close(out, conv_reference(x, w, pairs, s, d, groups))


# ---------------------------------------------------------------------------- pool plans

POOL_CASES = [
    # (name, op, k, s, pairs, ceil, include_pad, strategy)
    ("max-symmetric", "max_pool", (3, 3), (2, 2), ((1, 1), (1, 1)), False, True, "native"),
    ("max-tf-same-s2", "max_pool", (3, 3), (2, 2), ((0, 1), (0, 1)), False, True, "ceil_mode"),
    ("max-same-lower", "max_pool", (3, 3), (2, 2), ((1, 0), (1, 0)), False, True, "crop"),
    ("max-yolo", "max_pool", (2, 2), (1, 1), ((0, 1), (0, 1)), False, True, "crop"),
    ("max-big-pads", "max_pool", (3, 3), (1, 1), ((2, 2), (0, 3)), False, True, "explicit"),
    ("max-asym-ceil", "max_pool", (2, 2), (2, 2), ((0, 1), (0, 1)), True, True, "ceil_mode"),
    ("avg-excl-s1", "avg_pool", (2, 2), (1, 1), ((0, 1), (0, 1)), False, False, "crop"),
    ("avg-incl-s1", "avg_pool", (2, 2), (1, 1), ((0, 1), (0, 1)), False, True, "zero_extend"),
    ("avg-tf-same", "avg_pool", (3, 3), (2, 2), ((0, 1), (0, 1)), False, False, "ceil_mode"),
    ("avg-incl-s2", "avg_pool", (3, 3), (2, 2), ((0, 1), (0, 1)), False, True, "zero_extend"),
    ("avg-incl-big", "avg_pool", (2, 2), (1, 1), ((0, 3), (2, 0)), False, True, "zero_extend"),
    ("avg-lower", "avg_pool", (3, 3), (2, 2), ((1, 0), (1, 0)), False, True, "zero_extend"),
    ("avg-lower-excl", "avg_pool", (3, 3), (2, 2), ((1, 0), (1, 0)), False, False, "crop"),
    ("avg-ceil-incl", "avg_pool", (3, 3), (2, 2), ((1, 1), (0, 1)), True, True, "explicit"),
]


@pytest.mark.parametrize(
    ("op", "k", "s", "pairs", "ceil", "include_pad", "strategy"),
    [c[1:] for c in POOL_CASES],
    ids=[c[0] for c in POOL_CASES],
)
@pytest.mark.parametrize("sizes", [(8, 9), (27, 27)], ids=["8x9", "27x27"])
def test_pool_plan_is_exact(
    op: str,
    k: tuple[int, ...],
    s: tuple[int, ...],
    pairs: Pairs,
    ceil: bool,
    include_pad: bool,
    strategy: str,
    sizes: tuple[int, ...],
) -> None:
    torch.manual_seed(0)
    d = (1,) * len(k)
    plan = plan_pool(op, pairs, k, s, d, sizes, ceil_mode=ceil, count_include_pad=include_pad)
    if sizes == (27, 27):  # every named case is named for its plan at this size
        assert plan.strategy == strategy, plan.describe()
    x = torch.randn(2, 3, *sizes, dtype=torch.float64)
    if op == "max_pool":
        out = PF.max_pool2d(x, k, s, pairs, 1, ceil)
    else:
        out = PF.avg_pool2d(x, k, s, pairs, ceil, include_pad)
    ref = pool_reference(x.numpy(), op, k, s, d, pairs, ceil, include_pad)
    assert tuple(out.shape) == ref.shape
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-12, atol=1e-12)


def test_max_pool_plans_return_input_indices() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 3, 9, 10)
    for pairs in [((0, 1), (0, 1)), ((1, 0), (1, 0)), ((2, 2), (0, 2))]:
        out, idx = PF.max_pool2d(x, 3, 2, pairs, return_indices=True)
        gathered = x.flatten(2).gather(2, idx.flatten(2)).view_as(out)
        assert torch.equal(gathered, out)
    # the last column window of ((2, 2), (0, 3)) holds only padding: no index to give
    with pytest.raises(PaddingError, match="holds only padding"):
        PF.max_pool2d(x, 3, 2, ((2, 2), (0, 3)), return_indices=True)


def test_layers_explain_their_plan() -> None:
    conv = pnn.Conv2d(32, 32, 3, stride=2, padding="same", groups=32)
    plan = conv.plan((1, 32, 112, 112))
    assert plan.strategy == "zero_extend"
    assert plan.pads == ((0, 1), (0, 1))
    assert "depthwise" in plan.describe()
    assert conv.plan((1, 32, 113, 113)).strategy == "native"  # TF SAME is (1, 1) there
    pool = pnn.AvgPool2d(3, 2, padding=((0, 1), (0, 1)), count_include_pad=False)
    assert pool.plan((1, 8, 14, 14)).strategy == "ceil_mode"


def test_avg_pool_counting_pads_runs_as_a_depthwise_conv_in_nchw_only() -> None:
    torch.manual_seed(0)
    pool = pnn.AvgPool2d(3, 2, padding=((0, 1), (2, 1)), count_include_pad=True)
    x = torch.randn(2, 5, 13, 14, dtype=torch.float64)
    xp = F.pad(x, (2, 1, 0, 1))
    ref = F.avg_pool2d(xp, 3, 2, 0, False, True)
    for layout in (torch.contiguous_format, torch.channels_last):
        y = x.contiguous(memory_format=layout)
        plan = pool.plan(y.shape, channels_last=layout == torch.channels_last)
        assert (plan.strategy == "zero_extend") == (layout == torch.contiguous_format)
        for _ in range(2):  # the full path, then the layer's memo
            torch.testing.assert_close(pool(y), ref, rtol=1e-12, atol=1e-12)
    with_div = pnn.AvgPool2d(3, 2, padding=((0, 1), (2, 1)), divisor_override=4)
    for _ in range(2):
        torch.testing.assert_close(
            with_div(x), F.avg_pool2d(xp, 3, 2, 0, False, True, 4), rtol=1e-12, atol=1e-12
        )


@pytest.mark.parametrize("pairs", [((0, 1), (0, 1)), ((1, 2), (0, 1)), ((1, 2),)])
def test_zero_extend_under_autograd_is_the_dense_residual_layout(pairs: tuple) -> None:
    # what a depthwise zero_extend conv runs under autograd: the layout a dense conv with
    # the same pads gets from the planner (symmetric part native, the rest one F.pad)
    nd = len(pairs)
    args = (pairs, (3,) * nd, (2,) * nd, (1,) * nd, (12,) * nd)
    dw = plan_conv(*args, groups=8, in_channels=8)
    dense = plan_conv(*args)
    assert (dw.strategy, dense.strategy) == ("zero_extend", "residual_pad")
    got = _as_residual_pad(dw)
    assert got.strategy == "residual_pad"
    assert (got.native_padding, got.pre_pad) == (dense.native_padding, dense.pre_pad)
    assert got.kernel_ext == ((0, 0),) * nd and got.out_size == dw.out_size
