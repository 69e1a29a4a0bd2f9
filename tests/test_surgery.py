"""padkit.surgery.convert: exact replacements, pad folding and padding-convention ports.

Oracles: the original model (timm's own layers, an explicit pad module followed by the
layer), JAX ``lax`` with ``"SAME"`` (float64) for the Keras-style network, and the TF/XLA
SAME formula written out here for the per-layer report.
"""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import padkit.nn as PN
from padkit import PaddingError
from padkit.surgery import PORT_TARGETS, SurgeryError, SurgeryReport, convert

# a call that changes nothing warns; the tests of refusals read the report instead
pytestmark = pytest.mark.filterwarnings(r"ignore:convert\(\). nothing changed:UserWarning")

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # import-time deprecation noise from third parties
    import jax
    import jax.numpy as jnp
    import timm
    from jax import lax
    from timm.layers import create_conv2d, create_pool2d
    from timm.layers.conv2d_same import Conv2dSame, Conv2dSameExport
    from timm.layers.pool2d_same import AvgPool2dSame, MaxPool2dSame

jax.config.update("jax_enable_x64", True)
torch.set_num_threads(1)


# ----------------------------------------------------------------------------- helpers


def tf_same(n: int, k: int, s: int, d: int = 1) -> tuple[int, int]:
    """TF/XLA SAME pads for one axis, odd pixel at the end."""
    k_eff = d * (k - 1) + 1
    total = max((math.ceil(n / s) - 1) * s + k_eff - n, 0)
    return total // 2, total - total // 2


def run(model: nn.Module, x: Tensor) -> Tensor:
    with torch.no_grad():
        return model(x)  # type: ignore[no-any-return]


