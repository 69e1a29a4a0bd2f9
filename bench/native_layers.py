"""Layer suite with padkit's optional oneDNN backend (``padkit.native``) on and off.

Every cell times, in one process and interleaved (``bench/common.py``):

* ``native``: the torch layer with symmetric padding of the same FLOPs (the reference);
* ``padkit torch``: the ``padkit.nn`` layer with the backend off (pure-torch plans);
* ``padkit oneDNN``: the same layer with every op forced onto the backend;
* ``padkit auto``: the backend on, as users get it: each op signature timed on its first
  call (torch plan against oneDNN) and the faster side kept (``--deterministic``: the
  static rules instead);
* ``timm``: timm's ``Conv2dSame`` / ``create_pool2d(padding='same')`` (or, for the causal
  TCN conv, ``F.pad`` + ``conv1d``);
* ``pytorch-tcn``: for the TCN conv, pytorch-tcn's ``TemporalConv1d(causal=True)``.

``--mode fwd`` times inference forwards, ``--mode train`` a forward plus the backward
for the input and every parameter (``torch.autograd.grad`` with a fixed output gradient).
Cells: median of paired per-round ratios against ``native`` ``[min-max]``.
Run ``python bench/native_layers.py --help``.
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import env_header, fmt_ratio, markdown_table, max_abs_diff, measure_case
from layers import SUITE, LayerCase, build, plan_of

import padkit.native as native
from padkit.functional import _taps
from padkit.native import _dispatch

Fn = Callable[[Tensor], Tensor]

VARIANTS = ("padkit torch", "padkit oneDNN", "padkit auto", "timm", "pytorch-tcn")


def _with_backend(m: Fn, force: bool) -> Fn:
    def run(x: Tensor) -> Tensor:
        _dispatch.active, _dispatch.HOOK.force = _dispatch.HOOK, force
        try:
            return m(x)
        finally:
            _dispatch.active, _dispatch.HOOK.force = None, False

    run.module = m  # type: ignore[attr-defined]
    return run


def _params(m: object) -> list[Tensor]:
    return list(m.parameters()) if isinstance(m, nn.Module) else []


def variants(case: LayerCase, n: int, cl: bool) -> tuple[Tensor, dict[str, Fn], list[Tensor]]:
    x, mods, _ = build(case, n, cl)
    padkit = mods["padkit"]
    timm_name = next(k for k in mods if k.startswith("timm") or k.startswith("F.pad"))
    if "timm create_conv2d" in mods:  # timm's own choice for this layer
        timm_name = "timm create_conv2d"
    out: dict[str, Fn] = {
        "native": mods["native"],
        "padkit torch": padkit,
        "padkit oneDNN": _with_backend(copy.deepcopy(padkit), True),
        "padkit auto": _with_backend(copy.deepcopy(padkit), False),
        "timm": mods[timm_name],
    }
    if "pytorch-tcn" in mods:  # the causal TCN conv: pytorch-tcn's own layer too
        out["pytorch-tcn"] = mods["pytorch-tcn"]
    shared = _params(mods["native"]) or _params(padkit)
    return x, out, shared


def run_cell(
    case: LayerCase, n: int, cl: bool, mode: str, rounds: int, block_s: float
) -> list[str]:
    x, fns, shared = variants(case, n, cl)
    if case.kind == "tcn" and mode == "fwd":
        # the steady state: past the per-tap choice, timed once a 1-d conv's signature class
        # has run a while (bench/new_sizes.py measures what the first calls cost)
        with torch.no_grad():
            for _ in range(_taps.TIME_AFTER + 8):
                for v in ("padkit torch", "padkit oneDNN", "padkit auto"):
                    fns[v](x)
    with torch.no_grad():
        ref = fns["padkit torch"](x)
        checked = [v for v in ("padkit oneDNN", "padkit auto", "pytorch-tcn") if v in fns]
        diff = max(max_abs_diff(fns[v](x), ref) for v in checked)
    if mode == "train":
        x = x.detach().requires_grad_()
        calls = {}
        for name, f in fns.items():
            params = [p for p in _params(getattr(f, "module", f)) if p.requires_grad]
            if name == "timm" and not isinstance(f, nn.Module):
                params = shared
            inputs = [x, *params]
            with torch.no_grad():  # the symmetric reference may have another output size
                g = torch.randn_like(f(x))
            calls[name] = lambda f=f, inputs=inputs, g=g: torch.autograd.grad(f(x), inputs, g)
    else:
        calls = {name: (lambda f=f: f(x)) for name, f in fns.items()}
    res, other, _ = measure_case(
        calls, "native", rounds=rounds, block_s=block_s, inference=mode == "fwd"
    )
    layout = "1-D" if case.kind == "tcn" else ("CL" if cl else "NCHW")
    padkit_mod = fns["padkit torch"]
    return [
        case.name,
        str(n),
        layout,
        plan_of(case, padkit_mod, x),
        f"{res['native'].ms:.3f}",
        *(fmt_ratio(res.get(v)) for v in VARIANTS),
        f"{other:.2f}",
        f"{diff:.0e}",
    ]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--mode", choices=["fwd", "train"], default="fwd")
    ap.add_argument("--cases", nargs="*", default=[], help="substrings of the layer names")
    ap.add_argument("--batch", type=int, nargs="*", default=[1, 8])
    ap.add_argument("--layouts", nargs="*", default=["nchw", "cl"])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--block-s", type=float, default=0.03)
    ap.add_argument(
        "--deterministic", action="store_true", help="padkit auto by the static rules, untimed"
    )
    ap.add_argument(
        "--keep-choices",
        action="store_true",
        help="reuse the choices on disk (default: measure afresh, in a scratch file)",
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    lib = native.load()
    native.disable()
    native.set_tuning(not args.deterministic)
    if not args.keep_choices:
        _dispatch.HOOK.tuner.attach(Path(tempfile.mkdtemp()), lib.isa, lib.runtime_version)
    info = native.info()
    print(env_header(args.threads))
    print(f"- oneDNN backend: {info['onednn']} from {info['onednn_root']}, ISA {info['isa']}")
    print(f"- padkit auto: {info['tuning']} choices; mode: {args.mode}\n")
    cases = [c for c in SUITE if not args.cases or any(p in c.name for p in args.cases)]
    rows = []
    for case in cases:
        for cl in [lay == "cl" for lay in args.layouts]:
            if cl and case.kind == "tcn":
                continue
            for n in args.batch:
                row = run_cell(case, n, cl, args.mode, args.rounds, args.block_s)
                print(" | ".join(row), file=sys.stderr, flush=True)
                rows.append(row)
    header = ["layer", "N", "layout", "torch plan", "native ms", *VARIANTS, "other-CPU", "max diff"]
    print(markdown_table(header, rows))


if __name__ == "__main__":
    main()
