"""Streaming step overhead: ``StreamingModule.step`` against hand-written ring buffers
doing the same arithmetic (the floors), side by side on the same weights.

The model is a 6-level causal TCN (``--channels`` 32, kernel 3, dilations 1, 2, 4, 8, 16,
32, a ReLU after each conv, batch 1). Two floors keep, per layer, the last
``dilation * (kernel - 1)`` samples of its input and, on each chunk, ``torch.cat`` and the
conv by the arithmetic padkit's step uses (one output of a dilated conv: its taps through
the undilated conv; a few outputs: their taps as one matmul; else ``F.conv1d``):

* ``bare ops``: one Python loop over the layers, ``F.relu`` after each conv: no modules,
  no checks, no state dict (what is left when nothing but the arithmetic runs);
* ``ring-buffer modules``: the model as written (the same ``nn.Sequential``, the same
  ``nn.ReLU`` modules) with each conv a hand-written streaming module holding its buffer
  (the way codecs write their streaming convs): what a user writes instead of padkit.

All streams take the same chunks and their outputs are compared with the model's
full-sequence output. Each round times one block of steps per stream, interleaved (the
order rotating), and a score is the median of the per-round paired ratios
``padkit / floor`` with its ``[min-max]``.

    python bench/streaming_floor.py                  # chunks of 1 and 64, 1 thread
    python bench/streaming_floor.py --chunks 1 16 64 256 --rounds 15
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import env_header, markdown_table

import padkit.nn as pnn
from padkit.streaming import StreamingModule

DILATIONS = (1, 2, 4, 8, 16, 32)


def build(channels: int) -> nn.Sequential:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for d in DILATIONS:
        layers += [pnn.Conv1d(channels, channels, 3, dilation=d, padding="causal"), nn.ReLU()]
    return nn.Sequential(*layers).eval()


def _ring_conv(conv: nn.Conv1d, buf: Tensor, x: Tensor) -> tuple[Tensor, Tensor]:
    """One layer of the floor: the conv's outputs for ``x`` and the next buffer."""
    n = x.shape[2]
    cat = torch.cat((buf, x), 2)
    d = conv.dilation[0]
    if n == 1 and d > 1:  # one output: its taps through the undilated conv
        y = F.conv1d(cat[:, :, ::d], conv.weight, conv.bias)
    elif d > 1 and n <= 512:  # a few outputs: their taps as one matmul
        k = conv.kernel_size[0]
        taps = cat.unfold(2, d * (k - 1) + 1, 1)[..., ::d]
        flat = taps.permute(0, 2, 1, 3).reshape(cat.shape[0], n, -1)
        w = conv.weight.reshape(conv.weight.shape[0], -1)
        y = F.linear(flat, w, conv.bias).transpose(1, 2)
    else:
        y = F.conv1d(cat, conv.weight, conv.bias, 1, 0, d)
    return y, cat[:, :, n:]


class RingBuffer:
    """The bare-ops floor: the convs as explicit history buffers, one loop, no modules."""

    def __init__(self, model: nn.Sequential, batch: int) -> None:
        self.convs = [m for m in model if isinstance(m, nn.Conv1d)]
        self.bufs = [
            torch.zeros(batch, c.in_channels, c.dilation[0] * (c.kernel_size[0] - 1))
            for c in self.convs
        ]

    def step(self, x: Tensor) -> Tensor:
        for i, c in enumerate(self.convs):
            y, self.bufs[i] = _ring_conv(c, self.bufs[i], x)
            x = F.relu(y)
        return x


class RingConv1d(nn.Module):
    """A hand-written streaming conv: it holds its buffer and runs the floor's arithmetic."""

    def __init__(self, conv: nn.Conv1d, batch: int) -> None:
        super().__init__()
        self.conv = conv
        history = conv.dilation[0] * (conv.kernel_size[0] - 1)
        self.buf = torch.zeros(batch, conv.in_channels, history)

    def forward(self, x: Tensor) -> Tensor:
        y, self.buf = _ring_conv(self.conv, self.buf, x)
        return y


def ring_modules(model: nn.Sequential, batch: int) -> nn.Sequential:
    """The module floor: the model as written, each conv a :class:`RingConv1d`."""
    return nn.Sequential(
        *[RingConv1d(m, batch) if isinstance(m, nn.Conv1d) else m for m in model]
    ).eval()


def run(channels: int, chunk: int, rounds: int, block_s: float) -> list[str]:
    model = build(channels)
    stream = StreamingModule(model)
    total = max(chunk * 64, 512)
    x = torch.randn(1, channels, total)
    with torch.no_grad():
        full = model(x)
        bare = RingBuffer(model, 1)
        mods = ring_modules(model, 1)
        state = stream.init_state(example=x[..., :chunk])
        chunks = [x[..., i : i + chunk] for i in range(0, total, chunk)]
        outs: dict[str, list[Tensor]] = {"padkit": [], "bare": [], "modules": []}
        for c in chunks:
            y, state = stream.step(c, state)
            outs["padkit"].append(y)
            outs["bare"].append(bare.step(c))
            outs["modules"].append(mods(c))
        diff = {k: float((torch.cat(v, 2) - full).abs().max()) for k, v in outs.items()}

        def padkit_block(n: int) -> float:
            nonlocal state
            t = time.perf_counter()
            for j in range(n):
                _, state = stream.step(chunks[j % len(chunks)], state)
            return (time.perf_counter() - t) / n

        def bare_block(n: int) -> float:
            t = time.perf_counter()
            for j in range(n):
                bare.step(chunks[j % len(chunks)])
            return (time.perf_counter() - t) / n

        def modules_block(n: int) -> float:
            t = time.perf_counter()
            for j in range(n):
                mods(chunks[j % len(chunks)])
            return (time.perf_counter() - t) / n

        blocks = {"padkit": padkit_block, "bare": bare_block, "modules": modules_block}
        per = bare_block(20)
        n = max(5, int(block_s / max(per, 1e-6)))
        times: dict[str, list[float]] = {k: [] for k in blocks}
        names = list(blocks)
        for r in range(rounds):
            for k in names[r % 3 :] + names[: r % 3]:  # the order rotates
                times[k].append(blocks[k](n))

    def ratio(floor: str) -> str:
        rs = [a / b for a, b in zip(times["padkit"], times[floor])]
        return f"{statistics.median(rs):.2f} [{min(rs):.2f}-{max(rs):.2f}]"

    med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    return [
        str(chunk),
        f"{med['padkit']:.1f}",
        f"{med['modules']:.1f}",
        f"{med['bare']:.1f}",
        f"{med['padkit'] / chunk:.2f}",
        ratio("modules"),
        ratio("bare"),
        f"{diff['padkit']:.0e} / {diff['modules']:.0e} / {diff['bare']:.0e}",
    ]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--channels", type=int, default=32)
    ap.add_argument("--chunks", type=int, nargs="*", default=[1, 64])
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--block-s", type=float, default=0.05)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(env_header(args.threads))
    rows = [run(args.channels, c, args.rounds, args.block_s) for c in args.chunks]
    print(
        markdown_table(
            [
                "chunk",
                "padkit µs/step",
                "ring-buffer modules µs/step",
                "bare ops µs/step",
                "padkit µs/sample",
                "padkit / ring-buffer modules",
                "padkit / bare ops",
                "max |diff| padkit / modules / bare",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