def same_state_dict(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return list(sa) == list(sb) and all(sa[k].shape == sb[k].shape for k in sa)


def randomize_bn(model: nn.Module) -> nn.Module:
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                c = m.num_features
                m.running_mean.copy_(torch.randn(c, generator=g) * 0.2)
                m.running_var.copy_(torch.rand(c, generator=g) + 0.5)
                if m.weight is not None:
                    m.weight.copy_(torch.rand(c, generator=g) + 0.5)
                    m.bias.copy_(torch.randn(c, generator=g) * 0.2)
    return model.eval()


# ----------------------------------------------------------------------------- timm TF ports


def test_tf_efficientnet_b0() -> None:
    """The exactness target of the issue: converted tf_efficientnet_b0 equals timm's."""
    torch.manual_seed(0)
    model = randomize_bn(timm.create_model("tf_efficientnet_b0", pretrained=False))
    dynamic = [p for p, m in model.named_modules() if type(m) is Conv2dSame]
    assert dynamic  # stem and the stride-2 depthwise convs
    new, report = convert(model)
    assert report.paths == dynamic
    assert not any(isinstance(m, (Conv2dSame, MaxPool2dSame, AvgPool2dSame)) for m in new.modules())
    assert all(type(model.get_submodule(p)) is Conv2dSame for p in dynamic)  # a copy
    assert same_state_dict(model, new)
    for size in (64, 67, 50):
        x = torch.randn(2, 3, size, size)
        for fn in ("forward_features", "forward"):
            a, b = run(getattr(model, fn), x), run(getattr(new, fn), x)
            assert a.shape == b.shape
            assert float((a - b).abs().max()) <= 1e-5 * float(a.abs().max())


def test_tf_efficientnet_ported_both_ways() -> None:
    """tf_efficientnet_b0 and efficientnet_b0 differ in padding (and BatchNorm eps): with the
    eps aligned, each ported to the other's convention computes the other's numbers."""
    torch.manual_seed(0)
    tf = randomize_bn(timm.create_model("tf_efficientnet_b0", pretrained=False))
    pt = timm.create_model("efficientnet_b0", pretrained=False).eval()
    pt.load_state_dict(tf.state_dict())
    for m in pt.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.eps = 1e-3  # the TF ports' eps
    dynamic = [p for p, m in tf.named_modules() if type(m) is Conv2dSame]
    to_torch, report = convert(tf, padding="symmetric")
    assert report.numbers_changed == dynamic
    to_tf, report = convert(pt, padding="same")
    assert report.numbers_changed == dynamic
    for size in (64, 67):
        x = torch.randn(1, 3, size, size)
        a, b = run(tf.forward_features, x), run(pt.forward_features, x)
        if size == 64:
            assert float((a - b).abs().max()) > 1e-3 * float(a.abs().max())
        for ours, ref in ((to_torch, b), (to_tf, a)):
            out = run(ours.forward_features, x)
            assert float((out - ref).abs().max()) <= 1e-5 * float(ref.abs().max())


K, S, D = (1, 2, 3, 4, 5), (1, 2, 3), (1, 2)


@pytest.mark.parametrize("ceil_mode", [False, True])
def test_timm_same_pools(ceil_mode: bool) -> None:
    """MaxPool2dSame pads -inf, AvgPool2dSame counts its zero pad (whatever cip says)."""
    torch.manual_seed(0)
    checked = 0
    for k, s, d, cip in itertools.product(K, S, D, (False, True)):
        layers: list[nn.Module] = [MaxPool2dSame(k, s, dilation=d, ceil_mode=ceil_mode)]
        if d == 1:
            layers.append(AvgPool2dSame(k, s, ceil_mode=ceil_mode, count_include_pad=cip))
        for layer in layers:
            new, report = convert(nn.Sequential(layer))
            assert report.paths == ["0"] and not report.numbers_changed
            for n in range(1, 12):
                x = torch.randn(1, 2, n, n + 1)
                try:
                    ref = run(layer, x)
                except RuntimeError:
                    continue  # timm itself cannot pool this size
                out = run(new, x)
                assert out.shape == ref.shape, (layer, n)
                assert torch.allclose(out, ref, atol=1e-6), (layer, n)
                checked += 1
    assert checked > 500


def test_timm_factories() -> None:
    """What create_conv2d/create_pool2d(padding='same') build, converted, equals timm."""
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for k, s, d in itertools.product((1, 2, 3, 4, 5), (1, 2), (1, 2)):
        layers.append(create_conv2d(4, 6, k, stride=s, dilation=d, padding="same"))
        layers.append(create_conv2d(4, 4, k, stride=s, dilation=d, padding="same", depthwise=True))
        layers.append(create_pool2d("max", k, s, padding="same"))
        layers.append(create_pool2d("avg", k, s, padding="same"))
    model = nn.Sequential(*[nn.Sequential(layer) for layer in layers])
    new, report = convert(model)
    dynamic = [
        p for p, m in model.named_modules() if type(m) in (Conv2dSame, MaxPool2dSame, AvgPool2dSame)
    ]
    assert report.paths == dynamic and len(dynamic) > 20
    for path, _ in model.named_children():
        a, b = model.get_submodule(path), new.get_submodule(path)
        c_in = 4
        for n in (5, 8, 9):
            x = torch.randn(1, c_in, n, n + 3)
            ref, out = run(a, x), run(b, x)
            assert out.shape == ref.shape and torch.allclose(out, ref, atol=1e-5), path


def test_conv2d_same_export_cache() -> None:
    """timm's export variant keeps the pad of its first input size; padkit resolves per size."""
    torch.manual_seed(0)
    stale = Conv2dSameExport(2, 3, 3, stride=2)
    fresh = Conv2dSame(2, 3, 3, stride=2)
    fresh.load_state_dict(stale.state_dict())
    run(stale, torch.randn(1, 2, 8, 8))  # caches pads (0, 1)
    new, report = convert(nn.Sequential(stale))
    assert "caches" in report.changes[0].detail
    x = torch.randn(1, 2, 9, 9)
    assert run(new, x).shape == run(fresh, x).shape == (1, 3, 5, 5)
    assert run(stale, x).shape == (1, 3, 4, 4)  # timm's export variant keeps its first size's pad
    assert torch.allclose(run(new, x), run(fresh, x), atol=1e-6)


# ----------------------------------------------------------------------------- torch 'same'


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel:UserWarning")
@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("mode", ["zeros", "reflect", "circular", "replicate"])
def test_torch_same_string(nd: int, mode: str) -> None:
    torch.manual_seed(0)
    conv_cls = (nn.Conv1d, nn.Conv2d, nn.Conv3d)[nd - 1]
    model = nn.Sequential(
        *(
            conv_cls(2, 2, k, padding="same", dilation=d, padding_mode=mode)
            for k, d in ((4, 1), (3, 2), (2, 3), (5, 1))
        )
    )
    new, report = convert(model)
    assert report.paths == ["0", "1", "2", "3"]
    assert all(type(m).__module__ == "padkit.nn" for m in new)
    x = torch.randn((1, 2) + (9,) * nd)
    assert torch.allclose(run(new, x), run(model, x), atol=1e-5)


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel:UserWarning")
def test_shared_module_stays_shared() -> None:
    conv = nn.Conv2d(2, 2, 4, padding="same")
    model = nn.Sequential(conv, nn.ReLU(), conv)
    new, report = convert(model)
    assert new[0] is new[2] and isinstance(new[0], PN.Conv2d)
    assert len(report.changes) == 1
    x = torch.randn(1, 2, 7, 7)
    assert torch.allclose(run(new, x), run(model, x), atol=1e-6)


# ----------------------------------------------------------------------------- pad folding

FOLDS: dict[str, Callable[[], nn.Sequential]] = {
    "zero+conv": lambda: nn.Sequential(nn.ZeroPad2d((0, 1, 2, 0)), nn.Conv2d(2, 3, 3, 2, 1)),
    "const0+conv1d": lambda: nn.Sequential(nn.ConstantPad1d((3, 0), 0.0), nn.Conv1d(2, 3, 4)),
    "zero+conv3d": lambda: nn.Sequential(nn.ZeroPad3d((1, 0, 0, 1, 1, 1)), nn.Conv3d(2, 2, 3)),
    "zero+conv(reflect, own pad 0)": lambda: nn.Sequential(
        nn.ZeroPad2d(1), nn.Conv2d(2, 2, 3, padding_mode="reflect")
    ),
    "zero+avg(cip)": lambda: nn.Sequential(
        nn.ZeroPad2d((0, 1, 0, 1)), nn.AvgPool2d(3, 2, padding=1)
    ),
    "zero+avg(no cip, no own pad)": lambda: nn.Sequential(
        nn.ZeroPad2d((1, 0, 1, 0)), nn.AvgPool2d(2, 2, count_include_pad=False)
    ),
    "zero+avg(divisor)": lambda: nn.Sequential(
        nn.ZeroPad2d((1, 1, 0, 1)), nn.AvgPool2d(3, 2, divisor_override=4)
    ),
    "-inf+max": lambda: nn.Sequential(
        nn.ConstantPad2d((0, 1, 0, 1), -math.inf), nn.MaxPool2d(3, 2, padding=1, dilation=2)
    ),
    "zero+max": lambda: nn.Sequential(nn.ZeroPad2d(1), nn.MaxPool2d(3, 2)),
    "const+max(dilated)": lambda: nn.Sequential(
        nn.ConstantPad2d((2, 1, 0, 1), -0.25), nn.MaxPool2d(3, 2, dilation=2)
    ),
    "zero+lp": lambda: nn.Sequential(nn.ZeroPad2d((0, 1, 1, 0)), nn.LPPool2d(2, 3, 2)),
    "reflect+conv": lambda: nn.Sequential(nn.ReflectionPad2d((1, 2, 0, 1)), nn.Conv2d(2, 2, 3)),
    "replicate+conv1d": lambda: nn.Sequential(nn.ReplicationPad1d((2, 0)), nn.Conv1d(2, 2, 3)),
    "circular+conv": lambda: nn.Sequential(nn.CircularPad2d(1), nn.Conv2d(2, 2, 3, 2)),
}


@pytest.mark.parametrize("case", list(FOLDS))
def test_fold_exact(case: str) -> None:
    torch.manual_seed(0)
    model = FOLDS[case]()
    new, report = convert(model)
    assert report.paths == ["0", "1"] and report.skipped == []
    assert type(new[0]) is nn.Identity and type(new[1]).__module__ == "padkit.nn"
    nd = {nn.Conv1d: 1, nn.Conv3d: 3}.get(type(model[1]), 2)
    for n in (6, 7, 10):
        x = torch.randn((1, 2) + (n,) * nd).abs() + 0.1  # LPPool needs positive input
        if "max" in case:
            x = torch.randn((1, 2) + (n,) * nd)
        assert torch.allclose(run(new, x), run(model, x), atol=1e-5), n


REFUSED: dict[str, tuple[Callable[[], nn.Module], str, str]] = {
    "zero+padded max": (
        lambda: nn.Sequential(nn.ZeroPad2d(1), nn.MaxPool2d(3, 2, padding=1)),
        "0",
        "a padkit max pool's pads hold one value",
    ),
    "const+conv": (
        lambda: nn.Sequential(nn.ConstantPad2d(1, 0.5), nn.Conv2d(2, 2, 3)),
        "0",
        "constant value 0.5",
    ),
    "zero+avg(no cip, own pad)": (
        lambda: nn.Sequential(nn.ZeroPad2d(1), nn.AvgPool2d(3, 1, 1, count_include_pad=False)),
        "0",
        "excludes its own pad but counts the explicit zeros",
    ),
    "zero+ceil pool": (
        lambda: nn.Sequential(nn.ZeroPad2d(1), nn.AvgPool2d(2, 2, ceil_mode=True)),
        "0",
        "ceil_mode",
    ),
    "zero+conv transpose": (
        lambda: nn.Sequential(nn.ZeroPad2d(1), nn.ConvTranspose2d(2, 2, 3)),
        "0",
        "transposed conv",
    ),
    "reflect+padded conv": (
        lambda: nn.Sequential(nn.ReflectionPad2d(1), nn.Conv2d(2, 2, 3, padding=1)),
        "0",
        "followed by the conv's own padding",
    ),
    "crop": (
        lambda: nn.Sequential(nn.ZeroPad2d((-1, 0, 0, 0)), nn.Conv2d(2, 2, 3)),
        "0",
        "crops",
    ),
    "zero+same conv": (
        lambda: nn.Sequential(nn.ZeroPad2d(1), Conv2dSame(2, 2, 3, 2)),
        "0",
        "depends on the input size",
    ),
    "last": (lambda: nn.Sequential(nn.Conv2d(2, 2, 3), nn.ZeroPad2d(1)), "1", "nothing to fold"),
    "never called": (lambda: Unused(), "pad", "not called in the forward"),
}


class Padded(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pad = nn.ZeroPad2d(1)
        self.conv = nn.Conv2d(2, 2, 3)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(self.pad(x))  # type: ignore[no-any-return]


class Unused(Padded):
    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x)  # type: ignore[no-any-return]


def test_fold_outside_sequential() -> None:
    """A pad module feeding a conv from a forward of one's own: the traced forward links the
    pad's output to the conv that reads it; the pad module stays, as a passthrough."""
    model = Padded().eval()
    new, report = convert(model)
    assert report.paths == ["pad", "conv"]
    assert isinstance(new.pad, nn.ZeroPad2d) and isinstance(new.conv, PN.Conv2d)
    assert new.conv.resolved_padding() == ((1, 1), (1, 1))
    for n in (7, 8):
        x = torch.randn(1, 2, n, n + 1)
        torch.testing.assert_close(run(new, x), run(model, x))


@pytest.mark.parametrize("case", list(REFUSED))
def test_fold_refused(case: str) -> None:
    torch.manual_seed(0)
    build, path, reason = REFUSED[case]
    model = build()
    new, report = convert(model)
    assert [s.path for s in report.skipped] == [path]
    assert reason in report.skipped[0].reason
    assert type(new.get_submodule(path)) is type(model.get_submodule(path))
    x = torch.randn(1, 2, 8, 8)
    assert torch.allclose(run(new, x), run(model, x), atol=1e-6)


# ----------------------------------------------------------------------------- Keras vs JAX


def keras_style_padkit() -> nn.Sequential:
    """conv 3x3/2 'same', depthwise 3x3/2 'same', avg pool 'same' (pads excluded), max pool
    'same': a Keras network, defined with padkit layers."""
    return nn.Sequential(
        PN.Conv2d(3, 8, 3, stride=2, padding="same"),
        nn.ReLU(),
        PN.Conv2d(8, 8, 3, stride=2, padding="same", groups=8),
        PN.AvgPool2d(3, 2, padding="same", count_include_pad=False),
        PN.MaxPool2d(3, 2, padding="same"),
    ).double()


def torch_style() -> nn.Sequential:
    """The same network as a PyTorch user writes it: symmetric pads of 1."""
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8),
        nn.AvgPool2d(3, 2, padding=1, count_include_pad=False),
        nn.MaxPool2d(3, 2, padding=1),
    ).double()


