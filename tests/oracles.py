"""Independent reference implementations for padkit's comparison tests.

Two oracles, neither of which shares code with padkit:

* JAX ``lax`` in float64: ``conv_general_dilated`` (explicit pairs or the strings
  ``"SAME"``/``"SAME_LOWER"``/``"VALID"``, resolved by JAX itself with the dilated kernel),
  ``reduce_window`` for max/sum pooling (average = sum / count, the count pooled from ones),
  and the transposed conv as the vector-Jacobian product of a forward conv (TF
  ``Conv2DTranspose`` semantics) or ``lax.conv_transpose(transpose_kernel=True)``.
* onnxruntime single-node models (Conv, ConvTranspose, MaxPool, AveragePool, LpPool, Pad),
  float32, one thread.

Arrays are numpy, channel-first (N, C, *spatial); weights are laid out as in torch.
"""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault(
    "XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
)

from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
import onnxruntime as ort
import torch
from jax import lax
from onnx import TensorProto, helper

jax.config.update("jax_enable_x64", True)
torch.set_num_threads(1)

Pairs = list[tuple[int, int]]
JaxPadding = str | Sequence[tuple[int, int]]

__all__ = [
    "jax_avg_pool",
    "jax_conv",
    "jax_conv_transpose_lax",
    "jax_conv_transpose_vjp",
    "jax_lp_pool",
    "jax_max_pool",
    "jax_pads",
    "ort_avg_pool",
    "ort_conv",
    "ort_conv_transpose",
    "ort_lp_pool",
    "ort_max_pool",
    "ort_pad",
    "rule_pads",
    "to_numpy",
]


def to_numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


# ----------------------------------------------------------------------------- pad rules


def jax_pads(rule: str, n: int, k: int, s: int = 1, d: int = 1) -> tuple[int, int]:
    """``lax.padtype_to_pads`` for one axis ('SAME', 'SAME_LOWER' or 'VALID'), dilated kernel."""
    k_eff = d * (k - 1) + 1
    ((lo, hi),) = lax.padtype_to_pads((n,), (k_eff,), (s,), rule.upper())
    return int(lo), int(hi)


