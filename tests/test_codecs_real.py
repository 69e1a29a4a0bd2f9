"""Neural audio codecs from their own packages (Meta's ``encodec``, Kyutai's ``moshi``,
``descript-audio-codec``, ``snac``, ``cached-conv``), small configs, random weights, no
downloads, streamed as a new user would: ``convert_causal`` then ``StreamingModule``.

References, none computed by padkit: the original module's own full-sequence output (a fresh
copy for each run: some keep caches across calls), and the converted model's full run for
the stream. Every stream runs at batch 2 in chunks of 1, of a prime (7), of the hop, and a
seeded random mix, then again after ``reset()``, in float64 and float32. A model that does not
stream must be refused with a ``PaddingError`` naming the module and a true reason.

The packages' top-level ``__init__`` files import heavy compiled extras their conv modules do
not use (torchaudio for ``encodec``, sentencepiece and more for ``moshi``, audiotools and
argbind for ``dac``): :func:`load` imports the model module under a bare parent package
when the package's own ``__init__`` cannot be imported; ``dac.model.dac`` imports two
audiotools names at module level (a base class and a type for the codec's file helpers,
neither used by ``Encoder``/``Decoder``), given as placeholders while it is imported.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from chunk_plans import plans, tol
from packages import load
from torch import Tensor, nn

from padkit import PaddingError
from padkit.recognise import model_copy
from padkit.streaming import StreamingModule, convert_causal

torch.set_num_threads(1)
# the packages build their layers with torch APIs that torch now deprecates
pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.nn.utils.weight_norm` is deprecated:FutureWarning",
    "ignore:`torch.jit.script` is deprecated:FutureWarning",
)
DTYPES = [torch.float64, torch.float32]


# ----------------------------------------------------------------------------- imports


@contextmanager
def _audiotools_names() -> Iterator[None]:
    """Placeholders for the two audiotools names ``dac.model.dac`` imports, while it does."""
    if importlib.util.find_spec("audiotools") is not None:
        yield
        return
    at = types.ModuleType("audiotools")
    ml = types.ModuleType("audiotools.ml")
    ml.BaseModel = type("BaseModel", (nn.Module,), {"INTERN": [], "EXTERN": []})  # type: ignore[attr-defined]
    at.ml, at.AudioSignal, at.STFTParams = ml, object, object  # type: ignore[attr-defined]
    sys.modules["audiotools"], sys.modules["audiotools.ml"] = at, ml
    try:
        yield
    finally:
        del sys.modules["audiotools"], sys.modules["audiotools.ml"]


def load_dac() -> Any:
    if importlib.util.find_spec("dac") is None:
        pytest.skip("descript-audio-codec is not installed")
    with _audiotools_names():
        return load("dac", "dac.model.dac")


# ----------------------------------------------------------------------------- streaming


def stream_all(sm: StreamingModule, x: Tensor, sizes: list[int]) -> Tensor:
    state = sm.init_state(example=x[..., :1])
    outs = []
    with torch.no_grad():
        for chunk in x.split(sizes, -1):
            y, state = sm.step(chunk, state)
            outs.append(y)
        if sm.delay:
            outs.append(sm.flush(state))
    return torch.cat(outs, -1)


def check(
    make: Callable[[], nn.Module],
    channels: int,
    n: int,
    hop: int,
    dtype: torch.dtype,
    *,
    convert: bool = True,
    lookahead: Any = None,
    allow: Any = (),
    chunkings: tuple[str, ...] = ("1", "7", "hop", "mix"),
) -> StreamingModule:
    """Convert and stream ``make()`` at batch 2; the converted model equals the original and
    every stream equals the converted model's full run (``n``: a multiple of the hop)."""
    torch.manual_seed(0)
    model = make().to(dtype).eval()
    example = torch.zeros(1, channels, n, dtype=dtype)
    new = convert_causal(model, example)[0] if convert else model
    x = torch.randn(2, channels, n, generator=torch.Generator().manual_seed(1), dtype=dtype)
    with torch.no_grad():
        full = new(x)
        torch.testing.assert_close(full, model_copy(model)(x), **tol(dtype))
    kw: dict[str, Any] = {"allow": list(allow)}
    if lookahead is not None:
        kw["lookahead"] = lookahead
    sm = StreamingModule(new, **kw)
    for name, sizes in plans(n, hop, seed=n).items():
        if name not in chunkings:
            continue
        got = stream_all(sm, x, sizes)
        assert got.shape == full.shape, (name, got.shape, full.shape)
        torch.testing.assert_close(
            got, full, **tol(dtype), msg=lambda m, k=name: f"chunks {k}: {m}"
        )
    if not sm.delay:  # forward() keeps the state; reset() forgets it
        sizes = plans(n, hop, seed=n + 1)["mix"]
        for _ in range(2):
            with torch.no_grad():
                got = torch.cat([sm(c) for c in x.split(sizes, -1)], -1)
            torch.testing.assert_close(got, full, **tol(dtype))
            sm.reset()
    return sm


