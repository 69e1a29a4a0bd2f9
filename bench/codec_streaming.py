"""Per-chunk latency of streaming Mimi's convolutional encoder: padkit against Hugging Face's
own padding cache, on the same weights.

The model is ``transformers``' ``MimiModel`` (random weights, built from a config: nothing is
downloaded), reduced to its convolutional encoder: the SEANet encoder (``encoder_seanet``,
no LSTM in Mimi) followed by the ``downsample`` conv, Mimi's ``pad_mode="replicate"``. Its
strides are Mimi's (ratios 8, 6, 5, 4 and the downsample's 2: one frame per 1920 samples at
24 kHz); the widths are reduced by default (``--filters 16 --hidden 128``; Mimi's own are 64
and 512: ``--default-sizes``).

Two streams run the same input, interleaved chunk by chunk in one loop:

* **padkit**: ``convert_causal`` + ``StreamingModule.step``;
* **HF**: the modules' own ``padding_cache=MimiConv1dPaddingCache(...)`` argument, built as
  ``MimiModel.encode(..., use_streaming=True)`` builds it (``MimiEncoder``'s code), one call
  of ``encoder_seanet`` and ``downsample`` per chunk.

Each stream's concatenated frames are compared with the HF module's full-sequence output on
the same samples (``max |diff|``; the complete frames only). A stream that raises is reported
with its error. Chunk sizes: the hop (1920), half a hop, 7 samples and 1 sample (those run on
a shorter stretch of input).

    python bench/codec_streaming.py                  # 1 thread, about a minute
    python bench/codec_streaming.py --default-sizes  # Mimi's own widths (slower)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor, nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

# common turns padkit's optional oneDNN backend off before padkit loads
from common import env_header, markdown_table, max_abs_diff  # noqa: E402

from padkit.streaming import StreamingModule, convert_causal  # noqa: E402


class ConvEncoder(nn.Module):
    """Mimi's convolutional encoder: SEANet, then the downsample conv."""

    def __init__(self, seanet: nn.Module, downsample: nn.Module) -> None:
        super().__init__()
        self.seanet = seanet
        self.downsample = downsample

    def forward(self, x: Tensor, padding_cache: object = None) -> Tensor:
        if padding_cache is None:
            return self.downsample(self.seanet(x))  # type: ignore[no-any-return]
        h = self.seanet(x, padding_cache=padding_cache)
        return self.downsample(h, padding_cache=padding_cache)  # type: ignore[no-any-return]


def build(default_sizes: bool, filters: int, hidden: int) -> tuple[nn.Module, int]:
    import transformers

    torch.manual_seed(0)
    kwargs = {}
    if not default_sizes:
        kwargs = {"num_filters": filters, "hidden_size": hidden, "upsample_groups": hidden}
    config = transformers.MimiConfig(num_hidden_layers=1, **kwargs)
    model = transformers.MimiModel(config).eval()
    enc = ConvEncoder(model.encoder.encoder_seanet, model.encoder.downsample).eval()
    hop = 1
    for r in config.upsampling_ratios:
        hop *= r
    hop *= int(enc.downsample.conv.stride[0])
    return enc, hop


def hf_cache(enc: ConvEncoder) -> object:
    """The padding cache ``MimiModel.encode(use_streaming=True)`` builds (same arguments)."""
    from transformers.models.mimi.modeling_mimi import MimiConv1dPaddingCache

    seanet = enc.seanet
    layers = [seanet.get_submodule(n) for n in seanet._conv1d_layer_names] + [enc.downsample]
    return MimiConv1dPaddingCache(
        num_layers=len(layers),
        per_layer_padding=[m.padding_total for m in layers],
        per_layer_padding_mode=[m.pad_mode for m in layers],
        per_layer_in_channels=[m.in_channels for m in layers],
    )


