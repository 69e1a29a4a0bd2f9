"""First use of padkit's oneDNN backend: what the first conv call costs, and what it says.

Each case runs in a fresh interpreter with its own temporary cache directory
(``PADKIT_NATIVE_CACHE``), at 1 thread. The child builds torch's symmetric conv
(``nn.Conv2d(64, 64, 3, stride=2, padding=1)``) and padkit's TF-'same' one of the same
shape (``padkit.nn.Conv2d(..., padding="same")``, uneven pads, an op the backend takes),
then times, in this order: torch's first call (the floor: the process's first conv, with
torch's own lazy set-up), padkit's first call, then each side's 2nd call and calls 3-10
(``padkit auto`` times an op signature against torch on its first calls). A depthwise
TF-'same' conv is called last, so a second op shows whether a warning repeats.

Cases:

* ``build``: the backend on by default (``PADKIT_NATIVE`` unset), an empty cache: the first
  padkit call builds the library with the compiler;
* ``warm cache``: the same, the cache holding the library built by an earlier process;
* ``no compiler``: ``CXX`` names a missing binary, an empty cache: the backend cannot be
  built, padkit warns and runs its torch plans;
* ``PADKIT_NATIVE=0``: the backend off, an empty cache;
* ``PADKIT_NATIVE=1``: the backend asked for, an empty cache: it is built at import.

Each round runs every case once, the order reversed every other round; times are medians
over rounds ``[min-max]``. The messages column is what the process wrote to stderr (the
cache path shortened to ``<cache>``). A last check builds once into a cache that holds a
build last loaded 8 days ago and one loaded 1 day ago: the first must go, the second stay.

    python bench/first_use.py --rounds 3
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
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CASES: dict[str, dict[str, str | None]] = {
    "build (empty cache)": {},
    "warm cache": {},
    "no compiler (CXX=/nonexistent/g++)": {"CXX": "/nonexistent/g++"},
    "PADKIT_NATIVE=0": {"PADKIT_NATIVE": "0"},
    "PADKIT_NATIVE=1 (empty cache)": {"PADKIT_NATIVE": "1"},
}
KEYS = ("import", "torch 1st", "padkit 1st", "torch 2nd", "padkit 2nd", "torch 3-10", "padkit 3-10")


# ----------------------------------------------------------------------------- the child


def child() -> None:
    t0 = time.perf_counter()
    import torch
    from torch import nn

    import padkit.native as native
    import padkit.nn as pnn

    out: dict[str, object] = {"import": time.perf_counter() - t0}
    torch.set_num_threads(1)
    torch.manual_seed(0)
    ref = nn.Conv2d(64, 64, 3, stride=2, padding=1).eval()
    pad = pnn.Conv2d(64, 64, 3, stride=2, padding="same").eval()
    dw = pnn.Conv2d(96, 96, 3, stride=2, padding="same", groups=96).eval()
    x, xd = torch.randn(1, 64, 112, 112), torch.randn(1, 96, 112, 112)

    def timed(layer: Callable[[torch.Tensor], torch.Tensor], n: int = 1) -> float:
        start = time.perf_counter()
        for _ in range(n):
            layer(x)
        return time.perf_counter() - start

    with torch.no_grad():
        out["torch 1st"] = timed(ref)
        out["padkit 1st"] = timed(pad)
        out["torch 2nd"] = timed(ref)
        out["padkit 2nd"] = timed(pad)
        out["torch 3-10"] = timed(ref, 8)
        out["padkit 3-10"] = timed(pad, 8)
        dw(xd)
    out["status"] = native.status()
    print(json.dumps(out), flush=True)


# ----------------------------------------------------------------------------- the parent


def run_case(name: str, cache: Path) -> tuple[dict[str, float], str, str]:
    """(times, the stderr lines, the status line) of one fresh process running ``name``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PADKIT_NATIVE", "CXX")}
    env.update({k: v for k, v in CASES[name].items() if v is not None})
    env["PADKIT_NATIVE_CACHE"] = str(cache)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    res = subprocess.run(
        [sys.executable, __file__, "--child"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0:
        raise RuntimeError(f"{name}: the child failed\n{res.stderr[-3000:]}")
    data = json.loads(res.stdout.strip().splitlines()[-1])
    err = res.stderr.replace(str(cache), "<cache>").replace(str(ROOT) + os.sep, "")
    lines = " / ".join(ln.strip() for ln in err.splitlines() if ln.strip())
    return {k: float(data[k]) for k in KEYS}, lines, str(data["status"])


def _fmt(v: list[float]) -> str:
    return f"{statistics.median(v):.4f} [{min(v):.4f}-{max(v):.4f}]"


def stale_check(tmp: Path) -> str:
    cache = tmp / "stale"
    cache.mkdir()
    now = time.time()
    old, recent = (
        cache / "padkit_dnnl-0000000000000000.so",
        cache / "padkit_dnnl-1111111111111111.so",
    )
    for path, age_days in ((old, 8), (recent, 1)):
        path.write_bytes(b"")
        os.utime(path, (now - age_days * 86400, now - age_days * 86400))
    _, lines, _ = run_case("build (empty cache)", cache)
    built = sorted(p.name for p in cache.glob("padkit_dnnl-*.so") if p not in (old, recent))
    return (
        f"build into a cache with a build last loaded 8 days ago and one 1 day ago: the 8-day "
        f"one {'still there' if old.exists() else 'removed'}, the 1-day one "
        f"{'kept' if recent.exists() else 'removed'}, new build {built}; stderr: {lines}"
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child()
        return
    sys.path.insert(0, str(ROOT / "bench"))
    from common import env_header  # imports torch: after the children's flags are read

    print(env_header(1))
    print(f"- compiler: {os.environ.get('CXX') or shutil.which('g++') or shutil.which('c++')}")
    print(f"- {args.rounds} rounds, each case once a round, order reversed every other round\n")
    tmp = Path(tempfile.mkdtemp(prefix="padkit-first-use-"))
    warm = tmp / "warm"
    run_case("build (empty cache)", warm)  # the warm cache, and the compiler's files read once
    names = list(CASES)
    times: dict[str, dict[str, list[float]]] = {n: {k: [] for k in KEYS} for n in names}
    said: dict[str, str] = {}
    status: dict[str, str] = {}
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            cache = warm if name == "warm cache" else Path(tempfile.mkdtemp(dir=tmp))
            t, lines, st = run_case(name, cache)
            for k in KEYS:
                times[name][k].append(t[k])
            said.setdefault(name, lines)
            status.setdefault(name, st)
            print(f"round {r} {name}: {t}", file=sys.stderr, flush=True)
    header = ["case", "import torch + padkit.nn s", *(f"{k} s" for k in KEYS[1:])]
    header += ["padkit 1st - torch 1st s", "warnings", "stderr"]
    rows = []
    for n in names:
        t = times[n]
        extra = [a - b for a, b in zip(t["padkit 1st"], t["torch 1st"])]
        warned = said[n].count("BackendWarning")
        rows.append([n, *(_fmt(t[k]) for k in KEYS), _fmt(extra), warned, said[n] or "(nothing)"])
    from common import markdown_table

    print(markdown_table(header, rows))
    print()
    for n in names:
        print(f"- {n}: padkit.native.status() = {status[n]}")
    print("- " + stale_check(tmp))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
