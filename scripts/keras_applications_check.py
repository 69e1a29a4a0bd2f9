"""tf2onnx exports of Keras applications through padkit.onnx.load and padkit verify.

For each model (random weights, seed 0; feature maps, no classifier; inputs uniform in
[-128, 128)) and opset: export with tf2onnx, then print the
largest |padkit - TensorFlow| and |onnxruntime - TensorFlow| next to the output's scale,
and what ``padkit.onnx.verify.verify(..., float64=True)`` reports (its difference to
onnxruntime, padkit's own float32 rounding, and the verdict under the default,
scale-relative tolerance and under the element-wise one).

    python scripts/keras_applications_check.py                # every model, opsets 13 and 17
    python scripts/keras_applications_check.py ResNet50 --opset 17
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's padkit

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import onnxruntime as ort
import torch

import padkit.onnx
from padkit.onnx.verify import verify

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import keras
    import tensorflow as tf
    import tf2onnx

A = keras.applications
MODELS: dict[str, tuple[Callable[[], Any], tuple[int, ...]]] = {
    "MobileNetV2": (lambda: A.MobileNetV2(weights=None, include_top=False), (1, 224, 224, 3)),
    "MobileNetV3Small": (
        lambda: A.MobileNetV3Small(weights=None, include_top=False),
        (1, 224, 224, 3),
    ),
    "EfficientNetB0": (
        lambda: A.EfficientNetB0(weights=None, include_top=False),
        (1, 224, 224, 3),
    ),
    "ResNet50": (lambda: A.ResNet50(weights=None, include_top=False), (1, 224, 224, 3)),
    "InceptionV3": (lambda: A.InceptionV3(weights=None, include_top=False), (1, 299, 299, 3)),
    "Xception": (lambda: A.Xception(weights=None, include_top=False), (1, 299, 299, 3)),
    "DenseNet121": (lambda: A.DenseNet121(weights=None, include_top=False), (1, 224, 224, 3)),
}


def check(name: str, opset: int) -> str:
    build, shape = MODELS[name]
    keras.utils.set_random_seed(0)
    model = build()
    spec = (tf.TensorSpec(shape, tf.float32, name="x"),)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        proto, _ = tf2onnx.convert.from_keras(model, input_signature=spec, opset=opset)
    # pixel-range inputs, as the models' own preprocessing leaves them (ResNet50's is -124..152)
    x = np.random.default_rng(0).uniform(-128.0, 128.0, shape).astype(np.float32)
    want = np.asarray(model(x, training=False))
    t0 = time.perf_counter()
    module = padkit.onnx.load(proto)
    with torch.no_grad():
        out = module(torch.from_numpy(x))
    got = (out[0] if isinstance(out, (tuple, list)) else out).numpy()
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    theirs = session.run(None, {proto.graph.input[0].name: x})[0]
    report = verify(proto, [x], float64=True)
    strict = verify(proto, [x], tolerance="elementwise")
    (o,) = report.outputs[:1]
    return (
        f"| {name} | {opset} | {np.abs(want).max():.3g} | {np.abs(got - want).max():.2e} | "
        f"{np.abs(theirs - want).max():.2e} | {o.max_abs_diff:.2e} | {o.tolerance:.2e} | "
        f"{o.rounding:.2e} | {o.float64_diff:.2e} | {'PASS' if report.passed else 'FAIL'} | "
        f"{'PASS' if strict.passed else 'FAIL'} | {time.perf_counter() - t0:.0f} s |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", help=f"default: all of {', '.join(MODELS)}")
    parser.add_argument("--opset", type=int, action="append", help="default: 13 and 17")
    args = parser.parse_args()
    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {', '.join(MODELS)}")
    print(
        "| model | opset | max abs(TF) | padkit vs TF | ORT vs TF | verify diff | tolerance "
        "| padkit f32 rounding | f64 vs ORT | verify | element-wise | time |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.models or list(MODELS):
        for opset in args.opset or [13, 17]:
            print(check(name, opset), flush=True)


if __name__ == "__main__":
    main()
