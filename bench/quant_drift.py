"""Drift of a quantized padkit chain from its quantized torch twin, in output steps.

A chain alternates padkit convs (TF ``"same"`` at stride 2, per-side pads, a depthwise
conv) with padkit ``AvgPool2d`` (per-side pads, pads counted). Its twin is the same chain
of torch layers, each fed through an explicit ``F.pad`` (TF SAME pads computed from the
input size), with the same weights. Both are quantized the same way through torch.ao's
eager post-training quantization (``QuantStub`` / ``DeQuantStub``, the x86 default
qconfig, ``prepare``, the same calibration batches, ``convert``), as
``tests/test_quantization.py`` builds its twins.

Two figures per chain length ``L``, each the largest difference over several random
inputs (an even and an odd size), in quantization steps (the twin's output scale):

* ``per layer``: layer ``L`` of each quantized chain fed the same quantized input (the
  twin's activation before it): the one-step guarantee is about this figure;
* ``end to end``: the quantized chains' first ``L`` layers, each fed the same float input
  (quantized by its own ``QuantStub``): the per-layer differences compound here.

Also the share of output elements that differ end to end (by half a step or more). Run ``python
bench/quant_drift.py --help``.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.ao import quantization as tq
from torch.ao.quantization import DeQuantStub, QuantStub

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import env_header, markdown_table

import padkit.nn as pn

convert: Callable[..., Any] = tq.convert
get_default_qconfig: Callable[..., Any] = tq.get_default_qconfig
prepare: Callable[..., Any] = tq.prepare

Pairs = tuple[tuple[int, int], ...]


def same_pads(n: int, k: int, s: int) -> tuple[int, int]:
    """TF SAME pads of one axis, written out independently of padkit."""
    out = -(-n // s)
    total = max((out - 1) * s + k - n, 0)
    return total // 2, total - total // 2


class Pad(nn.Module):
    """``F.pad`` by fixed (lo, hi) pairs per spatial axis, or by TF SAME's for (k, s)."""

    def __init__(self, pairs: Pairs | None, same: tuple[int, int] | None = None) -> None:
        super().__init__()
        self.pairs, self.same = pairs, same

    def forward(self, x: Tensor) -> Tensor:
        pairs = self.pairs
        if self.same is not None:
            pairs = tuple(same_pads(int(n), *self.same) for n in x.shape[2:])
        assert pairs is not None
        return F.pad(x, [p for pair in reversed(pairs) for p in pair])


def conv(
    cin: int, cout: int, k: int, s: int, pads: Pairs | str, groups: int = 1
) -> tuple[nn.Module, nn.Module]:
    ours = pn.Conv2d(cin, cout, k, s, padding=pads, groups=groups)
    ref = nn.Conv2d(cin, cout, k, s, groups=groups)
    ref.load_state_dict(ours.state_dict())
    pad = Pad(None, (k, s)) if pads == "same" else Pad(pads)  # type: ignore[arg-type]
    return ours, nn.Sequential(pad, ref)


def avg(k: int, s: int, pads: Pairs) -> tuple[nn.Module, nn.Module]:
    ours = pn.AvgPool2d(k, s, padding=pads, count_include_pad=True)
    return ours, nn.Sequential(Pad(pads), nn.AvgPool2d(k, s))


#: one cycle of the chain after its first layer (8 channels in and out)
CYCLE: list[tuple[str, Callable[[], tuple[nn.Module, nn.Module]]]] = [
    ("AvgPool2d 3/1 ((0,2),(1,1))", lambda: avg(3, 1, ((0, 2), (1, 1)))),
    ("Conv2d 3/1 ((0,2),(2,0))", lambda: conv(8, 8, 3, 1, ((0, 2), (2, 0)))),
    ("AvgPool2d 2/2 ((1,0),(0,1))", lambda: avg(2, 2, ((1, 0), (0, 1)))),
    ("Conv2d dw 3/1 ((1,1),(0,2))", lambda: conv(8, 8, 3, 1, ((1, 1), (0, 2)), groups=8)),
    ("AvgPool2d 3/1 ((2,0),(1,1))", lambda: avg(3, 1, ((2, 0), (1, 1)))),
    ("Conv2d 3/2 same", lambda: conv(8, 8, 3, 2, "same")),
]


