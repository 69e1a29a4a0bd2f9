"""Neural audio codecs from Hugging Face transformers (small configs, random weights, no
downloads) streamed end to end: ``convert_causal`` moves the pads and crops their wrapper
modules write in tensor code into padkit layers, and ``StreamingModule`` streams the result,
LSTMs included, equal to the HF module's own full-sequence output."""

from __future__ import annotations

import copy
import functools
import random

import pytest
import torch
from torch import Tensor, nn

from padkit import PaddingError
from padkit.streaming import StreamingModule, convert_causal

transformers = pytest.importorskip("transformers")

HOP = 8  # upsampling_ratios [4, 2]


@functools.cache
def encodec(pad_mode: str, causal: bool = True) -> nn.Module:
    torch.manual_seed(0)
    config = transformers.EncodecConfig(
        num_filters=4,
        upsampling_ratios=[4, 2],
        hidden_size=8,
        codebook_size=16,
        num_lstm_layers=2,
        use_causal_conv=causal,
        pad_mode=pad_mode,
        audio_channels=1,
    )
    return transformers.EncodecModel(config).eval()


@functools.cache
def mimi() -> nn.Module:
    torch.manual_seed(0)
    config = transformers.MimiConfig(
        num_filters=4,
        upsampling_ratios=[4, 2],
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=4,
        intermediate_size=16,
        codebook_size=16,
        codebook_dim=8,
        num_quantizers=2,
        sampling_rate=200,
        frame_rate=12.5,
        upsample_groups=8,
    )
    return transformers.MimiModel(config).eval()


class Chain(nn.Module):
    """Two modules in series (Mimi's SEANet encoder and its downsample conv)."""

    def __init__(self, a: nn.Module, b: nn.Module) -> None:
        super().__init__()
        self.a, self.b = a, b

    def forward(self, x: Tensor) -> Tensor:
        return self.b(self.a(x))  # type: ignore[no-any-return]


def stream(sm: StreamingModule, x: Tensor, sizes: list[int]) -> Tensor:
    state = sm.init_state(example=x[..., :1])
    outs = []
    for chunk in x.split(sizes, -1):
        y, state = sm.step(chunk, state)
        outs.append(y)
    return torch.cat(outs, -1)


