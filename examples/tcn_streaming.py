"""Train a small TCN on a synthetic causal task, then run it in streaming mode.

The TCN is written the usual way (residual blocks of dilated convs) with
``padding="causal"`` instead of pad-then-chomp. After a short training run it is wrapped in
:class:`padkit.streaming.StreamingModule` and fed a test signal in chunks of random sizes,
one sample included; the streamed output equals the offline output. With onnxruntime
installed, the streaming step is exported to ONNX (state as explicit inputs/outputs) and run
there too.

    python examples/tcn_streaming.py          # about 20 s on one CPU core
"""

from __future__ import annotations

import os
import random
import tempfile
import time

import torch
from torch import Tensor, nn

import padkit.nn as pn
from padkit.streaming import StreamingModule


class TemporalBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, kernel: int, dilation: int) -> None:
        super().__init__()
        self.conv1 = pn.Conv1d(c_in, c_out, kernel, dilation=dilation, padding="causal")
        self.conv2 = pn.Conv1d(c_out, c_out, kernel, dilation=dilation, padding="causal")
        self.act = nn.GELU()
        self.skip = pn.Conv1d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.conv2(self.act(self.conv1(x))) + self.skip(x))


class TCN(nn.Module):
    def __init__(self, hidden: int = 32, levels: int = 5, kernel: int = 3) -> None:
        super().__init__()
        self.blocks = nn.Sequential(
            *[TemporalBlock(1 if i == 0 else hidden, hidden, kernel, 2**i) for i in range(levels)]
        )
        self.head = pn.Conv1d(hidden, 1, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.blocks(x))


def target(x: Tensor) -> Tensor:
    """A nonlinear causal function of the past: y[t] = x[t-3] * x[t-9] + sin(2 x[t-21])."""

    def lag(v: Tensor, k: int) -> Tensor:
        return nn.functional.pad(v, (k, 0))[..., : v.shape[-1]]

    return lag(x, 3) * lag(x, 9) + torch.sin(2 * lag(x, 21))


def main() -> None:
    torch.manual_seed(0)
    random.seed(0)
    torch.set_num_threads(1)
    model = TCN()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    start = time.perf_counter()
    for it in range(301):
        x = torch.randn(16, 1, 256)
        loss = nn.functional.mse_loss(model(x)[..., 32:], target(x)[..., 32:])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if it % 75 == 0:
            print(f"step {it:3d}  mse {loss.item():.4f}")
    print(f"trained in {time.perf_counter() - start:.1f} s (target variance ~1.5)")

    model.eval()
    stream = StreamingModule(model)  # axis=-1: (N, C, T)
    x = torch.randn(1, 1, 500)
    with torch.no_grad():
        offline = model(x)
    sizes = []
    left = x.shape[-1]
    while left:
        sizes.append(min(left, random.choice([1, 1, 2, 7, 16, 33])))
        left -= sizes[-1]
    state = stream.init_state(batch_size=1)
    outs = []
    with torch.no_grad():
        for chunk in torch.split(x, sizes, dim=-1):
            y, state = stream.step(chunk, state)
            outs.append(y)
    streamed = torch.cat(outs, dim=-1)
    diff = (streamed - offline).abs().max().item()
    mse = nn.functional.mse_loss(offline[..., 32:], target(x)[..., 32:]).item()
    print(f"test mse {mse:.4f}; streamed {len(sizes)} chunks (sizes 1..33): max |diff| {diff:.2e}")
    print(f"state: {len(state)} tensors, {sum(v.numel() for v in state.values())} numbers")

    try:
        import onnxruntime as ort
    except ImportError:
        print("onnxruntime not installed: skipping the ONNX export")
        return
    length = 16
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "tcn_step.onnx")
        names = stream.export_onnx(path, torch.zeros(1, 1, length))
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        start_state = stream.init_state(batch_size=1)
        values = [start_state[k].numpy() for k in names]
        onnx_outs = []
        for chunk in torch.split(x[..., :496], length, dim=-1):
            feed = {"chunk": chunk.numpy()}
            feed.update({f"state_in.{k}": v for k, v in zip(names, values)})
            out, *values = sess.run(None, feed)
            onnx_outs.append(torch.from_numpy(out))
    onnx_diff = (torch.cat(onnx_outs, -1) - offline[..., :496]).abs().max().item()
    print(
        f"onnxruntime, {len(names)} state tensors, chunks of {length}: max |diff| {onnx_diff:.2e}"
    )


if __name__ == "__main__":
    main()
