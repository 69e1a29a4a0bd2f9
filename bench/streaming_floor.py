"""Streaming step overhead: ``StreamingModule.step`` against a hand-written ring buffer
doing the same arithmetic (the floor), side by side on the same weights.

The model is a 6-level causal TCN (``--channels`` 32, kernel 3, dilations 1, 2, 4, 8, 16,
32, a ReLU after each conv, batch 1). The floor keeps, per layer, the last
``dilation * (kernel - 1)`` samples of its input and, on each chunk, ``torch.cat`` and the
conv by the arithmetic padkit's step uses (one output of a dilated conv: its taps through
the undilated conv; a few outputs: their taps as one matmul; else ``F.conv1d``), then
``F.relu``: no modules, no checks, no state dict. Both streams take the same
chunks and their outputs are compared with the model's full-sequence output. Each round
times one block of steps per side, interleaved (the order alternating), and the score is
the median of the per-round paired ratios ``padkit / floor`` with its ``[min-max]``.

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


class RingBuffer:
    """The floor: the same convs as explicit history buffers, one cat and conv per layer."""

    def __init__(self, model: nn.Sequential, batch: int) -> None:
        self.convs = [m for m in model if isinstance(m, nn.Conv1d)]
        self.bufs = [
            torch.zeros(batch, c.in_channels, c.dilation[0] * (c.kernel_size[0] - 1))
            for c in self.convs
        ]

    def step(self, x: Tensor) -> Tensor:
        n = x.shape[2]
        for i, c in enumerate(self.convs):
            cat = torch.cat((self.bufs[i], x), 2)
            self.bufs[i] = cat[:, :, n:]
            d = c.dilation[0]
            if n == 1 and d > 1:  # one output: its taps through the undilated conv
                y = F.conv1d(cat[:, :, ::d], c.weight, c.bias)
            elif d > 1 and n <= 512:  # a few outputs: their taps as one matmul
                k = c.kernel_size[0]
                taps = cat.unfold(2, d * (k - 1) + 1, 1)[..., ::d]
                flat = taps.permute(0, 2, 1, 3).reshape(cat.shape[0], n, -1)
                w = c.weight.reshape(c.weight.shape[0], -1)
                y = F.linear(flat, w, c.bias).transpose(1, 2)
            else:
                y = F.conv1d(cat, c.weight, c.bias, 1, 0, d)
            x = F.relu(y)
        return x


def run(channels: int, chunk: int, rounds: int, block_s: float) -> list[str]:
    model = build(channels)
    stream = StreamingModule(model)
    total = max(chunk * 64, 512)
    x = torch.randn(1, channels, total)
    with torch.no_grad():
        full = model(x)
        floor = RingBuffer(model, 1)
        state = stream.init_state(example=x[..., :chunk])
        outs_p, outs_f = [], []
        for i in range(0, total, chunk):
            y, state = stream.step(x[..., i : i + chunk], state)
            outs_p.append(y)
            outs_f.append(floor.step(x[..., i : i + chunk]))
        diff_p = float((torch.cat(outs_p, 2) - full).abs().max())
        diff_f = float((torch.cat(outs_f, 2) - full).abs().max())

        chunks = [x[..., i : i + chunk] for i in range(0, total, chunk)]

        def padkit_block(n: int) -> float:
            nonlocal state
            t = time.perf_counter()
            for j in range(n):
                _, state = stream.step(chunks[j % len(chunks)], state)
            return (time.perf_counter() - t) / n

        def floor_block(n: int) -> float:
            t = time.perf_counter()
            for j in range(n):
                floor.step(chunks[j % len(chunks)])
            return (time.perf_counter() - t) / n

        per = floor_block(20)
        n = max(5, int(block_s / max(per, 1e-6)))
        ratios, tp, tf = [], [], []
        for r in range(rounds):
            if r % 2:
                a, b = floor_block(n), padkit_block(n)
            else:
                b, a = padkit_block(n), floor_block(n)
            tp.append(b)
            tf.append(a)
            ratios.append(b / a)
    med = statistics.median(ratios)
    return [
        str(chunk),
        f"{statistics.median(tp) * 1e6:.1f}",
        f"{statistics.median(tf) * 1e6:.1f}",
        f"{statistics.median(tp) * 1e6 / chunk:.2f}",
        f"{med:.2f} [{min(ratios):.2f}-{max(ratios):.2f}]",
        f"{diff_p:.0e} / {diff_f:.0e}",
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
                "ring buffer µs/step",
                "padkit µs/sample",
                "padkit / ring buffer",
                "max |diff| padkit / floor",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