# ----------------------------------------------------------------------------- encodec


def _encodec(part: str, pad_mode: str, lstm: int) -> Callable[[], nn.Module]:
    seanet = load("encodec", "encodec.modules.seanet")
    cls = seanet.SEANetEncoder if part == "encoder" else seanet.SEANetDecoder
    return lambda: cls(
        channels=1,
        dimension=4,
        n_filters=2,
        ratios=[2, 2],
        causal=True,
        pad_mode=pad_mode,
        lstm=lstm,
    )


@pytest.mark.parametrize("lstm", [0, 2], ids=["no-lstm", "lstm"])
@pytest.mark.parametrize("pad_mode", ["constant", "reflect"])
@pytest.mark.parametrize("part", ["encoder", "decoder"])
def test_encodec_seanet(part: str, pad_mode: str, lstm: int) -> None:
    make = _encodec(part, pad_mode, lstm)
    if part == "encoder":
        check(make, 1, 40, 4, torch.float64)
    else:
        check(make, 4, 10, 1, torch.float64)


@pytest.mark.slow
@pytest.mark.parametrize("lstm", [0, 2], ids=["no-lstm", "lstm"])
@pytest.mark.parametrize("pad_mode", ["constant", "reflect"])
@pytest.mark.parametrize("part", ["encoder", "decoder"])
def test_encodec_seanet_float32(part: str, pad_mode: str, lstm: int) -> None:
    make = _encodec(part, pad_mode, lstm)
    if part == "encoder":
        check(make, 1, 40, 4, torch.float32)
    else:
        check(make, 4, 10, 1, torch.float32)


def test_encodec_non_causal_decoder_with_its_lstm_streams_with_lookahead() -> None:
    """EnCodec's non-causal SEANet decoder (its 48 kHz layout, reflect pads), converted:
    its two-layer LSTM streams with lookahead, its state carried over the committed frames
    only; the first span mirrors each layer's first samples, the flush its last ones."""
    seanet = load("encodec", "encodec.modules.seanet")
    make = lambda: seanet.SEANetDecoder(  # noqa: E731
        channels=1,
        dimension=4,
        n_filters=2,
        ratios=[2, 2],
        causal=False,
        lstm=2,
    )
    sm = check(make, 4, 10, 1, torch.float64, lookahead="auto")
    assert sm._rnn_plans and sm.delay > 0


def test_encodec_non_causal_encoder_converts_at_every_length_and_streams() -> None:
    """EnCodec's non-causal SConv1d pads a strided conv by a fixed split of ``k - s`` and
    the extra pad that completes its last window: two probes fit that rule and another
    (no fixed right pad), so the one whose fixed pads add up to ``k - s`` is taken and the
    copy is checked at other lengths. It equals the original at every length of a hop's
    residues, and streams with lookahead (its LSTM and reflect pads included)."""
    seanet = load("encodec", "encodec.modules.seanet")
    torch.manual_seed(0)
    model = seanet.SEANetEncoder(
        channels=1,
        dimension=8,
        n_filters=4,
        ratios=[4, 2],
        causal=False,
        lstm=1,
    ).double()
    model.eval()
    new, _ = convert_causal(model, torch.zeros(1, 1, 64, dtype=torch.float64))
    with torch.no_grad():
        for n in range(64, 72):
            x = torch.randn(2, 1, n, dtype=torch.float64)
            torch.testing.assert_close(new(x), model(x))
    sm = StreamingModule(new, lookahead="auto")
    x = torch.randn(2, 1, 128, dtype=torch.float64)
    for sizes in plans(128, 8, seed=2).values():
        assert sm.verify(x, sizes) < 1e-9


