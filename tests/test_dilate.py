"""padkit.surgery.dilate against the a-trous identity, on real models of many families.

The oracle is the undilated model itself: in eval mode, the dilated model's feature maps
subsampled at ``[..., ::r, ::r]`` (r = old / new stride) must equal the original's. Models
are built with random weights (no downloads) and random BatchNorm statistics, so that every
channel carries signal: torchvision, timm, fastai XResNet, smp encoders and a CNN of our
own. The early tests compute the subsampling by hand; the later ones use the public
``dilation_error``, which is itself checked against a hand-made subsampling. timm's own
``output_stride`` and smp's ``make_dilated``, loaded with the same weights, are measured
beside padkit's where the test says so: not exact for ResNet-D shortcut pools, for gates
that pool the dense map, or for smp's dilation of a stage's first conv.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.nn import functional as F

import padkit.nn as PN
from padkit import PaddingError
from padkit.surgery import LatticeGate, SurgeryError, dilate, dilation_error

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # import-time deprecation noise from third parties
    import segmentation_models_pytorch as smp
    import timm
    import torchvision
    from fastai.vision.models import xresnet
    from timm.layers import BlurPool2d
    from timm.layers.eca import EcaModule
    from timm.layers.squeeze_excite import EffectiveSEModule, SEModule
    from timm.models.res2net import Bottle2neck
    from torchvision.models.feature_extraction import create_feature_extractor

torch.set_num_threads(1)
REL = 1e-5


# ----------------------------------------------------------------------------- helpers


def randomize_bn(model: nn.Module, seed: int = 0) -> nn.Module:
    """Random BatchNorm statistics and affine terms (the default init is an identity)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                c = m.num_features
                m.running_mean.copy_(torch.randn(c, generator=g) * 0.2)
                m.running_var.copy_(torch.rand(c, generator=g) + 0.5)
                m.weight.copy_(torch.rand(c, generator=g) + 0.5)
                m.bias.copy_(torch.randn(c, generator=g) * 0.2)
    return model.eval()


def tv_features(model: nn.Module, x: Tensor) -> Tensor:
    m: Any = model
    x = m.maxpool(m.relu(m.bn1(m.conv1(x))))
    return m.layer4(m.layer3(m.layer2(m.layer1(x))))  # type: ignore[no-any-return]


def timm_features(model: nn.Module, x: Tensor) -> Tensor:
    return model.forward_features(x)  # type: ignore[operator,no-any-return]


def identity_error(
    features: Callable[[nn.Module, Tensor], Tensor],
    original: nn.Module,
    dilated: nn.Module,
    x: Tensor,
    ratio: int,
) -> float:
    """max |dilated[..., ::r, ::r] - original| relative to max |original|."""
    with torch.no_grad():
        ref = features(original, x)
        out = features(dilated, x)
    sub = out[..., ::ratio, ::ratio]
    assert sub.shape == ref.shape, (out.shape, ref.shape)
    return float((sub - ref).abs().max() / ref.abs().max())


