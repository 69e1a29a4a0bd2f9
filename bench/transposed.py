"""Transposed conv with TF ``same`` (k=3, s=2: crops 0 at the start, 1 at the end) on CPU.

torch has no per-side crop, so the layer is torch's transposed conv plus a slice or a pad.
Per case, side by side (``bench/common.py``: paired rounds, medians with [min-max]):

* ``native``: ``nn.ConvTranspose2d(padding=1, output_padding=1)``, torch's symmetric layer
  of the same output size (crops 1 at the start, 0 at the end: a different function);
  the reference of every ratio;
* ``sliced``: the full output ``2n + 1`` (padding 0), its last row and column sliced off:
  what a port writes by hand, and padkit's layout before it measured the other;
* ``shifted``: one zero row and column before the input, then padding 2 and
  output_padding 1, which crop exactly (``padkit.functional.shifted_layout``);
* ``padkit``: ``padkit.nn.ConvTranspose2d(padding="same")``, which measured the two on its
  first call and runs the faster (its choice is printed);
* ``padkit sliced``: the same layer with that choice off (``PADKIT_NATIVE_TUNE=0``): the
  slice, what padkit ran before; padkit / padkit sliced is what the choice gains.

All variants equal ``sliced`` (the reference function) to float tolerance; the printed
max |diff| says so. Inference (``torch.inference_mode``), padkit's torch plans (the
optional oneDNN backend off, see bench/common.py).

``--compile``: every variant under ``torch.compile`` (inductor, static shapes; with
``--freezing``, inductor's freezing), compiled per case after ``torch._dynamo.reset()``.
A compiled padkit layer takes the layout its plan measured eagerly, outside the trace,
on stand-ins of the traced input; ``padkit sliced`` is compiled with that off.

    python bench/transposed.py                 # 1 thread
    python bench/transposed.py --rounds 21 --threads 2
    python bench/transposed.py --compile [--freezing]
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

import torch
import torch._inductor.config
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import env_header, fmt_ratio, markdown_table, max_abs_diff, measure_case

import padkit.nn as pnn
from padkit.functional import _transpose
from padkit.native import _dispatch

CASES = [  # (batch, in channels, out channels, size)
    (1, 12, 8, 28),
    (8, 12, 8, 28),
    (1, 64, 32, 56),
    (8, 64, 32, 56),
]


def variants(layer: nn.Module, native: nn.Module, x: torch.Tensor) -> dict[str, Any]:
    w, b = layer.weight.detach(), layer.bias.detach()
    return {
        "native": lambda: native(x),
        "sliced": lambda: F.conv_transpose2d(x, w, b, 2, 0, 0)[:, :, :-1, :-1],
        "shifted": lambda: F.conv_transpose2d(F.pad(x, [1, 0, 1, 0]), w, b, 2, 2, 1),
        "padkit": lambda: layer(x),
        "padkit sliced": lambda: sliced(layer, x),
    }


def sliced(layer: Any, x: torch.Tensor) -> torch.Tensor:
    """The layer with its measured choice off (as with ``PADKIT_NATIVE_TUNE=0``): the
    slice, padkit's layout before it measured the other."""
    tuner = _dispatch.HOOK.tuner
    measure, tuner.measure = tuner.measure, False
    try:
        out: torch.Tensor = layer(x)
    finally:
        tuner.measure = measure
    return out


def compiled(fns: dict[str, Any], layer: nn.Module, x: torch.Tensor) -> dict[str, Any]:
    """Each variant under ``torch.compile``, compiled (on its first call) now."""
    torch._dynamo.reset()
    unmeasured = torch.compile(copy.deepcopy(layer))
    out = {k: torch.compile(f) for k, f in fns.items() if k != "padkit sliced"}
    out["padkit sliced"] = lambda: unmeasured(x)
    with torch.inference_mode():
        sliced(unmeasured, x)  # compiled with the choice off
        for f in out.values():
            f()
    return out


def compiled_shifted(layer: Any, x: torch.Tensor) -> bool:
    """Whether the layer's compiled plan for ``x`` pads the input (the shifted layout)."""
    with torch.inference_mode():
        program = layer._compiled_plan(x, None)
    return program is not None and program[0][0] == "pad"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--block", type=float, default=0.05, help="seconds per timed block")
    ap.add_argument("--compile", action="store_true", help="every variant under torch.compile")
    ap.add_argument("--freezing", action="store_true", help="with --compile: inductor's freezing")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch._inductor.config.freezing = args.freezing
    print(env_header(args.threads))
    if args.compile:
        print(f"- torch.compile(backend='inductor', static shapes, freezing={args.freezing})")
    rows = []
    for layout in ("NCHW", "channels_last"):
        for n, c, o, size in CASES:
            torch.manual_seed(0)
            layer = pnn.ConvTranspose2d(c, o, 3, stride=2, padding="same").eval()
            native = nn.ConvTranspose2d(c, o, 3, stride=2, padding=1, output_padding=1).eval()
            native.load_state_dict(layer.state_dict())
            x = torch.randn(n, c, size, size)
            if layout == "channels_last":
                x = x.contiguous(memory_format=torch.channels_last)
            fns = variants(layer, native, x)
            if args.compile:
                fns = compiled(fns, layer, x)
            with torch.inference_mode():
                ref = fns["sliced"]()
                diff = max(
                    max_abs_diff(fns[k](), ref) for k in ("shifted", "padkit", "padkit sliced")
                )
            kind = "channels_last" if layout == "channels_last" else "contiguous"
            chose = [
                v
                for k, v in _transpose._SHIFT.choices.items()
                if k[6] == (c, o) and k[7] == kind and k[9] == n
            ]
            if args.compile:  # the plan the compiled layer holds (frozen: taken untimed)
                chose = [compiled_shifted(layer, x)]
            res, other, _ = measure_case(fns, "native", rounds=args.rounds, block_s=args.block)
            rows.append(
                [
                    layout,
                    f"{n}x{c}x{size}x{size} -> {o}",
                    f"{res['native'].ms:.3f}",
                    fmt_ratio(res["sliced"]),
                    fmt_ratio(res["shifted"]),
                    fmt_ratio(res["padkit"]),
                    fmt_ratio(res["padkit sliced"]),
                    ("shifted" if chose[-1] else "sliced") if chose else "sliced (not measured)",
                    f"{diff:.1e}",
                    f"{other:.0%}",
                ]
            )
            print(f"  {layout} {n}x{c}x{size}x{size}: done", flush=True)
    print(
        markdown_table(
            [
                "layout",
                "input -> out channels",
                "native ms",
                "sliced / native",
                "shifted / native",
                "padkit / native",
                "padkit sliced / native",
                "padkit ran",
                "max |diff|",
                "other CPU load",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
