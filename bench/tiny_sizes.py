"""Tiny tensors: padkit with its oneDNN backend on, off and forced, on a size sweep.

For each layer (``padkit.nn``, TF-'same' padding unless stated) and each spatial size
(8, 16, 28, 56, 112; batch 1; 8 channels, and 32 with ``--channels 8 32``), one process
times, interleaved (``bench/common.py``):

* ``torch``: torch's own symmetric layer of the same FLOPs (the floor, for reference);
* ``off``: the ``padkit.nn`` layer with the backend off (``PADKIT_NATIVE=0``: torch plans);
* ``oneDNN``: the same layer with every op forced onto the backend;
* ``auto``: the backend on as users get it (the tuner measures each size class on its
  first calls; a fresh scratch choices file; timed after warm-up calls, once the choice
  is made).

Layers: max pool 3x3 s2; avg pool 3x3 s2 ``count_include_pad=False``; a dense 3x3 s2 conv;
a depthwise 3x3 s2 conv; ConvTranspose2d 3x3 s2 ``padding="same"``; a causal Conv1d (k3,
dilation 2, ``padding="causal"``) on lengths of 8x the sweep size (64 to 896).

Printed: µs per call (median of rounds) and ``auto / min(off, oneDNN)``: the median over
rounds of the paired ratio of ``auto``'s block to the faster of the two others' blocks of
the same round ``[min-max]`` (the target: at most 1.10). Run
``python bench/tiny_sizes.py --help``.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import env_header, markdown_table, max_abs_diff, measure_case

import padkit.native as native
import padkit.nn as pn
from padkit.functional import _taps
from padkit.native import _dispatch

Fn = Callable[[Tensor], Tensor]

SIZES = (8, 16, 28, 56, 112)
LAYERS = ("max pool", "avg pool", "conv", "dw conv", "conv transpose", "causal conv1d")
TARGET = 1.10


def build(layer: str, c: int, n: int) -> tuple[Tensor, nn.Module, nn.Module]:
    """(input, padkit layer, torch's symmetric layer of the same FLOPs)."""
    torch.manual_seed(0)
    x = torch.randn(1, c, n, n)
    pk: nn.Module
    ref: nn.Module
    if layer == "max pool":
        pk, ref = pn.MaxPool2d(3, 2, padding="same"), nn.MaxPool2d(3, 2, padding=1)
    elif layer == "avg pool":
        pk = pn.AvgPool2d(3, 2, padding="same", count_include_pad=False)
        ref = nn.AvgPool2d(3, 2, padding=1, count_include_pad=False)
    elif layer in ("conv", "dw conv"):
        g = c if layer == "dw conv" else 1
        pk = pn.Conv2d(c, c, 3, 2, padding="same", groups=g)
        ref = nn.Conv2d(c, c, 3, 2, padding=1, groups=g)
    elif layer == "conv transpose":
        pk = pn.ConvTranspose2d(c, c, 3, 2, padding="same")
        ref = nn.ConvTranspose2d(c, c, 3, 2, padding=1, output_padding=1)
    elif layer == "causal conv1d":
        x = torch.randn(1, c, 8 * n)
        pk = pn.Conv1d(c, c, 3, dilation=2, padding="causal")
        ref = nn.Conv1d(c, c, 3, dilation=2, padding=2)
    else:
        raise ValueError(layer)
    if isinstance(ref, nn.modules.conv._ConvNd):
        ref.load_state_dict(pk.state_dict())
    return x, pk.eval(), ref.eval()


def _with_backend(m: nn.Module, force: bool, on: bool = True) -> Fn:
    """``m`` with the backend on (``force``: every eligible op on it) or off; each padkit
    variant pays the same switch per call."""

    def run(x: Tensor) -> Tensor:
        _dispatch.active = _dispatch.HOOK if on else None
        _dispatch.HOOK.force = force
        try:
            return m(x)
        finally:
            _dispatch.active, _dispatch.HOOK.force = None, False

    return run


def run_cell(layer: str, c: int, n: int, rounds: int, block_s: float) -> list[str]:
    x, pk, ref = build(layer, c, n)
    fns: dict[str, Fn] = {
        "torch": ref,
        "off": _with_backend(pk, False, on=False),
        "oneDNN": _with_backend(copy.deepcopy(pk), True),
        "auto": _with_backend(copy.deepcopy(pk), False),
    }
    with torch.no_grad():
        # warm-up: the size class's first calls run on torch, a later one measures it; a
        # 1-d conv's per-tap choice is made after its first TIME_AFTER calls
        for _ in range(_taps.TIME_AFTER + 8):
            for v in ("off", "oneDNN", "auto"):
                fns[v](x)
        want = fns["off"](x)
        diff = max(max_abs_diff(fns[v](x), want) for v in ("oneDNN", "auto"))
    calls = {name: (lambda f=f: f(x)) for name, f in fns.items()}
    res, other, _ = measure_case(calls, "torch", rounds=rounds, block_s=block_s)
    ms = {k: v.per_round_ms for k, v in res.items()}
    paired = [a / min(o, f) for a, o, f in zip(ms["auto"], ms["off"], ms["oneDNN"])]
    ratio = statistics.median(paired)
    lo, hi = min(paired), max(paired)
    ok = "yes" if ratio <= TARGET else ("within spread" if lo <= TARGET else "no")
    side = "oneDNN" if res["oneDNN"].ms < res["off"].ms else "torch plan"
    size = f"{8 * n}" if layer == "causal conv1d" else f"{n}x{n}"
    return [
        layer,
        str(c),
        size,
        *(f"{res[v].ms * 1e3:.1f}" for v in ("torch", "off", "oneDNN", "auto")),
        side,
        f"{ratio:.2f} [{lo:.2f}–{hi:.2f}]",
        ok,
        f"{other:.2f}",
        f"{diff:.0e}",
    ]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--layers", nargs="*", default=[], help="substrings of the layer names")
    ap.add_argument("--sizes", type=int, nargs="*", default=list(SIZES))
    ap.add_argument("--channels", type=int, nargs="*", default=[8])
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--block-s", type=float, default=0.01)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    lib = native.load()
    native.disable()
    native.set_tuning(True)
    _dispatch.HOOK.tuner.attach(Path(tempfile.mkdtemp()), lib.isa, lib.runtime_version)
    info = native.info()
    print(env_header(args.threads))
    print(f"- oneDNN backend: {info['onednn']}, ISA {info['isa']}; auto: a fresh choices file\n")
    layers = [name for name in LAYERS if not args.layers or any(p in name for p in args.layers)]
    rows = []
    for c in args.channels:
        for layer in layers:
            for n in args.sizes:
                row = run_cell(layer, c, n, args.rounds, args.block_s)
                print(" | ".join(row), file=sys.stderr, flush=True)
                rows.append(row)
    header = [
        "layer",
        "C",
        "size",
        "torch µs",
        "off µs",
        "oneDNN µs",
        "auto µs",
        "faster side",
        "auto / min(off, oneDNN)",
        "≤ 1.10",
        "other-CPU",
        "max diff",
    ]
    print(markdown_table(header, rows))


if __name__ == "__main__":
    main()
