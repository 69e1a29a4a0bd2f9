"""Dilation benchmark: exactness across model families, and the speed of a dilated resnet50.

Two parts (``--part exact speed``, both by default):

* ``exact``: every model of docs/surgery.md's table, built with seeded random weights and
  random BatchNorm statistics, in eval mode, dilated to output stride 16 and 8 by
  ``padkit.surgery.dilate`` and, where they exist, by the peers with the same weights
  (timm ``output_stride``, smp ``get_encoder(..., output_stride=...)`` i.e. ``make_dilated``,
  torchvision ``replace_stride_with_dilation``). Each cell is
  ``padkit.surgery.dilation_error`` at 128x128 / 225x200: the largest relative difference
  between a dilated feature map, subsampled at its lattice, and the original's. timm
  models are compared on ``forward_features``. Where float32 rounding dominates (deep
  SE nets with random statistics), padkit's figure is also given in float64.
* ``speed``: torchvision resnet50 at output stride 8, ``replace_stride_with_dilation=
  [False, True, True]`` (the reference) against ``dilate(resnet50(), 8)`` (same weights,
  same FLOPs), whole model, eager, interleaved paired rounds (``bench/common.py``); the
  dense feature maps of the two are checked equal first.

Run ``python bench/dilate.py --help``.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import env_header, fmt_ratio, markdown_table, measure_case, randomize_bn

from padkit.surgery import SurgeryError, dilate, dilation_error

SIZES = ((128, 128), (225, 200))


class Features(nn.Module):
    """A timm model's ``forward_features`` (its head left out of the comparison)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor) -> Tensor:
        return self.model.forward_features(x)  # type: ignore[operator,no-any-return]


def _errors(original: nn.Module, dilated: nn.Module, dtype: torch.dtype) -> str:
    errs = []
    for h, w in SIZES:
        x = torch.randn(1, 3, h, w, generator=torch.Generator().manual_seed(h), dtype=dtype)
        errs.append(dilation_error(original, dilated, x))
    return " / ".join(f"{e:.1e}" if e else "0.0" for e in errs)


Builder = Callable[[], nn.Module]
Peer = Callable[[nn.Module, int], nn.Module | None]


