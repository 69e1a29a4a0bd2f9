"""padkit.streaming: chunked runs equal the full-sequence run of the same model.

Every check feeds a sequence in chunks (random sizes from hypothesis, including empty chunks,
one-sample chunks and chunks shorter than a stride) and compares the concatenated outputs
with ``model(x)`` on the whole sequence. The export tests run the exported step in
onnxruntime, threading the state by hand; the CausalConvWithState test runs the ONNX
opset-27 operator's reference implementation (and onnxruntime's kernel).
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Callable, Sequence

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st
from torch import Tensor, nn
from torch.nn.utils.parametrizations import weight_norm

import padkit.nn as pn
from padkit import PaddingError
from padkit.streaming import StreamingModule

torch.set_num_threads(1)


def chunkings(n: int, max_cuts: int = 8) -> st.SearchStrategy[list[int]]:
    """Chunk sizes summing to ``n``; zeros allowed."""
    cuts = st.lists(st.integers(0, n), max_size=max_cuts)
    return cuts.map(lambda c: [b - a for a, b in zip([0, *sorted(c)], [*sorted(c), n])])


def stream(sm: StreamingModule, x: Tensor, sizes: Sequence[int], dim: int = -1) -> list[Tensor]:
    state = sm.init_state(example=x.narrow(dim, 0, 1))
    outs = []
    with torch.no_grad():
        for chunk in torch.split(x, list(sizes), dim=dim):
            y, state = sm.step(chunk, state)
            outs.append(y)
    return outs


def assert_streams(
    model: nn.Module, x: Tensor, sizes: Sequence[int], axis: int = -1, **kw: float
) -> list[Tensor]:
    sm = StreamingModule(model, axis=axis)
    with torch.no_grad():
        full = model(x)
    outs = stream(sm, x, sizes, axis)
    got = torch.cat(outs, dim=axis)
    assert got.shape == full.shape
    torch.testing.assert_close(got, full, rtol=kw.get("rtol", 1e-5), atol=kw.get("atol", 1e-6))
    return outs


# ----------------------------------------------------------------------------- single layers


@settings(max_examples=30, deadline=None)
@given(
    k=st.integers(1, 5),
    s=st.integers(1, 4),
    d=st.integers(1, 3),
    rule=st.sampled_from(["causal", "causal_block", "valid", "lo2", "lo7"]),
    data=st.data(),
)
def test_conv1d_any_chunking_and_no_extra_latency(
    k: int, s: int, d: int, rule: str, data: st.DataObject
) -> None:
    k_eff = d * (k - 1) + 1
    if rule == "causal_block" and k_eff < s:
        return
    padding = ((int(rule[2:]), 0),) if rule.startswith("lo") else rule
    conv = pn.Conv1d(2, 3, k, stride=s, dilation=d, padding=padding, groups=1).eval()
    n = data.draw(st.integers(k_eff + s, 30), label="n")
    sizes = data.draw(chunkings(n), label="sizes")
    x = torch.randn(2, 2, n)
    outs = assert_streams(conv, x, sizes)
    # each output comes out with the chunk that completes its window: the outputs so far
    # equal the full run on the prefix seen so far
    seen = 0
    done = 0
    for size, out in zip(sizes, outs):
        seen += size
        done += out.shape[-1]
        lo = conv.resolved_padding()[0][0]
        expect = 0 if seen == 0 or seen + lo < k_eff else (seen + lo - k_eff) // s + 1
        assert done == expect


@settings(max_examples=25, deadline=None)
@given(
    kind=st.sampled_from(["max", "avg", "avg_excl", "lp"]),
    k=st.integers(1, 4),
    s=st.integers(1, 3),
    d=st.integers(1, 2),
    rule=st.sampled_from(["causal", "causal_block"]),
    data=st.data(),
)
def test_pools_any_chunking(
    kind: str, k: int, s: int, d: int, rule: str, data: st.DataObject
) -> None:
    k_eff = d * (k - 1) + 1
    if rule == "causal_block" and k_eff < s:
        return
    pool: nn.Module
    if kind == "max":
        pool = pn.MaxPool1d(k, s, padding=rule, dilation=d)
    elif kind == "lp":
        pool = pn.LPPool1d(2, k, s, padding=rule, dilation=d)
    else:
        pool = pn.AvgPool1d(k, s, padding=rule, dilation=d, count_include_pad=(kind == "avg"))
    n = data.draw(st.integers(k_eff + s, 25), label="n")
    x = torch.randn(1, 3, n).abs() if kind == "lp" else torch.randn(1, 3, n)
    assert_streams(pool, x, data.draw(chunkings(n), label="sizes"))


def test_plain_torch_layers_stream() -> None:
    """torch's own convs and pools with no time padding (pointwise, valid, strided)."""
    model = nn.Sequential(
        nn.Conv1d(2, 4, 1),
        nn.Conv1d(4, 4, 3),  # valid: delayed, still exact
        nn.MaxPool1d(2),
        nn.AvgPool1d(3, 1),
        nn.LPPool1d(2, 2, 1),
        nn.Conv1d(4, 2, 1, stride=2),
    ).eval()
    x = torch.randn(2, 2, 41)
    for sizes in ([41], [1] * 41, [3, 0, 7, 1, 1, 29]):
        assert_streams(model, x, sizes)


# ----------------------------------------------------------------------------- whole models


class TemporalBlock(nn.Module):
    """The locuslab/TCN block, with padkit causal convs instead of pad + Chomp1d."""

    def __init__(self, c_in: int, c_out: int, k: int, d: int, dropout: float = 0.1) -> None:
        super().__init__()
        self.conv1 = weight_norm(pn.Conv1d(c_in, c_out, k, dilation=d, padding="causal"))
        self.conv2 = weight_norm(pn.Conv1d(c_out, c_out, k, dilation=d, padding="causal"))
        self.net = nn.Sequential(nn.ReLU(), nn.Dropout(dropout))
        self.down = nn.Conv1d(c_in, c_out, 1) if c_in != c_out else None
        self.relu = nn.ReLU()

    def forward(self, x: Tensor) -> Tensor:
        y = self.net(self.conv2(self.net(self.conv1(x))))
        res = x if self.down is None else self.down(x)
        return self.relu(y + res)


class TCN(nn.Module):
    def __init__(self, c_in: int = 2, hidden: int = 8, levels: int = 4, k: int = 3) -> None:
        super().__init__()
        blocks = [TemporalBlock(c_in if i == 0 else hidden, hidden, k, 2**i) for i in range(levels)]
        self.blocks = nn.ModuleList(blocks)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x: Tensor) -> Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x.transpose(1, 2)).transpose(1, 2)


class ResUnit(nn.Module):
    def __init__(self, c: int, d: int) -> None:
        super().__init__()
        self.block = nn.Sequential(
            nn.ELU(), pn.Conv1d(c, c, 3, dilation=d, padding="causal"), nn.ELU(), pn.Conv1d(c, c, 1)
        )

    def forward(self, x: Tensor) -> Tensor:
        return x + self.block(x)


def audio_encoder(causal_rule: str = "causal_block") -> nn.Sequential:
    """A SEANet/EnCodec-style encoder: residual units, strided convs of kernel 2*stride."""
    layers: list[nn.Module] = [pn.Conv1d(1, 4, 7, padding="causal")]
    c = 4
    for stride in (2, 3, 4):
        layers += [ResUnit(c, 1), ResUnit(c, 3)]
        layers += [nn.ELU(), pn.Conv1d(c, 2 * c, 2 * stride, stride=stride, padding=causal_rule)]
        c *= 2
    layers += [nn.ELU(), pn.Conv1d(c, 5, 3, padding="causal")]
    return nn.Sequential(*layers)


@settings(max_examples=8, deadline=None)
@given(sizes=chunkings(60, max_cuts=12))
def test_tcn_with_residual_blocks(sizes: list[int]) -> None:
    torch.manual_seed(0)
    model = TCN().eval()
    assert_streams(model, torch.randn(2, 2, 60), sizes)


@settings(max_examples=8, deadline=None)
@given(sizes=chunkings(96, max_cuts=14), rule=st.sampled_from(["causal", "causal_block"]))
def test_audio_encoder_strided(sizes: list[int], rule: str) -> None:
    torch.manual_seed(1)
    model = audio_encoder(rule).eval()
    assert_streams(model, torch.randn(1, 1, 96), sizes)


