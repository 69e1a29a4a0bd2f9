"""padkit.reversible: invertible padding, couplings and the memory-saving reversible chain.

References: plain torch ops (torch.cat with zeros, torch.nn.functional.pad), the same
blocks run as a plain nn.Sequential (outputs and gradients), memcnn when installed
(its coupling, its InvertibleModuleWrapper and its is_invertible_module), and bytes
saved for backward counted with torch.autograd.graph.saved_tensors_hooks.
"""

from __future__ import annotations

import copy
import importlib
import itertools
import math
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import padkit
import padkit.nn as pnn
from padkit import PaddingError
from padkit.reversible import (
    AdditiveCoupling,
    ChannelPad,
    NotInvertibleError,
    PaddedCoupling,
    ReversibleSequential,
    SpatialPad,
    Unpad,
)


def _import_memcnn() -> ModuleType | None:
    # memcnn runs warnings.filterwarnings("ignore", UserWarning) and emits FutureWarnings
    # at import; catch_warnings keeps both out of the global filters pytest relies on.
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import memcnn
    except ImportError:
        return None
    module: ModuleType = memcnn
    return module


memcnn = _import_memcnn()
needs_memcnn = pytest.mark.skipif(memcnn is None, reason="memcnn (optional) is not installed")
# memcnn frees and restores storage through the deprecated TypedStorage API
memcnn_storage = pytest.mark.filterwarnings("ignore:TypedStorage is deprecated:UserWarning")

D = torch.float64


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _f(c: int, padding: Any = "same", kernel: int = 3) -> nn.Module:
    """A shape-preserving coupling function (conv + tanh), in float64."""
    return nn.Sequential(pnn.Conv2d(c, c, kernel, padding=padding), nn.Tanh()).to(D)


