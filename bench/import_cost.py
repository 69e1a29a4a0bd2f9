"""What padkit costs a script before it computes anything: import time and memory.

Each case runs in a fresh interpreter: ``import torch`` (the floor), ``import padkit``,
``import padkit.nn``, and ``padkit verify -q`` (the bundled example against onnxruntime:
torch, onnx and onnxruntime imports plus a small model). Every round runs each case once,
in an order reversed every other round; a case's time is the wall time of its process
(start to exit), its memory the process's max RSS (``wait4``). The table gives medians
over rounds and, for time, the median over rounds of the paired difference to ``import
torch`` of the same round (machine load shifts both alike).

``--pyc`` lets the children cache bytecode (``PYTHONPYCACHEPREFIX`` in a temporary
directory, written by the warm-up run), as an installed package does; without it they run
with the environment's ``PYTHONDONTWRITEBYTECODE`` (set on this project's machines, where
every module is compiled from source on each import).

``--baseline COMMIT`` runs the same cases on an earlier commit's padkit (``git archive``
into a temporary directory), interleaved with this checkout's, so before and after are
measured side by side.

    python bench/import_cost.py --rounds 7
    python bench/import_cost.py --rounds 7 --baseline 15951e3 [--pyc]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# the children get the backend setting the user has, not the benchmarks' default (common.py)
_USER_NATIVE = os.environ.get("PADKIT_NATIVE")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
# torch (and common.py, which imports it) load only after the measurements: a child forked
# from a process holding torch would count the parent's pages in its max RSS

CASES: dict[str, list[str]] = {
    "import torch": ["-c", "import torch"],
    "import padkit": ["-c", "import padkit"],
    "import padkit.nn": ["-c", "import padkit.nn"],
    "padkit verify -q": ["-m", "padkit", "verify", "-q"],
}


@dataclass
class Samples:
    seconds: list[float] = field(default_factory=list)
    rss_mb: list[float] = field(default_factory=list)


#: where the children cache bytecode under --pyc (None: the environment decides)
_PYC: Path | None = None


def _env(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PADKIT_NATIVE"}
    if _USER_NATIVE is not None:
        env["PADKIT_NATIVE"] = _USER_NATIVE
    if _PYC is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(_PYC)
    env["PYTHONPATH"] = str(tree)
    return env


def _run_once(args: list[str], tree: Path) -> tuple[float, float]:
    """(wall seconds, max RSS in MB) of one fresh interpreter running ``args``."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, *args],
        cwd=tree,
        env=_env(tree),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}):\n{err}")
    return seconds, usage.ru_maxrss / 1024.0  # ru_maxrss is in KiB on Linux


def _archive(commit: str, into: Path) -> Path:
    """An earlier commit's tree (padkit/ only), unpacked under ``into``."""
    tar = subprocess.run(
        ["git", "archive", commit, "padkit"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    into.mkdir()
    subprocess.run(["tar", "-x", "-C", str(into)], input=tar, check=True)
    return into


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--baseline", help="an earlier commit, measured side by side")
    ap.add_argument("--no-verify", action="store_true", help="leave out padkit verify")
    ap.add_argument("--pyc", action="store_true", help="cache bytecode, as an install does")
    args = ap.parse_args()
    global _PYC

    cases = {k: v for k, v in CASES.items() if not (args.no_verify and "verify" in k)}
    with tempfile.TemporaryDirectory(prefix="padkit-import-") as tmp:
        if args.pyc:
            _PYC = Path(tmp) / "pyc"
        trees = {"this checkout": ROOT}
        if args.baseline:
            trees[args.baseline] = _archive(args.baseline, Path(tmp) / "baseline")
        runs = [
            (t, c)
            for t in trees
            for c in cases
            if not (t != "this checkout" and c == "import torch")
        ]
        for tree_name, case in runs:  # warm-up: file caches, the backend's build, choices
            _run_once(cases[case], trees[tree_name])
        samples = {run: Samples() for run in runs}
        for r in range(args.rounds):
            for run in runs if r % 2 == 0 else runs[::-1]:
                s, mb = _run_once(cases[run[1]], trees[run[0]])
                samples[run].seconds.append(s)
                samples[run].rss_mb.append(mb)

    import torch
    from common import env_header, markdown_table

    floor = samples[("this checkout", "import torch")]
    rows = []
    for (tree_name, case), got in samples.items():
        extra_s = [a - b for a, b in zip(got.seconds, floor.seconds)]
        extra_mb = [a - b for a, b in zip(got.rss_mb, floor.rss_mb)]
        rows.append(
            [
                case,
                tree_name,
                f"{statistics.median(got.seconds):.2f} s "
                f"[{min(got.seconds):.2f}-{max(got.seconds):.2f}]",
                "" if case == "import torch" else f"{statistics.median(extra_s):+.2f} s",
                f"{statistics.median(got.rss_mb):.0f} MB",
                "" if case == "import torch" else f"{statistics.median(extra_mb):+.0f} MB",
            ]
        )
    print(env_header(torch.get_num_threads()))
    bytecode = (
        "cached (--pyc)"
        if args.pyc
        else f"PYTHONDONTWRITEBYTECODE={os.environ.get('PYTHONDONTWRITEBYTECODE') or 'unset'}"
    )
    print(
        f"- rounds: {args.rounds} (after one warm-up each); bytecode {bytecode}; "
        f"PADKIT_NATIVE={_USER_NATIVE or 'unset'}"
    )
    print()
    header = ["case", "padkit", "time, median [min-max]", "over torch", "max RSS", "over torch"]
    print(markdown_table(header, rows))


if __name__ == "__main__":
    main()