def _cases() -> list[tuple[str, Builder, Peer | None, bool]]:
    """(label, build the original, build the peer's dilation with its weights, timm?)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import segmentation_models_pytorch as smp
        import timm
        import torchvision
        from fastai.vision.models import xresnet
        from torchvision.models.feature_extraction import create_feature_extractor

    def timm_peer(name: str, **kw: Any) -> Peer:
        def peer(original: nn.Module, os: int) -> nn.Module:
            m = timm.create_model(name, pretrained=False, output_stride=os, **kw)
            inner = original.model if isinstance(original, Features) else original
            m.load_state_dict(inner.state_dict())
            m.eval()
            return Features(m) if isinstance(original, Features) else m

        return peer

    def smp_peer(name: str) -> Peer:
        def peer(original: nn.Module, os: int) -> nn.Module:
            m = smp.encoders.get_encoder(name, weights=None, output_stride=os)
            m.load_state_dict(original.state_dict())
            return m.eval()

        return peer

    def tv_peer(original: nn.Module, os: int) -> nn.Module:
        flags = [False, os <= 8, True]
        m = torchvision.models.resnet50(replace_stride_with_dilation=flags)
        m.load_state_dict(original.state_dict())
        return m.eval()

    nodes = {"layer2": "c3", "layer3": "c4", "layer4": "c5"}

    def tv_fx_peer(original: nn.Module, os: int) -> nn.Module:
        flags = [False, os <= 8, True]
        m = torchvision.models.resnet50(replace_stride_with_dilation=flags)
        fx = create_feature_extractor(m, nodes)
        fx.load_state_dict(original.state_dict())
        return fx.eval()

    def timm_fo_peer(original: nn.Module, os: int) -> nn.Module:
        m = timm.create_model("resnet50d", pretrained=False, features_only=True, output_stride=os)
        m.load_state_dict(original.state_dict())
        return m.eval()

    cases: list[tuple[str, Builder, Peer | None, bool]] = [
        ("fastai xresnet18", xresnet.xresnet18, None, False),
        ("fastai xresnet50", xresnet.xresnet50, None, False),
        ("fastai xresnext50", xresnet.xresnext50, None, False),
        ("fastai xse_resnet50", xresnet.xse_resnet50, None, False),
        ("fastai xresnet50_deep", xresnet.xresnet50_deep, None, False),
    ]
    for name in ("resnet34", "resnet50"):
        cases.append(
            (
                f"smp get_encoder({name!r})",
                lambda n=name: smp.encoders.get_encoder(n, weights=None),
                smp_peer(name),
                False,
            )
        )
    for name in (
        "resnet50d",
        "seresnext26d_32x4d",
        "regnetx_002",
        "res2net50_14w_8s",
        "resnest14d",
        "efficientnet_b0",
        "mobilenetv3_large_100",
    ):
        cases.append(
            (
                f"timm {name}",
                lambda n=name: Features(timm.create_model(n, pretrained=False)),
                timm_peer(name),
                True,
            )
        )
    cases += [
        ("torchvision resnet50", torchvision.models.resnet50, tv_peer, False),
        (
            "torchvision create_feature_extractor(resnet50)",
            lambda: create_feature_extractor(torchvision.models.resnet50(), nodes),
            tv_fx_peer,
            False,
        ),
        (
            "timm resnet50d features_only",
            lambda: timm.create_model("resnet50d", pretrained=False, features_only=True),
            timm_fo_peer,
            True,
        ),
    ]
    return cases


def run_exact(only: list[str] | None) -> list[list[str]]:
    rows = []
    for label, build, peer, _ in _cases():
        if only and not any(o in label for o in only):
            continue
        torch.manual_seed(0)
        original = randomize_bn(build())
        for os in (16, 8):
            try:
                dilated, _ = dilate(original, os)
                ours = _errors(original, dilated, torch.float32)
                worst = max(float(v) for v in ours.split(" / "))
                if worst > 1e-4:
                    d64, _ = dilate(original.double(), os)
                    ours += f" (float64: {_errors(original, d64, torch.float64)})"
                    original.float()
            except SurgeryError as exc:
                ours = f"refused: {exc}"
            theirs = "–"
            if peer is not None:
                try:
                    other = peer(original, os)
                    theirs = _errors(original, other, torch.float32) if other else "–"
                except Exception as exc:
                    theirs = f"fails: {type(exc).__name__}"
            rows.append([label, str(os), ours, theirs])
            print(f"  {label} os={os}: {ours} | {theirs}", file=sys.stderr, flush=True)
    return rows


def _body(model: nn.Module) -> nn.Module:
    return nn.Sequential(*list(model.children())[:-2])


def run_speed(batches: list[int], size: int, rounds: int) -> list[list[str]]:
    import torchvision

    torch.manual_seed(0)
    base = randomize_bn(torchvision.models.resnet50())
    ref = torchvision.models.resnet50(replace_stride_with_dilation=[False, True, True]).eval()
    ref.load_state_dict(base.state_dict())
    ours, _ = dilate(base, 8)
    rows = []
    for n in batches:
        x = torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(0))
        # the dense feature maps are the same network's; the logits differ by design
        # (padkit's head pools the lattice, torchvision's the dense map)
        with torch.inference_mode():
            a, b = _body(ref)(x), _body(ours)(x)
            diff = float((b - a).abs().max() / a.abs().max())
        fns = {"torchvision": lambda t=x: ref(t), "padkit": lambda t=x: ours(t)}
        res, other, _ = measure_case(fns, "torchvision", rounds=rounds, block_s=0.05)
        rows.append(
            [
                str(n),
                f"{size}x{size}",
                f"{res['torchvision'].ms:.1f}",
                f"{res['padkit'].ms:.1f}",
                fmt_ratio(res["padkit"], 3),
                f"{diff:.1e}",
                f"{other:.2f}",
            ]
        )
        print(f"  speed N={n} done (other-CPU {other:.2f})", file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--part", nargs="+", default=["exact", "speed"], choices=["exact", "speed"])
    ap.add_argument("--only", nargs="*", help="exact: models whose label has one of these")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batches", type=int, nargs="+", default=[1])
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--rounds", type=int, default=11)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(env_header(args.threads) + "\n")
    if "exact" in args.part:
        rows = run_exact(args.only)
        header = ["model", "OS", "padkit dilate", "timm / smp / torchvision dilation"]
        print("## a-trous identity, 128x128 / 225x200\n")
        print(markdown_table(header, rows) + "\n")
    if "speed" in args.part:
        rows = run_speed(args.batches, args.size, args.rounds)
        header = [
            "N",
            "input",
            "torchvision ms",
            "padkit ms",
            "padkit / torchvision",
            "features: max rel. diff",
            "other-CPU",
        ]
        print("## resnet50 at output stride 8, eager\n")
        print(markdown_table(header, rows) + "\n")
        print("Target: padkit <= 1.02 x torchvision's replace_stride_with_dilation.")


if __name__ == "__main__":
    main()