def same_state_dict(a: nn.Module, b: nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return list(sa) == list(sb) and all(sa[k].shape == sb[k].shape for k in sa)


def timm_model(name: str, **kwargs: Any) -> nn.Module:
    return randomize_bn(timm.create_model(name, pretrained=False, **kwargs))


# ----------------------------------------------------------------------------- torchvision

TV_FAST = ["resnet18", "resnet50"]
TV_SLOW = ["resnext50_32x4d", "wide_resnet50_2"]


def check_torchvision(name: str) -> None:
    torch.manual_seed(0)
    model = randomize_bn(getattr(torchvision.models, name)())
    for output_stride, flags in ((16, [False, False, True]), (8, [False, True, True])):
        dilated, report = dilate(model, output_stride)
        assert same_state_dict(model, dilated)
        assert report.changes and all(not c.numbers_change for c in report.changes)
        for size in (64, 72):  # 72: odd sizes (9, 5) reach the dilated stages
            x = torch.randn(1, 3, size, size)
            err = identity_error(tv_features, model, dilated, x, 32 // output_stride)
            assert err <= REL, (name, output_stride, size, err)
        if name == "resnet18":
            continue  # torchvision's BasicBlock refuses dilation; padkit's does not need it
        # torchvision's own replace_stride_with_dilation builds the same network:
        # the dense maps agree everywhere, not only on the lattice
        ref = getattr(torchvision.models, name)(replace_stride_with_dilation=flags).eval()
        ref.load_state_dict(model.state_dict())
        x = torch.randn(1, 3, 72, 72)
        with torch.no_grad():
            a, b = tv_features(ref, x), tv_features(dilated, x)
        assert a.shape == b.shape
        assert float((a - b).abs().max() / a.abs().max()) <= REL


@pytest.mark.parametrize("name", TV_FAST)
def test_torchvision_identity(name: str) -> None:
    check_torchvision(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", TV_SLOW)
def test_torchvision_identity_wide(name: str) -> None:
    check_torchvision(name)


def test_torchvision_already_dilated() -> None:
    """An output-stride-16 model taken to 8 multiplies the existing dilations."""
    torch.manual_seed(0)
    small = torchvision.models.resnet.ResNet
    block = torchvision.models.resnet.Bottleneck
    model = randomize_bn(small(block, [1, 1, 2, 1], replace_stride_with_dilation=[0, 0, 1]))
    dilated, _ = dilate(model, 8)
    ref = small(block, [1, 1, 2, 1], replace_stride_with_dilation=[0, 1, 1]).eval()
    ref.load_state_dict(model.state_dict())
    x = torch.randn(1, 3, 66, 66)
    with torch.no_grad():
        a, b = tv_features(ref, x), tv_features(dilated, x)
    assert float((a - b).abs().max() / a.abs().max()) <= REL
    assert identity_error(tv_features, model, dilated, x, 2) <= REL
    with pytest.raises(SurgeryError, match=r"output_stride=32.*current output stride is 16"):
        dilate(model, 32)


# output stride 1 (every map at full resolution, dilate's self-check included) is slow;
# strides 4 and 2 take the same path
@pytest.mark.parametrize("output_stride", [4, 2, pytest.param(1, marks=pytest.mark.slow)])
def test_any_reachable_output_stride(output_stride: int) -> None:
    torch.manual_seed(0)
    model = randomize_bn(torchvision.models.resnet18())
    dilated, _ = dilate(model, output_stride)
    x = torch.randn(1, 3, 40, 40)
    assert identity_error(tv_features, model, dilated, x, 32 // output_stride) <= REL


STEM_POOLS = {
    "max 3/2 ceil": lambda: nn.MaxPool2d(3, 2, ceil_mode=True),
    "max 2/2 ceil": lambda: nn.MaxPool2d(2, 2, ceil_mode=True),
    "max 3/2 pad 1 ceil": lambda: nn.MaxPool2d(3, 2, 1, ceil_mode=True),
    "max 3/2 dilation 2": lambda: nn.MaxPool2d(3, 2, 1, dilation=2),
    "avg 3/2 pad 1 ceil excl": lambda: nn.AvgPool2d(
        3, 2, 1, ceil_mode=True, count_include_pad=False
    ),
    "avg 3/2 ceil excl": lambda: nn.AvgPool2d(3, 2, ceil_mode=True, count_include_pad=False),
    "avg 3/2 pad 1 incl": lambda: nn.AvgPool2d(3, 2, 1),
    # counted pads and an uncounted ceil overhang: explicit zeros, then a pool that excludes
    "avg 3/2 pad 1 ceil incl": lambda: nn.AvgPool2d(3, 2, 1, ceil_mode=True),
    # no pads: torch never counts the overhang (fastai's ResBlock shortcut pool)
    "avg 2/2 ceil incl": lambda: nn.AvgPool2d(2, 2, ceil_mode=True),
    "avg 3/2 ceil incl": lambda: nn.AvgPool2d(3, 2, ceil_mode=True),
    "lp 3/2": lambda: nn.LPPool2d(2, 3, 2),
}


@pytest.mark.parametrize("pool", list(STEM_POOLS))
def test_removed_pool_strides(pool: str) -> None:
    """Pools whose stride is removed, ceil-mode overhang included, over odd and even sizes."""
    torch.manual_seed(0)
    block = torchvision.models.resnet.BasicBlock
    model = randomize_bn(torchvision.models.resnet.ResNet(block, [1, 1, 1, 1]))
    model.maxpool = STEM_POOLS[pool]()
    dilated, report = dilate(model, 2)
    assert report.paths[0] == "maxpool"
    for n in range(33, 39):
        x = torch.randn(1, 3, n, n)
        assert identity_error(tv_features, model, dilated, x, 16) <= REL, n


def test_refuses_what_no_padding_reproduces() -> None:
    block = torchvision.models.resnet.BasicBlock
    model = torchvision.models.resnet.ResNet(block, [1, 1, 1, 1])
    model.maxpool = nn.MaxPool2d(2, 2, 1, ceil_mode=True)
    with pytest.raises(SurgeryError, match="may drop a window that starts in the padding"):
        dilate(model, 2)
    with pytest.raises(SurgeryError, match=r"'pool' \(MaxPool2d\): return_indices"):
        dilate(IndexedPool(), 1)
    model.maxpool = nn.MaxPool2d(3, 2, 1)
    model.layer4[0].conv2.padding_mode = "reflect"
    with pytest.raises(SurgeryError, match=r"'layer4\.0\.conv2'.*padding_mode='reflect'"):
        dilate(model, 16)


class IndexedPool(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, 2, 1)
        self.pool = nn.MaxPool2d(3, 2, 1, return_indices=True)

    def forward(self, x: Tensor) -> Tensor:
        y, _ = self.pool(self.conv(x))
        return y


def test_output_stride_32_is_a_copy() -> None:
    model = torchvision.models.resnet18().eval()
    same, report = dilate(model, 32)
    assert same is not model and report.changes == []
    assert same_state_dict(model, same)


# ----------------------------------------------------------------------------- timm

TIMM_FAST = ["resnet18d", "seresnet18", "ecaresnet26t"]
TIMM_SLOW = ["resnet26d", "resnet50d", "seresnext26d_32x4d"]
#: measured beside padkit's by test_timm_identity (printed with -s)
MEASURED: dict[tuple[str, int, int], tuple[float, float]] = {}


def check_timm(name: str) -> None:
    torch.manual_seed(0)
    model = timm_model(name)
    for output_stride in (16, 8):
        dilated, _report = dilate(model, output_stride)
        assert same_state_dict(model, dilated)
        timm_os = timm_model(name, output_stride=output_stride)
        timm_os.load_state_dict(model.state_dict())
        ours = theirs = 0.0
        for size in (64, 72):  # 72: odd sizes reach the dilated stages
            x = torch.randn(1, 3, size, size)
            ratio = 32 // output_stride
            ours = identity_error(timm_features, model, dilated, x, ratio)
            theirs = identity_error(timm_features, model, timm_os, x, ratio)
            MEASURED[(name, output_stride, size)] = (ours, theirs)
            print(f"{name} os={output_stride} {size}px: padkit {ours:.1e}, timm {theirs:.1e}")
            assert ours <= REL, (name, output_stride, size, ours)
        avg_down = any(isinstance(m, nn.AvgPool2d) for m in model.modules())
        gated = any(isinstance(m, (SEModule, EcaModule)) for m in model.modules())
        if output_stride == 8 and (avg_down or gated):
            assert theirs > 1e-3  # not exact: timm's AvgPool2dSame shortcuts, dense gates


@pytest.mark.parametrize("name", TIMM_FAST)
def test_timm_identity(name: str) -> None:
    check_timm(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", TIMM_SLOW)
def test_timm_identity_more(name: str) -> None:
    check_timm(name)


def test_resnet_d_shortcut_pools() -> None:
    """The a-trous form of AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False)."""
    model = timm_model("resnet18d")
    dilated, report = dilate(model, 8)
    first = dilated.get_submodule("layer3.0.downsample.0")
    deeper = dilated.get_submodule("layer4.0.downsample.0")
    assert isinstance(first, PN.AvgPool2d) and isinstance(deeper, PN.AvgPool2d)
    assert first.resolved_padding() == ((0, 1), (0, 1)) and first.stride == (1, 1)
    assert deeper.resolved_padding() == ((0, 2), (0, 2)) and deeper.dilation == (2, 2)
    assert not first.count_include_pad and not deeper.count_include_pad
    assert "layer4.0.downsample.0" in report.paths
    # timm's own os=8 model uses an undilated pool that counts its pad one stage deeper
    timm_os8 = timm_model("resnet18d", output_stride=8)
    assert type(timm_os8.get_submodule("layer4.0.downsample.0")).__name__ == "AvgPool2dSame"


def test_dense_gates_match_timm() -> None:
    """gates='dense' keeps timm's behaviour: the same network as timm's output_stride."""
    torch.manual_seed(0)
    model = timm_model("seresnet18")
    dilated, report = dilate(model, 8, gates="dense")
    assert not any(isinstance(m, LatticeGate) for m in dilated.modules())
    assert any("gates='dense'" in n for n in report.notes)
    timm_os8 = timm_model("seresnet18", output_stride=8)
    timm_os8.load_state_dict(model.state_dict())
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        a, b = timm_features(timm_os8, x), timm_features(dilated, x)
    assert float((a - b).abs().max() / a.abs().max()) <= REL
    assert identity_error(timm_features, model, dilated, x, 4) > 1e-3  # not exact


@pytest.mark.parametrize(
    "build",
    [
        lambda: SEModule(16, rd_ratio=0.25),
        lambda: SEModule(16, rd_ratio=0.25, add_maxpool=True),
        lambda: EffectiveSEModule(16),
        lambda: EcaModule(16),
        lambda: EcaModule(16, use_mlp=True),
    ],
)
def test_lattice_gate_is_the_gate(build: Callable[[], nn.Module]) -> None:
    """Factor 1 reproduces timm's module; factor 2 gates with the lattice's pool."""
    torch.manual_seed(0)
    gate = build().eval()
    x = torch.randn(2, 16, 7, 9)
    with torch.no_grad():
        assert torch.allclose(LatticeGate(gate, _kind(gate), (1, 1))(x), gate(x), atol=1e-6)
        lattice = x[..., ::2, ::2]
        dense = LatticeGate(gate, _kind(gate), (2, 2))(x)
        # the gate is per channel: the lattice of the output is the gate on the lattice
        assert torch.allclose(dense[..., ::2, ::2], gate(lattice), atol=1e-6)
    assert list(LatticeGate(gate, _kind(gate), (2, 2)).state_dict()) == list(gate.state_dict())


def _kind(gate: nn.Module) -> str:
    if isinstance(gate, EcaModule):
        return "eca"
    return "ese" if isinstance(gate, EffectiveSEModule) else "se"


# ----------------------------------------------------------------------------- refusals


def test_refuses_first_unknown_module() -> None:
    # GroupNorm past the output stride takes statistics per phase of the lattice: exact
    gn = torchvision.models.resnet18(norm_layer=lambda c: nn.GroupNorm(2, c)).eval()
    dilated, report = dilate(gn, 8)
    assert any("statistics per phase" in c.detail for c in report.changes)
    assert same_state_dict(gn, dilated)
    assert dilation_error(gn, dilated, torch.randn(1, 3, 67, 75)) <= REL
    batch_stats = torchvision.models.resnet18(
        norm_layer=lambda c: nn.BatchNorm2d(c, track_running_stats=False)
    )
    with pytest.raises(SurgeryError, match=r"'layer3\.0\.bn1' \(BatchNorm2d\).*batch statis"):
        dilate(batch_stats, 8)
    # the stem's blur pool keeps its stride; the first one past the output stride pads by
    # reflection and convolves in code, which padkit cannot re-stride
    blur = timm.create_model("resnet18", pretrained=False, aa_layer=BlurPool2d)
    with pytest.raises(SurgeryError, match=r"cannot handle 'layer3\.0\.aa' \(BlurPool2d\).*conv2d"):
        dilate(blur, 8)


def test_refuses_timm_dilated_average_downsample() -> None:
    timm_os16 = timm.create_model("resnet18d", pretrained=False, output_stride=16)
    with pytest.raises(
        SurgeryError, match=r"layer4\.0\.downsample\.0.*AvgPool2dSame.*pad.*not exact"
    ):
        dilate(timm_os16, 8)


def test_bad_arguments() -> None:
    model = torchvision.models.resnet18()
    with pytest.raises(SurgeryError, match=r"output_stride=12.*accepted: \[1, 2, 4, 8, 16, 32\]"):
        dilate(model, 12)
    with pytest.raises(TypeError, match=r"output_stride must be an int.*'8'"):
        dilate(model, "8")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="output_stride must be an int"):
        dilate(model, True)
    with pytest.raises(PaddingError, match=r"gates must be one of 'lattice', 'dense'.*'avg'"):
        dilate(model, 8, gates="avg")
    with pytest.raises(TypeError, match=r"model must be a torch.nn.Module.*str"):
        dilate("resnet18", 8)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="inplace must be True or False"):
        dilate(model, 8, inplace=1)  # type: ignore[arg-type]


def test_copy_and_inplace() -> None:
    model = torchvision.models.resnet18().eval()
    dilated, _ = dilate(model, 8)
    assert dilated is not model
    assert type(model.layer4[0].conv1) is nn.Conv2d and model.layer4[0].conv1.stride == (2, 2)
    assert dilated.layer4[0].conv1.stride == (1, 1)
    same, report = dilate(model, 16, inplace=True)
    assert same is model and model.layer4[0].conv1.stride == (1, 1)
    assert report.paths[0] == "layer4.0.conv1"
    assert "stride" in report.changes[0].what and "dilation" in report.changes[1].what


# ----------------------------------------------------------------------------- any family

#: float32 rounding grows through deep nets with random BatchNorm statistics; where it
#: dominates (the deep SE nets) the identity is checked in float64 instead
REL64 = 1e-9
SIZES = ((64, 64), (75, 70))  # 75x70: odd sizes and sizes that are not multiples of 32


def check_any(
    model: nn.Module,
    output_strides: tuple[int, ...] = (16, 8),
    *,
    double: bool = False,
    sizes: tuple[tuple[int, int], ...] = SIZES,
) -> list[float]:
    """Dilate at each output stride; every output must satisfy the identity."""
    torch.manual_seed(0)
    model = randomize_bn(model)
    if double:
        model = model.double()
    errors = []
    for output_stride in output_strides:
        dilated, report = dilate(model, output_stride)
        assert same_state_dict(model, dilated)
        own = {id(p) for p in model.parameters()}
        assert not any(id(p) in own for p in dilated.parameters())  # a true copy
        assert report.changes and all(not c.numbers_change for c in report.changes)
        for h, w in sizes:
            dtype = torch.float64 if double else torch.float32
            x = torch.randn(1, 3, h, w, dtype=dtype)
            err = dilation_error(model, dilated, x)
            errors.append(err)
            assert err <= (REL64 if double else REL), (output_stride, (h, w), err)
    return errors


def test_dilation_error_is_the_subsampled_difference() -> None:
    """The public check against a hand-made subsampling, and it sees a wrong dilation."""
    torch.manual_seed(0)
    model = randomize_bn(torchvision.models.resnet18())
    dilated, _ = dilate(model, 8)
    x = torch.randn(1, 3, 70, 66)
    with torch.no_grad():
        ref, out = model(x), dilated(x)
    # logits: the head pools the lattice, so they are equal as they are
    assert dilation_error(model, dilated, x) == pytest.approx(
        float((out - ref).abs().max()) / float(ref.abs().max())
    )
    # trace the original (made of torch layers), then dilate the graph
    a = create_feature_extractor(model, {"layer2": "c3", "layer4": "c5"})
    b, _ = dilate(a, 8)
    with torch.no_grad():
        fa, fb = a(x), b(x)
    by_hand = max(
        float((fb[k][..., :: 4 if k == "c5" else 1, :: 4 if k == "c5" else 1] - fa[k]).abs().max())
        / float(fa[k].abs().max())
        for k in fa
    )
    assert dilation_error(a, b, x) == pytest.approx(by_hand) and by_hand <= REL
    # timm's own dilation of resnet18d is not exact (its average-pool shortcut)
    timm18 = timm_model("resnet18d")
    timm_os8 = timm_model("resnet18d", output_stride=8)
    timm_os8.load_state_dict(timm18.state_dict())
    assert dilation_error(timm18, timm_os8, x) > 1e-3
    with pytest.raises(SurgeryError, match=r"returns 1 tensor\(s\), the dilated model 2"):
        dilation_error(model, a, x)
    with pytest.raises(TypeError, match=r"x must be a tensor of shape \(batch, channels"):
        dilation_error(model, dilated, [1, 2])  # type: ignore[arg-type]


# fastai XResNet: ConvLayer stems, ResBlock with an AvgPool2d(2, ceil_mode=True) shortcut
# (count_include_pad=True with no pads), SE through AdaptiveAvgPool2d in a SequentialEx


@pytest.mark.parametrize("name", ["xresnet18", "xresnet18_deep"])
def test_fastai_xresnet18(name: str) -> None:
    """xresnet18_deep has two more stages: output stride 128, traced as such."""
    check_any(getattr(xresnet, name)())


def test_fastai_xse_resnext18() -> None:
    check_any(xresnet.xse_resnext18(), double=True)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["xresnet50", "xresnext50", "xresnet50_deep"])
def test_fastai_more(name: str) -> None:
    check_any(getattr(xresnet, name)())


@pytest.mark.slow
def test_fastai_xse_resnet50() -> None:
    check_any(xresnet.xse_resnet50(), double=True)


# smp encoders (torchvision ResNet subclasses returning a list of six feature maps)


def test_smp_encoder() -> None:
    check_any(smp.encoders.get_encoder("resnet18", weights=None))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet34", "resnet50"])
def test_smp_encoders_more(name: str) -> None:
    check_any(smp.encoders.get_encoder(name, weights=None))


def test_smp_deeplab_exact_encoder() -> None:
    """padkit's dilation as the exact replacement for smp's make_dilated in DeepLabV3."""
    torch.manual_seed(0)
    deeplab = smp.DeepLabV3(encoder_name="resnet18", encoder_weights=None, classes=3).eval()
    randomize_bn(deeplab)
    os32 = smp.encoders.get_encoder("resnet18", weights=None)
    os32.load_state_dict(deeplab.encoder.state_dict())
    os32.eval()
    exact, _ = dilate(os32, 8)
    x = torch.randn(1, 3, 72, 72)
    smp_error = dilation_error(os32, deeplab.encoder, x)
    assert dilation_error(os32, exact, x) <= REL < 1e-2 < smp_error
    x = torch.randn(1, 3, 96, 96)  # smp's models take multiples of 32
    with torch.no_grad():
        before = deeplab(x)
        deeplab.encoder = exact
        after = deeplab(x)
    assert before.shape == after.shape == (1, 3, 96, 96)


# torchvision beyond ResNet; a create_feature_extractor graph


def test_torchvision_feature_extractor() -> None:
    nodes = {"layer1": "c2", "layer3": "c4", "layer4": "c5"}
    check_any(create_feature_extractor(torchvision.models.resnet18(), nodes))


def test_torchvision_mobilenet_v2() -> None:
    """Its forward pools with F.adaptive_avg_pool2d: the model becomes a traced copy."""
    errors = check_any(torchvision.models.mobilenet_v2())
    assert max(errors) <= REL
    dilated, report = dilate(torchvision.models.mobilenet_v2(), 8)
    assert report.changes[0].path == "" and type(dilated).__name__ == "MobileNetV2"
    assert isinstance(dilated, torchvision.models.MobileNetV2)
    with pytest.raises(SurgeryError, match=r"'<root>' \(MobileNetV2\).*inplace=True"):
        dilate(torchvision.models.mobilenet_v2(), 8, inplace=True)


# timm families


def small_res2net() -> nn.Module:
    return timm.models.resnet.ResNet(
        block=Bottle2neck, layers=[1, 1, 1, 1], base_width=26, block_args={"scale": 4}
    )


TIMM_FAMILIES_FAST = ["regnetx_002", "resnest14d", "efficientnet_b0", "features_only"]
TIMM_FAMILIES_SLOW = ["res2net50_14w_8s", "mobilenetv3_large_100", "regnety_002", "resnest26d"]


def timm_build(name: str) -> nn.Module:
    if name == "features_only":
        return timm.create_model("resnet18d", pretrained=False, features_only=True)
    return timm.create_model(name, pretrained=False)


@pytest.mark.parametrize("name", TIMM_FAMILIES_FAST)
def test_timm_families(name: str) -> None:
    check_any(timm_build(name))


def test_timm_res2net_block() -> None:
    check_any(small_res2net())


@pytest.mark.slow
@pytest.mark.parametrize("name", TIMM_FAMILIES_SLOW)
def test_timm_families_more(name: str) -> None:
    check_any(timm_build(name))


def test_timm_cbam() -> None:
    """CBAM: channel attention pools the map in code (traced), spatial attention pools
    over channels (position-wise) and convolves (dilated)."""
    check_any(timm.create_model("resnet18", pretrained=False, block_args={"attn_layer": "cbam"}))


def test_timm_features_only_reductions() -> None:
    model = timm.create_model("resnet18", pretrained=False, features_only=True)
    dilated, _ = dilate(model, 8)
    assert dilated.feature_info.reduction() == [2, 4, 8, 8, 8]


# a CNN of one's own, with code in its forward


class OwnNet(nn.Module):
    """Functional activations, a residual sum, a channel split, a gate pooled in code."""

    def __init__(self, tail: str = "none") -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, 2, 1)
        self.pool = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.a = nn.Conv2d(8, 8, 3, 1, 1)
        self.down = nn.Conv2d(8, 16, (3, 1), (2, 2), (1, 0))
        self.b = nn.Conv2d(8, 8, 5, 1, 2, groups=8)
        self.fc = nn.Conv2d(16, 16, 1)
        self.bn = nn.BatchNorm2d(16)
        self.tail = tail

    def forward(self, x: Tensor) -> Tensor:
        x = self.pool(torch.relu(self.stem(x)))
        x = x + F.gelu(self.a(x))
        x = F.silu(self.down(x))
        left, right = x.chunk(2, dim=1)
        x = torch.cat([left, self.b(right)], dim=1)
        gate = torch.sigmoid(self.fc(x.mean((2, 3), keepdim=True) + x.amax((2, 3), True)))
        x = self.bn(x * gate)
        if self.tail == "pool":
            x = F.avg_pool2d(x, 2)
        if self.tail == "upsample":
            x = F.interpolate(x, scale_factor=2.0, mode="bilinear")
        if self.tail == "crop":
            x = x[..., 1:, 1:]
        return x


def test_own_cnn() -> None:
    errors = check_any(OwnNet(), (4, 2, 1), sizes=((32, 32), (37, 29)))
    assert max(errors) <= REL


@pytest.mark.parametrize(
    ("tail", "why"),
    [
        ("pool", r"avg_pool2d\(\).*only conv and pool modules are re-strided"),
        ("upsample", r"interpolate\(\).*lattice factor 2"),
        ("crop", r"__getitem__\(\).*changes the spatial sizes"),
    ],
)
def test_own_cnn_refusals(tail: str, why: str) -> None:
    model = OwnNet(tail)
    with pytest.raises(
        SurgeryError, match=r"cannot handle '<root>' \(OwnNet\): its forward calls " + why
    ):
        dilate(model, 4)
    if tail != "pool":  # at the stride the code sees, nothing changes: accepted
        dilate(model, 8)


def test_dilating_twice() -> None:
    """A dilated model without global reads can be dilated further; one whose pools read
    an earlier lattice is refused, with the way out."""
    torch.manual_seed(0)
    encoder = randomize_bn(smp.encoders.get_encoder("resnet18", weights=None))
    twice, _ = dilate(dilate(encoder, 16)[0], 8)
    x = torch.randn(1, 3, 70, 75)
    assert dilation_error(encoder, twice, x) <= REL
    os16, _ = dilate(timm_model("resnet18d"), 16)
    with pytest.raises(SurgeryError, match=r"'global_pool\.pool'.*dilate the original model"):
        dilate(os16, 8)


def test_feature_extractor_built_from_a_dilated_model() -> None:
    """torch.fx traces a dilated model (padkit layers, lattice reads) into an extractor that
    returns the dilated model's own feature maps."""
    from torchvision.models.feature_extraction import create_feature_extractor

    model = torchvision.models.resnet18(weights=None).eval()
    dilated, _ = dilate(model, 8)
    extractor = create_feature_extractor(dilated, {"layer4": "out", "fc": "logits"})
    x = torch.randn(1, 3, 64, 64)
    feats = extractor(x)
    with torch.no_grad():
        want = dilated.layer4(
            dilated.layer3(
                dilated.layer2(
                    dilated.layer1(dilated.maxpool(dilated.relu(dilated.bn1(dilated.conv1(x)))))
                )
            )
        )
        torch.testing.assert_close(feats["out"], want, rtol=0, atol=0)
        torch.testing.assert_close(feats["logits"], dilated(x), rtol=0, atol=0)


# conv subclasses, the stride finder, and tools that find layers by class name


class PlainSubclass(nn.Conv2d):
    """A conv subclass that adds nothing: torch's forward."""


class WeightStandardised(nn.Conv2d):
    """Hugging Face BiT's weight standardisation, written out: the forward transforms the
    weight and calls the conv with the module's own stride/padding/dilation/groups."""

    def forward(self, x: Tensor) -> Tensor:
        w = F.batch_norm(
            self.weight.reshape(1, self.out_channels, -1), None, None, training=True, eps=1e-8
        ).reshape_as(self.weight)
        return F.conv2d(x, w, self.bias, self.stride, self.padding, self.dilation, self.groups)


def test_conv_subclass_reproducer() -> None:
    """Strided conv subclasses count as strides, and are re-strided in place."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1),
        *[PlainSubclass(8, 8, 3, stride=2, padding=1) for _ in range(3)],
    ).eval()
    with pytest.raises(SurgeryError, match=r"accepted: \[1, 2, 4, 8, 16\]"):
        dilate(model, 32)
    for output_stride in (8, 4):
        dilated, _ = dilate(model, output_stride)
        assert all(type(m) is PlainSubclass for m in list(dilated)[1:])
        assert same_state_dict(model, dilated)
        for h, w in SIZES:
            assert dilation_error(model, dilated, torch.randn(1, 3, h, w)) <= REL


def test_weight_standardised_subclasses() -> None:
    """timm's StdConv2d and a Hugging Face style weight-standardised conv: the weight
    transform is kept, the a-trous identity holds, each module keeps its class."""
    from timm.layers import StdConv2d

    torch.manual_seed(0)
    model = nn.Sequential(
        WeightStandardised(3, 8, 3, stride=2, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        StdConv2d(8, 8, 3, stride=2, padding=1),
        nn.ReLU(),
        WeightStandardised(8, 8, 3, stride=2, padding=1),
        StdConv2d(8, 8, 3, stride=2, padding=1),
        WeightStandardised(8, 8, 3, padding=2, dilation=2),
    )
    model = randomize_bn(model)
    for output_stride in (8, 4):
        dilated, report = dilate(model, output_stride)
        assert [type(m) for m in dilated] == [type(m) for m in model]
        assert report.changes
        for h, w in SIZES:
            assert dilation_error(model, dilated, torch.randn(1, 3, h, w)) <= REL
    os4, _ = dilate(model, 4)
    assert os4[6].stride == (1, 1) and os4[6].dilation == (2, 2)
    assert os4[7].dilation == (8, 8) and os4[7].padding == (8, 8)


def test_finder_never_reports_a_stride_the_model_lacks() -> None:
    """A global pool written as a huge-kernel ceil-mode AvgPool2d (Hugging Face
    EfficientNet's pooler) adds no stride; group norm past the output stride is made exact
    (statistics per phase of the lattice), not refused as an unreachable stride."""
    from functools import partial

    from timm.layers import GroupNormAct, StdConv2d
    from timm.models.resnetv2 import ResNetV2

    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, 2, 1), nn.Conv2d(8, 8, 3, 2, 1), nn.AvgPool2d(1280, ceil_mode=True)
    ).eval()
    with pytest.raises(
        SurgeryError, match=r"accepted: \[1, 2, 4\] \(its current output stride is 4\)"
    ):
        dilate(net, 8)
    dilated, _ = dilate(net, 2)
    assert dilation_error(net, dilated, torch.randn(1, 3, 23, 18)) <= REL
    bit = ResNetV2(
        layers=[1, 1, 1, 1],
        channels=(16, 32, 64, 128),
        conv_layer=partial(StdConv2d, eps=1e-8),
        norm_layer=partial(GroupNormAct, num_groups=4),
        stem_type="fixed",
        num_classes=0,
    ).eval()
    # group norm past the output stride: statistics per phase of the lattice, exact
    dilated, report = dilate(bit, 16)
    assert any(c.path == "stages.3.blocks.0.norm3" for c in report.changes)
    assert dilation_error(bit, dilated, torch.randn(1, 3, 67, 75)) <= REL


def test_fastai_create_body_cuts_a_dilated_xresnet_where_it_cuts_the_original() -> None:
    """The lattice-reading global pool is an nn.AdaptiveAvgPool2d named AdaptiveAvgPool2d,
    so create_body (the last child whose class name ends in Pool2d) cuts at the same place,
    also after a deepcopy."""
    import copy

    from fastai.vision.learner import create_body

    torch.manual_seed(0)
    model = randomize_bn(xresnet.xresnet18())
    dilated, _ = dilate(model, 8)
    pool = dilated[-4]
    assert isinstance(pool, nn.AdaptiveAvgPool2d) and type(pool).__name__ == "AdaptiveAvgPool2d"
    x = torch.randn(1, 3, 64, 64)
    body = create_body(copy.deepcopy(model), pretrained=False)
    body_d = create_body(copy.deepcopy(dilated), pretrained=False)
    assert len(body_d) == len(body)
    with torch.no_grad():
        a, b = body(x), body_d(x)
    assert b.shape[:2] == a.shape[:2] == (1, 512)
    assert float((b[..., ::4, ::4] - a).abs().max()) <= REL * float(a.abs().max())
    again = copy.deepcopy(dilated)
    assert type(again[-4]).__name__ == "AdaptiveAvgPool2d"
    assert dilation_error(model, again, x) <= REL
