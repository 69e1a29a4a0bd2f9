"""Build padkit's bundled example model, ``padkit/examples/googlenet_mini.onnx``.

A small GoogLeNet-style graph with the padding that Caffe-origin ONNX models carry:

- a 7x7/2 conv stem with symmetric pads, ReLU, and LRN;
- ``pool1``: MaxPool 3x3/2 with the asymmetric pads ``[0, 0, 1, 1]`` that Caffe converters
  write for Caffe's ceil rounding (28 -> 14);
- a 1x1 and a 3x3 conv, LRN, then ``pool2``: MaxPool 3x3/2 with ``ceil_mode=1`` (14 -> 7,
  where floor rounding would give 6);
- one inception block (1x1, 1x1->3x3, 1x1->5x5, and 3x3/1 max pool->1x1 branches) joined
  by Concat;
- ``pool3``: MaxPool 3x3/2 with pads ``[0, 0, 1, 1]`` again (7 -> 3);
- AveragePool 3x3, Flatten, Gemm and Softmax.

Weights are random (He-scaled normals from ``numpy.random.default_rng(0)``), so the file is
reproducible byte for byte. Input ``data`` is 1x3x56x56; outputs are ``prob`` (1x10) and
``inception`` (the concatenated block, 1x28x7x7), so that a padding error inside the
network is not hidden by the softmax.

Run from the repository root::

    python scripts/make_example_model.py            # writes padkit/examples/googlenet_mini.onnx
    python scripts/make_example_model.py --check    # exits 1 if the shipped file differs
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = Path(__file__).resolve().parent.parent / "padkit" / "examples" / "googlenet_mini.onnx"
OPSET = 13
INPUT_SHAPE = (1, 3, 56, 56)


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[Any] = []
        self.inits: list[Any] = []

    def weight(self, name: str, shape: tuple[int, ...], fan_in: int) -> str:
        std = np.sqrt(2.0 / fan_in)
        w = (self.rng.standard_normal(shape) * std).astype(np.float32)
        self.inits.append(numpy_helper.from_array(w, name))
        return name

    def bias(self, name: str, n: int) -> str:
        b = (self.rng.standard_normal(n) * 0.05).astype(np.float32)
        self.inits.append(numpy_helper.from_array(b, name))
        return name

    def conv_relu(
        self, name: str, x: str, cin: int, cout: int, k: int, *, stride: int = 1, pad: int = 0
    ) -> str:
        w = self.weight(f"{name}_w", (cout, cin, k, k), cin * k * k)
        b = self.bias(f"{name}_b", cout)
        self.nodes.append(
            helper.make_node(
                "Conv",
                [x, w, b],
                [f"{name}_conv"],
                name=name,
                kernel_shape=[k, k],
                strides=[stride, stride],
                pads=[pad] * 4,
            )
        )
        self.nodes.append(helper.make_node("Relu", [f"{name}_conv"], [name], name=f"{name}_relu"))
        return name

    def node(self, op: str, inputs: list[str], name: str, **attrs: Any) -> str:
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name


def build_model() -> onnx.ModelProto:
    """The example model (deterministic)."""
    b = _Builder(seed=0)
    x = b.conv_relu("conv1", "data", 3, 16, 7, stride=2, pad=3)  # 56 -> 28
    x = b.node("MaxPool", [x], "pool1", kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1])
    x = b.node("LRN", [x], "norm1", size=5, alpha=1e-4, beta=0.75, bias=1.0)
    x = b.conv_relu("conv2", x, 16, 16, 1)
    x = b.conv_relu("conv3", x, 16, 32, 3, pad=1)
    x = b.node("LRN", [x], "norm2", size=5, alpha=1e-4, beta=0.75, bias=1.0)
    x = b.node("MaxPool", [x], "pool2", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)  # 14->7
    # inception block
    b1 = b.conv_relu("inc_1x1", x, 32, 8, 1)
    b2 = b.conv_relu("inc_3x3_reduce", x, 32, 8, 1)
    b2 = b.conv_relu("inc_3x3", b2, 8, 12, 3, pad=1)
    b3 = b.conv_relu("inc_5x5_reduce", x, 32, 4, 1)
    b3 = b.conv_relu("inc_5x5", b3, 4, 4, 5, pad=2)
    b4 = b.node("MaxPool", [x], "inc_pool", kernel_shape=[3, 3], strides=[1, 1], pads=[1] * 4)
    b4 = b.conv_relu("inc_pool_proj", b4, 32, 4, 1)
    x = b.node("Concat", [b1, b2, b3, b4], "inception", axis=1)  # 28 channels, 7x7
    y = b.node("MaxPool", [x], "pool3", kernel_shape=[3, 3], strides=[2, 2], pads=[0, 0, 1, 1])
    y = b.node("AveragePool", [y], "pool4", kernel_shape=[3, 3], strides=[1, 1])  # 3 -> 1
    y = b.node("Flatten", [y], "flatten", axis=1)
    w = b.weight("fc_w", (10, 28), 28)
    bias = b.bias("fc_b", 10)
    y = b.node("Gemm", [y, w, bias], "fc", transB=1)
    b.node("Softmax", [y], "prob", axis=1)
    graph = helper.make_graph(
        b.nodes,
        "googlenet_mini",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, list(INPUT_SHAPE))],
        [
            helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 10]),
            helper.make_tensor_value_info("inception", TensorProto.FLOAT, [1, 28, 7, 7]),
        ],
        initializer=b.inits,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="padkit scripts/make_example_model.py",
        doc_string="GoogLeNet-style example with Caffe-style pools (random weights, seed 0)",
    )
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    return model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the shipped file")
    parser.add_argument("--out", type=Path, default=OUT, help=f"output path (default {OUT})")
    args = parser.parse_args(argv)
    data = build_model().SerializeToString()
    if args.check:
        same = args.out.exists() and args.out.read_bytes() == data
        print(f"{args.out}: {'up to date' if same else 'DIFFERS'}")
        return 0 if same else 1
    args.out.write_bytes(data)
    print(f"wrote {args.out} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
