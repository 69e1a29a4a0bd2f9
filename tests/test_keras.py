"""padkit against Keras on the TensorFlow backend: build the Keras layer, copy its weights
into the padkit layer, compare; and tf2onnx exports of Keras models through
padkit.onnx.load and ``padkit verify``.

The Keras rules are written out here from Keras's documentation and source, not taken from
padkit: for ``Conv*DTranspose`` with ``k_eff = d*(k-1) + 1``,

* ``output_padding=None``: ``"same"`` gives ``n*s``, ``"valid"`` gives
  ``n*s + max(k_eff - s, 0)``;
* ``output_padding=op``: ``(n-1)*s + k_eff - 2*pad + op`` with ``pad = k_eff//2`` for
  ``"same"`` and 0 for ``"valid"``.

TensorFlow is imported once, on first use (not at collection: see conftest.py).
"""

from __future__ import annotations

import importlib
import json
import os
import warnings
from collections.abc import Callable
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import padkit.functional as PF
import padkit.nn as pn
import padkit.onnx
from padkit.onnx.verify import verify


class _Lazy:
    """A module imported on its first attribute access. TensorFlow must not load while the
    suite is collected: once it is loaded, torch.export crashes (see conftest.py)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("_") or attr == "pytestmark":  # pytest's probes while collecting
            raise AttributeError(attr)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = importlib.import_module(self._name)
        return getattr(module, attr)


class _KerasLayers(dict[int, str]):
    """nd -> the Keras layer class of that name, looked up when used."""

    def __getitem__(self, nd: int) -> Any:
        return getattr(keras.layers, super().__getitem__(nd))


keras: Any = _Lazy("keras")
tf: Any = _Lazy("tensorflow")
tf2onnx: Any = _Lazy("tf2onnx")

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

KERAS_CONV_T = _KerasLayers({1: "Conv1DTranspose", 2: "Conv2DTranspose", 3: "Conv3DTranspose"})
KERAS_AVG = _KerasLayers({1: "AveragePooling1D", 2: "AveragePooling2D", 3: "AveragePooling3D"})
KERAS_MAX = _KerasLayers({1: "MaxPooling1D", 2: "MaxPooling2D", 3: "MaxPooling3D"})
PN_CONV_T: dict[int, Any] = {1: pn.ConvTranspose1d, 2: pn.ConvTranspose2d, 3: pn.ConvTranspose3d}
PN_AVG: dict[int, Any] = {1: pn.AvgPool1d, 2: pn.AvgPool2d, 3: pn.AvgPool3d}
PN_MAX: dict[int, Any] = {1: pn.MaxPool1d, 2: pn.MaxPool2d, 3: pn.MaxPool3d}


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def channels_first(a: Any) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(np.moveaxis(np.asarray(a), -1, 1)))


def channels_last(t: torch.Tensor) -> np.ndarray:
    return np.moveaxis(t.detach().numpy(), 1, -1)


def keras_reference(fn: Callable[[], Any]) -> np.ndarray:
    """The reference TensorFlow computes, or a skip that says why it cannot here.

    Which kernels TensorFlow has depends on the CPU it runs on (a dilated stride-1
    ``Conv1DTranspose`` raises ``InvalidArgumentError`` on some AVX2 machines): where
    TensorFlow itself refuses, there is no reference to compare with.
    """
    try:
        return np.asarray(fn())
    except tf.errors.OpError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        pytest.skip(f"TensorFlow cannot compute the reference on this CPU: {first}")


def assert_close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    scale = max(float(np.max(np.abs(want))), 1.0)
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * scale)


# ----------------------------------------------------------------------------- transposed conv


def keras_length(n: int, k: int, s: int, d: int, padding: str, op: int | None) -> int:
    """Keras Conv*DTranspose output length, written out from Keras's rule."""
    k_eff = d * (k - 1) + 1
    if op is None:
        return n * s if padding == "same" else n * s + max(k_eff - s, 0)
    pad = k_eff // 2 if padding == "same" else 0
    return (n - 1) * s + k_eff - 2 * pad + op


