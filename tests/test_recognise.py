"""padkit.recognise and convert_causal on code as people write it.

Each model pads, crops or transposes in its own tensor code, the way third-party audio and
speech code does. References, none computed by padkit: the original model's own output
(the converted copy must reproduce it at lengths other than the probes'), and the converted
model's own full run for the streamed one (chunks of 1, of a prime, and a random mix;
float64). Refusals are checked for the reason they give.
"""

from __future__ import annotations

import copy
import math
import random
import warnings
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from packages import load
from torch import Tensor, nn

from padkit.recognise import ProbeError, probe, record
from padkit.streaming import StreamingModule, convert_causal
from padkit.surgery import SurgeryError

torch.set_num_threads(1)
DT = torch.float64


def chunk_plans(n: int) -> list[list[int]]:
    rng = random.Random(n)
    mix: list[int] = []
    while sum(mix) < n:
        mix.append(min(rng.choice([0, 1, 2, 3, 5, 8]), n - sum(mix)))
    prime = [7] * (n // 7) + ([n % 7] if n % 7 else [])
    return [[1] * n, prime, mix]


def stream(model: nn.Module, x: Tensor, sizes: list[int], axis: int = -1) -> Tensor:
    sm = StreamingModule(model, axis=axis)
    state = sm.init_state(example=x.narrow(axis, 0, 1))
    outs = []
    with torch.no_grad():
        for chunk in torch.split(x, sizes, dim=axis):
            y, state = sm.step(chunk, state)
            outs.append(y)
    return torch.cat(outs, dim=axis)


def check(
    model: nn.Module,
    example: Tensor,
    lengths: tuple[int, ...] = (24, 31),
    *,
    streams: bool = True,
    input_axis: int | None = None,
) -> nn.Module:
    """Convert ``model``; the copy equals the original at ``lengths`` and streams exactly."""
    model = model.to(DT).eval()
    new, report = convert_causal(model, example.to(DT), input_axis=input_axis)
    assert report.changes, str(report)
    ax = -1 if input_axis is None else input_axis
    for n in lengths:
        shape = list(example.shape)
        shape[ax] = n
        x = torch.randn(shape, dtype=DT)
        with torch.no_grad():
            torch.testing.assert_close(new(x), model(x), rtol=1e-9, atol=1e-10)
    if streams:
        shape = list(example.shape)
        shape[ax] = lengths[0]
        x = torch.randn(shape, dtype=DT)
        with torch.no_grad():
            full = new(x)
        for sizes in chunk_plans(lengths[0]):
            got = stream(new, x, sizes, axis=ax)
            torch.testing.assert_close(got, full, rtol=1e-9, atol=1e-10)
    return new


# ----------------------------------------------------------------------------- the record


def test_record_links_a_pad_to_the_conv_through_wrappers() -> None:
    class Inner(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv1d(1, 1, 3)
            self.norm = nn.Identity()

        def forward(self, x: Tensor) -> Tensor:
            return self.norm(self.conv(x))

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Sequential(Inner())

        def forward(self, x: Tensor) -> Tensor:
            y = self.inner(F.pad(x.transpose(1, 2), (2, 0), mode="reflect"))
            return y[..., 1:]

    rec = record(Outer(), torch.randn(1, 6, 1))
    (pad,) = [c for c in rec.calls if c.pad is not None]
    assert pad.pad is not None and pad.pad.mode == "reflect"
    assert pad.pad.pairs[-1] == (2, 0) and rec.modules[pad.owner or 0].path == ""
    (conv,) = [m for m in rec.modules if m.path == "inner.0.conv"]
    assert conv.inputs[0] == pad.makes[0] and conv.op is not None
    assert [r.owner for r in rec.readers(pad.makes[0])] == [conv.index]
    (move,) = [c for c in rec.calls if c.move is not None]
    assert move.move is not None and move.move.perm == (0, 2, 1)
    (crop,) = [c for c in rec.calls if c.crop is not None]
    assert crop.crop is not None and (crop.crop.dim, crop.crop.lo, crop.crop.hi) == (2, 1, 0)
    assert crop.crop.source == conv.outputs[0]


def test_record_reads_a_cat_with_zeros_as_a_pad() -> None:
    class Cat(nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            z = torch.zeros(x.shape[0], x.shape[1], 3, dtype=x.dtype)
            return torch.cat([z, x, torch.zeros_like(x[..., :1])], dim=-1)

    rec = record(Cat(), torch.randn(2, 3, 5))
    (cat,) = [c for c in rec.calls if c.name == "cat"]
    assert cat.pad is not None and cat.pad.pairs == ((0, 0), (0, 0), (3, 1))
    assert cat.pad.mode == "constant" and cat.pad.value == 0.0 and cat.pad.piece == 1


def test_probe_finds_lengths_the_model_accepts_and_names_the_module_that_refuses() -> None:
    class Strict(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv1d(1, 1, 4, stride=4)

        def forward(self, x: Tensor) -> Tensor:
            assert x.shape[-1] % 4 == 0, "length must be a multiple of 4"
            return self.conv(x)

    recs = probe(Strict(), torch.zeros(1, 1, 10))
    assert len(recs) == 2 and all(r.length is not None and r.length % 4 == 0 for r in recs)

    class Never(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = nn.Sequential(Refuse())

        def forward(self, x: Tensor) -> Tensor:
            return self.block(x)

    class Refuse(nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            raise ValueError("no length is good enough")

    with pytest.raises(ProbeError, match=r"Refuse 'block\.0' raised ValueError: no length"):
        probe(Never(), torch.zeros(1, 1, 8))
    with pytest.raises(SurgeryError, match=r"Refuse 'block\.0'"):
        convert_causal(Never(), torch.zeros(1, 1, 8))


def test_probes_leave_the_original_unchanged() -> None:
    net = nn.Sequential(nn.ConstantPad1d((2, 0), 0.0), nn.Conv1d(2, 2, 3), nn.BatchNorm1d(2))
    net.train()
    before = copy.deepcopy(net.state_dict())
    convert_causal(net, torch.randn(2, 2, 12))
    after = net.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert net.training and net[2].training


# ----------------------------------------------------------------------------- issue 36


class Norm(nn.Module):
    def __init__(self, k: int = 4, stride: int = 2) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 2, k, stride=stride)
        self.norm = nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.conv(x))


class SConv(nn.Module):
    """The issue's reproducer: extra padding from math.ceil, the conv two levels down."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.conv = Norm()
        self.mode = mode

    def forward(self, x: Tensor) -> Tensor:
        _, _, T = x.shape
        k, st = self.conv.conv.kernel_size[0], self.conv.conv.stride[0]
        extra = (math.ceil((T - st) / st + 1) - 1) * st + st - T
        return self.conv(F.pad(x, (k - st, extra), mode=self.mode))


class SConvFixed(nn.Module):
    """The same with the conv's sizes read once."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.conv = Norm()
        self.mode = mode
        self.k, self.st = 4, 2

    def forward(self, x: Tensor) -> Tensor:
        T = x.shape[-1]
        extra = (math.ceil((T - self.st) / self.st + 1) - 1) * self.st + self.st - T
        return self.conv(F.pad(x, (self.k - self.st, extra), mode=self.mode))


@pytest.mark.parametrize("mode", ["constant", "reflect"])
def test_pad_two_levels_above_the_conv(mode: str) -> None:
    torch.manual_seed(0)
    new = check(SConv(mode), torch.zeros(1, 1, 16), (16, 23, 30))
    assert new.conv.conv.resolved_padding() == ((2, 1),)
    assert new.conv.conv.padding_mode == ("zeros" if mode == "constant" else "reflect")
    check(SConvFixed(mode), torch.zeros(1, 1, 16), (24, 23))


def padded_rest(x: Tensor, k: int) -> Tensor:
    return _left(x, k - 1)


def _left(x: Tensor, n: int) -> Tensor:
    return F.pad(x, (n, 0))


class HelperPad(nn.Module):
    """A pad computed in a helper function two calls up."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(2, 3, 3, dilation=2)

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.conv(padded_rest(x, 5)))


class MyPad(nn.ConstantPad1d):
    pass


class CatPad(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(2, 2, 3)

    def forward(self, x: Tensor) -> Tensor:
        z = torch.zeros(x.shape[0], x.shape[1], 2, dtype=x.dtype, device=x.device)
        return self.conv(torch.cat([z, x], -1))


class HeldPads(nn.Module):
    """Pad modules held as children, outside a Sequential."""

    def __init__(self) -> None:
        super().__init__()
        self.pad = nn.ReflectionPad1d((2, 0))
        self.conv = nn.Conv1d(2, 2, 3)
        self.pad2 = MyPad((1, 0), 0.0)
        self.conv2 = nn.Conv1d(2, 2, 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv2(self.pad2(torch.tanh(self.conv(self.pad(x)))))


@pytest.mark.parametrize(
    "make",
    [
        HelperPad,
        CatPad,
        HeldPads,
        lambda: nn.Sequential(nn.ReflectionPad1d((2, 0)), nn.Conv1d(2, 2, 3)),
        lambda: nn.Sequential(MyPad((2, 0), 0.0), nn.Conv1d(2, 2, 3), nn.ReLU()),
    ],
    ids=["helper", "cat", "held", "reflect-seq", "subclass-seq"],
)
def test_pads_written_in_many_ways(make: Callable[[], nn.Module]) -> None:
    torch.manual_seed(1)
    check(make(), torch.zeros(1, 2, 12))


def test_pad_with_a_nonzero_constant_is_skipped_with_the_reason() -> None:
    net = nn.Sequential(nn.ConstantPad1d((2, 0), 1.5), nn.Conv1d(1, 1, 3))
    new, report = convert_causal(net, torch.zeros(1, 1, 9))
    assert not report.changes and isinstance(new[0], nn.ConstantPad1d)
    assert "pads with the constant 1.5" in report.skipped[0].reason


class Chomped(nn.Module):
    """Causal TCN block: symmetric pads, the parent crops the end, 1x1 downsample."""

    def __init__(self, c_in: int, c_out: int, k: int, d: int) -> None:
        super().__init__()
        self.p = (k - 1) * d
        self.conv1 = nn.utils.parametrizations.weight_norm(
            nn.Conv1d(c_in, c_out, k, padding=self.p, dilation=d)
        )
        self.conv2 = nn.Conv1d(c_out, c_out, k, padding=self.p, dilation=d)
        self.down = nn.Conv1d(c_in, c_out, 1) if c_in != c_out else None

    def forward(self, x: Tensor) -> Tensor:
        h = torch.relu(self.conv1(x)[..., : -self.p])
        h = torch.relu(self.conv2(h)[:, :, : -self.p].contiguous())
        res = x if self.down is None else self.down(x)
        return torch.relu(h + res)


def test_tcn_with_chomps_in_the_residual_block() -> None:
    torch.manual_seed(2)
    net = nn.Sequential(Chomped(2, 4, 3, 1), Chomped(4, 4, 3, 2))
    new = check(net, torch.zeros(1, 2, 20))
    assert new[1].conv1.resolved_padding() == ((4, 0),)


class Upsampler(nn.Module):
    """Vocoder style: a weight-normed ConvTranspose1d, its crop done by the parent."""

    def __init__(self, new_style: bool) -> None:
        super().__init__()
        conv = nn.ConvTranspose1d(2, 2, 4, stride=2)
        if new_style:
            self.up = nn.utils.parametrizations.weight_norm(conv)
        else:
            with warnings.catch_warnings():  # deprecated, still written in vocoder code
                warnings.simplefilter("ignore", FutureWarning)
                self.up = nn.utils.weight_norm(conv)
        self.crop = 4 - 2

    def forward(self, x: Tensor) -> Tensor:
        return unpad(self.up(x), (0, self.crop))


def unpad(x: Tensor, pads: tuple[int, int]) -> Tensor:
    left, right = pads
    return x[..., left : x.shape[-1] - right]


@pytest.mark.parametrize("new_style", [False, True], ids=["old-weight-norm", "parametrized"])
def test_transposed_conv_cropped_by_its_parent(new_style: bool) -> None:
    torch.manual_seed(3)
    net = nn.Sequential(nn.Conv1d(1, 2, 1), Upsampler(new_style), nn.Conv1d(2, 1, 1))
    new = check(net, torch.zeros(1, 1, 10), (12, 9))
    up = new[1].up
    assert up.resolved_padding() == ((0, 2),)
    with torch.no_grad():
        want = net.to(DT)[1].up.weight
        torch.testing.assert_close(up.weight, want, rtol=0, atol=0)


class SpeechConv(nn.Module):
    """(N, T, C) wrapper: transposes, pads causally, convolves, transposes back."""

    def __init__(self, c: int, k: int) -> None:
        super().__init__()
        self.k = k
        self.conv = nn.Conv1d(c, c, k)

    def forward(self, x: Tensor) -> Tensor:
        x = x.transpose(1, 2)
        x = F.pad(x, (self.k - 1, 0))
        return self.conv(x).transpose(1, 2)


def test_ntc_wrappers_with_input_axis_1() -> None:
    torch.manual_seed(4)
    net = nn.Sequential(SpeechConv(3, 3), nn.Linear(3, 3), SpeechConv(3, 2))
    new = check(net, torch.zeros(1, 12, 3), (12, 17), input_axis=1)
    assert new[2].conv.resolved_padding() == ((1, 0),)


class MultipleOnly(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 2, 4, stride=2)

    def forward(self, x: Tensor) -> Tensor:
        assert x.shape[-1] % 2 == 0, "length must be a multiple of the stride"
        return self.conv(F.pad(x, (2, 0)))


def test_a_model_that_accepts_only_some_lengths() -> None:
    torch.manual_seed(5)
    new = check(MultipleOnly(), torch.zeros(1, 1, 13), (16, 22))
    assert new.conv.resolved_padding() == ((2, 0),)


def test_pad_read_twice_is_skipped_and_never_silent() -> None:
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv1d(1, 1, 3)

        def forward(self, x: Tensor) -> Tensor:
            h = F.pad(x, (2, 0))
            return self.conv(h) + h[..., 2:].mean()

    _, report = convert_causal(Twice(), torch.zeros(1, 1, 8))
    assert not report.changes and report.skipped
    assert "also read by" in report.skipped[0].reason


# ----------------------------------------------------------------------------- encodec


@pytest.mark.filterwarnings("ignore:`torch.nn.utils.weight_norm` is deprecated:FutureWarning")
@pytest.mark.parametrize("pad_mode", ["constant", "reflect"])
def test_encodec_seanet(pad_mode: str) -> None:
    modules = load("encodec", "encodec.modules")
    torch.manual_seed(6)
    enc = modules.SEANetEncoder(
        channels=1, dimension=4, n_filters=2, ratios=[2, 2], causal=True, pad_mode=pad_mode
    )
    check(enc, torch.zeros(1, 1, 32), (32, 40))
    dec = modules.SEANetDecoder(
        channels=1, dimension=4, n_filters=2, ratios=[2, 2], causal=True, pad_mode=pad_mode
    )
    check(dec, torch.zeros(1, 4, 8), (8, 10))


# ----------------------------------------------------------------------- surgery reads the record


class RightBottomPad(nn.ZeroPad2d):
    """A pad module subclass whose own forward calls F.pad (no list of pad classes names it)."""

    def __init__(self) -> None:
        super().__init__(0)

    def forward(self, x: Tensor) -> Tensor:
        return F.pad(x, (0, 1, 0, 1))


class SubclassPadNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(2, 4, 3, stride=2, padding=1)
        self.pad = RightBottomPad()
        self.conv = nn.Conv2d(4, 4, 3, stride=2)
        self.head = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        h = torch.relu(self.stem(x))
        return self.head(torch.relu(self.conv(self.pad(h))))  # type: ignore[no-any-return]


class CatZeros(nn.Module):
    """A zero column concatenated in code (no pad call) on the right of a 2-d map."""

    def forward(self, h: Tensor) -> Tensor:
        return torch.cat([h, h.new_zeros(*h.shape[:-1], 1)], -1)


class CatZerosNet(SubclassPadNet):
    def __init__(self) -> None:
        super().__init__()
        self.pad = CatZeros()  # type: ignore[assignment]


@pytest.mark.parametrize(
    ("make", "pads"),
    [(SubclassPadNet, ((0, 1), (0, 1))), (CatZerosNet, ((0, 0), (0, 1)))],
    ids=["subclass", "cat"],
)
def test_convert_inspect_and_dilate_read_pads_in_new_forms(
    make: Callable[[], nn.Module], pads: tuple[tuple[int, int], ...]
) -> None:
    from padkit.inspect import inspect_model
    from padkit.surgery import convert, dilate, dilation_error

    torch.manual_seed(0)
    model = make().eval()
    new, report = convert(model)
    (taken,) = [c for c in report.changes if c.takes is not None]
    assert taken.path == "conv"
    assert taken.takes is not None and str(pads) in taken.takes.rule
    assert taken.takes.source == "pad"
    assert new.conv.resolved_padding() == pads
    for n in (16, 17, 30):
        x = torch.randn(1, 2, n, n + 3)
        torch.testing.assert_close(new(x), model(x), rtol=0, atol=1e-6)

    (layer,) = [r for r in inspect_model(model, (1, 2, 32, 32)) if r.name == "conv"]
    assert layer.pads == pads
    assert any("padded in the model's code" in w for w in layer.warnings)

    dilated, _ = dilate(model, 2)
    for shape in ((1, 2, 33, 40), (1, 2, 32, 32)):
        assert dilation_error(model, dilated, torch.randn(shape)) < 1e-5


def test_dilate_reads_a_pad_written_as_cat_of_zeros() -> None:
    """dilate reads the record: a pad written as ``torch.cat`` with zeros before a conv it
    re-strides is a pad, re-derived for the lattice, and the dilated model equals the
    original on the lattice."""
    from padkit.surgery import dilate, dilation_error

    class CatPad(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.conv = nn.Conv1d(c, c, 3, stride=2)

        def forward(self, x: Tensor) -> Tensor:
            z = x.new_zeros(*x.shape[:-1], 1)
            return self.conv(torch.cat([z, x, z], -1))

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv1d(2, 3, 3, stride=2, padding=1), nn.ReLU(), CatPad(3), nn.ReLU(), CatPad(3)
    ).eval()
    dilated, report = dilate(model, 2)
    assert any(c.path == "4" for c in report.changes), report
    for n in (37, 40, 53):
        assert dilation_error(model, dilated, torch.randn(2, 2, n)) <= 1e-5
