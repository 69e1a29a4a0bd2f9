"""dilate keeps every join's inputs equal on the dense grid (issue 45), against the a-trous
identity on random residual CNNs.

The oracle is the undilated model: in eval mode each feature map of the dilated model,
subsampled by hand at ``[..., ::r, ::r]`` (``r`` = the map's stride over the output stride,
known from how the model was built), must equal the original's, and its dense length
``L`` must lie in ``(r*(m-1), r*m]`` (``m`` the original length). The models mix what makes
the branches of a block differ in dense length once a stride becomes dilation: patchify
convs (``Conv2d(C, C, 2, stride=2)``), ResNet-D and fastai average-pool shortcuts
(``ceil_mode``, with and without ``count_include_pad``), ceil-mode and padded max pools,
counted-pad average pools, strided 1x1 shortcuts, joined by ``+``, a gated ``*`` or a
channel ``cat``, with 'same' convs (dilated too) and stride-1 max pools in between. Each
model is dilated to output strides 16 and 8 and run at three sizes, one of them giving
odd map sizes in the last stage. The default run has a fast slice; ``-m slow`` runs 200.
"""

from __future__ import annotations

import random

import pytest
import torch
from torch import Tensor, nn

from padkit.surgery import SurgeryError, dilate

torch.set_num_threads(1)
REL64 = 1e-9
SIZES = ((64, 64), (96, 160), (160, 96))  # 96 -> 3 and 160 -> 5 in the last stage


class Block(nn.Module):
    """A residual block: ``main(x)`` and ``short(x)`` joined by ``+``, ``*`` or ``cat``."""

    def __init__(self, main: nn.Module, short: nn.Module, join: str, channels: int) -> None:
        super().__init__()
        self.main = main
        self.short = short
        self.join = join
        self.fuse = nn.Conv2d(2 * channels, channels, 1) if join == "cat" else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        a, b = self.main(x), self.short(x)
        if self.join == "mul":
            return a * torch.sigmoid(b)
        if self.join == "cat":
            return self.fuse(torch.cat([a, b], 1))  # type: ignore[no-any-return]
        return a + b


class Net(nn.Module):
    """A stem of stride 4 and three stages of stride 2; returns the stride-16 and
    stride-32 maps."""

    def __init__(self, stem: nn.Module, stages: list[nn.Module]) -> None:
        super().__init__()
        self.stem = stem
        self.stages = nn.ModuleList(stages)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        x = self.stem(x)
        feats = []
        for stage in self.stages:
            x = stage(x)
            feats.append(x)
        return feats[-2], feats[-1]


def _stem(rng: random.Random, c: int) -> nn.Module:
    kind = rng.choice(["conv-max", "patchify", "conv7-ceil"])
    if kind == "conv-max":
        return nn.Sequential(
            nn.Conv2d(3, c, 3, 2, 1), nn.BatchNorm2d(c), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
        )
    if kind == "patchify":
        return nn.Sequential(nn.Conv2d(3, c, 4, stride=4), nn.BatchNorm2d(c))
    return nn.Sequential(nn.Conv2d(3, c, 7, 2, 3), nn.ReLU(), nn.MaxPool2d(2, 2, ceil_mode=True))


def _main(rng: random.Random, c: int, c2: int) -> nn.Module:
    kind = rng.choice(["conv3", "patchify", "bottleneck", "maxdown"])
    same = nn.Conv2d(c2, c2, rng.choice([3, 5]), padding="same", dilation=rng.choice([1, 2]))
    if kind == "conv3":
        return nn.Sequential(nn.Conv2d(c, c2, 3, 2, 1), nn.BatchNorm2d(c2), nn.ReLU(), same)
    if kind == "patchify":
        return nn.Sequential(
            nn.Conv2d(c, c2, 2, stride=2), nn.BatchNorm2d(c2), nn.ReLU(), nn.Conv2d(c2, c2, 3, 1, 1)
        )
    if kind == "bottleneck":
        return nn.Sequential(
            nn.Conv2d(c, c2, 1),
            nn.ReLU(),
            nn.Conv2d(c2, c2, 3, 2, 1),
            nn.ReLU(),
            nn.Conv2d(c2, c2, 1),
        )
    return nn.Sequential(nn.MaxPool2d(2, 2), nn.Conv2d(c, c2, 1), same)