def test_encodec_converted_wrappers_read_no_conv_attributes() -> None:
    """``SConv1d`` reads ``self.conv.conv.kernel_size`` in forward: once its pads are in the
    conv it only calls its ``NormConv1d``, so no step reads a streamed layer's attributes."""
    make = _encodec("encoder", "reflect", 0)
    torch.manual_seed(0)
    model = make().double().eval()
    _, report = convert_causal(model, torch.zeros(1, 1, 32, dtype=torch.float64))
    assert "SConv1d that calls its 'conv' only" in str(report)
    assert not report.skipped, str(report)


# ----------------------------------------------------------------------------- moshi


def _moshi(part: str, pad_mode: str) -> Callable[[], nn.Module]:
    seanet = load("moshi", "moshi.modules.seanet")
    cls = seanet.SEANetEncoder if part == "encoder" else seanet.SEANetDecoder
    return lambda: cls(
        channels=1,
        dimension=4,
        n_filters=2,
        ratios=[2, 2],
        causal=True,
        pad_mode=pad_mode,
        n_residual_layers=1,
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("pad_mode", ["constant", "replicate"])
@pytest.mark.parametrize("part", ["encoder", "decoder"])
def test_moshi_seanet(part: str, pad_mode: str, dtype: torch.dtype) -> None:
    """moshi's ``StreamingConv1d`` pads with ``torch.cat`` of a fresh state (zeros, or the
    first sample repeated), asserts ``T % stride == 0`` and reads ``self._stride`` in forward;
    its ``StreamingConvTranspose1d`` crops with ``unpad1d``."""
    make = _moshi(part, pad_mode)
    if part == "encoder":
        check(make, 1, 40, 4, dtype)
    else:
        check(make, 4, 10, 1, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("channel_wise", [False, True], ids=["full", "channel-wise"])
def test_moshi_learnt_resamplers(channel_wise: bool, dtype: torch.dtype) -> None:
    resample = load("moshi", "moshi.modules.resample")
    check(
        lambda: resample.ConvDownsample1d(
            2, dimension=4, causal=True, learnt=True, channel_wise=channel_wise
        ),
        4,
        20,
        2,
        dtype,
    )
    check(
        lambda: resample.ConvTrUpsample1d(
            2, dimension=4, causal=True, learnt=True, channel_wise=channel_wise
        ),
        4,
        10,
        1,
        dtype,
    )


# ----------------------------------------------------------------------------- dac


def test_dac_residual_units_stream_with_lookahead() -> None:
    """DAC's stride-1 blocks (Snake, dilated 'same' convs with old-style weight norm, a
    residual add) stream with their lookahead."""
    dac = load_dac()

    def make() -> nn.Module:
        return nn.Sequential(*(dac.ResidualUnit(4, d) for d in (1, 3, 9)))

    for dtype in DTYPES:
        sm = check(make, 4, 80, 1, dtype, lookahead="auto")  # Snake1d: measured
        assert sm.delay == 3 * (1 + 3 + 9)


@pytest.mark.parametrize("part", ["encoder", "decoder"])
def test_dac_without_lookahead_is_refused_with_the_module_and_reason(part: str) -> None:
    """DAC is non-causal: a causal stream is refused, naming the layer whose right pad reads
    the future, never a raw error or a wrong stream (it streams with lookahead, below)."""
    dac = load_dac()
    torch.manual_seed(0)
    if part == "encoder":
        model, example = dac.Encoder(d_model=4, strides=[2, 2], d_latent=4), torch.zeros(1, 1, 32)
    else:
        model, example = dac.Decoder(8, 8, [2, 2]), torch.zeros(1, 8, 8)
    new, _ = convert_causal(model.double().eval(), example.double())
    with pytest.raises(PaddingError, match=r"right pad .* needs samples from the future"):
        StreamingModule(new).init_state(example=example[..., :1])


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("part", ["encoder", "decoder"])
def test_dac_streams_with_lookahead(part: str, dtype: torch.dtype) -> None:
    """DAC's encoder (k=2s strided convs padded ceil(s/2)) and decoder (transposed convs
    k=2s cropping ceil(s/2)) stream exactly with their delay; Snake1d is measured."""
    dac = load_dac()
    if part == "encoder":
        make: Callable[[], nn.Module] = lambda: dac.Encoder(  # noqa: E731
            d_model=4, strides=[2, 2], d_latent=4
        )
        sm = check(make, 1, 40, 4, dtype, lookahead="auto")
        # k7 3, units 39, k4 s2 p1 2; at 1/2: units 2 * 39, k4 s2 p1 2 * 2; at 1/4: k3 p1 4
        assert sm.delay == 3 + 39 + 2 + 78 + 4 + 4
    else:
        sm = check(lambda: dac.Decoder(8, 8, [2, 2]), 8, 10, 1, dtype, lookahead="auto")
        # output samples: k7 3 frames (12), crop 1 (2), units 2 * 39, crop 1, units 39, k7 3
        assert sm.output_delay == 12 + 2 + 78 + 1 + 39 + 3


# ----------------------------------------------------------------------------- snac


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("part", ["encoder", "decoder"])
def test_snac_local_attention_streams_on_whole_blocks(part: str, dtype: torch.dtype) -> None:
    """SNAC's LocalMHA attends within blocks of ``window_size`` frames (``T // window_size``
    windows, rotary positions restarting in each): measured so (input ``p`` moves the outputs
    of its block and no others), it streams on whole blocks from the stream's start, its
    block in the delay on its clock. Encoder and decoder, at every chunking, batch 2."""
    snac = load("snac", "snac.layers")
    if part == "encoder":
        make: Callable[[], nn.Module] = lambda: snac.Encoder(  # noqa: E731
            d_model=16, strides=[2, 3], attn_window_size=4
        )
        # (the attention's width 64 is one head of 64) frames must fill whole blocks: 96
        # samples are 16 frames of 6
        sm = check(make, 1, 96, 6, dtype, convert=False, lookahead="auto")
        # the convs' 146 (see the test below), and the attention's 3 frames ahead at 1/6
        assert sm.delay == 146 + 3 * 6
    else:
        make = lambda: snac.Decoder(64, 64, [3, 2], attn_window_size=4)  # noqa: E731
        sm = check(make, 64, 8, 1, dtype, convert=False, lookahead="auto")
        # the convs' 143 output samples, and the attention's 3 frames (6 samples each)
        assert sm.output_delay == 143 + 3 * 6
    assert "the block of 4 time steps holding each step" in sm.explain()


def test_snac_local_attention_alone_streams_on_whole_blocks() -> None:
    """LocalMHA as the whole model is measured as the model itself: attention within blocks
    of its window, streamed on whole blocks with lookahead, exactly."""
    attention = load("snac", "snac.attention")
    torch.manual_seed(0)
    mha = attention.LocalMHA(dim=8, window_size=4, dim_head=4).double().eval()
    stream = StreamingModule(mha, lookahead="auto")
    x = torch.randn(2, 8, 16, dtype=torch.float64)
    for sizes in ([1] * 16, [3, 5, 8], [7, 0, 9]):
        assert stream.verify(x, sizes) <= 1e-12
    assert "LocalMHA '<model>': reads the block of 4 time steps" in stream.explain()


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("part", ["encoder", "decoder"])
def test_snac_streams_with_lookahead(part: str, dtype: torch.dtype) -> None:
    """SNAC's convolutional encoder and decoder (no attention): strides 2 and 3, 'same'
    dilated residual units, Snake measured per time step (no allow=), the decoder's
    transposed convs cropping ceil(s/2) with output_padding s % 2: exact with lookahead."""
    snac = load("snac", "snac.layers")
    if part == "encoder":
        make: Callable[[], nn.Module] = lambda: snac.Encoder(  # noqa: E731
            d_model=8, strides=[2, 3], attn_window_size=None
        )
        sm = check(make, 1, 60, 6, dtype, convert=False, lookahead="auto")
        # k7 'same' 3, residual units 3 * (1 + 3 + 9), k4 s2 p1 2; at 1/2: 2 * 39, k6 s3 p2
        # 3 of its inputs (6); at 1/6: k7 'same' 3 (18)
        assert sm.delay == 3 + 39 + 2 + 78 + 6 + 18
    else:
        make = lambda: snac.Decoder(16, 16, [3, 2], attn_window_size=None)  # noqa: E731
        sm = check(make, 16, 8, 1, dtype, convert=False, lookahead="auto")
        # in output samples: k7 'same' 3 frames (18), crop 2 of k6 s3 (2 * 2 = 4), units
        # 39 at 3 per frame (78), crop 1 of k4 s2 (1), units 39, k7 'same' 3
        assert sm.output_delay == 18 + 4 + 78 + 1 + 39 + 3
    assert "| transposed conv |" in sm.explain() or part == "encoder"


# ----------------------------------------------------------------------------- cached_conv


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("cached", [False, True], ids=["plain", "cached"])
def test_cached_conv_models_as_input(cached: bool, dtype: torch.dtype) -> None:
    """cached_conv's causal convs (``Conv1d`` padding in its forward; ``CachedConv1d``, the
    same with a cache buffer it writes on every call) convert into padkit convs and stream."""
    cc = load("cached_conv", "cached_conv")
    Conv = cc.CachedConv1d if cached else cc.Conv1d

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = Conv(1, 4, 3, padding=cc.get_padding(3, mode="causal"))
            self.b = Conv(4, 4, 4, stride=2, padding=cc.get_padding(4, 2, mode="causal"))
            self.c = Conv(4, 2, 3, dilation=2, padding=cc.get_padding(3, dilation=2, mode="causal"))

        def forward(self, x: Tensor) -> Tensor:
            return self.c(torch.relu(self.b(torch.relu(self.a(x)))))  # type: ignore[no-any-return]

    check(Net, 1, 40, 2, dtype)


def test_cached_transposed_conv_is_refused_with_the_module() -> None:
    """``CachedConvTranspose1d`` overrides forward (conv, cache add, crop): refused by name."""
    cc = load("cached_conv", "cached_conv")

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = cc.CachedConv1d(2, 4, 3, padding=cc.get_padding(3, mode="causal"))
            self.t = cc.CachedConvTranspose1d(4, 2, 4, stride=2, padding=1)

        def forward(self, x: Tensor) -> Tensor:
            return self.t(torch.relu(self.a(x)))  # type: ignore[no-any-return]

    torch.manual_seed(0)
    net = Net().double().eval()
    new, _ = convert_causal(net, torch.zeros(1, 2, 16, dtype=torch.float64))
    with pytest.raises(PaddingError, match="CachedConvTranspose1d 't' overrides forward"):
        StreamingModule(new).init_state(example=torch.zeros(1, 2, 1, dtype=torch.float64))


@pytest.mark.parametrize("length", [240, 241, 246])
def test_encodec_causal_strided_convs_convert_from_an_example_of_whole_hops(length: int) -> None:
    """Two causal strided SConv1d (strides 2 and 3: hop 6) whose extra pad completes the
    last stride window: an example of whole hops (240, 246) gives probes where that pad is 0
    and reads as no right pad; the copy differs at other lengths, and the conversion is
    made again from probes one step longer. Equal to the original at every length of a
    hop's residues, and it streams."""
    conv = load("encodec", "encodec.modules.conv")
    torch.manual_seed(0)
    model = nn.Sequential(
        conv.SConv1d(1, 4, 4, 2, causal=True, pad_mode="constant"),
        nn.ELU(),
        conv.SConv1d(4, 4, 6, 3, causal=True, pad_mode="constant"),
    ).eval()
    new, report = convert_causal(model, torch.randn(2, 1, length))
    with torch.no_grad():
        for n in range(length, length + 7):
            x = torch.randn(2, 1, n)
            torch.testing.assert_close(new(x), model(x), rtol=1e-5, atol=1e-6)
    if length % 6 == 0:
        assert any("one step longer" in n for n in report.notes), report
    sm = StreamingModule(new)
    x = torch.randn(2, 1, 60)
    with torch.no_grad():
        assert sm.verify(x, [1] * 60) <= 1e-5