def run(
    enc: ConvEncoder,
    stream: StreamingModule,
    x: Tensor,
    chunk: int,
    full: Tensor,
    hop: int,
) -> list[object]:
    """Both streams over ``x`` in chunks of ``chunk``, interleaved; one table row."""
    state = stream.init_state(example=x[..., :1])
    cache = hf_cache(enc)
    times: dict[str, list[float]] = {"padkit": [], "hf": []}
    outs: dict[str, list[Tensor]] = {"padkit": [], "hf": []}
    error: dict[str, str] = {}

    def padkit_step(c: Tensor) -> None:
        nonlocal state
        y, state = stream.step(c, state)
        outs["padkit"].append(y)

    def hf_step(c: Tensor) -> None:
        outs["hf"].append(enc(c, padding_cache=cache))

    steps: dict[str, Callable[[Tensor], None]] = {"padkit": padkit_step, "hf": hf_step}
    with torch.no_grad():
        # warm-up on a throwaway state (padkit's self-check runs before its first step)
        stream.step(x[..., :chunk], stream.init_state(example=x[..., :1]))
        for i, c in enumerate(x.split(chunk, -1)):
            order = ("padkit", "hf") if i % 2 == 0 else ("hf", "padkit")
            for name in order:
                if name in error:
                    continue
                t0 = time.perf_counter()
                try:
                    steps[name](c)
                except Exception as err:  # report what the stream says, and go on
                    error[name] = f"{type(err).__name__}: {str(err).splitlines()[0][:70]}"
                    continue
                times[name].append(time.perf_counter() - t0)
    frames = x.shape[-1] // hop  # complete frames
    row: list[object] = [chunk, len(times["padkit"]) or len(times["hf"])]
    for name in ("padkit", "hf"):
        if name in error:
            row += [f"raises {error[name]}", "", ""]
            continue
        got = torch.cat(outs[name], -1)
        diff = max_abs_diff(got[..., :frames], full[..., :frames])
        exact = f"{diff:.1e}" if got.shape[-1] >= frames else f"{got.shape[-1]}/{frames} frames"
        t = sorted(times[name])
        p90 = t[min(len(t) - 1, int(0.9 * len(t)))]
        row += [f"{1e3 * statistics.median(t):.3f}", f"{1e3 * p90:.3f}", exact]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--default-sizes", action="store_true", help="Mimi's own widths")
    parser.add_argument("--filters", type=int, default=16)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--hops", type=int, default=8, help="hops streamed at chunk >= 7")
    parser.add_argument("--short", type=int, default=1, help="hops streamed at chunk 1")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    enc, hop = build(args.default_sizes, args.filters, args.hidden)
    x = torch.randn(1, 1, args.hops * hop)
    with torch.no_grad():
        full = enc(x)  # the HF module, whole sequence
        t0 = time.perf_counter()
        new, _ = convert_causal(enc, x[..., : 3 * hop])
        convert_s = time.perf_counter() - t0
    stream = StreamingModule(new)
    widths = (
        "Mimi's default widths"
        if args.default_sizes
        else (f"num_filters={args.filters}, hidden_size={args.hidden}")
    )
    params = sum(p.numel() for p in enc.parameters())
    print(env_header(args.threads))
    print(
        f"- model: transformers {__import__('transformers').__version__} MimiModel "
        f"encoder_seanet + downsample ({widths}; {params / 1e6:.2f} M parameters), hop {hop}, "
        f"pad_mode={enc.downsample.pad_mode!r}, batch 1; convert_causal {convert_s:.2f} s; "
        f"outputs up to {float(full.abs().max()):.3g} in magnitude"
    )
    print("- padkit's oneDNN backend off (bench/common.py): both streams run torch's kernels")
    print()
    header = [
        "chunk",
        "steps",
        "padkit ms",
        "p90",
        "padkit max |diff|",
        "HF cache ms",
        "p90",
        "HF max |diff|",
    ]
    rows = []
    for chunk, hops in ((hop, args.hops), (hop // 2, args.hops), (7, args.short), (1, args.short)):
        xs = x[..., : hops * hop]
        rows.append(run(enc, stream, xs, chunk, full, hop))
    print(markdown_table(header, rows))


if __name__ == "__main__":
    main()
