"""Hugging Face TF-'same' models converted by ``padkit.surgery.convert``, timed against HF's own.

HF computes TF 'same' padding in code: ``MobileNetV2Model(tf_padding=True)`` calls
``apply_tf_padding`` (an ``F.pad`` copy) before every conv, ``BitModel(global_padding="SAME")``
pads with ``DynamicPad2d`` before its strided weight-standardised convs. ``convert`` folds
those pads into padkit convs with ``padding="same"`` (docs/surgery.md, "Pads written in
code"). Both models are built from their default configs with seeded random weights and
random BatchNorm statistics (no downloads), in eval mode; the converted copy holds the same
weights. Outputs are checked equal first; then whole-model forwards at 1x3x224x224 are
timed in interleaved paired rounds (``bench/common.py``), HF's model the reference.

Run ``python bench/hf_convert.py [--rounds N]`` (about a minute on 2 shared cores).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import env_header, fmt_ratio, markdown_table, max_abs_diff, measure_case, randomize_bn

from padkit.surgery import convert


def models() -> dict[str, nn.Module]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import transformers
    torch.manual_seed(0)
    return {
        "MobileNetV2Model(tf_padding=True)": randomize_bn(
            transformers.MobileNetV2Model(transformers.MobileNetV2Config(tf_padding=True)),
            affine=False,
        ),
        'BitModel(global_padding="SAME")': randomize_bn(
            transformers.BitModel(transformers.BitConfig(global_padding="SAME")),
            affine=False,
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=9, help="paired rounds (default: 9)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(env_header(args.threads))
    rows = []
    for name, model in models().items():
        new, report = convert(model)
        x = torch.randn(1, 3, 224, 224)
        with torch.no_grad():
            ref, out = model(x).last_hidden_state, new(x).last_hidden_state
        diff = max_abs_diff(out, ref) / float(ref.abs().max())
        fns = {"hf": lambda m=model, x=x: m(x), "padkit": lambda m=new, x=x: m(x)}
        timings, other, _ = measure_case(fns, "hf", rounds=args.rounds, block_s=0.2)
        rows.append(
            (
                name,
                len(report.changes),
                f"{diff:.1e}",
                f"{timings['hf'].ms:.1f}",
                f"{timings['padkit'].ms:.1f}",
                fmt_ratio(timings["padkit"]),
                f"{other:.0%}",
            )
        )
    header = ("model", "changes", "rel. diff", "HF ms", "padkit ms", "padkit / HF", "other CPU")
    print(markdown_table(header, rows))


if __name__ == "__main__":
    main()
