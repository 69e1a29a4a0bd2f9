"""padkit.surgery.fuse_pads: the producer of a padded conv's input writes its padded buffer.

Oracle: the same computation written with ``F.pad`` (pads from the TF / causal formulas
written out here) followed by the unpadded ``torch.nn.functional`` conv, with the same
weights. Each rewrite is also checked to take the buffer path (a probe sees the
producer's output as a non-contiguous view of the buffer's interior) or, where it must
not, the plain one.
"""

from __future__ import annotations

import copy
import math
import pickle
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from backward_ops import backward_ops
from torch import Tensor, fx, nn

import padkit.nn as PN
from padkit.surgery import SurgeryReport, fuse, fuse_pads

torch.set_num_threads(1)


def tf_same(n: int, k: int, s: int, d: int = 1) -> tuple[int, int]:
    """TF SAME pads on one axis, odd pixel at the end."""
    k_eff = d * (k - 1) + 1
    total = max((math.ceil(n / s) - 1) * s + k_eff - n, 0)
    return total // 2, total - total // 2


def conv_ref(conv: nn.Module, x: Tensor, pads: list[tuple[int, int]]) -> Tensor:
    """``F.pad`` with per-side ``pads`` (per spatial axis, first axis first), then the conv."""
    c: Any = conv
    flat = [v for lo_hi in reversed(pads) for v in lo_hi]
    fn = (F.conv1d, F.conv2d, F.conv3d)[len(pads) - 1]
    out: Tensor = fn(F.pad(x, flat), c.weight, c.bias, c.stride, 0, c.dilation, c.groups)
    return out


SEEN: list[bool] = []


@pytest.fixture(autouse=True)
def short_rows_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests' tensors are small: let the buffer serve interiors of any row length
    (``test_short_rows_keep_the_plain_ops`` checks the real threshold)."""
    monkeypatch.setattr(fuse, "_MIN_RUN", 1)


def probe(x: Tensor) -> Tensor:
    """Records whether ``x`` is dense, in either layout (a buffer's interior is not)."""
    cl = x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last)
    SEEN.append(x.is_contiguous() or cl)
    return x.clone()


fx.wrap("probe")  # one call in the traced graph, run with the real tensor


# ----------------------------------------------------------------------------- models


class TCN(nn.Module):
    """Residual blocks of two causal dilated convs, functional ReLU and addition."""

    def __init__(self, ch: int = 6, dilations: tuple[int, ...] = (2, 3, 4)) -> None:
        super().__init__()
        self.dilations = dilations
        self.convs = nn.ModuleList(
            PN.Conv1d(ch, ch, 3, padding="causal", dilation=d) for d in dilations for _ in (0, 1)
        )

    def forward(self, x: Tensor) -> Tensor:
        for i in range(0, len(self.convs), 2):
            h = F.relu(self.convs[i](x))
            x = x + F.relu(self.convs[i + 1](h))
        return x

    def reference(self, x: Tensor) -> Tensor:
        for i, d in enumerate(self.dilations):
            a, b = self.convs[2 * i], self.convs[2 * i + 1]
            h = F.relu(conv_ref(a, x, [(2 * d, 0)]))
            x = x + F.relu(conv_ref(b, h, [(2 * d, 0)]))
        return x


class TFBlock(nn.Module):
    """A ResNet bottleneck with a TF 'same' stride-2 3x3 conv (torchvision's module style)."""

    def __init__(self, ch: int = 8) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(ch, ch, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(ch)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = PN.Conv2d(ch, ch, 3, stride=2, padding="same", bias=False)
        self.bn2 = nn.BatchNorm2d(ch)

    def forward(self, x: Tensor) -> Tensor:
        h = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(h)))

    def reference(self, x: Tensor) -> Tensor:
        h = F.relu(self.bn1(self.conv1(x)))
        pads = [tf_same(n, 3, 2) for n in h.shape[2:]]
        return F.relu(self.bn2(conv_ref(self.conv2, h, pads)))


def _eval(m: nn.Module) -> nn.Module:
    torch.manual_seed(1)
    for p in m.parameters():
        p.data.normal_(0, 0.3)
    for b in m.modules():
        if isinstance(b, nn.BatchNorm2d):
            b.running_mean.normal_(0, 0.1)
            b.running_var.uniform_(0.5, 1.5)
    return m.eval()


