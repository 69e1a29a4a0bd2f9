"""Causal padding: 1-d TCN convs and N-d video convs, both strided conventions, pools.

Oracles, none of which calls padkit: an explicit ``F.pad`` followed by the unpadded torch
op; a float64 direct sum over the taps that each output is defined to see (Keras/TF
``causal``: output ``t`` ends at input ``t*s``; ``causal_block``: at ``(t+1)*s - 1``); and the
Jacobian's support, which is the causality property itself (output ``t`` depends on exactly
the inputs its window covers, never on a later one).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import padkit.functional as PF
import padkit.nn as pn
from padkit import Padding, PaddingError, resolve_padding

torch.set_num_threads(1)

SETTINGS = settings(max_examples=40, deadline=None)


def last_input(rule: str, t: int, k_eff: int, s: int) -> int:
    """The last input index output ``t`` sees, by the documented definition of each rule."""
    return t * s if rule == "causal" else (t + 1) * s - 1


def direct_conv1d(
    x: np.ndarray, w: np.ndarray, b: np.ndarray, s: int, d: int, rule: str
) -> np.ndarray:
    """float64 direct sum: output t covers inputs last-k_eff+1 .. last, zeros before 0."""
    n_batch, _, n = x.shape
    c_out, _, k = w.shape
    k_eff = d * (k - 1) + 1
    count = math.ceil(n / s) if rule == "causal" else n // s
    y = np.zeros((n_batch, c_out, count))
    for t in range(count):
        start = last_input(rule, t, k_eff, s) - k_eff + 1
        for j in range(k):
            i = start + j * d
            if 0 <= i < n:
                y[:, :, t] += np.einsum("bc,oc->bo", x[:, :, i], w[:, :, j])
    return y + b[None, :, None]


# ----------------------------------------------------------------------------- 1-d (TCN)


@SETTINGS
@given(
    k=st.integers(1, 5),
    s=st.integers(1, 4),
    d=st.integers(1, 3),
    n=st.integers(1, 23),
    c_in=st.integers(1, 3),
    c_out=st.integers(1, 3),
    rule=st.sampled_from(["causal", "causal_block"]),
)
def test_conv1d_causal_matches_pad_then_valid_and_direct_sum(
    k: int, s: int, d: int, n: int, c_in: int, c_out: int, rule: str
) -> None:
    k_eff = d * (k - 1) + 1
    x = torch.randn(2, c_in, n, dtype=torch.float64)
    if rule == "causal_block" and k_eff < s:
        with pytest.raises(PaddingError, match="causal_block"):
            pn.Conv1d(c_in, c_out, k, stride=s, dilation=d, padding=rule)
        return
    conv = pn.Conv1d(c_in, c_out, k, stride=s, dilation=d, padding=rule, dtype=torch.float64)
    lo = k_eff - 1 if rule == "causal" else k_eff - s
    if n + lo < k_eff:  # causal_block, sequence shorter than one stride block
        with pytest.raises(PaddingError, match="smaller than the effective kernel"):
            conv(x)
        return
    got = conv(x)
    ref = F.conv1d(F.pad(x, (lo, 0)), conv.weight, conv.bias, s, 0, d)
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-12)
    direct = direct_conv1d(
        x.numpy(), conv.weight.detach().numpy(), conv.bias.detach().numpy(), s, d, rule
    )
    np.testing.assert_allclose(got.detach().numpy(), direct, rtol=1e-10, atol=1e-10)
    # Keras output size for causal: floor((n - 1) / s) + 1 == ceil(n / s); block: floor(n / s)
    assert got.shape[-1] == (math.ceil(n / s) if rule == "causal" else n // s)
    assert conv.resolved_padding() == ((lo, 0),)


@SETTINGS
@given(
    k=st.integers(1, 4),
    s=st.integers(1, 3),
    d=st.integers(1, 3),
    n=st.integers(4, 14),
    rule=st.sampled_from(["causal", "causal_block"]),
)
def test_causality_is_the_jacobian_support(k: int, s: int, d: int, n: int, rule: str) -> None:
    """Output t depends on exactly the taps of its window: never on a later input."""
    k_eff = d * (k - 1) + 1
    if rule == "causal_block" and k_eff < s:
        return
    w = torch.rand(1, 1, k, dtype=torch.float64) + 0.5  # no zero tap
    jac = torch.autograd.functional.jacobian(
        lambda x: PF.conv1d(x, w, stride=s, dilation=d, padding=rule), torch.rand(1, 1, n).double()
    )[0, 0, :, 0, 0, :]
    for t in range(jac.shape[0]):
        last = last_input(rule, t, k_eff, s)
        taps = {last - k_eff + 1 + j * d for j in range(k)} & set(range(n))
        support = {int(i) for i in torch.nonzero(jac[t]).flatten()}
        assert support == taps, (t, support, taps)
        assert max(support) == min(last, n - 1)


def test_strided_conventions_side_by_side() -> None:
    """k=4, s=2: causal ends output t at input 2t, causal_block at 2t+1 (its stride block)."""
    x = torch.arange(1.0, 9.0).view(1, 1, 8)
    w = torch.zeros(1, 1, 4)
    w[..., -1] = 1.0  # picks the last input of each window
    assert PF.conv1d(x, w, stride=2, padding="causal").flatten().tolist() == [1, 3, 5, 7]
    assert PF.conv1d(x, w, stride=2, padding="causal_block").flatten().tolist() == [2, 4, 6, 8]
    assert resolve_padding("causal", 4, 2) == ((3, 0),)
    assert resolve_padding("causal_block", 4, 2) == ((2, 0),)
    # equal at stride 1
    assert resolve_padding("causal", 3, 1, 2) == resolve_padding("causal_block", 3, 1, 2)


def test_block_convention_equals_axlearn_pairs_but_for_the_partial_last_block() -> None:
    """(k_eff - s, s - 1) (axlearn's strided CAUSAL) has causal_block's windows plus one
    zero-padded window over a partial last block."""
    x = torch.randn(2, 3, 11)
    conv = pn.Conv1d(3, 4, 5, stride=3, padding="causal_block")
    explicit = PF.conv1d(x, conv.weight, conv.bias, stride=3, padding=((5 - 3, 3 - 1),))
    block = conv(x)
    assert block.shape[-1] == 11 // 3 and explicit.shape[-1] == math.ceil(11 / 3)
    torch.testing.assert_close(explicit[..., : block.shape[-1]], block, rtol=0, atol=0)


def test_causal_replicate_first_sample_1d() -> None:
    x = torch.randn(1, 2, 9)
    conv = pn.Conv1d(2, 2, 3, dilation=2, padding="causal", padding_mode="replicate")
    ref = F.conv1d(F.pad(x, (4, 0), mode="replicate"), conv.weight, conv.bias, dilation=2)
    torch.testing.assert_close(conv(x), ref, rtol=0, atol=0)


@pytest.mark.parametrize("rule", ["causal", "causal_block"])
def test_causal_pools_1d(rule: str) -> None:
    x = torch.randn(2, 3, 13)
    k, s = 4, 2
    lo = k - 1 if rule == "causal" else k - s
    got = pn.MaxPool1d(k, s, padding=rule)(x)
    ref = F.max_pool1d(F.pad(x, (lo, 0), value=-math.inf), k, s)
    torch.testing.assert_close(got, ref, rtol=0, atol=0)
    avg = pn.AvgPool1d(k, s, padding=rule, count_include_pad=False)(x)
    ones = F.pad(torch.ones(1, 1, 13), (lo, 0))
    ref_avg = F.avg_pool1d(F.pad(x, (lo, 0)), k, s) * k
    ref_avg = ref_avg / (F.avg_pool1d(ones, k, s) * k)
    torch.testing.assert_close(avg, ref_avg)


# ----------------------------------------------------------------------------- N-d (video)


def tf_same(n: int, k_eff: int, s: int) -> tuple[int, int]:
    out = -(-n // s)
    total = max((out - 1) * s + k_eff - n, 0)
    return total // 2, total - total // 2


@settings(max_examples=25, deadline=None)
@given(
    t=st.integers(2, 7),
    h=st.integers(3, 8),
    k=st.sampled_from([(3, 3, 3), (2, 3, 1), (4, 1, 3)]),
    s=st.sampled_from([(1, 1, 1), (1, 2, 2), (2, 2, 1)]),
    d=st.sampled_from([(1, 1, 1), (2, 1, 2)]),
    time_mode=st.sampled_from(["zeros", "replicate"]),
)
def test_conv3d_causal_time_same_space(
    t: int,
    h: int,
    k: tuple[int, int, int],
    s: tuple[int, int, int],
    d: tuple[int, int, int],
    time_mode: str,
) -> None:
    x = torch.randn(1, 2, t, h, h + 1, dtype=torch.float64)
    conv = pn.Conv3d(
        2,
        3,
        k,
        stride=s,
        dilation=d,
        padding=("causal", "same", "same"),
        padding_mode=(time_mode, "zeros", "zeros"),
        dtype=torch.float64,
    )
    k_eff = [dd * (kk - 1) + 1 for kk, dd in zip(k, d)]
    ph = tf_same(h, k_eff[1], s[1])
    pw = tf_same(h + 1, k_eff[2], s[2])
    xp = F.pad(
        x,
        (0, 0, 0, 0, k_eff[0] - 1, 0),
        mode="replicate" if time_mode == "replicate" else "constant",
    )
    xp = F.pad(xp, (*pw, *ph))
    ref = F.conv3d(xp, conv.weight, conv.bias, s, 0, d)
    torch.testing.assert_close(conv(x), ref, rtol=0, atol=1e-12)
    assert conv(x).shape[2] == -(-t // s[0])


def test_conv3d_causal_is_causal_in_time_only() -> None:
    conv = pn.Conv3d(
        2, 2, 3, stride=(2, 1, 1), padding=("causal", "same", "same"), dtype=torch.float64
    )
    x = torch.randn(1, 2, 9, 5, 5, dtype=torch.float64)
    base = conv(x)
    for j in range(9):
        y = x.clone()
        y[:, :, j, 2, 2] += 1.0
        changed = (conv(y) - base).abs().amax(dim=(0, 1, 3, 4)) > 0
        first = next(i for i, c in enumerate(changed.tolist()) if c)
        assert first == -(-j // 2)  # the first output whose window end 2t reaches j
        assert changed[first:].any()


def test_conv2d_causal_on_first_axis_and_replicate_first_frame_mixed_modes() -> None:
    """(T, F) spectrogram: causal in time (replicate the first frame), reflect in frequency."""
    x = torch.randn(2, 3, 6, 8)
    conv = pn.Conv2d(
        3, 4, (3, 3), padding=("causal", "same"), padding_mode=("replicate", "reflect")
    )
    xp = F.pad(x, (0, 0, 2, 0), mode="replicate")
    xp = F.pad(xp, (1, 1, 0, 0), mode="reflect")
    torch.testing.assert_close(conv(x), F.conv2d(xp, conv.weight, conv.bias), rtol=0, atol=0)


def test_causal_block_3d_video_vae_downsample() -> None:
    x = torch.randn(1, 2, 8, 6, 6)
    conv = pn.Conv3d(2, 2, (3, 3, 3), stride=2, padding=("causal_block", "same", "same"))
    xp = F.pad(x, (0, 1, 0, 1, 1, 0))
    torch.testing.assert_close(conv(x), F.conv3d(xp, conv.weight, conv.bias, 2))
    assert conv(x).shape[2:] == (4, 3, 3)


def test_padding_spec_for_video() -> None:
    spec = Padding.parse(("causal", "same", "same"))
    assert spec.resolve((3, 3, 3), (1, 2, 2), (2, 1, 1), (5, 8, 8)) == ((4, 0), (0, 1), (0, 1))
    assert Padding.parse("causal").to_torch_pad(kernel_size=(3, 5), dilation=(2, 1)) == (
        4,
        0,
        4,
        0,
    )


# ----------------------------------------------------------------------------- transposed


def direct_conv_transpose1d(
    x: np.ndarray, w: np.ndarray, b: np.ndarray, s: int, d: int
) -> np.ndarray:
    """float64 sample-by-sample transposed conv: input i adds w[:, :, m] at output i*s + m*d;
    the first ``n*s`` outputs, the ones a causal upsampler of ``n`` inputs emits."""
    n_batch, _, n = x.shape
    _, c_out, k = w.shape
    y = np.zeros((n_batch, c_out, n * s))
    for i in range(n):
        for m in range(k):
            j = i * s + m * d
            if j < n * s:
                y[:, :, j] += np.einsum("bc,co->bo", x[:, :, i], w[:, :, m])
    return y + b[None, :, None]


@SETTINGS
@given(
    k=st.integers(1, 6),
    s=st.integers(1, 4),
    d=st.integers(1, 3),
    n=st.integers(1, 12),
    rule=st.sampled_from(["causal", "causal_block"]),
)
def test_conv_transpose1d_causal_is_sample_by_sample_causal(
    k: int, s: int, d: int, n: int, rule: str
) -> None:
    """A causal upsampler: n*s outputs, output j reads inputs up to j // s and no later one."""
    up = pn.ConvTranspose1d(2, 3, k, stride=s, dilation=d, padding=rule, dtype=torch.float64)
    x = torch.randn(2, 2, n, dtype=torch.float64)
    got = up(x)
    assert got.shape[-1] == n * s
    ref = direct_conv_transpose1d(
        x.numpy(), up.weight.detach().numpy(), up.bias.detach().numpy(), s, d
    )
    np.testing.assert_allclose(got.detach().numpy(), ref, rtol=1e-10, atol=1e-10)
    # the Jacobian: output j depends on input i only if i <= j // s
    w = torch.rand(1, 1, k, dtype=torch.float64) + 0.5
    jac = torch.autograd.functional.jacobian(
        lambda v: PF.conv_transpose1d(v, w, stride=s, dilation=d, padding=rule),
        torch.rand(1, 1, n, dtype=torch.float64),
    )[0, 0, :, 0, 0, :]
    for j in range(jac.shape[0]):
        support = {int(i) for i in torch.nonzero(jac[j]).flatten()}
        assert all(i <= j // s for i in support), (j, support)
        # and it reads exactly the inputs whose taps land on j
        taps = {(j - m * d) // s for m in range(k) if (j - m * d) % s == 0}
        assert support == taps & set(range(n)), (j, support, taps)


def test_conv_transpose_causal_k4_s2_reads_no_future_frame() -> None:
    """The codec upsampler k=4, s=2: 2L outputs, output j's last input is j // 2."""
    x = torch.zeros(1, 1, 5)
    up = pn.ConvTranspose1d(1, 1, 4, stride=2, padding="causal", bias=False)
    torch.nn.init.ones_(up.weight)
    for i in range(5):
        x.zero_()
        x[..., i] = 1.0
        hit = torch.nonzero(up(x).flatten()).flatten().tolist()
        assert min(hit) == 2 * i  # input i first reaches output 2i (its own block)
    assert up(x).shape[-1] == 10
    assert up.resolved_crops((5,)) == ((0, 2),)
    assert pn.ConvTranspose1d(1, 1, 4, stride=2, padding="causal_block").resolved_crops((5,)) == (
        (0, 2),
    )


@pytest.mark.parametrize("nd", [2, 3])
def test_conv_transpose_nd_causal_time_same_space(nd: int) -> None:
    """Causal on the first (time) axis, TF 'same' on the others: explicit full output + crops."""
    cls = pn.ConvTranspose2d if nd == 2 else pn.ConvTranspose3d
    full = F.conv_transpose2d if nd == 2 else F.conv_transpose3d
    k, s = (4,) + (3,) * (nd - 1), (2,) * nd
    up = cls(2, 2, k, stride=s, padding=("causal",) + ("same",) * (nd - 1), dtype=torch.float64)
    x = torch.randn(1, 2, *([5] * nd), dtype=torch.float64)
    y = full(x, up.weight, up.bias, s)
    # time: crop k_eff - s = 2 at the end; space (k=3, s=2): crop (0, 1)
    y = y[:, :, : 5 * 2]
    for ax in range(1, nd):
        y = y.narrow(2 + ax, 0, 5 * 2)
    torch.testing.assert_close(up(x), y, rtol=0, atol=1e-12)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_conv_transpose_causal_exports_to_onnx(tmp_path: object) -> None:
    """The exported causal crop runs in onnxruntime with the same numbers (k=4, s=2)."""
    import onnxruntime as ort

    up = pn.ConvTranspose1d(2, 3, 4, stride=2, padding="causal").eval()
    x = torch.randn(1, 2, 5)
    path = str(tmp_path) + "/up.onnx"  # type: ignore[operator]
    torch.onnx.export(up, (x,), path, dynamo=True, verbose=False)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    np.testing.assert_allclose(got, up(x).detach().numpy(), rtol=1e-5, atol=1e-6)
