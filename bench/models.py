"""Model benchmark: timm ``tf_efficientnet_b0`` converted to padkit, eager and compiled.

Three models with the same random initialisation (no pretrained weights are needed for
timing):

* ``effb0``: timm ``efficientnet_b0`` (symmetric PyTorch padding): the reference;
* ``tf_effb0``: timm ``tf_efficientnet_b0`` as timm builds it (5 ``Conv2dSame`` layers
  that ``F.pad`` on every forward);
* ``tf_effb0 padkit``: the same model after ``padkit.surgery.convert(model)``, checked
  against ``tf_effb0`` (max |difference| <= 1e-5) before timing.

Cells are medians of paired per-round ratios against ``effb0`` with ``[min-max]``
(``bench/common.py``); compiled models are compared with compiled ``effb0``. Run
``python bench/models.py --help``.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Timing, env_header, fmt_ratio, markdown_table, max_abs_diff, measure_case

REF = "effb0"
NAMES = (REF, "tf_effb0", "tf_effb0 padkit")


def build_models() -> tuple[dict[str, nn.Module], str]:
    """The three models in eval mode, and the text of the surgery report."""
    import timm

    from padkit.surgery import convert

    torch.manual_seed(0)
    effb0 = timm.create_model("efficientnet_b0", pretrained=False).eval()
    torch.manual_seed(0)
    tf = timm.create_model("tf_efficientnet_b0", pretrained=False).eval()
    converted, report = convert(copy.deepcopy(tf))
    return {REF: effb0, "tf_effb0": tf, "tf_effb0 padkit": converted.eval()}, str(report)


def check_exact(models: dict[str, nn.Module], x: Tensor) -> float:
    with torch.inference_mode():
        return max_abs_diff(models["tf_effb0 padkit"](x), models["tf_effb0"](x))


def _input(n: int, channels_last: bool) -> Tensor:
    x = torch.randn(n, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


def _row(label: str, n: int, res: dict[str, Timing], other: float, extra: str = "") -> list[str]:
    return [
        label,
        str(n),
        f"{res[REF].ms:.2f}",
        *(fmt_ratio(res[name], 3) for name in NAMES[1:]),
        f"{other:.2f}",
        extra,
    ]


HEADER = ["mode / layout", "N", "effb0 ms", "tf_effb0 (timm)", "tf_effb0 padkit", "other-CPU"]


def run_eager(
    models: dict[str, nn.Module], batches: list[int], layouts: list[str], rounds: int
) -> list[list[str]]:
    rows = []
    for layout in layouts:
        cl = layout == "cl"
        ms = {
            k: (copy.deepcopy(m).to(memory_format=torch.channels_last) if cl else m)
            for k, m in models.items()
        }
        for n in batches:
            x = _input(n, cl)
            fns = {k: (lambda m=ms[k], t=x: m(t)) for k in NAMES}
            res, other, _ = measure_case(fns, REF, rounds=rounds, block_s=0.05)
            rows.append(_row(f"eager {'CL' if cl else 'NCHW'}", n, res, other))
            print(f"  eager {layout} N={n} done (other-CPU {other:.2f})", file=sys.stderr)
    return rows


def run_compiled(
    models: dict[str, nn.Module], batches: list[int], rounds: int
) -> tuple[list[list[str]], list[str]]:
    rows, notes = [], []
    for n in batches:
        x = _input(n, False)
        compiled: dict[str, Callable[[Tensor], Tensor]] = {}
        for name in NAMES:
            torch._dynamo.reset()
            fn = torch.compile(models[name])
            t0 = time.perf_counter()
            with torch.inference_mode():
                out = fn(x)
            notes.append(f"{name} N={n}: first call (compile) {time.perf_counter() - t0:.0f} s")
            if name != REF:
                with torch.inference_mode():
                    diff = max_abs_diff(out, models["tf_effb0"](x))
                notes[-1] += f", max |compiled - eager tf_effb0| = {diff:.1e}"
            compiled[name] = fn
            print(f"  compiled {name} N={n}", file=sys.stderr, flush=True)
        fns = {k: (lambda f=compiled[k], t=x: f(t)) for k in NAMES}
        res, other, _ = measure_case(fns, REF, rounds=rounds, block_s=0.05)
        rows.append(_row("torch.compile NCHW", n, res, other))
    return rows, notes


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--layouts", nargs="+", default=["nchw", "cl"], choices=["nchw", "cl"])
    ap.add_argument("--mode", nargs="+", default=["eager"], choices=["eager", "compile"])
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    models, report = build_models()
    print(f"## tf_efficientnet_b0 through padkit, {args.threads} thread(s)\n")
    print(env_header(args.threads) + "\n")
    print("```\n" + report + "\n```\n")
    for n in args.batches:
        diff = check_exact(models, _input(n, False))
        verdict = "ok" if diff <= 1e-5 else "NOT EXACT"
        print(f"- max |tf_effb0 padkit - tf_effb0| at N={n}: {diff:.1e} ({verdict})")
    print(flush=True)
    rows: list[list[str]] = []
    notes: list[str] = []
    if "eager" in args.mode:
        rows += run_eager(models, args.batches, args.layouts, args.rounds)
    if "compile" in args.mode:
        crow, notes = run_compiled(models, args.batches, args.rounds)
        rows += crow
    print(markdown_table([*HEADER, "note"], rows) + "\n")
    for note in notes:
        print(f"- {note}")
    print("\nTarget: tf_effb0 padkit ≤ 1.02 × effb0 (eager and compiled, N = 1 and 8).")


if __name__ == "__main__":
    main()
