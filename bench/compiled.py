"""padkit under torch.compile: run time and compile time against a symmetric twin.

The model is the small mixed CNN of ``tests/mixed_model.py`` (TF ``same`` at stride 2,
depthwise, per-side, dilated causal, ``same`` max pool, transposed conv, average pools).
Its *symmetric twin* is the same layers from torch with torch's own symmetric padding
(the model a user would have without per-side pads; output sizes within a row/column)
and the same weights.

Printed: the CPU and versions; the compile time of the first input size and of a second
size (``dynamic=True``: one graph with symbolic sizes, so the second size costs nothing
unless something specialises; ``--static``: one graph per size); then eager and
compiled time per call, each as the median over paired rounds of padkit / twin (every
round times both, interleaved, see bench/common.py), with the [min-max] of the rounds.

    python bench/compiled.py                      # inductor, 1x3x224x224 then 1x3x225x201
    python bench/compiled.py --rounds 7 --size 128 --size2 129 117
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from common import env_header, fmt_ratio, markdown_table, max_abs_diff, measure_case  # noqa: E402
from mixed_model import mixed_model  # noqa: E402


def symmetric_twin() -> nn.Sequential:
    """The mixed model's layers with torch's symmetric padding (same parameter shapes)."""
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 8, 5, stride=2, padding=2, groups=8),
        nn.Conv2d(8, 12, (2, 3), padding=(0, 1)),
        nn.Conv2d(12, 12, 3, dilation=2, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, padding=1),
        nn.ConvTranspose2d(12, 8, 3, stride=2, padding=1, output_padding=1),
        nn.AvgPool2d(2, 1, padding=1, count_include_pad=False),
        nn.AvgPool2d(3, 2, padding=1, count_include_pad=True),
    )


def compile_seconds(fn: Any, x: torch.Tensor) -> float:
    t0 = time.perf_counter()
    with torch.inference_mode():
        fn(x)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, nargs="+", default=[224, 224], help="H W (first)")
    ap.add_argument("--size2", type=int, nargs="+", default=[225, 201], help="H W (second)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--backend", default="inductor")
    ap.add_argument("--static", action="store_true", help="dynamic=False: a graph per size")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(env_header(args.threads))

    torch.manual_seed(0)
    model = mixed_model().eval()
    twin = symmetric_twin().eval()
    twin.load_state_dict(model.state_dict())
    size1 = tuple(args.size) * (2 // len(args.size))
    size2 = tuple(args.size2) * (2 // len(args.size2))
    x1 = torch.randn(args.batch, 3, *size1)
    x2 = torch.randn(args.batch, 3, *size2)
    # dynamic=True: symbolic sizes from the first call (one graph per model); --static:
    # a graph per size. (Not torch's default None: its automatic-dynamic state is shared
    # between the two models, whichever compiles second would start dynamic.)
    dynamic = not args.static

    rows = []
    for name, module in (("padkit", model), ("twin", twin)):
        # each model alone: dynamo's caches are shared between compiled modules
        torch._dynamo.reset()  # type: ignore[no-untyped-call]
        fn = torch.compile(module, backend=args.backend, dynamic=dynamic)
        first = compile_seconds(fn, x1)
        second = compile_seconds(fn, x2)
        rows.append([name, f"{first:.1f}", f"{second:.1f}"])
    torch._dynamo.reset()  # type: ignore[no-untyped-call]
    c_model = torch.compile(model, backend=args.backend, dynamic=dynamic)
    c_twin = torch.compile(twin, backend=args.backend, dynamic=dynamic)
    print(markdown_table(["compile (s)", f"first {size1}", f"second {size2}"], rows))
    with torch.inference_mode():
        for x in (x1, x2):
            diff = max_abs_diff(c_model(x), model(x))
            print(f"compiled vs eager padkit at {tuple(x.shape)}: max abs diff {diff:.2e}")

    out = []
    for x in (x1, x2):
        fns = {
            "eager padkit": lambda x=x: model(x),
            "eager twin": lambda x=x: twin(x),
            "compiled padkit": lambda x=x: c_model(x),
            "compiled twin": lambda x=x: c_twin(x),
        }
        res, other, _ = measure_case(fns, "eager twin", rounds=args.rounds, block_s=0.05)
        paired = [
            a / b
            for a, b in zip(res["compiled padkit"].per_round_ms, res["compiled twin"].per_round_ms)
        ]
        out.append(
            [
                str(tuple(x.shape[2:])),
                f"{res['eager twin'].ms:.2f}",
                fmt_ratio(res["eager padkit"]),
                f"{res['compiled twin'].ms:.2f}",
                f"{statistics.median(paired):.2f} [{min(paired):.2f}–{max(paired):.2f}]",
                f"{other:.0%}",
            ]
        )
    print(
        markdown_table(
            [
                "input",
                "eager twin ms",
                "eager padkit / twin",
                "compiled twin ms",
                "compiled padkit / twin",
                "other CPU load",
            ],
            out,
        )
    )


if __name__ == "__main__":
    main()
