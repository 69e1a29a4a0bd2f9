"""ONNX import benchmark: ``padkit.onnx.load`` against onnxruntime, the torch model the file
came from and onnx2torch, on the same files.

Files (random weights, random BatchNorm statistics; nothing is downloaded):

* ``tv:NAME``: a torchvision model (resnet50, mobilenet_v3_small, efficientnet_b0,
  googlenet, ...) exported by ``torch.onnx.export`` (TorchScript exporter, opset 17,
  dynamic batch); the original module is timed too (``torch``);
* ``keras:NAME``: a Keras application (ResNet50, MobileNetV2, EfficientNetB0,
  DenseNet121, InceptionV3, ...) exported by tf2onnx (opset 17, NHWC input), in a child
  process so that TensorFlow never loads beside the timed runtimes.

Variants, each checked against onnxruntime on the timed input before it is timed:

* ``ort``: onnxruntime, CPU EP, ``ORT_ENABLE_ALL``, ``intra_op_num_threads`` = threads:
  the reference of every ratio;
* ``torch``: the original torchvision module (eval, ``inference_mode``);
* ``eager``: ``padkit.onnx.load(file)`` (the default import);
* ``route``: ``padkit.onnx.load(file, optimize="inference")``;
* ``compiled``: ``torch.compile`` of the route module (inductor with freezing), with
  ``--compile`` only (compiling takes 1-2 minutes a model on 2 cores);
* ``onnx2torch``: ``onnx2torch.convert(file)``, where the package is installed; a file it
  cannot convert is reported with its error.

Timing: interleaved paired rounds (``bench/common.py`` ``measure_case``): cells are the
median of the per-round ratios against ``ort`` with their ``[min-max]``.
Run ``python bench/onnx_import.py --help``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import env_header, fmt_ratio, markdown_table, measure_case, randomize_bn

DEFAULT_FILES = [
    "tv:resnet50",
    "tv:mobilenet_v3_small",
    "tv:efficientnet_b0",
    "tv:googlenet",
    "keras:ResNet50",
    "keras:MobileNetV2",
    "keras:EfficientNetB0",
    "keras:DenseNet121",
    "keras:InceptionV3",
]
VARIANTS = ("torch", "eager", "route", "compiled", "onnx2torch")


def torchvision_file(name: str, cache: Path) -> tuple[Path, torch.nn.Module]:
    """The export of torchvision's ``name`` (random weights) and the module itself."""
    import torchvision

    torch.manual_seed(0)
    kwargs: dict[str, Any] = {"aux_logits": False, "init_weights": True}
    model = getattr(torchvision.models, name)(
        weights=None, **(kwargs if name in ("googlenet", "inception_v3") else {})
    )
    model = randomize_bn(model.eval())
    path = cache / f"tv_{name}.onnx"
    if not path.exists():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                model,
                (torch.randn(1, 3, 224, 224),),
                str(path),
                dynamo=False,
                opset_version=17,
                input_names=["input"],
                dynamic_axes={"input": {0: "batch"}},
            )
    return path, model


_KERAS_EXPORT = textwrap.dedent(
    """
    import sys
    import tensorflow as tf, tf2onnx
    name, path = sys.argv[1], sys.argv[2]
    size = 299 if name in ("InceptionV3", "Xception", "InceptionResNetV2") else 224
    tf.keras.utils.set_random_seed(0)
    model = getattr(tf.keras.applications, name)(weights=None, input_shape=(size, size, 3))
    for layer in model.layers:  # random BatchNorm statistics: each norm does more than x
        if isinstance(layer, tf.keras.layers.BatchNormalization):
            c = layer.moving_mean.shape[0]
            layer.moving_mean.assign(tf.random.normal([c]) * 0.2)
            layer.moving_variance.assign(tf.random.uniform([c]) + 0.5)
    spec = (tf.TensorSpec((None, size, size, 3), tf.float32, name="input"),)
    tf2onnx.convert.from_keras(model, input_signature=spec, opset=17, output_path=path)
    """
)


