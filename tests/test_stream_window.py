"""Modules measured to read a window of earlier time steps (output ``t`` reads inputs
``t - w .. t``): a moving average written with ``unfold``, a causal local attention written
with a banded mask. A causal stream runs each on its last ``w`` input samples and the chunk.
The reference for every value is the model's own full-sequence run; a cumulative module
(unbounded window) and one that depends on where a time step sits are still refused, with
the dependency measured."""

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


class MovingAverage(nn.Module):
    """A causal moving average of ``w`` steps (zeros before the start), scaled."""

    def __init__(self, w: int) -> None:
        super().__init__()
        self.w = w
        self.scale = nn.Parameter(torch.full((1,), 1.5))

    def forward(self, x: Tensor) -> Tensor:
        return self.scale * F.pad(x, (self.w - 1, 0)).unfold(-1, self.w, 1).mean(-1)


class LocalAttention(nn.Module):
    """Causal attention within the last ``w`` frames, on ``(N, C, T)``."""

    def __init__(self, c: int, w: int) -> None:
        super().__init__()
        self.w = w
        self.qkv = nn.Linear(c, 3 * c)
        self.out = nn.Linear(c, c)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.qkv(x.transpose(1, 2)).chunk(3, -1)
        i = torch.arange(x.shape[-1], device=x.device)
        band = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < self.w)
        att = (q @ k.transpose(1, 2) / q.shape[-1] ** 0.5).masked_fill(~band, float("-inf"))
        return x + self.out(att.softmax(-1) @ v).transpose(1, 2)


class RunningMean(nn.Module):
    """The mean of every sample so far: no window bounds it."""

    def forward(self, x: Tensor) -> Tensor:
        n = torch.arange(1, x.shape[-1] + 1, dtype=x.dtype, device=x.device)
        return x.cumsum(-1) / n


class Positional(nn.Module):
    """A moving average plus a ramp over the positions of the time steps it is given."""

    def forward(self, x: Tensor) -> Tensor:
        avg = F.pad(x, (2, 0)).unfold(-1, 3, 1).mean(-1)
        return avg + torch.arange(x.shape[-1], dtype=x.dtype) / 10


def model(w_avg: int, w_att: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        pn.Conv1d(2, 8, 3, padding="causal"),
        MovingAverage(w_avg),
        nn.ELU(),
        LocalAttention(8, w_att),
        pn.Conv1d(8, 8, 4, stride=2, padding="causal"),
        nn.Tanh(),
        MovingAverage(3),
    ).eval()


