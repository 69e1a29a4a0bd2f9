"""tf2onnx's rendering of a dilated ("atrous") SAME convolution on inputs of unknown size:
Shape arithmetic, Pad, SpaceToDepth, Conv, DepthToSpace and Slice, imported by padkit and
compared with TensorFlow itself at several input sizes.

TensorFlow takes seconds to import, so it is imported once, by a module-scoped fixture, and
only when these (slow) tests run; tests/test_onnx_ops.py covers SpaceToDepth / DepthToSpace
against onnxruntime in the default run."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch

from padkit.onnx import load

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]


@pytest.fixture(scope="module")
def atrous() -> Iterator[tuple[Any, Any]]:
    """(TensorFlow function, its tf2onnx model) for a rate-2 atrous SAME conv."""
    import tensorflow as tf
    import tf2onnx

    weight = np.random.default_rng(0).standard_normal((3, 3, 3, 4)).astype(np.float32)
    spec = [tf.TensorSpec([None, None, None, 3], tf.float32)]

    @tf.function(input_signature=spec)
    def fn(x: Any) -> Any:
        return tf.nn.atrous_conv2d(x, tf.constant(weight), rate=2, padding="SAME")

    model, _ = tf2onnx.convert.from_function(fn, input_signature=spec, opset=17)
    yield fn, model


@pytest.mark.parametrize("shape", [(1, 13, 10, 3), (2, 8, 9, 3), (1, 5, 16, 3)])
def test_atrous_same_conv_matches_tensorflow(atrous: tuple[Any, Any], shape: Any) -> None:
    import tensorflow as tf

    fn, model = atrous
    ops = {n.op_type for n in model.graph.node}
    assert {"SpaceToDepth", "DepthToSpace", "Conv"} <= ops
    module = load(model)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    want = fn(tf.constant(x)).numpy()
    with torch.no_grad():
        got = module(torch.from_numpy(x)).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def mobilenet_v2() -> Iterator[tuple[Any, Any]]:
    """(Keras MobileNetV2 with random weights and BatchNorm statistics, its tf2onnx model)."""
    import tensorflow as tf
    import tf2onnx

    tf.keras.utils.set_random_seed(0)
    model = tf.keras.applications.MobileNetV2(weights=None, input_shape=(96, 96, 3), alpha=0.35)
    for layer in model.layers:
        if isinstance(layer, tf.keras.layers.BatchNormalization):
            c = layer.moving_mean.shape[0]
            layer.moving_mean.assign(tf.random.normal([c]) * 0.2)
            layer.moving_variance.assign(tf.random.uniform([c]) + 0.5)
    spec = (tf.TensorSpec((None, 96, 96, 3), tf.float32, name="input"),)
    proto, _ = tf2onnx.convert.from_keras(model, input_signature=spec, opset=17)
    yield model, proto


@pytest.mark.parametrize("fold", ["pads", "all"])
def test_keras_mobilenet_v2_loses_every_pad(mobilenet_v2: tuple[Any, Any], fold: str) -> None:
    from padkit.onnx._runtime import OnnxPad

    keras_model, proto = mobilenet_v2
    assert sum(n.op_type == "Pad" for n in proto.graph.node) == 4
    module = load(proto, fold=fold)
    assert not any(isinstance(m, OnnxPad) for m in module.modules())
    assert sum(f.kind == "Pad" and f.done for f in module.onnx_folds) == 4
    assert all(f.done for f in module.onnx_folds)
    x = np.random.default_rng(2).random((2, 96, 96, 3), dtype=np.float32)
    want = keras_model(x, training=False).numpy()
    unfolded = load(proto, fold="none")
    with torch.no_grad():
        got = module(torch.from_numpy(x)).numpy()
        plain = unfolded(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got, plain, rtol=1e-4, atol=1e-7)


def test_convert_folds_the_pads_of_an_unfolded_keras_import(
    mobilenet_v2: tuple[Any, Any],
) -> None:
    from padkit.onnx._runtime import OnnxPad
    from padkit.surgery import convert

    _, proto = mobilenet_v2
    module = load(proto, fold="none")
    new, report = convert(module)
    assert not any(isinstance(m, OnnxPad) for m in new.modules())
    assert sum(c.what == ("folded",) for c in report.changes) == 4
    assert not report.notes, report.notes
    x = torch.rand(1, 96, 96, 3)
    with torch.no_grad():
        torch.testing.assert_close(new(x), module(x), rtol=1e-5, atol=1e-7)
