"""ONNX export benchmark: tf_efficientnet_b0 through padkit, dynamic H and W, onnxruntime.

Graphs (same random initialisation, no pretrained weights needed for timing), all
exported with plain ``torch.onnx.export`` and dynamic batch, height and width:

* ``effb0``: timm ``efficientnet_b0`` (symmetric padding): the reference;
* ``tf_effb0 padkit``: timm ``tf_efficientnet_b0`` after ``padkit.surgery.convert``;
* ``tf_effb0``: timm's ``tf_efficientnet_b0`` as is (``Conv2dSame``: ``F.pad`` with pads
  computed from the input size). Exported with TorchScript only unless
  ``--original-dynamo`` (the dynamo export of its dynamic pads takes minutes).

Each graph is checked against PyTorch eager at every timed size, then timed in
onnxruntime (CPU EP, ``intra_op_num_threads`` 1 by default, ORT_ENABLE_ALL) with the
interleaved paired timing of ``bench/common.py``: cells are medians of per-round ratios
against ``effb0`` (same exporter) with ``[min-max]``. Run ``python bench/onnx_export.py
--help``.
"""

from __future__ import annotations

import argparse
import copy
import io
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import env_header, fmt_ratio, markdown_table, measure_case


def build_models() -> dict[str, nn.Module]:
    import timm

    from padkit.surgery import convert

    torch.manual_seed(0)
    effb0 = timm.create_model("efficientnet_b0", pretrained=False).eval()
    torch.manual_seed(0)
    tf = timm.create_model("tf_efficientnet_b0", pretrained=False).eval()
    converted, _ = convert(copy.deepcopy(tf))
    return {"effb0": effb0, "tf_effb0 padkit": converted.eval(), "tf_effb0": tf}


def export(model: nn.Module, x: torch.Tensor, dynamo: bool) -> tuple[Any, float]:
    import warnings

    import onnx

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            dim = torch.export.Dim.DYNAMIC
            prog = torch.onnx.export(
                model,
                (x,),
                dynamo=True,
                verbose=False,
                input_names=["x"],
                dynamic_shapes=({0: dim, 2: dim, 3: dim},),
            )
            proto = prog.model_proto
        else:
            buf = io.BytesIO()
            torch.onnx.export(
                model,
                (x,),
                buf,
                dynamo=False,
                input_names=["x"],
                dynamic_axes={"x": {0: "n", 2: "h", 3: "w"}},
            )
            proto = onnx.load_from_string(buf.getvalue())
    return proto, time.perf_counter() - t0


def node_counts(proto: Any) -> dict[str, Any]:
    types = Counter(n.op_type for n in proto.graph.node)
    auto = sum(
        1
        for n in proto.graph.node
        for a in n.attribute
        if a.name == "auto_pad" and a.s.decode() not in ("NOTSET", "")
    )
    return {
        "nodes": sum(types.values()),
        "Pad": types["Pad"],
        "Shape": types["Shape"],
        "Slice": types["Slice"],
        "auto_pad": auto,
    }


def session(proto: Any, threads: int) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[224, 256])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--exporters", nargs="+", default=["dynamo", "torchscript"])
    ap.add_argument("--original-dynamo", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    print(env_header(args.threads))
    models = build_models()
    x0 = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(0))

    graphs: dict[str, Any] = {}
    rows = []
    for exporter in args.exporters:
        dynamo = exporter == "dynamo"
        for name, model in models.items():
            if name == "tf_effb0" and dynamo and not args.original_dynamo:
                continue
            proto, secs = export(model, x0, dynamo)
            key = f"{name} [{exporter}]"
            graphs[key] = (proto, model)
            rows.append([key, f"{secs:.1f}", *node_counts(proto).values()])
    print("\n### Exported graphs (dynamic N, H, W)\n")
    print(markdown_table(["graph", "export s", "nodes", "Pad", "Shape", "Slice", "auto_pad"], rows))

    sessions = {key: session(proto, args.threads) for key, (proto, _) in graphs.items()}
    errors = []
    table = []
    for size in args.sizes:
        for n in args.batches:
            x = torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(size + n))
            xn = x.numpy()
            for key, (_, model) in graphs.items():
                with torch.inference_mode():
                    ref = model(x).numpy()
                got = sessions[key].run(None, {"x": xn})[0]
                diff, scale = float(np.abs(got - ref).max()), float(np.abs(ref).max())
                errors.append([key, f"{n}x{size}", f"{diff:.2e}", f"{scale:.2e}"])
            for exporter in args.exporters:
                keys = [k for k in graphs if k.endswith(f"[{exporter}]")]
                ref_key = f"effb0 [{exporter}]"
                fns = {k: (lambda s=sessions[k], a=xn: s.run(None, {"x": a})) for k in keys}
                res, other, _ = measure_case(fns, ref_key, rounds=args.rounds, block_s=0.05)
                for k in keys:
                    table.append(
                        [
                            k,
                            f"N={n}, {size}x{size}",
                            f"{res[k].ms:.2f}",
                            fmt_ratio(res[k]),
                            f"{other:.0%}",
                        ]
                    )
    print("\n### Max |ORT - PyTorch eager|\n")
    print(markdown_table(["graph", "input", "max abs diff", "max |eager|"], errors))
    print(f"\n### onnxruntime CPU EP, {args.threads} thread(s): ms and ratio vs effb0\n")
    print(markdown_table(["graph", "input", "ms", "ratio [min-max]", "other CPU load"], table))


if __name__ == "__main__":
    main()