# ----------------------------------------------------------------------------- end to end


@pytest.mark.parametrize("length", [37, 64, 5])
def test_tcn_equals_fpad_reference(length: int) -> None:
    model = _eval(TCN())
    fused, report = fuse_pads(model, torch.randn(2, 6, 50))
    assert isinstance(report, SurgeryReport) and report.operation == "fuse_pads"
    assert report.paths == [f"convs.{i}" for i in range(6)]
    assert report.skipped == []
    # the first conv reads the model's input: no buffer, but a crop view in training
    assert "crop view" in report.changes[0].after and "buffer" not in report.changes[0].after
    assert "model's input" in report.changes[0].detail
    assert all("buffer + crop view" in c.after for c in report.changes[1:])
    assert list(fused.state_dict()) == list(model.state_dict())
    x = torch.randn(3, 6, length)
    with torch.no_grad():
        want = model.reference(x)
        torch.testing.assert_close(fused(x), want, rtol=1e-5, atol=1e-5)
    with torch.inference_mode():
        torch.testing.assert_close(fused(x), want, rtol=1e-5, atol=1e-5)


def test_crop_plans_are_left_as_they_are() -> None:
    # a causal conv without dilation pads (2, 0) by a crop view: no copy to remove
    net = _eval(nn.Sequential(nn.ReLU(), PN.Conv1d(2, 2, 3, padding="causal")))
    assert net[1].plan((1, 2, 16)).strategy == "crop"
    fused, report = fuse_pads(net, torch.randn(1, 2, 16))
    assert report.paths == [] and report.skipped == [] and fused is not net


def test_tcn_training_takes_crop_views_with_exact_gradients(torch_plans: None) -> None:
    model = _eval(TCN()).train()
    fused, _ = fuse_pads(model, torch.randn(1, 6, 40))
    x = torch.randn(2, 6, 41, requires_grad=True)
    out = fused(x)
    ops = backward_ops(out)
    assert "ConstantPadNdBackward0" not in ops  # no padded copy of any input
    assert ops & {"NarrowBackward0", "SliceBackward0"}  # the crop views
    assert "ConstantPadNdBackward0" in backward_ops(model(x))  # the plain plan copies
    params = [x, *fused.parameters()]
    got = torch.autograd.grad(out.square().sum(), params)
    ref_params = [x, *model.parameters()]
    want = torch.autograd.grad(model.reference(x).square().sum(), ref_params)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("size", [(16, 16), (15, 17), (9, 12)])
def test_tf_same_block_nchw_and_channels_last(size: tuple[int, int], channels_last: bool) -> None:
    model = _eval(TFBlock())
    fused, report = fuse_pads(model, torch.randn(1, 8, 16, 16))
    assert report.paths == ["conv2"]
    assert "ReLU" in report.changes[0].detail
    x = torch.randn(2, 8, *size)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
        fused = fused.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    with torch.no_grad():
        got = fused(x)
        want = model.reference(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    if channels_last:
        assert got.is_contiguous(memory_format=torch.channels_last)


def test_buffer_path_taken_only_where_the_plan_copies() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = PN.Conv2d(4, 4, 3, stride=2, padding="same")

        def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
            y = torch.relu(x)
            return self.conv(y), probe(y)

    net = _eval(Net())
    fused, report = fuse_pads(net, torch.randn(1, 4, 8, 8))
    assert report.paths == ["conv"]
    with torch.no_grad():
        for n, buffered in ((8, True), (9, False)):  # n=9: TF same is (1, 1), symmetric
            x = torch.randn(1, 4, n, n)
            out, _ = fused(x)
            pads = [tf_same(n, 3, 2)] * 2
            torch.testing.assert_close(out, conv_ref(net.conv, torch.relu(x), pads))
            assert SEEN[-1] is (not buffered)
        x = torch.randn(1, 4, 8, 8, requires_grad=True)
    out, _ = fused(x)  # autograd: the plain ops, differentiable
    assert SEEN[-1] is True
    (g,) = torch.autograd.grad(out.sum(), x)
    x2 = x.detach().requires_grad_()
    (g2,) = torch.autograd.grad(conv_ref(net.conv, torch.relu(x2), [(0, 1)] * 2).sum(), x2)
    torch.testing.assert_close(g, g2)


# ----------------------------------------------------------------------------- producers


def _act(name: str) -> Callable[[Tensor, Tensor], Tensor]:
    table: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
        "F.relu": lambda x, y: F.relu(x),
        "torch.relu": lambda x, y: torch.relu(x),
        "F.relu inplace": lambda x, y: F.relu(x * 1.0, inplace=True),
        "F.relu6": lambda x, y: F.relu6(x * 4),
        "F.hardtanh": lambda x, y: F.hardtanh(x, -0.5, 0.25),
        "F.leaky_relu": lambda x, y: F.leaky_relu(x, 0.2),
        "F.elu": lambda x, y: F.elu(x, alpha=0.7),
        "F.gelu tanh": lambda x, y: F.gelu(x, approximate="tanh"),
        "F.silu": lambda x, y: F.silu(x),
        "F.hardswish": lambda x, y: F.hardswish(x),
        "torch.sigmoid": lambda x, y: torch.sigmoid(x),
        "torch.tanh": lambda x, y: torch.tanh(x),
        "operator.add": lambda x, y: x + y,
        "operator.add scalar": lambda x, y: x + 0.5,
        "operator.add broadcast": lambda x, y: x + y[:, :, :1],
        "torch.add alpha": lambda x, y: torch.add(x, y, alpha=0.5),
        "operator.sub": lambda x, y: x - y,
        "torch.sub": lambda x, y: torch.sub(x, y, alpha=2),
        "operator.mul": lambda x, y: x * y,
        "torch.mul": lambda x, y: torch.mul(x, y),
        "method relu": lambda x, y: x.relu(),
        "method sigmoid": lambda x, y: x.sigmoid(),
        "method add": lambda x, y: x.add(y, alpha=3),
        "method mul": lambda x, y: x.mul(y),
    }
    return table[name]


