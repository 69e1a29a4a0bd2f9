"""StreamingModule on model code as people write it (issue 36, items 2 and 4).

Stand-ins are what they replace: a forward that reads its conv's attributes, checks its class
or reads its (weight-normed) weights during a step runs unchanged, and recurrent layers take
every call form torch takes. Streaming checks itself in every mode: modules that act on each
time step on their own are recognised by measurement (no ``allow=``), modules that mix time
are refused with the dependency measured (lookahead mode too, ``allow=`` or not), and what
the model raises comes out as a padkit error naming the module. Every streamed case is
compared, in float64, with the original model's full-sequence output for chunks of 1, of a
prime length and of a random mix of lengths.
"""

from __future__ import annotations

import copy
import io
import pickle
import random
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils import spectral_norm as old_spectral_norm, weight_norm as old_weight_norm
from torch.nn.utils.parametrizations import weight_norm as new_weight_norm

import padkit.nn as pn
from padkit import PaddingError
from padkit.streaming import StreamingModule, convert_causal

ATOL = 1e-10


def chunkings(n: int, seed: int = 0) -> list[list[int]]:
    """Chunks of 1, of 7 (a prime), and a random mix (zeros included) summing to ``n``."""
    primes = [7] * (n // 7) + ([n % 7] if n % 7 else [])
    rng = random.Random(seed)
    mix: list[int] = []
    while sum(mix) < n:
        mix.append(min(rng.choice([0, 1, 2, 3, 5, 8, 13]), n - sum(mix)))
    return [[1] * n, primes, mix]


def streamed(stream: StreamingModule, x: Tensor, sizes: list[int]) -> Tensor:
    dim = stream.axis if stream.axis >= 0 else x.dim() + stream.axis
    state = stream.init_state(example=x.narrow(dim, 0, 1))
    outs = []
    with torch.no_grad():
        for chunk in x.split(sizes, dim=dim):
            y, state = stream.step(chunk, state)
            outs.append(y)
        outs.append(stream.flush(state, example=x.narrow(dim, 0, 1)))
    return torch.cat(outs, dim=dim)


def assert_streams(model: nn.Module, x: Tensor, **kwargs: Any) -> StreamingModule:
    """``model`` streams ``x`` exactly (float64, within ATOL) for every chunking."""
    model = model.double().eval()
    x = x.double()
    stream = StreamingModule(model, **kwargs)
    with torch.no_grad():
        full = model(x)
    dim = stream.axis if stream.axis >= 0 else x.dim() + stream.axis
    for sizes in chunkings(int(x.shape[dim])):
        got = streamed(stream, x, sizes)
        assert got.shape == full.shape, sizes
        torch.testing.assert_close(got, full, rtol=0, atol=ATOL)
    return stream


def first_step(stream: StreamingModule, x: Tensor) -> None:
    dim = stream.axis if stream.axis >= 0 else x.dim() + stream.axis
    state = stream.init_state(example=x.narrow(dim, 0, 1))
    stream.step(x, state)


# ----------------------------------------------------------------------------- item 2: stand-ins


class ReadsKernel(nn.Module):
    """The issue's reproducer: pads by its conv's kernel size, read in forward."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 1, 3)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(F.pad(x, (self.conv.kernel_size[0] - 1, 0)))


def test_issue_reproducer_reads_kernel_size_during_init_state_and_steps() -> None:
    stream = StreamingModule(ReadsKernel())
    state = stream.init_state(example=torch.zeros(1, 1, 1))  # no AttributeError
    assert set(state) == {"conv.buf", "conv.pos"}
    # its F.pad runs on every chunk: refused with the module and what it does to the length
    with pytest.raises(PaddingError, match=r"ReadsKernel '<model>'.*pads or crops the time"):
        stream.step(torch.randn(1, 1, 5), state)


class NormConv(nn.Module):
    """encodec's NormConv1d: the conv and a norm (Identity)."""

    def __init__(self, conv: nn.Module) -> None:
        super().__init__()
        self.conv = conv
        self.norm = nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.conv(x))


