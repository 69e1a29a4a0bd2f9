"""Lookahead streaming of strided non-causal models and transposed convs, against the
full-sequence run: 'same' strided stacks with residual blocks, an encoder/decoder pair with
DAC-style transposed convs, dilated residual units between strided layers. Every stream is
fed in chunks of 1, a prime, the hop and a seeded random mix, at batch 2, then ended with
``flush()``; the reported delay is the smallest that works."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from chunk_plans import plans, tol
from torch import Tensor, nn

from padkit import PaddingError
from padkit.streaming import StreamingModule

DTYPES = [torch.float64, torch.float32]


class Unit(nn.Module):
    """A dilated residual unit: tanh, 'same' k=3 conv of dilation d, 1x1 conv, added."""

    def __init__(self, c: int, d: int) -> None:
        super().__init__()
        self.act = nn.Tanh()
        self.conv = nn.Conv1d(c, c, 3, dilation=d, padding=d)
        self.out = nn.Conv1d(c, c, 1)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.out(self.act(self.conv(self.act(x))))


def same_stack() -> nn.Module:
    """k3 s2 p1, k4 s2 p1 and k7 s1 p3 convs with residual units between them (hop 4)."""
    return nn.Sequential(
        nn.Conv1d(1, 4, 7, padding=3),
        Unit(4, 1),
        nn.Conv1d(4, 6, 3, stride=2, padding=1),
        Unit(6, 1),
        Unit(6, 3),
        nn.Conv1d(6, 6, 4, stride=2, padding=1),
        Unit(6, 2),
        nn.Conv1d(6, 3, 7, padding=3),
    )


def encoder() -> nn.Module:
    """DAC-shaped: k=2s strided convs padded s//2, dilated units between (hop 8)."""
    layers: list[nn.Module] = [nn.Conv1d(1, 4, 7, padding=3)]
    for s in (2, 4):
        layers += [Unit(4, 1), Unit(4, 3), nn.Conv1d(4, 4, 2 * s, stride=s, padding=s // 2)]
    layers += [nn.Conv1d(4, 3, 3, padding=1)]
    return nn.Sequential(*layers)


def decoder() -> nn.Module:
    """The pair's decoder: ConvTranspose1d(k=2s, s, padding=s//2), symmetric crops, dilated
    units after each upsampler (8 output samples per frame)."""
    layers: list[nn.Module] = [nn.Conv1d(3, 4, 7, padding=3)]
    for s in (4, 2):
        layers += [nn.ConvTranspose1d(4, 4, 2 * s, stride=s, padding=s // 2)]
        layers += [Unit(4, 1), Unit(4, 3)]
    layers += [nn.Conv1d(4, 1, 7, padding=3)]
    return nn.Sequential(*layers)


def stream(sm: StreamingModule, x: Tensor, sizes: list[int]) -> tuple[list[Tensor], Tensor]:
    state = sm.init_state(example=x[..., :1])
    outs = []
    with torch.no_grad():
        for chunk in x.split(sizes, -1):
            y, state = sm.step(chunk, state)
            outs.append(y)
        tail = sm.flush(state)
    return outs, tail


def assert_streams(
    model: nn.Module, x: Tensor, hop: int, dtype: torch.dtype, **kw: object
) -> StreamingModule:
    model = model.to(dtype).eval()
    x = x.to(dtype)
    with torch.no_grad():
        full = model(x)
    sm = StreamingModule(model, lookahead="auto", **kw)  # type: ignore[arg-type]
    n = int(x.shape[-1])
    for name, sizes in plans(n, hop, seed=n).items():
        outs, tail = stream(sm, x, sizes)
        got = torch.cat([*outs, tail], -1)
        assert got.shape == full.shape, (name, got.shape, full.shape)
        torch.testing.assert_close(got, full, **tol(dtype), msg=lambda m, k=name: f"{k}: {m}")
        # after n samples, exactly the committed outputs are out
        clocks = sm._clocks
        assert clocks is not None
        seen = emitted = 0
        for size, out in zip(sizes, outs):
            seen += size
            emitted += int(out.shape[-1])
            assert emitted == min(clocks.committed(clocks.out, seen), full.shape[-1])
    # forward() keeps the state; reset() forgets it; streamed again, the same
    sizes = plans(n, hop, seed=n + 1)["mix"]
    for _ in range(2):
        with torch.no_grad():
            outs = [sm(c) for c in x.split(sizes, -1)]
            assert sm.state is not None
            outs.append(sm.flush(sm.state))
        torch.testing.assert_close(torch.cat(outs, -1), full, **tol(dtype))
        sm.reset()
    return sm


def strong(model: nn.Module) -> nn.Module:
    """Weights large enough that every tap's dependency shows far above rounding (torch's
    default init makes the farthest taps of a deep chain weigh ~1e-7)."""
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Conv1d, nn.ConvTranspose1d)):
                m.weight.copy_(torch.randn(m.weight.shape, generator=gen) * 0.5)
    return model


def too_short(model: nn.Module, x: Tensor, sizes: list[int]) -> float:
    """The largest difference from the full run of a stream whose delay is one tick (one
    sample of the finest clock) shorter than the reported one."""
    model = model.double().eval()
    x = x.double()
    sm = StreamingModule(model, lookahead="auto", check=False)
    sm.init_state(example=x[..., :1])
    clocks = sm._clocks
    assert clocks is not None and clocks.delay > 0
    sm._clocks = dataclasses.replace(clocks, delay=clocks.delay - 1)
    outs, tail = stream(sm, x, sizes)
    with torch.no_grad():
        full = model(x)
    got = torch.cat([*outs, tail], -1)
    assert got.shape == full.shape
    return float((got - full).abs().max())


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
def test_same_padded_stride_2_stack_with_residual_blocks(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 1, 48, generator=torch.Generator().manual_seed(1))
    sm = assert_streams(same_stack(), x, 4, dtype)
    # k7: 3; unit: 1; k3 s2 p1: 1; at 1/2: units 1 + 3 (8), k4 s2 p1 2 (4); at 1/4: unit 2
    # (8), k7 3 (12)
    assert sm.delays == {
        "0": 3,
        "1.conv": 1,
        "2": 1,
        "3.conv": 1,
        "4.conv": 3,
        "5": 2,
        "6.conv": 2,
        "7": 3,
    }
    assert sm.delay == 3 + 1 + 1 + 8 + 4 + 8 + 12
    table = sm.explain()
    assert "| 5 | conv | 4 | 2 | 1 | (1, 1) | 1/2 | 2 (input) | 4 |" in table
    assert "delay: 37 input samples" in table


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
def test_encoder_decoder_pair_with_transposed_convs(dtype: torch.dtype) -> None:
    torch.manual_seed(1)
    enc, dec = encoder(), decoder()
    x = torch.randn(2, 1, 64, generator=torch.Generator().manual_seed(2))
    sm = assert_streams(enc, x, 8, dtype)
    # k7 3; units 4; k4 s2 p1 2; at 1/2: units 4 (8), k8 s4 p2 5 (10); at 1/8: k3 p1 (8)
    assert sm.delay == 3 + 4 + 2 + 8 + 10 + 8
    frames = torch.randn(2, 3, 9, generator=torch.Generator().manual_seed(3))
    sd = assert_streams(dec, frames, 1, dtype)
    # output samples (8 per frame): k7 3 frames (24), crop 2 of k8 s4 at 4 per frame (4),
    # units 4 at 4 per frame (8), crop 1 of k4 s2 (1), units 4, k7 3
    assert sd.output_delay == 24 + 4 + 8 + 1 + 4 + 3
    assert sd.delay == 6  # 44/8 frames, rounded up
    assert "| 1 | transposed conv | 8 | 4 | 1 | crops (2, 2) | 1 | 2 (output) | 1/2 |" in (
        sd.explain()
    )
    # the pair, end to end: frames in, samples out
    pair = nn.Sequential(enc, dec)
    assert_streams(pair, x, 8, dtype)


def test_the_reported_delay_is_the_smallest_that_works() -> None:
    """One tick less (one input sample for the encoders; one output sample for the
    decoder) and the stream emits outputs as final that still read unseen samples."""
    torch.manual_seed(2)
    x = torch.randn(2, 1, 48, generator=torch.Generator().manual_seed(4))
    frames = torch.randn(2, 3, 9, generator=torch.Generator().manual_seed(5))
    for model, inp in ((same_stack(), x), (encoder(), x), (decoder(), frames)):
        n = int(inp.shape[-1])
        # one-sample chunks: every sample count is a step boundary, so the output emitted one
        # step early is seen (coarser chunks may step over that count)
        for sizes in ([1] * n,):
            assert too_short(strong(model), inp, sizes) > 1e-8  # float64: exact is ~1e-15


def test_too_small_lookahead_is_refused_by_the_self_check_naming_the_module() -> None:
    torch.manual_seed(3)
    model = strong(same_stack()).double().eval()
    sm = StreamingModule(model, lookahead=36)  # needs 37
    x = torch.randn(1, 1, 40, dtype=torch.float64)
    with pytest.raises(
        PaddingError,
        match=r"'<model>' streams values that differ.*lookahead=36 is smaller than the 37",
    ):
        sm.verify(x, [40])
    with pytest.raises(PaddingError, match=r"delay: the clocks .* measured on the first"):
        _ = StreamingModule(model, lookahead="auto").delay


def test_code_that_resamples_time_is_refused_not_streamed_wrong() -> None:
    """A crop of the first sample in code (not in a layer) shifts a branch: the self-check
    names the module, never a wrong stream."""

    class Shifted(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.down = nn.Conv1d(1, 2, 4, stride=2, padding=1)

        def forward(self, x: Tensor) -> Tensor:
            y = self.down(x)
            return y[..., 1:] + y[..., :-1]

    x = torch.randn(1, 1, 24, dtype=torch.float64)
    sm = StreamingModule(Shifted().double(), lookahead="auto")
    with pytest.raises(PaddingError, match="Shifted '<model>'"):
        sm.verify(x, [1] * 24)


@pytest.mark.parametrize(
    "bad",
    [
        torch.randn(2, 1, 3, dtype=torch.float64),  # another dtype: cat would promote it
        torch.randn(2, 2, 3),  # another channel count: cat would raise from torch
        torch.randn(1, 1, 3),  # another batch size
    ],
    ids=["dtype", "channels", "batch"],
)
def test_a_chunk_that_does_not_continue_the_uncommitted_input_is_refused(bad: Tensor) -> None:
    sm = StreamingModule(encoder(), lookahead="auto")
    x = torch.randn(2, 1, 5)
    with torch.no_grad():
        y, state = sm.step(x, sm.init_state(example=x))
        assert y.shape[-1] == 0  # the 5 samples wait for their lookahead
        with pytest.raises(
            PaddingError, match=r"'<stream>.input' holds input of shape \(2, 1, 5\)"
        ):
            sm.step(bad, state)
        # the stream goes on with chunks that continue it
        y, _ = sm.step(torch.randn(2, 1, 3), state)


def test_a_state_whose_input_does_not_start_on_a_hop_is_refused() -> None:
    """The kept input starts where the last run left every layer's history: a whole number
    of hops before the samples seen, no later than the clocks' span start. A state whose
    input lost or gained a sample is refused, not streamed from the wrong place."""
    sm = StreamingModule(encoder(), lookahead="auto")
    x = torch.randn(1, 1, 40)
    with torch.no_grad():
        state = sm.init_state(example=x)
        for chunk in x.split(1, -1):
            _, state = sm.step(chunk, state)
        kept = state["<stream>.input"]
        for bad in (kept[..., 1:], torch.cat([kept, kept[..., :1]], -1)):
            with pytest.raises(PaddingError, match=r"'<stream>\.input' holds"):
                sm.step(x[..., :1], {**state, "<stream>.input": bad})
        sm.step(x[..., :1], state)  # the state as returned goes on


class ConvNeXtNTC(nn.Module):
    """A Vocos-style backbone returning ``(N, T, C)`` for an ``(N, C, T)`` input: an
    embedding conv, a stride-2 conv, a ConvNeXt block (depthwise 'same' k7, LayerNorm over
    channels and pointwise ``Linear`` layers on the transposed tensor) and a final norm; a
    stride-4 conv between (hop 4)."""

    def __init__(self, causal: bool = False) -> None:
        super().__init__()
        import padkit.nn as pn

        pad = "causal" if causal else "same"
        self.embed = pn.Conv1d(3, 8, 5, padding=pad)
        self.down = pn.Conv1d(8, 8, 8, stride=4, padding="causal" if causal else ((2, 2),))
        self.dw = pn.Conv1d(8, 8, 7, padding=pad, groups=8)
        self.norm = nn.LayerNorm(8)
        self.pw = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))
        self.final = nn.LayerNorm(8)

    def forward(self, x: Tensor) -> Tensor:
        h = self.down(self.embed(x))
        h = h + self.pw(self.norm(self.dw(h).transpose(1, 2))).transpose(1, 2)
        return self.final(h.transpose(1, 2))


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("causal", [False, True], ids=["lookahead", "causal"])
def test_a_model_returning_time_major_output_streams_on_its_time_axis(
    causal: bool, dtype: torch.dtype
) -> None:
    """The output's time axis (1, of ``(N, T, C)``) is not the input's (-1): a lookahead
    stream cuts its committed outputs on the axis measured to follow the length, a causal
    stream holds short chunks by the output counts on it, and ``verify`` joins the chunks'
    outputs on it. Every chunking, batch 2, against the full run."""
    torch.manual_seed(5)
    net = ConvNeXtNTC(causal).to(dtype).eval()
    sm = StreamingModule(net, **({} if causal else {"lookahead": "auto"}))
    x = torch.randn(2, 3, 64, dtype=dtype)
    with torch.no_grad():
        full = net(x)
        for name, sizes in plans(64, 4, seed=3).items():
            state = sm.init_state(example=x[..., :1])
            outs = []
            for chunk in x.split(sizes, -1):
                y, state = sm.step(chunk, state)
                assert y.shape[0] == 2 and y.shape[2] == 8, (name, y.shape)
                outs.append(y)
            if not causal:
                outs.append(sm.flush(state))
            torch.testing.assert_close(torch.cat(outs, 1), full, **tol(dtype))
        assert sm.verify(x, [1] * 64) <= 1e-4
    if causal:
        # 1-sample chunks are held until they complete an output frame
        assert any(s is not None for s in sm._holds.values())
    else:
        # the embedding's 2, the stride-4 conv's 7 - 2, the depthwise conv's 3 frames of 4
        assert sm.delay == 2 + 5 + 4 * 3


class NearestDecoder(nn.Module):
    """A decoder that upsamples by ``nn.Upsample`` (nearest, x2 then x3), each followed by a
    'same' conv of an even kernel (stable-audio-tools' Oobleck decoder with
    ``use_nearest_upsample=True`` upsamples so), and a ``repeat_interleave`` in code."""

    def __init__(self) -> None:
        super().__init__()
        self.pre = nn.Conv1d(4, 8, 3, padding=1)
        self.up2 = nn.Sequential(nn.Upsample(scale_factor=2), nn.Conv1d(8, 8, 4, padding="same"))
        self.up3 = nn.Sequential(nn.Upsample(scale_factor=3), nn.Conv1d(8, 4, 6, padding="same"))
        self.post = nn.Conv1d(4, 1, 5, padding=2)

    def forward(self, x: Tensor) -> Tensor:
        h = self.up3(torch.tanh(self.up2(torch.tanh(self.pre(x)))))
        return self.post(h.repeat_interleave(2, -1))


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel:UserWarning")
@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
def test_nearest_upsampling_streams_with_lookahead(dtype: torch.dtype) -> None:
    """``nn.Upsample`` (nearest) is measured to read each input step alone for its
    outputs at 2 (then 3) times the rate: it streams as written, and the clocks after it
    are measured (not taken as the input's, as for stride-1 layers). Every chunking of the
    latent frames, batch 2; the output delay adds up each conv's right pad on its clock."""
    torch.manual_seed(7)
    sm = assert_streams(NearestDecoder(), torch.randn(2, 4, 20), 1, dtype)
    # in output samples (12 per frame): pre 1 frame (12), k4 'same' at x2 2 (6 each),
    # k6 'same' at x6 3 (2 each), post 2 at x12
    assert sm.output_delay == 12 + 2 * 6 + 3 * 2 + 2


def test_upsampling_that_reads_neighbours_is_refused_with_the_measurement() -> None:
    import padkit.nn as pn

    net = nn.Sequential(pn.Conv1d(2, 4, 3, padding="causal"), nn.Upsample(scale_factor=2))
    x = torch.randn(1, 2, 40)
    with torch.no_grad():
        assert StreamingModule(net).verify(x, [1] * 40) <= 1e-6  # nearest: causal too
    net[1] = nn.Upsample(scale_factor=2, mode="linear")
    with pytest.raises(PaddingError, match=r"Upsample '1'.*output 0 depends on input 1"):
        StreamingModule(net).verify(x, [1] * 40)


class Recurrent(nn.Module):
    """A unidirectional recurrent layer between 'same' convs and a stride-2 conv: an LSTM on
    ``(T, N, C)`` with a skip (EnCodec's ``SLSTM``), or a batch-first GRU."""

    def __init__(self, lstm: bool) -> None:
        super().__init__()
        self.lstm = lstm
        self.pre = nn.Conv1d(2, 6, 5, padding=2)
        self.down = nn.Conv1d(6, 6, 4, stride=2, padding=1)
        self.rnn: nn.Module = nn.LSTM(6, 6, 2) if lstm else nn.GRU(6, 6, batch_first=True)
        self.post = nn.Conv1d(6, 3, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        h = self.down(torch.tanh(self.pre(x)))
        if self.lstm:
            t = h.permute(2, 0, 1)
            h = (self.rnn(t)[0] + t).permute(1, 2, 0)
        else:
            h = self.rnn(h.transpose(1, 2))[0].transpose(1, 2)
        return self.post(h)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("lstm", [True, False], ids=["lstm", "gru"])
def test_recurrent_layers_stream_with_lookahead(lstm: bool, dtype: torch.dtype) -> None:
    """A recurrent layer's state is carried over the samples each step commits and kept;
    it runs on over the uncommitted rest from there, and that state is dropped (the next
    step runs those samples again). Every chunking, batch 2, against the full run."""
    torch.manual_seed(8)
    sm = assert_streams(Recurrent(lstm), torch.randn(2, 2, 64), 2, dtype)
    # pre 2, down 4 - 1 - 1 = 2, post 1 frame of 2
    assert sm.delay == 2 + 2 + 2


def edge_padded(mode: str) -> nn.Module:
    """Convs padding time in ``mode`` (replicate or reflect) on both sides: 'same' k7, a
    left-heavy (4, 1) k6 whose first outputs read samples 1..4 (further than its right
    reach), and a stride-2 k4 (1, 2)."""
    import padkit.nn as pn

    return nn.Sequential(
        nn.Conv1d(2, 4, 7, padding=3, padding_mode=mode),
        nn.Tanh(),
        pn.Conv1d(4, 4, 6, padding=((4, 1),), padding_mode=mode),
        nn.Tanh(),
        pn.Conv1d(4, 3, 4, stride=2, padding=((1, 2),), padding_mode=mode),
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("mode", ["replicate", "reflect"])
def test_edge_padding_modes_stream_with_lookahead(mode: str, dtype: torch.dtype) -> None:
    """A lookahead stream's first span pads each layer's start with its first sample (or
    samples 1..lo mirrored), the flush pads its end with the last one(s); in between the
    right pad stands for samples not seen yet and is never committed. A left pad longer
    than the layer's right reach (reflect, 4 against 1) delays the first outputs until the
    samples it mirrors are final. Every chunking, batch 2."""
    torch.manual_seed(9)
    sm = assert_streams(edge_padded(mode), torch.randn(2, 2, 48), 2, dtype)
    # k7 reads 3 ahead; k6 (4, 1): 1 ahead, or its 4 mirrored samples; k4 s2 (1, 2): 2
    assert sm.delay == 3 + (4 if mode == "reflect" else 1) + 2
