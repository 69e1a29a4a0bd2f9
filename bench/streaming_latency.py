"""Per-chunk latency: padkit streaming against recomputing the receptive field.

For each model and chunk length, the same input stream is processed two ways, chunk by chunk,
interleaved in one loop so that both see the same machine state:

* **stream**: ``StreamingModule.step(chunk, state)``: each layer keeps its history;
* **recompute**: keep the last ``R + L`` input samples (``R`` = the model's receptive field,
  rounded up to its total stride) and run the full model on that window, keeping its last
  outputs: what a streaming service without layer state has to do.

Both give the same outputs (checked on every chunk). Prints the median and 90th-percentile
latency per chunk and the ratio recompute / stream.

    python bench/streaming_latency.py                 # 1 thread, CPU
    python bench/streaming_latency.py --threads 4 --chunks 300
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import Tensor, nn

import padkit.nn as pn
from padkit.streaming import StreamingModule


class Block(nn.Module):
    def __init__(self, c: int, k: int, d: int) -> None:
        super().__init__()
        self.conv1 = pn.Conv1d(c, c, k, dilation=d, padding="causal")
        self.conv2 = pn.Conv1d(c, c, k, dilation=d, padding="causal")
        self.act = nn.ReLU()

    def forward(self, x: Tensor) -> Tensor:
        return self.act(x + self.conv2(self.act(self.conv1(x))))


def tcn(channels: int = 64, levels: int = 8, k: int = 3) -> nn.Module:
    return nn.Sequential(
        pn.Conv1d(1, channels, 1),
        *[Block(channels, k, 2**i) for i in range(levels)],
        pn.Conv1d(channels, 1, 1),
    )


class ResUnit(nn.Module):
    def __init__(self, c: int, d: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.ELU(), pn.Conv1d(c, c, 3, dilation=d, padding="causal"), nn.ELU(), pn.Conv1d(c, c, 1)
        )

    def forward(self, x: Tensor) -> Tensor:
        return x + self.body(x)


def encoder(channels: int = 16) -> nn.Module:
    """EnCodec/SEANet-shaped: strides 2, 4, 5, 8 (hop 320), causal_block downsampling."""
    layers: list[nn.Module] = [pn.Conv1d(1, channels, 7, padding="causal")]
    c = channels
    for s in (2, 4, 5, 8):
        layers += [ResUnit(c, 1), ResUnit(c, 3), ResUnit(c, 9), nn.ELU()]
        layers.append(pn.Conv1d(c, 2 * c, 2 * s, stride=s, padding="causal_block"))
        c *= 2
    layers += [nn.ELU(), pn.Conv1d(c, 64, 7, padding="causal")]
    return nn.Sequential(*layers)


def receptive_field(model: nn.Module, hop: int) -> int:
    """Input samples the last output depends on (from the gradient's support)."""
    n = 8192
    x = torch.zeros(1, 1, n, requires_grad=True)
    model(x + 0.1)[..., -1].sum().backward()
    assert x.grad is not None
    first = int(torch.nonzero(x.grad.flatten())[0])
    r = n - first
    return -(-r // hop) * hop


def run(name: str, model: nn.Module, hop: int, length: int, chunks: int) -> tuple[str, ...]:
    model.eval()
    stream = StreamingModule(model)
    field = receptive_field(model, hop)
    window = field + length
    x = torch.randn(1, 1, window + chunks * length)
    history = x[..., :window]
    state = stream.init_state(1)
    t_stream: list[float] = []
    t_full: list[float] = []
    worst = 0.0
    with torch.no_grad():
        _, state = stream.step(history, state)  # warm both up on the same past
        for i in range(chunks):
            start = window + i * length
            chunk = x[..., start : start + length]
            t0 = time.perf_counter()
            y, state = stream.step(chunk, state)
            t1 = time.perf_counter()
            ref = model(x[..., start + length - window : start + length])[..., -y.shape[-1] :]
            t2 = time.perf_counter()
            t_stream.append(t1 - t0)
            t_full.append(t2 - t1)
            worst = max(worst, float((y - ref).abs().max()))
    if worst > 1e-4:
        raise SystemExit(f"{name} L={length}: streaming and recompute differ by {worst}")

    def q(v: list[float], p: float) -> float:
        return sorted(v)[int(p * (len(v) - 1))] * 1e3

    ms_s, ms_f = statistics.median(t_stream) * 1e3, statistics.median(t_full) * 1e3
    return (
        name,
        str(field),
        str(length),
        f"{ms_s:.3f}",
        f"{q(t_stream, 0.9):.3f}",
        f"{ms_f:.3f}",
        f"{q(t_full, 0.9):.3f}",
        f"{ms_f / ms_s:.1f}x",
        f"{worst:.1e}",
    )


def layer_overhead(steps: int) -> tuple[float, float]:
    """Median step time of one stateful causal conv (16 channels, k=3, d=4) at chunk 1 and
    of the bare ``F.conv1d`` on its buffered window, interleaved: the difference is what the
    streaming machinery costs per layer and step."""
    conv = pn.Conv1d(16, 16, 3, dilation=4, padding="causal").eval()
    stream = StreamingModule(conv)
    state = stream.init_state(1)
    x = torch.randn(1, 16, 1)
    window = torch.randn(1, 16, 9)
    t_step: list[float] = []
    t_conv: list[float] = []
    with torch.no_grad():
        for _ in range(steps):
            t0 = time.perf_counter()
            _, state = stream.step(x, state)
            t1 = time.perf_counter()
            torch.nn.functional.conv1d(window, conv.weight, conv.bias, 1, 0, 4)
            t2 = time.perf_counter()
            t_step.append(t1 - t0)
            t_conv.append(t2 - t1)
    return statistics.median(t_step) * 1e6, statistics.median(t_conv) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--chunks", type=int, default=150)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cases = [
        ("tcn-16x4 (k3, d1..8)", tcn(16, 4), 1, (1, 16)),
        ("tcn-64x8 (k3, d1..128)", tcn(), 1, (1, 16, 160)),
        ("encoder hop 320", encoder(), 320, (320, 1280)),
    ]
    head = (
        "model",
        "R",
        "chunk",
        "stream ms",
        "p90",
        "recompute ms",
        "p90",
        "speed-up",
        "max |diff|",
    )
    rows = [head]
    for name, model, hop, lengths in cases:
        for length in lengths:
            rows.append(run(name, model, hop, length, args.chunks))
    print(
        f"torch {torch.__version__}, {args.threads} thread(s), {args.chunks} chunks per row, "
        "batch 1, float32, CPU"
    )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for j, r in enumerate(rows):
        print("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |")
        if j == 0:
            print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    step_us, conv_us = layer_overhead(max(args.chunks, 300))
    print(
        f"one causal conv (16 ch, k3, d4), chunk 1: step {step_us:.1f} us, its bare conv1d "
        f"{conv_us:.1f} us: streaming overhead {step_us - conv_us:.1f} us per layer and step"
    )


if __name__ == "__main__":
    main()