def rule_pads(
    rule: str | tuple[int, int], n: int, k: int, s: int = 1, d: int = 1
) -> tuple[int, int]:
    """The (lo, hi) pair of one padkit per-axis rule, from the other frameworks' definitions.

    same / same_lower / valid come from JAX; the static rules follow Flax CIRCULAR (odd
    pixel at the end) and Flux ``SamePad`` (odd pixel at the start); causal is the Keras
    Conv1D rule; full is ``k_eff - 1`` on both sides.
    """
    if isinstance(rule, tuple):
        return rule
    k_eff = d * (k - 1) + 1
    table: dict[str, Callable[[], tuple[int, int]]] = {
        "same": lambda: jax_pads("SAME", n, k, s, d),
        "same_lower": lambda: jax_pads("SAME_LOWER", n, k, s, d),
        "valid": lambda: (0, 0),
        "same_static": lambda: ((k_eff - 1) // 2, k_eff // 2),
        "same_static_lower": lambda: (k_eff // 2, (k_eff - 1) // 2),
        "causal": lambda: (k_eff - 1, 0),
        "full": lambda: (k_eff - 1, k_eff - 1),
    }
    return table[rule.lower()]()


# ----------------------------------------------------------------------------- JAX


def _spatial_dims(nd: int) -> tuple[str, str, str]:
    sp = "DHW"[-nd:]
    return "NC" + sp, "OI" + sp, "NC" + sp


def jax_conv(
    x: np.ndarray,
    w: np.ndarray,
    stride: Sequence[int],
    padding: JaxPadding,
    dilation: Sequence[int],
    groups: int = 1,
) -> np.ndarray:
    """Cross-correlation with lax; ``padding`` is a string or one (lo, hi) pair per axis."""
    nd = x.ndim - 2
    out = lax.conv_general_dilated(
        x,
        w,
        window_strides=tuple(stride),
        padding=padding if isinstance(padding, str) else [tuple(p) for p in padding],
        rhs_dilation=tuple(dilation),
        dimension_numbers=_spatial_dims(nd),
        feature_group_count=groups,
    )
    return np.asarray(out)


def _window(nd: int, values: Sequence[int]) -> tuple[int, ...]:
    return (1, 1, *values)


def _full_padding(nd: int, padding: JaxPadding) -> JaxPadding:
    if isinstance(padding, str):
        return padding
    return [(0, 0), (0, 0), *[tuple(p) for p in padding]]


def jax_max_pool(
    x: np.ndarray,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: JaxPadding,
    dilation: Sequence[int],
) -> np.ndarray:
    """Max pool with lax.reduce_window from -inf: a pad cell can never win."""
    nd = x.ndim - 2
    out = lax.reduce_window(
        x,
        -np.inf,
        lax.max,
        _window(nd, kernel),
        _window(nd, stride),
        _full_padding(nd, padding),
        window_dilation=_window(nd, dilation),
    )
    return np.asarray(out)


def _window_sum(
    x: np.ndarray,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: JaxPadding,
    dilation: Sequence[int],
) -> np.ndarray:
    nd = x.ndim - 2
    out = lax.reduce_window(
        x,
        0.0,
        lax.add,
        _window(nd, kernel),
        _window(nd, stride),
        _full_padding(nd, padding),
        window_dilation=_window(nd, dilation),
    )
    return np.asarray(out)


def _explicit(
    padding: JaxPadding,
    sizes: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
) -> Pairs:
    if not isinstance(padding, str):
        return [tuple(p) for p in padding]  # type: ignore[misc]
    return [jax_pads(padding, n, k, s, d) for n, k, s, d in zip(sizes, kernel, stride, dilation)]


def jax_avg_pool(
    x: np.ndarray,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: JaxPadding,
    dilation: Sequence[int],
    count_include_pad: bool,
) -> np.ndarray:
    """Average = window sum / count, the count pooled from ones that are 1 or 0 on the pad.

    The ones ride along as one extra channel, so sum and count come from one reduce_window.
    """
    sizes = x.shape[2:]
    pairs = _explicit(padding, sizes, kernel, stride, dilation)
    flat = x.reshape(1, -1, *sizes)
    ones = np.ones((1, 1, *sizes), dtype=x.dtype)
    if count_include_pad:  # pad explicitly: zeros for x, ones for the count
        widths = [(0, 0), (0, 0), *pairs]
        flat = np.pad(flat, widths)
        ones = np.pad(ones, widths, constant_values=1.0)
        pairs = [(0, 0)] * len(pairs)
    sums = _window_sum(np.concatenate([flat, ones], axis=1), kernel, stride, pairs, dilation)
    total, count = sums[:, :-1], sums[:, -1:]
    return (total / count).reshape(*x.shape[:2], *sums.shape[2:])


def jax_lp_pool(
    x: np.ndarray,
    p: float,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: JaxPadding,
    dilation: Sequence[int],
) -> np.ndarray:
    """``(sum x**p)**(1/p)`` per window, pads contributing zero."""
    return _window_sum(x**p, kernel, stride, padding, dilation) ** (1.0 / p)


def jax_conv_transpose_vjp(
    x: np.ndarray,
    w: np.ndarray,
    stride: Sequence[int],
    padding: JaxPadding,
    dilation: Sequence[int],
    groups: int = 1,
    output_padding: Sequence[int] | None = None,
) -> np.ndarray:
    """Transposed conv = the adjoint of the forward conv whose *output* has x's shape.

    ``w`` has torch's transposed layout (C_in, C_out/groups, *k), which is the forward
    conv's (O, I, *k). A string padding gives TF's ``conv_transpose`` output ``n*s``
    (its forward input); explicit pairs give ``(n-1)*s + k_eff - lo - hi + output_padding``.
    """
    nd = x.ndim - 2
    sizes = x.shape[2:]
    k = w.shape[2:]
    op = output_padding or (0,) * nd
    if isinstance(padding, str):
        assert not any(op), "string padding defines its own output size"
        fwd_sizes = [n * s for n, s in zip(sizes, stride)]
    else:
        fwd_sizes = [
            (n - 1) * s + d * (kk - 1) + 1 - lo - hi + o
            for n, s, d, kk, (lo, hi), o in zip(sizes, stride, dilation, k, padding, op)
        ]
    y0 = np.zeros((x.shape[0], w.shape[1] * groups, *fwd_sizes), dtype=x.dtype)

    def forward(y: Any) -> Any:
        return lax.conv_general_dilated(
            y,
            w,
            window_strides=tuple(stride),
            padding=padding if isinstance(padding, str) else [tuple(p) for p in padding],
            rhs_dilation=tuple(dilation),
            dimension_numbers=_spatial_dims(nd),
            feature_group_count=groups,
        )

    out, pullback = jax.vjp(forward, y0)
    assert out.shape == x.shape, f"forward conv gives {out.shape}, expected {x.shape}"
    (grad,) = pullback(x)
    return np.asarray(grad)


def jax_conv_transpose_lax(
    x: np.ndarray,
    w: np.ndarray,
    stride: Sequence[int],
    padding: str,
    dilation: Sequence[int],
) -> np.ndarray:
    """``lax.conv_transpose(..., transpose_kernel=True)``: TF/Keras ``Conv*DTranspose``."""
    nd = x.ndim - 2
    out = lax.conv_transpose(
        x,
        w,
        strides=tuple(stride),
        padding=padding,
        rhs_dilation=tuple(dilation),
        dimension_numbers=_spatial_dims(nd),
        transpose_kernel=True,
    )
    return np.asarray(out)


# ----------------------------------------------------------------------------- onnxruntime


def ort_node(
    op: str,
    inputs: dict[str, np.ndarray],
    attrs: dict[str, Any],
    opset: int = 22,
) -> np.ndarray:
    """Build a one-node model (every input a graph input) and run it in ORT, one thread."""
    node = helper.make_node(op, list(inputs), ["Y"], **attrs)
    dtypes = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64}
    graph_inputs = [
        helper.make_tensor_value_info(name, dtypes[a.dtype], list(a.shape))
        for name, a in inputs.items()
    ]
    out = helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], op.lower(), graph_inputs, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return np.asarray(session.run(None, inputs)[0])


