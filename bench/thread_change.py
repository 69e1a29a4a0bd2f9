"""A thread-count change after the first calls: padkit's oneDNN backend against torch.

The backend must run every call on exactly ``torch.get_num_threads()`` threads, whatever
the count was at its first call. Each ``(A, B)`` pair runs in a fresh process: every
variant of every case is called ``--first-calls`` times at ``torch.set_num_threads(A)``
(the backend is built, its primitives created, ``padkit auto`` makes its choices there),
then ``torch.set_num_threads(B)`` and the cases are timed at B (``bench/common.py``:
paired interleaved rounds, median of the per-round ratios to torch ``[min-max]``).

Variants, per case (a TF-'same' stride-2 conv, whose pads are uneven):

* ``torch``: ``nn.Conv2d(..., padding=1)``, the symmetric conv of the same shape (the
  reference, the floor);
* ``padkit torch``: ``padkit.nn.Conv2d(..., padding="same")`` with the backend off;
* ``padkit oneDNN``: the same with every op forced onto the backend (``PADKIT_NATIVE=1``);
* ``padkit auto``: the backend on as users get it (each op signature timed on its first
  calls, the faster side kept; a fresh choices file).

After the paired rounds each variant runs alone for ``--busy-s`` seconds while the CPU time
of every thread of the process is read from ``/proc/self/task``: ``CPU/wall`` is the
process's CPU time over the wall time (about the number of threads kept busy, OpenMP's
spinning between calls included) and ``busy`` counts the threads that used at least 25%
of the wall time. Both should equal B.

    python bench/thread_change.py --rounds 15
    python bench/thread_change.py --pairs 1,2 2,1 1,1 2,2 --wait-quiet 60   # with controls
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch
from common import CpuMonitor, env_header, fmt_ratio, markdown_table, max_abs_diff, measure_case
from torch import Tensor, nn

import padkit.native as native
import padkit.nn as pnn
from padkit.native import _dispatch

VARIANTS = ("padkit torch", "padkit oneDNN", "padkit auto")
ALL = ("torch", *VARIANTS)

#: name -> (in channels, out channels, groups, input size)
CASES = {
    "dense 3x3 s2 64ch 112²": (64, 64, 1, 112),
    "dw 3x3 s2 96ch 112²": (96, 96, 96, 112),
}

Fn = Callable[[Tensor], Tensor]


def _with_backend(m: Fn, force: bool) -> Fn:
    def run(x: Tensor) -> Tensor:
        _dispatch.active, _dispatch.HOOK.force = _dispatch.HOOK, force
        try:
            return m(x)
        finally:
            _dispatch.active, _dispatch.HOOK.force = None, False

    return run


def build(name: str, n: int) -> tuple[Tensor, dict[str, Fn]]:
    cin, cout, groups, size = CASES[name]
    torch.manual_seed(0)
    ref = nn.Conv2d(cin, cout, 3, stride=2, padding=1, groups=groups).eval()
    pad = pnn.Conv2d(cin, cout, 3, stride=2, padding="same", groups=groups).eval()
    with torch.no_grad():
        pad.weight.copy_(ref.weight)
        assert pad.bias is not None and ref.bias is not None
        pad.bias.copy_(ref.bias)
    x = torch.randn(n, cin, size, size)
    fns: dict[str, Fn] = {
        "torch": ref,
        "padkit torch": pad,
        "padkit oneDNN": _with_backend(copy.deepcopy(pad), True),
        "padkit auto": _with_backend(copy.deepcopy(pad), False),
    }
    return x, fns


# ----------------------------------------------------------------------------- threads


def _task_ticks() -> dict[str, int]:
    """utime + stime of every thread of this process, in clock ticks."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as fh:
                text = fh.read()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        out[tid] = int(fields[11]) + int(fields[12])
    return out


def busy_threads(fn: Callable[[], object], seconds: float) -> tuple[float, int]:
    """(process CPU time / wall time, threads that used >= 25% of the wall) over calls of
    ``fn`` for about ``seconds``."""
    tck = os.sysconf("SC_CLK_TCK")
    with torch.inference_mode():
        fn()
        t0, c0, w0 = _task_ticks(), time.process_time(), time.perf_counter()
        while time.perf_counter() - w0 < seconds:
            fn()
        t1, c1, w1 = _task_ticks(), time.process_time(), time.perf_counter()
    wall = w1 - w0
    busy = sum(1 for tid, v in t1.items() if (v - t0.get(tid, 0)) / tck >= 0.25 * wall)
    return (c1 - c0) / wall, busy


def wait_quiet(limit_s: float, max_other: float = 0.1) -> float:
    """Wait (up to ``limit_s``) for a second in which other processes use under
    ``max_other`` of the machine's CPU time; returns the seconds waited."""
    start = time.perf_counter()
    while time.perf_counter() - start < limit_s:
        with CpuMonitor() as mon:
            time.sleep(1.0)
        if mon.other_share < max_other:
            break
    return time.perf_counter() - start


# ----------------------------------------------------------------------------- one pair