# (sizes, kernel, stride, dilation, padding, output_padding)
CONV_T_CASES: list[tuple[tuple[int, ...], int, int, int, str, int | None]] = [
    ((5, 6), 3, 2, 1, "same", 1),  # Keras 10x12 (padkit used to give 11x13)
    ((5, 6), 2, 3, 1, "valid", None),  # Keras 15x18 (padkit used to give 14x17)
    ((5, 6), 3, 2, 1, "same", None),
    ((5, 6), 4, 2, 1, "same", None),
    ((5, 6), 2, 3, 1, "same", None),  # k < s: the end is extended
    ((5, 6), 4, 2, 1, "same", 1),
    ((5, 6), 3, 2, 1, "same", 0),
    ((5, 6), 3, 2, 1, "valid", None),
    ((5, 6), 2, 3, 1, "valid", 2),
    ((5, 6), 3, 2, 1, "valid", 0),
    ((7,), 4, 3, 1, "same", 2),
    ((7,), 1, 3, 1, "same", 2),
    ((7,), 5, 3, 1, "same", 1),
    ((7,), 1, 2, 1, "valid", None),
    ((7,), 3, 1, 2, "same", None),  # dilated
    ((7,), 3, 1, 2, "valid", None),
    ((3, 4, 3), 3, 2, 1, "same", 1),
    ((3, 4, 3), 2, 3, 1, "valid", None),
]


