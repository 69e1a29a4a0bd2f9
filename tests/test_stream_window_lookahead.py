"""Modules measured to read a window of earlier and later time steps (output ``t`` reads
inputs ``t - a .. t + b``: a centred moving average, a non-causal local attention written
with a banded mask) stream with lookahead: each runs on its last ``a`` committed input
samples and the uncommitted span, and its ``b`` joins the stream's delay on its clock. The
reference for every value is the model's own full-sequence run; a causal stream refuses
such a module with the measured dependency, and a module that depends on where a time step
sits is refused in lookahead mode too."""

from __future__ import annotations

import copy
import io
import pickle
import random

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import padkit.nn as pn
from padkit import PaddingError
from padkit.streaming import StreamingModule


class CentredAverage(nn.Module):
    """The mean of inputs ``t - a .. t + b`` (zeros past either end), scaled."""

    def __init__(self, a: int, b: int) -> None:
        super().__init__()
        self.a, self.b = a, b
        self.scale = nn.Parameter(torch.full((1,), 1.5))

    def forward(self, x: Tensor) -> Tensor:
        w = self.a + self.b + 1
        return self.scale * F.pad(x, (self.a, self.b)).unfold(-1, w, 1).mean(-1)


class BandAttention(nn.Module):
    """Attention of step ``t`` over steps ``t - a .. t + b``, on ``(N, C, T)``."""

    def __init__(self, c: int, a: int, b: int) -> None:
        super().__init__()
        self.a, self.b = a, b
        self.qkv = nn.Linear(c, 3 * c)
        self.out = nn.Linear(c, c)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.qkv(x.transpose(1, 2)).chunk(3, -1)
        i = torch.arange(x.shape[-1], device=x.device)
        d = i[:, None] - i[None, :]
        band = (d <= self.a) & (-d <= self.b)
        att = (q @ k.transpose(1, 2) / q.shape[-1] ** 0.5).masked_fill(~band, float("-inf"))
        return x + self.out(att.softmax(-1) @ v).transpose(1, 2)


class BandAttentionNTC(nn.Module):
    """The same on a time-major ``(N, T, C)`` input."""

    def __init__(self, c: int, a: int, b: int) -> None:
        super().__init__()
        self.a, self.b = a, b
        self.qkv = nn.Linear(c, 3 * c)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.qkv(x).chunk(3, -1)
        i = torch.arange(x.shape[1])
        d = i[:, None] - i[None, :]
        band = (d <= self.a) & (-d <= self.b)
        att = (q @ k.transpose(1, 2)).masked_fill(~band, float("-inf")).softmax(-1)
        return x + att @ v


class PositionalCentred(nn.Module):
    """A centred average plus a ramp over the positions of the steps it is given."""

    def forward(self, x: Tensor) -> Tensor:
        avg = F.pad(x, (1, 2)).unfold(-1, 4, 1).mean(-1)
        return avg + torch.arange(x.shape[-1], dtype=x.dtype) / 10


class BlockAttention(nn.Module):
    """Attention within fixed blocks of ``w`` steps from the start (``T`` a multiple of
    ``w``), with a position term that restarts in each block."""

    def __init__(self, c: int, w: int) -> None:
        super().__init__()
        self.w = w
        self.qkv = nn.Linear(c, 3 * c)
        self.pos = nn.Parameter(torch.randn(w, c) / 4)

    def forward(self, x: Tensor) -> Tensor:
        n, c, t = x.shape
        h = x.transpose(1, 2).reshape(n, t // self.w, self.w, c) + self.pos
        q, k, v = self.qkv(h).chunk(3, -1)
        att = (q @ k.transpose(-1, -2) / c**0.5).softmax(-1)
        return x + (att @ v).reshape(n, t, c).transpose(1, 2)


def model(att: tuple[int, int] = (5, 4), late: tuple[int, int] = (3, 6)) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv1d(2, 8, 3, padding=1),
        CentredAverage(2, 3),
        nn.ELU(),
        BandAttention(8, *att),
        nn.Conv1d(8, 8, 4, stride=2, padding=1),
        nn.Tanh(),
        BandAttention(8, *late),
    ).eval()


