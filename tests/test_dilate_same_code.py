"""TF 'same' pads computed in code (from ``x.shape``, with ``math.ceil``), under ``convert``
and ``dilate`` (issue 39): a hand-written ``Conv2dSame``-style layer in a residual net with
strided 1x1 shortcuts, timm's ``tf_`` models (``Conv2dSame``, ``MaxPool2dSame``), a static
pad read by a 'same' pad (a chain), and a pad in code whose branch ends short of its join.

Oracles: the original model on the same input (convert, exactly); the original model
against the dilated one subsampled at its lattice ``[..., ::r, ::r]`` (dilate), at input
sizes of every parity (67x53 among them); ``F.pad`` then the unpadded torch op
(:class:`padkit.Padding` with ``pre``).

On the lattice of factor ``f`` the dense map of a layer whose stride ``s`` became dilation
must lie in ``(f*s*(m-1), f*s*m]``; a 'same' pad at the original's size ``ceil(n/f)``
scaled by ``f`` lands at a place in that window that varies with ``n``, beside a strided
1x1 shortcut that always ends at ``n``: dilate re-derives the pad so that it ends at ``n``
too, at every size.
"""

from __future__ import annotations

import io
import math
import pickle
import warnings
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import padkit.functional as PF
import padkit.nn as PN
from padkit import Padding, PaddingError
from padkit.surgery import SurgeryError, convert, dilate

torch.set_num_threads(1)

SIZES = ((64, 64), (67, 53), (96, 80), (65, 70))


# ----------------------------------------------------------------------------- models