def jax_keras(x: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
    dn = ("NCHW", "OIHW", "NCHW")
    y = lax.conv_general_dilated(x, w1, (2, 2), "SAME", dimension_numbers=dn)
    y = jnp.maximum(y + b1[None, :, None, None], 0.0)
    y = lax.conv_general_dilated(y, w2, (2, 2), "SAME", dimension_numbers=dn, feature_group_count=8)
    y = y + b2[None, :, None, None]
    window, strides = (1, 1, 3, 3), (1, 1, 2, 2)
    total = lax.reduce_window(y, 0.0, lax.add, window, strides, "SAME")
    count = lax.reduce_window(jnp.ones_like(y), 0.0, lax.add, window, strides, "SAME")
    y = total / count
    return lax.reduce_window(y, -jnp.inf, lax.max, window, strides, "SAME")


def jax_run(net: nn.Module, x: np.ndarray) -> np.ndarray:
    params = [jnp.asarray(p.detach().numpy()) for p in net.parameters()]
    return np.asarray(jax_keras(jnp.asarray(x), *params))


#: the layers that pad, with the input size each sees for an n x n input
PADDED = ("0", "2", "3", "4")


def sizes_seen(n: int) -> dict[str, int]:
    seen = {}
    for path in PADDED:
        seen[path] = n
        n = math.ceil(n / 2)
    return seen


@pytest.mark.parametrize("n", [32, 30, 45])
def test_keras_network_padkit_vs_jax(n: int) -> None:
    torch.manual_seed(n)
    keras = keras_style_padkit()
    plain = torch_style()
    plain.load_state_dict(keras.state_dict())
    x = np.random.default_rng(n).standard_normal((2, 3, n, n))
    ref = jax_run(keras, x)
    ours = run(keras, torch.from_numpy(x)).numpy()
    assert ours.shape == ref.shape
    np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=1e-12)
    # the same weights in the plain torch model: the outputs do not match
    theirs = run(plain, torch.from_numpy(x)).numpy()
    assert theirs.shape == ref.shape and np.abs(theirs - ref).max() > 1e-3
    # ... and the port report says which layers differ, and at this input which do
    ported, report = convert(plain, padding="same", input_shape=(2, 3, n, n))
    np.testing.assert_allclose(run(ported, torch.from_numpy(x)).numpy(), ref, atol=1e-12)
    assert report.numbers_changed == list(PADDED)
    differs = {p for p, m in sizes_seen(n).items() if tf_same(m, 3, 2) != (1, 1)}
    assert {c.path for c in report.changes if c.at_input} == differs
    for change in report.changes:
        assert "at even sizes" in change.detail and "pads (1, 1) -> (0, 1)" in change.detail
    if n == 30:
        assert differs == {"0", "3", "4"}  # the depthwise conv sees 15: TF pads (1, 1) too
    # the way back: padkit's Keras network ported to symmetric padding is the torch model
    back, back_report = convert(keras, padding="symmetric")
    assert back_report.numbers_changed == list(PADDED)
    np.testing.assert_allclose(run(back, torch.from_numpy(x)).numpy(), theirs, atol=1e-12)


