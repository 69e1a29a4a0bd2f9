"""padkit.surgery on Hugging Face ``transformers`` vision models as their code is written.

Small configs, random weights (BatchNorm statistics randomised), no downloads, eval mode.
Oracles: the Hugging Face model itself (its own pads in code, ``F.pad`` amounts computed
from the input size, static ``ZeroPad2d`` modules) and, for dilation, the a-trous identity
(the dilated model's map subsampled every ``r`` pixels equals the original's).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

import padkit.nn as PN
from padkit.surgery import SurgeryError, convert, dilate

transformers = pytest.importorskip("transformers")

SIZES = ((224, 224), (225, 201))


def _randomise(model: nn.Module) -> nn.Module:
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.normal_(0, 0.1)
            m.running_var.uniform_(0.5, 1.5)
    return model.eval()


def efficientnet() -> nn.Module:
    torch.manual_seed(0)
    config = transformers.EfficientNetConfig(
        width_coefficient=0.25, depth_coefficient=0.2, hidden_dim=320
    )
    return _randomise(transformers.EfficientNetModel(config))


def mobilenet_v2(tf_padding: bool = True) -> nn.Module:
    torch.manual_seed(0)
    config = transformers.MobileNetV2Config(depth_multiplier=0.25, tf_padding=tf_padding)
    return _randomise(transformers.MobileNetV2Model(config))


def mobilenet_v1() -> nn.Module:
    torch.manual_seed(0)
    config = transformers.MobileNetV1Config(depth_multiplier=0.25)
    return _randomise(transformers.MobileNetV1Model(config))


def bit(**kwargs: Any) -> nn.Module:
    torch.manual_seed(0)
    config = transformers.BitConfig(
        embedding_size=8,
        hidden_sizes=[8, 16, 16, 32],
        depths=[1, 1, 1, 1],
        num_groups=4,
        **kwargs,
    )
    return _randomise(transformers.BitModel(config))


def _last(model: nn.Module, x: Tensor) -> Tensor:
    with torch.no_grad():
        out: Tensor = model(x).last_hidden_state
    return out


class _Pads(TorchFunctionMode):
    """Counts the pad calls a forward makes."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        if getattr(func, "__name__", "") == "pad" and not _called_by_padkit():
            self.count += 1
        return func(*args, **(kwargs or {}))


def _called_by_padkit() -> bool:
    """The first caller outside torch is padkit's own code (a plan's ``F.pad``, which runs
    or not depending on whether the oneDNN backend takes the op), not the model's."""
    frame = sys._getframe(2)
    while frame is not None:
        name = str(frame.f_globals.get("__name__", ""))
        if not name.startswith("torch") and name != __name__:
            return name.startswith("padkit")
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _pad_calls(model: nn.Module, x: Tensor) -> int:
    with torch.no_grad(), _Pads() as mode:
        model(x)
    return mode.count


def _same_outputs(a: nn.Module, b: nn.Module) -> None:
    assert list(a.state_dict()) == list(b.state_dict())
    for key, value in a.state_dict().items():
        assert torch.equal(value, b.state_dict()[key]), key
    for h, w in SIZES:
        x = torch.randn(2, 3, h, w)
        ref, out = _last(a, x), _last(b, x)
        assert out.shape == ref.shape
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max()))


# ----------------------------------------------------------------------------- convert


