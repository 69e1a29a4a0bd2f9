"""Whole models with asymmetric padding, padkit's oneDNN backend on and off.

* ``resnet50``: torchvision's ResNet-50 (v1.5, random weights) as it is: symmetric
  padding, the reference. ``tf-resnet50 timm``: the TF-style twin, every stride-2 conv
  with a kernel > 1 (the stem and the 3x3 convs) a timm ``Conv2dSame`` and the stem
  pool timm's ``MaxPool2dSame`` (TF ``"same"``: pads (2, 3) on the stem, (0, 1) on the
  3x3 convs and the pool at 224²). ``tf-resnet50 padkit``: that twin after
  ``padkit.surgery.convert`` (checked against it), backend off; ``... +oneDNN``: the
  same model with ``padkit.native`` enabled (the planner choosing).
* ``tcn``: 10 residual blocks of two k=3 convs with dilations 1, 2, ..., 512, 64
  channels, symmetric padding ``d`` (the reference, same FLOPs, not causal).
  ``tcn F.pad``: causal by ``F.pad`` (what pytorch-tcn style code does); ``tcn crop``:
  padding ``2d`` and a view ``[..., :L]`` before the ReLU (an elementwise op reads the
  view for free); ``tcn padkit`` / ``+oneDNN``: ``padkit.nn.Conv1d(padding="causal")``.

``--mode fwd`` times inference; ``--mode train`` a forward and backward (gradients of
the input and all parameters). Cells: median of paired per-round ratios against the
symmetric model ``[min-max]`` (``bench/common.py``). Run ``python bench/native_models.py
--help``.
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import env_header, fmt_ratio, markdown_table, max_abs_diff, measure_case

import padkit.native as native
import padkit.nn as pnn
from padkit.native import _dispatch
from padkit.surgery import fuse_pads

Fn = Callable[[Tensor], Tensor]


def _with_backend(m: nn.Module) -> Fn:
    def run(x: Tensor) -> Tensor:
        _dispatch.active = _dispatch.HOOK
        try:
            out: Tensor = m(x)
            return out
        finally:
            _dispatch.active = None

    run.module = m  # type: ignore[attr-defined]
    return run


# ----------------------------------------------------------------------------- ResNet-50


def resnets() -> dict[str, nn.Module]:
    import torchvision
    from timm.layers import Conv2dSame, create_pool2d

    from padkit.surgery import convert

    torch.manual_seed(0)
    ref = torchvision.models.resnet50(weights=None).eval()
    tf = copy.deepcopy(ref)
    for name, mod in list(tf.named_modules()):
        if isinstance(mod, nn.Conv2d) and mod.stride[0] == 2 and mod.kernel_size[0] > 1:
            new = Conv2dSame(
                mod.in_channels,
                mod.out_channels,
                mod.kernel_size,
                mod.stride,
                groups=mod.groups,
                bias=mod.bias is not None,
            )
            new.load_state_dict(mod.state_dict())
            parent = tf.get_submodule(name.rsplit(".", 1)[0]) if "." in name else tf
            setattr(parent, name.rsplit(".", 1)[-1], new)
    tf.maxpool = create_pool2d("max", 3, stride=2, padding="same")
    padkit, _ = convert(copy.deepcopy(tf))
    return {
        "resnet50": ref,
        "tf-resnet50 timm": tf.eval(),
        "tf-resnet50 padkit": padkit.eval(),
    }


# ----------------------------------------------------------------------------- TCN


class TCN(nn.Module):
    """Residual blocks of two dilated k=3 convs; ``mode`` picks how the pads are made."""

    def __init__(self, mode: str, channels: int = 64, levels: int = 10) -> None:
        super().__init__()
        self.mode = mode
        self.dilations = [2**i for i in range(levels)]
        convs: list[nn.Module] = []
        for d in self.dilations:
            for _ in range(2):
                if mode == "padkit":
                    convs.append(pnn.Conv1d(channels, channels, 3, padding="causal", dilation=d))
                else:
                    pad = {"symmetric": d, "crop": 2 * d, "fpad": 0}[mode]
                    convs.append(nn.Conv1d(channels, channels, 3, padding=pad, dilation=d))
        self.convs = nn.ModuleList(convs)

    def _conv(self, i: int, x: Tensor) -> Tensor:
        conv, d, n = self.convs[i], self.dilations[i // 2], x.shape[-1]
        if self.mode == "fpad":
            return conv(F.pad(x, (2 * d, 0)))  # type: ignore[no-any-return]
        y = conv(x)
        return y[..., :n] if self.mode == "crop" else y  # type: ignore[no-any-return]

    def forward(self, x: Tensor) -> Tensor:
        for i in range(0, len(self.convs), 2):
            h = F.relu(self._conv(i, x))
            x = x + F.relu(self._conv(i + 1, h))
        return x


class Codec(nn.Module):
    """A causal SEANet-style encoder; ``mode`` picks how the pads are made."""

    def __init__(self, mode: str, base: int = 32, strides: tuple[int, ...] = (2, 4, 8, 8)):
        super().__init__()
        self.mode = mode
        layers: list[nn.Module] = [self._conv(1, base, 7)]
        ch = base
        for s in strides:
            layers += [_Residual(self._conv(ch, ch // 2, 3), nn.Conv1d(ch // 2, ch, 1))]
            layers += [nn.ELU(), self._conv(ch, 2 * ch, 2 * s, s)]
            ch *= 2
        layers += [nn.ELU(), self._conv(ch, 128, 7)]
        self.net = nn.Sequential(*layers)

    def _conv(self, cin: int, cout: int, k: int, s: int = 1) -> nn.Module:
        if self.mode == "padkit":
            rule = "causal" if s == 1 else "causal_block"
            return pnn.Conv1d(cin, cout, k, stride=s, padding=rule)
        if self.mode == "fpad":
            return nn.Sequential(nn.ConstantPad1d((k - s, 0), 0.0), nn.Conv1d(cin, cout, k, s))
        return nn.Conv1d(cin, cout, k, s, padding=(k - s) // 2)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.net(x)
        return out


class _Residual(nn.Module):
    def __init__(self, conv: nn.Module, proj: nn.Module) -> None:
        super().__init__()
        self.act = nn.ELU()
        self.conv = conv
        self.proj = proj

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = x + self.proj(F.elu(self.conv(self.act(x))))
        return out


def codecs() -> dict[str, nn.Module]:
    torch.manual_seed(0)
    ref = Codec("symmetric").eval()
    out: dict[str, nn.Module] = {"codec": ref}
    for mode, name in (("fpad", "codec F.pad"), ("padkit", "codec padkit")):
        m = Codec(mode).eval()
        m.load_state_dict(_align(m, ref.state_dict()))
        out[name] = m
    return out


def _align(m: nn.Module, src: dict[str, Tensor]) -> dict[str, Tensor]:
    """The reference's weights under ``m``'s keys (the F.pad twin nests convs one deeper)."""
    keys = list(m.state_dict())
    if len(keys) != len(src):
        raise RuntimeError("codec variants differ in their parameters")
    return dict(zip(keys, src.values()))


def tcns() -> dict[str, nn.Module]:
    torch.manual_seed(0)
    ref = TCN("symmetric").eval()
    out: dict[str, nn.Module] = {"tcn": ref}
    for mode, name in (("fpad", "tcn F.pad"), ("crop", "tcn crop"), ("padkit", "tcn padkit")):
        m = TCN(mode).eval()
        m.load_state_dict(ref.state_dict())
        out[name] = m
    return out


# ----------------------------------------------------------------------------- driver


def run(
    models: dict[str, nn.Module],
    x: Tensor,
    exact: tuple[str, str],
    mode: str,
    rounds: int,
) -> tuple[list[str], dict[str, str]]:
    ref_name = next(iter(models))
    padkit_name = next(k for k in models if k.endswith("padkit"))
    fns: dict[str, Fn] = dict(models)
    fns[padkit_name + " +oneDNN"] = _with_backend(copy.deepcopy(models[padkit_name]))
    fused, _ = fuse_pads(models[padkit_name], x)
    fns[padkit_name + " fused"] = fused
    fns[padkit_name + " fused +oneDNN"] = _with_backend(copy.deepcopy(fused))
    native.enable()
    native.disable()
    with torch.no_grad():
        base = models[exact[0]](x)
        diffs = {
            name: f"{max_abs_diff(fns[name](x), base):.0e}" for name in fns if name != ref_name
        }
    if mode == "train":
        x = x.detach().requires_grad_()
        calls = {}
        for name, f in fns.items():
            mod = getattr(f, "module", f)
            params = [x, *mod.parameters()]  # type: ignore[union-attr]
            calls[name] = lambda f=f, params=params: torch.autograd.grad(f(x).sum(), params)
    else:
        calls = {name: (lambda f=f: f(x)) for name, f in fns.items()}
    res, other, _ = measure_case(
        calls, ref_name, rounds=rounds, block_s=0.05, inference=mode == "fwd"
    )
    names = list(fns)
    row = [f"{res[ref_name].ms:.1f}", *(fmt_ratio(res[n], 3) for n in names[1:]), f"{other:.2f}"]
    return [*names[1:]], {"row": " | ".join(row), "diffs": str(diffs)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--mode", choices=["fwd", "train"], default="fwd")
    ap.add_argument("--models", nargs="*", default=["resnet50", "tcn", "codec"])
    ap.add_argument("--batch", type=int, nargs="*", default=[1, 8])
    ap.add_argument("--layouts", nargs="*", default=["nchw", "cl"])
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--length", type=int, default=4096, help="TCN sequence length")
    ap.add_argument("--audio", type=int, default=16384, help="codec input length (samples)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(env_header(args.threads))
    native.enable()
    print(f"- oneDNN backend: {native.info()['onednn']}; mode: {args.mode}\n")
    native.disable()
    for model in args.models:
        models = {"resnet50": resnets, "tcn": tcns, "codec": codecs}[model]()
        ref = next(iter(models))
        rows, header = [], None
        for cl in [lay == "cl" for lay in args.layouts]:
            if cl and model != "resnet50":
                continue
            for n in args.batch:
                gen = torch.Generator().manual_seed(0)
                if model == "tcn":
                    x = torch.randn(n, 64, args.length, generator=gen)
                    exact = ("tcn F.pad", "")
                elif model == "codec":
                    x = torch.randn(n, 1, args.audio, generator=gen)
                    exact = ("codec F.pad", "")
                else:
                    x = torch.randn(n, 3, 224, 224, generator=gen)
                    exact = ("tf-resnet50 timm", "")
                    if cl:
                        x = x.contiguous(memory_format=torch.channels_last)
                        for m in models.values():
                            m.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
                names, cell = run(models, x, exact, args.mode, args.rounds)
                header = ["layout", "N", f"{ref} ms", *names, "other-CPU"]
                layout = "1-D" if model != "resnet50" else ("CL" if cl else "NCHW")
                rows.append([layout, str(n), cell["row"]])
                print(
                    layout,
                    n,
                    cell["row"],
                    "max |diff| vs",
                    exact[0],
                    cell["diffs"],
                    file=sys.stderr,
                )
                print(f"<!-- {layout} N={n} max |diff| vs {exact[0]}: {cell['diffs']} -->")
        assert header is not None
        print(f"\n**{model}**, mode {args.mode}\n")
        print(markdown_table(header, [[r[0], r[1], *r[2].split(" | ")] for r in rows]))
        print()


if __name__ == "__main__":
    main()