def _shortcut(rng: random.Random, c: int, c2: int) -> nn.Module:
    kind = rng.choice(["conv1", "resnet-d", "fastai", "max-ceil", "max3", "patchify", "avg-pad"])
    pool: nn.Module
    if kind == "conv1":
        return nn.Conv2d(c, c2, 1, 2)
    if kind == "patchify":
        return nn.Conv2d(c, c2, 2, stride=2)
    if kind == "resnet-d":
        pool = nn.AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False)
    elif kind == "fastai":
        pool = nn.AvgPool2d(2, ceil_mode=True)
    elif kind == "max-ceil":
        pool = nn.MaxPool2d(2, 2, ceil_mode=True)
    elif kind == "max3":
        pool = nn.MaxPool2d(3, 2, 1)
    else:
        pool = nn.AvgPool2d(3, 2, 1)  # counted pads
    return nn.Sequential(pool, nn.Conv2d(c, c2, 1), nn.BatchNorm2d(c2))


def _plain(rng: random.Random, c: int) -> nn.Module:
    """A stride-1 block: 'same' convs or a stride-1 max pool, and an identity shortcut."""
    if rng.random() < 0.3:
        main: nn.Module = nn.Sequential(nn.MaxPool2d(3, 1, 1), nn.Conv2d(c, c, 1))
    else:
        k, d = rng.choice([3, 5]), rng.choice([1, 2])
        main = nn.Sequential(nn.Conv2d(c, c, k, padding="same", dilation=d), nn.ReLU())
    return Block(main, nn.Identity(), "add", c)


def random_net(seed: int) -> nn.Module:
    """A random residual CNN of output stride 32 that runs at every multiple of 32."""
    rng = random.Random(seed)
    c = rng.choice([4, 6])
    stem = _stem(rng, c)
    stages: list[nn.Module] = []
    for _ in range(3):
        c2 = c + rng.choice([0, 2])
        join = rng.choice(["add", "add", "mul", "cat"])
        blocks = [Block(_main(rng, c, c2), _shortcut(rng, c, c2), join, c2)]
        if rng.random() < 0.4:
            blocks.append(_plain(rng, c2))
        stages.append(nn.Sequential(*blocks))
        c = c2
    net = Net(stem, stages)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.2)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
    return net.double().eval()


def check_identity(model: nn.Module, seed: int) -> None:
    """At output strides 16 and 8, every map subsampled at its lattice is the original's,
    and its dense length lies in the lattice window."""
    g = torch.Generator().manual_seed(seed)
    for output_stride in (16, 8):
        dilated, _ = dilate(model, output_stride)
        for h, w in SIZES:
            x = torch.randn(2, 3, h, w, generator=g, dtype=torch.float64)
            with torch.no_grad():
                refs, outs = model(x), dilated(x)
            for stride, ref, out in zip((16, 32), refs, outs):
                r = max(1, stride // output_stride)
                for m, n in zip(ref.shape[2:], out.shape[2:]):
                    assert r * (m - 1) < n <= r * m, (seed, output_stride, (h, w), ref.shape)
                sub = out[..., ::r, ::r]
                assert sub.shape == ref.shape, (seed, output_stride, (h, w))
                err = float((sub - ref).abs().max() / ref.abs().max())
                assert err <= REL64, (seed, output_stride, (h, w), err)


@pytest.mark.parametrize("seed", range(20))
def test_random_residual_cnns(seed: int) -> None:
    check_identity(random_net(seed), seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(20, 220))
def test_random_residual_cnns_long(seed: int) -> None:
    check_identity(random_net(seed), seed)


# ----------------------------------------------------------------------------- issue 45


def patchify_resnet_d(c: int = 8) -> nn.Module:
    """The reproducer: a stem of stride 2, then blocks whose main branch is a patchify
    conv and whose shortcut is the ResNet-D pool and a 1x1 conv, summed."""

    def block() -> Block:
        main = nn.Sequential(nn.Conv2d(c, c, 2, stride=2), nn.ReLU(), nn.Conv2d(c, c, 3, 1, 1))
        short = nn.Sequential(
            nn.AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False), nn.Conv2d(c, c, 1)
        )
        return Block(main, short, "add", c)

    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, c, 3, 2, 1), block(), block()).eval()


