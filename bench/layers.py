"""Layer suite: what padkit's exact per-side padding costs against the native symmetric op.

For every layer the same weights run through

* ``native``: the torch layer with timm's symmetric padding (same FLOPs, a different,
  shifted result where TF-SAME is asymmetric): the reference of every ratio;
* ``padkit``: the ``padkit.nn`` drop-in layer (``padding="same"``, or ``"causal"``);
* ``timm Conv2dSame`` and ``timm create_*`` (``create_conv2d(padding='same')`` /
  ``create_pool2d(..., padding='same')``), which pad dynamically with ``F.pad`` unless
  the pad is static and symmetric;
* ``torch 'same'`` (``padding='same'``, stride 1 only) and, for the causal TCN conv,
  ``F.pad + conv1d``, the usual way to write it, and pytorch-tcn's ``TemporalConv1d``
  (``causal=True``) where pytorch-tcn is installed.

Cells are medians of paired per-round ratios against ``native`` with their
``[min-max]`` (see ``bench/common.py``). Run ``python bench/layers.py --help``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    Timing,
    env_header,
    fmt_ratio,
    markdown_table,
    max_abs_diff,
    measure_case,
)

import padkit.functional as PF
import padkit.nn as pnn

Module = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class LayerCase:
    """One layer of the suite: ``kind`` is conv2d, dwconv2d, tcn, maxpool or avgpool."""

    name: str
    kind: str
    channels: int
    size: int
    k: int
    s: int
    d: int = 1
    out_channels: int | None = None


SUITE: tuple[LayerCase, ...] = (
    LayerCase("r50 3x3 s1 64ch 56²", "conv2d", 64, 56, 3, 1),
    LayerCase("r50 3x3 s2 128ch 56²", "conv2d", 128, 56, 3, 2),
    LayerCase("r50 3x3 s2 256ch 28²", "conv2d", 256, 28, 3, 2),
    LayerCase("stem 7x7 s2 3→64 224²", "conv2d", 3, 224, 7, 2, out_channels=64),
    LayerCase("dw 3x3 s1 144ch 56²", "dwconv2d", 144, 56, 3, 1),
    LayerCase("dw 3x3 s2 96ch 112²", "dwconv2d", 96, 112, 3, 2),
    LayerCase("dw 5x5 s1 240ch 28²", "dwconv2d", 240, 28, 5, 1),
    LayerCase("dw 5x5 s2 144ch 56²", "dwconv2d", 144, 56, 5, 2),
    LayerCase("TCN k3 d4 causal 64ch L4096", "tcn", 64, 4096, 3, 1, d=4),
    LayerCase("max pool 3x3 s2 64ch 112²", "maxpool", 64, 112, 3, 2),
    LayerCase("avg pool 2x2 s1 128ch 56²", "avgpool", 128, 56, 2, 1),
)

#: the tiny layers of the per-call overhead table
OVERHEAD: tuple[LayerCase, ...] = (
    LayerCase("dw 3x3 s1 32ch 56²", "dwconv2d", 32, 56, 3, 1),
    LayerCase("dw 3x3 s2 32ch 56²", "dwconv2d", 32, 56, 3, 2),
    LayerCase("max pool 3x3 s2 32ch 56²", "maxpool", 32, 56, 3, 2),
)


def _sym(k: int, s: int = 1, d: int = 1) -> int:
    """timm's ``get_padding``: the symmetric pad with the same FLOPs."""
    return ((s - 1) + d * (k - 1)) // 2


def _copy_params(dst: nn.Module, src: nn.Module) -> nn.Module:
    dst.load_state_dict(src.state_dict())
    return dst


