"""Peak memory of training steps: padkit with and without its oneDNN backend, beside the
symmetric torch model (the floor) and the explicit ``F.pad`` + conv twin.

Each variant runs in a fresh process (so one variant's freed pages never serve another;
large blocks come from mmap, so freed memory leaves the process), builds its model and
input, runs two training steps to warm up (plans; the backend times both sides of each op on
its second call; oneDNN primitives), reports their peak, then
reports the peak resident memory over ``--steps`` more steps (forward, backward, SGD
update) above what the process held before the first step (Linux: ``VmHWM`` reset
through ``/proc/self/clear_refs``). The backend's library is loaded before that baseline:
its code is a fixed cost per process, not training memory, and has a column of its own.
The library's code pages that the steps themselves fault in (building and running oneDNN
primitives reaches code that loading did not) are file-backed and stay resident: they are
in the peak, and the last column says how many there are (``/proc/self/smaps``: the
resident size of the oneDNN and padkit libraries' mappings, after the steps less before).
Models: ``stack`` (eight 256-channel 4x4 'same' convs, N=4, 32x32: 33.5 MB of weights)
and, where timm is installed, ``tf_efficientnet_b0`` (N=4, 224x224).
Run ``python bench/train_memory.py --help``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

VARIANTS = {
    "torch symmetric": {"PADKIT_NATIVE": "0"},
    "F.pad twin": {"PADKIT_NATIVE": "0"},
    "padkit, backend off": {"PADKIT_NATIVE": "0"},
    "padkit, backend auto": {"PADKIT_NATIVE": "1"},
    "padkit, backend forced": {"PADKIT_NATIVE": "force"},
}


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_mb() -> float:
    """The process's peak resident memory since the last :func:`_reset_peak` (VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _backend_code_mb() -> float:
    """Resident size of the backend's libraries (oneDNN's and padkit's own) in this process."""
    total, ours = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 5 and ":" not in head[0]:
                name = head[5] if len(head) > 5 else ""
                ours = "libdnnl" in name or "padkit_dnnl" in name
            elif ours and line.startswith("Rss:"):
                total += int(head[1])
    return total / 1024


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:  # Linux: "5" resets VmHWM to the current RSS
        f.write("5")


def _stack(variant: str) -> tuple[object, object]:
    import torch
    import torch.nn.functional as F
    from torch import nn

    import padkit.nn as pnn

    class Twin(nn.Conv2d):  # the explicit reference: F.pad then the unpadded conv
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.conv2d(F.pad(x, (1, 2, 1, 2)), self.weight, self.bias)

    def layer() -> nn.Module:
        if variant == "torch symmetric":
            return nn.Conv2d(256, 256, 5, padding=2)  # same FLOPs order, symmetric
        if variant == "F.pad twin":
            return Twin(256, 256, 4)
        return pnn.Conv2d(256, 256, 4, padding="same")

    torch.manual_seed(0)
    model = nn.Sequential(*(m for _ in range(8) for m in (layer(), nn.ReLU())))
    return model, torch.randn(4, 256, 32, 32)


def _effnet(variant: str) -> tuple[object, object]:
    import timm
    import torch

    from padkit.surgery import convert

    torch.manual_seed(0)
    model = timm.create_model("tf_efficientnet_b0", pretrained=False)
    if variant == "torch symmetric":
        model = timm.create_model("efficientnet_b0", pretrained=False)
    elif variant.startswith("padkit"):
        model, _ = convert(model)
    return model, torch.randn(4, 3, 224, 224)


def child(model_name: str, variant: str, steps: int, threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    if variant == "padkit, backend forced":
        from padkit.native import _dispatch

        _dispatch.active, _dispatch.HOOK.force = _dispatch.HOOK, True
    model, x = (_stack if model_name == "stack" else _effnet)(variant)
    library = 0.0
    if "backend" in variant and "off" not in variant:
        import padkit.native as native

        before = _rss_mb()
        native.load()  # the library's own code: a fixed cost, reported on its own
        library = _rss_mb() - before
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)  # type: ignore[attr-defined]

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        model(x).square().mean().backward()  # type: ignore[operator]
        opt.step()

    held = _rss_mb()  # the model, its input and torch
    code = _backend_code_mb()
    _reset_peak()
    step()  # plans, first sightings, the optimizer's state
    step()  # the backend's measured choices (timing both sides), oneDNN primitives
    first = _peak_mb() - held
    _reset_peak()
    for _ in range(steps):
        step()
    rise = _peak_mb() - held
    paged = _backend_code_mb() - code
    print(
        json.dumps({"rise_mb": rise, "first_mb": first, "library_mb": library, "paged_mb": paged})
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--models", nargs="*", default=["stack", "tf_efficientnet_b0"])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes per variant")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1], args.steps, args.threads)
        return
    from common import env_header, markdown_table

    print(env_header(args.threads))
    rows = []
    for model_name in args.models:
        if model_name != "stack":
            try:
                import timm  # noqa: F401
            except ImportError:
                print(f"(skipping {model_name}: timm is not installed)")
                continue
        rises: dict[str, list[float]] = {}
        firsts: dict[str, list[float]] = {}
        libs: dict[str, list[float]] = {}
        paged: dict[str, list[float]] = {}
        for variant, env in VARIANTS.items():
            for _ in range(args.repeats):
                out = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        *("--child", model_name, variant),
                        *("--steps", str(args.steps), "--threads", str(args.threads)),
                    ],
                    # large blocks from mmap, so that freed memory leaves the process
                    env={**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", **env},
                    capture_output=True,
                    text=True,
                    check=True,
                )
                got = json.loads(out.stdout.strip().splitlines()[-1])
                rises.setdefault(variant, []).append(got["rise_mb"])
                firsts.setdefault(variant, []).append(got["first_mb"])
                libs.setdefault(variant, []).append(got["library_mb"])
                paged.setdefault(variant, []).append(got["paged_mb"])
        floor = min(rises["padkit, backend off"])
        for variant, r in rises.items():
            rows.append(
                [
                    model_name,
                    variant,
                    f"{min(r):.0f} [{min(r):.0f}-{max(r):.0f}]",
                    f"{min(r) / floor:.2f}" if floor > 0 else "-",
                    f"{min(firsts[variant]):.0f}",
                    f"{min(libs[variant]):.0f}",
                    f"{min(paged[variant]):.1f}",
                ]
            )
    print(
        markdown_table(
            [
                "model",
                "variant",
                "steady peak MB (min [min-max])",
                "vs backend off",
                "first two steps MB",
                "library code MB",
                "its code paged in by the steps MB",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