class ReadsAttributes(nn.Module):
    """encodec's SConv1d / moshi's StreamingConv1d: the forward reads the conv's kernel size,
    stride, dilation, weight shape and class during every call."""

    def __init__(self, conv: nn.Module) -> None:
        super().__init__()
        self.conv = NormConv(conv)

    def forward(self, x: Tensor) -> Tensor:
        conv = self.conv.conv
        assert isinstance(conv, nn.Conv1d), type(conv)
        assert type(conv).__name__ in ("Conv1d", "ParametrizedConv1d")
        k, s, d = conv.kernel_size[0], conv.stride[0], conv.dilation[0]
        assert conv.weight.shape == (conv.out_channels, conv.in_channels // conv.groups, k)
        assert conv.padding_mode == "zeros" and conv.training is self.training
        return self.conv(x) * (k + s + d) / 8.0


def _causal(**kw: Any) -> nn.Module:
    return pn.Conv1d(2, 3, 4, stride=2, dilation=1, padding="causal", **kw)


WRAPPED: list[tuple[str, Callable[[], nn.Module]]] = [
    ("plain", _causal),
    ("torch-valid", lambda: nn.Conv1d(2, 3, 3, dilation=2)),
    ("weight-norm-new", lambda: new_weight_norm(_causal())),
    ("weight-norm-old", lambda: old_weight_norm(_causal())),
    ("spectral-norm-old", lambda: old_spectral_norm(_causal())),
]


@pytest.mark.parametrize("make", [m for _, m in WRAPPED], ids=[i for i, _ in WRAPPED])
@pytest.mark.filterwarnings("ignore:.*weight_norm.* is deprecated:FutureWarning")
def test_forward_reading_its_convs_attributes_streams_exactly(
    make: Callable[[], nn.Module],
) -> None:
    torch.manual_seed(1)
    assert_streams(ReadsAttributes(make()), torch.randn(2, 2, 31))


class ReadsWeights(nn.Module):
    """Reads the weight-norm parameters (old style: weight_g/weight_v; new style: the
    parametrization's originals) of its conv during each call."""

    def __init__(self, old: bool) -> None:
        super().__init__()
        conv = pn.Conv1d(2, 2, 3, padding="causal")
        self.conv = old_weight_norm(conv) if old else new_weight_norm(conv)
        self.old = old

    def forward(self, x: Tensor) -> Tensor:
        if self.old:
            g, v = self.conv.weight_g, self.conv.weight_v
        else:
            p = self.conv.parametrizations.weight
            g, v = p.original0, p.original1
        gain = (g.abs().sum() / v.norm()).detach()
        return self.conv(x) * gain + self.conv.bias.view(1, -1, 1)


@pytest.mark.parametrize("old", [True, False], ids=["old-style", "parametrization"])
@pytest.mark.filterwarnings("ignore:.*weight_norm.* is deprecated:FutureWarning")
def test_weight_norm_parameters_read_during_steps(old: bool) -> None:
    torch.manual_seed(2)
    assert_streams(ReadsWeights(old), torch.randn(1, 2, 23))


def test_old_style_spectral_norm_in_train_mode_is_refused() -> None:
    model = nn.Sequential(old_spectral_norm(pn.Conv1d(1, 1, 3, padding="causal")))
    stream = StreamingModule(model, check=False)
    with pytest.raises(PaddingError, match="Conv1d '0' in train mode: its spectral norm"):
        stream.step(torch.randn(1, 1, 4), stream.init_state(1))


class Spy(nn.Module):
    """Records its parameters (names and tensors) and state_dict keys during each call."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = new_weight_norm(pn.Conv1d(1, 2, 3, padding="causal"))
        self.gru = nn.GRU(2, 3, batch_first=True)
        self.seen: list[Any] = []

    def forward(self, x: Tensor) -> Tensor:
        self.seen.append(self.snapshot())
        return self.gru(self.conv(x).transpose(1, 2))[0].transpose(1, 2)

    def snapshot(self) -> Any:
        return (
            [(n, id(p)) for n, p in self.named_parameters()],
            [(n, id(b)) for n, b in self.named_buffers()],
            list(self.state_dict()),
            len(list(self.parameters())),
        )


def test_parameters_and_state_dict_do_not_change_during_a_step() -> None:
    model = Spy()
    before = model.snapshot()
    stream = StreamingModule(model)
    streamed(stream, torch.randn(1, 1, 12), [1, 4, 7])
    assert len(model.seen) > 3
    assert all(seen == before for seen in model.seen)
    assert model.snapshot() == before


class Recurrent(nn.Module):
    """A causal conv, then an LSTM/GRU/RNN called in one of the forms torch accepts, from a
    learned initial state where ``hx`` is passed."""

    def __init__(self, kind: str, form: str, batch_first: bool) -> None:
        super().__init__()
        self.kind, self.form, self.batch_first = kind, form, batch_first
        self.conv = pn.Conv1d(2, 3, 3, padding="causal")
        cls = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}[kind]
        self.rnn = cls(3, 4, 2, batch_first=batch_first)
        self.h0 = nn.Parameter(torch.randn(2, 1, 4))

    def forward(self, x: Tensor) -> Tensor:
        y = self.conv(x)
        y = y.transpose(1, 2) if self.batch_first else y.permute(2, 0, 1)
        n = x.shape[0]
        h = self.h0.expand(2, n, 4).contiguous()
        hx: Any = (h, torch.tanh(h).contiguous()) if self.kind == "lstm" else h
        self.rnn.flatten_parameters()  # speech code calls it in forward
        if self.form == "x":
            out = self.rnn(y)[0]
        elif self.form == "x, hx":
            out = self.rnn(y, hx)[0]
        elif self.form == "input=, hx=":
            out = self.rnn(input=y, hx=hx)[0]
        else:  # "x, hx=None"
            out = self.rnn(y, hx=None)[0]
        return out.transpose(1, 2) if self.batch_first else out.permute(1, 2, 0)


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn"])
@pytest.mark.parametrize("form", ["x", "x, hx", "input=, hx=", "x, hx=None"])
@pytest.mark.parametrize("batch_first", [True, False], ids=["batch-first", "time-major"])
def test_recurrent_stand_ins_take_every_call_form(kind: str, form: str, batch_first: bool) -> None:
    torch.manual_seed(3)
    stream = assert_streams(Recurrent(kind, form, batch_first), torch.randn(3, 2, 17))
    if "hx" in form and form != "x, hx=None":
        state = stream.init_state(3)
        assert "rnn.pos" in state  # where the model's hx starts each row
        # a restarted row starts again from the model's own initial state
        x = torch.randn(3, 2, 9, dtype=torch.float64)
        _, state = stream.step(x[..., :4], state)
        b, _ = stream.step(x[..., 4:], stream.reset_rows(state, [1]))
        with torch.no_grad():
            alone = stream.model(x[1:2, :, 4:])
        torch.testing.assert_close(b[1:2], alone, rtol=0, atol=ATOL)


class Unbatched(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = pn.Conv1d(2, 3, 3, padding="causal")
        self.lstm = nn.LSTM(3, 4)

    def forward(self, x: Tensor) -> Tensor:
        y = self.conv(x)[0].t()  # (T, C): unbatched
        out, _ = self.lstm(y, (y.new_ones(1, 4), y.new_zeros(1, 4)))
        return out.t().unsqueeze(0)


def test_unbatched_recurrent_call_streams() -> None:
    torch.manual_seed(4)
    assert_streams(Unbatched(), torch.randn(1, 2, 15))


def test_packed_sequences_are_refused_clearly() -> None:
    class Packed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gru = nn.GRU(2, 2, batch_first=True)

        def forward(self, x: Tensor) -> Tensor:
            y = x.transpose(1, 2)
            packed = nn.utils.rnn.pack_padded_sequence(y, [y.shape[1]], batch_first=True)
            out = nn.utils.rnn.pad_packed_sequence(self.gru(packed)[0], batch_first=True)[0]
            return out.transpose(1, 2)

    with pytest.raises(PaddingError, match="GRU 'gru' was called with a PackedSequence"):
        first_step(StreamingModule(Packed(), check=False), torch.randn(1, 2, 6))


@pytest.mark.filterwarnings("ignore:.*weight_norm.* is deprecated:FutureWarning")
def test_deepcopy_pickle_and_state_dict_of_a_stream() -> None:
    torch.manual_seed(5)
    model = ReadsAttributes(old_weight_norm(_causal())).double().eval()
    stream = StreamingModule(model)
    x = torch.randn(1, 2, 20, dtype=torch.float64)
    keys = set(stream.state_dict())
    assert keys == {f"model.{k}" for k in model.state_dict()}
    copied = pickle.loads(pickle.dumps(stream))  # old-style weight norm does not deep-copy
    buffer = io.BytesIO()
    torch.save(stream.state_dict(), buffer)
    buffer.seek(0)
    copied.load_state_dict(torch.load(buffer, weights_only=True))
    torch.testing.assert_close(streamed(copied, x, [3, 17]), model(x), rtol=0, atol=ATOL)
    # the copy's stand-ins stand for the copy's layers, not the original's
    with torch.no_grad():
        model.conv.conv.weight_g.mul_(2.0)
    torch.testing.assert_close(streamed(stream, x, [3, 17]), model(x), rtol=0, atol=ATOL)
    assert not torch.allclose(streamed(copied, x, [3, 17]), model(x))
    other = ReadsAttributes(new_weight_norm(_causal())).double().eval()
    deep = copy.deepcopy(StreamingModule(other))
    assert deep.model is not other
    torch.testing.assert_close(streamed(deep, x, [1] * 20), other(x), rtol=0, atol=ATOL)


# ----------------------------------------------------------------------------- item 4: measured


class Snake(nn.Module):
    """x + 1/alpha * sin(alpha * x)^2, alpha per channel: a per-time-step activation with
    parameters that no list names."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.rand(1, channels, 1) + 0.5)

    def forward(self, x: Tensor) -> Tensor:
        return x + (self.alpha + 1e-9).reciprocal() * torch.sin(self.alpha * x).pow(2)


class ChannelLayerNorm(nn.Module):
    """A layer norm over the channels of (N, C, T), done by transposes."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(channels)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(x.transpose(1, 2)).transpose(1, 2)


class ScaleList(nn.Module):
    """The issue's ParameterList case: a per-channel scale kept in an nn.ParameterList."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.p = nn.ParameterList([nn.Parameter(torch.randn(channels))])

    def forward(self, x: Tensor) -> Tensor:
        return x * self.p[0].view(1, -1, 1)


def per_step_model(last: nn.Module, **conv: Any) -> nn.Module:
    return nn.Sequential(
        pn.Conv1d(2, 4, 3, padding=conv.get("padding", "causal")),
        last,
        pn.Conv1d(4, 2, 3, padding=conv.get("padding", "causal"), dilation=2),
    )


PER_STEP: list[tuple[str, Callable[[], nn.Module]]] = [
    ("snake", lambda: Snake(4)),
    ("channel-layer-norm", lambda: ChannelLayerNorm(4)),
    ("parameter-list", lambda: ScaleList(4)),
    ("instance-norm-running-stats", lambda: nn.InstanceNorm1d(4, track_running_stats=True)),
]


@pytest.mark.parametrize("make", [m for _, m in PER_STEP], ids=[i for i, _ in PER_STEP])
@pytest.mark.parametrize("lookahead", [None, "auto"], ids=["causal", "lookahead"])
def test_per_time_step_modules_are_measured_and_stream_without_allow(
    make: Callable[[], nn.Module], lookahead: str | None
) -> None:
    torch.manual_seed(6)
    last = make()
    if isinstance(last, nn.InstanceNorm1d):
        assert last.running_mean is not None and last.running_var is not None
        last.running_mean.uniform_(-1, 1)
        last.running_var.uniform_(0.5, 2)
    padding = "same" if lookahead else "causal"
    model = per_step_model(last, padding=padding)
    assert_streams(model, torch.randn(2, 2, 29), lookahead=lookahead)


class HandAtt(nn.Module):
    """The issue's reproducer: a conv, then attention over all frames written by hand."""

    def __init__(self, padding: Any = 1) -> None:
        super().__init__()
        self.conv = (
            nn.Conv1d(2, 2, 3, padding=padding)
            if padding == 1
            else pn.Conv1d(2, 2, 3, padding=padding)
        )
        self.q = nn.Linear(2, 2)

    def forward(self, x: Tensor) -> Tensor:
        y = self.conv(x).transpose(1, 2)
        return (torch.softmax(self.q(y) @ y.transpose(1, 2), -1) @ y).transpose(1, 2)


def test_hand_written_attention_is_refused_in_lookahead_mode() -> None:
    torch.manual_seed(7)
    stream = StreamingModule(HandAtt().double(), lookahead="auto")
    with pytest.raises(
        PaddingError,
        match=r"HandAtt '<model>' streams values that differ.*output 0 depends on input \d+.*"
        r"beyond the stream's lookahead of 1",
    ):
        first_step(stream, torch.randn(1, 2, 20, dtype=torch.float64))


def test_hand_written_attention_is_refused_in_causal_mode() -> None:
    stream = StreamingModule(HandAtt(padding="causal").double())
    with pytest.raises(PaddingError, match=r"HandAtt '<model>'.*output 0 depends on input"):
        first_step(stream, torch.randn(1, 2, 20, dtype=torch.float64))


class SeqNorm(nn.Module):
    """A norm over the whole sequence, by hand."""

    def forward(self, x: Tensor) -> Tensor:
        mean = x.mean(-1, keepdim=True)
        return (x - mean) / (x.var(-1, keepdim=True, unbiased=False) + 1e-5).sqrt()


class ConvThenNorm(nn.Module):
    def __init__(self, norm: nn.Module, padding: Any = 1) -> None:
        super().__init__()
        self.conv = (
            nn.Conv1d(2, 2, 3, padding=1) if padding == 1 else pn.Conv1d(2, 2, 3, padding=padding)
        )
        self.norm = norm

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.conv(x))


