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
