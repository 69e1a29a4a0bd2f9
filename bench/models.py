"""Model benchmark: a TF-style model converted to padkit, eager and compiled.

``--model`` picks the family; each has three models with the same random initialisation
(no pretrained weights are needed for timing):

* ``tf_efficientnet_b0`` (the default):

  * ``effb0``: timm ``efficientnet_b0`` (symmetric PyTorch padding): the reference;
  * ``tf_effb0``: timm ``tf_efficientnet_b0`` as timm builds it (5 ``Conv2dSame``
    layers that ``F.pad`` on every forward);
  * ``tf_effb0 padkit``: the same model after ``padkit.surgery.convert(model)``.

* ``tf-resnet50`` (the models of ``resnets()`` in ``bench/native_models.py``):

  * ``resnet50``: torchvision's ResNet-50 (symmetric padding): the reference;
  * ``tf-resnet50 timm``: its TF-style twin, every stride-2 conv with a kernel > 1 a
    timm ``Conv2dSame`` and the stem pool timm's ``MaxPool2dSame``;
  * ``tf-resnet50 padkit``: that twin after ``padkit.surgery.convert``.

The padkit model is checked against the timm port of its family (max |difference| <=
1e-5) before timing. Cells are medians of paired per-round ratios against the reference
with ``[min-max]`` (``bench/common.py``); compiled models are compared with the compiled
reference. Examples::

    python bench/models.py --threads 1 --mode eager
    python bench/models.py --model tf-resnet50 --threads 1 --mode eager compile

Run ``python bench/models.py --help`` for all options.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    Timing,
    cpu_seconds,
    env_header,
    fmt_ratio,
    markdown_table,
    max_abs_diff,
    measure_case,
)

Models = dict[str, nn.Module]


@dataclass(frozen=True)
class Family:
    """The three models of one benchmark: their names and how to build them.

    ``build`` returns the models in eval mode keyed by ``ref``, ``timm`` and ``padkit``,
    and the text of the surgery report of the padkit model.
    """

    model: str  # the ``--model`` choice and the title
    ref: str  # the symmetric-padding reference
    timm: str  # the TF-style port as timm layers build it
    padkit: str  # ``timm`` after ``padkit.surgery.convert``
    build: Callable[[], tuple[Models, str]]

    @property
    def names(self) -> tuple[str, str, str]:
        return (self.ref, self.timm, self.padkit)

    @property
    def header(self) -> list[str]:
        timm_col = self.timm if "timm" in self.timm else f"{self.timm} (timm)"
        return ["mode / layout", "N", f"{self.ref} ms", timm_col, self.padkit, "other-CPU"]


def _efficientnets() -> tuple[Models, str]:
    import timm

    from padkit.surgery import convert

    torch.manual_seed(0)
    effb0 = timm.create_model("efficientnet_b0", pretrained=False).eval()
    torch.manual_seed(0)
    tf = timm.create_model("tf_efficientnet_b0", pretrained=False).eval()
    converted, report = convert(copy.deepcopy(tf))
    return {"effb0": effb0, "tf_effb0": tf, "tf_effb0 padkit": converted.eval()}, str(report)


def _resnets() -> tuple[Models, str]:
    from native_models import resnets

    from padkit.surgery import convert

    models = resnets()
    # resnets() drops the report; converting the twin again (deterministic) recovers it
    _, report = convert(copy.deepcopy(models["tf-resnet50 timm"]))
    return models, str(report)


FAMILIES = {
    f.model: f
    for f in (
        Family("tf_efficientnet_b0", "effb0", "tf_effb0", "tf_effb0 padkit", _efficientnets),
        Family("tf-resnet50", "resnet50", "tf-resnet50 timm", "tf-resnet50 padkit", _resnets),
    )
}


def check_exact(fam: Family, models: Models, x: Tensor) -> float:
    with torch.inference_mode():
        return max_abs_diff(models[fam.padkit](x), models[fam.timm](x))


def _input(n: int, channels_last: bool) -> Tensor:
    x = torch.randn(n, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    return x.contiguous(memory_format=torch.channels_last) if channels_last else x


def _row(
    fam: Family, label: str, n: int, res: dict[str, Timing], other: float, extra: str = ""
) -> list[str]:
    return [
        label,
        str(n),
        f"{res[fam.ref].ms:.2f}",
        *(fmt_ratio(res[name], 3) for name in fam.names[1:]),
        f"{other:.2f}",
        extra,
    ]


def run_eager(
    fam: Family, models: Models, batches: list[int], layouts: list[str], rounds: int
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
            fns = {k: (lambda m=ms[k], t=x: m(t)) for k in fam.names}
            res, other, _ = measure_case(fns, fam.ref, rounds=rounds, block_s=0.05)
            rows.append(_row(fam, f"eager {'CL' if cl else 'NCHW'}", n, res, other))
            print(f"  eager {layout} N={n} done (other-CPU {other:.2f})", file=sys.stderr)
    return rows


def compile_child(fam: Family, name: str, n: int) -> None:
    """In a fresh process: compile one model at batch ``n``, print (wall, CPU) seconds."""
    models, _ = fam.build()
    fn = torch.compile(models[name])
    t0, c0 = time.perf_counter(), cpu_seconds()
    with torch.inference_mode():
        fn(_input(n, False))
    print(json.dumps([time.perf_counter() - t0, cpu_seconds() - c0]))


def compile_in_child(fam: Family, name: str, n: int, threads: int, cache: str) -> list[float]:
    """Compile time of ``name`` in a fresh process with an empty inductor cache ``cache``: no
    kernel another model built, on disk or in memory."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--model", fam.model]
    cmd += ["--threads", str(threads), "--batches", str(n), "--compile-child", name]
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
    run = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"compiling {name} failed:\n{run.stderr[-4000:]}")
    took: list[float] = json.loads(run.stdout.strip().splitlines()[-1])
    return took