def keras_file(name: str, cache: Path) -> Path:
    """tf2onnx's export of the Keras application ``name`` (random weights), made in a child
    process."""
    path = cache / f"keras_{name.lower()}.onnx"
    if not path.exists():
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
        subprocess.run(
            [sys.executable, "-c", _KERAS_EXPORT, name, str(path)],
            check=True,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    return path


def ort_session(path: Path, threads: int) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def input_for(session: Any, batch: int) -> np.ndarray:
    shape = [d if isinstance(d, int) else batch for d in session.get_inputs()[0].shape]
    return np.random.default_rng(0).random(shape, dtype=np.float32)


def build_variants(
    path: Path, original: torch.nn.Module | None, wanted: list[str], errors: dict[str, str]
) -> dict[str, torch.nn.Module]:
    """The torch-side modules of one file; a variant that fails to build lands in errors."""
    import padkit.onnx

    out: dict[str, torch.nn.Module] = {}
    if "torch" in wanted and original is not None:
        out["torch"] = original
    if "eager" in wanted:
        out["eager"] = padkit.onnx.load(path)
    if "route" in wanted or "compiled" in wanted:
        route = padkit.onnx.load(path, optimize="inference")
        if "route" in wanted:
            out["route"] = route
        if "compiled" in wanted:
            import torch._inductor.config as inductor

            inductor.freezing = True
            out["compiled"] = torch.compile(route)
    if "onnx2torch" in wanted:
        try:
            import onnx2torch

            out["onnx2torch"] = onnx2torch.convert(str(path)).eval()
        except ImportError:
            errors["onnx2torch"] = "not installed"
        except Exception as err:  # onnx2torch refuses some files: report it
            errors["onnx2torch"] = f"{type(err).__name__}: {str(err).splitlines()[0][:120]}"
    return out


def run_file(spec: str, args: argparse.Namespace, cache: Path) -> tuple[list[list[str]], list[str]]:
    kind, _, name = spec.partition(":")
    original = None
    if kind == "tv":
        path, original = torchvision_file(name, cache)
    elif kind == "keras":
        path = keras_file(name, cache)
    else:
        raise SystemExit(f"--files: {spec!r} is neither tv:NAME nor keras:NAME")
    session = ort_session(path, args.threads)
    in_name = session.get_inputs()[0].name
    errors: dict[str, str] = {}
    modules = build_variants(path, original, args.variants, errors)
    rows, notes = [], []
    for batch in args.batch:
        x = input_for(session, batch)
        xt = torch.from_numpy(x)
        want = session.run(None, {in_name: x})[0]
        scale = float(np.abs(want).max()) or 1.0
        fns: dict[str, Callable[[], object]] = {"ort": lambda x=x: session.run(None, {in_name: x})}
        diffs = {}
        for v, module in modules.items():
            with torch.inference_mode():
                got = module(xt)
            got = got[0] if isinstance(got, (tuple, list)) else got
            diffs[v] = float(np.abs(got.float().numpy() - want).max()) / scale
            fns[v] = lambda m=module, xt=xt: m(xt)
        res, other, _ = measure_case(fns, "ort", rounds=args.rounds, block_s=args.block_s)
        cells = [fmt_ratio(res.get(v)) if v in res else errors.get(v, "") for v in args.variants]
        rows.append([spec, str(batch), f"{res['ort'].ms:.1f}", *cells, f"{other:.0%}"])
        notes.append(
            f"{spec} batch {batch}: max |diff| / max |ort| "
            + ", ".join(f"{v} {d:.1e}" for v, d in diffs.items())
        )
    return rows, notes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--files", nargs="+", default=DEFAULT_FILES, help="tv:NAME or keras:NAME (default: all)"
    )
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--block-s", type=float, default=0.3, help="seconds per timed block")
    parser.add_argument(
        "--variants",
        nargs="+",
        default=["torch", "eager", "route", "onnx2torch"],
        choices=VARIANTS,
    )
    parser.add_argument("--compile", action="store_true", help="add the compiled variant")
    parser.add_argument(
        "--cache", default="/tmp/padkit_bench_onnx", help="folder for the exported files"
    )
    args = parser.parse_args()
    if args.compile and "compiled" not in args.variants:
        args.variants.append("compiled")
    torch.set_num_threads(args.threads)
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    print(env_header(args.threads), flush=True)
    print(f"- onnxruntime {__import__('onnxruntime').__version__}\n", flush=True)
    rows, notes = [], []
    for spec in args.files:
        r, n = run_file(spec, args, cache)
        rows += r
        notes += n
        print("\n".join(" | ".join(row) for row in r), flush=True)
    header = ["file", "batch", "ort ms", *[f"{v}/ort" for v in args.variants], "other CPU"]
    print()
    print(markdown_table(header, rows))
    print()
    print("\n".join(f"- {n}" for n in notes))


if __name__ == "__main__":
    main()
