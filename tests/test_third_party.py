"""padkit layers inside code padkit did not write.

Each case runs real third-party code (segmentation_models_pytorch, torch.nn.utils fusion and
parametrizations, torch.ao fusion, torch.fx and torchvision's feature extraction, TorchScript,
torch.compile, dtype/layout moves) over padkit layers, and compares the result with the same
computation written with torch alone: an explicit ``F.pad`` plus the unpadded op, or plain
torch layers configured the same way.
"""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
import torch.nn.functional as F
from oracles import rule_pads
from segmentation_models_pytorch.encoders._utils import replace_strides_with_dilation
from torch import nn
from torch.ao.quantization import fuse_modules
from torch.nn.utils import parametrizations
from torch.nn.utils.fusion import fuse_conv_bn_eval
from torchvision.models.feature_extraction import create_feature_extractor

import padkit.nn as pn

torch.manual_seed(0)


def f_pad(pairs: list[tuple[int, int]]) -> list[int]:
    out: list[int] = []
    for lo, hi in reversed(pairs):
        out += [lo, hi]
    return out


def ref_same_conv(
    x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, s: int, d: int = 1, groups: int = 1
) -> torch.Tensor:
    """TF SAME from JAX's pad rule, then the unpadded torch conv."""
    k = w.shape[-1]
    pairs = [rule_pads("same", n, k, s, d) for n in x.shape[2:]]
    return F.conv2d(F.pad(x, f_pad(pairs)), w, b, s, 0, d, groups)


def bn(c: int) -> nn.BatchNorm2d:
    layer = nn.BatchNorm2d(c)
    layer.running_mean.normal_()
    layer.running_var.uniform_(0.5, 2.0)
    layer.weight.data.uniform_(0.5, 1.5)
    layer.bias.data.normal_()
    return layer


class Net(nn.Module):
    """A small backbone, not a Sequential: stem, a strided block and a head."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = pn.Conv2d(3, 8, 3, stride=2, padding="same", bias=False)
        self.bn = bn(8)
        self.pool = pn.MaxPool2d(3, 2, padding="same")
        self.conv = pn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.dw = pn.Conv2d(8, 8, 5, stride=1, padding="same", groups=8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.stem(x)))
        x = self.pool(x)
        return self.dw(torch.relu(self.conv(x)))


def torch_net(net: Net, x: torch.Tensor) -> torch.Tensor:
    """Net's computation in torch alone."""
    y = ref_same_conv(x, net.stem.weight, None, 2)
    y = torch.relu(
        F.batch_norm(
            y,
            net.bn.running_mean,
            net.bn.running_var,
            net.bn.weight,
            net.bn.bias,
            False,
            0.0,
            net.bn.eps,
        )
    )
    pairs = [rule_pads("same", n, 3, 2) for n in y.shape[2:]]
    y = F.max_pool2d(F.pad(y, f_pad(pairs), value=-float("inf")), 3, 2)
    y = torch.relu(F.conv2d(y, net.conv.weight, net.conv.bias, tuple(net.conv.stride), 1))
    return ref_same_conv(y, net.dw.weight, net.dw.bias, 1, 1, 8)


# ----------------------------------------------------------------------------- smp


def test_smp_replace_strides_with_dilation() -> None:
    layer = nn.Sequential(pn.Conv2d(4, 4, 3, stride=2, padding=1), nn.ReLU())
    x = torch.randn(1, 4, 16, 16)
    layer(x)  # the first call remembers stride 2 for this shape
    replace_strides_with_dilation(layer, 2)
    ref = nn.Conv2d(4, 4, 3, padding=2, dilation=2)
    ref.load_state_dict(layer[0].state_dict())
    out = layer(x)
    assert out.shape[-2:] == (16, 16)
    torch.testing.assert_close(out, torch.relu(ref(x)), rtol=0, atol=1e-6)


# ----------------------------------------------------------------------------- fusion


def test_fuse_conv_bn_eval_keeps_the_padding() -> None:
    net = Net().eval()
    x = torch.randn(2, 3, 17, 18)
    fused = fuse_conv_bn_eval(net.stem, net.bn)
    assert isinstance(fused, pn.Conv2d)
    want = net.bn(ref_same_conv(x, net.stem.weight, None, 2))
    torch.testing.assert_close(fused(x), want, rtol=1e-5, atol=1e-5)