def run_compiled(
    fam: Family, models: Models, batches: list[int], rounds: int, threads: int
) -> tuple[list[list[str]], list[str]]:
    rows, notes = [], []
    for n in batches:
        x = _input(n, False)
        compiled: dict[str, Callable[[Tensor], Tensor]] = {}
        for name in fam.names:
            cache = tempfile.mkdtemp(prefix="padkit-bench-inductor-")
            wall, cpu = compile_in_child(fam, name, n, threads, cache)
            notes.append(f"{name} N={n}: compile (first call) {wall:.0f} s wall, {cpu:.0f} s CPU")
            # timed here from the child's kernels (the cache is content-addressed)
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
            torch._dynamo.reset()
            fn = torch.compile(models[name])
            with torch.inference_mode():
                out = fn(x)
            if name != fam.ref:
                with torch.inference_mode():
                    diff = max_abs_diff(out, models[fam.timm](x))
                notes[-1] += f", max |compiled - eager {fam.timm}| = {diff:.1e}"
            compiled[name] = fn
            print(f"  compiled {name} N={n}", file=sys.stderr, flush=True)
        fns = {k: (lambda f=compiled[k], t=x: f(t)) for k in fam.names}
        res, other, _ = measure_case(fns, fam.ref, rounds=rounds, block_s=0.05)
        rows.append(_row(fam, "torch.compile NCHW", n, res, other))
    return rows, notes


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", default="tf_efficientnet_b0", choices=list(FAMILIES))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--layouts", nargs="+", default=["nchw", "cl"], choices=["nchw", "cl"])
    ap.add_argument("--mode", nargs="+", default=["eager"], choices=["eager", "compile"])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--compile-child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    fam = FAMILIES[args.model]
    torch.set_num_threads(args.threads)
    if args.compile_child:
        compile_child(fam, args.compile_child, args.batches[0])
        return
    models, report = fam.build()
    print(f"## {fam.model} through padkit, {args.threads} thread(s)\n")
    print(env_header(args.threads) + "\n")
    print("```\n" + report + "\n```\n")
    for n in args.batches:
        diff = check_exact(fam, models, _input(n, False))
        verdict = "ok" if diff <= 1e-5 else "NOT EXACT"
        print(f"- max |{fam.padkit} - {fam.timm}| at N={n}: {diff:.1e} ({verdict})")
    print(flush=True)
    rows: list[list[str]] = []
    notes: list[str] = []
    if "eager" in args.mode:
        rows += run_eager(fam, models, args.batches, args.layouts, args.rounds)
    if "compile" in args.mode:
        crow, notes = run_compiled(fam, models, args.batches, args.rounds, args.threads)
        rows += crow
    print(markdown_table([*fam.header, "note"], rows) + "\n")
    for note in notes:
        print(f"- {note}")
    print(f"\nTarget: {fam.padkit} ≤ 1.02 × {fam.ref} (eager and compiled, N = 1 and 8).")


if __name__ == "__main__":
    main()