def build(case: LayerCase, n: int, channels_last: bool) -> tuple[Tensor, dict[str, Module], str]:
    """The input, the variants (name -> module) and the name of the exactness reference."""
    from timm.layers import Conv2dSame, create_conv2d, create_pool2d

    gen = torch.Generator().manual_seed(0)
    c, sz, k, s, d = case.channels, case.size, case.k, case.s, case.d
    if case.kind == "tcn":
        x = torch.randn(n, c, sz, generator=gen)
        native = nn.Conv1d(c, c, k, 1, padding=_sym(k, 1, d), dilation=d)
        lo = d * (k - 1)
        padkit = _copy_params(pnn.Conv1d(c, c, k, 1, padding="causal", dilation=d), native)

        def fpad(t: Tensor) -> Tensor:
            return F.conv1d(F.pad(t, (lo, 0)), native.weight, native.bias, 1, 0, d)

        mods: dict[str, Module] = {"native": native, "padkit": padkit, "F.pad + conv1d": fpad}
        try:  # pytorch-tcn's causal conv, where it is installed (the test extra has it)
            from pytorch_tcn import TemporalConv1d

            tcn = TemporalConv1d(c, c, k, dilation=d, causal=True)
            with torch.no_grad():  # its state_dict also holds its streaming buffer
                tcn.weight.copy_(native.weight)
                tcn.bias.copy_(native.bias)
            mods["pytorch-tcn"] = tcn
        except ImportError:
            pass
        return x, mods, "F.pad + conv1d"

    x = torch.randn(n, c, sz, sz, generator=gen)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    variants: dict[str, Module] = {}
    if case.kind in ("conv2d", "dwconv2d"):
        cout = case.out_channels or c
        groups = c if case.kind == "dwconv2d" else 1
        native_m = nn.Conv2d(c, cout, k, s, padding=_sym(k, s), groups=groups, bias=False)
        variants["native"] = native_m
        variants["padkit"] = _copy_params(
            pnn.Conv2d(c, cout, k, s, padding="same", groups=groups, bias=False), native_m
        )
        variants["timm Conv2dSame"] = _copy_params(
            Conv2dSame(c, cout, k, s, groups=groups, bias=False), native_m
        )
        created = create_conv2d(
            c, cout, k, stride=s, padding="same", depthwise=case.kind == "dwconv2d", bias=False
        )
        if not isinstance(created, Conv2dSame):  # else the very same computation as above
            variants["timm create_conv2d"] = _copy_params(created, native_m)
        if s == 1:
            variants["torch 'same'"] = _copy_params(
                nn.Conv2d(c, cout, k, 1, padding="same", groups=groups, bias=False), native_m
            )
        ref = "timm Conv2dSame"
    elif case.kind == "maxpool":
        variants["native"] = nn.MaxPool2d(k, s, _sym(k, s))
        variants["padkit"] = pnn.MaxPool2d(k, s, padding="same")
        variants["timm create_pool2d"] = create_pool2d("max", k, stride=s, padding="same")
        ref = "timm create_pool2d"
    elif case.kind == "avgpool":
        # timm's AvgPool2dSame counts the zero pads (count_include_pad=True): padkit too
        variants["native"] = nn.AvgPool2d(k, s, 0)
        variants["padkit"] = pnn.AvgPool2d(k, s, padding="same", count_include_pad=True)
        variants["timm create_pool2d"] = create_pool2d("avg", k, stride=s, padding="same")
        ref = "timm create_pool2d"
    else:
        raise ValueError(case.kind)
    for m in variants.values():
        if isinstance(m, nn.Module):
            m.eval()
            if channels_last:
                m.to(memory_format=torch.channels_last)
    return x, variants, ref


def plan_of(case: LayerCase, module: Module, x: Tensor) -> str:
    plan = getattr(module, "plan", None)
    if plan is None:
        return "?"
    if isinstance(module, pnn.AvgPool2d):  # average pools plan by memory layout
        return str(plan(tuple(x.shape), channels_last=PF.channels_last(x)).strategy)
    return str(plan(tuple(x.shape)).strategy)


@dataclass
class Row:
    case: str
    n: int
    layout: str
    threads: int
    plan: str
    native_ms: float
    timings: dict[str, dict[str, float]]
    other_cpu: float
    attempts: int
    max_abs_diff: float


def run_cell(
    case: LayerCase, n: int, channels_last: bool, threads: int, rounds: int, block_s: float
) -> Row:
    x, variants, ref = build(case, n, channels_last)
    with torch.inference_mode():
        diff = max_abs_diff(variants["padkit"](x), variants[ref](x))
        if "pytorch-tcn" in variants:  # the same causal conv: it must agree too
            diff = max(diff, max_abs_diff(variants["pytorch-tcn"](x), variants[ref](x)))
    fns = {name: (lambda m=m: m(x)) for name, m in variants.items()}
    res, other, attempts = measure_case(fns, "native", rounds=rounds, block_s=block_s)
    return Row(
        case=case.name,
        n=n,
        layout="1-D" if case.kind == "tcn" else ("CL" if channels_last else "NCHW"),
        threads=threads,
        plan=plan_of(case, variants["padkit"], x),
        native_ms=res["native"].ms,
        timings={k: asdict(v) | {"per_round_ms": []} for k, v in res.items()},
        other_cpu=other,
        attempts=attempts,
        max_abs_diff=diff,
    )


COLUMNS = (
    "padkit",
    "timm Conv2dSame",
    "timm create_conv2d",
    "timm create_pool2d",
    "torch 'same'",
    "F.pad + conv1d",
    "pytorch-tcn",
)


def _t(row: Row, name: str) -> Timing | None:
    t = row.timings.get(name)
    return None if t is None else Timing(**t)


def layer_table(rows: list[Row]) -> str:
    header = ["layer", "N", "layout", "padkit plan", "native ms", *COLUMNS, "other-CPU", "max Δ"]
    body = []
    for r in rows:
        body.append(
            [
                r.case,
                r.n,
                r.layout,
                r.plan,
                f"{r.native_ms:.3f}",
                *(fmt_ratio(_t(r, c)) for c in COLUMNS),
                f"{r.other_cpu:.2f}" + ("" if r.attempts == 1 else f" ({r.attempts} tries)"),
                f"{r.max_abs_diff:.0e}",
            ]
        )
    return markdown_table(header, body)