_ACTS = [
    "F.relu",
    "torch.relu",
    "F.relu inplace",
    "F.relu6",
    "F.hardtanh",
    "F.leaky_relu",
    "F.elu",
    "F.gelu tanh",
    "F.silu",
    "F.hardswish",
    "torch.sigmoid",
    "torch.tanh",
    "operator.add",
    "operator.add scalar",
    "operator.add broadcast",
    "torch.add alpha",
    "operator.sub",
    "torch.sub",
    "operator.mul",
    "torch.mul",
    "method relu",
    "method sigmoid",
    "method add",
    "method mul",
]


class _FnNet(nn.Module):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.conv = PN.Conv1d(5, 3, 3, padding="causal", dilation=2)  # pads (4, 0)

    def forward(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        h = _ACT_FNS[self.name](x, y)
        return self.conv(h), probe(h)


_ACT_FNS = {n: _act(n) for n in _ACTS}


@pytest.mark.parametrize("name", _ACTS)
def test_every_functional_producer(name: str) -> None:
    net = _eval(_FnNet(name))
    # trace the lambda's body, not the lambda: the table holds traceable expressions
    fused, report = fuse_pads(net, torch.randn(2, 5, 20), torch.randn(2, 5, 20))
    assert report.paths == ["conv"], report
    x, y = torch.randn(2, 5, 23), torch.randn(2, 5, 23)
    with torch.no_grad():
        out, h = fused(x, y)
        want_h = _ACT_FNS[name](x, y)
    torch.testing.assert_close(h, want_h, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(out, conv_ref(net.conv, want_h, [(4, 0)]), rtol=1e-5, atol=1e-5)
    assert SEEN[-1] is False


_MODS: list[nn.Module] = [
    nn.ReLU(),
    nn.ReLU(inplace=True),
    nn.ReLU6(),
    nn.Hardtanh(-2.0, 0.5),
    nn.LeakyReLU(0.3),
    nn.ELU(0.5),
    nn.GELU(approximate="tanh"),
    nn.SiLU(),
    nn.Hardswish(),
    nn.Sigmoid(),
    nn.Tanh(),
]


@pytest.mark.parametrize("act", _MODS, ids=[repr(m) for m in _MODS])
def test_every_module_producer(act: nn.Module) -> None:
    net = _eval(
        nn.Sequential(nn.Conv2d(3, 4, 1), act, PN.Conv2d(4, 2, 3, stride=2, padding="same"))
    )
    fused, report = fuse_pads(net, torch.randn(1, 3, 10, 10))
    assert report.paths == ["2"]
    x = torch.randn(2, 3, 11, 12)
    with torch.no_grad():
        got = fused(x)
        h = copy.deepcopy(act)(net[0](x))
    pads = [tf_same(11, 3, 2), tf_same(12, 3, 2)]  # (1, 1) and (0, 1)
    torch.testing.assert_close(got, conv_ref(net[2], h, pads), rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- left alone


def test_erf_gelu_is_left_alone() -> None:
    # torch's erf GELU with out= writes wrong values into a strided view; tanh GELU is fine
    net = _eval(nn.Sequential(nn.GELU(), PN.Conv1d(2, 2, 3, padding="causal", dilation=2)))
    fused, report = fuse_pads(net, torch.randn(1, 2, 9))
    assert report.paths == [] and "erf GELU" in report.skipped[0].reason
    x = torch.randn(2, 2, 11)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), conv_ref(net[1], F.gelu(x), [(4, 0)]))


def test_inplace_producer_whose_input_is_read_again_is_left_alone() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = PN.Conv1d(2, 2, 3, padding="causal", dilation=2)

        def forward(self, x: Tensor) -> Tensor:
            h = x * 2
            y = torch.relu_(h)  # mutates h, which is read again below
            return self.conv(y) + h.sum()

    net = _eval(Net())
    fused, report = fuse_pads(net, torch.randn(1, 2, 9))
    assert report.paths == []
    assert "in-place" in report.skipped[0].reason
    x = torch.randn(1, 2, 9)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), net(x))