NORMS: list[tuple[str, Callable[[], nn.Module], list[Any]]] = [
    ("hand", SeqNorm, []),
    ("hand-allowed-by-name", SeqNorm, ["norm"]),
    ("hand-allowed-by-type", SeqNorm, [SeqNorm]),
    ("instance-norm-allowed", lambda: nn.InstanceNorm1d(2), ["norm"]),
    ("softmax-over-time", lambda: nn.Softmax(dim=-1), []),
]


@pytest.mark.parametrize("make, allow", [(m, a) for _, m, a in NORMS], ids=[i for i, _, _ in NORMS])
@pytest.mark.parametrize("lookahead", [None, "auto"], ids=["causal", "lookahead"])
def test_norms_over_the_whole_sequence_are_refused_with_the_dependency_measured(
    make: Callable[[], nn.Module], allow: list[Any], lookahead: str | None
) -> None:
    torch.manual_seed(8)
    norm = make()
    model = ConvThenNorm(norm, padding=1 if lookahead else "causal").double().eval()
    stream = StreamingModule(model, lookahead=lookahead, allow=allow)
    match = (
        rf"cannot stream {type(norm).__name__} 'norm': measured .*output 0 depends on input"
        r" \d+.*, and output \d+ on input 0: it mixes time steps in both directions"
    )
    if allow:
        match += ".*declared in allow="
    x = torch.randn(1, 2, 20, dtype=torch.float64)
    with pytest.raises(PaddingError, match=match):
        first_step(stream, x)
    with pytest.raises(PaddingError, match=match):  # verify() runs the same check
        stream.verify(x, [1] * 20)