def chains(length: int, seed: int) -> tuple[list[str], nn.Sequential, nn.Sequential]:
    """The padkit chain of ``length`` layers and its twin, each between quant stubs."""
    torch.manual_seed(seed)
    names, ours, twin = ["Conv2d 3/2 same (4->8)"], *[[x] for x in conv(4, 8, 3, 2, "same")]
    for i in range(length - 1):
        name, make = CYCLE[i % len(CYCLE)]
        a, b = make()
        names.append(name)
        ours.append(a)
        twin.append(b)
    models = []
    for layers in (ours, twin):
        models.append(nn.Sequential(QuantStub(), *layers, DeQuantStub()).eval())
    return names, models[0], models[1]


def quantize(model: nn.Module, calibration: list[Tensor]) -> nn.Sequential:
    model.qconfig = get_default_qconfig("x86")
    prepared = prepare(model)
    with torch.no_grad():
        for x in calibration:
            prepared(x)
    return convert(prepared)  # type: ignore[no-any-return]


def steps(got: Tensor, want: Tensor) -> tuple[float, float]:
    """The largest difference in ``want``'s quantization steps, and the share of elements
    that differ by at least half a step (the two scales may differ in their last bits)."""
    diff = (got.dequantize() - want.dequantize()).abs() / want.q_scale()
    return float(diff.max()), float((diff >= 0.5).float().mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--length", type=int, default=6, help="layers in the chain (1-12)")
    parser.add_argument("--seed", type=int, default=0, help="the first seed")
    parser.add_argument("--seeds", type=int, default=3, help="seeds (weights, data)")
    parser.add_argument("--inputs", type=int, default=4, help="random inputs per size")
    args = parser.parse_args()
    if not 1 <= args.length <= 12:
        parser.error(f"--length must be 1-12, got {args.length}")
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    torch.set_num_threads(1)
    print(env_header(1))
    print()

    sizes = ((64, 63), (57, 60))
    worst: dict[int, list[float]] = {}
    names: list[str] = []
    for seed in range(args.seed, args.seed + args.seeds):
        names, ours, twin = chains(args.length, seed)
        g = torch.Generator().manual_seed(seed + 1000)
        calibration = [torch.randn(4, 4, h, w, generator=g) for h, w in sizes for _ in range(4)]
        q_ours, q_twin = quantize(ours, calibration), quantize(twin, calibration)
        inputs = [
            torch.randn(2, 4, h, w, generator=g) for h, w in sizes for _ in range(args.inputs)
        ]
        with torch.no_grad():
            for n in range(1, len(names) + 1):
                row = worst.setdefault(n, [0.0, 0.0, 0.0])
                for x in inputs:
                    before = q_twin[:n](x)  # the twin's quantized activation before layer n
                    row[0] = max(row[0], steps(q_ours[n](before), q_twin[n](before))[0])
                    e2e, share = steps(q_ours[: n + 1](x), q_twin[: n + 1](x))
                    row[1], row[2] = max(row[1], e2e), max(row[2], share)
    rows = [
        [n, name, f"{w[0]:.2f}", f"{w[1]:.2f}", f"{100 * w[2]:.1f}%"]
        for (n, w), name in zip(sorted(worst.items()), names)
    ]
    header = ["L", "layer L", "per layer (steps)", "end to end (steps)", "differing outputs"]
    print(markdown_table(header, rows))
    print()
    print(
        f"Largest over {args.seeds} seeds (weights and calibration), each with "
        f"{2 * args.inputs} inputs of 2x4x{sizes[0][0]}x{sizes[0][1]} and "
        f"2x4x{sizes[1][0]}x{sizes[1][1]}; calibration: 8 batches of 4. Steps are the twin's "
        "output scale; 'differing outputs' is the largest share of outputs that differ (by "
        "half a step or more)."
    )


if __name__ == "__main__":
    main()