def keras_conv_t(
    x: np.ndarray, cout: int, k: int, s: int, d: int, padding: str, op: int | None, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    nd = x.ndim - 2
    layer = KERAS_CONV_T[nd](
        cout, k, strides=s, padding=padding, output_padding=op, dilation_rate=d
    )
    layer.build(x.shape)
    kernel = rand(*layer.kernel.shape, seed=seed)
    bias = rand(cout, seed=seed + 1)
    layer.set_weights([kernel, bias])
    return keras_reference(lambda: layer(x)), kernel, bias


def torch_weight(kernel: np.ndarray) -> torch.Tensor:
    """Keras ``(*k, out, in)`` to torch's transposed-conv ``(in, out, *k)``."""
    nd = kernel.ndim - 2
    return torch.from_numpy(np.ascontiguousarray(kernel.transpose(nd + 1, nd, *range(nd))))


@pytest.mark.parametrize(("sizes", "k", "s", "d", "padding", "op"), CONV_T_CASES)
def test_conv_transpose_matches_keras(
    sizes: tuple[int, ...], k: int, s: int, d: int, padding: str, op: int | None
) -> None:
    nd = len(sizes)
    cin, cout = 2, 3
    x = rand(2, *sizes, cin)
    want, kernel, bias = keras_conv_t(x, cout, k, s, d, padding, op, seed=len(sizes) + k)
    expected = tuple(keras_length(n, k, s, d, padding, op) for n in sizes)
    assert want.shape[1:-1] == expected  # the written-out rule is Keras's

    layer = PN_CONV_T[nd](cin, cout, k, stride=s, padding=f"keras_{padding}", dilation=d)
    if op is not None:
        layer = PN_CONV_T[nd](
            cin, cout, k, stride=s, padding=f"KERAS_{padding}", output_padding=op, dilation=d
        )
    with torch.no_grad():
        layer.weight.copy_(torch_weight(kernel))
        layer.bias.copy_(torch.from_numpy(bias))
        got = channels_last(layer(channels_first(x)))
    assert_close(got, want)

    fn = (PF.conv_transpose1d, PF.conv_transpose2d, PF.conv_transpose3d)[nd - 1]
    functional = fn(
        channels_first(x),
        torch_weight(kernel),
        torch.from_numpy(bias),
        s,
        f"keras_{padding}",
        op,
        1,
        d,
    )
    assert_close(channels_last(functional), want)


@pytest.mark.parametrize(("k", "s"), [(3, 2), (4, 2), (2, 3), (5, 3), (1, 2)])
def test_plain_same_keeps_keras_default_meaning(k: int, s: int) -> None:
    """padding='same' without output_padding is Keras's 'same' with output_padding=None."""
    x = rand(1, 5, 6, 2, seed=3)
    want, kernel, bias = keras_conv_t(x, 2, k, s, 1, "same", None, seed=4)
    layer = pn.ConvTranspose2d(2, 2, k, stride=s, padding="same")
    with torch.no_grad():
        layer.weight.copy_(torch_weight(kernel))
        layer.bias.copy_(torch.from_numpy(bias))
        got = channels_last(layer(channels_first(x)))
    assert_close(got, want)


def test_plain_valid_keeps_torch_meaning() -> None:
    """padding='valid' stays torch's padding=0 (= Keras 'valid' with output_padding=0),
    which differs from Keras's default output_padding=None when k < s."""
    x = rand(1, 5, 2, seed=5)
    want0, kernel, bias = keras_conv_t(x, 2, 2, 3, 1, "valid", 0, seed=6)
    layer = pn.ConvTranspose1d(2, 2, 2, stride=3, padding="valid")
    with torch.no_grad():
        layer.weight.copy_(torch_weight(kernel))
        layer.bias.copy_(torch.from_numpy(bias))
        got = channels_last(layer(channels_first(x)))
    assert_close(got, want0)
    assert got.shape[1] == 14 and keras_length(5, 2, 3, 1, "valid", None) == 15


# ----------------------------------------------------------------------------- average pools


AVG_SAME_CASES = [
    ((7, 9), 3, 2),
    ((8, 8), 3, 2),
    ((6, 7), 2, 2),
    ((5, 5), 3, 1),
    ((9, 6), 4, 3),
    ((4, 5), 5, 1),  # pool larger than the input
    ((7, 7), 2, 1),
    ((10, 11), 3, 3),
    ((11,), 4, 2),
    ((4, 5, 6), 3, 2),
]


@pytest.mark.parametrize(("sizes", "k", "s"), AVG_SAME_CASES)
def test_avg_pool_same_default_matches_keras(sizes: tuple[int, ...], k: int, s: int) -> None:
    """AveragePooling*D('same') as a Keras user would port it: no count_include_pad."""
    nd = len(sizes)
    x = rand(2, *sizes, 3, seed=sum(sizes))
    want = keras_reference(lambda: KERAS_AVG[nd](pool_size=k, strides=s, padding="same")(x))
    got = channels_last(PN_AVG[nd](k, s, padding="same")(channels_first(x)))
    assert_close(got, want)
    fn = (PF.avg_pool1d, PF.avg_pool2d, PF.avg_pool3d)[nd - 1]
    assert_close(channels_last(fn(channels_first(x), k, s, padding="same")), want)


def test_avg_pool_explicit_count_include_pad_is_kept() -> None:
    """count_include_pad=True given explicitly still counts the pads (zero-padded mean)."""
    x = channels_first(rand(1, 7, 9, 2, seed=8))
    got = pn.AvgPool2d(3, 2, padding="same", count_include_pad=True)(x)
    # TF SAME for 7 and 9 with k3 s2: pads (1, 1) on both axes
    want = F.avg_pool2d(F.pad(x, (1, 1, 1, 1)), 3, 2)
    torch.testing.assert_close(got, want)
    assert not torch.allclose(got, pn.AvgPool2d(3, 2, padding="same")(x))


# ----------------------------------------------------------------------------- Keras configs


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool_from_keras_json_config(kind: str) -> None:
    """Keras JSON configs give pool_size and strides as lists."""
    x = rand(1, 9, 8, 2, seed=9)
    klayer = (KERAS_MAX if kind == "max" else KERAS_AVG)[2](
        pool_size=(3, 3), strides=(2, 2), padding="same"
    )
    want = keras_reference(lambda: klayer(x))
    cfg = json.loads(json.dumps(klayer.get_config()))
    assert isinstance(cfg["pool_size"], list)
    layer = (PN_MAX if kind == "max" else PN_AVG)[2](
        cfg["pool_size"], cfg["strides"], padding=cfg["padding"]
    )
    assert_close(channels_last(layer(channels_first(x))), want)


# ----------------------------------------------------------------------------- tf2onnx


def to_onnx(model: Any, shape: tuple[int, ...], opset: int = 17) -> Any:
    spec = (tf.TensorSpec(shape, tf.float32, name="x"),)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        proto, _ = tf2onnx.convert.from_keras(model, input_signature=spec, opset=opset)
    return proto


def small_model() -> Any:
    """A Keras model with each padding kind tf2onnx turns into explicit ONNX pads."""
    keras.utils.set_random_seed(0)
    inp = keras.Input((16, 18, 3))
    y = keras.layers.Conv2D(8, 3, strides=2, padding="same")(inp)
    y = keras.layers.DepthwiseConv2D(3, padding="same")(y)
    y = keras.layers.BatchNormalization()(y)
    y = keras.layers.ReLU()(y)
    y = keras.layers.MaxPooling2D(3, 2, padding="same")(y)
    y = keras.layers.AveragePooling2D(3, 2, padding="same")(y)
    y = keras.layers.Conv2DTranspose(4, 3, strides=2, padding="same", output_padding=1)(y)
    y = keras.layers.Conv2DTranspose(4, 3, strides=2, padding="valid")(y)
    return keras.Model(inp, y)


def run_padkit(proto: Any, x: np.ndarray) -> np.ndarray:
    module = padkit.onnx.load(proto)
    with torch.no_grad():
        out = module(torch.from_numpy(x))
    return (out[0] if isinstance(out, (tuple, list)) else out).numpy()


def wrong_first_same_conv(load: Callable[..., Any]) -> Callable[..., Any]:
    """``padkit.onnx.load`` that swaps the start and end pads of the first asymmetrically
    padded conv: the deliberate mistake verify must catch."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        module = load(*args, **kwargs)
        for name, m in module.named_modules():
            if not isinstance(m, pn.Conv2d):
                continue
            pairs = m.resolved_padding((16, 18))
            swapped = tuple((hi, lo) for lo, hi in pairs)
            if swapped != pairs:
                wrong = pn.Conv2d(
                    m.in_channels,
                    m.out_channels,
                    m.kernel_size,
                    m.stride,
                    swapped,
                    m.dilation,
                    m.groups,
                    bias=m.bias is not None,
                )
                wrong.load_state_dict(m.state_dict())
                parent = module.get_submodule(name.rpartition(".")[0]) if "." in name else module
                setattr(parent, name.rpartition(".")[2], wrong)
                return module
        raise AssertionError("no asymmetrically padded conv to break")

    return wrapped


@pytest.fixture(scope="module")
def small() -> tuple[Any, Any, np.ndarray]:
    model = small_model()
    proto = to_onnx(model, (1, 16, 18, 3))
    x = rand(1, 16, 18, 3, seed=11)
    return model, proto, x


def test_tf2onnx_small_model_matches_tensorflow(small: tuple[Any, Any, np.ndarray]) -> None:
    model, proto, x = small
    assert_close(run_padkit(proto, x), keras_reference(lambda: model(x, training=False)))


def test_verify_passes_tf2onnx_small_model(small: tuple[Any, Any, np.ndarray]) -> None:
    _, proto, x = small
    assert verify(proto).passed
    report = verify(proto, {"x": x}, float64=True)
    assert report.passed, str(report)
    assert all(o.rounding is not None and o.float64_diff is not None for o in report.outputs)


def test_verify_fails_on_a_wrong_padding(
    small: tuple[Any, Any, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    from padkit.onnx import _graph

    _, proto, _ = small
    monkeypatch.setattr(_graph, "load", wrong_first_same_conv(_graph.load))
    for float64 in (False, True):
        report = verify(proto, float64=float64)
        assert not report.passed, str(report)
        assert "FAIL" in str(report)


def test_tf2onnx_negative_transpose_pads_match_tensorflow() -> None:
    """tf2onnx writes negative end pads where Keras extends a transposed conv's output
    ('valid' with kernel < stride, or with output_padding); onnxruntime refuses them, padkit
    imports them as the extension TensorFlow computes."""
    import onnxruntime

    keras.utils.set_random_seed(1)
    inp = keras.Input((5, 6, 2))
    y = keras.layers.Conv2DTranspose(3, 2, strides=3, padding="valid")(inp)
    y = keras.layers.Conv2DTranspose(2, 3, strides=2, padding="valid", output_padding=1)(y)
    model = keras.Model(inp, y)
    proto = to_onnx(model, (1, 5, 6, 2))
    pads = [list(a.ints) for n in proto.graph.node for a in n.attribute if a.name == "pads"]
    assert any(min(p) < 0 for p in pads)
    x = rand(1, 5, 6, 2, seed=13)
    assert_close(run_padkit(proto, x), keras_reference(lambda: model(x)))
    with pytest.raises(Exception, match="negative"):
        onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])


APPLICATIONS: list[tuple[str, Callable[[], Any], tuple[int, ...]]] = [
    (
        "MobileNetV2",
        lambda: keras.applications.MobileNetV2(weights=None, alpha=0.35, input_shape=(96, 96, 3)),
        (1, 96, 96, 3),
    ),
    (
        "MobileNetV3Small",
        lambda: keras.applications.MobileNetV3Small(weights=None, input_shape=(96, 96, 3)),
        (1, 96, 96, 3),
    ),
    (
        "EfficientNetB0",
        lambda: keras.applications.EfficientNetB0(weights=None, input_shape=(96, 96, 3)),
        (1, 96, 96, 3),
    ),
    (
        "ResNet50",
        lambda: keras.applications.ResNet50(weights=None, include_top=False),
        (1, 224, 224, 3),
    ),
    (
        "Xception",
        lambda: keras.applications.Xception(weights=None, include_top=False),
        (1, 96, 96, 3),
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize("opset", [13, 17])
@pytest.mark.parametrize(("build", "shape"), [pytest.param(b, s, id=n) for n, b, s in APPLICATIONS])
def test_tf2onnx_keras_applications(
    build: Callable[[], Any], shape: tuple[int, ...], opset: int
) -> None:
    keras.utils.set_random_seed(0)
    model = build()
    proto = to_onnx(model, shape, opset)
    x = rand(*shape, seed=12)
    want = keras_reference(lambda: model(x, training=False))
    got = run_padkit(proto, x)
    scale = float(np.max(np.abs(want)))
    assert got.shape == want.shape
    assert float(np.max(np.abs(got - want))) <= 1e-4 * max(scale, 1.0) + 1e-4
    report = verify(proto, float64=True)
    assert report.passed, str(report)
