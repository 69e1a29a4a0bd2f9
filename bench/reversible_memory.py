"""Memory and gradient accuracy of reversible chains whose input is padded 3 -> 128 channels.

The network is N additive couplings; each coupling's Fm and Gm are a "same" 3x3 conv
(no bias), a train-mode BatchNorm and a ReLU on 64-channel halves (``--norm none``: conv
with bias and ReLU). The 3-channel input is zero-padded to 128 channels at the end of the
channel axis, either before the chain (``F.pad``, "outside") or inside its first block
(``PaddedCoupling(ChannelPad(3, 128), coupling)``, "inside"). Configurations:

- plain: the same blocks as an ``nn.Sequential`` (no reversibility);
- padkit outside / inside, ``keep_input`` True and False: padkit's ``ReversibleSequential``;
- memcnn RevNet: padding outside, every coupling in ``memcnn.InvertibleModuleWrapper`` with
  ``keep_input=False``, as memcnn's own RevNet blocks use it (it frees each wrapper's input,
  the padded tensor included);
- memcnn, first keeps input: the same with ``keep_input=True`` on the first wrapper (needed
  when the chain's input must survive, e.g. a leaf or a tensor used elsewhere);
- memcnn RevNet, pad inside: the same with padkit's padding in the first wrapper, which
  holds ``PaddedCoupling(ChannelPad(3, 128), memcnn coupling)``;
- memcnn, pad inside, first keeps input: that, with ``keep_input=True`` on the first wrapper.

"Kept" is the memory the autograd graph holds after the forward pass: distinct storages
saved for backward (seen by ``torch.autograd.graph.saved_tensors_hooks``) plus the tensors
held on custom autograd contexts (memcnn keeps its tensors there), parameters excluded and
storages memcnn has freed counted as 0. The gradient table compares each chain's
gradients (input and every parameter, float32) with the plain network's: the largest
``max|g - g_plain| / max|g_plain|`` over the tensors (marked "*" when a tensor is
nonzero where the plain gradient is exactly zero). Speed is not measured here: a
reversible chain runs each block about twice (plus its inverse) per step.

Run: python bench/reversible_memory.py [--depths 4 16 64] [--grad-depths 4 16] [--size 64]
     [--batch 1] [--norm batch|none] [--activation relu|tanh] [--dtype float32|float64]
     [--threads 2]
"""

from __future__ import annotations

import argparse
import platform
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's padkit

import padkit.nn as pnn
from padkit.reversible import (
    AdditiveCoupling,
    ChannelPad,
    PaddedCoupling,
    ReversibleSequential,
)

with warnings.catch_warnings():  # memcnn changes warning filters and warns at import
    warnings.simplefilter("ignore")
    import memcnn
warnings.filterwarnings("ignore", "TypedStorage is deprecated")  # memcnn frees storage with it

MIB = 2.0**20


def half_fn(c: int, norm: str, act: str) -> nn.Module:
    activation = nn.ReLU() if act == "relu" else nn.Tanh()
    if norm == "batch":
        return nn.Sequential(
            pnn.Conv2d(c, c, 3, padding="same", bias=False), nn.BatchNorm2d(c), activation
        )
    return nn.Sequential(pnn.Conv2d(c, c, 3, padding="same"), activation)