def test_output_producer_conv_input_and_subclass_are_reported() -> None:
    class Std(PN.Conv1d):
        def _conv_forward(self, x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
            return super()._conv_forward(x, w - w.mean(), b)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = PN.Conv1d(2, 2, 3, padding="causal", dilation=2)
            self.b = PN.Conv1d(2, 2, 3, padding="causal", dilation=2)
            self.c = Std(2, 2, 3, padding="causal", dilation=2)
            self.sym = PN.Conv1d(2, 2, 3, padding=1)

        def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
            h = torch.relu(x)
            u = self.a(h)  # h is also returned: a view would leak out
            v = self.b(u)  # a conv produces its input
            w = self.c(torch.relu(v))  # a subclass that changes the weight
            return h, self.sym(torch.relu(w)), w

    net = _eval(Net())
    fused, report = fuse_pads(net, torch.randn(1, 2, 9))
    assert report.paths == []
    reasons = {s.path: s.reason for s in report.skipped}
    assert set(reasons) == {"a", "b", "c"}  # symmetric pads are no candidate
    assert "output of the model" in reasons["a"]
    assert "conv" in reasons["b"].lower()
    assert "subclass" in reasons["c"]
    x = torch.randn(2, 2, 13)
    with torch.no_grad():
        for g, w in zip(fused(x), net(x)):
            torch.testing.assert_close(g, w)


def test_untraceable_model_is_returned_unchanged_with_a_note() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = PN.Conv1d(2, 2, 3, padding="causal")

        def forward(self, x: Tensor) -> Tensor:
            if x.sum() > 0:  # data-dependent control flow
                x = -x
            return self.conv(torch.relu(x))

    net = _eval(Net())
    out, report = fuse_pads(net, torch.randn(1, 2, 8))
    assert type(out) is Net and out is not net
    assert report.paths == [] and "could not trace" in report.notes[0]
    same, _ = fuse_pads(net, torch.randn(1, 2, 8), inplace=True)
    assert same is net


# ----------------------------------------------------------------------------- life after


def test_mutation_copy_pickle_and_measure() -> None:
    model = _eval(TCN(ch=3, dilations=(2, 3)))
    fused, _ = fuse_pads(model, torch.randn(1, 3, 20))
    x = torch.randn(2, 3, 21)
    for m in (copy.deepcopy(fused), pickle.loads(pickle.dumps(fused))):
        with torch.no_grad():
            torch.testing.assert_close(m(x), model.reference(x))
    # mutate a fused conv: its pads at run time follow the live attribute
    conv: Any = fused.get_submodule("convs.3")
    conv.padding = 3  # symmetric: the plain path, same numbers as the torch conv
    ref: Any = model.convs[3]
    ref.padding = 3
    with torch.no_grad():
        torch.testing.assert_close(fused(x), model(x))
    measured, report = fuse_pads(model, torch.randn(1, 3, 20), measure=True, rounds=3)
    assert "ms before" in report.notes[-1] and "ms after" in report.notes[-1]
    with torch.no_grad():
        torch.testing.assert_close(measured(x), model(x))


def test_bad_arguments_name_themselves() -> None:
    net = TCN(ch=2, dilations=(2,))
    with pytest.raises(TypeError, match=r"model must be a torch\.nn\.Module"):
        fuse_pads("net", torch.randn(1, 2, 4))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="at least one example input"):
        fuse_pads(net)
    with pytest.raises(TypeError, match="inplace must be True or False, got int"):
        fuse_pads(net, torch.randn(1, 2, 4), inplace=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rounds must be a positive int, got 0"):
        fuse_pads(net, torch.randn(1, 2, 4), rounds=0)


def test_augmented_assignment_producer() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = PN.Conv1d(2, 2, 3, stride=2, padding="same")

        def forward(self, x: Tensor, y: Tensor) -> Tensor:
            h = x * 1.0
            h += y  # fx records the augmented assignment as an addition
            return self.conv(h)

    net = _eval(Net())
    fused, report = fuse_pads(net, torch.randn(1, 2, 6), torch.randn(1, 2, 6))
    assert report.paths == ["conv"]
    x, y = torch.randn(1, 2, 8), torch.randn(1, 2, 8)
    with torch.no_grad():
        torch.testing.assert_close(fused(x, y), conv_ref(net.conv, x + y, [(0, 1)]))


def test_compile_and_the_native_backend_see_the_same_numbers() -> None:
    model = _eval(TCN(ch=4, dilations=(2, 3)))
    fused, _ = fuse_pads(model, torch.randn(1, 4, 24))
    x = torch.randn(2, 4, 26)
    with torch.no_grad():
        want = model.reference(x)
        compiled = torch.compile(fused, backend="eager", fullgraph=True)
        torch.testing.assert_close(compiled(x), want, rtol=1e-5, atol=1e-5)
    import padkit.native as native

    assert native.enable(), native.info()  # the test extra installs oneDNN
    try:
        with torch.no_grad():
            torch.testing.assert_close(fused(x), want, rtol=1e-5, atol=1e-5)
        x.requires_grad_()
        (g,) = torch.autograd.grad(fused(x).sum(), x)
        x2 = x.detach().requires_grad_()
        (g2,) = torch.autograd.grad(model.reference(x2).sum(), x2)
        torch.testing.assert_close(g, g2, rtol=1e-4, atol=1e-4)
    finally:
        native.disable()


def test_short_rows_keep_the_plain_ops(monkeypatch: pytest.MonkeyPatch) -> None:
    # writing rows of a few dozen elements into a strided view is slower than the copy it
    # saves: the buffer serves only interiors whose contiguous runs are long
    monkeypatch.setattr(fuse, "_MIN_RUN", 1024)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = PN.Conv2d(4, 4, 3, stride=2, padding="same")

        def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
            y = torch.relu(x)
            return self.conv(y), probe(y)

    net = _eval(Net())
    _, report = fuse_pads(net, torch.randn(1, 4, 64, 64))  # rows of 64 at the example
    assert report.paths == [] and "rows would hold 64 elements" in report.skipped[0].reason
    fused, report = fuse_pads(net, torch.randn(1, 4, 8, 2048))
    assert report.paths == ["conv"]
    cases = [
        (torch.randn(1, 4, 64, 64), True),  # NCHW rows of 64 elements: plain
        (torch.randn(1, 4, 64, 64).contiguous(memory_format=torch.channels_last), True),
        (torch.randn(1, 4, 8, 2048), False),  # rows of 2048: the buffer
        (torch.randn(1, 300, 64, 64).contiguous(memory_format=torch.channels_last), None),
    ]
    for x, plain in cases:
        if plain is None:  # channels-last rows of 64 pixels x 300 channels: the buffer
            net.conv = PN.Conv2d(300, 4, 3, 2, padding="same")
            fused, _ = fuse_pads(net, x)
            plain = False
        with torch.no_grad():
            out, _ = fused(x)
            pads = [tf_same(n, 3, 2) for n in x.shape[2:]]
            torch.testing.assert_close(out, conv_ref(net.conv, torch.relu(x), pads))
        assert SEEN[-1] is plain, x.shape