def test_torch_ao_fuse_modules_on_padkit_conv_bn_relu() -> None:
    model = nn.Sequential(pn.Conv2d(3, 4, 3, stride=2, padding="same"), bn(4), nn.ReLU()).eval()
    x = torch.randn(2, 3, 9, 10)
    want = torch.relu(model[1](ref_same_conv(x, model[0].weight, model[0].bias, 2)))
    fused = fuse_modules(copy.deepcopy(model), [["0", "1", "2"]])
    assert isinstance(fused[1], nn.Identity) and isinstance(fused[2], nn.Identity)
    torch.testing.assert_close(fused(x), want, rtol=1e-5, atol=1e-5)
    pair = fuse_modules(copy.deepcopy(model), [["0", "1"]])
    torch.testing.assert_close(pair(x), want, rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- parametrizations


def test_weight_norm_parametrization() -> None:
    conv = parametrizations.weight_norm(pn.Conv2d(3, 4, 3, stride=2, padding="same"))
    x = torch.randn(1, 3, 8, 9)
    for _ in range(2):
        torch.testing.assert_close(
            conv(x), ref_same_conv(x, conv.weight, conv.bias, 2), rtol=0, atol=1e-6
        )
    conv(x).sum().backward()  # gradients reach the parametrization's tensors
    assert conv.parametrizations.weight.original0.grad is not None


def test_spectral_norm_parametrization() -> None:
    conv = parametrizations.spectral_norm(pn.Conv2d(3, 4, 3, padding=((0, 2), (1, 1))))
    conv.eval()
    x = torch.randn(1, 3, 8, 9)
    want = F.conv2d(F.pad(x, [1, 1, 0, 2]), conv.weight, conv.bias)
    torch.testing.assert_close(conv(x), want, rtol=0, atol=1e-6)


# ----------------------------------------------------------------------------- tracing


def test_fx_symbolic_trace_of_a_non_sequential_model() -> None:
    net = Net().eval()
    graph = torch.fx.symbolic_trace(net)
    for size in ((33, 30), (16, 16)):
        x = torch.randn(2, 3, *size)
        torch.testing.assert_close(graph(x), torch_net(net, x), rtol=1e-5, atol=1e-5)


def test_torchvision_create_feature_extractor() -> None:
    net = Net().eval()
    extractor = create_feature_extractor(net, return_nodes={"pool": "pooled", "dw": "out"})
    x = torch.randn(1, 3, 31, 29)
    feats = extractor(x)
    torch.testing.assert_close(feats["out"], torch_net(net, x), rtol=1e-5, atol=1e-5)
    assert feats["pooled"].shape[-2:] == (8, 8)  # ceil(ceil(31/2)/2), ceil(ceil(29/2)/2)


def test_torch_compile_after_mutation() -> None:
    net = Net().eval()
    x = torch.randn(1, 3, 20, 21)
    net(x)
    net.conv.stride = (1, 1)
    compiled = torch.compile(net, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(x), torch_net(net, x), rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- moves and copies


def test_dtype_and_layout_moves_after_the_first_call() -> None:
    net = Net().eval()
    x = torch.randn(2, 3, 19, 20)
    net(x)
    net64 = copy.deepcopy(net).to(torch.float64)
    torch.testing.assert_close(net64(x.double()), torch_net(net64, x.double()), rtol=0, atol=1e-12)
    net_cl = copy.deepcopy(net).to(memory_format=torch.channels_last)
    x_cl = x.to(memory_format=torch.channels_last)
    torch.testing.assert_close(net_cl(x_cl), torch_net(net, x), rtol=1e-5, atol=1e-5)
    net16 = copy.deepcopy(net).to(torch.bfloat16)
    got = net16(x.bfloat16()).float()
    torch.testing.assert_close(got, torch_net(net, x), rtol=0.1, atol=0.1)


def test_load_state_dict_after_the_first_call_updates_frozen_kernels() -> None:
    # a depthwise stride-2 'same' conv runs a zero-extended kernel cached for frozen weights
    conv = pn.Conv2d(8, 8, 3, stride=2, padding="same", groups=8).eval()
    x = torch.randn(1, 8, 16, 16)
    with torch.no_grad():
        conv(x)
        conv(x)
        assert conv.plan(x.shape).strategy == "zero_extend"
        other = nn.Conv2d(8, 8, 3, groups=8)
        conv.load_state_dict(other.state_dict())
        want = ref_same_conv(x, other.weight, other.bias, 2, 1, 8)
        torch.testing.assert_close(conv(x), want, rtol=0, atol=1e-6)


def test_pickle_and_state_dict_round_trip_after_mutation() -> None:
    net = Net().eval()
    x = torch.randn(1, 3, 18, 18)
    net(x)
    net.pool.kernel_size = [2, 2]
    net.conv.padding = ((0, 1), (1, 0))
    want = net(x)
    clone = pickle.loads(pickle.dumps(net))
    torch.testing.assert_close(clone(x), want, rtol=0, atol=0)
    copied = copy.deepcopy(net)
    torch.testing.assert_close(copied(x), want, rtol=0, atol=0)
    # the mutated padding is the layer's own: a fresh layer given it computes the same
    y = torch.randn(1, 8, 5, 5)
    fresh = pn.Conv2d(8, 8, 3, stride=2, padding=((0, 1), (1, 0)))
    fresh.load_state_dict(net.conv.state_dict())
    torch.testing.assert_close(fresh(y), net.conv(y), rtol=0, atol=0)


@pytest.mark.parametrize("layer", [pn.Conv2d(2, 2, 3, padding="same"), pn.AvgPool2d(3, 1, 1)])
def test_half_after_the_first_call(layer: nn.Module) -> None:
    x = torch.randn(1, 2, 8, 8)
    layer(x)
    half = copy.deepcopy(layer).to(torch.float16)
    got = half(x.half()).float()
    torch.testing.assert_close(got, layer(x), rtol=1e-2, atol=1e-2)