def test_timm_avg_pool_to_tf() -> None:
    """timm's AvgPool2dSame counts its pad; a TF port with count_include_pad=False does not."""
    pool = AvgPool2dSame(3, 2, count_include_pad=False).double()
    new, report = convert(nn.Sequential(pool), padding="same", count_include_pad=False)
    assert report.numbers_changed == ["0"]
    assert report.changes[-1].what == ("padding", "count_include_pad")
    for n in (8, 9):
        x = np.random.default_rng(n).standard_normal((1, 2, n, n + 2))
        window, strides = (1, 1, 3, 3), (1, 1, 2, 2)
        total = lax.reduce_window(jnp.asarray(x), 0.0, lax.add, window, strides, "SAME")
        count = lax.reduce_window(jnp.ones(x.shape), 0.0, lax.add, window, strides, "SAME")
        tf = np.asarray(total / count)
        np.testing.assert_allclose(run(new, torch.from_numpy(x)).numpy(), tf, atol=1e-12)
        # timm: zero-pad by TF SAME, then average counting the zeros
        (t, b), (left, r) = tf_same(n, 3, 2), tf_same(n + 2, 3, 2)
        padded = F.pad(torch.from_numpy(x), (left, r, t, b))
        np.testing.assert_allclose(
            run(pool, torch.from_numpy(x)).numpy(), F.avg_pool2d(padded, 3, 2).numpy()
        )
    x = torch.arange(1.0, 9.0, dtype=torch.float64).view(1, 1, 1, 8)
    row = nn.Sequential(AvgPool2dSame((1, 3), (1, 2), count_include_pad=False)).double()
    tf_row, _ = convert(row, padding="same", count_include_pad=False)
    assert run(row, x)[0, 0, 0, -1] == 5.0 and run(tf_row, x)[0, 0, 0, -1] == 7.5


