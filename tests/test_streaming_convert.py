"""padkit.streaming.convert_causal: third-party causal models, rewritten, then streamed.

References, none computed by padkit: the original model's own output (the converted copy
must reproduce it), and the converted model's full-sequence output for the streamed run
(chunked by hypothesis, one-sample chunks included).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st
from pytorch_tcn import TCN
from torch import Tensor, nn
from torch.nn.utils import parametrize

import padkit.nn as pn
from padkit import PaddingError
from padkit.streaming import ConvertedConv1d, StreamingModule, convert_causal
from padkit.surgery import SurgeryError

torch.set_num_threads(1)


def chunkings(n: int, max_cuts: int = 8) -> st.SearchStrategy[list[int]]:
    cuts = st.lists(st.integers(0, n), max_size=max_cuts)
    return cuts.map(lambda c: [b - a for a, b in zip([0, *sorted(c)], [*sorted(c), n])])


def streamed(model: nn.Module, x: Tensor, sizes: Sequence[int], axis: int = -1) -> Tensor:
    sm = StreamingModule(model, axis=axis)
    state = sm.init_state(example=x.narrow(axis, 0, 1))
    outs = []
    with torch.no_grad():
        for chunk in torch.split(x, list(sizes), dim=axis):
            y, state = sm.step(chunk, state)
            outs.append(y)
    return torch.cat(outs, dim=axis)


# ----------------------------------------------------------------------------- pytorch-tcn


def test_pytorch_tcn_is_refused_as_is_and_streams_after_conversion() -> None:
    torch.manual_seed(0)
    tcn = TCN(3, [8, 8, 16], kernel_size=3, dilations=[1, 2, 4], causal=True).eval()
    x = torch.randn(2, 3, 37)
    with pytest.raises(PaddingError, match=r"overrides forward.*convert_causal"):
        StreamingModule(tcn).init_state(example=x[..., :1])
    new, report = convert_causal(tcn, x)
    assert len(report.changes) == 6 and "(4, 0)" in str(report)
    # weight norm kept as a parametrization, sharing nothing with the original
    conv = new.get_submodule("network.1.conv1")
    assert isinstance(conv, ConvertedConv1d) and parametrize.is_parametrized(conv, "weight")
    with torch.no_grad():
        torch.testing.assert_close(new(x), tcn(x), rtol=0, atol=0)
    for sizes in ([1] * 37, [5, 0, 3, 29], [37]):
        torch.testing.assert_close(streamed(new, x, sizes), tcn(x).detach(), rtol=1e-5, atol=1e-6)
    # the original still pads for itself; the copy trains (gradients reach g and v)
    assert isinstance(tcn.network[1].conv1.padder, nn.Module)
    new.train()
    new(x).sum().backward()
    g = new.get_submodule("network.1.conv1").parametrizations.weight.original0
    assert g.grad is not None and g.grad.abs().sum() > 0


@settings(max_examples=6, deadline=None)
@given(sizes=chunkings(30, max_cuts=10))
def test_pytorch_tcn_nlc_skip_connections_any_chunking(sizes: list[int]) -> None:
    """(N, T, C) input, skip connections, batch norm: streamed on axis 1."""
    torch.manual_seed(1)
    tcn = TCN(
        2,
        [6, 6],
        kernel_size=4,
        dilations=[1, 3],
        causal=True,
        use_skip_connections=True,
        use_norm="batch_norm",
        input_shape="NLC",
    ).eval()
    x = torch.randn(1, 30, 2)
    new, _ = convert_causal(tcn, x, input_axis=1)
    with torch.no_grad():
        full = tcn(x)
    torch.testing.assert_close(streamed(new, x, sizes, axis=1), full, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- locuslab


class Chomp1d(nn.Module):
    def __init__(self, chomp_size: int) -> None:
        super().__init__()
        self.chomp_size = chomp_size

    def forward(self, x: Tensor) -> Tensor:
        return x[:, :, : -self.chomp_size].contiguous()


class LocuslabBlock(nn.Module):
    """The classic TCN block: symmetric padding (k-1)*d, then Chomp1d; old-style weight norm."""

    def __init__(self, c_in: int, c_out: int, k: int, d: int) -> None:
        super().__init__()
        p = (k - 1) * d
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.conv1 = nn.utils.weight_norm(nn.Conv1d(c_in, c_out, k, padding=p, dilation=d))
            self.conv2 = nn.utils.weight_norm(nn.Conv1d(c_out, c_out, k, padding=p, dilation=d))
        self.chomp1, self.chomp2 = Chomp1d(p), Chomp1d(p)
        self.net = nn.Sequential(
            self.conv1,
            self.chomp1,
            nn.ReLU(),
            nn.Dropout(0.2),
            self.conv2,
            self.chomp2,
            nn.ReLU(),
            nn.Dropout(0.2),
        )
        self.downsample = nn.Conv1d(c_in, c_out, 1) if c_in != c_out else None
        self.relu = nn.ReLU()

    def forward(self, x: Tensor) -> Tensor:
        res = x if self.downsample is None else self.downsample(x)
        return self.relu(self.net(x) + res)


def locuslab_tcn() -> nn.Module:
    return nn.Sequential(
        LocuslabBlock(2, 8, 3, 1), LocuslabBlock(8, 8, 3, 2), LocuslabBlock(8, 4, 2, 4)
    ).eval()


@settings(max_examples=8, deadline=None)
@given(sizes=chunkings(33, max_cuts=10))
def test_locuslab_tcn_converts_and_streams(sizes: list[int]) -> None:
    torch.manual_seed(2)
    tcn = locuslab_tcn()
    x = torch.randn(2, 2, 33)
    new, report = convert_causal(tcn, x)
    text = str(report)
    assert "weight_norm" in text and "Chomp1d -> Identity" in text
    assert new[1].conv1 is new[1].net[0]  # shared registrations stay shared
    assert new[1].conv1.resolved_padding() == ((4, 0),)
    assert isinstance(new[1].chomp1, nn.Identity)
    with torch.no_grad():
        full = tcn(x)
    torch.testing.assert_close(new(x), full, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(streamed(new, x, sizes), full, rtol=1e-5, atol=1e-6)


def test_chomp_after_a_strided_conv_moves_into_the_right_pad() -> None:
    torch.manual_seed(3)
    net = nn.Sequential(nn.Conv1d(1, 2, 4, stride=2, padding=3), Chomp1d(1)).eval()
    x = torch.randn(1, 1, 20)
    new, _ = convert_causal(net, x)
    assert new[0].resolved_padding() == ((3, 1),)  # (3, 3) minus one output of stride 2
    torch.testing.assert_close(new(x), net(x), rtol=0, atol=1e-6)


# ----------------------------------------------------------------------------- F.pad / pad modules


class CausalConv1d(nn.Conv1d):
    """WaveNet style: a conv subclass that pads with F.pad in its forward."""

    def __init__(self, c_in: int, c_out: int, k: int, dilation: int = 1) -> None:
        super().__init__(c_in, c_out, k, dilation=dilation)
        self.left = (k - 1) * dilation

    def forward(self, x: Tensor) -> Tensor:  # type: ignore[override]
        return super().forward(F.pad(x, (self.left, 0)))


class CausalPad(nn.Module):
    def __init__(self, left: int) -> None:
        super().__init__()
        self.left = left

    def forward(self, x: Tensor) -> Tensor:
        return F.pad(x, (self.left, 0))


class GatedBlock(nn.Module):
    """One pad module feeds the filter and the gate convs (not a Sequential)."""

    def __init__(self, c: int, k: int, d: int) -> None:
        super().__init__()
        self.pad = CausalPad((k - 1) * d)
        self.filter = nn.Conv1d(c, c, k, dilation=d)
        self.gate = nn.Conv1d(c, c, k, dilation=d)
        self.res = nn.Conv1d(c, c, 1)

    def forward(self, x: Tensor) -> Tensor:
        h = self.pad(x)
        return x + self.res(torch.tanh(self.filter(h)) * torch.sigmoid(self.gate(h)))


def wavenet() -> nn.Module:
    return nn.Sequential(
        CausalConv1d(1, 6, 2),
        GatedBlock(6, 2, 2),
        GatedBlock(6, 3, 4),
        nn.ConstantPad1d((2, 0), 0.0),
        nn.Conv1d(6, 3, 3),
        nn.ReLU(),
        nn.ZeroPad1d((1, 0)),
        nn.Conv1d(3, 1, 2),
    ).eval()


@settings(max_examples=8, deadline=None)
@given(sizes=chunkings(40, max_cuts=12))
def test_wavenet_with_f_pad_modules_converts_and_streams(sizes: list[int]) -> None:
    torch.manual_seed(4)
    net = wavenet()
    x = torch.randn(2, 1, 40)
    with pytest.raises(PaddingError):
        StreamingModule(net).init_state(example=x[..., :1])
    new, report = convert_causal(net, x)
    assert isinstance(new[0], ConvertedConv1d) and new[0].resolved_padding() == ((1, 0),)
    assert new[2].filter.resolved_padding() == ((8, 0),) == new[2].gate.resolved_padding()
    assert isinstance(new[2].pad, nn.Identity) and isinstance(new[3], nn.Identity)
    assert new[4].resolved_padding() == ((2, 0),) and new[7].resolved_padding() == ((1, 0),)
    assert sum(c.what == ("removed",) for c in report.changes) == 4
    with torch.no_grad():
        full = net(x)
    torch.testing.assert_close(new(x), full, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(streamed(new, x, sizes), full, rtol=1e-5, atol=1e-6)


class InlineGated(nn.Module):
    """F.pad written in the block's forward, feeding the filter and the gate convs."""

    def __init__(self, c: int, k: int, d: int) -> None:
        super().__init__()
        self.left = (k - 1) * d
        self.filter = nn.Conv1d(c, c, k, dilation=d)
        self.gate = nn.Conv1d(c, c, k, dilation=d)
        self.res = nn.Conv1d(c, c, 1)

    def forward(self, x: Tensor) -> Tensor:
        h = F.pad(x, (self.left, 0))
        return x + self.res(torch.tanh(self.filter(h)) * torch.sigmoid(self.gate(h)))