def _chain(n: int, c_in: int = 3, c: int = 8, first: str = "inside") -> list[nn.Module]:
    """n blocks; with first="inside" block 0 pads c_in -> c inside its coupling."""
    torch.manual_seed(n)
    blocks: list[nn.Module] = [AdditiveCoupling(_f(c // 2), _f(c // 2)) for _ in range(n)]
    if first == "inside":
        blocks[0] = PaddedCoupling(ChannelPad(c_in, c), blocks[0])
    return blocks


def _grads(
    run: Callable[[Tensor], Tensor], x: Tensor, params: Sequence[Tensor]
) -> tuple[Tensor, list[Tensor]]:
    x = x.detach().clone().requires_grad_(True)
    for p in params:
        p.grad = None
    y = run(x)
    (y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype).view_as(y)).sum().backward()
    assert x.grad is not None
    out = [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in params]
    return x.grad.clone(), out


def _assert_same_grads(a: tuple[Tensor, list[Tensor]], b: tuple[Tensor, list[Tensor]]) -> None:
    torch.testing.assert_close(a[0], b[0], rtol=1e-10, atol=1e-12)
    assert len(a[1]) == len(b[1])
    for ga, gb in zip(a[1], b[1]):
        torch.testing.assert_close(ga, gb, rtol=1e-10, atol=1e-12)


def _saved_bytes(run: Callable[[], Tensor], exclude: Sequence[Tensor] = ()) -> tuple[int, Tensor]:
    """Bytes of distinct storages saved for backward while ``run`` runs (parameters excluded)."""
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    seen: dict[int, int] = {}

    def pack(t: Tensor) -> Tensor:
        s = t.untyped_storage()
        if s.data_ptr() not in skip:
            seen[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = run()
    return sum(seen.values()), out


# ----------------------------------------------------------------------------- ChannelPad


@pytest.mark.parametrize(("side", "lo"), [("end", 0), ("start", 5), ("both", 2), ("BOTH", 2)])
@pytest.mark.parametrize("shape", [(2, 3, 7), (2, 3, 4, 5), (1, 3, 2, 3, 4)])
def test_channel_pad_matches_cat_with_zeros(side: str, lo: int, shape: tuple[int, ...]) -> None:
    x = torch.randn(shape, dtype=D)
    zeros = torch.zeros((shape[0], 1, *shape[2:]), dtype=D)
    ref = torch.cat([zeros] * lo + [x] + [zeros] * (5 - lo), dim=1)
    pad = ChannelPad(3, 8, side=side)
    y = pad(x)
    assert torch.equal(y, ref)
    back = pad.inverse(y)
    assert torch.equal(back, x)
    # the inverse owns its storage: freeing y (memcnn does) cannot corrupt it
    assert back.untyped_storage().data_ptr() != y.untyped_storage().data_ptr()
    y.zero_()
    assert torch.equal(back, x)


def test_channel_pad_same_count_copies_and_grads_flow() -> None:
    x = torch.randn(2, 4, 3, dtype=D, requires_grad=True)
    y = ChannelPad(4, 4)(x)
    assert torch.equal(y, x) and y.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    w = torch.randn(2, 9, 3, dtype=D)
    (ChannelPad(4, 9, side="both")(x) * w).sum().backward()
    assert x.grad is not None
    assert torch.equal(x.grad, w[:, 2:6])


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((8, 3), {}, PaddingError, r"out_channels must be >= in_channels.*in_channels=8"),
        ((0, 3), {}, PaddingError, r"in_channels must be >= 1, got 0"),
        ((3.0, 8), {}, TypeError, r"in_channels must be an int, got float \(3.0\)"),
        ((True, 8), {}, TypeError, r"in_channels must be an int, got a bool"),
        ((3, "8"), {}, TypeError, r"out_channels must be an int, got str \('8'\)"),
        (
            (3, 8),
            {"side": "left"},
            PaddingError,
            r"side must be one of 'end', 'start', 'both', got 'left'",
        ),
        ((3, 8), {"side": 1}, PaddingError, r"side must be one of .* got 1"),
    ],
)
def test_channel_pad_rejects_bad_arguments(
    args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=r"^ChannelPad: " + match):
        ChannelPad(*args, **kwargs)


def test_channel_pad_rejects_wrong_inputs() -> None:
    pad = ChannelPad(3, 8)
    with pytest.raises(PaddingError, match=r"input must have 3 channels .*\(2, 4, 5\)"):
        pad(torch.zeros(2, 4, 5))
    with pytest.raises(PaddingError, match=r"output must have 8 channels"):
        pad.inverse(torch.zeros(2, 3, 5))
    with pytest.raises(PaddingError, match=r"shape \(N, C, \.\.\.\), got shape \(3,\)"):
        pad(torch.zeros(3))
    with pytest.raises(TypeError, match=r"input must be a Tensor, got list"):
        pad([1.0, 2.0])


# ----------------------------------------------------------------------------- SpatialPad


def _torch_flat(pairs: Sequence[tuple[int, int]]) -> list[int]:
    return [v for lo_hi in reversed(pairs) for v in lo_hi]


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize(
    ("shape", "padding", "pairs"),
    [
        ((2, 3, 9), ((2, 1),), ((2, 1),)),
        ((2, 3, 5, 6), ((0, 1), (2, 2)), ((0, 1), (2, 2))),
        ((2, 3, 5, 6), 1, ((1, 1), (1, 1))),
        ((2, 3, 5, 6), (1, 2), ((1, 1), (2, 2))),
        ((1, 2, 3, 4, 5), ((1, 0), (0, 2), (1, 1)), ((1, 0), (0, 2), (1, 1))),
    ],
)
def test_spatial_pad_matches_torch_pad_and_crops_back(
    mode: str, shape: tuple[int, ...], padding: Any, pairs: tuple[tuple[int, int], ...]
) -> None:
    x = torch.randn(shape, dtype=D)
    pad = SpatialPad(padding, mode=mode)
    y = pad(x)
    assert torch.equal(y, F.pad(x, _torch_flat(pairs), mode=mode))
    back = pad.inverse(y)
    assert torch.equal(back, x)
    assert back.untyped_storage().data_ptr() != y.untyped_storage().data_ptr()


def test_spatial_pad_rules_and_value() -> None:
    x = torch.randn(1, 2, 6, 7, dtype=D)
    # torch's own 'same' conv pads an even kernel (total k-1 = 3) as (1, 2)
    same = SpatialPad("same_static", kernel_size=4)
    conv = nn.Conv2d(2, 2, 4, padding="same", bias=False).to(D)
    with warnings.catch_warnings():  # torch notes that it copies for even kernels
        warnings.filterwarnings("ignore", "Using padding='same' with even kernel", UserWarning)
        ref = conv(x)
    got = F.conv2d(same(x), conv.weight)
    torch.testing.assert_close(got, ref)
    assert torch.equal(same.inverse(same(x)), x)
    causal = SpatialPad(("causal", (0, 0)), kernel_size=(3, 1), dilation=2)
    assert torch.equal(causal(x), F.pad(x, [0, 0, 4, 0]))
    filled = SpatialPad(((1, 0), (0, 1)), value=-2.5)
    assert torch.equal(filled(x), F.pad(x, [0, 1, 1, 0], value=-2.5))
    assert torch.equal(filled.inverse(filled(x)), x)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((((-1, 1),),), {}, PaddingError, r"must be non-negative.*to crop"),
        (("same_static",), {}, PaddingError, r"holds rules; pass kernel_size"),
        (("bogus",), {}, PaddingError, r"'bogus'"),
        ((1.5,), {}, TypeError, r"padding must be an int, a str.*float"),
        ((1,), {"mode": "mirror"}, PaddingError, r"mode must be one of .*'mirror'"),
        ((1,), {"mode": "reflect", "value": 1.0}, PaddingError, r"value= is only used by"),
        ((1,), {"value": "0"}, TypeError, r"value must be a float, got str"),
    ],
)
def test_spatial_pad_rejects_bad_arguments(
    args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=r"^SpatialPad: .*" + match):
        SpatialPad(*args, **kwargs)


