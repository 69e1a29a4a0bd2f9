"""padkit under torch.compile: run time and compile time against a symmetric twin.

The model is the small mixed CNN of ``tests/mixed_model.py`` (TF ``same`` at stride 2,
depthwise, per-side, dilated causal, ``same`` max pool, transposed conv, average pools).
Its *symmetric twin* is the same layers from torch with torch's own symmetric padding
(the model a user would have without per-side pads; output sizes within a row/column)
and the same weights.

Printed: the CPU and versions; the compile time of the first input size and of a second
size, each model compiled in a fresh process with an empty inductor cache (so neither
model reuses kernels the other compiled; ``--dynamic``: one graph with symbolic sizes, so
the second size costs nothing unless something specialises; static, torch's
``dynamic=False``: one graph per size), with the number of graphs; then eager and
compiled time per call, each as the median over paired rounds of padkit / twin (every
round times both, interleaved, see bench/common.py), with the [min-max] of the rounds.
Eager padkit runs its torch plans (``PADKIT_NATIVE=0``, set by bench/common.py); the
optional oneDNN backend never runs under ``torch.compile``.

    python bench/compiled.py                      # inductor, static, 224x224 then 225x201
    python bench/compiled.py --dynamic            # dynamic=True: one graph for both sizes
    python bench/compiled.py --rounds 7 --size 128 --size2 129 117
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
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


def models() -> dict[str, nn.Module]:
    torch.manual_seed(0)
    model = mixed_model().eval()
    twin = symmetric_twin().eval()
    twin.load_state_dict(model.state_dict())
    return {"padkit": model, "twin": twin}


def compile_seconds(fn: Any, x: torch.Tensor) -> float:
    t0 = time.perf_counter()
    with torch.inference_mode():
        fn(x)
    return time.perf_counter() - t0


def graphs() -> int:
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def child(args: argparse.Namespace, inputs: list[torch.Tensor]) -> None:
    """Compile one model at both sizes in this (fresh) process; print one JSON line."""
    module = models()[args.child]
    fn = torch.compile(module, backend=args.backend, dynamic=args.dynamic)
    times = [compile_seconds(fn, x) for x in inputs]
    print(json.dumps({"first": times[0], "second": times[1], "graphs": graphs()}))


def compile_in_child(name: str, cache: str, argv: list[str]) -> dict[str, float]:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
    cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--child", name]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"compiling {name} failed:\n{run.stderr[-4000:]}")
    result: dict[str, float] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, nargs="+", default=[224, 224], help="H W (first)")
    ap.add_argument("--size2", type=int, nargs="+", default=[225, 201], help="H W (second)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--backend", default="inductor")
    # dynamic=True: symbolic sizes from the first call (one graph per model); static
    # (dynamic=False): a graph per size. (Not torch's default None, whose automatic
    # dynamic shapes start static and turn dynamic at the first recompile.)
    ap.add_argument("--dynamic", action="store_true", help="dynamic=True: one graph, any size")
    ap.add_argument("--child", choices=["padkit", "twin"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    size1 = tuple(args.size) * (2 // len(args.size))
    size2 = tuple(args.size2) * (2 // len(args.size2))
    torch.manual_seed(1)
    inputs = [torch.randn(args.batch, 3, *size1), torch.randn(args.batch, 3, *size2)]
    if args.child:
        child(args, inputs)
        return
    print(env_header(args.threads))
    mode = "dynamic=True" if args.dynamic else "static (dynamic=False)"
    print(f"- torch.compile(backend={args.backend!r}, {mode})")

    argv = sys.argv[1:]
    caches = {
        name: tempfile.mkdtemp(prefix=f"padkit-{name}-inductor-") for name in ("padkit", "twin")
    }
    rows = []
    for name, cache in caches.items():
        r = compile_in_child(name, cache, argv)
        rows.append([name, f"{r['first']:.1f}", f"{r['second']:.1f}", str(int(r["graphs"]))])
    ratio = [f"{float(rows[0][i]) / float(rows[1][i]):.2f}" for i in (1, 2)]
    rows.append(["padkit / twin", *ratio, ""])
    print(markdown_table(["compile (s)", f"first {size1}", f"second {size2}", "graphs"], rows))

    # the timed models reuse both children's kernels (the caches are content-addressed)
    merged = tempfile.mkdtemp(prefix="padkit-bench-inductor-")
    for cache in caches.values():
        shutil.copytree(cache, merged, dirs_exist_ok=True)
        shutil.rmtree(cache, ignore_errors=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = merged
    mods = models()
    model, twin = mods["padkit"], mods["twin"]
    c_model = torch.compile(model, backend=args.backend, dynamic=args.dynamic)
    c_twin = torch.compile(twin, backend=args.backend, dynamic=args.dynamic)
    with torch.inference_mode():
        for x in inputs:
            diff = max_abs_diff(c_model(x), model(x))
            c_twin(x)
            print(f"compiled vs eager padkit at {tuple(x.shape)}: max abs diff {diff:.2e}")

    out = []
    for x in inputs:
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
    shutil.rmtree(merged, ignore_errors=True)
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