def _asymmetric(case: LayerCase) -> bool:
    return case.kind in ("tcn", "avgpool") or case.s > 1


def target_report(rows: list[Row]) -> str:
    """Which of the issue's layer targets each row meets."""
    cases = {c.name: c for c in SUITE}
    lines = []
    for r in rows:
        p = _t(r, "padkit")
        if p is None or r.case not in cases:
            continue
        limit = 1.10 if r.layout == "CL" else 1.05
        misses = []
        if p.ratio > limit:
            misses.append(f"padkit {p.ratio:.3f} > {limit:.2f}")
        if _asymmetric(cases[r.case]):
            others = [
                _t(r, c)
                for c in ("timm Conv2dSame", "timm create_conv2d", "timm create_pool2d")
                if _t(r, c) is not None
            ]
            slower = [o for o in others if o is not None and p.ratio >= o.ratio]
            if slower:
                misses.append("not faster than timm")
        elif abs(p.ratio - 1.0) > 0.03:
            misses.append(f"symmetric pads: padkit {p.ratio:.2f}, not 1.00")
        verdict = "met" if not misses else "MISSED: " + "; ".join(misses)
        lines.append(f"- {r.case}, N={r.n}, {r.layout}, {r.threads} thr: {verdict}")
    return "\n".join(lines)


def overhead_table(threads: int, rounds: int) -> str:
    """Per-call cost of padkit at batch 1 on tiny layers, in microseconds."""
    import padkit.functional as PF

    body = []
    for case in OVERHEAD:
        for cl in (False, True):
            x, variants, _ = build(case, 1, cl)
            native, layer = variants["native"], variants["padkit"]
            fns: dict[str, Callable[[], object]] = {
                "native": lambda m=native, t=x: m(t),
                "padkit layer": lambda m=layer, t=x: m(t),
            }
            if case.kind == "dwconv2d":
                w = layer.weight  # type: ignore[union-attr]
                fns["padkit.functional"] = lambda t=x, w=w, s=case.s, g=case.channels: PF.conv2d(
                    t, w, None, s, "same", 1, g
                )
            res, other, _ = measure_case(fns, "native", rounds=rounds, block_s=0.01)
            base = res["native"].ms * 1e3
            cells = [
                case.name,
                "CL" if cl else "NCHW",
                plan_of(case, layer, x),
                f"{base:.1f}",
            ]
            for name in ("padkit layer", "padkit.functional"):
                t = res.get(name)
                # the extra time from the paired ratio, which is robust to drifts
                extra = 0.0 if t is None else (t.ratio - 1.0) * base
                ms = 0.0 if t is None else t.ms * 1e3
                cells.append("" if t is None else f"{ms:.1f} (+{extra:.1f}; {t.ratio:.2f}x)")
            cells.append(f"{other:.2f}")
            body.append(cells)
    header = [
        f"layer (N=1, {threads} thr)",
        "layout",
        "plan",
        "native µs",
        "padkit layer µs (+Δ; ratio)",
        "padkit.functional µs (+Δ; ratio)",
        "other-CPU",
    ]
    return markdown_table(header, body)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--layouts", nargs="+", default=["nchw", "cl"], choices=["nchw", "cl"])
    ap.add_argument("--rounds", type=int, default=25)
    ap.add_argument("--block-ms", type=float, default=8.0)
    ap.add_argument("--cases", nargs="*", default=[], help="substrings of the layer names")
    ap.add_argument("--no-overhead", action="store_true", help="skip the per-call table")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    args = ap.parse_args(argv)

    cases = [c for c in SUITE if not args.cases or any(p in c.name for p in args.cases)]
    all_rows: list[Row] = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        print(f"## Layer suite, {threads} thread(s)\n")
        print(env_header(threads) + "\n", flush=True)
        rows: list[Row] = []
        for case in cases:
            layouts = ["nchw"] if case.kind == "tcn" else args.layouts
            for n in args.batches:
                for layout in layouts:
                    cl = layout == "cl"
                    row = run_cell(case, n, cl, threads, args.rounds, args.block_ms / 1e3)
                    rows.append(row)
                    p = _t(row, "padkit")
                    print(
                        f"  {row.case:32s} N={n} {row.layout:4s} {row.plan:12s} "
                        f"padkit {fmt_ratio(p)}  other-CPU {row.other_cpu:.2f}",
                        file=sys.stderr,
                        flush=True,
                    )
        print(layer_table(rows) + "\n")
        print("Targets (padkit ≤ 1.05 NCHW, ≤ 1.10 CL; faster than timm where asymmetric):\n")
        print(target_report(rows) + "\n", flush=True)
        if not args.no_overhead:
            print(f"### Per-call overhead at batch 1, {threads} thread(s)\n")
            print(overhead_table(threads, args.rounds) + "\n", flush=True)
        all_rows += rows
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in all_rows], indent=1))


if __name__ == "__main__":
    main()