@pytest.mark.parametrize("target", ["same", "same_lower", "same_static", "same_static_lower"])
def test_port_rules_against_explicit_pads(target: str) -> None:
    """Each rule, checked by F.pad with the pads the rule defines (written out here)."""
    torch.manual_seed(0)
    conv = nn.Conv2d(2, 2, 4, stride=2, padding=1).double()
    new, _ = convert(nn.Sequential(conv), padding=target)
    for n in (7, 8, 9):
        x = torch.randn(1, 2, n, n, dtype=torch.float64)
        k_eff = 4
        if target in ("same", "same_lower"):
            lo, hi = tf_same(n, 4, 2)
        else:
            lo, hi = (k_eff - 1) // 2, k_eff - 1 - (k_eff - 1) // 2
        if target.endswith("lower"):
            lo, hi = hi, lo
        ref = F.conv2d(F.pad(x, (lo, hi, lo, hi)), conv.weight, conv.bias, 2)
        assert torch.allclose(run(new, x), ref, atol=1e-12)


def test_port_scope() -> None:
    """valid and 1x1 layers stay; unusual pads are reported, not guessed."""
    model = nn.Sequential(
        nn.Conv2d(2, 2, 3, stride=2),  # valid
        nn.Conv2d(2, 2, 1, stride=2),  # 1x1: same == valid
        nn.Conv2d(2, 2, 3, padding=1),  # stride 1: same numbers under TF SAME
        nn.Conv2d(2, 2, 3, stride=2, padding=2),  # neither
        nn.MaxPool2d(2, 2, padding=1),  # timm's get_padding(2, 2): same-style
    )
    new, report = convert(model, padding="same")
    assert report.numbers_changed == ["4"]
    assert [s.path for s in report.skipped] == ["3"] and "neither" in report.skipped[0].reason
    assert all(new[i] is not None and type(new[i]) is type(model[i]) for i in range(4))
    x = torch.randn(1, 2, 17, 17)
    y = run(new[:4], x)
    assert torch.allclose(y, run(model[:4], x))
    # TF SAME max pool k=2, s=2 at even sizes pads nothing (torch's timm-style pad gives +1)
    assert run(new[4], torch.randn(1, 2, 8, 8)).shape == (1, 2, 4, 4)


