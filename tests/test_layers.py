"""Drop-in behaviour of the padkit.nn layers against their torch.nn namesakes.

References: the torch layer itself (symmetric int padding), ``F.pad`` + the padding-0 torch
op (asymmetric, ``'same'`` at stride 2, every padding_mode), the contiguous / batched /
float32 result of the same layer (layouts, unbatched inputs, low-precision dtypes).
"""

from __future__ import annotations

import copy
import inspect
import math
import pickle
from collections.abc import Callable, Sequence

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import padkit.nn as pn
from padkit import Padding, PaddingError

torch.set_num_threads(1)

Pairs = tuple[tuple[int, int], ...]

LAYER_NAMES = [
    "Conv1d",
    "Conv2d",
    "Conv3d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "ConvTranspose3d",
    "MaxPool1d",
    "MaxPool2d",
    "MaxPool3d",
    "AvgPool1d",
    "AvgPool2d",
    "AvgPool3d",
    "LPPool1d",
    "LPPool2d",
    "LPPool3d",
]


def nd_of(name: str) -> int:
    return int(name[-2])


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def tf_same(n: int, k: int, s: int, d: int = 1) -> tuple[int, int]:
    """TF/XLA SAME pads for one axis."""
    k_eff = d * (k - 1) + 1
    total = max((ceil_div(n, s) - 1) * s + k_eff - n, 0)
    return total // 2, total - total // 2


def torch_pad(pairs: Pairs) -> list[int]:
    return [v for lo_hi in reversed(pairs) for v in lo_hi]


def make(name: str, padding: object = 0, **kwargs: object) -> nn.Module:
    """A padkit layer with small channel counts; ``kwargs`` override the defaults."""
    cls = getattr(pn, name)
    if name.startswith("Conv"):
        args: dict[str, object] = {"in_channels": 2, "out_channels": 3, "kernel_size": 3}
    elif name.startswith("LPPool"):
        args = {"norm_type": 2, "kernel_size": 3, "stride": 2}
    else:
        args = {"kernel_size": 3, "stride": 2}
    args.update(kwargs)
    args["padding"] = padding
    return cls(**args)  # type: ignore[no-any-return]


def make_torch(name: str, **kwargs: object) -> nn.Module:
    cls = getattr(nn, name)
    if name.startswith("Conv"):
        args: dict[str, object] = {"in_channels": 2, "out_channels": 3, "kernel_size": 3}
    elif name.startswith("LPPool"):
        args = {"norm_type": 2, "kernel_size": 3, "stride": 2}
    else:
        args = {"kernel_size": 3, "stride": 2}
    args.update(kwargs)
    return cls(**args)  # type: ignore[no-any-return]


def rand_input(name: str, n: int = 2, size: int = 7, dtype: torch.dtype = torch.float32) -> Tensor:
    gen = torch.Generator().manual_seed(0)
    c = 2
    sizes = [size + i for i in range(nd_of(name))]  # non-square on purpose
    return torch.randn(n, c, *sizes, generator=gen, dtype=dtype)


# ----------------------------------------------------------------------------- identity


@pytest.mark.parametrize("name", LAYER_NAMES)
def test_isinstance_of_torch_class(name: str) -> None:
    layer = make(name, "same" if "Transpose" not in name else 1)
    assert isinstance(layer, getattr(nn, name))
    assert isinstance(layer, nn.Module)


@pytest.mark.parametrize("name", LAYER_NAMES)
def test_signature_is_superset_in_torch_order(name: str) -> None:
    ours = list(inspect.signature(getattr(pn, name)).parameters)
    theirs = list(inspect.signature(getattr(nn, name)).parameters)
    assert set(theirs) <= set(ours)
    assert [p for p in ours if p in theirs] == theirs
    assert ours[: len(theirs)] == theirs  # extra arguments come after torch's
    # defaults of torch's parameters are kept, except those whose None means "not given":
    # then the padding named picks the framework's default (torch's for torch paddings)
    not_given = {"output_padding", "count_include_pad"}
    ours_sig = inspect.signature(getattr(pn, name)).parameters
    for p, param in inspect.signature(getattr(nn, name)).parameters.items():
        assert ours_sig[p].default == (None if p in not_given else param.default), p