def test_convert_efficientnet_static_pads_keep_hf_numbers() -> None:
    model = efficientnet()
    new, report = convert(model)
    _same_outputs(model, new)
    stem = new.embeddings
    assert isinstance(stem.padding, nn.ZeroPad2d)  # a passthrough of the same class
    assert isinstance(stem.convolution, PN.Conv2d)
    assert stem.convolution.resolved_padding() == ((0, 1), (0, 1))
    assert "embeddings.padding" in report.paths
    assert _pad_calls(new, torch.randn(1, 3, 64, 64)) == 0
    # depthwise convs of stride 2: HF's own subclass is kept, with padkit's forward
    cls = transformers.models.efficientnet.modeling_efficientnet.EfficientNetDepthwiseConv2d
    strided = [m for m in new.modules() if isinstance(m, cls) and m.stride == (2, 2)]
    assert strided and all(isinstance(m, PN.Conv2d) for m in strided)
    # the pads of stride-1 blocks are never called: listed with that reason
    unused = [s for s in report.skipped if s.path.endswith("depthwise_conv_pad")]
    assert unused and all("not called" in s.reason for s in unused)


def test_convert_efficientnet_to_tf_same_changes_numbers_at_odd_sizes_only() -> None:
    model = efficientnet()
    new, report = convert(model, padding="same")
    assert new.embeddings.convolution.pad_spec.axes == ("same", "same")
    assert "embeddings.convolution" in report.numbers_changed
    x = torch.randn(1, 3, 224, 224)  # every stride-2 layer sees an even size
    torch.testing.assert_close(_last(new, x), _last(model, x), rtol=1e-4, atol=1e-4)
    x = torch.randn(1, 3, 225, 201)
    tf, hf = _last(new, x), _last(model, x)
    assert tf.shape[-2:] == (8, 7) and hf.shape[-2:] == (7, 6)  # TF's stage sizes: ceil(n/32)


@pytest.mark.parametrize("build", [mobilenet_v2, mobilenet_v1], ids=["v2", "v1"])
def test_convert_mobilenet_tf_padding_in_code(build: Callable[[], nn.Module]) -> None:
    model = build()
    new, report = convert(model)
    _same_outputs(model, new)
    assert _pad_calls(model, torch.randn(1, 3, 64, 64)) > 0
    assert _pad_calls(new, torch.randn(1, 3, 64, 64)) == 0
    strided = [m for m in new.modules() if isinstance(m, nn.Conv2d) and m.stride == (2, 2)]
    assert strided and all(
        isinstance(m, PN.Conv2d) and m.pad_spec.axes == ("same", "same") for m in strided
    )
    owner = type(model.get_submodule(report.paths[0]))
    assert isinstance(new.get_submodule(report.paths[0]), owner)
    assert type(new.get_submodule(report.paths[0])).__name__ == owner.__name__
    # the rewired layers skip HF's pad helper in a plain copy of their forward (no dispatch
    # mode per call): checked equal to the rewired copy when it was made
    assert "apply_tf_padding() skipped" in repr(new.get_submodule(report.paths[0]))


def _pad_and_conv(x: Tensor, conv: nn.Module) -> Tensor:
    return conv(F.pad(x, [1, 1, 1, 1]))