def test_a_norm_over_a_fixed_time_length_is_refused_naming_it() -> None:
    # LayerNorm(20) on (N, C, T) normalises over time and runs at T = 20 only
    model = ConvThenNorm(nn.LayerNorm(20), padding="causal").double()
    x = torch.randn(1, 2, 20, dtype=torch.float64)
    with pytest.raises(PaddingError, match=r"init_state\(\): LayerNorm 'norm' raised"):
        first_step(StreamingModule(model), x)
    with pytest.raises(PaddingError, match=r"LayerNorm 'norm' fails on a streamed chunk of 1"):
        StreamingModule(model).step(x, {})


class CumSum(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return torch.cumsum(x, -1)


class CumSumInline(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = pn.Conv1d(1, 1, 3, padding="causal")

    def forward(self, x: Tensor) -> Tensor:
        return torch.cumsum(self.conv(x), -1) / 4


def test_a_cumulative_op_streams_carried_in_a_module_and_is_refused_beside_a_conv() -> None:
    """``torch.cumsum`` in a module of its own streams with its running sum carried (equal
    to the full run); written in a forward that also runs a streamed conv, it cannot be
    carried apart from the conv and is refused with the dependency measured."""
    x = torch.randn(1, 1, 20, dtype=torch.float64)
    model = nn.Sequential(pn.Conv1d(1, 1, 3, padding="causal"), CumSum()).double()
    leaf = StreamingModule(model)
    state = leaf.init_state(example=x[..., :1])
    outs = []
    for chunk in x.split([1, 7, 3, 9], -1):
        y, state = leaf.step(chunk, state)
        outs.append(y)
    torch.testing.assert_close(torch.cat(outs, -1), model(x).detach())
    assert set(leaf._cumulative) == {"1"}
    inline = StreamingModule(CumSumInline().double())
    with pytest.raises(
        PaddingError, match=r"CumSumInline '<model>' streams values.*output \d+ depends on input 0"
    ):
        first_step(inline, x)


def test_a_module_that_cannot_be_measured_is_a_question_naming_it() -> None:
    class Noise(nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            return x + 0.1 * torch.randn_like(x)

    class Holder(nn.Module):  # computes, and holds its parameters in a ParameterList
        def __init__(self) -> None:
            super().__init__()
            self.p = nn.ParameterList([nn.Parameter(torch.ones(1))])
            self.noise = Noise()

        def forward(self, x: Tensor) -> Tensor:
            return self.noise(x * self.p[0])

    model = nn.Sequential(pn.Conv1d(1, 1, 3, padding="causal"), Holder())
    with pytest.raises(
        PaddingError,
        match=r"does not know whether Noise '1.noise' acts on each time step.*random.*"
        r"allow=\[Noise\]",
    ):
        first_step(StreamingModule(model), torch.randn(1, 1, 8))
    # declared: trusted (and, random, it cannot pass the streamed comparison: check=False)
    stream = StreamingModule(model, allow=["1.noise"], check=False)
    first_step(stream, torch.randn(1, 1, 8))


class ReflectWrapper(nn.Module):
    """Pads with F.pad(mode="reflect") before its conv: needs 2 samples per call."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 1, 3)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(F.pad(x, (1, 1), mode="reflect"))


def test_a_pad_that_needs_a_minimum_length_gives_padkit_errors_only() -> None:
    stream = StreamingModule(ReflectWrapper())
    state = stream.init_state(example=torch.zeros(1, 1, 1))  # probes longer lengths
    assert set(state) == {"conv.buf", "conv.pos"}
    with pytest.raises(PaddingError, match=r"ReflectWrapper '<model>'"):
        stream.step(torch.randn(1, 1, 1), state)
    look = StreamingModule(ReflectWrapper(), lookahead="auto")
    with pytest.raises(PaddingError, match=r"ReflectWrapper '<model>' fails.*convert_causal"):
        look.step(torch.randn(1, 1, 1), look.init_state(example=torch.zeros(1, 1, 1)))
    unchecked = StreamingModule(ReflectWrapper(), check=False)
    with pytest.raises(
        PaddingError,
        match=r"step\(\): ReflectWrapper '<model>' raised RuntimeError.*chunk of 1 sample",
    ):
        unchecked.step(torch.randn(1, 1, 1), unchecked.init_state(example=torch.zeros(1, 1, 1)))


class Picky(nn.Module):
    """Accepts lengths that are multiples of 4 only (as moshi's convs assert)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = pn.Conv1d(1, 1, 3, padding="causal")

    def forward(self, x: Tensor) -> Tensor:
        assert x.shape[-1] % 4 == 0, "length must be a multiple of 4"
        return self.conv(x)


def test_what_the_model_raises_comes_out_as_a_padkit_error_naming_the_module() -> None:
    model = nn.Sequential(nn.ReLU(), Picky())
    stream = StreamingModule(model, check=False)
    state = stream.init_state(example=torch.zeros(1, 1, 1))  # tries 4
    with pytest.raises(
        PaddingError,
        match=r"step\(\): Picky '1' raised AssertionError: length must be a multiple of 4 on "
        r"a chunk of 3 sample\(s\) \(its input: shape \(1, 1, 3\)\)",
    ):
        stream.step(torch.zeros(1, 1, 3), state)
    y, state = stream.step(torch.zeros(1, 1, 8), state)
    assert y.shape == (1, 1, 8)
    with pytest.raises(PaddingError, match=r"Picky '1' fails on a streamed chunk of 1"):
        StreamingModule(model).step(torch.zeros(1, 1, 4), state)

    class Never(nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            raise ValueError("no length is right")

    refused = StreamingModule(nn.Sequential(pn.Conv1d(1, 1, 3, padding="causal"), Never()))
    with pytest.raises(
        PaddingError, match=r"init_state\(\): Never '1' raised ValueError.*every length tried"
    ):
        refused.init_state(example=torch.zeros(1, 1, 1))
    with pytest.raises(PaddingError, match=r"runs at none of the probe lengths.*Never '1'"):
        refused.step(torch.zeros(1, 1, 2), {})


class Counting(nn.Module):
    """Updates a buffer in its forward, and holds a BatchNorm with running statistics."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = pn.Conv1d(2, 2, 3, padding="causal")
        self.bn = nn.BatchNorm1d(2)
        self.snake = Snake(2)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: Tensor) -> Tensor:
        self.calls += 1
        return self.snake(self.bn(self.conv(x)))


@pytest.mark.parametrize("lookahead", [None, "auto"], ids=["causal", "lookahead"])
def test_the_self_check_leaves_parameters_and_buffers_as_they_were(lookahead: str | None) -> None:
    torch.manual_seed(9)
    model = Counting().double().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
    before = {k: (v, v.clone()) for k, v in model.state_dict(keep_vars=True).items()}
    stream = StreamingModule(model, lookahead=lookahead)
    x = torch.randn(1, 2, 6, dtype=torch.float64)
    state = stream.init_state(example=x)
    stream.step(x, state)  # the probe runs first, then this one step
    after = model.state_dict(keep_vars=True)
    for k, (tensor, value) in before.items():
        assert after[k] is tensor
        if k != "calls":
            assert torch.equal(after[k], value), k
    assert float(model.calls) == 1  # the step only: neither init_state nor the probe counts


def test_lookahead_streams_exactly_with_its_self_check() -> None:
    torch.manual_seed(10)
    model = nn.Sequential(
        pn.Conv1d(2, 4, 5, padding="same"),
        ChannelLayerNorm(4),
        Snake(4),
        pn.Conv1d(4, 2, 3, padding="same", dilation=2),
    )
    stream = assert_streams(model, torch.randn(2, 2, 30), lookahead="auto")
    assert stream.delay == 4


# ----------------------------------------------------------------------------- (N, T, C) models


class TimeMajorBlock(nn.Module):
    """Takes (N, T, C), as speech toolkits do: a Linear, a conv behind an F.pad, a Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 8)
        self.conv = nn.Conv1d(8, 8, 3)
        self.out = nn.Linear(8, 4)

    def forward(self, x: Tensor) -> Tensor:
        h = self.inp(x).transpose(1, 2)
        h = self.conv(F.pad(h, (2, 0)))
        return self.out(h.transpose(1, 2))


def test_time_major_model_converts_and_streams_as_documented() -> None:
    torch.manual_seed(11)
    model = TimeMajorBlock().double().eval()
    x = torch.randn(1, 20, 4, dtype=torch.float64)
    new, _ = convert_causal(model, x, axis=-1, input_axis=1)
    stream = StreamingModule(new, axis=1)
    with torch.no_grad():
        full = model(x)
    for sizes in chunkings(20):
        torch.testing.assert_close(streamed(stream, x, sizes), full, rtol=0, atol=ATOL)
    assert stream.delay == 0


class Positional(nn.Module):
    """Adds an encoding of each step's position: per time step, but not the same on a chunk."""

    def forward(self, x: Tensor) -> Tensor:
        t = torch.arange(x.shape[-1], dtype=x.dtype, device=x.device)
        return x + torch.sin(t / 3.0)


def test_a_position_dependent_module_is_refused_even_without_the_comparison() -> None:
    model = nn.Sequential(pn.Conv1d(1, 1, 3, padding="causal"), Positional()).double()
    with pytest.raises(
        PaddingError,
        match=r"cannot stream Positional '1': .*run on its time steps \d+\.\.\d+ alone.*"
        r"positional encoding",
    ):
        first_step(StreamingModule(model, check=False), torch.randn(1, 1, 9, dtype=torch.float64))


class Sealed(pn.Conv1d):
    """A conv class that refuses subclasses: its stand-in keeps its attributes, not its class."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        raise TypeError("Sealed takes no subclasses")


class ReadsSealed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = Sealed(1, 2, 3, padding="causal")

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x) * self.conv.kernel_size[0] + self.conv.weight.sum()


def test_a_class_that_takes_no_subclasses_still_streams() -> None:
    torch.manual_seed(12)
    assert_streams(ReadsSealed(), torch.randn(1, 1, 13))


class NotReally(nn.ReLU):
    """A subclass of an elementwise class whose forward mixes time: measured, not trusted."""

    def forward(self, input: Tensor) -> Tensor:
        return torch.relu(input).flip(-1)


def test_a_subclass_overriding_an_elementwise_forward_is_measured() -> None:
    model = nn.Sequential(pn.Conv1d(1, 1, 3, padding="causal"), NotReally()).double()
    with pytest.raises(PaddingError, match=r"cannot stream NotReally '1': measured"):
        first_step(StreamingModule(model, check=False), torch.randn(1, 1, 9, dtype=torch.float64))


def test_an_empty_chunk_is_checked_like_any_other() -> None:
    # a layer fed an empty chunk returns its empty output without running, but only after
    # the chunk's channels and dtype were checked against the stream's state
    model = nn.Sequential(pn.Conv1d(2, 3, 3, padding="causal"), nn.ReLU()).eval()
    stream = StreamingModule(model)
    state = stream.init_state(example=torch.zeros(1, 2, 4))
    _, state = stream.step(torch.randn(1, 2, 4), state)
    y, after = stream.step(torch.zeros(1, 2, 0), state)
    assert tuple(y.shape) == (1, 3, 0)
    assert all(torch.equal(after[k], state[k]) for k in state)
    with pytest.raises(PaddingError, match="chunk has 5 channels"):
        stream.step(torch.zeros(1, 5, 0), state)
    with pytest.raises(PaddingError, match=r"chunk has dtype torch\.float64"):
        stream.step(torch.zeros(1, 2, 0, dtype=torch.float64), state)


class Conv2dSubsampling(nn.Module):
    """A speech front end on ``(N, T, F)`` features: 2-d convs over (time, frequency) at
    stride 2, unpadded (the layout of ESPnet's and WeNet's subsampling), then a Linear over
    channels and frequencies."""

    def __init__(self, f: int, d: int) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv2d(1, d, 3, 2), nn.ReLU(), nn.Conv2d(d, d, 3, 2), nn.ReLU()
        )
        self.out = nn.Linear(d * (((f - 1) // 2 - 1) // 2), d)

    def forward(self, x: Tensor) -> Tensor:
        h = self.conv(x.unsqueeze(1))
        n, c, t, f = h.shape
        return self.out(h.transpose(1, 2).reshape(n, t, c * f))


class Unsqueezed(nn.Module):
    """``inner`` on ``(N, T, F)`` features as ``(N, 1, T, F)``, its output back to
    ``(N, T, C * F)``."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: Tensor) -> Tensor:
        h = self.inner(x.unsqueeze(1))
        n, c, t, f = h.shape
        return h.transpose(1, 2).reshape(n, t, c * f)


def test_the_convs_time_axis_is_measured_where_the_model_moves_it() -> None:
    """(N, T, F) features unsqueezed to (N, 1, T, F) for 2-d convs: their time axis is axis
    2 of their input, not the last (the frequencies), found in two full runs with no
    ``layer_axis=`` (the default taken before gave them the frequency axis: the first step
    raised on a state's shape). A given ``layer_axis`` is kept; a copy streams the same."""
    torch.manual_seed(61)
    model = nn.Sequential(Conv2dSubsampling(20, 8), nn.Linear(8, 4))
    x = torch.randn(2, 45, 20)
    stream = assert_streams(model, x, axis=1)
    assert {stream._plans[n].ti for n in ("0.conv.0", "0.conv.2")} == {0}
    twin = copy.deepcopy(stream)
    xd = x.double()
    with torch.no_grad():
        full = model(xd)
    torch.testing.assert_close(streamed(twin, xd, [5] * 9), full, rtol=0, atol=ATOL)
    # a pad module over (time, frequency): its time axis measured too, padded at the start
    padded = nn.Sequential(nn.ConstantPad2d((1, 1, 2, 0), 0.0), nn.Conv2d(1, 4, 3))
    stream = assert_streams(Unsqueezed(padded), x, axis=1)
    assert stream._start_pads["inner.0"].lo == 2
    # 'same' over the frequencies (a right pad on the axis taken by default) streams once
    # time is measured; a right pad on the measured time axis is refused at the first step
    same_f = Unsqueezed(pn.Conv2d(1, 2, 3, padding=(("causal"), 1)))
    assert_streams(same_f, x, axis=1)
    same_t = StreamingModule(Unsqueezed(nn.Conv2d(1, 2, 3, padding=(1, 0))), axis=1)
    with pytest.raises(PaddingError, match=r"'inner' pads the time axis \(axis 2\) with \(1, 1\)"):
        first_step(same_t, x.float())
    given = StreamingModule(model, axis=1, layer_axis=-1)
    with pytest.raises(PaddingError):
        first_step(given, xd)
    assert given._plans["0.conv.0"].ti == 1


class CausalUpsampler(nn.Module):
    """parallel_wavegan's ``CausalConvTranspose1d``: the input's first sample replicated
    once, a transposed conv, ``stride`` outputs cropped at each end."""

    def __init__(self, cin: int, cout: int, k: int, s: int) -> None:
        super().__init__()
        self.pad = nn.ReplicationPad1d((1, 0))
        self.deconv = nn.ConvTranspose1d(cin, cout, k, s)
        self.stride = s

    def forward(self, x: Tensor) -> Tensor:
        return self.deconv(self.pad(x))[:, :, self.stride : -self.stride]


def test_pad_modules_pad_the_stream_start_only() -> None:
    """A replicated first sample before a transposed conv (no conv pad expresses it) and a
    constant 0.5 pad before a conv (a conv pads with zeros) stay pad modules after
    convert_causal, and stream by padding the stream's first samples once; a pad of the
    frequency axis only pads every chunk. Rows start together: reset_rows of part of the
    batch, and lookahead, are refused."""
    torch.manual_seed(71)
    model = (
        nn.Sequential(
            nn.Conv1d(2, 4, 1),
            CausalUpsampler(4, 4, 8, 4),
            nn.ELU(),
            nn.ConstantPad1d((3, 0), 0.5),
            nn.Conv1d(4, 2, 4),
        )
        .double()
        .eval()
    )
    x = torch.randn(2, 2, 13, dtype=torch.float64)
    new, report = convert_causal(model, x)
    assert "whose pads crop its output instead" in str(report)
    assert "pads with the constant 0.5" in str(report)
    stream = assert_streams(new, x)
    with torch.no_grad():
        full = new(x)
    twin = pickle.loads(pickle.dumps(copy.deepcopy(stream)))
    torch.testing.assert_close(streamed(twin, x, [5, 0, 8]), full, rtol=0, atol=ATOL)
    state = stream.init_state(example=x[..., :1])
    _, state = stream.step(x[..., :3], state)
    with pytest.raises(PaddingError, match=r"reset_rows\(\).*at the stream's start only"):
        stream.reset_rows(state, [0])
    with pytest.raises(PaddingError, match=r"step_module\(\).*first step returns 1 more"):
        stream.step_module(x[..., :4])
    with pytest.raises(
        PaddingError,
        match=r"ReplicationPad1d '1.pad' with lookahead: it pads the stream's start by 1",
    ):
        StreamingModule(new, lookahead="auto").init_state(example=x[..., :1])
    # (N, 1, F, T): a pad of the frequencies only, then a conv causal over time
    spectro = nn.Sequential(
        nn.ZeroPad2d((0, 0, 1, 1)), pn.Conv2d(1, 3, (3, 2), padding=(0, "causal"))
    )
    assert_streams(spectro, torch.randn(2, 1, 6, 17))