def _pad_attrs(pads: Sequence[int] | None, auto_pad: str | None) -> dict[str, Any]:
    attrs: dict[str, Any] = {}
    if auto_pad is not None:
        attrs["auto_pad"] = auto_pad
    if pads is not None:
        attrs["pads"] = list(pads)
    return attrs


def ort_conv(
    x: np.ndarray,
    w: np.ndarray,
    strides: Sequence[int],
    pads: Sequence[int] | None = None,
    auto_pad: str | None = None,
    dilations: Sequence[int] | None = None,
    group: int = 1,
) -> np.ndarray:
    nd = x.ndim - 2
    attrs = _pad_attrs(pads, auto_pad)
    attrs.update(strides=list(strides), dilations=list(dilations or [1] * nd), group=group)
    return ort_node("Conv", {"X": x, "W": w}, attrs)


def ort_conv_transpose(
    x: np.ndarray,
    w: np.ndarray,
    strides: Sequence[int],
    pads: Sequence[int] | None = None,
    auto_pad: str | None = None,
    dilations: Sequence[int] | None = None,
    output_padding: Sequence[int] | None = None,
    group: int = 1,
) -> np.ndarray:
    nd = x.ndim - 2
    attrs = _pad_attrs(pads, auto_pad)
    attrs.update(strides=list(strides), dilations=list(dilations or [1] * nd), group=group)
    if output_padding is not None:
        attrs["output_padding"] = list(output_padding)
    return ort_node("ConvTranspose", {"X": x, "W": w}, attrs)


def _pool_attrs(
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int] | None,
    auto_pad: str | None,
    dilations: Sequence[int] | None,
    ceil_mode: bool,
) -> dict[str, Any]:
    attrs = _pad_attrs(pads, auto_pad)
    attrs.update(kernel_shape=list(kernel), strides=list(strides), ceil_mode=int(ceil_mode))
    if dilations is not None:
        attrs["dilations"] = list(dilations)
    return attrs


def ort_max_pool(
    x: np.ndarray,
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int] | None = None,
    auto_pad: str | None = None,
    dilations: Sequence[int] | None = None,
    ceil_mode: bool = False,
) -> np.ndarray:
    attrs = _pool_attrs(kernel, strides, pads, auto_pad, dilations, ceil_mode)
    return ort_node("MaxPool", {"X": x}, attrs)


def ort_avg_pool(
    x: np.ndarray,
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int] | None = None,
    auto_pad: str | None = None,
    dilations: Sequence[int] | None = None,
    ceil_mode: bool = False,
    count_include_pad: bool = False,
) -> np.ndarray:
    """AveragePool-22 (dilations need opset 19+); ONNX's default excludes the pad."""
    attrs = _pool_attrs(kernel, strides, pads, auto_pad, dilations, ceil_mode)
    attrs["count_include_pad"] = int(count_include_pad)
    return ort_node("AveragePool", {"X": x}, attrs)


def ort_lp_pool(
    x: np.ndarray,
    p: int,
    kernel: Sequence[int],
    strides: Sequence[int],
    pads: Sequence[int] | None = None,
    auto_pad: str | None = None,
    dilations: Sequence[int] | None = None,
    ceil_mode: bool = False,
) -> np.ndarray:
    attrs = _pool_attrs(kernel, strides, pads, auto_pad, dilations, ceil_mode)
    attrs["p"] = int(p)
    return ort_node("LpPool", {"X": x}, attrs)


def ort_pad(
    x: np.ndarray,
    pads: Sequence[int],
    mode: str = "constant",
    value: float | None = None,
) -> np.ndarray:
    """ONNX Pad-21 over every axis; ``pads`` is ONNX order (all begins, then all ends)."""
    inputs: dict[str, np.ndarray] = {"X": x, "pads": np.asarray(pads, dtype=np.int64)}
    if value is not None:
        inputs["value"] = np.asarray(value, dtype=x.dtype)
    return ort_node("Pad", inputs, {"mode": mode}, opset=21)