CONV_NAMES = [n for n in LAYER_NAMES if n.startswith("Conv")]


@pytest.mark.parametrize("name", CONV_NAMES)
def test_state_dict_keys_and_loading(name: str) -> None:
    torch.manual_seed(0)
    ref = make_torch(name, padding=1, bias=True)
    ours = make(name, 1, bias=True)
    assert list(ours.state_dict()) == list(ref.state_dict())
    for key, value in ref.state_dict().items():
        assert ours.state_dict()[key].shape == value.shape
    ours.load_state_dict(ref.state_dict())  # strict
    x = rand_input(name)
    assert torch.equal(ours(x), ref(x))
    # and the other way round
    ref2 = make_torch(name, padding=1, bias=False)
    ours2 = make(name, "same" if "Transpose" not in name else 1, bias=False)
    ref2.load_state_dict(ours2.state_dict())
    assert list(ours2.state_dict()) == list(ref2.state_dict()) == ["weight"]


@pytest.mark.parametrize("name", [n for n in LAYER_NAMES if not n.startswith("Conv")])
def test_pools_have_no_state(name: str) -> None:
    assert list(make(name, 1).state_dict()) == list(make_torch(name).state_dict()) == []


# ----------------------------------------------------------------------------- vs torch layers

SYMMETRIC_CASES: list[tuple[str, str, dict[str, object]]] = [
    ("Conv1d", "p1", {"padding": 1}),
    ("Conv1d", "p2_s2_d2", {"padding": 2, "stride": 2, "dilation": 2}),
    ("Conv2d", "p1", {"padding": 1}),
    ("Conv2d", "p12_s21", {"padding": (1, 2), "stride": (2, 1), "kernel_size": (3, 5)}),
    ("Conv2d", "groups", {"padding": 1, "in_channels": 2, "out_channels": 4, "groups": 2}),
    ("Conv2d", "depthwise_s2", {"padding": 1, "stride": 2, "out_channels": 2, "groups": 2}),
    ("Conv3d", "p1_s2", {"padding": 1, "stride": 2}),
    ("ConvTranspose1d", "p1_s2_op1", {"padding": 1, "stride": 2, "output_padding": 1}),
    ("ConvTranspose2d", "p1_s2", {"padding": 1, "stride": 2}),
    ("ConvTranspose2d", "p2_d2", {"padding": 2, "dilation": 2}),
    ("ConvTranspose3d", "p1_s2_op1", {"padding": 1, "stride": 2, "output_padding": 1}),
    ("MaxPool1d", "p1", {"padding": 1}),
    ("MaxPool1d", "p1_ceil", {"padding": 1, "ceil_mode": True}),
    ("MaxPool2d", "p1_d2", {"padding": 1, "dilation": 2, "stride": 1}),
    ("MaxPool2d", "p1_ceil", {"padding": 1, "ceil_mode": True}),
    ("MaxPool3d", "p1", {"padding": 1}),
    ("AvgPool1d", "p1", {"padding": 1}),
    ("AvgPool1d", "p1_excl_ceil", {"padding": 1, "count_include_pad": False, "ceil_mode": True}),
    ("AvgPool2d", "p1_ceil", {"padding": 1, "ceil_mode": True}),
    ("AvgPool2d", "p1_excl", {"padding": 1, "count_include_pad": False}),
    ("AvgPool2d", "divisor", {"padding": 1, "divisor_override": 2}),
    ("AvgPool3d", "p1_ceil_excl", {"padding": 1, "ceil_mode": True, "count_include_pad": False}),
]


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [(c[0], c[2]) for c in SYMMETRIC_CASES],
    ids=[f"{c[0]}-{c[1]}" for c in SYMMETRIC_CASES],
)
def test_symmetric_int_padding_bit_identical_to_torch(name: str, kwargs: dict[str, object]) -> None:
    torch.manual_seed(0)
    ref = make_torch(name, **kwargs)
    padding = kwargs.pop("padding")
    ours = make(name, padding, **kwargs)
    ours.load_state_dict(ref.state_dict())
    x = rand_input(name, size=8)
    got, want = ours(x), ref(x)
    assert got.shape == want.shape
    assert torch.equal(got, want), f"max abs diff {(got - want).abs().max().item():.3g}"
    if name.startswith("Conv") and "Transpose" not in name:
        assert ours.padding == ref.padding