class _HelperDoesMore(nn.Module):
    """A helper that pads and convolves: skipping it would drop the conv."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, stride=2)

    def forward(self, x: Tensor) -> Tensor:
        return _pad_and_conv(x, self.conv).relu()


def test_convert_keeps_the_dispatching_copy_when_no_helper_is_only_the_pad() -> None:
    model = _HelperDoesMore().eval()
    new, report = convert(model)
    assert "conv" in report.paths
    assert "skipped)" not in repr(new)  # the rewired copy: _pad_and_conv runs, its pad skipped
    assert new.conv.resolved_padding() == ((1, 1), (1, 1))
    for n in (17, 18):
        x = torch.randn(1, 3, n, n + 1)
        torch.testing.assert_close(new(x), model(x))
    assert _pad_calls(new, torch.randn(1, 3, 17, 17)) == 0


def test_convert_bit_dynamic_same() -> None:
    model = bit(global_padding="SAME")
    new, report = convert(model)
    _same_outputs(model, new)
    assert _pad_calls(new, torch.randn(1, 3, 64, 64)) == 0
    pad_cls = transformers.models.bit.modeling_bit.DynamicPad2d
    assert isinstance(new.embedder.convolution.pad, pad_cls)
    assert "embedder.convolution" in report.paths
    assert "embedder.convolution.pad" in report.paths


def test_convert_bit_zero_padded_max_pool() -> None:
    # BitMaxPool2d pads with zeros in code (DynamicPad2d), then pools: a padkit max pool
    # whose pads hold 0.0 (padding_value) computes it, so the model converts fully
    model = bit(global_padding="SAME", layer_type="bottleneck", embedding_dynamic_padding=True)
    new, report = convert(model)
    _same_outputs(model, new)
    assert report.skipped == []
    assert "0.0 pad of 'embedder.pooler" in " ".join(c.detail for c in report.changes)
    assert _pad_calls(new, torch.randn(1, 3, 64, 64)) == 0


class _PadByBuffer(nn.Module):
    """Pad amounts in a 0-d buffer and an int attribute, then a conv child."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("amount", torch.tensor(2))
        self.extra = 1
        self.conv = nn.Conv2d(3, 4, 5, stride=2)

    def forward(self, x: Tensor) -> Tensor:
        a = self.amount
        x = F.pad(x, [a, a + self.extra - 1, self.extra, a])
        return self.conv(x).relu()


def test_convert_pads_from_buffers_and_attributes() -> None:
    model = _PadByBuffer().eval()
    new, _ = convert(model)
    assert new.conv.resolved_padding() == ((1, 2), (2, 2))
    assert isinstance(new, _PadByBuffer) and type(new).__name__ == "_PadByBuffer"
    for n in (17, 18):
        x = torch.randn(1, 3, n, n + 3)
        torch.testing.assert_close(new(x), model(x))
    assert _pad_calls(new, torch.randn(1, 3, 17, 17)) == 0


class _PadReadTwice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3)

    def forward(self, x: Tensor) -> Tensor:
        p = F.pad(x, [1, 1, 1, 1])
        return self.conv(p) + p[..., 1:-1, 1:-1]


def test_convert_pad_read_twice_is_listed() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, report = convert(_PadReadTwice().eval())
    assert not report.changes
    assert "read 2 times" in report.skipped[0].reason


# ----------------------------------------------------------------------------- dilate


def resnet() -> nn.Module:
    torch.manual_seed(0)
    config = transformers.ResNetConfig(
        embedding_size=8, hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1]
    )
    return _randomise(transformers.ResNetModel(config))


def regnet() -> nn.Module:
    torch.manual_seed(0)
    config = transformers.RegNetConfig(
        embedding_size=8, hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1], groups_width=8
    )
    return _randomise(transformers.RegNetModel(config))


def convnext() -> nn.Module:
    torch.manual_seed(0)
    config = transformers.ConvNextConfig(hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1])
    return transformers.ConvNextModel(config).eval()