def chunkings(n: int) -> list[list[int]]:
    rng = random.Random(n)
    rand: list[int] = []
    while sum(rand) < n:
        rand.append(min(rng.randint(1, 23), n - sum(rand)))
    primes = [7] * (n // 7) + ([n % 7] if n % 7 else [])
    return [[1] * n, primes, rand]


def parts() -> list[tuple[str, nn.Module, Tensor]]:
    e = encodec("constant")
    m = mimi()
    return [
        ("encodec-encoder", e.encoder, torch.randn(3, 1, 6 * HOP)),
        ("encodec-decoder", e.decoder, torch.randn(3, 8, 6)),
        (
            "mimi-encoder",
            Chain(m.encoder.encoder_seanet, m.encoder.downsample),
            torch.randn(3, 1, 8 * HOP),
        ),
        ("mimi-decoder", Chain(m.decoder.upsample, m.decoder.decoder_seanet), torch.randn(3, 8, 4)),
    ]


@pytest.mark.parametrize(
    "index", range(4), ids=["encodec-enc", "encodec-dec", "mimi-enc", "mimi-dec"]
)
def test_codec_streams_exactly_after_convert_causal(index: int) -> None:
    _, model, x = parts()[index]
    new, report = convert_causal(model, x[:1])
    assert report.changes and not report.skipped, str(report)
    sm = StreamingModule(new)
    with torch.no_grad():
        full = model(x)  # the HF module itself, full sequence
        for sizes in chunkings(x.shape[-1]):
            torch.testing.assert_close(stream(sm, x, sizes), full, rtol=1e-4, atol=1e-5)
        # per-row reset at a hop boundary: row 1 restarts and equals its stream run alone
        a, state = sm.step(x[..., : x.shape[-1] // 2], sm.init_state(example=x[..., :1]))
        state = sm.reset_rows(state, [1])
        b, _ = sm.step(x[..., x.shape[-1] // 2 :], state)
        torch.testing.assert_close(
            torch.cat([a, b], -1)[[0, 2]], full[[0, 2]], rtol=1e-4, atol=1e-5
        )
        torch.testing.assert_close(
            b[1:2], model(x[1:2, :, x.shape[-1] // 2 :]), rtol=1e-4, atol=1e-5
        )


def test_convert_causal_reports_what_the_codec_wrappers_pad() -> None:
    e = encodec("constant")
    _, report = convert_causal(e.encoder, torch.zeros(1, 1, 6 * HOP))
    text = str(report)
    assert "EncodecConv1d (pads (6, 0) in mode 'zeros'" in text  # the 0-d buffer pad
    assert "completes the last stride window" in text  # the extra padding of strided convs
    _, report = convert_causal(e.decoder, torch.zeros(1, 8, 6))
    assert "crops (0, 4) off its" in str(report)  # EncodecConvTranspose1d's slice, k=8 s=4


def test_extra_padding_keeps_the_offline_output_for_every_length() -> None:
    """EnCodec pads the end so that a partial last stride window still gives a frame; the
    converted model does the same offline, and a stream emits the complete frames only."""
    e = encodec("constant")
    new, _ = convert_causal(e.encoder, torch.zeros(1, 1, 6 * HOP))
    x = torch.randn(2, 1, 6 * HOP + 3)
    with torch.no_grad():
        full = e.encoder(x)
        torch.testing.assert_close(new(x), full, rtol=1e-5, atol=1e-6)
        assert full.shape[-1] == 7
        streamed = stream(StreamingModule(new), x, [5] * 10 + [1])
    assert streamed.shape[-1] == 6
    torch.testing.assert_close(streamed, full[..., :6], rtol=1e-4, atol=1e-5)


def reflect_part(part: str) -> tuple[nn.Module, Tensor, int]:
    """EnCodec with its default pad_mode="reflect": the module, an input of 12 frames, and
    its start-up in input samples. The encoder's last conv (kernel 7, left pad 6 at the frame
    rate) reflects frames 1..6, complete after 7 hops; the decoder's first conv (kernel 7)
    reflects frames 1..6 of its input: 7 frames."""
    e = encodec("reflect")
    if part == "encoder":
        return e.encoder, torch.randn(3, 1, 12 * HOP), 7 * HOP
    return e.decoder, torch.randn(3, 8, 12), 7


@pytest.mark.parametrize("part", ["encoder", "decoder"])
def test_reflect_codec_streams_exactly_after_its_startup_delay(part: str) -> None:
    model, x, startup = reflect_part(part)
    new, report = convert_causal(model, x[:1])
    assert "mode 'reflect'" in str(report) and not report.skipped, str(report)
    sm = StreamingModule(new)
    n = x.shape[-1]
    with torch.no_grad():
        full = model(x)  # the HF module itself, full sequence, reflect padding
        for sizes in chunkings(n):
            torch.testing.assert_close(stream(sm, x, sizes), full, rtol=1e-4, atol=1e-5)
        assert sm.startup_delay == startup
        # chunks of 1: nothing until the reflected samples have arrived, then every output
        # with the sample that completes it (encoder: complete frames; decoder: HOP per frame)
        state = sm.init_state(example=x[..., :1])
        total, counts = 0, []
        for chunk in x.split(1, -1):
            y, state = sm.step(chunk, state)
            total += y.shape[-1]
            counts.append(total)
    per = (lambda m: m // HOP) if part == "encoder" else (lambda m: m * HOP)
    assert counts == [0 if m < startup else per(m) for m in range(1, n + 1)]


def test_reflect_codec_resets_whole_batches_and_exports_past_its_startup(tmp_path: object) -> None:
    """A restarted row would wait for its start-up while the other rows emit: reset_rows
    refuses part of a batch (restarting all rows works); the ONNX step, exported from a state
    past the start-up, continues the stream in onnxruntime."""
    import onnxruntime as ort

    model, x, startup = reflect_part("encoder")
    new, _ = convert_causal(model, x[:1])
    sm = StreamingModule(new)
    with torch.no_grad():
        full = model(x)
        first, state = sm.step(x[..., :startup], sm.init_state(example=x[..., :1]))
    with pytest.raises(PaddingError, match=r"rows=\[1\] restart part of a batch of 3.*'reflect'"):
        sm.reset_rows(state, [1])
    with torch.no_grad():
        again = stream(sm, x, [5] * (x.shape[-1] // 5) + [x.shape[-1] % 5])
        restarted = sm.reset_rows(state, [0, 1, 2])
        a, restarted = sm.step(x[..., :9], restarted)
        b, _ = sm.step(x[..., 9:], restarted)
    torch.testing.assert_close(again, full, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(torch.cat([a, b], -1), full, rtol=1e-4, atol=1e-5)
    assert a.shape[-1] == 0  # the restart holds its first samples again

    with pytest.raises(PaddingError, match=f"first run needs {startup} samples"):
        sm.step_module(torch.zeros(3, 1, HOP))
    path = str(tmp_path) + "/encodec_reflect_step.onnx"  # type: ignore[operator]
    names = sm.export_onnx(path, torch.zeros(3, 1, HOP), state)
    sess = ort.InferenceSession(path)
    values = [state[k].numpy() for k in names]
    outs = [first]
    for chunk in x[..., startup:].split(HOP, -1):
        feed = {"chunk": chunk.numpy(), **{f"state_in.{k}": v for k, v in zip(names, values)}}
        out, *values = sess.run(None, feed)
        outs.append(torch.from_numpy(out))
    torch.testing.assert_close(torch.cat(outs, -1), full, rtol=1e-4, atol=1e-5)


def test_unconverted_codecs_raise_naming_the_module() -> None:
    e = encodec("constant")
    m = mimi()
    sm = StreamingModule(m.encoder.downsample)  # pad_mode="replicate", extra padding
    x = torch.randn(1, 8, 16)
    with pytest.raises(PaddingError, match=r"MimiConv1d '<model>' returned \d+ time steps in all"):
        sm.step(x[..., :7], sm.init_state(example=x[..., :1]))
    for model in (e.encoder, m.encoder.encoder_seanet):
        sm = StreamingModule(model)
        x = torch.randn(1, 1, 64)
        with pytest.raises(PaddingError, match=r"Conv1d 'layers\.0'"):
            sm.step(x[..., :7], sm.init_state(example=x[..., :1]))


def test_codec_step_exports_to_onnx_with_its_lstm_state(tmp_path: object) -> None:
    import onnxruntime as ort

    e = encodec("constant")
    x = torch.randn(3, 1, 6 * HOP)
    new, _ = convert_causal(e.encoder, x[:1])
    sm = StreamingModule(new)
    path = str(tmp_path) + "/encodec_step.onnx"  # type: ignore[operator]
    names = sm.export_onnx(path, torch.zeros(2, 1, HOP))
    assert any(k.endswith(".lstm.c") for k in names)
    sess = ort.InferenceSession(path)
    state = sm.init_state(example=x[..., :1])
    values = [state[k].numpy() for k in names]
    outs = []
    for chunk in x.split(HOP, -1):
        feed = {"chunk": chunk.numpy(), **{f"state_in.{k}": v for k, v in zip(names, values)}}
        out, *values = sess.run(None, feed)
        outs.append(torch.from_numpy(out))
    with torch.no_grad():
        torch.testing.assert_close(torch.cat(outs, -1), e.encoder(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("index", [2, 3], ids=["mimi-enc", "mimi-dec"])
def test_mimi_step_exports_to_onnx(index: int, tmp_path: object) -> None:
    """Mimi's convolutional encoder and decoder: the exported step, run in onnxruntime
    chunk by chunk, equals the HF modules' full-sequence output."""
    import onnxruntime as ort

    name, model, x = parts()[index]
    model.eval()
    new, _ = convert_causal(model, x[:1])
    sm = StreamingModule(new)
    chunk_len = 2 * HOP if name == "mimi-encoder" else 2  # multiples of the total strides
    chunks = x.split(chunk_len, -1)
    # the first chunk in torch (a transposed conv without left padding exports from a
    # state past its first step), the rest through the exported step
    with torch.no_grad():
        first, state = sm.step(chunks[0], sm.init_state(example=x[..., :1]))
    path = str(tmp_path) + f"/{name}.onnx"  # type: ignore[operator]
    names = sm.export_onnx(path, torch.zeros(3, x.shape[1], chunk_len), state)
    sess = ort.InferenceSession(path)
    values = [state[k].numpy() for k in names]
    outs = [first]
    for chunk in chunks[1:]:
        feed = {"chunk": chunk.numpy(), **{f"state_in.{k}": v for k, v in zip(names, values)}}
        out, *values = sess.run(None, feed)
        outs.append(torch.from_numpy(out))
    with torch.no_grad():
        torch.testing.assert_close(torch.cat(outs, -1), model(x), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_mimi_encoder_at_its_default_sizes_converts_and_streams() -> None:
    """Mimi's own widths (64 filters, 512 hidden; 14 conv layers): the converted copy equals
    the HF module to float rounding relative to the output's scale (an element-wise check
    refused it: rounding reaches outputs near zero), and streams it at chunks of 1, 7 and a hop.
    The small configs above cover the same code fast."""
    torch.manual_seed(0)
    m = transformers.MimiModel(transformers.MimiConfig(num_hidden_layers=1)).eval()
    model = Chain(m.encoder.encoder_seanet, m.encoder.downsample)
    hop = 1920
    x = torch.randn(1, 1, 2 * hop)
    new, report = convert_causal(model, x)
    assert report.changes and not report.skipped, str(report)
    sm = StreamingModule(new)
    with torch.no_grad():
        full = model(x)
        scale = float(full.abs().max())
        for sizes in ([hop, hop], [7] * (2 * hop // 7) + [2 * hop % 7], [1] * hop + [hop]):
            diff = float((stream(sm, x, sizes) - full).abs().max())
            assert diff <= 1e-5 * scale, (sizes[:2], diff, scale)


def test_converted_codec_pickles_like_the_original() -> None:
    """The converted wrappers are subclasses made at run time; a pickle (torch.save of the
    whole module, multiprocessing) restores them, still instances of the HF classes."""
    import pickle

    m = mimi()
    x = torch.randn(2, 1, 8 * HOP)
    new, _ = convert_causal(m.encoder.encoder_seanet, x[:1])
    back = pickle.loads(pickle.dumps(new))
    assert type(back.layers[0]) is type(new.layers[0])
    assert isinstance(back.layers[0], type(m.encoder.encoder_seanet.layers[0]))
    with torch.no_grad():
        torch.testing.assert_close(back(x), m.encoder.encoder_seanet(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("part", ["encoder", "decoder"])
def test_non_causal_encodec_converts_at_every_length_and_streams_with_lookahead(
    part: str,
) -> None:
    """EnCodec's 48 kHz layout (``use_causal_conv=False``, reflect pads, two-layer LSTM):
    each ``EncodecConv1d`` pads a fixed split of ``k - s`` and the extra pad that completes
    its last window. The converted copy equals the HF module at every length over a hop's
    residues (a pad baked in from the probes would not), and streams with lookahead."""
    module = copy.deepcopy(getattr(encodec("reflect", causal=False), part)).double()
    channels, n = (1, 64) if part == "encoder" else (8, 12)
    new, _ = convert_causal(module, torch.zeros(1, channels, n, dtype=torch.float64))
    with torch.no_grad():
        for length in range(n, n + 9):
            x = torch.randn(2, channels, length, dtype=torch.float64)
            torch.testing.assert_close(new(x), module(x))
    sm = StreamingModule(new, lookahead="auto")
    x = torch.randn(2, channels, 2 * n, dtype=torch.float64)
    for sizes in ([1] * (2 * n), [7] * (2 * n // 7) + [2 * n % 7]):
        assert sm.verify(x, sizes) < 1e-9