def test_audio_encoder_one_sample_at_a_time_is_bit_identical_or_rounding() -> None:
    torch.manual_seed(2)
    model = audio_encoder().eval()
    x = torch.randn(1, 1, 72)
    outs = assert_streams(model, x, [1] * 72)
    # total stride 24: an output every 24 samples, on the chunk that ends its block
    assert [i for i, o in enumerate(outs) if o.shape[-1]] == [24 * t + 23 for t in range(3)]


class CausalVideo(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        same3 = ("causal", "same", "same")
        self.stem = pn.Conv3d(3, 4, 3, padding=same3, padding_mode=("replicate", "zeros", "zeros"))
        self.down = pn.Conv3d(
            4,
            6,
            (4, 3, 3),
            stride=(2, 2, 2),
            padding=("causal_block", "same", "same"),
            padding_mode="replicate",
        )
        self.norm = nn.BatchNorm3d(6)
        self.pool = pn.AvgPool3d((2, 3, 3), 1, padding=same3, count_include_pad=False)
        self.mix = pn.Conv3d(6, 6, (3, 1, 1), dilation=(2, 1, 1), padding="causal")

    def forward(self, x: Tensor) -> Tensor:
        y = self.norm(self.down(F.silu(self.stem(x))))
        return y + self.mix(self.pool(y))


@settings(max_examples=6, deadline=None)
@given(sizes=chunkings(11, max_cuts=6))
def test_video_causal_time_same_space(sizes: list[int]) -> None:
    torch.manual_seed(3)
    model = CausalVideo().eval()
    with torch.no_grad():
        model.norm.running_mean.uniform_(-1, 1)
        model.norm.running_var.uniform_(0.5, 2)
    assert_streams(model, torch.randn(1, 3, 11, 9, 8), sizes, axis=2)


def test_spectrogram_conv2d_time_last() -> None:
    """(N, C, F, T): 'same' at stride 2 over frequency, causal over time (axis=-1)."""
    model = nn.Sequential(
        pn.Conv2d(1, 4, 3, stride=(2, 1), padding=("same", "causal")),
        nn.GELU(),
        pn.Conv2d(4, 4, (3, 4), stride=(1, 2), padding=("same", "causal_block")),
        pn.MaxPool2d((2, 3), (2, 1), padding=((0, 0), "causal")),
    ).eval()
    x = torch.randn(2, 1, 13, 30)
    assert_streams(model, x, [5, 1, 0, 2, 9, 13])


def test_root_layer_and_empty_first_chunks() -> None:
    conv = pn.Conv1d(2, 2, 3, stride=2, padding="causal")
    x = torch.randn(1, 2, 9)
    outs = assert_streams(conv, x, [0, 0, 1, 0, 8])
    assert [o.shape[-1] for o in outs] == [0, 0, 1, 0, 4]


# ----------------------------------------------------------------------------- the state


def test_state_is_plain_tensors_saved_resumed_and_not_mutated() -> None:
    torch.manual_seed(4)
    model = TCN().eval()
    sm = StreamingModule(model)
    x = torch.randn(1, 2, 40)
    state = sm.init_state(batch_size=1)
    assert all(isinstance(v, Tensor) for v in state.values())
    assert set(state) == {
        f"blocks.{i}.conv{j}.{w}" for i in range(4) for j in (1, 2) for w in ("buf", "pos")
    }
    assert state["blocks.3.conv1.buf"].shape == (1, 8, 2 * 8)
    with torch.no_grad():
        a, state = sm.step(x[..., :17], state)
        before = {k: v.clone() for k, v in state.items()}
        buffer = io.BytesIO()
        torch.save(state, buffer)
        b1, _ = sm.step(x[..., 17:], state)
        b2, _ = sm.step(x[..., 17:], state)  # the same state again: step does not mutate it
        assert all(torch.equal(before[k], state[k]) for k in state)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=True)
        b3, _ = sm.step(x[..., 17:], {k: v.to("cpu") for k, v in loaded.items()})
        full = model(x)
    torch.testing.assert_close(torch.cat([a, b1], -1), full)
    assert torch.equal(b1, b2) and torch.equal(b1, b3)


def test_deepcopy_and_pickle() -> None:
    import copy
    import pickle

    torch.manual_seed(9)
    sm = StreamingModule(TCN().eval())  # weight-norm parametrized: deepcopy only
    other = copy.deepcopy(sm)
    assert other.model is not sm.model
    assert other.verify(torch.randn(1, 2, 20), [5, 1, 14]) <= 1e-6
    sm = StreamingModule(audio_encoder().eval())
    other = pickle.loads(pickle.dumps(sm))
    assert other.verify(torch.randn(1, 1, 30), [5, 1, 24]) <= 1e-6


def test_init_state_from_example_equals_from_batch_size() -> None:
    sm = StreamingModule(TCN().eval())
    by_batch = sm.init_state(batch_size=3)
    by_example = sm.init_state(example=torch.zeros(3, 2, 5))
    assert by_batch.keys() == by_example.keys()
    assert all(torch.equal(by_batch[k], by_example[k]) for k in by_batch)


def test_state_dtype_and_reset_and_stateful_forward() -> None:
    torch.manual_seed(5)
    model = audio_encoder().eval().double()
    sm = StreamingModule(model)
    x = torch.randn(1, 1, 50, dtype=torch.float64)
    with torch.no_grad():
        full = model(x)
        for _ in range(2):  # the second pass after reset() starts a new stream
            outs = [sm(chunk) for chunk in torch.split(x, [7, 1, 13, 29], dim=-1)]
            torch.testing.assert_close(torch.cat(outs, -1), full, rtol=0, atol=1e-12)
            assert sm.state is not None
            assert all(v.dtype in (torch.float64, torch.int64) for v in sm.state.values())
            sm.reset()
            assert sm.state is None


def test_replicate_first_frame_state_is_filled_by_the_first_sample() -> None:
    conv = pn.Conv1d(1, 1, 3, padding="causal", padding_mode="replicate", bias=False)
    sm = StreamingModule(conv)
    state = sm.init_state(1)
    x = torch.tensor([[[5.0, 1.0, 2.0]]])
    with torch.no_grad():
        _, state = sm.step(x[..., :1], state)
        assert state["<model>.buf"].flatten().tolist() == [5.0, 5.0]
        y, state = sm.step(x[..., 1:], state)
    torch.testing.assert_close(y, conv(x)[..., 1:])


class ReflectResidual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = pn.Conv1d(4, 4, 3, dilation=2, padding="causal", padding_mode="reflect")

    def forward(self, x: Tensor) -> Tensor:
        return x + self.conv(torch.relu(x))  # type: ignore[no-any-return]


def reflect_model() -> nn.Module:
    torch.manual_seed(12)
    return nn.Sequential(
        pn.Conv1d(1, 4, 5, padding="causal", padding_mode="reflect"),  # reflects samples 1..4
        ReflectResidual(),  # 1..4 of its input, on one branch of the add
        pn.Conv1d(4, 4, 4, stride=2, padding="causal_block", padding_mode="reflect"),  # 1..2
        pn.Conv1d(4, 2, 4, padding="causal", padding_mode="reflect"),  # frames 1..3: 8 samples
    ).eval()