def child(args: argparse.Namespace) -> None:
    a, b = args.pair
    torch.set_num_threads(a)
    lib = native.load()
    native.disable()
    native.set_tuning(True)
    _dispatch.HOOK.tuner.attach(Path(tempfile.mkdtemp()), lib.isa, lib.runtime_version)
    cells = [(name, n, *build(name, n)) for name in args.cases for n in args.batch]
    at_a: list[str] = []  # padkit auto's choices made at A, per cell
    with torch.inference_mode():
        for _, _, x, fns in cells:
            before = len(_dispatch.HOOK.tuner.table())
            for v in ALL:
                for _ in range(args.first_calls):
                    fns[v](x)
            at_a.append(",".join(r["runs"] for r in _dispatch.HOOK.tuner.table()[before:]))
    torch.set_num_threads(b)
    for (name, n, x, fns), chosen_at_a in zip(cells, at_a):
        with torch.inference_mode():
            ref = fns["padkit torch"](x)
            diff = max(max_abs_diff(fns[v](x), ref) for v in ("padkit oneDNN", "padkit auto"))
        if args.wait_quiet and b > 1:  # at 1 thread of 2 CPUs, another process may use one
            waited = wait_quiet(args.wait_quiet)
            print(f"waited {waited:.0f} s for a quiet machine", file=sys.stderr)
        before = len(_dispatch.HOOK.tuner.table())
        calls = {v: (lambda f=fns[v], x=x: f(x)) for v in ALL}
        res, other, _ = measure_case(calls, "torch", rounds=args.rounds, block_s=args.block_s)
        new = _dispatch.HOOK.tuner.table()[before:]
        busy = {v: busy_threads(calls[v], args.busy_s) for v in ALL}
        row = {
            "case": name,
            "n": n,
            "a": a,
            "b": b,
            "torch_ms": res["torch"].ms,
            "ratios": {v: fmt_ratio(res[v]) for v in VARIANTS},
            "ratio": {v: res[v].ratio for v in VARIANTS},
            "busy": {v: f"{c:.2f}/{k}" for v, (c, k) in busy.items()},
            # a signature at B is timed afresh; at B = A the choice made at A holds
            "auto": ",".join(r["runs"] for r in new) or chosen_at_a or "?",
            "ms": {v: res[v].ms for v in ALL},
            "other": other,
            "diff": diff,
            "threads_after": torch.get_num_threads(),
        }
        print(json.dumps(row), flush=True)
        print(f"{name} N={n} {a}->{b}: {row['ratios']} busy {row['busy']}", file=sys.stderr)


# ----------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pairs", nargs="*", default=["1,2", "2,1"], help="A,B thread counts")
    ap.add_argument("--cases", nargs="*", default=["dense", "dw"], help="substrings of names")
    ap.add_argument("--batch", type=int, nargs="*", default=[1, 8])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--block-s", type=float, default=0.03)
    ap.add_argument("--first-calls", type=int, default=5, help="calls of each variant at A")
    ap.add_argument("--busy-s", type=float, default=0.5)
    ap.add_argument(
        "--wait-quiet",
        type=float,
        default=0.0,
        help="before each cell at B > 1, wait up to this many "
        "seconds for a second with other processes under 10%% of the CPU time",
    )
    ap.add_argument("--pair", type=int, nargs=2, help=argparse.SUPPRESS)  # the child's
    args = ap.parse_args(argv)
    args.cases = [c for c in CASES if any(p in c for p in args.cases)]
    if args.pair:
        child(args)
        return
    info = native.info() if native.available() else {"isa": "?", "onednn": "?"}
    print(env_header(torch.get_num_threads()).replace("- threads:", "- threads at start:"))
    print(f"- oneDNN backend: {info['onednn']}, ISA {info['isa']}; pairs A->B: {args.pairs}")
    print(
        f"- {args.first_calls} calls of each variant at A, then torch.set_num_threads(B), "
        f"{args.rounds} paired rounds of ~{args.block_s * 1e3:.0f} ms blocks at B\n"
    )
    rows = []
    for pair in args.pairs:
        a, b = (int(v) for v in pair.split(","))
        cmd = [sys.executable, __file__, "--pair", str(a), str(b), "--cases", *args.cases]
        cmd += ["--batch", *map(str, args.batch), "--rounds", str(args.rounds)]
        cmd += ["--block-s", str(args.block_s), "--first-calls", str(args.first_calls)]
        cmd += ["--busy-s", str(args.busy_s), "--wait-quiet", str(args.wait_quiet)]
        env = {**os.environ, "PADKIT_NATIVE": "0"}  # switched per variant in the child
        out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, check=True)
        for line in out.stdout.splitlines():
            r = json.loads(line)
            rows.append(
                [
                    r["case"],
                    str(r["n"]),
                    f"{r['a']} → {r['b']}",
                    f"{r['torch_ms']:.3f}",
                    *(r["ratios"][v] for v in VARIANTS),
                    f"{r['ms']['padkit oneDNN']:.3f} / {r['ms']['padkit auto']:.3f}",
                    r["auto"],
                    ", ".join(r["busy"][v] for v in ALL),
                    f"{r['other']:.2f}",
                    f"{r['diff']:.0e}",
                ]
            )
    header = ["layer", "N", "threads A → B", "torch ms at B", *VARIANTS]
    header += ["oneDNN / auto ms", "auto runs", "CPU/wall / busy threads (" + ", ".join(ALL) + ")"]
    header += ["other-CPU", "max diff"]
    print(markdown_table(header, rows))


if __name__ == "__main__":
    main()