def sizes(n: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    rand: list[int] = []
    while sum(rand) < n:
        rand.append(min(rng.randint(0, 19), n - sum(rand)))
    return [[1] * n, [7] * (n // 7) + [n % 7], rand]


def stream(sm: StreamingModule, x: Tensor, chunks: list[int], state: dict | None = None) -> Tensor:
    state = sm.init_state(example=x[..., :1]) if state is None else state
    outs = []
    for chunk in x.split(chunks, -1):
        y, state = sm.step(chunk, state)
        outs.append(y)
    outs.append(sm.flush(state))
    return torch.cat(outs, -1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_non_causal_windows_stream_exactly_with_their_lookahead(dtype: torch.dtype) -> None:
    """Before and behind a stride-2 conv, at batch 2, every chunking (1, 7, a seeded mix
    with empty chunks) equals the full run; each window's lookahead is in the delay, on its
    clock (the late attention's 6 frames are 12 input samples), from init_state on."""
    net = model().to(dtype)
    sm = StreamingModule(net, lookahead="auto")
    x = torch.randn(2, 2, 161, dtype=dtype)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}
    with torch.no_grad():
        full = net(x)
        state = sm.init_state(example=x[..., :1])
        # convs 1 and 2 (at the input's clock), the average 3, the attentions 4 and 2 * 6
        assert sm.delay == 1 + 2 + 3 + 4 + 12
        for chunks in sizes(161, 1):
            torch.testing.assert_close(stream(sm, x, chunks, dict(state)), full, **tol)
        _, state = sm.step(x[..., :100], state)
    assert sm.delay == 22
    assert {k: v.shape[-1] for k, v in state.items() if k.endswith(".hist")} == {
        "1.hist": 2,
        "3.hist": 5,
        "6.hist": 3,
    }
    text = sm.explain()
    assert "BandAttention '6': reads a window of 3 earlier time steps and 6 later ones" in text
    assert "clock 1/2, adds 12 input samples to the delay" in text


def test_a_wide_window_is_measured_on_a_longer_input() -> None:
    """A window of 30 steps back and 25 ahead reaches past a quarter of the first probe: it
    is measured on its input repeated to a longer sequence, and streams exactly."""
    torch.manual_seed(1)
    net = nn.Sequential(nn.Conv1d(3, 8, 5, padding=2), BandAttention(8, 30, 25)).eval()
    sm = StreamingModule(net, lookahead="auto")
    x = torch.randn(1, 3, 200)
    with torch.no_grad():
        torch.testing.assert_close(stream(sm, x, [13] * 15 + [5]), net(x))
    assert sm.delay == 2 + 25
    assert sm._windows["1"].reach == 30


def test_a_time_major_window_streams_with_lookahead() -> None:
    torch.manual_seed(2)
    net = BandAttentionNTC(4, 3, 5).eval()
    x = torch.randn(2, 80, 4)
    sm = StreamingModule(nn.Sequential(net), lookahead="auto", axis=1)
    with torch.no_grad():
        state = sm.init_state(example=x[:, :1])
        outs = []
        for chunk in x.split([1, 7, 3, 13, 56], 1):
            y, state = sm.step(chunk, state)
            outs.append(y)
        outs.append(sm.flush(state))
        torch.testing.assert_close(torch.cat(outs, 1), net(x))
    assert sm.delay == 5


def test_a_lookahead_stream_with_windows_pickles_copies_and_resumes() -> None:
    net = model((4, 2), (2, 3))
    sm = StreamingModule(net, lookahead="auto")
    x = torch.randn(1, 2, 120)
    with torch.no_grad():
        full = net(x)
        state = sm.init_state(example=x[..., :1])
        head, state = sm.step(x[..., :41], state)
        buffer = io.BytesIO()
        torch.save(state, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=True)
        for other in (pickle.loads(pickle.dumps(sm)), copy.deepcopy(sm), sm):
            assert other.delay == sm.delay
            rest = stream(other, x[..., 41:], [5] * 15 + [4], dict(loaded))
            torch.testing.assert_close(torch.cat([head, rest], -1), full)


def test_a_causal_stream_refuses_a_window_that_reads_ahead() -> None:
    net = nn.Sequential(pn.Conv1d(2, 4, 3, padding="causal"), CentredAverage(2, 3))
    with pytest.raises(PaddingError, match=r"CentredAverage '1'.*step\(s\) later"):
        StreamingModule(net)(torch.randn(1, 2, 8))


def test_a_positional_window_and_a_global_attention_are_refused_with_lookahead() -> None:
    with pytest.raises(PaddingError, match=r"PositionalCentred '1'.*where a time step sits"):
        StreamingModule(
            nn.Sequential(nn.Conv1d(2, 4, 3, padding=1), PositionalCentred()), lookahead="auto"
        )(torch.randn(1, 2, 8))
    with pytest.raises(PaddingError, match=r"BandAttention '1'.*both directions"):
        StreamingModule(
            nn.Sequential(nn.Conv1d(2, 4, 3, padding=1), BandAttention(4, 1000, 1000)),
            lookahead="auto",
        )(torch.randn(1, 2, 8))


def test_a_fixed_lookahead_too_short_for_a_window_is_refused() -> None:
    """``lookahead=3`` covers the conv's right pad but not the attention's 4 later steps:
    refused, saying how much the layers and windows need."""
    net = nn.Sequential(nn.Conv1d(2, 4, 3, padding=1), BandAttention(4, 2, 4)).eval()
    sm = StreamingModule(net, lookahead=3)
    why = r"lookahead=3 is smaller than the 5 input samples"
    with pytest.raises(PaddingError, match=why), torch.no_grad():
        sm.verify(torch.randn(1, 2, 60), [1] * 60)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_attention_in_fixed_blocks_streams_on_whole_blocks(dtype: torch.dtype) -> None:
    """Attention within blocks of 4 frames behind a stride-2 conv (blocks of 8 input
    samples): measured to read its block, it streams on whole blocks from the stream's
    start, its 3 frames (6 input samples) ahead in the delay; every chunking, batch 2."""
    torch.manual_seed(3)
    net = (
        nn.Sequential(
            nn.Conv1d(2, 8, 3, padding=1),
            nn.Conv1d(8, 8, 4, stride=2, padding=1),
            BlockAttention(8, 4),
            nn.Conv1d(8, 4, 3, padding=1),
        )
        .to(dtype)
        .eval()
    )
    sm = StreamingModule(net, lookahead="auto")
    x = torch.randn(2, 2, 120, dtype=dtype)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}
    with torch.no_grad():
        full = net(x)
        for chunks in sizes(120, 2):
            torch.testing.assert_close(stream(sm, x, chunks), full, **tol)
        # convs 1, 2; the blocks 3 frames of 2 samples; the last conv 1 frame
        assert sm.delay == 1 + 2 + 6 + 2
        state = sm.init_state(example=x[..., :1])
        _, state = sm.step(x[..., :37], state)
        # the frames of the block the next span starts in, before it
        frames = state["2.hist"].shape[-1]
        assert 0 <= frames < 4
        state["2.hist"] = torch.zeros(2, 8, frames + 1, dtype=dtype)
        with pytest.raises(PaddingError, match=r"'2.hist' holds \d+ samples.*blocks of 4"):
            sm.step(x[..., 37:80], state)
    assert "the block of 4 time steps holding each step" in sm.explain()


def test_a_causal_stream_refuses_attention_in_blocks() -> None:
    net = nn.Sequential(pn.Conv1d(2, 8, 3, padding="causal"), BlockAttention(8, 4))
    with pytest.raises(PaddingError, match=r"BlockAttention '1'.*step\(s\) later"):
        StreamingModule(net)(torch.randn(1, 2, 16))


class _UpFilter(nn.Module):
    """An anti-aliased 2x upsampler as BigVGAN writes one: replicate pad, a fixed low-pass
    filter as a strided transposed conv, a crop."""

    def __init__(self, taps: int = 12) -> None:
        super().__init__()
        t = torch.arange(taps, dtype=torch.float64) - (taps - 1) / 2
        h = torch.sinc(t / 2) * torch.kaiser_window(taps, periodic=False, beta=5.0).double()
        self.register_buffer("filt", (h / h.sum()).float().view(1, 1, -1))
        self.pad = taps // 2 - 1
        self.lo = self.pad * 2 + (taps - 2) // 2
        self.hi = self.pad * 2 + (taps - 1) // 2

    def forward(self, x: Tensor) -> Tensor:
        c = x.shape[1]
        x = F.pad(x, (self.pad, self.pad), mode="replicate")
        y = 2 * F.conv_transpose1d(x, self.filt.expand(c, -1, -1), stride=2, groups=c)
        return y[..., self.lo : -self.hi]


class _DownFilter(nn.Module):
    def __init__(self, taps: int = 12) -> None:
        super().__init__()
        t = torch.arange(taps, dtype=torch.float64) - (taps - 1) / 2
        h = torch.sinc(t / 2) * torch.kaiser_window(taps, periodic=False, beta=5.0).double()
        self.register_buffer("filt", (h / h.sum()).float().view(1, 1, -1))
        self.taps = taps

    def forward(self, x: Tensor) -> Tensor:
        c = x.shape[1]
        x = F.pad(x, (self.taps // 2 - 1, self.taps // 2), mode="replicate")
        return F.conv1d(x, self.filt.expand(c, -1, -1), stride=2, groups=c)


class _Snake(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.rand(1, c, 1) + 0.5)

    def forward(self, x: Tensor) -> Tensor:
        return x + torch.sin(self.alpha * x) ** 2 / self.alpha


class AntiAliasedActivation(nn.Module):
    """Upsample 2x, a Snake activation, low-pass and downsample 2x (BigVGAN's
    ``Activation1d``): the length is kept, and output ``t`` reads a few steps either way."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.up, self.act, self.down = _UpFilter(), _Snake(c), _DownFilter()

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.act(self.up(x)))


@pytest.mark.parametrize("root", [True, False])
def test_a_window_module_streams_as_the_model_itself_or_inside_one(root: bool) -> None:
    torch.manual_seed(0)
    act = AntiAliasedActivation(3).double()
    net = act if root else nn.Sequential(nn.Conv1d(3, 3, 1), act).double()
    sm = StreamingModule(net, lookahead="auto")
    x = torch.randn(2, 3, 70, dtype=torch.float64)
    with torch.no_grad():
        full = net(x)
        for chunks in sizes(70, 3):
            torch.testing.assert_close(stream(sm, x, chunks), full, rtol=0, atol=1e-12)
        assert sm.delay > 0
        copy.deepcopy(sm)  # (the model's own stand-in is made anew)
        torch.testing.assert_close(stream(pickle.loads(pickle.dumps(sm)), x, [9] * 7 + [7]), full)


def test_an_upsampling_filter_alone_is_refused_with_its_window_and_rate() -> None:
    with pytest.raises(
        PaddingError,
        match=r"_UpFilter '1'.*2 output steps of each input step.*reads a window of its input "
        r"\(\d+ step\(s\) later, \d+ earlier\)",
    ):
        StreamingModule(nn.Sequential(nn.Conv1d(3, 3, 1), _UpFilter()), lookahead="auto")(
            torch.randn(1, 3, 8)
        )
