"""Activation memory of a reversible chain whose first block pads 3 -> 128 channels.

For a chain of N blocks (N = 4, 16, 64 by default), each an additive coupling of two
"same" 3x3 convs + ReLU on 64-channel halves, this counts the bytes saved for backward
during the forward pass (distinct storages seen by
``torch.autograd.graph.saved_tensors_hooks``; parameters excluded) for:

- plain:   the same blocks as an ``nn.Sequential`` (no reversibility);
- outside: ``F.pad`` to 128 channels, then ``padkit.reversible.ReversibleSequential``;
- inside:  ``ReversibleSequential`` whose first block is
  ``PaddedCoupling(ChannelPad(3, 128), coupling)``;

each reversible case with ``keep_input=True`` (the default) and ``keep_input=False``.
It also checks once (N = 4) that the reversible gradients equal the plain ones.

Run: python bench/reversible_memory.py [--depths 4 16 64] [--size 64] [--batch 1]
"""

from __future__ import annotations

import argparse
import platform
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import padkit.nn as pnn
from padkit.reversible import AdditiveCoupling, ChannelPad, PaddedCoupling, ReversibleSequential


def half_fn(c: int) -> nn.Module:
    return nn.Sequential(pnn.Conv2d(c, c, 3, padding="same"), nn.ReLU())


def blocks(n: int, c_in: int, c: int, pad_inside: bool) -> list[nn.Module]:
    torch.manual_seed(0)
    out: list[nn.Module] = [AdditiveCoupling(half_fn(c // 2), half_fn(c // 2)) for _ in range(n)]
    if pad_inside:
        out[0] = PaddedCoupling(ChannelPad(c_in, c), out[0])
    return out


def saved_bytes(run: Callable[[], Tensor], params: Sequence[Tensor]) -> int:
    skip = {p.untyped_storage().data_ptr() for p in params}
    seen: dict[int, int] = {}

    def pack(t: Tensor) -> Tensor:
        s = t.untyped_storage()
        if s.data_ptr() not in skip:
            seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()
    return sum(seen.values())


def measure(n: int, c_in: int, c: int, x: Tensor) -> dict[str, int]:
    def padded(t: Tensor) -> Tensor:
        return F.pad(t, [0, 0, 0, 0, 0, c - c_in])

    inside, outside = blocks(n, c_in, c, True), blocks(n, c_in, c, False)
    params = [p for b in inside + outside for p in b.parameters()]
    nets: dict[str, Callable[[], Tensor]] = {
        "plain": lambda: nn.Sequential(*inside)(x),
    }
    for keep in (True, False):
        rin = ReversibleSequential(*inside, keep_input=keep)
        rout = ReversibleSequential(*outside, keep_input=keep)
        nets[f"outside keep_input={keep}"] = lambda r=rout: r(padded(x))
        nets[f"inside keep_input={keep}"] = lambda r=rin: r(x)
    return {name: saved_bytes(run, params) for name, run in nets.items()}


def gradient_check(c_in: int, c: int, x: Tensor) -> float:
    bl = blocks(4, c_in, c, True)
    rev, plain = ReversibleSequential(*bl), nn.Sequential(*bl)
    params = list(rev.parameters())
    grads = []
    for net in (rev, plain):
        xi = x.detach().clone().requires_grad_(True)
        g = torch.autograd.grad(net(xi).square().mean(), [xi, *params])
        grads.append(g)
    return max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(*grads))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--in-channels", type=int, default=3)
    parser.add_argument("--channels", type=int, default=128)
    parser.add_argument("--size", type=int, default=64, help="image height and width")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    x = torch.randn(args.batch, args.in_channels, args.size, args.size, requires_grad=True)
    mib = 2.0**20
    in_b = x.numel() * 4
    out_b = args.batch * args.channels * args.size * args.size * 4
    print(
        f"torch {torch.__version__}, python {platform.python_version()}; input "
        f"{tuple(x.shape)} float32 ({in_b / mib:.3f} MiB), output {args.channels} channels "
        f"({out_b / mib:.3f} MiB)"
    )
    print("MiB saved for backward by the forward pass (parameters excluded)\n")
    rows = {n: measure(n, args.in_channels, args.channels, x) for n in args.depths}
    names = list(next(iter(rows.values())))
    print("| N | " + " | ".join(names) + " |")
    print("|---:|" + "---:|" * len(names))
    for n, figures in rows.items():
        print(f"| {n} | " + " | ".join(f"{figures[k] / mib:.3f}" for k in names) + " |")
    err = gradient_check(args.in_channels, args.channels, x)
    print(f"\nN=4 gradients, reversible vs plain: max relative difference {err:.1e}")


if __name__ == "__main__":
    main()