def sizes(n: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    rand: list[int] = []
    while sum(rand) < n:
        rand.append(min(rng.randint(1, 19), n - sum(rand)))
    return [[1] * n, [7] * (n // 7) + [n % 7], rand]


def stream(sm: StreamingModule, x: Tensor, chunks: list[int], state: dict | None = None) -> Tensor:
    state = sm.init_state(example=x[..., :1]) if state is None else state
    outs = []
    for chunk in x.split([c for c in chunks if c], -1):
        y, state = sm.step(chunk, state)
        outs.append(y)
    return torch.cat(outs, -1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("w_avg, w_att", [(4, 5), (9, 40)])
def test_windowed_modules_stream_exactly(dtype: torch.dtype, w_avg: int, w_att: int) -> None:
    """Windows shorter and far longer than the self-check's first probe (the attention's
    40 frames are measured on its input repeated to a longer sequence): every chunking, at
    batch 2, equals the full run; each module keeps its last ``w - 1`` input samples."""
    net = model(w_avg, w_att).to(dtype)
    sm = StreamingModule(net)
    x = torch.randn(2, 2, 300, dtype=dtype)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {}
    with torch.no_grad():
        full = net(x)
        for chunks in sizes(300, 1):
            torch.testing.assert_close(stream(sm, x, chunks), full, **tol)
        state = sm.init_state(example=x[..., :1])
        _, state = sm.step(x[..., :100], state)
    assert {k: v.shape[-1] for k, v in state.items() if k.endswith(".hist")} == {
        "1.hist": w_avg - 1,
        "3.hist": w_att - 1,
        "6.hist": 2,
    }
    assert set(sm._windows) == {"1", "3", "6"}
    assert f"LocalAttention '3': reads a window of {w_att - 1} earlier time steps" in sm.explain()


def test_a_stream_with_windows_pickles_and_copies() -> None:
    """A stream whose modules were found to need a window, pickled, deep-copied, and its
    state saved and loaded mid-stream, goes on exactly."""
    net = model(4, 6)
    sm = StreamingModule(net)
    x = torch.randn(1, 2, 90)
    with torch.no_grad():
        full = net(x)
        state = sm.init_state(example=x[..., :1])
        head, state = sm.step(x[..., :41], state)
        buffer = io.BytesIO()
        torch.save(state, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=True)
        for other in (pickle.loads(pickle.dumps(sm)), copy.deepcopy(sm), sm):
            assert set(other._windows) == set(sm._windows)
            rest = stream(other, x[..., 41:], [5] * 9 + [4], dict(loaded))
            torch.testing.assert_close(torch.cat([head, rest], -1), full)


def test_positional_and_recurrent_dependencies_are_refused_with_the_measurement() -> None:
    """A module whose output depends on where a time step sits differs on a chunk however
    much history it gets; a recurrence written as a Python loop reads every earlier step but
    keeps it in no running sum the stream could carry."""
    with pytest.raises(PaddingError, match=r"Positional '1'.*depends on where a time step"):
        StreamingModule(nn.Sequential(pn.Conv1d(2, 4, 3, padding="causal"), Positional()))(
            torch.randn(1, 2, 8)
        )
    with pytest.raises(PaddingError, match=r"Decay '1'.*reads every earlier input.*another way"):
        StreamingModule(nn.Sequential(pn.Conv1d(2, 4, 3, padding="causal"), Decay()))(
            torch.randn(1, 2, 8)
        )


class Decay(nn.Module):
    """y[t] = 0.9 y[t-1] + x[t], one time step at a time."""

    def forward(self, x: Tensor) -> Tensor:
        ys, y = [], torch.zeros_like(x[..., 0])
        for t in range(x.shape[-1]):
            y = 0.9 * y + x[..., t]
            ys.append(y)
        return torch.stack(ys, -1)


class CumulativeNorm(nn.Module):
    """Conv-TasNet's cumulative layer norm: each step normalised by the mean and variance
    of every value so far (running sums over time, a count made with ``arange``)."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(1, c, 1) * 1.2)
        self.beta = nn.Parameter(torch.full((1, c, 1), 0.1))

    def forward(self, x: Tensor) -> Tensor:
        c, t = x.shape[1], x.shape[2]
        cum_sum = torch.cumsum(x.sum(1, keepdim=True), dim=-1)
        cum_pow = x.pow(2).sum(1, keepdim=True).cumsum(-1)
        count = torch.arange(start=c, end=c * (t + 1), step=c, dtype=x.dtype).view(1, 1, -1)
        mean = cum_sum / count
        var = cum_pow / count - mean.pow(2)
        return self.gamma * (x - mean) / (var + 1e-8).sqrt() + self.beta


class GuardedMean(nn.Module):
    """A running mean that branches on its input's length in Python (it does not trace)."""

    def forward(self, x: Tensor) -> Tensor:
        if int(x.shape[-1]) == 0:
            return x
        n = torch.arange(1, x.shape[-1] + 1, dtype=x.dtype)
        return torch.cumsum(x, -1) / n


class ChannelRamp(nn.Module):
    """A running mean over time, weighted per channel by ``arange`` over the channels."""

    def forward(self, x: Tensor) -> Tensor:
        w = torch.arange(x.shape[1], dtype=x.dtype).view(1, -1, 1) + 1
        n = torch.arange(1, x.shape[-1] + 1, dtype=x.dtype)
        return w * x.cumsum(-1) / n


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cumulative_modules_stream_with_their_running_sums_carried(dtype: torch.dtype) -> None:
    """A cumulative layer norm between causal convs, a running mean behind a stride-2 conv and
    one that does not trace: every chunking, at batch 2, equals the full run (400 samples)."""
    torch.manual_seed(5)
    net = (
        nn.Sequential(
            pn.Conv1d(2, 8, 3, padding="causal"),
            CumulativeNorm(8),
            nn.PReLU(),
            pn.Conv1d(8, 8, 4, stride=2, padding="causal"),
            RunningMean(),
            pn.Conv1d(8, 8, 3, padding="causal"),
            GuardedMean(),
        )
        .eval()
        .to(dtype)
    )
    sm = StreamingModule(net)
    x = torch.randn(2, 2, 400, dtype=dtype)
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {}
    with torch.no_grad():
        full = net(x)
        for chunks in sizes(400, 2):
            torch.testing.assert_close(stream(sm, x, chunks), full, **tol)
        # traced where the forward traces (its ops run directly), else under the mode; a
        # copy traces again
        traced = {k: bool(p.traced) for k, p in sm._cumulative.items()}
        assert traced == {"1": True, "4": True, "6": False}
        copied = copy.deepcopy(sm)
        assert all(p.traced is None for p in copied._cumulative.values())
        torch.testing.assert_close(stream(copied, x, [9] * 44 + [4]), full, **tol)
    assert set(sm._cumulative) == {"1", "4", "6"}
    table = sm.explain()
    assert "CumulativeNorm '1': reads every earlier time step (measured)" in table
    assert "RunningMean '4'" in table and "'4.seen'" in table


def test_a_cumulative_module_is_checked_at_each_new_chunk_length() -> None:
    """Whether an ``arange`` counts time steps is known by its length only: at a chunk of
    as many time steps as there are channels, the channels' ``arange`` would be offset too.
    The check before that chunk length's first step refuses it, naming the module; other
    lengths stream exactly."""
    torch.manual_seed(6)
    net = nn.Sequential(pn.Conv1d(2, 8, 1), ChannelRamp()).eval()
    sm = StreamingModule(net)
    x = torch.randn(1, 2, 40)
    with torch.no_grad():
        torch.testing.assert_close(stream(sm, x, [5] * 8), net(x))
        with pytest.raises(PaddingError, match=r"ChannelRamp '1' on chunks giving it 8 time"):
            stream(sm, x, [8] * 5)


def test_reset_rows_and_export_refuse_a_windowed_module_by_name() -> None:
    net = model(4, 5)
    sm = StreamingModule(net)
    x = torch.randn(2, 2, 32)
    with torch.no_grad():
        _, state = sm.step(x, sm.init_state(example=x[..., :1]))
    with pytest.raises(PaddingError, match=r"reset_rows\(\).*MovingAverage '1'"):
        sm.reset_rows(state, [0])
    with pytest.raises(PaddingError, match=r"step_module\(\).*MovingAverage '1'"):
        sm.step_module(x[..., :4], state)


class AttentionNTC(nn.Module):
    """Causal attention within the last ``w`` steps of an ``(N, T, C)`` input."""

    def __init__(self, c: int, w: int) -> None:
        super().__init__()
        self.w = w
        self.qkv = nn.Linear(c, 3 * c)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.qkv(x).chunk(3, -1)
        i = torch.arange(x.shape[1])
        band = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < self.w)
        att = (q @ k.transpose(1, 2)).masked_fill(~band, float("-inf")).softmax(-1)
        return x + att @ v


class TimeMajor(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = pn.Conv1d(3, 8, 3, padding="causal")
        self.att = AttentionNTC(8, 6)
        self.out = nn.Linear(8, 4)

    def forward(self, x: Tensor) -> Tensor:  # (N, T, C)
        return self.out(self.att(self.conv(x.transpose(1, 2)).transpose(1, 2)))


def test_a_window_on_the_time_major_axis_streams_exactly() -> None:
    torch.manual_seed(2)
    net = TimeMajor().eval()
    x = torch.randn(2, 60, 3)
    sm = StreamingModule(net, axis=1)
    with torch.no_grad():
        full = net(x)
        state = sm.init_state(example=x[:, :1])
        outs = []
        for chunk in x.split([1, 7, 3, 13, 36], 1):
            y, state = sm.step(chunk, state)
            outs.append(y)
    torch.testing.assert_close(torch.cat(outs, 1), full)
    assert state["att.hist"].shape == (2, 5, 8)


def test_a_window_behind_a_strided_layer_takes_steps_with_no_new_time_step() -> None:
    """Behind a stride-4 conv, most 1-sample steps give the windowed modules no time step
    (the first ones before any history exists): they return empty outputs of the right
    shape and keep their history."""
    torch.manual_seed(4)
    net = nn.Sequential(
        pn.Conv1d(2, 8, 8, stride=4, padding="causal_block"), MovingAverage(3), LocalAttention(8, 4)
    ).eval()
    x = torch.randn(2, 2, 64)
    sm = StreamingModule(net)
    with torch.no_grad():
        full = net(x)
        for chunks in ([1] * 64, [3] * 21 + [1]):
            torch.testing.assert_close(stream(sm, x, chunks), full)
    assert set(sm._windows) == {"1", "2"}


class ScaledMean(nn.Module):
    """A running mean times a plain attribute (a trace holds it as a constant)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = 2.0

    def forward(self, x: Tensor) -> Tensor:
        n = torch.arange(1, x.shape[-1] + 1, dtype=x.dtype)
        return self.scale * torch.cumsum(x, -1) / n


def test_a_traced_cumulative_module_follows_a_changed_plain_attribute() -> None:
    torch.manual_seed(7)
    mean = ScaledMean()
    net = nn.Sequential(pn.Conv1d(2, 4, 3, padding="causal"), mean).eval()
    sm = StreamingModule(net)
    x = torch.randn(1, 2, 30)
    with torch.no_grad():
        torch.testing.assert_close(stream(sm, x, [4] * 7 + [2]), net(x))
        assert sm._cumulative["1"].traced
        mean.scale = -3.0
        torch.testing.assert_close(stream(sm, x, [4] * 7 + [2]), net(x))


class RotaryTable(nn.Module):
    """The cos and sin of every position's angles, ``(T, d)``: a positional table."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.register_buffer("freq", 1.0 / 10.0 ** torch.linspace(0, 2, d // 2))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        t = torch.arange(x.shape[1], dtype=x.dtype, device=x.device)
        angles = t[:, None] * self.freq.to(x.dtype)
        return angles.cos(), angles.sin()


class RotaryLocalAttention(nn.Module):
    """Causal attention within the last ``w`` steps of an ``(N, C, T)`` input, queries and
    keys rotated by their positions: the scores depend on position differences only."""

    def __init__(self, c: int, w: int) -> None:
        super().__init__()
        self.w = w
        self.qkv = nn.Linear(c, 3 * c)
        self.rope = RotaryTable(c)

    def forward(self, x: Tensor) -> Tensor:
        h = x.transpose(1, 2)
        q, k, v = self.qkv(h).chunk(3, -1)
        cos, sin = self.rope(h)

        def rotate(u: Tensor) -> Tensor:
            a, b = u.chunk(2, -1)
            return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)

        q, k = rotate(q), rotate(k)
        i = torch.arange(x.shape[-1])
        band = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < self.w)
        att = (q @ k.transpose(1, 2)).masked_fill(~band, float("-inf")).softmax(-1)
        return x + (att @ v).transpose(1, 2)


def test_a_positional_table_inside_a_windowed_attention_streams_with_it() -> None:
    """The rotary table alone depends on where a time step sits (measured so, it would be
    refused), but the attention around it uses position differences only: the attention
    streams on its window as a whole, the table running inside it."""
    torch.manual_seed(6)
    net = nn.Sequential(pn.Conv1d(2, 8, 3, padding="causal"), RotaryLocalAttention(8, 5))
    net = net.double().eval()
    sm = StreamingModule(net)
    x = torch.randn(2, 2, 80, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(stream(sm, x, [1, 7, 3, 13, 56]), net(x))
    assert set(sm._windows) == {"1"}
    # alone, the table is refused with its measurement
    with pytest.raises(PaddingError, match=r"RotaryTable '1'.*where a time step sits"):
        StreamingModule(nn.Sequential(nn.Identity(), RotaryTable(8)), axis=1)(torch.randn(1, 8, 4))


def test_many_windowed_modules_of_one_class_stream_in_one_round() -> None:
    """70 local attentions in series (a deep model repeats one block): each is measured on
    its own input once the first streams on a window, instead of one probe round per module
    (64 rounds at most: 70 were refused before)."""
    torch.manual_seed(0)
    net = nn.Sequential(
        pn.Conv1d(2, 4, 3, padding="causal"), *[LocalAttention(4, 3) for _ in range(70)]
    ).double()
    sm = StreamingModule(net)
    x = torch.randn(2, 2, 40, dtype=torch.float64)
    assert sm.verify(x, [1] * 40) <= 1e-12
    assert len(sm._windows) == 70
