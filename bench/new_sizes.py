"""What unseen input sizes cost: padkit against torch's own layers on streams of new sizes.

Real workloads rarely repeat a size: detection resizes every image to a fixed short side,
audio files have their own lengths, a stream's last chunk is short. Each run starts a fresh
process with an empty choices file (the native backend measures nothing yet) and feeds
two models, interleaved call by call, the same sequence of sizes:

* ``2-D``: a TF-'same' CNN (stem 3x3 s2, depthwise 3x3 s2, 1x1, max pool 3x3 s2) on
  ``--count`` sizes from 200x180 up, batch 1;
* ``1-D``: a causal dilated Conv1d stack (dilations 1, 2, 4, 8; 32 channels) on lengths
  from 4000 up;

* ``stream``: the same stack as a :class:`padkit.streaming.StreamingModule`, ``--count``
  streams of 8 chunks (160 to 2700 samples, each stream's last chunk 97 shorter), against
  torch's own convs (padding 0) streamed by hand on their buffered history;

against the same models with torch's symmetric padding (the same FLOPs). It prints the
ratio of the summed times per pass: pass 0 meets every size for the first time, pass 1
meets them again, pass 2 is the steady state. Run ``python bench/new_sizes.py --help``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

#: the caller's PADKIT_NATIVE (bench/common.py turns the backend off for the benchmarks
#: that import it; the child processes here run with the backend as the caller has it)
_NATIVE = os.environ.get("PADKIT_NATIVE")

CHILD = r"""
import json, sys, time
import torch
from torch import nn
import padkit.nn as pn

kind, count, threads, passes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
import pathlib
import padkit.native as native
from padkit.native import _dispatch
if native.available():  # the built library as cached; measured choices start empty
    lib = native.load()
    _dispatch.HOOK.tuner.attach(pathlib.Path(sys.argv[5]), lib.isa, lib.runtime_version)
torch.manual_seed(0)


def cnn(padkit):
    if padkit:
        return nn.Sequential(
            pn.Conv2d(3, 32, 3, 2, padding="same"), nn.ReLU(),
            pn.Conv2d(32, 32, 3, 2, padding="same", groups=32), pn.Conv2d(32, 64, 1),
            pn.MaxPool2d(3, 2, padding="same"),
        )
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, 2, padding=1), nn.ReLU(),
        nn.Conv2d(32, 32, 3, 2, padding=1, groups=32), nn.Conv2d(32, 64, 1),
        nn.MaxPool2d(3, 2, padding=1),
    )


def tcn(padkit):
    layers = []
    for d in (1, 2, 4, 8):
        conv = (pn.Conv1d(32, 32, 3, dilation=d, padding="causal") if padkit
                else nn.Conv1d(32, 32, 3, dilation=d, padding=d))
        layers += [conv, nn.ReLU()]
    return nn.Sequential(*layers)


class TorchStream:
    # torch's own layers streamed by hand: each conv (padding 0) on its buffered history
    # and the chunk; what a stream step of padkit's is measured against

    def __init__(self, model):
        self.model = model
        self.convs = [m for m in model if isinstance(m, nn.Conv1d)]

    def start(self, n, c):
        return [torch.zeros(n, m.in_channels, m.dilation[0] * (m.kernel_size[0] - 1))
                for m in self.convs]

    def step(self, x, state):
        new, i = [], 0
        for m in self.model:
            if isinstance(m, nn.Conv1d):
                seg = torch.cat([state[i], x], -1)
                new.append(seg[..., seg.shape[-1] - state[i].shape[-1]:])
                x = torch.nn.functional.conv1d(seg, m.weight, m.bias, 1, 0, m.dilation)
                i += 1
            else:
                x = m(x)
        return x, new


class Streamed:
    # one side of the stream case: a call runs a whole stream, chunk by chunk

    def __init__(self, stepper, start):
        self.stepper, self.start = stepper, start

    def __call__(self, chunks):
        state = self.start()
        for x in chunks:
            _, state = self.stepper.step(x, state)


build = cnn if kind == "2-D" else tcn
ours, theirs = build(True).eval(), build(False).eval()
theirs.load_state_dict(ours.state_dict())
if kind == "stream":
    from padkit.streaming import StreamingModule

    for m in theirs:
        if isinstance(m, nn.Conv1d):
            m.padding = (0,)
    stream = StreamingModule(ours)
    ours = Streamed(stream, lambda: stream.init_state(batch_size=1))
    mine = TorchStream(theirs)
    theirs = Streamed(mine, lambda: mine.start(1, 32))
if kind == "stream":
    # streams of 8 chunks; chunk lengths differ between and within streams (a stream's
    # last chunk is short), every length new in pass 0
    inputs = [
        [torch.randn(1, 32, 160 + 8 * (8 * i + j) + (0 if j < 7 else -97)) for j in range(8)]
        for i in range(count)
    ]
    warm = [torch.randn(1, 32, 64)]
elif kind == "2-D":
    inputs = [torch.randn(1, 3, 200 + 7 * i, 180 + 5 * i) for i in range(count)]
    warm = torch.randn(1, 3, 64, 64)
else:
    inputs = [torch.randn(1, 32, 4000 + 37 * i) for i in range(count)]
    warm = torch.randn(1, 32, 1000)
rows = []
with torch.no_grad():
    ours(warm), theirs(warm)  # import-time and first-call costs, on a size not timed
    for p in range(passes):
        t_ours = t_theirs = 0.0
        for i, x in enumerate(inputs):
            order = (ours, theirs) if i % 2 == 0 else (theirs, ours)
            for m in order:
                t0 = time.perf_counter()
                m(x)
                dt = time.perf_counter() - t0
                if m is ours:
                    t_ours += dt
                else:
                    t_theirs += dt
        rows.append((t_ours, t_theirs))
info = native.info()
print(json.dumps({"rows": rows, "backend": info["enabled"], "kept": info["choices_kept"]}))
"""


def run(kind: str, count: int, threads: int, passes: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as choices:
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
        env.pop("PADKIT_NATIVE", None)
        if _NATIVE is not None:
            env["PADKIT_NATIVE"] = _NATIVE
        out = subprocess.run(
            [sys.executable, "-c", CHILD, kind, str(count), str(threads), str(passes), choices],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
        return result


def main() -> None:
    from common import env_header

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--count", type=int, default=40, help="sizes per stream")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per workload")
    ap.add_argument("--cases", nargs="+", default=["2-D", "1-D", "stream"])
    args = ap.parse_args()
    print(env_header(args.threads))
    print()
    backend = run("1-D", 1, args.threads, 1)["backend"]
    print(f"- oneDNN backend: {'on' if backend else 'off'} (PADKIT_NATIVE={_NATIVE})")
    print()
    print("| workload | pass | padkit ms | torch ms | padkit / torch (median of runs) | runs |")
    print("|---|---|---|---|---|---|")
    for kind in args.cases:
        runs = [run(kind, args.count, args.threads, args.passes) for _ in range(args.repeats)]
        for p in range(args.passes):
            pairs = [r["rows"][p] for r in runs]  # type: ignore[index]
            ratios = sorted(a / b for a, b in pairs)
            ours = sorted(a for a, _ in pairs)[len(pairs) // 2] * 1e3
            theirs = sorted(b for _, b in pairs)[len(pairs) // 2] * 1e3
            spread = ", ".join(f"{r:.2f}" for r in ratios)
            print(
                f"| {kind} | {p} | {ours:.1f} | {theirs:.1f} | "
                f"{ratios[len(ratios) // 2]:.2f} | {spread} |"
            )


if __name__ == "__main__":
    main()
