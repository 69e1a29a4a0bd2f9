"""What streaming a measured module costs: a causal TCN block stack (Conv-TasNet's
separator, written out: 1x1 conv, PReLU, norm, dilated depthwise causal conv, PReLU, norm,
1x1 conv, residual) streamed with three kinds of norm, and with a causal local attention
at its end:

* ``channel norm``: a layer norm over the channels at each time step (Conv-TasNet's
  non-causal-free choice): acts on each time step, streamed as written;
* ``cumulative norm``: Conv-TasNet's cumulative layer norm (running sums over time, a count
  made with ``torch.arange``): streamed with its running sums carried
  (``padkit/streaming/_cumulative.py``: a ``TorchFunctionMode`` around its forward);
* ``+ local attention``: the channel-norm stack followed by a causal attention over the last
  ``--window`` frames written with a banded mask: streamed on a window of its last inputs
  (``padkit/streaming/_window.py``).

Each stream is checked against the model's full run, then timed: per round, every variant
streams the same input in chunks of ``--chunks`` (interleaved, order rotating); the score is
the median ms per step with its ``[min-max]`` over rounds, and the ratio of each variant's
per-step time to the channel-norm stack's in the same round.

    python bench/streaming_measured.py
    python bench/streaming_measured.py --blocks 8 --chunks 16 1 --rounds 7
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import env_header, markdown_table

import padkit.nn as pnn
from padkit.streaming import StreamingModule


class ChannelNorm(nn.Module):
    """Layer norm over the channels of ``(N, C, T)``, at each time step."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(c)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(x.transpose(1, 2)).transpose(1, 2)


class CumulativeNorm(nn.Module):
    """Conv-TasNet's cumulative layer norm over ``(N, C, T)``."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(1, c, 1))
        self.beta = nn.Parameter(torch.zeros(1, c, 1))

    def forward(self, x: Tensor) -> Tensor:
        c, t = x.shape[1], x.shape[2]
        cum_sum = torch.cumsum(x.sum(1, keepdim=True), dim=-1)
        cum_pow = torch.cumsum(x.pow(2).sum(1, keepdim=True), dim=-1)
        count = torch.arange(start=c, end=c * (t + 1), step=c, dtype=x.dtype).view(1, 1, -1)
        mean = cum_sum / count
        var = cum_pow / count - mean.pow(2)
        return self.gamma * (x - mean) / (var + 1e-8).sqrt() + self.beta


class LocalAttention(nn.Module):
    """Causal attention over the last ``window`` frames of ``(N, C, T)``, one head."""

    def __init__(self, c: int, window: int) -> None:
        super().__init__()
        self.window = window
        self.qkv = nn.Linear(c, 3 * c)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.qkv(x.transpose(1, 2)).chunk(3, -1)
        i = torch.arange(x.shape[-1], device=x.device)
        band = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < self.window)
        att = (q @ k.transpose(1, 2) / q.shape[-1] ** 0.5).masked_fill(~band, float("-inf"))
        return x + (att.softmax(-1) @ v).transpose(1, 2)


class Block(nn.Module):
    def __init__(self, c: int, hidden: int, d: int, norm: type[nn.Module]) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv1d(c, hidden, 1),
            nn.PReLU(),
            norm(hidden),
            pnn.Conv1d(hidden, hidden, 3, dilation=d, groups=hidden, padding="causal"),
            nn.PReLU(),
            norm(hidden),
            nn.Conv1d(hidden, c, 1),
        )

    def forward(self, x: Tensor) -> Tensor:
        return x + self.body(x)


def build(blocks: int, c: int, norm: type[nn.Module], window: int = 0) -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = [Block(c, 2 * c, 2 ** (i % 8), norm) for i in range(blocks)]
    if window:
        layers.append(LocalAttention(c, window))
    return nn.Sequential(*layers).eval()


def run(sm: StreamingModule, x: Tensor, chunk: int) -> tuple[Tensor, float]:
    state = sm.init_state(example=x[..., :1])
    outs = []
    t0 = time.perf_counter()
    for c in x.split(chunk, -1):
        y, state = sm.step(c, state)
        outs.append(y)
    return torch.cat(outs, -1), time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--channels", type=int, default=64)
    parser.add_argument("--window", type=int, default=32, help="local attention frames")
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--chunks", type=int, nargs="+", default=[16, 1])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(env_header(args.threads))
    variants = {
        "channel norm": build(args.blocks, args.channels, ChannelNorm),
        "cumulative norm": build(args.blocks, args.channels, CumulativeNorm),
        "channel norm + local attention": build(
            args.blocks, args.channels, ChannelNorm, args.window
        ),
    }
    x = torch.randn(1, args.channels, args.samples, generator=torch.Generator().manual_seed(1))
    streams = {name: StreamingModule(m) for name, m in variants.items()}
    rows = []
    with torch.no_grad():
        for name, sm in streams.items():
            got, _ = run(sm, x, args.chunks[0])  # the self-check runs on this first step
            diff = float((got - variants[name](x)).abs().max())
            measured = {"window": list(sm._windows), "carried": list(sm._cumulative)}
            print(f"- {name}: max |diff| against the full run {diff:.1e}; {measured}")
        for chunk in args.chunks:
            times: dict[str, list[float]] = {name: [] for name in streams}
            steps = -(-args.samples // chunk)
            names = list(streams)
            for r in range(args.rounds):
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    times[name].append(run(streams[name], x, chunk)[1] / steps * 1e3)
            base = times["channel norm"]
            for name, ts in times.items():
                ratios = [a / b for a, b in zip(ts, base)]
                rows.append(
                    [
                        name,
                        chunk,
                        f"{statistics.median(ts):.3f} [{min(ts):.3f}-{max(ts):.3f}]",
                        f"{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]",
                    ]
                )
    print(f"- {args.blocks} blocks of {args.channels} channels; {args.samples} samples, batch 1")
    print()
    print(markdown_table(["model", "chunk", "ms/step", "vs channel norm"], rows))


if __name__ == "__main__":
    main()