def test_report_text() -> None:
    _, report = convert(torch_style(), padding="same", input_shape=(1, 3, 30, 30))
    text = str(report)
    assert text.startswith("padkit.surgery.convert: 4 change(s)")
    assert "[numbers change]" in text and "[same at input]" in text
    assert isinstance(report, SurgeryReport)


# ----------------------------------------------------------------------------- arguments


def test_bad_arguments() -> None:
    model = torch_style()
    with pytest.raises(TypeError, match=r"model must be a torch.nn.Module, got list"):
        convert([model])  # type: ignore[arg-type]
    with pytest.raises(SurgeryError, match=r"padding must be None .* 'symmetric', got 'tf'"):
        convert(model, padding="tf")
    with pytest.raises(TypeError, match=r"padding must be None .*, got 1"):
        convert(model, padding=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="inplace must be True or False"):
        convert(model, inplace="yes")  # type: ignore[arg-type]
    with pytest.raises(PaddingError, match="count_include_pad is for convention ports"):
        convert(model, count_include_pad=False)
    with pytest.raises(PaddingError, match="input_shape is for convention ports"):
        convert(model, input_shape=(1, 3, 8, 8))
    with pytest.raises(TypeError, match=r"input_shape must be a full input shape.*int \(8\)"):
        convert(model, padding="same", input_shape=8)  # type: ignore[arg-type]
    with pytest.raises(PaddingError, match=r"input_shape\[1\] must be >= 1"):
        convert(model, padding="same", input_shape=(1, 0, 8, 8))
    assert PORT_TARGETS == ("same", "same_lower", "same_static", "same_static_lower", "symmetric")


def test_copy_and_inplace() -> None:
    model = nn.Sequential(nn.Conv2d(2, 2, 4, padding="same"))
    new, _ = convert(model)
    assert new is not model and type(model[0]) is nn.Conv2d
    same, _ = convert(model, inplace=True)
    assert same is model and isinstance(model[0], PN.Conv2d)