def couplings(n: int, c: int, norm: str, act: str = "relu") -> list[AdditiveCoupling]:
    torch.manual_seed(0)
    return [
        AdditiveCoupling(half_fn(c // 2, norm, act), half_fn(c // 2, norm, act)) for _ in range(n)
    ]


def configurations(
    blocks: list[AdditiveCoupling], c_in: int, c: int
) -> dict[str, Callable[[Tensor], Tensor]]:
    """name -> function of the unpadded input; all share the blocks' parameters."""

    def outside(t: Tensor) -> Tensor:
        return F.pad(t, [0, 0, 0, 0, 0, c - c_in])

    first = PaddedCoupling(ChannelPad(c_in, c), blocks[0])
    plain = nn.Sequential(first, *blocks[1:])
    mem = [memcnn.AdditiveCoupling(b.Fm, b.Gm) for b in blocks]
    wrap = memcnn.InvertibleModuleWrapper

    def memcnn_chain(first_keeps: bool, pad_inside: bool) -> Callable[[Tensor], Tensor]:
        head = PaddedCoupling(ChannelPad(c_in, c), mem[0]) if pad_inside else mem[0]
        chain = nn.Sequential(
            wrap(head, keep_input=first_keeps), *[wrap(m, keep_input=False) for m in mem[1:]]
        )
        if pad_inside:  # a copy: memcnn frees (keep_input=False) or doubles the grad of a leaf
            return lambda t: chain(t * 1)
        return lambda t: chain(outside(t))

    nets: dict[str, Callable[[Tensor], Tensor]] = {"plain": plain}
    for keep in (True, False):
        rev_out = ReversibleSequential(*blocks, keep_input=keep)
        rev_in = ReversibleSequential(first, *blocks[1:], keep_input=keep)
        nets[f"padkit outside, keep_input={keep}"] = lambda t, r=rev_out: r(outside(t))
        nets[f"padkit inside, keep_input={keep}"] = rev_in
    nets["memcnn RevNet (keep_input=False)"] = memcnn_chain(False, False)
    nets["memcnn, first keeps input"] = memcnn_chain(True, False)
    nets["memcnn RevNet, pad inside"] = memcnn_chain(False, True)
    nets["memcnn, pad inside, first keeps input"] = memcnn_chain(True, True)
    return nets


def _tensors(obj: Any) -> Iterator[Tensor]:
    if isinstance(obj, Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _tensors(item)


def _ctx_tensors(fn: Any) -> Iterator[Tensor]:
    """Tensors held as attributes of the custom autograd nodes reachable from ``fn``."""
    seen, stack = set(), [fn]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        for value in getattr(node, "__dict__", {}).values():
            yield from _tensors(value)
        stack.extend(next_fn for next_fn, _ in node.next_functions)


def kept_bytes(run: Callable[[], Tensor], params: Sequence[Tensor]) -> int:
    skip = {p.untyped_storage().data_ptr() for p in params}
    packed: list[Tensor] = []

    def pack(t: Tensor) -> Tensor:
        packed.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = run()
    sizes: dict[int, int] = {}
    for t in [*packed, *_ctx_tensors(y.grad_fn)]:
        s = t.untyped_storage()
        if s.nbytes() and s.data_ptr() not in skip:
            sizes[s.data_ptr()] = s.nbytes()
    return sum(sizes.values())


def gradients(run: Callable[[Tensor], Tensor], x: Tensor, params: Sequence[Tensor]) -> list[Tensor]:
    xi = x.detach().clone().requires_grad_(True)
    for p in params:
        p.grad = None
    y = run(xi)
    (y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)).sum().backward()
    assert xi.grad is not None
    return [xi.grad, *[p.grad if p.grad is not None else torch.zeros_like(p) for p in params]]


def relative_error(got: Sequence[Tensor], want: Sequence[Tensor]) -> str:
    """max|g - g_plain| / max|g_plain| over the tensors whose plain gradient is not all zero;
    "*" when some tensor is nonzero where the plain gradient is exactly zero."""
    worst, spurious = 0.0, False
    for a, b in zip(got, want):
        scale = float(b.abs().max())
        if scale > 0:
            worst = max(worst, float((a - b).abs().max()) / scale)
        else:
            spurious |= float(a.abs().max()) > 0
    return f"{worst:.1e}" + ("*" if spurious else "")


def table(names: Sequence[str], rows: dict[int, list[str]], first: str = "N") -> None:
    print(f"| {first} | " + " | ".join(names) + " |")
    print("|---:|" + "---:|" * len(names))
    for n, cells in rows.items():
        print(f"| {n} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--grad-depths", type=int, nargs="*", default=[4, 16])
    parser.add_argument("--in-channels", type=int, default=3)
    parser.add_argument("--channels", type=int, default=128)
    parser.add_argument("--size", type=int, default=64, help="image height and width")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--norm", choices=["batch", "none"], default="batch")
    parser.add_argument("--activation", choices=["relu", "tanh"], default="relu")
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_default_dtype(getattr(torch, args.dtype))
    c_in, c = args.in_channels, args.channels
    torch.manual_seed(1)
    x = torch.randn(args.batch, c_in, args.size, args.size)
    in_b = x.numel() * x.element_size()
    out_b = args.batch * c * args.size * args.size * x.element_size()
    act = {"relu": "ReLU", "tanh": "Tanh"}[args.activation]
    print(
        f"torch {torch.__version__}, memcnn {memcnn.__version__}, python "
        f"{platform.python_version()}, {args.threads} threads; input {tuple(x.shape)} "
        f"{args.dtype} ({in_b / MIB:.3f} MiB), output {c} channels ({out_b / MIB:.3f} MiB); "
        "halves: conv3x3" + ("-BatchNorm(train)" if args.norm == "batch" else "") + f"-{act}"
    )

    print("\nMiB kept by the autograd graph after the forward pass (parameters excluded)\n")
    rows: dict[int, list[str]] = {}
    names: list[str] = []
    for n in args.depths:
        blocks = couplings(n, c, args.norm, args.activation)
        params = [p for b in blocks for p in b.parameters()]
        nets = configurations(blocks, c_in, c)
        names = list(nets)
        xg = x.clone().requires_grad_(True)
        kept = [kept_bytes(lambda net=net, xg=xg: net(xg), params) for net in nets.values()]
        rows[n] = [f"{b / MIB:.3f}" for b in kept]
    table(names, rows)

    if not args.grad_depths:
        return
    print(
        f"\nGradients against the plain network ({args.dtype}): max over x and the parameters of "
        "max|g - g_plain| / max|g_plain| (*: nonzero where the plain gradient is exactly 0)\n"
    )
    rows = {}
    for n in args.grad_depths:
        blocks = couplings(n, c, args.norm, args.activation)
        params = [p for b in blocks for p in b.parameters()]
        nets = configurations(blocks, c_in, c)
        grads = {name: gradients(net, x, params) for name, net in nets.items()}
        rows[n] = [relative_error(grads[k], grads["plain"]) for k in names if k != "plain"]
    table([k for k in names if k != "plain"], rows)


if __name__ == "__main__":
    main()