def test_spatial_pad_rejects_wrong_inputs() -> None:
    pad = SpatialPad(((1, 1), (1, 1)))
    with pytest.raises(PaddingError, match=r"needs 2 spatial axis/axes .*\(2, 3, 4\)"):
        pad(torch.zeros(2, 3, 4))
    with pytest.raises(PaddingError, match=r"smaller than the pads \(1, 1\)"):
        pad.inverse(torch.zeros(1, 1, 1, 4))


# ----------------------------------------------------------------------------- couplings


def test_additive_coupling_matches_formula_and_inverts() -> None:
    torch.manual_seed(0)
    f, g = _f(3), _f(3)
    c = AdditiveCoupling(f, g)
    x = torch.randn(2, 6, 5, 5, dtype=D)
    y = c(x)
    x1, x2 = x[:, :3], x[:, 3:]
    y1 = x1 + f(x2)
    y2 = x2 + g(y1)
    assert torch.equal(y, torch.cat([y1, y2], dim=1))
    torch.testing.assert_close(c.inverse(y), x, rtol=0, atol=1e-13)


def test_additive_coupling_default_g_is_a_separate_copy() -> None:
    f = _f(2)
    c = AdditiveCoupling(f)
    assert c.Gm is not c.Fm
    assert all(a is not b and torch.equal(a, b) for a, b in zip(f.parameters(), c.Gm.parameters()))


def test_additive_coupling_rejects_bad_arguments() -> None:
    with pytest.raises(TypeError, match=r"^AdditiveCoupling: Fm must be a torch.nn.Module"):
        AdditiveCoupling(lambda t: t)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^AdditiveCoupling: split_dim must be an int"):
        AdditiveCoupling(_f(2), split_dim=1.0)  # type: ignore[arg-type]
    with pytest.raises(PaddingError, match=r"even size along split_dim=1, got shape \(1, 5, 2\)"):
        AdditiveCoupling(nn.Identity())(torch.zeros(1, 5, 2))


def test_padded_coupling_is_coupling_of_pad() -> None:
    torch.manual_seed(1)
    pad, coupling = SpatialPad(((1, 0), (0, 1)), mode="replicate"), AdditiveCoupling(_f(2))
    block = PaddedCoupling(ChannelPad(3, 4), PaddedCoupling(pad, coupling))
    x = torch.randn(2, 3, 5, 5, dtype=D)
    ref = coupling(F.pad(F.pad(x, [0, 0, 0, 0, 0, 1]), [0, 1, 1, 0], mode="replicate"))
    y = block(x)
    assert torch.equal(y, ref)
    torch.testing.assert_close(block.inverse(y), x, rtol=0, atol=1e-13)


def test_padded_coupling_requires_invertible_modules() -> None:
    with pytest.raises(TypeError, match=r"^PaddedCoupling: pad must be .*inverse.*Conv2d"):
        PaddedCoupling(nn.Conv2d(1, 1, 1), AdditiveCoupling(_f(2)))
    with pytest.raises(TypeError, match=r"^PaddedCoupling: coupling must be .*got function"):
        PaddedCoupling(ChannelPad(1, 2), lambda t: t)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- the chain


@pytest.mark.parametrize("keep_input", [True, False])
def test_chain_gradients_equal_plain_network(keep_input: bool) -> None:
    blocks = _chain(4)
    blocks[2] = PaddedCoupling(SpatialPad(0), blocks[2])  # an inner (trivial) pad block too
    rev = ReversibleSequential(*blocks, keep_input=keep_input)
    plain = nn.Sequential(*blocks)
    params = list(rev.parameters())
    x = torch.randn(2, 3, 6, 6, dtype=D)
    with torch.no_grad():
        assert torch.equal(rev(x), plain(x))
    _assert_same_grads(_grads(rev, x, params), _grads(plain, x, params))


