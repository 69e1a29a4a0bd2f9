"""Per-call cost of padkit's layers against an earlier commit, measured side by side.

The earlier commit's ``padkit`` is unpacked (``git archive``) under another package name
and imported into the same process, so both versions run interleaved on the same input,
in paired rounds: machine load affects both alike. Tiny inputs make the per-call Python
overhead the bulk of each call. Every pair is checked for equal outputs first.

    python bench/overhead_vs_commit.py 1bad9ca --rounds 31
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]

CASES: dict[str, Callable[[Any], Any]] = {
    "dw 3x3 s2 'same' (zero_extend)": lambda m: m.Conv2d(
        32, 32, 3, stride=2, padding="same", groups=32
    ),
    "dw 3x3 s1 'same' (native)": lambda m: m.Conv2d(32, 32, 3, padding="same", groups=32),
    "conv 3x3 s1 p=1 (native)": lambda m: m.Conv2d(32, 32, 3, padding=1),
    "max pool 3 s2 'same' (ceil_mode)": lambda m: m.MaxPool2d(3, 2, padding="same"),
    "avg pool 2 s1 ((0,1),(0,1))": lambda m: m.AvgPool2d(
        2, 1, padding=((0, 1), (0, 1)), count_include_pad=True
    ),
}


def _per_call_us(layer: Any, x: torch.Tensor, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        layer(x)
    return (time.perf_counter() - t0) / n * 1e6


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("commit", help="the earlier commit to compare with")
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--calls", type=int, default=2000, help="calls per timing")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", args.commit, "padkit"],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        (Path(tmp) / "padkit").rename(Path(tmp) / "padkit_before")
        sys.path.insert(0, tmp)
        sys.path.insert(0, str(ROOT))
        import padkit_before.nn as before  # type: ignore[import-not-found]

        import padkit.nn as after

        x = torch.randn(1, 32, 8, 8)
        print(f"padkit layers, per call (µs), 1 thread, input {tuple(x.shape)}, medians of")
        print(f"{args.rounds} paired rounds of {args.calls} calls; before = {args.commit}\n")
        print("| layer | before µs | now µs | paired Δ µs |\n|---|---|---|---|")
        with torch.no_grad():
            for name, make in CASES.items():
                old, new = make(before), make(after)
                new.load_state_dict(old.state_dict())
                if not torch.equal(old(x), new(x)):
                    raise SystemExit(f"{name}: the two versions compute different numbers")
                pairs = [
                    (_per_call_us(old, x, args.calls), _per_call_us(new, x, args.calls))
                    for _ in range(args.rounds)
                ]
                med_old = statistics.median(p[0] for p in pairs)
                med_new = statistics.median(p[1] for p in pairs)
                delta = statistics.median(q - p for p, q in pairs)
                print(f"| {name} | {med_old:.1f} | {med_new:.1f} | {delta:+.1f} |")


if __name__ == "__main__":
    main()