@pytest.mark.parametrize("sizes", [[1] * 20, [7, 7, 6], [3, 2, 9, 1, 5]])
def test_reflect_time_padding_streams_after_its_startup_delay(sizes: list[int]) -> None:
    model = reflect_model()
    x = torch.randn(2, 1, 20)
    with torch.no_grad():
        full = model(x)
    # the reference: reflect padding written out with F.pad before each unpadded conv
    ref = F.conv1d(F.pad(x, (4, 0), mode="reflect"), model[0].weight, model[0].bias)
    inner = F.pad(torch.relu(ref), (4, 0), mode="reflect")
    ref = ref + F.conv1d(inner, model[1].conv.weight, model[1].conv.bias, dilation=2)
    ref = F.conv1d(F.pad(ref, (2, 0), mode="reflect"), model[2].weight, model[2].bias, 2)
    ref = F.conv1d(F.pad(ref, (3, 0), mode="reflect"), model[3].weight, model[3].bias)
    torch.testing.assert_close(full, ref.detach(), rtol=1e-5, atol=1e-6)
    sm = StreamingModule(model)
    assert sm.reflect_layers == {"0": 4, "1.conv": 4, "2": 2, "3": 3}
    state = sm.init_state(example=x[..., :1])
    assert sm.startup_delay == 8  # the last conv's first window reads frames 0..3: 8 samples
    outs, seen, counts = [], 0, []
    with torch.no_grad():
        for chunk in x.split(sizes, -1):
            y, state = sm.step(chunk, state)
            outs.append(y)
            seen += chunk.shape[-1]
            counts.append(sum(o.shape[-1] for o in outs))
    torch.testing.assert_close(torch.cat(outs, -1), full, rtol=1e-5, atol=1e-6)
    # nothing before the start-up, then every output the samples seen complete
    assert counts == [0 if n < 8 else n // 2 for n in itertools.accumulate(sizes)]


def test_self_check_probes_past_a_long_startup() -> None:
    """A module slicing time in its forward behind a reflect conv whose start-up (31 samples)
    is longer than the usual probe is still named before the first step."""

    class Drop(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv1d(2, 2, 1)

        def forward(self, x: Tensor) -> Tensor:
            return self.conv(x)[..., 1:]  # type: ignore[no-any-return]

    model = nn.Sequential(pn.Conv1d(1, 2, 31, padding="causal", padding_mode="reflect"), Drop())
    sm = StreamingModule(model.eval())
    x = torch.randn(1, 1, 40)
    with pytest.raises(PaddingError, match="Drop '1' returned"):
        sm.step(x[..., :3], sm.init_state(example=x[..., :1]))
    assert sm.startup_delay == 31


def test_reflect_stream_forward_flush_and_reset_rows() -> None:
    model = reflect_model()
    sm = StreamingModule(model)
    x = torch.randn(3, 1, 16)
    with torch.no_grad():
        full = model(x)
        assert sm(x[..., :5]).shape == (3, 2, 0)  # held: the start-up needs 8 samples
        torch.testing.assert_close(
            torch.cat([sm(x[..., 5:9]), sm(x[..., 9:])], -1), full, rtol=1e-5, atol=1e-6
        )
        assert sm.verify(x, [2, 3, 11]) <= 1e-5
        # a sequence that ends during the start-up: flush runs the held samples as the full
        # run would, and here the last conv's reflect pad (3) needs 4 frames
        _, state = sm.step(x[..., :7], sm.init_state(example=x[..., :1]))
        with pytest.raises(PaddingError, match=r"'3' pads the time axis in mode 'reflect' by 3"):
            sm.flush(state)
        _, state = sm.step(x[..., :10], sm.init_state(example=x[..., :1]))
    with pytest.raises(PaddingError, match=r"restart part of a batch of 3.*first 8 samples"):
        sm.reset_rows(state, [2])
    with pytest.raises(PaddingError, match="restart part of a batch"):
        sm.reset(rows=[0])  # the state forward() keeps
    with torch.no_grad():
        state = sm.reset_rows(state, [0, 1, 2])
        torch.testing.assert_close(sm.step(x, state)[0], full, rtol=1e-5, atol=1e-6)


def test_verify_catches_branches_that_emit_at_different_times() -> None:
    class Misaligned(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.main = pn.Conv1d(1, 1, 4, stride=2, padding="causal_block")  # at 2t+1
            self.skip = pn.Conv1d(1, 1, 1, stride=2)  # at 2t

        def forward(self, x: Tensor) -> Tensor:
            return self.main(x) + self.skip(x)

    x = torch.randn(1, 1, 12)
    # the self-check before the first step names the module whose forward adds them
    with pytest.raises(PaddingError, match="Misaligned '<model>' fails on a streamed chunk"):
        StreamingModule(Misaligned()).step(x, {})
    sm = StreamingModule(Misaligned(), check=False)
    assert sm.verify(x, [12]) <= 1e-6
    with pytest.raises(PaddingError, match="verify"):
        sm.verify(x, [1] * 12)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_state_moves_between_devices() -> None:
    torch.manual_seed(6)
    model = TCN().eval()
    sm = StreamingModule(model)
    x = torch.randn(2, 2, 30)
    with torch.no_grad():
        full = model(x)
        a, state = sm.step(x[..., :11], sm.init_state(2))
        model.cuda()
        b, state = sm.step(x[..., 11:20].cuda(), {k: v.cuda() for k, v in state.items()})
        model.cpu()
        c, _ = sm.step(x[..., 20:], {k: v.cpu() for k, v in state.items()})
    torch.testing.assert_close(torch.cat([a, b.cpu(), c], -1), full, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- refusals


class Custom(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x * torch.sigmoid(x)


REFUSED: list[tuple[str, Callable[[], nn.Module], str]] = [
    ("same conv", lambda: nn.Sequential(pn.Conv1d(1, 1, 3, padding="same")), r"'0'.*right pad"),
    ("torch pad", lambda: nn.Sequential(nn.Conv1d(1, 1, 3, padding=1)), r"'0'.*\(1, 1\)"),
    (
        "circular time",
        lambda: pn.Conv1d(1, 1, 3, padding="causal", padding_mode="circular"),
        "mode 'circular'",
    ),
    ("group norm", lambda: nn.Sequential(nn.GroupNorm(1, 1)), "GroupNorm '0'"),
    ("global pool", lambda: nn.Sequential(nn.AdaptiveAvgPool1d(1)), "AdaptiveAvgPool1d '0'"),
    ("transposed", lambda: nn.Sequential(nn.ConvTranspose1d(1, 1, 2)), "ConvTranspose1d"),
    ("lstm", lambda: nn.Sequential(nn.LSTM(1, 1, bidirectional=True)), "LSTM '0'.*bidirectional"),
    ("lstm-cell", lambda: nn.Sequential(nn.LSTMCell(1, 1)), "LSTMCell '0'"),
    ("flatten", lambda: nn.Sequential(nn.Flatten()), "Flatten '0'"),
    (
        "right pad module",
        lambda: nn.Sequential(nn.ConstantPad1d((0, 2), 0.0)),
        r"ConstantPad1d '0'.*a right pad.*convert_causal\(model, example\) moves",
    ),
    (
        "reflect pad module",
        lambda: nn.Sequential(nn.ReflectionPad1d((2, 0))),
        r"ReflectionPad1d.*convert_causal\(model, example\) moves",
    ),
    ("indices", lambda: pn.MaxPool1d(2, return_indices=True), "return_indices"),
    ("ceil", lambda: nn.MaxPool1d(2, ceil_mode=True), "ceil_mode"),
    ("same stride", lambda: pn.Conv1d(1, 1, 3, 2, padding="same"), "depends on the sequence"),
]


@pytest.mark.parametrize(
    "make, match", [(m, r) for _, m, r in REFUSED], ids=[i for i, _, _ in REFUSED]
)
def test_refuses_non_causal_modules_by_name(make: Callable[[], nn.Module], match: str) -> None:
    # the model itself at construction; a module in it where the model calls it (the first
    # run on an example: init_state(example=...), verify, the first step)
    with pytest.raises(PaddingError, match=match):
        sm = StreamingModule(make())
        sm.init_state(example=torch.zeros(1, 1, 8))


@pytest.mark.parametrize(
    "make, match", [(m, r) for _, m, r in REFUSED], ids=[i for i, _, _ in REFUSED]
)
def test_a_refused_module_the_model_never_calls_refuses_nothing(
    make: Callable[[], nn.Module], match: str
) -> None:
    # a model that registers a module it does not call (a decoder built but not used, a
    # layer of another mode): the stream takes what the model computes
    class Holds(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = pn.Conv1d(1, 2, 3, dilation=2, padding="causal")
            self.unused = make()

        def forward(self, x: Tensor) -> Tensor:
            return torch.relu(self.conv(x))

    model = Holds().eval()
    x = torch.randn(2, 1, 23)
    sm = StreamingModule(model)
    assert sm.verify(x, [1, 7, 15]) <= 1e-6
    assert "unused" not in sm.explain()
    # called after all: refused there, with the module's name and reason
    model.forward = lambda x: model.unused(model.conv(x))  # type: ignore[method-assign]
    with pytest.raises(PaddingError, match=match.replace("'0'", "'unused.0'")):
        StreamingModule(model).init_state(example=torch.zeros(1, 1, 8))


def test_allow_declares_custom_per_step_modules() -> None:
    model = nn.Sequential(pn.Conv1d(1, 2, 3, padding="causal"), Custom()).eval()
    x = torch.randn(1, 1, 10)
    assert StreamingModule(model, allow=[Custom]).verify(x, [3, 3, 4]) <= 1e-6
    assert StreamingModule(model, allow=["1"]).verify(x, [3, 3, 4]) <= 1e-6
    # measured before the first step: it acts on each time step on its own, no allow= needed
    assert StreamingModule(model).verify(x, [3, 3, 4]) <= 1e-6


def test_refuses_batch_norm_in_train_mode_at_step_time() -> None:
    model = nn.Sequential(pn.Conv1d(1, 2, 3, padding="causal"), nn.BatchNorm1d(2))
    sm = StreamingModule(model)
    with pytest.raises(PaddingError, match="BatchNorm1d '1' in train mode"):
        sm.step(torch.zeros(2, 1, 4), sm.init_state(2))
    model.eval()
    assert sm.verify(torch.randn(2, 1, 9), [4, 5]) <= 1e-6


def test_refuses_hooks_overridden_forward_and_reused_layers() -> None:
    conv = pn.Conv1d(1, 1, 3, padding="causal")
    conv.register_forward_hook(lambda m, i, o: None)
    with pytest.raises(PaddingError, match="forward hooks"):
        StreamingModule(nn.Sequential(conv)).init_state(example=torch.zeros(1, 1, 8))

    class MyConv(pn.Conv1d):
        def forward(self, input: Tensor) -> Tensor:
            return super().forward(input) * 2

    with pytest.raises(PaddingError, match="overrides forward"):
        StreamingModule(MyConv(1, 1, 3, padding="causal"))

    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = pn.Conv1d(1, 1, 3, padding="causal")

        def forward(self, x: Tensor) -> Tensor:
            return self.conv(self.conv(x))

    sm = StreamingModule(Twice())
    with pytest.raises(PaddingError, match="ran twice"):
        sm.step(torch.zeros(1, 1, 4), sm.init_state(1))


def test_bad_arguments() -> None:
    conv = pn.Conv1d(2, 2, 3, padding="causal")
    with pytest.raises(TypeError, match="model"):
        StreamingModule("conv")  # type: ignore[arg-type]
    with pytest.raises(PaddingError, match="axis=0"):
        StreamingModule(conv, axis=0)
    with pytest.raises(PaddingError, match="layer_axis=1"):
        StreamingModule(conv, axis=1, layer_axis=1)
    with pytest.raises(PaddingError, match="axis=-2"):
        StreamingModule(conv, axis=-2)
    with pytest.raises(TypeError, match="axis"):
        StreamingModule(conv, axis=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="allow"):
        StreamingModule(conv, allow=[3])  # type: ignore[list-item]
    sm = StreamingModule(conv)
    state = sm.init_state(2)
    with pytest.raises(TypeError, match="chunk"):
        sm.step([1.0], state)  # type: ignore[arg-type]
    with pytest.raises(PaddingError, match="batched"):
        sm.step(torch.zeros(2, 5), state)
    with pytest.raises(TypeError, match="state"):
        sm.step(torch.zeros(2, 2, 5), [state])  # type: ignore[arg-type]
    with pytest.raises(PaddingError, match="no entry"):
        sm.step(torch.zeros(2, 2, 5), {})
    with pytest.raises(
        PaddingError,
        match=r"step\(\): chunk has batch size 3; this stream was initialised for batch size 2 "
        r"\(layer `<model>`, in_channels=2\).*init_state",
    ):
        sm.step(torch.zeros(3, 2, 5), state)
    with pytest.raises(PaddingError, match="batch_size"):
        sm.init_state(0)
    video = StreamingModule(pn.Conv3d(1, 1, 3, padding=("causal", "same", "same")), axis=2)
    with pytest.raises(PaddingError, match="example="):
        video.init_state(1)
    with pytest.raises(PaddingError, match="sum to"):
        sm.verify(torch.zeros(1, 2, 5), [2, 2])


# ----------------------------------------------------------------------------- export


def run_onnx_stream(
    path: str, names: list[str], state: dict[str, Tensor], chunks: list[Tensor]
) -> tuple[list[Tensor], list[Tensor]]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == ["chunk", *[f"state_in.{n}" for n in names]]
    values = [state[n].numpy() for n in names]
    outs = []
    for chunk in chunks:
        res = sess.run(
            None, {"chunk": chunk.numpy(), **{f"state_in.{n}": v for n, v in zip(names, values)}}
        )
        outs.append(torch.from_numpy(res[0]))
        values = res[1:]
    return outs, [torch.from_numpy(v) for v in values]


class ExportNet(nn.Module):
    """A TCN with a strided causal_block stage, a replicate-padded conv and an avg pool
    that excludes the causal padding: every kind of state the step threads."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = pn.Conv1d(2, 6, 3, padding="causal", padding_mode="replicate")
        self.blocks = nn.ModuleList(ResUnit(6, d) for d in (1, 2, 4))
        self.down = pn.Conv1d(6, 6, 4, stride=2, padding="causal_block")
        self.pool = pn.AvgPool1d(3, 1, padding="causal", count_include_pad=False)
        self.out = pn.Conv1d(6, 3, 2, padding="causal")

    def forward(self, x: Tensor) -> Tensor:
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.out(F.elu(self.pool(self.down(x))))


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_step_exports_to_onnx_with_state_and_matches_onnxruntime(tmp_path: object) -> None:
    torch.manual_seed(7)
    model = ExportNet().eval()
    sm = StreamingModule(model)
    length = 4
    x = torch.randn(1, 2, 40)
    state = sm.init_state(example=torch.zeros(1, 2, length))
    path = str(tmp_path) + "/step.onnx"  # type: ignore[operator]
    names = sm.export_onnx(path, torch.zeros(1, 2, length))
    chunks = list(torch.split(x, length, dim=-1))
    got, final = run_onnx_stream(path, names, state, chunks)
    with torch.no_grad():
        full = model(x)
        eager = stream(sm, x, [length] * 10)
        _, eager_state = sm.step(x, state)
    torch.testing.assert_close(torch.cat(got, -1), full, rtol=1e-5, atol=1e-5)
    for a, b in zip(got, eager):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    for name, value in zip(names, final):
        torch.testing.assert_close(value, eager_state[name], rtol=1e-5, atol=1e-5)
    # the batch is a graph dimension: the same file runs 3 streams
    x3 = torch.randn(3, 2, 24)
    state3 = sm.init_state(example=torch.zeros(3, 2, length))
    got3, _ = run_onnx_stream(path, names, state3, list(torch.split(x3, length, dim=-1)))
    with torch.no_grad():
        torch.testing.assert_close(torch.cat(got3, -1), model(x3), rtol=1e-5, atol=1e-5)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_onnx_step_dynamic_batch_and_length(tmp_path: object) -> None:
    """A stride-1 TCN exported with dynamic_length=True runs batches of 1 to 3 and chunks
    of 1, 3 and 7 samples; a strided model refuses a dynamic length."""
    path = str(tmp_path) + "/step.onnx"  # type: ignore[operator]
    with pytest.raises(PaddingError, match="dynamic_length=True"):
        StreamingModule(ExportNet()).export_onnx(path, torch.zeros(2, 2, 4), dynamic_length=True)
    tcn = TCN(levels=2).eval()
    st = StreamingModule(tcn)
    names = st.export_onnx(path, torch.zeros(2, 2, 4), dynamic_length=True)
    for n, length in ((1, 1), (3, 3), (2, 7)):
        x = torch.randn(n, 2, 4 * length)
        got, _ = run_onnx_stream(path, names, st.init_state(n), list(x.split(length, dim=-1)))
        with torch.no_grad():
            torch.testing.assert_close(torch.cat(got, -1), tcn(x), rtol=1e-5, atol=1e-5)


def test_step_module_refuses_a_chunk_length_that_changes_the_phase() -> None:
    sm = StreamingModule(audio_encoder().eval())
    with pytest.raises(PaddingError, match="multiple of the model's total stride"):
        sm.step_module(torch.zeros(1, 1, 12))
    step = sm.step_module(torch.zeros(1, 1, 48))
    assert len(step.state_names) == len(sm.init_state(1))


# ----------------------------------------------------------------------------- CausalConvWithState


@pytest.mark.parametrize("activation", ["none", "silu"])
def test_equals_onnx_causal_conv_with_state(activation: str) -> None:
    """The opset-27 CausalConvWithState operator is a depthwise, undilated causal conv whose
    past_state is padkit's buffer: same outputs and same state after every chunk."""
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, checker, helper
    from onnx.reference import ReferenceEvaluator

    channels, k = 5, 4
    node = helper.make_node(
        "CausalConvWithState",
        ["input", "weight", "bias", "past_state"],
        ["output", "present_state"],
        activation=activation,
    )
    f32 = TensorProto.FLOAT
    graph = helper.make_graph(
        [node],
        "causal_conv_with_state",
        [
            helper.make_tensor_value_info("input", f32, [2, channels, None]),
            helper.make_tensor_value_info("weight", f32, [channels, 1, k]),
            helper.make_tensor_value_info("bias", f32, [channels]),
            helper.make_tensor_value_info("past_state", f32, [2, channels, k - 1]),
        ],
        [
            helper.make_tensor_value_info("output", f32, [2, channels, None]),
            helper.make_tensor_value_info("present_state", f32, [2, channels, k - 1]),
        ],
    )
    onnx_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 27)])
    onnx_model.ir_version = 10
    checker.check_model(onnx_model)

    torch.manual_seed(8)
    conv = pn.Conv1d(channels, channels, k, padding="causal", groups=channels)
    model = nn.Sequential(conv, nn.SiLU()) if activation == "silu" else conv
    sm = StreamingModule(model)
    key = "0.buf" if activation == "silu" else "<model>.buf"
    x = torch.randn(2, channels, 14)
    weight = conv.weight.detach().numpy()
    bias = conv.bias.detach().numpy()  # type: ignore[union-attr]

    runners = [ReferenceEvaluator(onnx_model)]
    try:
        runners.append(
            ort.InferenceSession(onnx_model.SerializeToString(), providers=["CPUExecutionProvider"])
        )  # type: ignore[arg-type]
    except Exception as err:  # pragma: no cover - older onnxruntime without the kernel
        pytest.skip(f"onnxruntime cannot load CausalConvWithState: {err}")
    for runner in runners:
        state = sm.init_state(2)
        past = np.zeros((2, channels, k - 1), dtype=np.float32)
        outs = []
        for chunk in torch.split(x, [3, 1, 2, 6, 2], dim=-1):
            out, present = runner.run(
                None,
                {"input": chunk.numpy(), "weight": weight, "bias": bias, "past_state": past},
            )
            with torch.no_grad():
                y, state = sm.step(chunk, state)
            np.testing.assert_allclose(out, y.numpy(), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(present, state[key].numpy(), rtol=0, atol=0)
            past = present
            outs.append(y)
        with torch.no_grad():
            torch.testing.assert_close(torch.cat(outs, -1), model(x))


# ----------------------------------------------------------------------------- transposed convs


def codec() -> nn.Module:
    """Strided causal_block convs down (total stride 8), causal transposed convs up."""
    return nn.Sequential(
        pn.Conv1d(1, 6, 7, padding="causal"),
        nn.ELU(),
        pn.Conv1d(6, 8, 4, stride=2, padding="causal_block"),
        ResUnit(8, 2),
        nn.ELU(),
        pn.Conv1d(8, 12, 8, stride=4, padding="causal_block"),
        nn.ELU(),
        pn.ConvTranspose1d(12, 8, 8, stride=4, padding="causal"),
        ResUnit(8, 1),
        nn.ELU(),
        nn.ConvTranspose1d(8, 6, 2, stride=2),  # torch's own: k = s crops nothing, causal
        nn.ELU(),
        pn.Conv1d(6, 1, 7, padding="causal"),
    ).eval()


@settings(max_examples=10, deadline=None)
@given(sizes=chunkings(64, max_cuts=14))
def test_codec_encoder_decoder_streams_exactly(sizes: list[int]) -> None:
    torch.manual_seed(11)
    model = codec()
    x = torch.randn(2, 1, 64)
    outs = assert_streams(model, x, sizes)
    # each output comes with the chunk that completes its encoder frame: after n samples,
    # floor(n / 8) * 8 outputs
    seen = emitted = 0
    for size, out in zip(sizes, outs):
        seen, emitted = seen + size, emitted + out.shape[-1]
        assert emitted == seen // 8 * 8


def test_codec_one_sample_at_a_time_emits_a_frame_every_8_samples() -> None:
    torch.manual_seed(12)
    outs = assert_streams(codec(), torch.randn(1, 1, 40), [1] * 40)
    assert [i for i, o in enumerate(outs) if o.shape[-1]] == [8 * t + 7 for t in range(5)]
    assert {o.shape[-1] for o in outs} == {0, 8}


@settings(max_examples=20, deadline=None)
@given(
    k=st.integers(1, 6),
    s=st.integers(1, 4),
    d=st.integers(1, 2),
    crop_lo=st.integers(0, 2),
    sizes=chunkings(13, max_cuts=6),
)
def test_transposed_conv_any_chunking_with_explicit_crops(
    k: int, s: int, d: int, crop_lo: int, sizes: list[int]
) -> None:
    """Explicit crops (lo, hi) with hi >= k_eff - s stream (a left crop is a delay)."""
    k_eff = d * (k - 1) + 1
    hi = max(k_eff - s, 0) + 1
    up = pn.ConvTranspose1d(2, 3, k, stride=s, dilation=d, padding=((crop_lo, hi),))
    up.eval()
    x = torch.randn(1, 2, 13)
    if (13 - 1) * s + k_eff - crop_lo - hi <= 0:
        return
    assert_streams(up, x, sizes)


def test_transposed_conv2d_time_axis_first() -> None:
    """A spectrogram decoder: (N, C, T, F), causal on T, TF 'same' on F."""
    torch.manual_seed(13)
    up = pn.ConvTranspose2d(3, 2, (4, 3), stride=(2, 2), padding=("causal", "same")).eval()
    assert_streams(up, torch.randn(1, 3, 9, 5), [2, 0, 1, 4, 2], axis=2)


def test_transposed_conv_that_reads_ahead_is_refused() -> None:
    """torch's k=4, s=2, padding=1 upsampler: its last output exists only at the end."""
    with pytest.raises(PaddingError, match=r"last 1 output\(s\)"):
        StreamingModule(nn.ConvTranspose1d(1, 1, 4, stride=2, padding=1))
    # with lookahead it streams, its last output coming from flush()
    up = nn.ConvTranspose1d(1, 1, 4, stride=2, padding=1).double()
    sm = StreamingModule(up, lookahead="auto")
    assert sm.verify(torch.randn(1, 1, 9, dtype=torch.float64), [1] * 9) < 1e-12


# ----------------------------------------------------------------------------- lookahead


class ConvModule(nn.Module):
    """The Conformer convolution module, on (N, T, D): LayerNorm, pointwise + GLU,
    depthwise 'same' conv, BatchNorm, SiLU, pointwise; residual."""

    def __init__(self, dim: int, k: int, torch_same: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.pw1 = nn.Linear(dim, 2 * dim)
        self.glu = nn.GLU(dim=1)
        if torch_same:
            self.dw: nn.Module = nn.Conv1d(dim, dim, k, padding=(k - 1) // 2, groups=dim)
        else:
            self.dw = pn.Conv1d(dim, dim, k, padding="same", groups=dim)
        self.bn = nn.BatchNorm1d(dim)
        self.act = nn.SiLU()
        self.pw2 = nn.Conv1d(dim, dim, 1)

    def forward(self, x: Tensor) -> Tensor:
        h = self.glu(self.pw1(self.norm(x)).transpose(1, 2))
        h = self.pw2(self.act(self.bn(self.dw(h))))
        return x + h.transpose(1, 2)


class ConformerBlock(nn.Module):
    """Feed-forward, two conv modules ('same' depthwise k=7 and k=4), feed-forward, norm."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.ff1 = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, 2 * dim), nn.SiLU())
        self.ff1_out = nn.Linear(2 * dim, dim)
        self.conv_a = ConvModule(dim, 7, torch_same=True)
        self.conv_b = ConvModule(dim, 4, torch_same=False)
        self.pool = pn.MaxPool1d(3, 1, padding="same")
        self.ff2 = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim))
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: Tensor) -> Tensor:
        x = x + 0.5 * self.ff1_out(self.ff1(x))
        x = self.conv_b(self.conv_a(x))
        x = x + self.pool(x.transpose(1, 2)).transpose(1, 2)
        return self.norm(x + 0.5 * self.ff2(x))


def stream_lookahead(
    sm: StreamingModule, x: Tensor, sizes: Sequence[int], dim: int
) -> tuple[list[Tensor], Tensor]:
    state = sm.init_state(example=x.narrow(dim, 0, 1))
    outs = []
    with torch.no_grad():
        for chunk in torch.split(x, list(sizes), dim=dim):
            y, state = sm.step(chunk, state)
            outs.append(y)
        tail = sm.flush(state)
    return outs, tail


@settings(max_examples=10, deadline=None)
@given(sizes=chunkings(40, max_cuts=12))
def test_conformer_block_same_padding_streams_with_its_delay(sizes: list[int]) -> None:
    torch.manual_seed(21)
    block = ConformerBlock().eval()
    for m in block.modules():  # non-trivial running statistics
        if isinstance(m, nn.BatchNorm1d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    x = torch.randn(2, 40, 8)
    with pytest.raises(PaddingError, match="lookahead='auto'"):
        StreamingModule(block, axis=1).init_state(example=x[:, :1])
    sm = StreamingModule(block, axis=1, lookahead="auto")
    # k=7 'same' reads 3 ahead, k=4 TF 'same' 2 (pads (1, 2)), the max pool 1
    assert sm.delays == {"conv_a.dw": 3, "conv_b.dw": 2, "pool": 1}
    assert sm.delay == 6
    outs, tail = stream_lookahead(sm, x, sizes, 1)
    with torch.no_grad():
        full = block(x)
    got = torch.cat([*outs, tail], dim=1)
    torch.testing.assert_close(got, full, rtol=1e-5, atol=1e-5)
    # the fixed delay: after n samples, exactly max(n - 6, 0) outputs are out
    n = 0
    emitted = 0
    for size, out in zip(sizes, outs):
        n += size
        emitted += out.shape[1]
        assert emitted == max(n - 6, 0)
    assert tail.shape[1] == min(6, 40)


def test_lookahead_one_sample_chunks_and_verify_and_forward() -> None:
    torch.manual_seed(22)
    block = ConformerBlock().eval()
    x = torch.randn(1, 17, 8)
    sm = StreamingModule(block, axis=1, lookahead="auto")
    assert sm.verify(x, [1] * 17) < 1e-5
    # forward() keeps the state; flush it from the kept state
    outs = [sm(c) for c in x.split(5, dim=1)]
    assert sm.state is not None
    outs.append(sm.flush(sm.state))
    torch.testing.assert_close(torch.cat(outs, 1), block(x), rtol=1e-5, atol=1e-5)


def test_lookahead_too_small_is_caught_by_verify_and_bad_values_refused() -> None:
    torch.manual_seed(23)
    block = ConformerBlock().eval()
    x = torch.randn(1, 20, 8)
    sm = StreamingModule(block, axis=1, lookahead=3)  # the model needs 6
    with pytest.raises(PaddingError, match="differs"):
        sm.verify(x, [4] * 5)
    with pytest.raises(PaddingError, match="smaller than the right pad 3"):
        StreamingModule(block, axis=1, lookahead=2)
    with pytest.raises(PaddingError, match="lookahead must be"):
        StreamingModule(block, axis=1, lookahead=-1)
    with pytest.raises(PaddingError, match="stride 2"):
        StreamingModule(pn.Conv1d(1, 1, 3, stride=2, padding="same"), lookahead="auto")
    with pytest.raises(PaddingError, match="not exported"):
        sm.step_module(torch.zeros(1, 4, 8))
    with pytest.raises(PaddingError, match="one input delay line"):
        sm.reset_rows({}, [0])
    # init_state(example=) checks the model as the first step would: the same refusal
    with pytest.raises(PaddingError, match="lookahead=3 is smaller than the 6 input samples"):
        sm.init_state(example=x[:, :1])
    with pytest.raises(PaddingError, match="pass example="):
        sm.flush({})


# ----------------------------------------------------------------------------- batched streams


def strided_model() -> nn.Module:
    return nn.Sequential(
        pn.Conv1d(2, 4, 3, padding="causal", padding_mode="replicate"),
        nn.ReLU(),
        pn.Conv1d(4, 4, 4, stride=2, padding="causal_block"),
        pn.AvgPool1d(3, 1, padding="causal", count_include_pad=False),
        pn.Conv1d(4, 3, 4, stride=2, padding="causal", dilation=2),
        pn.ConvTranspose1d(3, 2, 4, stride=2, padding="causal"),
    ).eval()


def test_batched_streams_start_and_restart_independently() -> None:
    """Three streams in one batch; row 1 restarts at step 3, row 2 at step 5 (chunks of 4,
    the model's total stride): each row equals its own stream run alone."""
    torch.manual_seed(31)
    model = strided_model()
    sm = StreamingModule(model)
    steps = 9
    x = torch.randn(3, 2, 4 * steps)
    starts = {0: 0, 1: 3, 2: 5}
    state = sm.init_state(example=x[..., :1])
    got: dict[int, list[Tensor]] = {r: [] for r in range(3)}
    with torch.no_grad():
        for i in range(steps):
            for r, at in starts.items():
                if at == i and i > 0:
                    state = sm.reset_rows(state, [r])
                    got[r] = []
            y, state = sm.step(x[..., 4 * i : 4 * i + 4], state)
            for r in range(3):
                got[r].append(y[r : r + 1])
        for r, at in starts.items():
            alone = model(x[r : r + 1, :, 4 * at :])
            torch.testing.assert_close(torch.cat(got[r], -1), alone, rtol=1e-5, atol=1e-6)


@settings(max_examples=8, deadline=None)
@given(sizes=chunkings(30, max_cuts=8), reset_at=st.integers(1, 7))
def test_batched_streams_stride_1_reset_anywhere(sizes: list[int], reset_at: int) -> None:
    torch.manual_seed(32)
    model = TCN().eval()
    sm = StreamingModule(model)
    x = torch.randn(2, 2, 30)
    state = sm.init_state(2)
    outs0, outs1 = [], []
    start1 = 0
    with torch.no_grad():
        for i, chunk in enumerate(torch.split(x, sizes, dim=-1)):
            if i == reset_at:
                state = sm.reset_rows(state, [1])
                outs1, start1 = [], sum(sizes[:i])
            y, state = sm.step(chunk, state)
            outs0.append(y[:1])
            outs1.append(y[1:])
        torch.testing.assert_close(torch.cat(outs0, -1), model(x[:1]), rtol=1e-5, atol=1e-6)
        if start1 < 30:  # (a reset after the last chunk leaves nothing to compare)
            torch.testing.assert_close(
                torch.cat(outs1, -1), model(x[1:, :, start1:]), rtol=1e-5, atol=1e-6
            )


def test_batched_streams_out_of_phase_are_refused_and_reset_forward_rows() -> None:
    model = strided_model()
    sm = StreamingModule(model)
    state = sm.init_state(example=torch.zeros(2, 2, 1))
    _, state = sm.step(torch.zeros(2, 2, 3), state)
    state = sm.reset_rows(state, [0])
    with pytest.raises(PaddingError, match="different phases"):
        sm.step(torch.zeros(2, 2, 4), state)
    with pytest.raises(PaddingError, match="out of range"):
        sm.reset_rows(state, [5])
    with pytest.raises(TypeError, match="rows must be"):
        sm.reset_rows(state, ["a"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="rows must be"):
        sm.reset_rows(state, 1.5)  # type: ignore[arg-type]
    sm(torch.zeros(2, 2, 4))
    sm.reset(rows=[1])
    assert sm.state is not None and sm.state["0.pos"].tolist() == [4, 0]


# ----------------------------------------------------------------------------- (N, T, D)


@settings(max_examples=6, deadline=None)
@given(sizes=chunkings(25, max_cuts=8))
def test_channels_last_input_with_axis_1(sizes: list[int]) -> None:
    """A model taking (N, T, D): Linear in, transpose, causal convs, transpose, Linear out."""

    class SeqModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inp = nn.Linear(3, 6)
            self.conv = pn.Conv1d(6, 6, 3, dilation=2, padding="causal")
            self.down = pn.Conv1d(6, 6, 2, stride=1, padding="causal")
            self.out = nn.Linear(6, 2)

        def forward(self, x: Tensor) -> Tensor:
            h = self.inp(x).transpose(1, 2)
            h = self.down(torch.relu(self.conv(h)))
            return self.out(h.transpose(1, 2))

    torch.manual_seed(41)
    model = SeqModel().eval()
    x = torch.randn(2, 25, 3)
    assert_streams(model, x, sizes, axis=1)
    assert StreamingModule(model, axis=1).layer_axis == -1


def test_one_sample_steps_of_a_dilated_weight_normed_tcn_equal_the_full_run() -> None:
    """The lean one-sample path (taps every d-th sample through an undilated conv) and the
    1x1 convs' direct path, on a weight-normed, grouped, dilated TCN, batch of 3."""
    torch.manual_seed(51)
    model = nn.Sequential(
        pn.Conv1d(2, 6, 1),
        TemporalBlock(6, 6, 3, 4),
        weight_norm(pn.Conv1d(6, 6, 5, dilation=3, groups=3, padding="causal")),
        nn.Conv1d(6, 2, 1),
    ).eval()
    x = torch.randn(3, 2, 30)
    outs = assert_streams(model, x, [1] * 30)
    assert all(o.shape[-1] == 1 for o in outs)
    # chunks mixing lengths 1 and more, and the state after them, through the same layers
    assert_streams(model, x, [1, 1, 5, 1, 0, 22])


def test_dilated_chunks_through_the_taps_matmul_and_gradients() -> None:
    """Chunks of 2..40 samples of dilated convs (the unfolded-taps matmul), in no_grad and
    with gradients flowing through two steps into the weights (no stale cached weight)."""
    torch.manual_seed(52)
    model = nn.Sequential(
        pn.Conv1d(3, 5, 3, dilation=4, padding="causal"),
        nn.ReLU(),
        pn.Conv1d(5, 4, 4, dilation=2, padding="causal"),
    )
    x = torch.randn(2, 3, 60)
    assert_streams(model.eval(), x, [2, 5, 13, 40])
    sm = StreamingModule(model)
    state = sm.init_state(2)
    y1, state = sm.step(x[..., :20], state)
    y2, state = sm.step(x[..., 20:], state)
    torch.cat([y1, y2], -1).square().sum().backward()
    streamed_grad = model[0].weight.grad.clone()  # type: ignore[union-attr]
    model.zero_grad()
    model(x).square().sum().backward()
    torch.testing.assert_close(streamed_grad, model[0].weight.grad, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------------- recurrent layers


class Recurrent(nn.Module):
    """A causal conv, a 2-layer LSTM (time-major or batch-first) and a GRU, (N, C, T) in/out."""

    def __init__(self, batch_first: bool) -> None:
        super().__init__()
        self.batch_first = batch_first
        self.conv = pn.Conv1d(3, 4, 3, padding="causal")
        self.lstm = nn.LSTM(4, 5, 2, batch_first=batch_first)
        self.gru = nn.GRU(5, 6, batch_first=not batch_first)

    def forward(self, x: Tensor) -> Tensor:
        h = self.conv(x)
        h = h.transpose(1, 2) if self.batch_first else h.permute(2, 0, 1)
        y = self.lstm(h)[0]
        y = y.transpose(0, 1)  # the GRU takes the other layout
        y = self.gru(y)[0]
        return y.permute(1, 2, 0) if self.batch_first else y.transpose(1, 2)


@pytest.mark.parametrize("batch_first", [False, True])
def test_recurrent_layers_stream_with_their_hidden_state(batch_first: bool) -> None:
    torch.manual_seed(11)
    model = Recurrent(batch_first).eval()
    sm = StreamingModule(model)
    x = torch.randn(3, 3, 29)
    with torch.no_grad():
        full = model(x)
    for sizes in ([1] * 29, [7, 1, 13, 8], [29]):
        state = sm.init_state(3)
        assert sorted(k for k in state if not k.startswith("conv")) == ["gru.h", "lstm.c", "lstm.h"]
        outs = []
        for chunk in x.split(sizes, -1):
            y, state = sm.step(chunk, state)
            outs.append(y)
        torch.testing.assert_close(torch.cat(outs, -1), full, rtol=1e-5, atol=1e-6)
    # save/load mid-stream, then per-row reset: row 1 equals that stream run alone
    a, state = sm.step(x[..., :10], sm.init_state(3))
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    state = sm.reset_rows(state, [1])
    b, _ = sm.step(x[..., 10:], state)
    torch.testing.assert_close(torch.cat([a, b], -1)[[0, 2]], full[[0, 2]], rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        alone = model(x[1:2, :, 10:])
    torch.testing.assert_close(b[1:2], alone, rtol=1e-5, atol=1e-6)


def test_recurrent_step_exports_to_onnx_with_a_dynamic_batch(tmp_path: object) -> None:
    import onnxruntime as ort

    torch.manual_seed(12)
    model = Recurrent(batch_first=True).eval()
    sm = StreamingModule(model)
    path = str(tmp_path) + "/rnn.onnx"  # type: ignore[operator]
    names = sm.export_onnx(path, torch.zeros(2, 3, 4))
    sess = ort.InferenceSession(path)
    x = torch.randn(3, 3, 16)
    state = sm.init_state(3)
    values = [state[k].numpy() for k in names]
    outs = []
    for chunk in x.split(4, -1):
        feed = {"chunk": chunk.numpy(), **{f"state_in.{k}": v for k, v in zip(names, values)}}
        out, *values = sess.run(None, feed)
        outs.append(torch.from_numpy(out))
    with torch.no_grad():
        torch.testing.assert_close(torch.cat(outs, -1), model(x), rtol=1e-4, atol=1e-5)


def test_recurrent_layer_called_with_its_own_state_starts_from_it() -> None:
    class OwnState(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gru = nn.GRU(2, 2)

        def forward(self, x: Tensor) -> Tensor:
            h0 = torch.full((1, x.shape[0], 2), 0.5)  # the sequence's initial state
            return self.gru(x.permute(2, 0, 1), h0)[0].permute(1, 2, 0)

    torch.manual_seed(3)
    model = OwnState().eval()
    sm = StreamingModule(model)
    x = torch.randn(2, 2, 9)
    assert sm.verify(x, [1, 3, 5]) <= 1e-6
    assert "gru.pos" in sm.init_state(2)  # the rows' counts: where hx starts a row


class _Clobbers(nn.Module):
    """Runs its conv, then overwrites the conv's input in place (code that reuses a
    buffer once a layer has read it)."""

    def __init__(self, conv: nn.Module) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x: Tensor) -> Tensor:
        y = self.conv(x)
        x.mul_(-3.0)
        return y


@pytest.mark.parametrize("sizes", [[64, 64, 64, 64], [1] * 9 + [7, 100, 50, 90], [3, 5, 40, 200]])
def test_state_survives_inputs_changed_in_place(sizes: list[int]) -> None:
    """The state a step keeps is its own: the caller refilling one chunk buffer in place
    and the model overwriting a layer's input after the layer ran change nothing."""
    torch.manual_seed(0)
    model = nn.Sequential(
        _Clobbers(pn.Conv1d(2, 4, 3, padding="causal")),  # stride 1: the lean step
        nn.ReLU(),
        _Clobbers(pn.Conv1d(4, 4, 4, stride=2, padding="causal")),  # a strided window op
        nn.ReLU(),
        _Clobbers(pn.Conv1d(4, 3, 5, dilation=2, padding="causal")),
    ).eval()
    x = torch.randn(1, 2, sum(sizes))
    with torch.no_grad():
        full = model(x.clone())
        sm = StreamingModule(model)
        state = sm.init_state(example=x[..., :1])
        buf = torch.empty(1, 2, max(sizes))
        outs = []
        start = 0
        for n in sizes:
            chunk = buf[..., :n]
            chunk.copy_(x[..., start : start + n])  # one buffer, refilled for every step
            y, state = sm.step(chunk, state)
            outs.append(y.clone())
            buf.normal_()  # the caller scribbles over its buffer before the next chunk
            start += n
    torch.testing.assert_close(torch.cat(outs, -1), full, rtol=1e-5, atol=1e-6)


def test_lean_steps_take_every_causal_1d_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the stream is checked, causal 1-d convs at any stride, dilation or left pad and
    causal 1-d transposed convs (a start crop included) run their lean step on every
    non-empty chunk, the general path on none, at batch 2, for chunks that complete no
    output of a strided layer too; the stream equals the full run."""
    import padkit.streaming._runner as runner

    torch.manual_seed(4)
    model = nn.Sequential(
        pn.Conv1d(2, 4, 3, padding="causal"),  # stride 1, padded by its reach
        nn.ReLU(),
        pn.Conv1d(4, 6, 4, stride=2, padding="causal"),  # strided
        pn.Conv1d(6, 6, 3, dilation=2, padding=((7, 0),)),  # a pad past the kernel's reach
        nn.Conv1d(6, 5, 3),  # no pad at all
        nn.ConvTranspose1d(5, 4, 4, stride=2, padding=2),  # crops its first 2 outputs
        pn.ConvTranspose1d(4, 3, 5, stride=3, padding="causal", bias=False),
    ).double()
    model.eval()
    x = torch.randn(2, 2, 60, dtype=torch.float64)
    with torch.no_grad():
        full = model(x)
    sm = StreamingModule(model)
    general: list[str] = []
    real = runner.StreamingModule._run_layer

    def counting(self: StreamingModule, plan: object, layer: nn.Module, c: Tensor) -> Tensor:
        if c.shape[-1] > 0:  # an empty input (upstream strides buffering) is no work
            general.append(plan.name)  # type: ignore[attr-defined]
        return real(self, plan, layer, c)  # type: ignore[arg-type]

    sizes = [4, 1, 1, 3, 7, 2, 16, 1, 25]
    state = sm.init_state(example=x[..., :1])
    outs = []
    with torch.no_grad():
        for i, chunk in enumerate(x.split(sizes, -1)):
            if i == 2:  # the first step checked the stream (the general path records), the
                # first short one measured when outputs are due (steps from a fresh state)
                monkeypatch.setattr(runner.StreamingModule, "_run_layer", counting)
            y, state = sm.step(chunk, state)
            outs.append(y)
    assert general == []
    torch.testing.assert_close(torch.cat(outs, -1), full, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("groups", [1, 2])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(("k", "s", "d"), [(5, 2, 2), (8, 4, 1), (16, 8, 1), (3, 3, 1)])
def test_transposed_conv_overlap_add_grouped_dilated(
    groups: int, bias: bool, k: int, s: int, d: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A causal 1-d transposed conv streams by overlap-add (its transposed conv runs on
    each chunk alone; the state holds output partial sums), for groups, dilation, kernels
    as long as the stride and no bias, at batch 2 and any chunking."""
    import padkit.streaming._runner as runner

    used = []
    real = runner.run_overlap_add

    def counting(*args: object) -> object:
        used.append(args[3].shape[-1])  # type: ignore[attr-defined]
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(runner, "run_overlap_add", counting)
    torch.manual_seed(k * 10 + s)
    up = pn.ConvTranspose1d(
        4, 6, k, stride=s, dilation=d, groups=groups, bias=bias, padding="causal"
    )
    x = torch.randn(2, 4, 17, dtype=torch.float64)
    for sizes in ([1] * 17, [3, 0, 5, 9], [17]):
        assert_streams(up.double().eval(), x, sizes, rtol=1e-10, atol=1e-12)
    assert used


def test_a_chunk_that_does_not_continue_the_startup_input_is_refused() -> None:
    """Before the reflect start-up completes the state holds the input; a chunk of another
    dtype is refused naming both (a ``cat`` would promote it and run the float32 model on
    float64 samples), as is one of another channel count."""
    sm = StreamingModule(reflect_model())
    with torch.no_grad():
        _, state = sm.step(torch.randn(1, 1, 3), sm.init_state())
        assert "<stream>.startup" in state
        for bad in (torch.randn(1, 1, 2, dtype=torch.float64), torch.randn(1, 2, 2)):
            with pytest.raises(PaddingError, match=r"'<stream>.startup' holds input of shape"):
                sm.step(bad, state)


class _FlattensFrames(nn.Module):
    """A (N, 1, T, F) enhancer head that flattens each frame's channels and frequencies with
    ``reshape(b, t, -1)`` (DeepFilterNet's grouped layers): its own code cannot take a chunk
    of no frames (-1 of zero elements)."""

    def __init__(self, stride: int = 1) -> None:
        super().__init__()
        self.conv = pn.Conv2d(1, 4, (3, 3), stride=(stride, 1), padding=("causal", "same"))
        self.lin = nn.Linear(4 * 8, 5)

    def forward(self, x: Tensor) -> Tensor:
        h = self.conv(x)
        b, _, t, _ = h.shape
        return self.lin(h.permute(0, 2, 1, 3).reshape(b, t, -1))


@pytest.mark.parametrize("stride", [1, 2])
def test_an_empty_chunk_streams_where_the_model_cannot_run_on_one(stride: int) -> None:
    torch.manual_seed(0)
    model = _FlattensFrames(stride).double().eval()
    x = torch.randn(2, 1, 12, 8, dtype=torch.float64)
    with pytest.raises((RuntimeError, PaddingError)):
        model(x[:, :, :0])  # (the model itself cannot)
    sm = StreamingModule(model, axis=2)
    state = sm.init_state(example=x[:, :, :1])
    outs = []
    cuts = [0, 3, 3, 4, 4, 4, 9, 12, 12] if stride == 1 else [0, 2, 2, 6, 6, 6, 12, 12]
    for a, b in itertools.pairwise(cuts):
        y, state = sm.step(x[:, :, a:b], state)
        outs.append(y)
    assert outs[1].shape == (2, 0, 5)  # no frames in, none out, on the output's time axis
    assert outs[3].shape == (2, 0, 5)
    torch.testing.assert_close(torch.cat(outs, 1), model(x), rtol=0, atol=1e-12)


class _WarmUpCrop(nn.Module):
    """A causal conv on (N, T, C) whose forward drops the first outputs (the warm-up a
    receptive field needs) before a Linear head: a start crop of a length-dependent run."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = pn.Conv1d(3, 4, 3, dilation=2, padding="causal")
        self.head = nn.Linear(4, 2)

    def forward(self, x: Tensor) -> Tensor:
        y = self.conv(x.transpose(1, 2))[:, :, 4:]
        return self.head(y.transpose(1, 2))


def test_a_crop_before_a_layer_that_is_not_streamed_names_the_forward_that_crops() -> None:
    sm = StreamingModule(_WarmUpCrop().eval(), axis=1)
    with pytest.raises(
        PaddingError,
        match=r"The forward of _WarmUpCrop '<model>' gives Linear 'head' \d+ time steps where "
        r"Conv1d 'conv' before it returned \d+",
    ):
        sm.verify(torch.randn(1, 20, 3), [1] * 20)


class _NormThenConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(4)
        self.conv = nn.Conv1d(4, 4, 3)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(F.elu(self.norm(x)))


class _PadsForItsChild(nn.Module):
    """A residual block whose forward pads before a child that normalises, then convolves:
    the zeros go through the norm, so no conv pad replaces them."""

    def __init__(self) -> None:
        super().__init__()
        self.sub = _NormThenConv()

    def forward(self, x: Tensor) -> Tensor:
        return x + self.sub(F.pad(x, (2, 0)))


def test_a_pad_in_a_block_is_named_in_that_block_not_its_parent() -> None:
    model = nn.Sequential(nn.Conv1d(1, 4, 1), _PadsForItsChild()).eval()
    model[1].sub.norm.running_mean.normal_()
    with pytest.raises(PaddingError, match=r"The forward of _PadsForItsChild '1' gives"):
        StreamingModule(model).verify(torch.randn(2, 1, 30), [1] * 30)


class _WholeHopsOnly(nn.Module):
    """An (N, T, C) encoder whose forward asserts whole hops (a stride-4 causal conv)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = pn.Conv1d(3, 6, 8, stride=4, padding="causal_block")

    def forward(self, x: Tensor) -> Tensor:
        assert x.shape[1] % 4 == 0, f"input length {x.shape[1]} must be a multiple of 4"
        return self.conv(x.transpose(1, 2)).transpose(1, 2)


def test_a_model_asserting_whole_hops_streams_whole_hops_and_says_why_at_others() -> None:
    torch.manual_seed(0)
    model = _WholeHopsOnly().double().eval()
    x = torch.randn(2, 64, 3, dtype=torch.float64)
    sm = StreamingModule(model, axis=1)
    state = sm.init_state(example=x[:, :4])
    outs = []
    for chunk in x.split([4, 8, 12, 40], 1):
        y, state = sm.step(chunk, state)
        outs.append(y)
    torch.testing.assert_close(torch.cat(outs, 1), model(x), rtol=0, atol=1e-12)
    with pytest.raises(PaddingError, match=r"AssertionError.*step it with multiples of 4"):
        sm.step(x[:, :1], sm.init_state(example=x[:, :4]))