def test_chain_with_spatial_padding_inside_first_block() -> None:
    torch.manual_seed(3)
    first = PaddedCoupling(
        PaddedCoupling(ChannelPad(3, 8), SpatialPad(((1, 2), (0, 1)), mode="reflect")),
        AdditiveCoupling(_f(4, padding="same", kernel=4), _f(4)),
    )
    blocks = [first, AdditiveCoupling(_f(4), _f(4)), AdditiveCoupling(_f(4), _f(4))]
    rev, plain = ReversibleSequential(*blocks), nn.Sequential(*blocks)
    params = list(rev.parameters())
    x = torch.randn(2, 3, 5, 6, dtype=D)
    y = rev(x)
    assert y.shape == (2, 8, 8, 7)
    torch.testing.assert_close(rev.inverse(y.detach()), x, rtol=0, atol=1e-12)
    _assert_same_grads(_grads(rev, x, params), _grads(plain, x, params))


def test_chain_shared_parameters_and_autograd_grad() -> None:
    torch.manual_seed(4)
    shared = AdditiveCoupling(_f(4), _f(4))
    blocks = [PaddedCoupling(ChannelPad(3, 8), AdditiveCoupling(_f(4))), shared, shared]
    rev, plain = ReversibleSequential(*blocks), nn.Sequential(*blocks)
    params = list(rev.parameters())
    x = torch.randn(2, 3, 4, 4, dtype=D, requires_grad=True)
    got = torch.autograd.grad(rev(x).square().sum(), [x, *params])
    want = torch.autograd.grad(plain(x).square().sum(), [x, *params])
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_chain_input_without_grad_and_frozen_parameters() -> None:
    blocks = _chain(3)
    for p in blocks[1].parameters():
        p.requires_grad_(False)
    rev, plain = ReversibleSequential(*blocks), nn.Sequential(*blocks)
    trainable = [p for p in rev.parameters() if p.requires_grad]
    x = torch.randn(1, 3, 4, 4, dtype=D)
    rev(x).sum().backward()
    got = [p.grad.clone() for p in trainable if p.grad is not None]
    for p in trainable:
        p.grad = None
    plain(x).sum().backward()
    want = [p.grad for p in trainable if p.grad is not None]
    assert len(got) == len(want) == len(trainable)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert all(p.grad is None for p in blocks[1].parameters())


def test_chain_leaves_the_callers_tensor_alone() -> None:
    x = torch.randn(2, 3, 4, 4, dtype=D, requires_grad=True)
    before = x.detach().clone()
    for keep_input in (True, False):
        y = ReversibleSequential(*_chain(2), keep_input=keep_input)(x)
        assert x.untyped_storage().nbytes() == x.numel() * x.element_size()
        y.sum().backward()
        assert torch.equal(x.detach(), before)


def test_chain_no_grad_runs_plainly() -> None:
    blocks = _chain(2)
    rev = ReversibleSequential(*blocks)
    x = torch.randn(1, 3, 4, 4, dtype=D, requires_grad=True)
    with torch.no_grad():
        y = rev(x)
    assert not y.requires_grad and y.grad_fn is None
    assert torch.equal(y, nn.Sequential(*blocks)(x).detach())


def test_chain_rejects_bad_arguments() -> None:
    with pytest.raises(TypeError, match=r"^ReversibleSequential: needs at least one block"):
        ReversibleSequential()
    with pytest.raises(TypeError, match=r"blocks\[1\] must be a torch.nn.Module with an inverse"):
        ReversibleSequential(ChannelPad(1, 2), nn.ReLU())
    with pytest.raises(TypeError, match=r"keep_input must be True or False, got int \(1\)"):
        ReversibleSequential(ChannelPad(1, 2), keep_input=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"input must be a Tensor, got tuple"):
        ReversibleSequential(ChannelPad(1, 2))((torch.zeros(1, 1),))


# ------------------------------------------------------- train-mode BatchNorm, exactness


def _bn_half(c: int, dtype: torch.dtype) -> nn.Module:
    """conv (no bias: BatchNorm removes it) - BatchNorm (train mode) - ReLU."""
    return nn.Sequential(
        nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU()
    ).to(dtype)