class _Last(nn.Module):
    """An HF model's last feature map (the a-trous identity's output)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.model(x).last_hidden_state
        return out


@pytest.mark.parametrize("output_stride", [16, 8])
@pytest.mark.parametrize(
    "build",
    [
        resnet,
        regnet,
        lambda: mobilenet_v2(tf_padding=False),
        mobilenet_v2,
        efficientnet,
        convnext,
        lambda: bit(embedding_dynamic_padding=True),  # GroupNorm: statistics per phase
    ],
    ids=["resnet", "regnet", "mobilenet_v2", "mobilenet_v2_tf", "efficientnet", "convnext", "bit"],
)
def test_dilate_hf_atrous_identity(build: Callable[[], nn.Module], output_stride: int) -> None:
    model = build()
    new, report = dilate(model, output_stride)
    assert report.changes
    assert list(new.state_dict()) == list(model.state_dict())
    r = 32 // output_stride
    for h, w in ((64, 64), (67, 53)):
        x = torch.randn(1, 3, h, w)
        ref, out = _last(model, x), _last(new, x)
        sub = out[..., ::r, ::r]
        assert sub.shape == ref.shape and out.shape[-2:] != ref.shape[-2:]
        torch.testing.assert_close(sub, ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max()))
        with torch.no_grad():  # the pooled output reads the lattice
            pooled, pooled_ref = new(x).pooler_output, model(x).pooler_output
        torch.testing.assert_close(pooled, pooled_ref, rtol=1e-4, atol=1e-5)


def test_dilate_convnext_root_pools_the_lattice_without_fx() -> None:
    # fx cannot trace ConvNextModel (its forward iterates a Proxy); its own mean over H, W
    # runs on the lattice in a copy of its class whose own code has that read replaced
    model = convnext()
    new, report = dilate(model, 16)
    assert isinstance(new, type(model)) and type(new).__name__ == type(model).__name__
    assert report.changes[0].path == "" and "torch.fx cannot trace it" in report.changes[0].detail
    assert list(new.state_dict()) == list(model.state_dict())


def test_dilate_pads_in_code_are_rederived_for_the_lattice() -> None:
    # MobileNetV2's apply_tf_padding reads the conv's stride and dilation: once the conv is
    # re-strided, HF's own pad would be wrong; the pad call is re-derived for the lattice
    model = mobilenet_v2()
    new, report = dilate(model, 8)
    rewired = [c for c in report.changes if "pads the lattice" in c.detail]
    assert any("TF 'same'" in c.detail for c in rewired)
    layer = new.get_submodule(rewired[0].path)
    cls = transformers.models.mobilenet_v2.modeling_mobilenet_v2.MobileNetV2ConvLayer
    assert isinstance(layer, cls) and type(layer).__name__ == cls.__name__
    # EfficientNet's static ZeroPad2d before a stride-2 block past the output stride: f x pads
    new, report = dilate(efficientnet(), 8)
    pads = [c for c in report.changes if c.path.endswith("depthwise_conv_pad")]
    assert pads and all("static" in c.detail for c in pads)


class _Reflect(nn.Module):
    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how
        self.conv = nn.Conv2d(4, 4, 3)
        self.other = nn.Conv2d(4, 4, 3)

    def forward(self, x: Tensor) -> Tensor:
        if self.how == "reflect":
            return self.conv(F.pad(x, [1, 1, 1, 1], mode="reflect"))
        p = F.pad(x, [1, 1, 1, 1])
        return self.conv(p) + self.other(p)


class _CodePadded(nn.Sequential):
    def __init__(self, how: str) -> None:
        super().__init__(
            *[nn.Conv2d(3 if i == 0 else 4, 4, 3, 2, 1) for i in range(5)], _Reflect(how)
        )


@pytest.mark.parametrize(
    "build, path, reason",
    [
        (lambda: _CodePadded("reflect"), "_Reflect", "mode 'reflect'.*dense map's edge"),
        (lambda: _CodePadded("twice"), "_Reflect", "not read by exactly one conv"),
    ],
    ids=["reflect_pad", "pad_read_twice"],
)
def test_dilate_hf_refusals_name_module_class_and_reason(
    build: Callable[[], nn.Module], path: str, reason: str
) -> None:
    with pytest.raises(SurgeryError, match=f"{path}.*{reason}"):
        dilate(build(), 8)


def test_inspect_reports_pads_written_in_code() -> None:
    """HF MobileNetV2 (tf_padding=True) pads in code: inspect shows the pads each conv
    computes with, TF SAME written out here (k3 s2 at 65 -> (1, 1), at 64 -> (0, 1))."""
    from padkit.inspect import inspect_model

    torch.manual_seed(0)
    config = transformers.MobileNetV2Config(
        num_channels=3, image_size=64, depth_multiplier=0.25, tf_padding=True
    )
    model = transformers.MobileNetV2Model(config).eval()
    reports = {r.name: r for r in inspect_model(model, (1, 3, 65, 64))}
    stem = reports["conv_stem.first_conv.convolution"]
    assert stem.input_size == (65, 64) and stem.output_size == (33, 32)
    assert stem.pads == ((1, 1), (0, 1)) and stem.size_dependent
    assert any("padded in the model's code" in w for w in stem.warnings)
    assert reports["conv_stem.conv_3x3.convolution"].pads == ((1, 1), (1, 1))
    assert reports["conv_stem.reduce_1x1.convolution"].pads == ((0, 0), (0, 0))
    assert not any("code" in w for w in reports["conv_stem.reduce_1x1.convolution"].warnings)
    # a model with no pads in code reads as before
    plain = inspect_model(nn.Sequential(nn.Conv2d(3, 4, 3, stride=2, padding=1)), (1, 3, 9, 9))
    assert plain[0].pads == ((1, 1), (1, 1)) and not plain[0].warnings


@pytest.mark.parametrize(
    ("build", "padding"),
    [
        (mobilenet_v2, None),
        (mobilenet_v1, None),
        (efficientnet, None),
        (lambda: bit(global_padding="SAME"), None),
        (bit, "same"),  # weight-standardised conv subclasses ported with their transform
    ],
    ids=["mnv2", "mnv1", "effnet", "bit-same-in-code", "bit-port"],
)
def test_converted_model_pickles(build: Callable[[], nn.Module], padding: str | None) -> None:
    """Passthrough pad modules, forwards with the pad helper skipped and ported conv
    subclasses are classes made at run time; a pickle of the converted model (torch.save,
    multiprocessing) restores them, wherever the original model pickles."""
    import pickle

    model = build()
    try:
        pickle.dumps(model)
    except Exception as err:
        pytest.skip(f"the Hugging Face model itself does not pickle: {err}")
    new, _ = convert(model, padding=padding)
    back = pickle.loads(pickle.dumps(new))
    assert [type(m).__name__ for m in back.modules()] == [type(m).__name__ for m in new.modules()]
    x = torch.randn(1, 3, 67, 53)
    torch.testing.assert_close(_last(back, x), _last(new, x), rtol=0, atol=0)


def test_converted_dispatching_copy_pickles() -> None:
    """A module whose pad is folded but whose helper does more than pad keeps a copy that
    runs its own code with the pad call skipped and the conv call replaced: it pickles."""
    import pickle

    model = _HelperDoesMore().eval()
    new, _ = convert(model)
    assert "skipped)" not in repr(new)  # the dispatching copy, not a plain rewrite
    back = pickle.loads(pickle.dumps(new))
    assert type(back).__name__ == type(model).__name__
    x = torch.randn(1, 3, 17, 18)
    torch.testing.assert_close(back(x), new(x), rtol=0, atol=0)
    torch.testing.assert_close(back(x), model(x))


@pytest.mark.parametrize(
    "build",
    [mobilenet_v2, convnext, efficientnet, lambda: bit(embedding_dynamic_padding=True)],
    ids=["mnv2", "convnext", "effnet", "bit"],
)
def test_dilated_model_pickles(build: Callable[[], nn.Module]) -> None:
    """dilate()'s copies whose own code runs with calls replaced (pads re-derived for the
    lattice, a root that pools the lattice) pickle, and compute the same after a round trip."""
    import pickle

    model = build()
    try:
        pickle.dumps(model)
    except Exception as err:
        pytest.skip(f"the Hugging Face model itself does not pickle: {err}")
    new, report = dilate(model, 8)
    assert any("lattice" in c.detail for c in report.changes)
    back = pickle.loads(pickle.dumps(new))
    x = torch.randn(1, 3, 67, 53)
    torch.testing.assert_close(_last(back, x), _last(new, x), rtol=0, atol=0)
    with torch.no_grad():
        torch.testing.assert_close(back(x).pooler_output, new(x).pooler_output, rtol=0, atol=0)
