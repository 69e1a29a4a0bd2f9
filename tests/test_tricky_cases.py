"""The tricky cases of padding conventions, as far as they concern padkit.

Every expected number below was worked out by hand from each framework's rule and
checked in independent runs of TF/JAX, ONNX Runtime, PyTorch or Caffe's source rule;
none is copied from padkit. Inputs are ``x = [1, 2, ..., n]`` and conv kernels are all ones,
so every conv output is a window sum.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import padkit
import padkit.functional as PF
from padkit import Padding, PaddingError

torch.set_num_threads(1)


def ramp(n: int) -> torch.Tensor:
    return torch.arange(1.0, n + 1.0, dtype=torch.float64).view(1, 1, n)


def ones_kernel(k: int) -> torch.Tensor:
    return torch.ones(1, 1, k, dtype=torch.float64)


def values(t: torch.Tensor) -> list[float]:
    return t.flatten().tolist()


# ----------------------------------------------------------------------------- conv


def test_strided_tf_same_vs_symmetric() -> None:
    x = ramp(8)
    assert padkit.resolve_padding("same", 3, 2, input_size=8) == ((0, 1),)
    assert values(PF.conv1d(x, ones_kernel(3), stride=2, padding="same")) == [6, 12, 18, 15]
    assert values(PF.conv1d(x, ones_kernel(3), stride=2, padding=1)) == [3, 9, 15, 21]
    # same_static is the size-independent (1, 1) of PyTorch / Flux SamePad / Flax CIRCULAR
    assert values(PF.conv1d(x, ones_kernel(3), stride=2, padding="same_static")) == [3, 9, 15, 21]


def test_n7_every_convention_agrees() -> None:
    x = ramp(7)
    same = PF.conv1d(x, ones_kernel(3), stride=2, padding="same")
    assert torch.equal(same, PF.conv1d(x, ones_kernel(3), stride=2, padding=1))
    assert torch.equal(same, PF.conv1d(x, ones_kernel(3), stride=2, padding="same_static"))


def test_resnet_7x7_stride2_stem() -> None:
    x = ramp(224)
    assert padkit.resolve_padding("same", 7, 2, input_size=224) == ((2, 3),)
    tf = values(PF.conv1d(x, ones_kernel(7), stride=2, padding="same"))
    torch_style = values(PF.conv1d(x, ones_kernel(7), stride=2, padding=3))
    lower = values(PF.conv1d(x, ones_kernel(7), stride=2, padding="same_lower"))
    assert tf[:2] == [15, 28]
    assert torch_style[:2] == [10, 21]
    assert lower[:2] == [10, 21]  # ONNX SAME_LOWER (3, 2)
    assert len(tf) == len(torch_style) == 112
    # n = 225: every system pads (3, 3)
    assert padkit.resolve_padding("same", 7, 2, input_size=225) == ((3, 3),)
    assert padkit.resolve_padding("same_lower", 7, 2, input_size=225) == ((3, 3),)


@pytest.mark.parametrize(
    ("padding", "expected"),
    [
        pytest.param("same", [3, 5, 7, 9, 5], id="tf-torch-onnx-upper"),
        pytest.param("same_static", [3, 5, 7, 9, 5], id="flax-circular-split"),
        pytest.param("same_lower", [1, 3, 5, 7, 9], id="onnx-jax-lower"),
        pytest.param("same_static_lower", [1, 3, 5, 7, 9], id="flux-samepad"),
        pytest.param(0, [3, 5, 7, 9], id="timm-default-shrinks"),
    ],
)
def test_even_kernel_stride1(padding: str | int, expected: list[float]) -> None:
    assert values(PF.conv1d(ramp(5), ones_kernel(2), padding=padding)) == expected


def test_flux_samepad_is_the_lower_split() -> None:
    spec = Padding.from_flux("SamePad", ndim=1)
    assert values(PF.conv1d(ramp(5), ones_kernel(2), padding=spec)) == [1, 3, 5, 7, 9]


@pytest.mark.parametrize(
    ("padding", "pads", "expected"),
    [
        pytest.param("same", (1, 2), [6, 10, 14, 18, 15, 11], id="tf-torch"),
        pytest.param("same_lower", (2, 1), [3, 6, 10, 14, 18, 15], id="flux-lower"),
        pytest.param("same_static_lower", (2, 1), [3, 6, 10, 14, 18, 15], id="flux-samepad"),
    ],
)
def test_k4_stride1(padding: str, pads: tuple[int, int], expected: list[float]) -> None:
    assert padkit.resolve_padding(padding, 4, 1) == (pads,)
    assert values(PF.conv1d(ramp(6), ones_kernel(4), padding=padding)) == expected


def test_dilated_same() -> None:
    # k=2, d=3: k_eff=4, total 3. (ORT's refusal of dilated auto_pad is ORT's bug.)
    x = ramp(7)
    assert padkit.resolve_padding("same", 2, 1, 3) == ((1, 2),)
    assert padkit.resolve_padding("same_lower", 2, 1, 3) == ((2, 1),)
    assert padkit.resolve_padding("same_static_lower", 2, 1, 3) == ((2, 1),)  # Flux
    got = PF.conv1d(x, ones_kernel(2), padding="same", dilation=3)
    assert values(got) == [3, 5, 7, 9, 11, 5, 6]


# ----------------------------------------------------------------------------- pools


def test_ceil_drops_a_window_starting_in_the_right_pad() -> None:
    x = ramp(5)
    assert padkit.pool_output_size(5, 2, 2, lo=1, hi=1, ceil_mode=True) == 3
    assert values(PF.max_pool1d(x, 2, 2, padding=1, ceil_mode=True)) == [1, 3, 5]
    cip = PF.avg_pool1d(x, 2, 2, padding=1, ceil_mode=True, count_include_pad=True)
    assert values(cip) == [0.5, 2.5, 4.5]  # torch's default
    onnx = PF.avg_pool1d(x, 2, 2, padding=1, ceil_mode=True, count_include_pad=False)
    assert values(onnx) == [1.0, 2.5, 4.5]  # ONNX's default cip=0


@pytest.mark.parametrize(
    ("count_include_pad", "expected"),
    [pytest.param(True, [1, 3, 5, 3], id="cip1"), pytest.param(False, [1.5, 3, 5, 6], id="cip0")],
)
def test_avg_divisor_ignores_the_ceil_overhang(
    count_include_pad: bool, expected: list[float]
) -> None:
    got = PF.avg_pool1d(
        ramp(6), 3, 2, padding=1, ceil_mode=True, count_include_pad=count_include_pad
    )
    assert values(got) == expected


@pytest.mark.parametrize(
    ("count_include_pad", "last"),
    [pytest.param(False, 7.5, id="tf-excludes-pad"), pytest.param(True, 5.0, id="flax-default")],
)
def test_same_average_pool_pad_counting(count_include_pad: bool, last: float) -> None:
    got = values(PF.avg_pool1d(ramp(8), 3, 2, padding="same", count_include_pad=count_include_pad))
    assert len(got) == 4
    assert got[-1] == last


def test_dilated_same_pooling() -> None:
    # k=2, d=2: k_eff=3 -> pads (1, 1). ORT ignores the dilation here (its bug), JAX does not.
    x = ramp(5)
    assert padkit.resolve_padding("same", 2, 1, 2) == ((1, 1),)
    assert values(PF.max_pool1d(x, 2, 1, padding="same", dilation=2)) == [2, 3, 4, 5, 4]
    avg = PF.avg_pool1d(x, 2, 1, padding="same", dilation=2, count_include_pad=False)
    assert values(avg) == [2, 2, 3, 4, 4]


def test_same_lower_max_pool_stride2() -> None:
    # the correct (ORT/JAX) numbers; onnx.reference's wrong ones are its own bug
    assert values(PF.max_pool1d(ramp(7), 3, 2, padding="same_lower")) == [2, 4, 6, 7]
    assert values(PF.max_pool1d(-ramp(8), 3, 2, padding="same_lower")) == [-1, -2, -4, -6]


# ----------------------------------------------------------------------------- transposed


def test_transposed_conv_same() -> None:
    x = torch.tensor([[[1.0, 2.0, 3.0]]], dtype=torch.float64)
    w = ones_kernel(3)
    full = PF.conv_transpose1d(x, w, stride=2)
    assert values(full) == [1, 1, 3, 2, 5, 3, 3]
    assert values(PF.conv_transpose1d(x, w, stride=2, padding="same")) == [1, 1, 3, 2, 5, 3]
    shifted = [1, 3, 2, 5, 3, 3]
    assert values(PF.conv_transpose1d(x, w, stride=2, padding="same_lower")) == shifted
    # the usual torch port: padding=1, output_padding=1
    port = PF.conv_transpose1d(x, w, stride=2, padding=1, output_padding=1)
    assert values(port) == shifted


# (ConvTranspose output_shape without auto_pad) is about the ONNX attribute and
# onnx.reference/onnx2torch handling of it; padkit's output_size follows torch instead.


# -----------------------------------------------------------------------------


def test_asymmetric_max_pool_with_ceil() -> None:
    got = PF.max_pool1d(ramp(4), 2, 2, padding=((0, 1),), ceil_mode=True)
    assert values(got) == [2, 4]  # onnx2torch's extra -inf window is its own bug
    assert values(PF.max_pool1d(ramp(4), 2, 2, padding=((0, 1),))) == [2, 4]


def test_stride1_asymmetric_2d_max_pool() -> None:
    x = -torch.arange(1.0, 10.0, dtype=torch.float64).view(1, 1, 3, 3)
    spec = Padding.from_onnx(pads=[0, 1, 0, 0])  # left = 1 on W
    assert spec.axes == ((0, 0), (1, 0))
    got = PF.max_pool2d(x, 2, 1, padding=spec)
    assert tuple(got.shape[2:]) == (2, 3)
    assert values(got) == [-1, -1, -2, -4, -4, -5]


@pytest.mark.parametrize("count_include_pad", [True, False], ids=["cip1", "cip0"])
def test_ceil_overhang_of_two(count_include_pad: bool) -> None:
    x = ramp(5)
    avg = PF.avg_pool1d(x, 4, 4, ceil_mode=True, count_include_pad=count_include_pad)
    assert values(avg) == [2.5, 5.0]
    assert values(PF.max_pool1d(x, 4, 4, ceil_mode=True)) == [4, 5]


def test_same_pool_kernel_smaller_than_stride() -> None:
    x = ramp(4)
    assert padkit.resolve_padding("same", 1, 2, input_size=4) == ((0, 0),)  # clamped at 0
    assert values(PF.max_pool1d(x, 1, 2, padding="same")) == [1, 3]
    assert values(PF.avg_pool1d(x, 1, 2, padding="same", count_include_pad=False)) == [1, 3]


# ----------------------------------------------------------------------------- Pad


def test_reflect_pad_equal_to_size_is_refused() -> None:
    # ORT and torch refuse; only numpy/onnx.reference reflect repeatedly
    with pytest.raises(PaddingError):
        PF.pad(ramp(3), ((3, 0),), mode="reflect")


def test_wrap_more_than_the_size_is_exact_or_refused() -> None:
    # ORT/numpy: [3, 1, 2, 3, 1, 2, 3]; torch refuses. padkit must not give anything else.
    try:
        got = PF.pad(ramp(3), ((4, 0),), mode="wrap")
    except PaddingError:
        return
    assert values(got) == [3, 1, 2, 3, 1, 2, 3]


@pytest.mark.parametrize(
    ("mode", "pairs", "expected"),
    [
        pytest.param("replicate", ((-1, 2),), [2, 3, 3, 3], id="edge-crop"),
        pytest.param("constant", ((-1, 2),), [2, 3, 0, 0], id="constant-crop"),
        pytest.param("wrap", ((3, 3),), [1, 2, 3, 1, 2, 3, 1, 2, 3], id="wrap-size"),
        pytest.param("edge", ((5, 0),), [1, 1, 1, 1, 1, 1, 2, 3], id="edge-long"),
    ],
)
def test_pad_edge_cases(mode: str, pairs: tuple[tuple[int, int]], expected: list[float]) -> None:
    assert values(PF.pad(ramp(3), pairs, mode=mode)) == expected


# -----------------------------------------------------------------------------


def test_pool_k2_s2_output_sizes() -> None:
    x = torch.ones(1, 1, 8, 8, dtype=torch.float64)
    assert PF.avg_pool2d(x, 2, 2, padding=1).shape[2:] == (5, 5)  # timm's default padding
    assert PF.avg_pool2d(x, 2, 2, padding="valid").shape[2:] == (4, 4)
    assert PF.avg_pool2d(x, 2, 2, padding="same").shape[2:] == (4, 4)


def test_avg_pool_stride1_same_excluding_pad() -> None:
    x = torch.ones(1, 1, 4, 4, dtype=torch.float64)
    pads = ((0, 1), (0, 1))
    excl = PF.avg_pool2d(x, 2, 1, padding=pads, count_include_pad=False)
    assert excl.shape[2:] == (4, 4)
    assert (excl == 1.0).all()
    assert (PF.avg_pool2d(x, 2, 1, padding="same", count_include_pad=False) == 1.0).all()
    # timm's AvgPool2dSame counts the zero pad: last row/col 0.5, corner 0.25
    incl = PF.avg_pool2d(x, 2, 1, padding=pads, count_include_pad=True)[0, 0]
    assert incl[:3, 3].tolist() == [0.5] * 3
    assert incl[3, :3].tolist() == [0.5] * 3
    assert incl[3, 3].item() == 0.25
    assert (incl[:3, :3] == 1.0).all()


@pytest.mark.parametrize("n", [6, 7, 8, 9])
def test_flux_samepad_max_pool_cpu_semantics(n: int) -> None:
    # the cuDNN symmetrisation is Flux's GPU bug; the CPU rule is pad (1, 0), ceil(n/2) out
    spec = Padding.from_flux("SamePad", ndim=2)
    assert spec.resolve(kernel_size=2) == ((1, 0), (1, 0))
    x = torch.randn(1, 1, n, n, dtype=torch.float64)
    got = PF.max_pool2d(x, 2, 2, padding=spec)
    assert got.shape[2:] == (math.ceil(n / 2),) * 2
    # window o covers rows/cols 2o-1 and 2o of the input (the first window only row 0)
    xn = x[0, 0].numpy()
    for i in range(got.shape[2]):
        for j in range(got.shape[3]):
            window = xn[max(2 * i - 1, 0) : 2 * i + 1, max(2 * j - 1, 0) : 2 * j + 1]
            assert got[0, 0, i, j].item() == window.max()


def caffe_pool_2d(x: np.ndarray, k: int, s: int, mode: str) -> np.ndarray:
    """Caffe's pooling_layer.cpp with pad 0: ceil output size, windows clipped to the input."""
    h, w = x.shape
    oh, ow = (math.ceil((h - k) / s) + 1, math.ceil((w - k) / s) + 1)
    out = np.empty((oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = x[i * s : min(i * s + k, h), j * s : min(j * s + k, w)]
            out[i, j] = win.max() if mode == "max" else win.sum() / win.size
    return out


def test_googlenet_pool1_caffe_ceil() -> None:
    spec = Padding.from_caffe(0)
    assert spec.resolve(kernel_size=3, stride=2, input_size=(112, 112)) == ((0, 1), (0, 1))
    x = torch.randn(1, 1, 112, 112, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    xn = x[0, 0].numpy()
    mx = PF.max_pool2d(x, 3, 2, padding=spec)
    assert mx.shape[2:] == (56, 56)
    np.testing.assert_array_equal(mx[0, 0].numpy(), caffe_pool_2d(xn, 3, 2, "max"))
    avg = PF.avg_pool2d(x, 3, 2, padding=spec)
    np.testing.assert_allclose(avg[0, 0].numpy(), caffe_pool_2d(xn, 3, 2, "ave"), rtol=1e-12)
    # the ONNX forms: tight [0,0,1,1] and caffe2's [0,0,2,2] give 56 and Caffe's max in floor
    for pads in ([0, 0, 1, 1], [0, 0, 2, 2]):
        floor = PF.max_pool2d(x, 3, 2, padding=Padding.from_onnx(pads=pads))
        assert torch.equal(floor, mx)
        cip0 = PF.avg_pool2d(x, 3, 2, padding=Padding.from_onnx(pads=pads), count_include_pad=False)
        np.testing.assert_allclose(cip0[0, 0].numpy(), caffe_pool_2d(xn, 3, 2, "ave"), rtol=1e-12)


def test_tiny_yolov2_final_max_pool_keeps_13x13() -> None:
    x = torch.randn(1, 2, 13, 13, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    got = PF.max_pool2d(x, 2, 1, padding=((0, 1), (0, 1)))
    assert got.shape[2:] == (13, 13)
    xn = x[0].numpy()
    for c in range(2):
        for i in range(13):
            for j in range(13):
                assert got[0, c, i, j].item() == xn[c, i : i + 2, j : j + 2].max()