def _bn_chain(side: str, dtype: torch.dtype, layout: str, c: int = 32) -> list[nn.Module]:
    """4 couplings with conv-BN-ReLU halves after a 3 -> c ChannelPad (inside or before)."""
    torch.manual_seed(0)
    blocks: list[nn.Module] = [
        AdditiveCoupling(_bn_half(c // 2, dtype), _bn_half(c // 2, dtype)) for _ in range(4)
    ]
    pad = ChannelPad(3, c, side=side)
    if layout == "inside":
        blocks[0] = PaddedCoupling(pad, blocks[0])
    else:  # the padding as a block of its own
        blocks.insert(0, pad)
    return blocks


def _relative_errors(
    got: Sequence[Tensor], want: Sequence[Tensor], eps: float
) -> list[tuple[float, int]]:
    """Per tensor: max |got - want| / max |want|, in units of eps (with the tensor's index).

    A tensor that should be all zeros (the weights of an Fm fed only padding) must be.
    """
    out = []
    for i, (a, b) in enumerate(zip(got, want)):
        diff, scale = float((a - b).abs().max()), float(b.abs().max())
        out.append((diff / scale / eps if scale else math.inf if diff else 0.0, i))
    return out


@pytest.mark.parametrize("layout", ["inside", "block"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("side", ["end", "both"])
@pytest.mark.parametrize("keep_input", [True, False])
def test_chain_with_train_batchnorm_matches_plain_network(
    keep_input: bool, side: str, dtype: torch.dtype, layout: str
) -> None:
    # With side="end" the first coupling's Fm gets a half that is all padding; a
    # train-mode BatchNorm there divides by sqrt(eps), so the rounding left in a rebuilt
    # padded half came out ~300x larger and the gradients hundreds of eps off (thousands
    # to 1e5 eps in float32, at this size). The inverse now knows the padded values.
    blocks = _bn_chain(side, dtype, layout)
    rev = ReversibleSequential(*blocks, keep_input=keep_input)
    plain = nn.Sequential(*blocks)
    params = list(rev.parameters())
    x = torch.randn(4, 3, 8, 8, dtype=dtype)
    grads = []
    for net in (rev, plain):
        xi = x.clone().requires_grad_(True)
        y = net(xi)
        w = torch.linspace(-1, 1, y.numel(), dtype=dtype).view_as(y)
        grads.append(torch.autograd.grad((y * w).sum(), [xi, *params]))
    errors = _relative_errors(grads[0], grads[1], torch.finfo(dtype).eps)
    worst = max(errors)
    assert worst[0] < 64, f"tensor {worst[1]} is {worst[0]:.0f} eps off"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_inverse_rebuilds_an_all_padding_half_exactly(dtype: torch.dtype) -> None:
    # the mechanism behind the test above, on one block: a rebuilt output a little off
    # (as the later blocks' inverses leave it) must give back the input a little off,
    # not ~1/sqrt(eps) times more
    block = _bn_chain("end", dtype, "inside")[0]
    x = torch.randn(4, 3, 8, 8, dtype=dtype)
    with torch.no_grad():
        y = block(x)
        noise = 10 * torch.finfo(dtype).eps * torch.randn_like(y)
        back = block.inverse(y + noise)
    assert float((back - x).abs().max()) < 100 * torch.finfo(dtype).eps * float(y.abs().max())


@pytest.mark.parametrize("keep_input", [True, False])
def test_batchnorm_running_statistics_updated_once_per_step(keep_input: bool) -> None:
    blocks = _bn_chain("both", D, "inside", c=8)
    twin = [copy.deepcopy(b) for b in blocks]
    rev = ReversibleSequential(*blocks, keep_input=keep_input)
    plain = nn.Sequential(*twin)
    x = torch.randn(4, 3, 6, 6, dtype=D)
    for _ in range(2):  # two training steps
        for net in (rev, plain):
            net(x.clone().requires_grad_(True)).square().sum().backward()
    for (name, a), (_, b) in zip(rev.named_buffers(), plain.named_buffers()):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14, msg=name)
    assert int(rev.blocks[1].Fm[1].num_batches_tracked) == 2


# ----------------------------------------------------------------------------- shape errors


@pytest.mark.parametrize(
    ("fm", "gm", "which", "got"),
    [
        (nn.Conv2d(4, 4, 3), None, "Fm", r"shape \(2, 4, 4, 4\)"),
        (nn.Identity(), nn.Conv2d(4, 4, 3, stride=2, padding=1), "Gm", r"shape \(2, 4, 3, 3\)"),
        (nn.Identity(), nn.Conv2d(4, 6, 1), "Gm", r"shape \(2, 6, 6, 6\)"),
    ],
)
def test_coupling_names_the_function_that_changes_the_shape(
    fm: nn.Module, gm: nn.Module | None, which: str, got: str
) -> None:
    coupling = AdditiveCoupling(fm, gm)
    x = torch.randn(2, 8, 6, 6)
    match = rf"^AdditiveCoupling: {which} returned {got} for a half of shape \(2, 4, 6, 6\)"
    with pytest.raises(PaddingError, match=match + r".*padding='same'"):
        coupling(x)
    with pytest.raises(PaddingError, match=r"^AdditiveCoupling: Gm returned"):
        AdditiveCoupling(nn.Identity(), nn.Conv2d(4, 4, 3)).inverse(x)
    with pytest.raises(PaddingError, match=r"^AdditiveCoupling: Fm returned shape"):
        ReversibleSequential(AdditiveCoupling(nn.Conv2d(4, 4, 3)))(x.requires_grad_(True))


def test_coupling_names_a_function_that_returns_no_tensor() -> None:
    class Pair(nn.Module):
        def forward(self, t: Tensor) -> tuple[Tensor, Tensor]:
            return t, t

    with pytest.raises(PaddingError, match=r"^AdditiveCoupling: Fm returned tuple for a half"):
        AdditiveCoupling(Pair())(torch.zeros(1, 2, 3))


# ----------------------------------------------------------------------------- inverse check


class _CropChannels(nn.Module):
    """A user-written block that is not invertible: it drops channels; 'inverse' adds zeros."""

    def __init__(self, keep: int) -> None:
        super().__init__()
        self.keep = keep

    def forward(self, x: Tensor) -> Tensor:
        return x[:, : self.keep].contiguous()

    def inverse(self, y: Tensor) -> Tensor:
        return F.pad(y, [0, 0, 0, 0, 0, 8 - self.keep])


class _CropBorder(nn.Module):
    """Crops a pixel off each border and forgets it: its 'inverse' cannot restore the shape."""

    def forward(self, x: Tensor) -> Tensor:
        return x[..., 1:-1, 1:-1].contiguous()

    def inverse(self, y: Tensor) -> Tensor:
        return y.clone()


def test_check_inverse_names_a_block_that_loses_data() -> None:
    chain = _chain(3)
    blocks = [chain[0], chain[1], _CropChannels(4), AdditiveCoupling(_f(2), _f(2))]
    x = torch.randn(2, 3, 6, 6, dtype=D)
    # without the check the chain runs and its gradients are silently wrong
    got = _grads(ReversibleSequential(*blocks), x, [])[0]
    want = _grads(nn.Sequential(*blocks), x, [])[0]
    assert float((got - want).abs().max()) > 0.01 * float(want.abs().max())
    checked = ReversibleSequential(*blocks, check_inverse=True)
    match = r"^ReversibleSequential: blocks\[2\] \(_CropChannels\): inverse\(forward\(x\)\) "
    with pytest.raises(NotInvertibleError, match=match + r"differs from x by up to .*Unpad"):
        checked(x.requires_grad_(True))
    with torch.no_grad():  # the check runs where inverses are used: when grad is recorded
        checked(x)
    shrink = ReversibleSequential(chain[0], _CropBorder(), check_inverse=True)
    with pytest.raises(
        NotInvertibleError,
        match=r"blocks\[1\] \(_CropBorder\): .* has shape \(2, 8, 4, 4\) for an input x of "
        r"shape \(2, 8, 6, 6\)",
    ):
        shrink(x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_check_inverse_accepts_invertible_chains(dtype: torch.dtype) -> None:
    blocks = _bn_chain("end", dtype, "inside", c=8)
    rev = ReversibleSequential(*blocks, check_inverse=True)
    plain = nn.Sequential(*[copy.deepcopy(b) for b in blocks])
    x = torch.randn(4, 3, 6, 6, dtype=dtype)
    rev(x.clone().requires_grad_(True)).sum().backward()
    plain(x.clone().requires_grad_(True)).sum().backward()
    for a, b in zip(rev.buffers(), plain.buffers()):  # the check leaves running stats alone
        torch.testing.assert_close(a, b)
    assert "check_inverse=True" in repr(rev)
    with pytest.raises(TypeError, match=r"check_inverse must be True or False, got str"):
        ReversibleSequential(*blocks, check_inverse="yes")  # type: ignore[arg-type]


def test_unpad_after_the_chain_and_refused_inside() -> None:
    torch.manual_seed(9)
    pad = ChannelPad(3, 8, side="both")
    coupling = AdditiveCoupling(_f(4), _f(4))
    net = nn.Sequential(ReversibleSequential(PaddedCoupling(pad, coupling)), Unpad(pad))
    plain = nn.Sequential(pad, coupling)
    params = list(coupling.parameters())
    x = torch.randn(2, 3, 5, 5, dtype=D)
    assert net(x).shape == (2, 3, 5, 5)
    _assert_same_grads(
        _grads(net, x, params), _grads(lambda t: plain(t)[:, 2:5].contiguous(), x, params)
    )
    # a crop saves nothing for backward: the chain's output is all that is kept
    saved, _ = _saved_bytes(lambda: net(x.requires_grad_(True)), params)
    assert saved == x.numel() * 8 + 8 * 25 * 2 * 8
    with pytest.raises(TypeError, match=r"blocks\[1\] is an Unpad, which discards data"):
        ReversibleSequential(pad, Unpad(pad))
    with pytest.raises(TypeError, match=r"^Unpad: pad must be a torch.nn.Module with an inverse"):
        Unpad(nn.ReLU())


# ----------------------------------------------------------------------------- memory


def _measure(n: int, first: str, keep_input: bool, c: int = 128) -> tuple[int, int, int, int]:
    """(reversible saved bytes, plain saved bytes, input bytes, output bytes) for forward."""
    blocks = [b.float() for b in _chain(n, 3, c, first)]
    rev = ReversibleSequential(*blocks, keep_input=keep_input)
    params = list(rev.parameters())
    x = torch.randn(1, 3, 4, 4, requires_grad=True)

    def run(net: nn.Module) -> Callable[[], Tensor]:
        def go() -> Tensor:
            h = x if first == "inside" else F.pad(x, [0, 0, 0, 0, 0, c - 3])
            out: Tensor = net(h)
            return out

        return go

    saved_rev, y = _saved_bytes(run(rev), params)
    saved_plain, _ = _saved_bytes(run(nn.Sequential(*blocks)), params)
    return saved_rev, saved_plain, x.numel() * 4, y.numel() * 4


def test_saved_bytes_do_not_grow_with_depth() -> None:
    # the set-up (3 -> 128 channels, padding inside the first block), small images
    sizes = [1, 2, 4, 8]
    figures = {n: _measure(n, "inside", keep_input=True) for n in sizes}
    rev = [figures[n][0] for n in sizes]
    plain = [figures[n][1] for n in sizes]
    assert len(set(rev)) == 1, rev
    # what is kept is the 3-channel input and the 128-channel output, nothing else
    x_bytes, y_bytes = figures[1][2], figures[1][3]
    assert rev[0] == x_bytes + y_bytes
    # the same blocks without reversibility: the measure does see growth
    assert all(a < b for a, b in itertools.pairwise(plain)), plain
    assert plain[-1] > 8 * rev[0]


@pytest.mark.parametrize("n", [1, 4])
def test_padding_inside_saves_less_than_outside(n: int) -> None:
    inside, _, x_bytes, y_bytes = _measure(n, "inside", keep_input=True)
    outside, _, _, _ = _measure(n, "outside", keep_input=True)
    assert outside == y_bytes * 2  # the kept input is the padded 128-channel tensor
    assert inside == x_bytes + y_bytes < outside
    # keep_input=False keeps only the output, wherever the padding is
    assert _measure(n, "inside", keep_input=False)[0] == y_bytes
    assert _measure(n, "outside", keep_input=False)[0] == y_bytes


def test_works_without_memcnn(monkeypatch: pytest.MonkeyPatch) -> None:
    # a fresh import of padkit.reversible with every memcnn import made to fail
    monkeypatch.setitem(sys.modules, "memcnn", None)
    monkeypatch.setattr(padkit, "reversible", sys.modules["padkit.reversible"])
    monkeypatch.delitem(sys.modules, "padkit.reversible")
    fresh = importlib.import_module("padkit.reversible")
    torch.manual_seed(8)
    blocks = [
        fresh.PaddedCoupling(fresh.ChannelPad(1, 2), fresh.AdditiveCoupling(nn.Linear(3, 3))),
        fresh.AdditiveCoupling(nn.Linear(3, 3)),
    ]
    rev = fresh.ReversibleSequential(*blocks)
    params = list(rev.parameters())
    x = torch.randn(2, 1, 3)
    saved, _ = _saved_bytes(lambda: rev(x.requires_grad_()), params)
    assert saved == x.numel() * 4 + 2 * x.numel() * 4  # input and output only
    got, want = _grads(rev, x, params), _grads(nn.Sequential(*blocks), x, params)
    for a, b in zip([got[0], *got[1]], [want[0], *want[1]]):
        torch.testing.assert_close(a, b)


# ----------------------------------------------------------------------------- memcnn


@needs_memcnn
@pytest.mark.parametrize(
    ("make", "shape"),
    [
        (lambda: ChannelPad(3, 8, side="both"), (2, 3, 4, 4)),
        (lambda: SpatialPad(((1, 2), (0, 1)), mode="circular"), (2, 3, 4, 4)),
        (lambda: PaddedCoupling(ChannelPad(3, 8), AdditiveCoupling(_f(4).float())), (2, 3, 4, 4)),
        (lambda: ReversibleSequential(*[b.float() for b in _chain(3)]), (2, 3, 4, 4)),
    ],
)
def test_memcnn_is_invertible_module(make: Callable[[], nn.Module], shape: tuple[int, ...]) -> None:
    assert memcnn is not None
    assert memcnn.is_invertible_module(make(), test_input_shape=shape)
    # the check can fail: a module whose inverse is not its inverse
    wrong = SpatialPad(1)
    wrong.inverse = lambda y: y[..., 1:-1, :-2].contiguous()  # type: ignore[method-assign,assignment]
    assert not memcnn.is_invertible_module(wrong, test_input_shape=shape)


@needs_memcnn
@memcnn_storage
def test_memcnn_wrapper_chain_gradients_equal_plain_network() -> None:
    assert memcnn is not None
    torch.manual_seed(5)
    pad = PaddedCoupling(ChannelPad(3, 8), memcnn.AdditiveCoupling(_f(4), _f(4)))
    couplings = [memcnn.AdditiveCoupling(_f(4), _f(4)) for _ in range(2)]
    wrapped = nn.Sequential(
        memcnn.InvertibleModuleWrapper(pad, keep_input=True),
        *[memcnn.InvertibleModuleWrapper(c, keep_input=False) for c in couplings],
    )
    plain = nn.Sequential(pad, *couplings)
    params = list(plain.parameters())
    x = torch.randn(2, 3, 4, 4, dtype=D)
    # memcnn both sets .grad on its inputs and returns it, which doubles a leaf's grad:
    # feed the wrapper a non-leaf, as inside any network
    got = _grads(lambda t: wrapped(t * 1), x, params)
    _assert_same_grads(got, _grads(plain, x, params))


@needs_memcnn
@memcnn_storage
def test_memcnn_wrapper_frees_and_rebuilds_a_channel_pad_input() -> None:
    assert memcnn is not None
    torch.manual_seed(6)
    coupling = memcnn.AdditiveCoupling(_f(4), _f(4))
    wrapped = nn.Sequential(
        memcnn.InvertibleModuleWrapper(ChannelPad(3, 8), keep_input=False),
        memcnn.InvertibleModuleWrapper(coupling, keep_input=False),
    )
    x = torch.randn(2, 3, 4, 4, dtype=D, requires_grad=True)
    h = x * 2  # an intermediate memcnn may free
    y = wrapped(h)
    assert h.untyped_storage().nbytes() == 0  # memcnn freed it; ChannelPad.inverse rebuilds it
    (y * y).sum().backward()
    ref = x.detach().clone().requires_grad_(True)
    (coupling(ChannelPad(3, 8)(ref * 2)) ** 2).sum().backward()
    assert x.grad is not None and ref.grad is not None
    torch.testing.assert_close(x.grad, ref.grad, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(h.detach(), x.detach() * 2, rtol=0, atol=1e-12)


@needs_memcnn
@memcnn_storage
@pytest.mark.parametrize("chain", ["memcnn", "padkit"])
def test_memcnn_coupling_after_padding_is_exact_with_train_batchnorm(chain: str) -> None:
    # memcnn's own RevNet use (keep_input=False everywhere) with the padding inside the
    # first wrapper: PaddedCoupling's inverse tells memcnn's coupling where the zeros are
    assert memcnn is not None
    ours = _bn_chain("end", torch.float32, "inside")
    pad = ours[0].pad
    couplings = [ours[0].coupling, *ours[1:]]
    mem = [memcnn.AdditiveCoupling(c.Fm, c.Gm) for c in couplings]
    first = PaddedCoupling(pad, mem[0])
    if chain == "memcnn":
        wrapped = nn.Sequential(
            *[memcnn.InvertibleModuleWrapper(m, keep_input=False) for m in [first, *mem[1:]]]
        )

        def run(t: Tensor) -> Tensor:
            out: Tensor = wrapped(t * 1)  # memcnn frees its input: give it a copy
            return out
    else:
        run = ReversibleSequential(first, *mem[1:], keep_input=False)
    plain = nn.Sequential(first, *mem[1:])
    params = list(plain.parameters())
    x = torch.randn(4, 3, 8, 8)
    got, want = _grads(run, x, params), _grads(plain, x, params)
    errors = _relative_errors(
        [got[0], *got[1]], [want[0], *want[1]], torch.finfo(torch.float32).eps
    )
    worst = max(errors)
    assert worst[0] < 64, f"tensor {worst[1]} is {worst[0]:.0f} eps off"


@needs_memcnn
def test_padkit_chain_runs_memcnn_couplings() -> None:
    assert memcnn is not None
    torch.manual_seed(7)
    blocks = [
        PaddedCoupling(ChannelPad(3, 8), memcnn.AdditiveCoupling(_f(4), _f(4))),
        memcnn.AdditiveCoupling(_f(4), _f(4)),
    ]
    ours = [
        PaddedCoupling(ChannelPad(3, 8), AdditiveCoupling(_f(4), _f(4))),
        AdditiveCoupling(_f(4)),
    ]
    for a, b in zip(ours, blocks):
        b.load_state_dict(a.state_dict())  # same keys as memcnn: Fm.*, Gm.*
    rev = ReversibleSequential(*blocks)
    params = list(rev.parameters())
    x = torch.randn(2, 3, 4, 4, dtype=D)
    with torch.no_grad():
        assert torch.equal(rev(x), nn.Sequential(*ours)(x))
    _assert_same_grads(_grads(rev, x, params), _grads(nn.Sequential(*blocks), x, params))
