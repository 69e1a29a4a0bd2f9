"""padkit.onnx.load against onnxruntime on real exporter output: a matrix of 27 configs.

Nine vision models (torchvision and timm, classification and segmentation, seeded random
weights, BatchNorm statistics measured on random batches) are each exported three ways with
``torch.onnx.export``: the TorchScript exporter (``dynamo=False``) at opsets 13 and 17, and
the dynamo exporter (``dynamo=True``) at opset 20.
Every export has a dynamic batch, height and width; it is traced on a 2x3x64x64 example and
run on a 3x3x96x80 input, once by onnxruntime and once by the module ``padkit.onnx.load``
returns. A config passes when every output matches to float tolerance
(``rtol=1e-4, atol=1e-4 * max|ref|``).

    python scripts/onnx_exporter_matrix.py                     # all 27 configs
    python scripts/onnx_exporter_matrix.py --model squeezenet1_0 --exporter torchscript-13

The table gives, per config: the model, exporter, opset, max|padkit - onnxruntime|,
max|onnxruntime|, the verdict and the seconds it took (export, both runs and the load).
A config the exporter itself cannot produce is reported as ``export-error`` with torch's
reason, apart from padkit's own failures (``load-error``, ``run-error``, ``mismatch``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

EXAMPLE_SHAPE = (2, 3, 64, 64)  # what the exporter traces
RUN_SHAPE = (3, 3, 96, 80)  # what both runtimes are fed: another batch, height and width
RTOL = 1e-4
# Float32 noise grows with depth and output scale: on tf_efficientnet_b0 (outputs up to ~280)
# torch's own float32 run is 5.6e-5 * max|out| from its float64 run, onnxruntime 3.5e-5 and
# padkit 4.8e-5; so the absolute tolerance is 1e-4 of the largest output.
ATOL_SCALE = 1e-4

MODELS = [
    "resnet18",
    "mobilenet_v3_small",
    "efficientnet_b0",
    "convnext_tiny",
    "regnet_y_400mf",
    "shufflenet_v2_x0_5",
    "squeezenet1_0",
    "deeplabv3_mobilenet_v3_large",
    "timm/tf_efficientnet_b0",
]
EXPORTERS = {  # name: (dynamo, opset)
    "torchscript-13": (False, 13),
    "torchscript-17": (False, 17),
    "dynamo-20": (True, 20),
}
CONFIGS = [(m, e) for m in MODELS for e in EXPORTERS]


@dataclass
class Result:
    model: str
    exporter: str
    opset: int
    diff: float
    ref: float
    verdict: str  # "pass", "mismatch", "export-error", "load-error", "run-error"
    seconds: float
    detail: str = ""


def calibrate_batchnorm(model: Any) -> Any:
    """Sets every BatchNorm's running statistics from random batches, then eval mode.

    With freshly initialised statistics (mean 0, variance 1) the activations of some
    random-weight models fade to 1e-14 by the classifier; statistics measured on data keep
    them of order one, so the comparison sees outputs that every layer shaped.
    """
    import torch

    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the calibration batches
    model.train()
    with torch.no_grad():
        for _ in range(2):
            model(torch.rand(4, *EXAMPLE_SHAPE[1:]))
    return model.eval()


def build_model(name: str) -> Any:
    """The model ``name`` with seeded random weights and calibrated BatchNorm, in eval mode."""
    import torch

    torch.manual_seed(0)
    return calibrate_batchnorm(_random_model(name))


def _random_model(name: str) -> Any:
    import torch

    if name.startswith("timm/"):
        import timm

        return timm.create_model(name.split("/", 1)[1], pretrained=False)
    import torchvision

    if name.startswith("deeplabv3") or name.startswith("fcn") or name.startswith("lraspp"):
        seg = torchvision.models.segmentation.__dict__[name](
            weights=None, weights_backbone=None, aux_loss=False
        )

        class Out(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.seg = seg

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return self.seg(x)["out"]

        return Out()
    return torchvision.models.__dict__[name](weights=None)


def export(model: Any, path: str, opset: int, dynamo: bool) -> None:
    """Exports ``model`` to ``path`` with a dynamic batch, height and width."""
    import torch

    x = torch.rand(*EXAMPLE_SHAPE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            # Dim.DYNAMIC: named Dims with ranges make torch.export try to prove the range
            # for every pooling's ceil arithmetic, which it cannot do for ceil_mode pools.
            dyn = torch.export.Dim.DYNAMIC
            dims = {0: dyn, 2: dyn, 3: dyn}
            torch.onnx.export(
                model,
                (x,),
                path,
                opset_version=opset,
                dynamo=True,
                verbose=False,
                input_names=["x"],
                dynamic_shapes=(dims,),
            )
        else:
            torch.onnx.export(
                model,
                (x,),
                path,
                opset_version=opset,
                dynamo=False,
                input_names=["x"],
                dynamic_axes={"x": {0: "batch", 2: "height", 3: "width"}},
            )


def run_ort(path: str, x: np.ndarray) -> list[np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    return [np.asarray(v) for v in sess.run(None, {name: x})]


def _short(exc: BaseException) -> str:
    """The innermost cause of ``exc``, on one line."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text[:300]