def test_patchify_and_resnet_d_shortcut() -> None:
    """Both branches were 31 and 32 wide at 64x64 after dilate(m, 2); now 32, and exact."""
    model = patchify_resnet_d()
    dilated, report = dilate(model, 2)
    first = dilated.get_submodule("1.main.0")
    assert first.resolved_padding() == ((0, 1), (0, 1))  # type: ignore[operator]
    assert "join" in report.changes[0].detail
    for n in (64, 96, 128):
        x = torch.randn(1, 3, n, n)
        with torch.no_grad():
            mid_ref, mid = model[1](model[0](x)), dilated[1](dilated[0](x))
            ref, out = model(x), dilated(x)
        assert mid.shape[2:] == (n // 2, n // 2)  # the dense map keeps the stem's size
        assert out.shape[2:] == (n // 2, n // 2)
        torch.testing.assert_close(mid[..., ::2, ::2], mid_ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out[..., ::4, ::4], ref, rtol=1e-5, atol=1e-5)


class OwnForwardConv(nn.Conv2d):
    """A conv subclass with its own forward (re-strided in place, symmetric pads only)."""

    def forward(self, x: Tensor) -> Tensor:
        return nn.functional.conv2d(
            x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups
        )


def test_refuses_a_join_it_cannot_even_out() -> None:
    """A patchify conv subclass that passes symmetric pads cannot grow at one end: the join
    is refused by name, and inplace=True leaves the model as it was."""
    c = 4
    main = nn.Sequential(OwnForwardConv(c, c, 2, stride=2), nn.ReLU())
    short = nn.Sequential(
        nn.AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False), nn.Conv2d(c, c, 1)
    )
    model = nn.Sequential(nn.Conv2d(3, c, 3, 2, 1), Block(main, short, "add", c)).eval()
    before = dict(model.named_modules())
    with pytest.raises(
        SurgeryError,
        match=r"'1' \(Block\): its add\(\) joins maps of dense lengths \[31, 32\] .*"
        r"'1\.main\.0'.*cannot get \(1, 1\) more end cells per axis: its own forward",
    ):
        dilate(model, 2, inplace=True)
    assert dict(model.named_modules()) == before
    assert model[1].main[0].stride == (2, 2)


class SizeQuirk(nn.Module):
    """Computes other numbers at other map sizes: no dilation can keep it exact."""

    def forward(self, x: Tensor) -> Tensor:
        return x * 2 if x.shape[-1] in (2, 10) else x


def test_self_check_names_the_module_that_differs() -> None:
    """The self-check runs the dilated model at the probe sizes against the original: a
    module whose numbers change with the map's size is refused by name."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, 2, 1),
        nn.Conv2d(4, 4, 3, 2, 1),
        nn.Conv2d(4, 4, 3, 2, 1),
        nn.Conv2d(4, 4, 3, 2, 1),
        nn.Conv2d(4, 4, 3, 2, 1),
        SizeQuirk(),
        nn.Conv2d(4, 4, 3, 1, 1),
    ).eval()
    with pytest.raises(
        SurgeryError,
        match=r"'5' \(SizeQuirk\): the dilated model's output 0 .*is not the original's.*"
        r"first that differs",
    ):
        dilate(model, 8)
