"""padkit under torch.compile: run time and compile time against a symmetric twin.

The model is the small mixed CNN of ``tests/mixed_model.py`` (TF ``same`` at stride 2,
depthwise, per-side, dilated causal, ``same`` max pool, transposed conv, average pools).
Its *symmetric twin* is the same layers from torch with torch's own symmetric padding
(the model a user would have without per-side pads; output sizes within a row/column)
and the same weights. The *F.pad twin* (``twin_model()`` of tests/mixed_model.py)
computes padkit's function from torch layers and explicit ``F.pad`` calls, the way a
codebase without padkit writes it: padkit / F.pad twin is what padkit adds, F.pad twin /
symmetric twin what the asymmetric pads themselves cost.

Printed: the CPU and versions; the compile time of the first input size and of a second
size (wall clock, and CPU seconds of the process and the compile workers it waited for),
each model compiled in a fresh process with an empty inductor cache (so neither
model reuses kernels the other compiled; ``--dynamic``: one graph with symbolic sizes, so
the second size costs nothing unless something specialises; static, torch's
``dynamic=False``: one graph per size), with the number of graphs. A first compile,
not counted, warms the machine (the first process after a while reads torch and the
compiler from disk: it took 18 s where the next took 13.7 s); then ``--compile-runs``
runs compile the three models, each run in another order, and a cell is the median of
the runs with their [min-max]. Then eager and
compiled time per call, each as the median over paired rounds of padkit / twin (and of
padkit / F.pad twin) (every
round times both, interleaved, see bench/common.py), with the [min-max] of the rounds.
Eager padkit runs its torch plans (``PADKIT_NATIVE=0``, set by bench/common.py); the
optional oneDNN backend never runs under ``torch.compile``.

    python bench/compiled.py                      # inductor, static, 224x224 then 225x201
    python bench/compiled.py --dynamic            # dynamic=True: one graph for both sizes
    python bench/compiled.py --rounds 7 --size 128 --size2 129 117
    python bench/compiled.py --rounds 21 --block 0.5   # longer timed blocks: steadier ratios
    python bench/compiled.py --freezing           # inductor's freezing (CPU inference)
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
import torch._inductor.config
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))

from common import cpu_seconds, env_header, fmt_ratio, markdown_table, max_abs_diff, measure_case  # noqa: E402
from mixed_model import mixed_model, twin_model  # noqa: E402


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
    fpad = twin_model().eval()
    fpad.load_state_dict(model.state_dict())
    return {"padkit": model, "twin": twin, "F.pad twin": fpad}


def compile_seconds(fn: Any, x: torch.Tensor) -> tuple[float, float]:
    """(wall, CPU) seconds of the first call."""
    t0, c0 = time.perf_counter(), cpu_seconds()
    with torch.inference_mode():
        fn(x)
    return time.perf_counter() - t0, cpu_seconds() - c0


def graphs() -> int:
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def child(args: argparse.Namespace, inputs: list[torch.Tensor]) -> None:
    """Compile one model at both sizes in this (fresh) process; print one JSON line."""
    module = models()[args.child]
    fn = torch.compile(module, backend=args.backend, dynamic=args.dynamic)
    times = [compile_seconds(fn, x) for x in inputs]
    print(json.dumps({"first": times[0], "second": times[1], "graphs": graphs()}))


def compile_in_child(name: str, cache: str, argv: list[str], limit: float) -> dict[str, Any] | None:
    """The child's compile times, or None where it did not finish within ``limit`` s."""
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
    cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--child", name]
    try:
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        return None
    if run.returncode != 0:
        sys.exit(f"compiling {name} failed:\n{run.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, nargs="+", default=[224, 224], help="H W (first)")
    ap.add_argument("--size2", type=int, nargs="+", default=[225, 201], help="H W (second)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument(
        "--block",
        type=float,
        default=0.25,
        help="seconds of back-to-back calls per timed block (a round times one block of each "
        "model); this ~1 ms model needs long blocks for stable ratios",
    )
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--backend", default="inductor")
    # dynamic=True: symbolic sizes from the first call (one graph per model); static
    # (dynamic=False): a graph per size. (Not torch's default None, whose automatic
    # dynamic shapes start static and turn dynamic at the first recompile.)
    ap.add_argument("--dynamic", action="store_true", help="dynamic=True: one graph, any size")
    ap.add_argument(
        "--freezing",
        action="store_true",
        help="inductor's freezing (torch._inductor.config.freezing: weights folded as "
        "constants, convs as prepacked oneDNN ops), its CPU inference mode",
    )
    ap.add_argument(
        "--limit",
        type=float,
        default=600,
        help="seconds a model may take to compile both sizes; one that takes longer is "
        "reported as such and left out of the timing",
    )
    ap.add_argument(
        "--compile-runs",
        type=int,
        default=3,
        help="fresh-process compiles of each model (after one uncounted warm-up); the table "
        "gives their median",
    )
    ap.add_argument("--child", choices=["padkit", "twin", "F.pad twin"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.compile_runs < 1:
        ap.error(f"--compile-runs must be 1 or more, got {args.compile_runs}")
    torch.set_num_threads(args.threads)
    torch._inductor.config.freezing = args.freezing
    size1 = tuple(args.size) * (2 // len(args.size))
    size2 = tuple(args.size2) * (2 // len(args.size2))
    torch.manual_seed(1)
    inputs = [torch.randn(args.batch, 3, *size1), torch.randn(args.batch, 3, *size2)]
    if args.child:
        child(args, inputs)
        return
    print(env_header(args.threads))
    mode = "dynamic=True" if args.dynamic else "static (dynamic=False)"
    frozen = ", torch._inductor.config.freezing = True" if args.freezing else ""
    print(f"- torch.compile(backend={args.backend!r}, {mode}){frozen}")

    argv = sys.argv[1:]
    names = ("padkit", "twin", "F.pad twin")
    warm = tempfile.mkdtemp(prefix="padkit-bench-child-inductor-")
    compile_in_child("twin", warm, argv, args.limit)  # not counted: warms the machine
    shutil.rmtree(warm, ignore_errors=True)
    caches = {name: tempfile.mkdtemp(prefix="padkit-bench-child-inductor-") for name in names}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    over = f"over {args.limit:.0f} s"
    timed_out: set[str] = set()
    for r in range(args.compile_runs):
        for name in names[r % len(names) :] + names[: r % len(names)]:  # each run in another order
            if name in timed_out:
                continue
            shutil.rmtree(caches[name], ignore_errors=True)
            os.makedirs(caches[name])
            result = compile_in_child(name, caches[name], argv, args.limit)
            if result is None:
                timed_out.add(name)
            else:
                runs[name].append(result)
    took = {name: None if name in timed_out else runs[name] for name in names}

    def median(rs: list[dict[str, Any]], which: str, i: int) -> float:
        return statistics.median(r[which][i] for r in rs)

    def cell(rs: list[dict[str, Any]] | None, which: str) -> str:
        if rs is None:
            return over
        walls = [r[which][0] for r in rs]
        spread = f" [{min(walls):.1f}–{max(walls):.1f}]" if len(rs) > 1 else ""
        return f"{median(rs, which, 0):.1f}{spread} / {median(rs, which, 1):.1f}"

    def ratio(a: str, b: str, which: str) -> str:
        ra, rb = took[a], took[b]
        if ra is None or rb is None:
            return "–"
        wall = median(ra, which, 0) / median(rb, which, 0)
        return f"{wall:.2f} / {median(ra, which, 1) / median(rb, which, 1):.2f}"

    rows = [
        [name, cell(rs, "first"), cell(rs, "second"), "–" if rs is None else str(rs[0]["graphs"])]
        for name, rs in took.items()
    ]
    for other in ("twin", "F.pad twin"):
        rows.append(
            [f"padkit / {other}", *(ratio("padkit", other, w) for w in ("first", "second")), ""]
        )
    print(
        markdown_table(
            [
                f"compile: wall [min-max] / CPU (s), median of {args.compile_runs}",
                f"first {size1[0]}x{size1[1]}",
                f"second {size2[0]}x{size2[1]}",
                "graphs",
            ],
            rows,
        )
    )

    # the timed models reuse the children's kernels (the caches are content-addressed)
    merged = tempfile.mkdtemp(prefix="padkit-bench-inductor-")
    for cache in caches.values():
        shutil.copytree(cache, merged, dirs_exist_ok=True)
        shutil.rmtree(cache, ignore_errors=True)
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = merged
    mods = models()
    if took["padkit"] is None or took["twin"] is None:
        sys.exit(f"padkit or the twin took {over} to compile: nothing to time")
    timed = [name for name in names if took[name] is not None]
    compiled = {
        name: torch.compile(mods[name], backend=args.backend, dynamic=args.dynamic)
        for name in timed
    }
    with torch.inference_mode():
        for x in inputs:
            eager = mods["padkit"](x)
            diffs = ", ".join(
                f"max |compiled {name} - eager padkit| {max_abs_diff(compiled[name](x), eager):.2e}"
                for name in timed
                if name != "twin"
            )
            compiled["twin"](x)
            print(f"at {tuple(x.shape)}: {diffs}")

    def paired(res: dict[str, Any], a: str, b: str) -> str:
        if a not in res or b not in res:
            return "–"
        r = [x / y for x, y in zip(res[a].per_round_ms, res[b].per_round_ms)]
        return f"{statistics.median(r):.2f} [{min(r):.2f}–{max(r):.2f}]"

    out = []
    for x in inputs:
        fns = {}
        for name in timed:
            fns[f"eager {name}"] = lambda m=mods[name], x=x: m(x)
            fns[f"compiled {name}"] = lambda m=compiled[name], x=x: m(x)
        res, other, _ = measure_case(fns, "eager twin", rounds=args.rounds, block_s=args.block)
        out.append(
            [
                f"{x.shape[2]}x{x.shape[3]}",
                f"{res['eager twin'].ms:.2f}",
                fmt_ratio(res["eager padkit"]),
                f"{res['compiled twin'].ms:.2f}",
                paired(res, "compiled padkit", "compiled twin"),
                paired(res, "compiled F.pad twin", "compiled twin"),
                paired(res, "compiled padkit", "compiled F.pad twin"),
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
                "compiled F.pad twin / twin",
                "compiled padkit / F.pad twin",
                "other CPU load",
            ],
            out,
        )
    )


if __name__ == "__main__":
    main()