def run_config(model_name: str, exporter: str, workdir: str) -> Result:
    """Exports, loads and compares one config; never raises."""
    import torch

    from padkit.onnx import load

    dynamo, opset = EXPORTERS[exporter]
    start = time.perf_counter()

    def result(
        verdict: str, diff: float = float("nan"), ref: float = float("nan"), detail: str = ""
    ) -> Result:
        return Result(
            model_name, exporter, opset, diff, ref, verdict, time.perf_counter() - start, detail
        )

    path = os.path.join(workdir, f"{model_name.replace('/', '_')}-{exporter}.onnx")
    try:
        export(build_model(model_name), path, opset, dynamo)
    except Exception as exc:  # the exporter itself failed
        return result("export-error", detail=_short(exc))
    x = np.random.default_rng(1).random(RUN_SHAPE, dtype=np.float32)
    try:
        want = run_ort(path, x)
    except Exception as exc:
        return result("export-error", detail="onnxruntime: " + _short(exc))
    try:
        module = load(path)
    except Exception as exc:
        return result("load-error", detail=_short(exc))
    try:
        with torch.no_grad():
            out = module(torch.from_numpy(x))
        got = [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]
    except Exception as exc:
        return result("run-error", detail=_short(exc) + "\n" + traceback.format_exc(limit=-3))
    diff, ref, ok, detail = 0.0, 0.0, len(got) == len(want), ""
    if not ok:
        detail = f"{len(got)} outputs, onnxruntime gives {len(want)}"
    for g, w in zip(got, want):
        ref = max(ref, float(np.abs(w).max()))
        if g.shape != w.shape:
            ok, detail = False, f"shape {g.shape}, onnxruntime gives {w.shape}"
            continue
        diff = max(diff, float(np.abs(g.astype(np.float64) - w).max()))
        if not np.allclose(g, w, rtol=RTOL, atol=ATOL_SCALE * float(np.abs(w).max())):
            ok = False
    return result("pass" if ok else "mismatch", diff, ref, detail)


def format_table(results: list[Result]) -> str:
    head = (
        f"| {'model':<30} | {'exporter':<14} | opset | max abs diff | max abs ref"
        " | result       | s     |"
    )
    rule = "|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|"
    rows = [head, rule]
    for r in results:
        rows.append(
            f"| {r.model:<30} | {r.exporter:<14} | {r.opset:>5} | {r.diff:>12.3g} |"
            f" {r.ref:>11.3g} | {r.verdict:<12} | {r.seconds:>5.1f} |"
        )
    return "\n".join(rows)


def run_matrix(
    configs: list[tuple[str, str]], progress: Callable[[Result], None] | None = None
) -> list[Result]:
    results = []
    with tempfile.TemporaryDirectory() as workdir:
        for model_name, exporter in configs:
            res = run_config(model_name, exporter, workdir)
            results.append(res)
            if progress is not None:
                progress(res)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", choices=MODELS, help="only these models")
    parser.add_argument(
        "--exporter", action="append", choices=list(EXPORTERS), help="only these exporters"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    configs = [
        (m, e)
        for m, e in CONFIGS
        if (args.model is None or m in args.model) and (args.exporter is None or e in args.exporter)
    ]

    def progress(r: Result) -> None:
        line = f"{r.model} {r.exporter}: {r.verdict} diff={r.diff:.3g} ref={r.ref:.3g}"
        line += f" {r.seconds:.1f}s"
        print(line + (f"  [{r.detail}]" if r.detail else ""), file=sys.stderr, flush=True)

    results = run_matrix(configs, progress)
    print(
        "command: python " + " ".join(["scripts/onnx_exporter_matrix.py", *(argv or sys.argv[1:])])
    )
    print(f"traced on {EXAMPLE_SHAPE}, run on {RUN_SHAPE}; rtol={RTOL}, atol={ATOL_SCALE}*max|ref|")
    print(format_table(results))
    passed = sum(r.verdict == "pass" for r in results)
    print(f"{passed} of {len(results)} configs match onnxruntime")
    for r in results:
        if r.verdict != "pass":
            print(f"- {r.model} {r.exporter}: {r.verdict}: {r.detail}")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