@pytest.mark.parametrize(("name", "ceil"), [(f"LPPool{d}d", c) for d in "123" for c in (0, 1)])
def test_lppool_without_padding_equals_torch(name: str, ceil: int) -> None:
    nd = nd_of(name)
    x = torch.rand(2, 2, *(8,) * nd, generator=torch.Generator().manual_seed(0)) + 0.1
    if ceil:
        # padkit documents another ceil overhang rule than torch; with 8, k=2, s=2 there is none
        ours = make(name, 0, kernel_size=2, ceil_mode=True)
        ref = make_torch(name, kernel_size=2, ceil_mode=True)
    else:
        ours, ref = make(name, 0), make_torch(name)
    torch.testing.assert_close(ours(x), ref(x), rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- padding modes

CONV_F = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
MODE_TO_PAD = {"zeros": "constant", "reflect": "reflect", "replicate": "replicate"}
MODE_TO_PAD["circular"] = "circular"

ASYM = {1: ((2, 0),), 2: ((0, 2), (1, 0)), 3: ((1, 0), (0, 2), (2, 1))}
KERNELS = {1: (3,), 2: (3, 4), 3: (2, 3, 3)}


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("which", ["asymmetric", "same_s2", "same_lower_s2", "causal_d2"])
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_padding_modes_equal_f_pad_then_conv(nd: int, which: str, mode: str) -> None:
    torch.manual_seed(0)
    k = KERNELS[nd]
    sizes = (6, 7, 5)[:nd]
    stride, dilation = 1, 1
    if which == "asymmetric":
        padding: object = ASYM[nd]
        pairs: Pairs = ASYM[nd]
    elif which.startswith("same"):
        stride = 2
        padding = "same" if which == "same_s2" else "same_lower"
        pairs = tuple(tf_same(n, kk, 2) for n, kk in zip(sizes, k))
        if which == "same_lower_s2":
            pairs = tuple((hi, lo) for lo, hi in pairs)
    else:
        dilation = 2
        padding = "causal"
        pairs = tuple((2 * (kk - 1), 0) for kk in k)
    conv = getattr(pn, f"Conv{nd}d")(
        2, 3, k, stride=stride, padding=padding, dilation=dilation, padding_mode=mode
    ).double()
    x = torch.randn(2, 2, *sizes, dtype=torch.float64)
    xp = F.pad(x, torch_pad(pairs), mode=MODE_TO_PAD[mode])
    ref = CONV_F[nd](xp, conv.weight, conv.bias, stride, 0, dilation)
    torch.testing.assert_close(conv(x), ref, rtol=1e-12, atol=1e-12)
    assert conv.padding_mode == mode


POOL_F: dict[str, Callable[..., Tensor]] = {
    "MaxPool1d": F.max_pool1d,
    "MaxPool2d": F.max_pool2d,
    "MaxPool3d": F.max_pool3d,
}


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("which", ["asymmetric", "same_s2", "large_pads"])
def test_max_pool_equals_neg_inf_pad_then_pool(nd: int, which: str) -> None:
    sizes = (6, 7, 5)[:nd]
    k, s = 3, 2
    if which == "asymmetric":
        padding: object = ASYM[nd]
        pairs: Pairs = ASYM[nd]
    elif which == "same_s2":
        padding = "same"
        pairs = tuple(tf_same(n, k, s) for n in sizes)
    else:  # pads > k/2 (ONNX test_maxpool_2d_pads), torch refuses them natively
        padding = 2
        pairs = ((2, 2),) * nd
    x = -torch.rand(1, 2, *sizes, dtype=torch.float64) - 1  # all negative: a zero pad would win
    pool = getattr(pn, f"MaxPool{nd}d")(k, s, padding=padding)
    ref = POOL_F[f"MaxPool{nd}d"](F.pad(x, torch_pad(pairs), value=-math.inf), k, s)
    assert torch.equal(pool(x), ref)


def count_map(sizes: Sequence[int], pairs: Pairs, k: int, s: int) -> Tensor:
    ones = torch.ones(1, 1, *sizes, dtype=torch.float64)
    pool = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[len(sizes)]
    return pool(F.pad(ones, torch_pad(pairs)), k, s) * k ** len(sizes)


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("include", [True, False], ids=["include_pad", "exclude_pad"])
@pytest.mark.parametrize("which", ["asymmetric", "same_s2"])
def test_avg_pool_equals_pad_then_pool(nd: int, include: bool, which: str) -> None:
    sizes = (6, 7, 5)[:nd]
    k, s = 3, 2
    if which == "asymmetric":
        padding: object = ASYM[nd]
        pairs: Pairs = ASYM[nd]
    else:
        padding = "same"
        pairs = tuple(tf_same(n, k, s) for n in sizes)
    x = torch.rand(1, 2, *sizes, dtype=torch.float64)
    pool_f = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[nd]
    sums = pool_f(F.pad(x, torch_pad(pairs)), k, s) * k**nd
    div = k**nd if include else count_map(sizes, pairs, k, s)
    pool = getattr(pn, f"AvgPool{nd}d")(k, s, padding=padding, count_include_pad=include)
    torch.testing.assert_close(pool(x), sums / div, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("nd", [1, 2])
def test_lp_pool_equals_zero_pad_then_power_sum(nd: int) -> None:
    sizes = (6, 7)[:nd]
    k, s, p = 3, 2, 3.0
    pairs = ASYM[nd]
    x = torch.rand(1, 2, *sizes, dtype=torch.float64) + 0.1
    pool_f = {1: F.avg_pool1d, 2: F.avg_pool2d}[nd]
    ref = (pool_f(F.pad(x, torch_pad(pairs)).pow(p), k, s) * k**nd).pow(1 / p)
    pool = getattr(pn, f"LPPool{nd}d")(p, k, s, padding=pairs)
    torch.testing.assert_close(pool(x), ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("nd", [1, 2])
def test_conv_transpose_same_equals_full_then_crop(nd: int) -> None:
    # TF 'same' = padding 0 then keep [crop_lo : n*s], crop_lo = total//2
    torch.manual_seed(0)
    k, s = 3, 2
    layer = getattr(pn, f"ConvTranspose{nd}d")(2, 3, k, stride=s, padding="same").double()
    sizes = (3, 4)[:nd]
    x = torch.randn(1, 2, *sizes, dtype=torch.float64)
    tconv = {1: F.conv_transpose1d, 2: F.conv_transpose2d}[nd]
    full = tconv(x, layer.weight, layer.bias, s)
    total = max(k - s, 0)
    lo = total // 2
    ref = full
    for i, n in enumerate(sizes):
        ref = ref.narrow(2 + i, lo, n * s)
    torch.testing.assert_close(layer(x), ref, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------- layouts

LAYOUT_CASES: list[tuple[str, str, dict[str, object]]] = [
    ("Conv2d", "same_s2", {"padding": "same", "stride": 2}),
    ("Conv2d", "asym_reflect", {"padding": ((0, 2), (1, 0)), "padding_mode": "reflect"}),
    ("Conv2d", "depthwise_same", {"padding": "same", "stride": 2, "out_channels": 2, "groups": 2}),
    ("ConvTranspose2d", "same_s2", {"padding": "same", "stride": 2}),
    ("MaxPool2d", "same_s2", {"padding": "same"}),
    ("MaxPool2d", "large", {"padding": 2}),
    ("AvgPool2d", "asym_excl", {"padding": ((0, 2), (1, 0)), "count_include_pad": False}),
    ("AvgPool2d", "dilated", {"padding": "same", "dilation": 2}),
    ("LPPool2d", "same", {"padding": "same"}),
    ("Conv3d", "causal", {"padding": ("causal", "same", "same")}),
    ("MaxPool3d", "same", {"padding": "same"}),
    ("AvgPool3d", "asym", {"padding": ((1, 0), (0, 2), (2, 1))}),
]
LAYOUT_IDS = [f"{c[0]}-{c[1]}" for c in LAYOUT_CASES]


def build(name: str, kwargs: dict[str, object]) -> nn.Module:
    kwargs = dict(kwargs)
    padding = kwargs.pop("padding")
    torch.manual_seed(0)
    return make(name, padding, **kwargs).double()


@pytest.mark.parametrize(("name", "kwargs"), [(c[0], c[2]) for c in LAYOUT_CASES], ids=LAYOUT_IDS)
def test_channels_last_equals_contiguous(name: str, kwargs: dict[str, object]) -> None:
    layer = build(name, kwargs)
    x = rand_input(name, dtype=torch.float64).abs()
    fmt = torch.channels_last if nd_of(name) == 2 else torch.channels_last_3d
    xc = x.to(memory_format=fmt)
    assert xc.is_contiguous(memory_format=fmt)
    torch.testing.assert_close(layer(xc), layer(x), rtol=1e-12, atol=1e-12)
    if name.startswith("Conv"):
        layer_cl = copy.deepcopy(layer).to(memory_format=fmt)
        torch.testing.assert_close(layer_cl(xc), layer(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("name", "kwargs"), [(c[0], c[2]) for c in LAYOUT_CASES], ids=LAYOUT_IDS)
def test_non_contiguous_inputs(name: str, kwargs: dict[str, object]) -> None:
    layer = build(name, kwargs)
    x = rand_input(name, size=14, dtype=torch.float64).abs()
    strided = x[..., ::2]
    assert not strided.is_contiguous()
    torch.testing.assert_close(layer(strided), layer(strided.contiguous()), rtol=0, atol=0)
    swapped = x.transpose(-1, -2)
    torch.testing.assert_close(layer(swapped), layer(swapped.contiguous()), rtol=0, atol=0)
    batch_swapped = torch.cat([x, x]).view(2, *x.shape).transpose(0, 1)[:, 0]
    torch.testing.assert_close(layer(batch_swapped), layer(x), rtol=0, atol=0)


@pytest.mark.parametrize("name", LAYER_NAMES)
def test_batch_size_zero(name: str) -> None:
    layer = make(name, "same", stride=2)
    one = layer(rand_input(name, n=1))
    empty = layer(rand_input(name, n=0))
    assert empty.shape == (0, *one.shape[1:])
    assert empty.dtype == one.dtype


@pytest.mark.parametrize("name", LAYER_NAMES)
@pytest.mark.parametrize("padding", ["same", "asymmetric"])
def test_unbatched_equals_batch_of_one(name: str, padding: str) -> None:
    torch.manual_seed(0)
    pad: object = "same" if padding == "same" else ASYM[nd_of(name)]
    layer = make(name, pad, stride=2).double()
    x = rand_input(name, n=1, dtype=torch.float64).abs()
    out = layer(x[0])
    ref = layer(x)[0]
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    if name.startswith("MaxPool"):
        layer.return_indices = True
        values, idx = layer(x[0])
        ref_values, ref_idx = layer(x)
        assert torch.equal(values, ref_values[0]) and torch.equal(idx, ref_idx[0])


# ----------------------------------------------------------------------------- dtypes

LOW_PRECISION_CASES: list[tuple[str, str, dict[str, object]]] = [
    ("Conv1d", "same_s2", {"padding": "same", "stride": 2}),
    ("Conv2d", "same_s2", {"padding": "same", "stride": 2}),
    ("Conv2d", "reflect", {"padding": ((0, 2), (1, 0)), "padding_mode": "reflect"}),
    ("ConvTranspose2d", "same_s2", {"padding": "same", "stride": 2}),
    ("MaxPool1d", "same", {"padding": "same"}),
    ("MaxPool2d", "asym", {"padding": ((0, 2), (1, 0))}),
    ("AvgPool1d", "same_excl", {"padding": "same", "count_include_pad": False}),
    ("AvgPool2d", "asym_excl", {"padding": ((0, 2), (1, 0)), "count_include_pad": False}),
    ("LPPool2d", "same", {"padding": "same"}),
    ("AvgPool3d", "asym", {"padding": ((1, 0), (0, 2), (2, 1))}),
    ("MaxPool3d", "same", {"padding": "same"}),
    ("Conv3d", "causal", {"padding": ("causal", "same", "same")}),
]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize(
    ("name", "kwargs"),
    [(c[0], c[2]) for c in LOW_PRECISION_CASES],
    ids=[f"{c[0]}-{c[1]}" for c in LOW_PRECISION_CASES],
)
def test_low_precision_dtypes(name: str, kwargs: dict[str, object], dtype: torch.dtype) -> None:
    """float16/bfloat16 on CPU: the dtype is kept and the result is the float32 one, rounded.

    torch itself lacks a few CPU kernels here (avg_pool3d in half); a layer
    must then either compute the result (e.g. upcast) or refuse with a clear padkit error.
    """
    layer = build(name, kwargs).float()
    x = rand_input(name).abs()
    ref = layer(x)
    low = copy.deepcopy(layer).to(dtype)
    try:
        out = low(x.to(dtype))
    except (PaddingError, TypeError) as err:
        assert str(dtype).split(".")[-1] in str(err) or "Half" in str(err)
        return
    assert out.dtype == dtype
    tol = 2e-2 if dtype == torch.float16 else 8e-2
    torch.testing.assert_close(out.float(), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize(("name", "kwargs"), [(c[0], c[2]) for c in LAYOUT_CASES], ids=LAYOUT_IDS)
def test_float64_matches_float32(name: str, kwargs: dict[str, object]) -> None:
    layer = build(name, kwargs)
    x = rand_input(name, dtype=torch.float64).abs()
    out = layer(x)
    assert out.dtype == torch.float64
    torch.testing.assert_close(layer.float()(x.float()), out.float(), rtol=1e-5, atol=1e-5)


def window_max(xp: Tensor, k: int, s: int) -> Tensor:
    """Floor-mode max over every k-window with stride s on the spatial axes (any dtype)."""
    nd = xp.dim() - 2
    win = xp
    for i in range(nd):
        win = win.unfold(2 + i, k, s)
    return win.amax(dim=tuple(range(-nd, 0)))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.int8])
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_integer_max_pool_pads_with_dtype_minimum(nd: int, dtype: torch.dtype) -> None:
    info = torch.iinfo(dtype)
    sizes = (6, 7, 5)[:nd]
    gen = torch.Generator().manual_seed(0)
    # values away from 0 and near the dtype's minimum: a zero pad would win at the border
    x = torch.randint(info.min, info.min + 20, (1, 2, *sizes), generator=gen).to(dtype)
    pairs = tuple(tf_same(n, 3, 2) for n in sizes)
    pool = getattr(pn, f"MaxPool{nd}d")(3, 2, padding="same")
    out = pool(x)
    assert out.dtype == dtype
    ref = window_max(F.pad(x, torch_pad(pairs), value=info.min), 3, 2)
    assert torch.equal(out, ref)
    if info.min < 0:
        assert (out < 0).all()


def test_int64_avg_pool_truncates_like_torch() -> None:
    x = torch.arange(-12, 13, dtype=torch.int64).view(1, 1, 5, 5) * 7
    for include in (True, False):
        for ceil in (False, True):
            ref = F.avg_pool2d(x, 2, 1, 1, ceil, include)  # torch's own int64 kernel
            out = pn.AvgPool2d(2, 1, padding=1, ceil_mode=ceil, count_include_pad=include)(x)
            assert out.dtype == torch.int64
            assert torch.equal(out, ref), (include, ceil)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_integer_avg_pool_asymmetric_truncates(dtype: torch.dtype) -> None:
    x = (torch.arange(-12, 13, dtype=torch.int64).view(1, 1, 5, 5) * 7).to(dtype)
    pairs = ((0, 2), (1, 0))
    sums = F.avg_pool2d(F.pad(x.to(torch.int64), torch_pad(pairs)), 3, 2, divisor_override=1)
    for include in (True, False):
        div = 9 if include else count_map((5, 5), pairs, 3, 2).to(torch.int64)
        ref = torch.div(sums, div, rounding_mode="trunc").to(dtype)
        out = pn.AvgPool2d(3, 2, padding=pairs, count_include_pad=include)(x)
        assert out.dtype == dtype
        assert torch.equal(out, ref), include


@pytest.mark.parametrize("name", ["MaxPool2d", "AvgPool2d", "LPPool2d", "MaxPool1d"])
def test_bool_inputs_are_refused_clearly(name: str) -> None:
    layer = make(name, "same")
    with pytest.raises(TypeError, match=r"bool"):
        layer(
            torch.ones(1, 2, 5, 5, dtype=torch.bool)[:, :, 0]
            if name.endswith("1d")
            else torch.ones(1, 2, 5, 5, dtype=torch.bool)
        )


def test_bool_conv_fails_like_torch() -> None:
    x = torch.ones(1, 2, 5, 5, dtype=torch.bool)
    with pytest.raises(RuntimeError, match=r"bool|Bool") as theirs:
        make_torch("Conv2d", padding=1)(x)
    with pytest.raises((type(theirs.value), TypeError, PaddingError), match=r"bool|Bool"):
        make("Conv2d", "same")(x)


# ----------------------------------------------------------------------------- module plumbing

PLUMBING = [
    ("Conv2d", {"padding": "same", "stride": 2, "padding_mode": "reflect"}),
    ("Conv1d", {"padding": "causal", "dilation": 2}),
    ("ConvTranspose2d", {"padding": ((0, 1), (1, 0)), "stride": 2}),
    ("MaxPool2d", {"padding": "same", "return_indices": False}),
    ("AvgPool3d", {"padding": ((1, 0), (0, 2), (2, 1)), "count_include_pad": False}),
    ("LPPool1d", {"padding": "same_lower"}),
]


@pytest.mark.parametrize(("name", "kwargs"), PLUMBING, ids=[p[0] for p in PLUMBING])
def test_pickle_and_deepcopy_round_trip(name: str, kwargs: dict[str, object]) -> None:
    layer = build(name, kwargs)
    x = rand_input(name, dtype=torch.float64).abs()
    want = layer(x)  # populates any per-shape cache first
    for clone in (pickle.loads(pickle.dumps(layer)), copy.deepcopy(layer)):
        assert type(clone) is type(layer)
        assert clone.pad_spec == layer.pad_spec
        assert repr(clone) == repr(layer)
        assert torch.equal(clone(x), want)
        assert list(clone.state_dict()) == list(layer.state_dict())


REPR_CASES: list[tuple[str, object, Sequence[str]]] = [
    ("Conv2d", "same", ("same",)),
    ("Conv2d", ((0, 1), (2, 3)), ("(0, 1)", "(2, 3)")),
    ("Conv1d", "causal", ("causal",)),
    ("ConvTranspose1d", "same_lower", ("same_lower",)),
    ("MaxPool2d", ((0, 1), (1, 0)), ("(0, 1)", "(1, 0)")),
    ("AvgPool1d", "same", ("same",)),
    ("LPPool2d", "full", ("full",)),
    ("Conv2d", 1, ("1",)),
]


@pytest.mark.parametrize(
    ("name", "padding", "needles"), REPR_CASES, ids=[f"{c[0]}-{c[1]}" for c in REPR_CASES]
)
def test_repr_mentions_padding(name: str, padding: object, needles: Sequence[str]) -> None:
    text = repr(make(name, padding))
    assert text.startswith(name + "(")
    assert "padding=" in text
    for needle in needles:
        assert needle in text, text


def test_module_to_dtype() -> None:
    torch.manual_seed(0)
    conv = pn.Conv2d(2, 3, 3, stride=2, padding="same")
    conv64 = conv.to(torch.float64)
    assert conv64 is conv
    assert conv.weight.dtype == torch.float64 and conv.bias is not None
    assert conv.bias.dtype == torch.float64
    x = torch.randn(1, 2, 8, 7, dtype=torch.float64)
    pairs = (tf_same(8, 3, 2), tf_same(7, 3, 2))
    ref = F.conv2d(F.pad(x, torch_pad(pairs)), conv.weight, conv.bias, 2)
    torch.testing.assert_close(conv(x), ref, rtol=1e-12, atol=1e-12)
    conv.to(torch.bfloat16)
    assert conv(x.bfloat16()).dtype == torch.bfloat16
    seq = nn.Sequential(pn.Conv1d(2, 2, 3, padding="causal"), pn.MaxPool1d(2, padding="same"))
    seq.to(dtype=torch.float64)
    assert seq(torch.randn(1, 2, 9, dtype=torch.float64)).dtype == torch.float64


def test_padding_spec_survives_train_eval_and_apply() -> None:
    conv = pn.Conv2d(2, 3, 3, stride=2, padding="same")
    conv.eval()
    conv.apply(lambda m: None)
    conv.train()
    assert conv.pad_spec == Padding.parse("same", 2)
    assert conv(torch.randn(1, 2, 9, 9)).shape == (1, 3, 5, 5)


# ----------------------------------------------------------------------------- return_indices

NATIVE_INDEX_CASES: list[tuple[int, str, dict[str, object]]] = [
    (1, "k3_s2_p1", {"kernel_size": 3, "stride": 2, "padding": 1}),
    (1, "k3_s2_p1_ceil", {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    (2, "k3_s2_p1", {"kernel_size": 3, "stride": 2, "padding": 1}),
    (2, "k2_s1_p1", {"kernel_size": 2, "stride": 1, "padding": 1}),
    (2, "k3_s1_p1_d2", {"kernel_size": 3, "stride": 1, "padding": 1, "dilation": 2}),
    (3, "k3_s2_p1_ceil", {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
]
UNPOOL = {1: F.max_unpool1d, 2: F.max_unpool2d, 3: F.max_unpool3d}


@pytest.mark.parametrize(
    ("nd", "kwargs"),
    [(c[0], c[2]) for c in NATIVE_INDEX_CASES],
    ids=[f"{c[0]}d-{c[1]}" for c in NATIVE_INDEX_CASES],
)
def test_return_indices_match_torch(nd: int, kwargs: dict[str, object]) -> None:
    x = torch.randn(2, 2, *(7, 8, 6)[:nd], generator=torch.Generator().manual_seed(1))
    ours = getattr(pn, f"MaxPool{nd}d")(return_indices=True, **kwargs)
    ref = getattr(nn, f"MaxPool{nd}d")(return_indices=True, **kwargs)
    values, idx = ours(x)
    ref_values, ref_idx = ref(x)
    assert torch.equal(values, ref_values)
    assert torch.equal(idx, ref_idx)
    if "dilation" in kwargs:
        return  # max_unpool has no dilation argument; the indices were compared above
    k, s = kwargs["kernel_size"], kwargs["stride"]
    p = kwargs["padding"]
    size = list(x.shape[2:])
    unpooled = UNPOOL[nd](values, idx, k, s, p, output_size=size)
    assert torch.equal(unpooled, UNPOOL[nd](ref_values, ref_idx, k, s, p, output_size=size))


def unpool_padding(out: int, n: int, k: int, s: int) -> int:
    """A symmetric padding for which max_unpool accepts output size ``n`` (its range check)."""
    for p in range(k + 1):
        base = (out - 1) * s - 2 * p + k
        if base <= n < base + s:
            return p
    raise AssertionError((out, n, k, s))


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("padding", ["same", "asymmetric", "large"])
def test_return_indices_point_into_the_input(nd: int, padding: str) -> None:
    x = torch.randn(2, 2, *(7, 8, 6)[:nd], generator=torch.Generator().manual_seed(2))
    pad: object = {"same": "same", "asymmetric": ASYM[nd], "large": 2}[padding]
    pool = getattr(pn, f"MaxPool{nd}d")(3, 2, padding=pad, return_indices=True)
    values, idx = pool(x)
    assert torch.equal(values, pool.__class__(3, 2, padding=pad)(x))
    flat = x.flatten(2)
    assert int(idx.min()) >= 0 and int(idx.max()) < flat.shape[-1]
    assert torch.equal(flat.gather(2, idx.flatten(2)).view_as(values), values)
    size = list(x.shape[2:])
    unpool_pad = tuple(unpool_padding(o, n, 3, 2) for o, n in zip(values.shape[2:], size))
    unpooled = UNPOOL[nd](values, idx, 3, 2, unpool_pad, output_size=size)
    mask = unpooled != 0
    assert torch.equal(unpooled[mask], x[mask])