class SameConv(nn.Conv2d):
    """TF 'same' written by hand: pads from ``x.shape`` with ``math.ceil``, then F.conv2d."""

    def forward(self, x: Tensor) -> Tensor:
        ih, iw = x.shape[-2:]
        kh, kw = self.weight.shape[-2:]
        sh, sw = self.stride
        dh, dw = self.dilation
        ph = max((math.ceil(ih / sh) - 1) * sh + (kh - 1) * dh + 1 - ih, 0)
        pw = max((math.ceil(iw / sw) - 1) * sw + (kw - 1) * dw + 1 - iw, 0)
        x = F.pad(x, [pw // 2, pw - pw // 2, ph // 2, ph - ph // 2])
        return F.conv2d(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)


class SameBlock(nn.Module):
    """``relu(conv2(relu(bn(conv1(x))))) + shortcut(x)``; the shortcut is a strided 1x1
    conv (no pad), the main branch 'same' convs in code."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = SameConv(cin, cout, 3, stride)
        self.bn = nn.BatchNorm2d(cout)
        self.conv2 = SameConv(cout, cout, 3, 1)
        self.short = nn.Conv2d(cin, cout, 1, stride)

    def forward(self, x: Tensor) -> Tensor:
        main = F.relu(self.conv2(F.relu(self.bn(self.conv1(x)))))
        return main + self.short(x)


class SameNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = SameConv(3, 8, 3, 2)
        self.layers = nn.Sequential(
            SameBlock(8, 8, 2), SameBlock(8, 16, 2), SameBlock(16, 16, 2), SameBlock(16, 16, 2)
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.layers(F.relu(self.stem(x)))  # type: ignore[no-any-return]


def _randomize(model: nn.Module) -> nn.Module:
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.running_mean.normal_(0, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                if m.affine:
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.normal_(0, 0.2)
    return model.eval()


def _same_net() -> nn.Module:
    torch.manual_seed(0)
    return _randomize(SameNet()).double()


def _assert_lattice(model: nn.Module, new: nn.Module, r: int, sizes: Any = SIZES) -> None:
    """Every output of ``new`` at ``[..., ::r, ::r]`` equals ``model``'s (float64)."""
    g = torch.Generator().manual_seed(1)
    for h, w in sizes:
        x = torch.randn(1, 3, h, w, generator=g, dtype=torch.float64) - 0.3
        with torch.no_grad():
            ref, out = model(x), new(x)
        sub = out[..., ::r, ::r]
        assert sub.shape == ref.shape, ((h, w), sub.shape, ref.shape)
        scale = float(ref.abs().max())
        assert float((sub - ref).abs().max()) <= 1e-10 * scale, (h, w)
        # the dense length lies in the window that keeps the lattice: (r*(m-1), r*m]
        for n, m in zip(out.shape[-2:], ref.shape[-2:]):
            assert r * (m - 1) < n <= r * m, ((h, w), out.shape, ref.shape)


# ----------------------------------------------------------------------------- hand-written


def test_hand_written_same_converts_exactly() -> None:
    model = _same_net()
    new, report = convert(model)
    assert not report.skipped, report.skipped
    assert list(new.state_dict()) == list(model.state_dict())
    for h, w in SIZES:
        x = torch.randn(2, 3, h, w, dtype=torch.float64)
        with torch.no_grad():
            torch.testing.assert_close(new(x), model(x), rtol=0, atol=1e-12)


@pytest.mark.parametrize("output_stride", [16, 8])
def test_hand_written_same_dilates_exactly_beside_strided_shortcuts(output_stride: int) -> None:
    model = _same_net()
    new, report = dilate(model, output_stride)
    assert list(new.state_dict()) == list(model.state_dict())
    _assert_lattice(model, new, 32 // output_stride)
    # the pads in code past the output stride end where the dense map keeps its length
    keep = [c for c in report.changes if "keeps its length" in c.detail]
    stage = 3 if output_stride == 16 else 2
    assert any(c.path == f"layers.{stage}.conv1" for c in keep), report.changes
    # and at each size the re-derived pad of a restrided 'same' conv keeps the dense length
    conv = new.get_submodule(f"layers.{stage}.conv1")
    for n in (8, 9, 10, 11):
        x = torch.randn(1, conv.in_channels, n, n + 1, dtype=torch.float64)
        with torch.no_grad():
            assert tuple(conv(x).shape[-2:]) == (n, n + 1)
    assert pickle.loads(pickle.dumps(new))(torch.randn(1, 3, 67, 53).double()).shape


# ----------------------------------------------------------------------------- timm tf_ models


def _timm(name: str) -> nn.Module:
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    return _randomize(timm.create_model(name, pretrained=False)).double()


@pytest.mark.parametrize(
    "name",
    ["tf_mobilenetv3_small_minimal_100", "tf_efficientnet_b0"],
)
@pytest.mark.parametrize("output_stride", [16, 8])
def test_timm_tf_model_converts_and_dilates_exactly(name: str, output_stride: int) -> None:
    from timm.layers.conv2d_same import Conv2dSame

    model = _timm(name)
    assert any(type(m) is Conv2dSame for m in model.modules())
    new, report = convert(model)
    assert not report.skipped, report.skipped
    assert not any(type(m) is Conv2dSame for m in new.modules())
    x = torch.randn(2, 3, 67, 53, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(new(x), model(x), rtol=0, atol=1e-10)

    body = lambda m, x: m.forward_features(x)  # noqa: E731
    dilated, report = dilate(model, output_stride)
    assert list(dilated.state_dict()) == list(model.state_dict())
    changed = {c.path for c in report.changes}
    same = [p for p, m in model.named_modules() if type(m) is Conv2dSame]
    assert any(p in changed for p in same)
    r = 32 // output_stride
    g = torch.Generator().manual_seed(2)
    for h, w in SIZES:
        x = torch.randn(1, 3, h, w, generator=g, dtype=torch.float64)
        with torch.no_grad():
            ref, out = body(model, x), body(dilated, x)
            logits, dl = model(x), dilated(x)
        torch.testing.assert_close(out[..., ::r, ::r], ref, rtol=0, atol=1e-10 * ref.abs().max())
        torch.testing.assert_close(dl, logits, rtol=0, atol=1e-10 * logits.abs().max())


def test_timm_max_pool_same_dilates_exactly() -> None:
    timm = pytest.importorskip("timm")  # noqa: F841
    from timm.layers.pool2d_same import MaxPool2dSame

    torch.manual_seed(0)
    model = (
        nn.Sequential(
            SameConv(3, 8, 3, 2),
            nn.ReLU(),
            MaxPool2dSame(3, 2),
            SameConv(8, 8, 3, 2),
            MaxPool2dSame(3, 2),  # stride 16
            SameConv(8, 8, 3, 1),
            MaxPool2dSame(3, 2),  # stride 32: past output strides 16 and 8
            SameConv(8, 8, 3, 1),
        )
        .eval()
        .double()
    )
    for output_stride in (16, 8):
        new, _ = dilate(model, output_stride)
        _assert_lattice(model, new, 32 // output_stride)


# ----------------------------------------------------------------------------- chains


class PadThenSame(nn.Module):
    """A static zero pad module, then a 'same' pad in code (a chain of two pads)."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.pad = nn.ZeroPad2d((1, 2, 1, 0))
        self.conv = SameConv(cin, cout, 3, 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(self.pad(x))  # type: ignore[no-any-return]


class _SameMaxPool(nn.Module):
    """BiT's dynamic max pool in miniature: a zero 'same' pad in code, then max_pool2d."""

    def forward(self, x: Tensor) -> Tensor:
        n = x.shape[-1]
        total = max((math.ceil(n / 2) - 1) * 2 + 3 - n, 0)
        m = x.shape[-2]
        total_h = max((math.ceil(m / 2) - 1) * 2 + 3 - m, 0)
        x = F.pad(x, [total // 2, total - total // 2, total_h // 2, total_h - total_h // 2])
        return F.max_pool2d(x, 3, 2)


class ChainNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, 2, 1)
        self.pad = nn.ConstantPad2d(1, 0.0)
        self.pool = _SameMaxPool()
        self.body = nn.ModuleList([PadThenSame(8, 8) for _ in range(3)])

    def forward(self, x: Tensor) -> Tensor:
        x = self.pool(self.pad(self.stem(x)))
        for block in self.body:
            x = torch.tanh(block(x))
        return x


def test_pad_read_by_a_same_pad_folds_into_one_layer() -> None:
    torch.manual_seed(0)
    model = ChainNet().eval().double()
    new, report = convert(model)
    assert not report.skipped, report.skipped
    assert isinstance(new.body[0].pad, nn.ZeroPad2d)  # its class, now a passthrough
    pool = next(c for c in report.changes if c.path == "pool")
    assert "static ((1, 1), (1, 1)) then TF 'same'" in pool.detail and "0.0 pad" in pool.detail
    for h, w in SIZES:
        x = torch.randn(2, 3, h, w, dtype=torch.float64) - 1  # a -inf pad would differ
        with torch.no_grad():
            torch.testing.assert_close(new(x), model(x), rtol=0, atol=1e-12)


@pytest.mark.parametrize("output_stride", [16, 8])
def test_pad_chain_dilates_exactly(output_stride: int) -> None:
    torch.manual_seed(0)
    model = ChainNet().eval().double()
    new, _ = dilate(model, output_stride)
    _assert_lattice(model, new, 32 // output_stride)


def test_chain_of_a_size_dependent_pad_then_another_is_left_with_its_reason() -> None:
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = _Same()
            self.b = nn.ZeroPad2d(1)
            self.conv = nn.Conv2d(3, 4, 3, 2)

        def forward(self, x: Tensor) -> Tensor:
            return self.conv(self.b(self.a(x)))  # type: ignore[no-any-return]

    class _Same(nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            n = x.shape[-1]
            total = max((math.ceil(n / 2) - 1) * 2 + 3 - n, 0)
            return F.pad(x, [total // 2, total - total // 2, total // 2, total - total // 2])

    model = Twice().eval()
    with pytest.warns(UserWarning, match="nothing changed"):
        new, report = convert(model)
    reasons = {s.path: s.reason for s in report.skipped}
    assert "not a rule before another" in reasons["a"], reasons
    x = torch.randn(1, 3, 9, 9)
    with torch.no_grad():
        assert torch.equal(new(x), model(x))


# ----------------------------------------------------------------------------- joins


class PadConv(nn.Conv2d):
    """Pads (1, 1) per side in code, then F.conv2d with its own attributes."""

    def forward(self, x: Tensor) -> Tensor:
        x = F.pad(x, (1, 1, 1, 1))
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation)


class Patchify(nn.Module):
    """A k4 s2 conv on a (1, 1) pad in code (ends ``f`` cells short once dilated) beside a
    ceil-mode average pool shortcut (ends at ``n``): equal lattices at even sizes."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = PadConv(c, c, 4, 2)
        self.pool = nn.AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False)
        self.short = nn.Conv2d(c, c, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x) + self.short(self.pool(x))  # type: ignore[no-any-return]


@pytest.mark.parametrize("output_stride", [16, 8])
def test_pad_in_code_gets_end_cells_at_a_join(output_stride: int) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), *[Patchify(8) for _ in range(4)])
    model = model.eval().double()
    new, report = dilate(model, output_stride)
    grown = [c.path for c in report.changes if "more end cells" in c.detail]
    assert grown == (["4.conv"] if output_stride == 16 else ["3.conv", "4.conv"]), grown
    _assert_lattice(model, new, 32 // output_stride, ((64, 64), (96, 160), (160, 96)))


# ----------------------------------------------------------------------------- refusals


class _AvgSame(nn.AvgPool2d):
    """A 'same' average pool in code: pads zeros from x.shape, then F.avg_pool2d."""

    def forward(self, x: Tensor) -> Tensor:
        n, m = x.shape[-2:]
        th = max((math.ceil(n / 2) - 1) * 2 + 3 - n, 0)
        tw = max((math.ceil(m / 2) - 1) * 2 + 3 - m, 0)
        x = F.pad(x, [tw // 2, tw - tw // 2, th // 2, th - th // 2])
        return F.avg_pool2d(x, self.kernel_size, self.stride, 0, self.ceil_mode)


def test_same_average_pool_in_code_past_the_lattice_is_refused_by_name() -> None:
    """A 'same' average pool in code whose stride becomes dilation on the original grid
    (factor 1) needs no dilation: exact. One on the lattice of factor 2 would need a
    dilated average, which avg_pool2d() does not take: refused, naming it and why."""
    torch.manual_seed(0)
    model = (
        nn.Sequential(
            SameConv(3, 4, 3, 2),
            SameConv(4, 4, 3, 2),
            SameConv(4, 4, 3, 2),
            SameConv(4, 4, 3, 2),  # stride 16
            SameConv(4, 4, 3, 1),
            _AvgSame(3, 2),  # stride 32
            SameConv(4, 4, 3, 1),
        )
        .eval()
        .double()
    )
    new, _ = dilate(model, 16)
    _assert_lattice(model, new, 2)
    with pytest.raises(SurgeryError, match=r"'5' \(_AvgSame\).*takes no dilation"):
        dilate(model, 8)


# ----------------------------------------------------------------------------- Padding.pre


@pytest.mark.parametrize("rule", ["same", "same_lower"])
@pytest.mark.parametrize("pre", [(1, 1), (0, 2), (3, 0)])
@pytest.mark.parametrize("n", range(5, 12))
def test_padding_pre_is_the_static_pad_then_the_rule(
    rule: str, pre: tuple[int, int], n: int
) -> None:
    spec = Padding((rule, rule), pre=(pre, (0, 0)))
    g = torch.Generator().manual_seed(n)
    x = torch.randn(1, 2, n, n + 1, generator=g, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 2, 3, 3, generator=g, dtype=torch.float64)
    ref_in = F.pad(x, (0, 0, *pre))  # the static pad first (H only)
    pairs = Padding((rule, rule)).resolve(3, 2, 1, tuple(ref_in.shape[-2:]))
    ref = F.conv2d(F.pad(ref_in, (*pairs[1], *pairs[0])), w, stride=2)
    got = PF.conv2d(x, w, None, 2, spec)
    torch.testing.assert_close(got, ref, rtol=0, atol=1e-12)
    (gx,) = torch.autograd.grad(got.sum(), x)
    (rx,) = torch.autograd.grad(ref.sum(), x)
    torch.testing.assert_close(gx, rx, rtol=0, atol=1e-12)
    pool = PN.MaxPool2d(3, 2, spec, padding_value=0.0)
    mref = F.max_pool2d(F.pad(ref_in, (*pairs[1], *pairs[0])), 3, 2)
    torch.testing.assert_close(pool(x), mref, rtol=0, atol=0)


def test_padding_pre_rules_repr_and_refusals() -> None:
    spec = Padding(("same", (0, 1)), pre=((1, 1), (2, 0)))
    assert spec.axes == ("same", (2, 1)) and spec.pre == ((1, 1), (0, 0))  # static axes add
    assert Padding(("same",), pre=((0, 0),)).pre is None
    assert Padding(("same", "same"), pre=((1, 1), (1, 1))) != Padding(("same", "same"))
    assert "(1, 1) then 'same'" in spec.describe()
    assert spec.resolve(3, 2, 1, (8, 9)) == ((1, 2), (2, 1))
    assert not spec.is_explicit and spec.needs_input_size(2)
    assert "(1, 1) then 'same'" in repr(PN.Conv2d(2, 2, 3, 2, spec))
    assert "auto_pad" not in spec.to_onnx(3, 2, 1, (8, 9))
    assert pickle.loads(pickle.dumps(spec)) == spec
    with pytest.raises(PaddingError, match="non-negative"):
        Padding(("same",), pre=((-1, 0),))
    with pytest.raises(PaddingError, match="one \\(lo, hi\\) pair per axis"):
        Padding(("same", "same"), pre=((1, 1),))
    with pytest.raises(PaddingError, match="Caffe ceil"):
        Padding(("same",), ceil_mode=True, pre=((1, 1),))
    with pytest.raises(PaddingError, match="transposed conv"):
        PN.ConvTranspose2d(2, 2, 3, 2, padding=Padding(("same", "same"), pre=((1, 1), (0, 0))))


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_padding_pre_exports_to_onnx(dynamic: bool) -> None:
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")

    spec = Padding(("same", "same"), pre=((1, 1), (0, 2)))
    model = nn.Sequential(PN.MaxPool2d(3, 2, spec, padding_value=0.0), PN.Conv2d(2, 3, 3, 2, spec))
    model.eval()
    x = torch.randn(1, 2, 9, 8) - 1
    buf = io.BytesIO()
    axes = {"x": {2: "h", 3: "w"}} if dynamic else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), buf, dynamo=False, input_names=["x"], dynamic_axes=axes)
    proto = onnx.load_from_string(buf.getvalue())
    assert not any(a.name == "auto_pad" for n in proto.graph.node for a in n.attribute)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for h, w in ((9, 8), (10, 11), (12, 13)) if dynamic else ((9, 8),):
        xi = torch.randn(1, 2, h, w) - 1
        (got,) = sess.run(None, {"x": xi.numpy()})
        with torch.no_grad():
            torch.testing.assert_close(torch.from_numpy(got), model(xi), rtol=1e-5, atol=1e-5)