def test_without_timm_or_torchvision() -> None:
    """padkit.surgery needs neither: it only recognises their classes once imported."""
    code = (
        "import sys; sys.modules['timm'] = None; sys.modules['torchvision'] = None\n"
        "import torch, padkit.surgery as S\n"
        "m = torch.nn.Sequential(torch.nn.ZeroPad2d(1), torch.nn.Conv2d(1, 1, 3))\n"
        "new, r = S.convert(m); assert r.paths == ['0', '1']\n"
        "m = torch.nn.Sequential(torch.nn.Conv2d(1, 1, 3, 2, 1), torch.nn.Conv2d(1, 1, 3, 1, 1))\n"
        "d, r = S.dilate(m, 1); print('dilated', r.paths)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("dilated ['0', '1']")


# conv subclasses with a forward of their own; a call that changes nothing


class CenteredConv(nn.Conv2d):
    """A weight transform, then the conv with the module's own attributes."""

    def forward(self, x: Tensor) -> Tensor:
        w = self.weight - self.weight.mean((1, 2, 3), keepdim=True)
        return F.conv2d(x, w, self.bias, self.stride, self.padding, self.dilation, self.groups)


def test_port_keeps_a_conv_subclass_and_its_weight_transform() -> None:
    """Reference: the weight transform written out, then padkit's functional TF 'same'."""
    from timm.layers import StdConv2d

    import padkit.functional as PF

    torch.manual_seed(0)
    model = nn.Sequential(CenteredConv(3, 8, 3, 2, 1), nn.ReLU(), StdConv2d(8, 8, 3, 2, 1)).eval()
    ported, report = convert(model, padding="same")
    assert report.paths == ["0", "2"] and report.numbers_changed == ["0", "2"]
    assert type(ported[0]) is not CenteredConv and isinstance(ported[0], CenteredConv)
    assert type(ported[0]).__name__ == "CenteredConv" and isinstance(ported[2], StdConv2d)
    assert list(ported.state_dict()) == list(model.state_dict())
    w0 = model[0].weight - model[0].weight.mean((1, 2, 3), keepdim=True)
    w2 = F.batch_norm(
        model[2].weight.reshape(1, 8, -1), None, None, training=True, eps=model[2].eps
    ).reshape_as(model[2].weight)
    with torch.no_grad():
        for h, w in ((16, 16), (17, 18), (23, 20)):
            x = torch.randn(1, 3, h, w)
            ref = PF.conv2d(F.relu(PF.conv2d(x, w0, model[0].bias, 2, "same")), w2, None, 2, "same")
            torch.testing.assert_close(ported(x), ref, rtol=1e-5, atol=1e-6)


def test_a_call_that_changes_nothing_warns_and_says_why() -> None:
    class Opaque(nn.Conv2d):
        def forward(self, x: Tensor) -> Tensor:
            return F.conv2d(x, self.weight, self.bias, 1, 1) + F.conv2d(x, self.weight, None, 1, 1)

    model = nn.Sequential(Opaque(3, 3, 3, padding=1))
    with pytest.warns(UserWarning, match=r"convert\(\): nothing changed.*0: Opaque subclasses"):
        _, report = convert(model, padding="same")
    assert report.changes == [] and report.skipped[0].path == "0"
    assert "nothing changed" in report.notes[0]
    with pytest.warns(UserWarning, match=r"nothing changed: no layer pads on every forward$"):
        convert(nn.Sequential(nn.Conv2d(3, 3, 3, padding=1)))


class _OwnConv(nn.Conv2d):
    """A model's own conv class that keeps torch's forward (module level: picklable)."""


def test_a_kept_class_replacement_pickles() -> None:
    """A padkit layer that stays an instance of a model's own conv class (a class made at
    run time) pickles and unpickles to the same class and numbers."""
    import pickle

    from padkit.surgery._common import _keep_class

    old = _OwnConv(3, 4, 3, stride=2)
    new = _keep_class(PN.Conv2d(3, 4, 3, stride=2, padding="same"), old)
    assert isinstance(new, _OwnConv) and isinstance(new, PN.Conv2d)
    back = pickle.loads(pickle.dumps(new))
    assert type(back) is type(new)
    x = torch.randn(1, 3, 9, 8)
    torch.testing.assert_close(back(x), new(x), rtol=0, atol=0)