@settings(max_examples=6, deadline=None)
@given(sizes=chunkings(30, max_cuts=10))
def test_inline_f_pad_in_a_forward_is_moved_into_the_convs(sizes: list[int]) -> None:
    torch.manual_seed(6)
    net = nn.Sequential(nn.Conv1d(1, 4, 1), InlineGated(4, 3, 2), InlineGated(4, 2, 4)).eval()
    x = torch.randn(2, 1, 30)
    new, report = convert_causal(net, x)
    assert new[1].filter.resolved_padding() == ((4, 0),) == new[1].gate.resolved_padding()
    assert new[2].gate.resolved_padding() == ((4, 0),)
    assert "InlineGated without its pad call 0" in str(report)
    with torch.no_grad():
        full = net(x)
    torch.testing.assert_close(new(x), full, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(streamed(new, x, sizes), full, rtol=1e-5, atol=1e-6)
    # the root itself may be such a block
    root, _ = convert_causal(InlineGated(1, 3, 1).eval(), torch.zeros(1, 1, 9))
    assert root.filter.resolved_padding() == ((2, 0),)


class TimeMajorConvModule(nn.Module):
    """A causal conformer-style conv module on ``(N, T, D)``: a pointwise conv and a GLU, then
    the causal pad written in forward before the depthwise conv, a norm over channels."""

    def __init__(self, d: int, k: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.pw1 = nn.Conv1d(d, 2 * d, 1)
        self.left = k - 1
        self.dw = nn.Conv1d(d, d, k, groups=d)
        self.norm = nn.LayerNorm(d)
        self.pw2 = nn.Conv1d(d, d, 1)

    def forward(self, x: Tensor) -> Tensor:
        y = F.glu(self.pw1(self.ln(x).transpose(1, 2)), dim=1)
        y = self.dw(F.pad(y, (self.left, 0)))
        y = self.norm(y.transpose(1, 2)).transpose(1, 2)
        return x + self.pw2(F.silu(y)).transpose(1, 2)


def test_a_pad_written_between_two_convs_is_named_in_the_refusal_and_converted() -> None:
    """The refusal names the module whose forward pads time between two streamed convs (not
    the first module whose values differ, a norm after them) with the lengths the full run
    gave them, and the conversion for an (N, T, D) input; after it the model streams."""
    torch.manual_seed(11)
    block = TimeMajorConvModule(8, 5)
    net = nn.Sequential(nn.Linear(8, 8), nn.Sequential(block), TimeMajorConvModule(8, 3))
    net = net.double().eval()
    x = torch.randn(2, 40, 8, dtype=torch.float64)
    sm = StreamingModule(net, axis=1)
    with pytest.raises(PaddingError) as err:
        sm.step(x[:, :1], sm.init_state(example=x[:, :1]))
    text = str(err.value)
    assert "The forward of TimeMajorConvModule '1.0' gives Conv1d '1.0.dw'" in text
    assert "where Conv1d '1.0.pw1' before it returned" in text
    assert "convert_causal(model, example, input_axis=1)" in text
    assert "computes over time in code" not in text  # the found reason only
    new, _ = convert_causal(net, x, input_axis=1)
    with torch.no_grad():
        full = net(x)
    for sizes in ([1] * 40, [7] * 5 + [5], [3, 0, 29, 8]):
        torch.testing.assert_close(streamed(new, x, sizes, axis=1), full, rtol=1e-9, atol=1e-12)


class PadsItself(nn.Conv1d):
    """A causal conv written as a subclass: ``F.pad`` of ``k_eff - stride`` on the left, then
    torch's forward (a right pad shorter than the stride would give the same outputs at
    most lengths)."""

    def forward(self, x: Tensor) -> Tensor:
        lo = self.dilation[0] * (self.kernel_size[0] - 1) + 1 - self.stride[0]
        return super().forward(F.pad(x, (lo, 0)))


class CropsItself(nn.ConvTranspose1d):
    """A causal transposed conv written as a subclass: torch's forward, then its last
    ``k - stride`` outputs cropped."""

    def forward(self, x: Tensor) -> Tensor:
        y = super().forward(x)
        return y[..., : y.shape[-1] - (self.kernel_size[0] - self.stride[0])]


class EvenCrop(nn.ConvTranspose1d):
    def forward(self, x: Tensor) -> Tensor:
        y = super().forward(x)
        return y[..., : y.shape[-1] // 4 * 4]  # a crop that depends on the length


def test_strided_and_transposed_conv_subclasses_that_pad_or_crop_themselves() -> None:
    """A codec written with conv subclasses: a stride-4 conv that pads (4, 0) in its forward
    (the probes alone also fit right pads 1-2: the conversion runs the layer at more
    lengths) and transposed convs that crop their own output. The copy equals the original
    at every length from 60 to 67 and streams exactly; a crop that depends on the length
    is left, with the reason."""
    torch.manual_seed(12)
    enc = nn.Sequential(PadsItself(1, 4, 7), nn.ELU(), PadsItself(4, 8, 8, stride=4), nn.ELU())
    dec = nn.Sequential(CropsItself(8, 4, 8, stride=4), nn.ELU(), PadsItself(4, 1, 7))
    net = nn.Sequential(enc, dec).double().eval()
    x = torch.randn(2, 1, 64, dtype=torch.float64)
    new, report = convert_causal(net, x)
    assert new[0][2].resolved_padding() == ((4, 0),)
    assert "CropsItself (crops (0, 4) in its forward)" in str(report)
    with torch.no_grad():
        for n in range(60, 68):
            xn = torch.randn(2, 1, n, dtype=torch.float64)
            torch.testing.assert_close(new(xn), net(xn), rtol=0, atol=1e-12)
        full = net(x)
    for sizes in ([1] * 64, [7] * 9 + [1], [3, 0, 41, 20]):
        torch.testing.assert_close(streamed(new, x, sizes), full, rtol=0, atol=1e-12)
    odd = nn.Sequential(nn.Conv1d(1, 4, 1), EvenCrop(4, 2, 4, stride=2)).double().eval()
    _, report = convert_causal(odd, torch.randn(1, 1, 21, dtype=torch.float64))
    assert "its forward is not the transposed conv and a crop of its output" in str(report)
    # parallel_wavegan's causal upsampler: a replicate pad of a transposed conv's input
    padded_in = nn.Sequential(nn.ReplicationPad1d((1, 0)), nn.ConvTranspose1d(4, 4, 4, 2))
    _, report = convert_causal(padded_in.double().eval(), torch.randn(1, 4, 9).double())
    assert "it pads the input of the transposed conv ConvTranspose1d '1'" in str(report)


def test_pad_into_a_2d_conv_and_a_pad_used_twice_is_caught() -> None:
    """A ZeroPad2d before a spectrogram conv merges per axis; a pad whose output also feeds
    a residual add cannot be removed, and the final check says so."""
    torch.manual_seed(5)
    net = nn.Sequential(nn.ZeroPad2d((2, 0, 1, 1)), nn.Conv2d(1, 2, 3)).eval()
    x = torch.randn(1, 1, 5, 9)
    new, _ = convert_causal(net, x)
    assert new[1].resolved_padding() == ((1, 1), (2, 0))
    torch.testing.assert_close(new(x), net(x), rtol=0, atol=1e-6)

    class Leaky(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.pad = nn.ConstantPad1d((2, 0), 0.0)
            self.conv = nn.Conv1d(1, 1, 3)

        def forward(self, x: Tensor) -> Tensor:
            h = self.pad(x)
            return self.conv(h) + h[..., 2:]

    new, report = convert_causal(Leaky(), torch.randn(1, 1, 8))
    assert not report.changes and isinstance(new.pad, nn.ConstantPad1d)
    assert "also read by getitem in <model>" in report.skipped[0].reason


def test_a_pad_rule_the_probes_cannot_tell_is_caught_at_other_lengths() -> None:
    """A right pad of 1 where the length leaves 4 over a multiple of 5, else none: the two
    probes (the example's length, 64, and 69) both see 1, so the pad moves into the conv as
    (2, 1); at 65 the original pads nothing. The copy is checked at lengths the probes did
    not use, and the conversion raises naming them instead of returning a copy that is
    wrong there."""

    class Odd(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv1d(1, 1, 3)

        def forward(self, x: Tensor) -> Tensor:
            extra = 1 if x.shape[-1] % 5 == 4 else 0
            return self.conv(F.pad(x, (2, extra)))

    torch.manual_seed(0)
    with pytest.raises(SurgeryError, match=r"not at other lengths: 65 \(different outputs\)"):
        convert_causal(Odd().eval(), torch.randn(1, 1, 64))


def test_converted_layer_refuses_the_originals_streaming_options() -> None:
    conv = ConvertedConv1d(1, 1, 3, padding="causal")
    with pytest.raises(PaddingError, match="computes the conv only"):
        conv(torch.ones(1, 1, 4), inference=True)


def test_nothing_to_convert_and_bad_arguments() -> None:
    net = nn.Sequential(pn.Conv1d(1, 1, 3, padding="causal"))
    new, report = convert_causal(net, torch.zeros(1, 1, 6))
    assert not report.changes and "nothing to convert" in str(report)
    assert new is not net
    with pytest.raises(TypeError, match="model must be"):
        convert_causal("net", torch.zeros(1, 1, 6))  # type: ignore[arg-type]
    with pytest.raises(PaddingError, match="example must be"):
        convert_causal(net, torch.zeros(6))
    with pytest.raises(PaddingError, match="input_axis=5"):
        convert_causal(net, torch.zeros(1, 1, 6), input_axis=5)


def test_non_causal_pytorch_tcn_streams_with_lookahead_after_conversion() -> None:
    """TCN(causal=False) pads both sides; converted, it streams with its reported delay."""
    torch.manual_seed(7)
    tcn = TCN(2, [6, 6], kernel_size=3, dilations=[1, 2], causal=False).eval()
    x = torch.randn(1, 2, 26)
    new, _ = convert_causal(tcn, x)
    assert new.get_submodule("network.1.conv1").resolved_padding() == ((2, 2),)
    sm = StreamingModule(new, lookahead="auto")
    # four convs of kernel 3: dilation 1 reads 1 ahead, dilation 2 reads 2 ahead
    assert sorted(sm.delays.values()) == [1, 1, 2, 2] and sm.delay == 6
    assert sm.verify(x, [1, 4, 0, 9, 12]) < 1e-5


class LowPass(nn.Module):
    """An anti-aliasing filter written as BigVGAN's is: a fixed kernel buffer, an int
    ``kernel_size`` attribute, a replicate pad and a grouped ``F.conv1d`` in its forward."""

    def __init__(self, stride: int = 1, kernel_size: int = 6) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride
        self.register_buffer("filter", torch.hann_window(kernel_size + 2)[1:-1].view(1, 1, -1))

    def forward(self, x: Tensor) -> Tensor:
        k = self.kernel_size
        x = F.pad(x, (k // 2 - 1, k // 2), mode="replicate")
        w = (self.filter / self.filter.sum()).expand(x.shape[1], -1, -1)
        return F.conv1d(x, w, stride=self.stride, groups=x.shape[1])


class AntiAliased(nn.Module):
    """BigVGAN's ``Activation1d``: upsample x2 (replicate pad, a fixed transposed conv,
    a crop), a periodic activation, and downsample x2 through ``LowPass``."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(1, c, 1))
        self.filter = nn.Parameter(torch.hann_window(6)[None, None], requires_grad=False)
        self.down = nn.Sequential(LowPass(stride=2))

    def forward(self, x: Tensor) -> Tensor:
        c = x.shape[1]
        h = F.pad(x, (2, 2), mode="replicate")
        h = 2 * F.conv_transpose1d(h, self.filter.expand(c, -1, -1), stride=2, groups=c)
        h = h[..., 6:-6]
        h = h + torch.sin(self.alpha * h) ** 2 / self.alpha
        return self.down(h)


def test_anti_aliased_activations_convert_and_stream_with_lookahead() -> None:
    """A filter module whose ``kernel_size`` is an int is no conv to the wrapper search (it
    raised ``TypeError`` from ``len()``); the activation's pads and convs in code stay
    where they are, measured as one module reading a window of steps on both sides, which
    a lookahead stream runs on its window."""
    torch.manual_seed(3)
    net = nn.Sequential(
        nn.Conv1d(2, 4, 3, padding=1), AntiAliased(4), nn.Conv1d(4, 2, 5, padding=2)
    ).double()
    net.eval()
    x = torch.randn(2, 2, 40, dtype=torch.float64)
    new, report = convert_causal(net, x[..., :24])
    assert any("down.0" in s.path for s in report.skipped), report
    sm = StreamingModule(new, lookahead="auto")
    for sizes in ([1] * 40, [7] * 5 + [5]):
        assert sm.verify(x, sizes) < 1e-9
    assert "AntiAliased '1': reads a window" in sm.explain()


class _ChompedUp(nn.Module):
    """A CRN decoder block on ``(N, C, F, T)`` (haoxiangsnr's CRN layout): a transposed conv
    upsampling frequency by 2, with ``output_padding`` on frequency, then the chomp of its
    last time frame that makes it causal."""

    def __init__(self, time_output_padding: int = 0) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose2d(
            2,
            3,
            (3, 2),
            stride=(2, 1 + time_output_padding),
            output_padding=(1, time_output_padding),
        )

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.conv(x)[:, :, :, :-1])


def test_output_padding_on_another_axis_than_time_converts() -> None:
    torch.manual_seed(0)
    model = _ChompedUp().double().eval()
    x = torch.randn(2, 2, 9, 20, dtype=torch.float64)
    new, report = convert_causal(model, x)
    assert [c.path for c in report.changes] == ["conv", "<model>"], report
    assert new.conv.output_padding == (1, 0)
    torch.testing.assert_close(new(x), model(x), rtol=0, atol=1e-12)
    sm = StreamingModule(new)
    for sizes in ([1] * 20, [7, 7, 6], [3, 1, 9, 2, 5]):
        assert sm.verify(x, sizes) <= 1e-12
    # the table shows the layer's time crops: the one frame its forward chomped
    assert "| conv | transposed conv | 2 | 1 | 1 | crops (0, 1) |" in sm.explain()
    # on the time axis, output_padding with a crop is another layer: left, with its reason
    other = _ChompedUp(time_output_padding=1).double().eval()
    _, report = convert_causal(other, x)
    assert report.changes == [] or all(c.path != "conv" for c in report.changes)
    assert any("output_padding" in s.reason for s in report.skipped), report


class _PadsItself(nn.Conv1d):
    """A causal conv subclass that pads its own input in forward."""

    def forward(self, input: Tensor) -> Tensor:
        return super().forward(F.pad(input, (2 * self.dilation[0], 0)))


class _OnlyCalls(nn.Module):
    """A parent whose forward only calls its one child, a conv that pads itself."""

    def __init__(self) -> None:
        super().__init__()
        self.c = _PadsItself(2, 4, 3, dilation=2)

    def forward(self, x: Tensor) -> Tensor:
        return self.c(x)


@pytest.mark.parametrize("make", [_OnlyCalls, lambda: nn.Sequential(_PadsItself(2, 4, 3))])
def test_a_self_padding_conv_under_a_parent_converts(make: Callable[[], nn.Module]) -> None:
    torch.manual_seed(0)
    model = make().double().eval()
    x = torch.randn(2, 2, 30, dtype=torch.float64)
    new, report = convert_causal(model, x)
    torch.testing.assert_close(new(x), model(x), rtol=0, atol=1e-12)
    assert [c.path for c in report.changes] in (["c"], ["0"]), report
    assert StreamingModule(new).verify(x, [1] * 30) <= 1e-12
    with pytest.raises(SurgeryError, match=r"convert nn.Sequential\(model\)"):
        convert_causal(_PadsItself(2, 4, 3).double().eval(), x)


def test_old_style_spectral_norm_behind_a_pad_converts_and_streams() -> None:
    """torch.nn.utils.spectral_norm (a pre-hook over weight_orig, weight_u, weight_v) on convs
    fed by a pad module and by F.pad in a wrapper: the hook becomes the parametrization with
    the same original weight and vectors, the pads move into the convs, and the copy equals
    the original and streams."""
    from torch.nn.utils import spectral_norm

    class Wrapped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = spectral_norm(nn.Conv1d(4, 4, 3, dilation=2))

        def forward(self, x: Tensor) -> Tensor:
            return self.conv(F.pad(x, (4, 0)))

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.ConstantPad1d((2, 0), 0.0), spectral_norm(nn.Conv1d(2, 4, 3)), nn.ELU(), Wrapped()
    ).double()
    for _ in range(3):  # (power iterations in train mode: u and v other than at creation)
        model(torch.randn(2, 2, 16, dtype=torch.float64))
    model.eval()
    x = torch.randn(2, 2, 30, dtype=torch.float64)
    new, report = convert_causal(model, x)
    assert sum("spectral_norm" in c.what for c in report.changes) == 2, report
    torch.testing.assert_close(new(x), model(x), rtol=1e-10, atol=1e-12)
    assert StreamingModule(new).verify(x, [1] * 30) <= 1e-12


class _CausalConv2D(nn.Conv2d):
    """NeMo's ``CausalConv2D`` as written: a conv subclass on ``(N, C, T, F)`` that pads
    time on the left and frequency on both sides in its own forward."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__(c_in, c_out, 3, stride=(1, 2))

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(F.pad(x, (1, 1, 2, 0)))


def test_a_conv_subclass_padding_time_and_frequency_converts() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(_CausalConv2D(2, 4), nn.ReLU(), _CausalConv2D(4, 4)).double().eval()
    x = torch.randn(2, 2, 25, 16, dtype=torch.float64)
    new, report = convert_causal(model, x, axis=2)
    assert [c.path for c in report.changes] == ["0", "2"], report
    assert new[0].resolved_padding() == ((2, 0), (1, 1))
    torch.testing.assert_close(new(x), model(x), rtol=0, atol=1e-12)
    assert StreamingModule(new, axis=2).verify(x, [1] * 25) <= 1e-12


class _NemoCausalConv1D(nn.Conv1d):
    """NeMo's ``CausalConv1D`` with ``padding=None``: it pads ``(k - 1, stride - 1)`` in its
    forward, so the full run has a last window over the right pad."""

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(F.pad(x, (self.kernel_size[0] - 1, self.stride[0] - 1)))


def test_a_right_pad_shorter_than_the_stride_is_named_and_streams_with_lookahead() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(_NemoCausalConv1D(2, 4, 4, stride=2), nn.ReLU()).double().eval()
    x = torch.randn(2, 2, 32, dtype=torch.float64)
    new, _ = convert_causal(model, x)
    with pytest.raises(
        PaddingError,
        match=r"ConvertedConv1d '0' pads time by \(3, 1\) at stride 2: its right pad, shorter "
        r"than the stride, makes a last, partial window.*lookahead='auto'",
    ):
        StreamingModule(new).verify(x, [1] * 32)
    assert StreamingModule(new, lookahead="auto").verify(x, [1] * 32) <= 1e-12
