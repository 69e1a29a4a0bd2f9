"""The per-layer fast path: a repeated call runs exactly what the first (fully checked) call ran.

The reference for every call is a fresh copy of the layer on its full path (argument parsing,
resolution, planning); outputs must be bit-identical.
"""

from __future__ import annotations

import copy
import io
import itertools
from typing import Any

import pytest
import torch

import padkit.nn as pnn
from padkit import PaddingError


class _NoMemo(dict):  # type: ignore[type-arg]
    """A layer memo that holds nothing: every call takes the full path."""

    def get(self, key: Any, default: Any = None) -> Any:
        return None


def fresh_call(layer: torch.nn.Module, x: torch.Tensor) -> Any:
    """A fresh copy's call on the full path (argument parsing, resolution, planning)."""
    memos = [(m, m._fast_cache) for m in (pnn._conv, pnn._pool, pnn._transpose)]
    try:
        for m, _ in memos:
            m._fast_cache = lambda layer: _NoMemo()
        return copy.deepcopy(layer)(x)
    finally:
        for m, real in memos:
            m._fast_cache = real


def assert_same(a: Any, b: Any) -> None:
    if isinstance(a, tuple):
        for u, v in zip(a, b, strict=True):
            assert torch.equal(u, v)
    else:
        assert torch.equal(a, b)


def repeated_calls_match(layer: torch.nn.Module, shapes: list[tuple[int, ...]]) -> None:
    """Each call, output and input gradient, equals a fresh copy's full path; the memo
    holds one entry per distinct shape (``shapes`` repeats one of its three)."""
    for shape in shapes:
        x = torch.randn(shape, requires_grad=True)
        ref = fresh_call(layer, x)
        out = layer(x)
        assert_same(out, ref)
        (g_ref,) = torch.autograd.grad(ref.sum(), x)
        (g_out,) = torch.autograd.grad(layer(x).sum(), x)
        assert torch.equal(g_out, g_ref)
    assert len(pnn._FAST[layer]) == 3  # one entry per input shape


CONV_KW = [
    {"padding": 1},
    {"padding": "same", "stride": 2},
    {"padding": "same", "stride": 2, "groups": 4},  # zero-extended kernel
    {"padding": ((0, 1), (1, 0))},  # crop
    {"padding": "same", "stride": 2, "dilation": 2},
    {"padding": "same_lower", "stride": 2},
    {"padding": 1, "padding_mode": "reflect"},  # full path every call
]


@pytest.mark.parametrize("kw", CONV_KW, ids=[str(k) for k in CONV_KW])
def test_conv_repeated_calls_match_the_full_path(kw: dict[str, Any]) -> None:
    torch.manual_seed(0)
    conv = pnn.Conv2d(4, 4, 3, **kw)
    repeated_calls_match(conv, [(2, 4, 11, 12), (2, 4, 12, 11), (2, 4, 11, 12), (4, 12, 12)])


TRANSPOSE_KW = [
    {"padding": 1},
    {"padding": "same", "stride": 2},  # crops (0, 1): sliced (or shifted) layout
    {"padding": ((0, 2), (1, 0)), "stride": 2},
    {"padding": "same", "stride": 2, "dilation": 2, "groups": 2},
    {"padding": 1, "stride": 2, "output_padding": 1},
]


@pytest.mark.parametrize("kw", TRANSPOSE_KW, ids=[str(k) for k in TRANSPOSE_KW])
def test_transposed_repeated_calls_match_the_full_path(kw: dict[str, Any]) -> None:
    torch.manual_seed(0)
    convt = pnn.ConvTranspose2d(4, 4, 3, **kw)
    repeated_calls_match(convt, [(2, 4, 7, 8), (2, 4, 8, 7), (2, 4, 7, 8), (4, 8, 8)])
    # output_size asks for the full path, and gets what it asks for
    x = torch.randn(1, 4, 7, 8)
    want = [s + 1 for s in convt(x).shape[2:]] if kw.get("stride") == 2 else None
    if want is not None and "output_padding" not in kw and "dilation" not in kw:
        assert list(convt(x, output_size=want).shape[2:]) == want


def test_transposed_changed_attributes_take_effect() -> None:
    torch.manual_seed(0)
    convt = pnn.ConvTranspose2d(2, 2, 3, stride=2, padding="same")
    x = torch.randn(1, 2, 5, 6)
    assert convt(x).shape[2:] == (10, 12)
    convt(x)
    convt.stride = (1, 1)  # 'same' at stride 1: the input's size
    assert convt(x).shape[2:] == (5, 6)
    convt.padding = 0  # the full output (n-1)*s + k
    assert convt(x).shape[2:] == (7, 8)
    convt.weight = torch.nn.Parameter(torch.zeros_like(convt.weight))
    torch.testing.assert_close(convt(x), convt.bias.view(1, 2, 1, 1).expand(1, 2, 7, 8))


def test_pool_repeated_calls_match_the_full_path() -> None:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for nd, pad, stride, ceil in itertools.product(
        (1, 2, 3), ("same", "same_lower", 1, "yolo"), (1, 2), (False, True)
    ):
        padding = ((0, 1),) * nd if pad == "yolo" else pad
        mx = (pnn.MaxPool1d, pnn.MaxPool2d, pnn.MaxPool3d)[nd - 1]
        av = (pnn.AvgPool1d, pnn.AvgPool2d, pnn.AvgPool3d)[nd - 1]
        layers.append(mx(3, stride, padding=padding, ceil_mode=ceil))
        layers.append(mx(3, stride, padding=padding, ceil_mode=ceil, return_indices=True))
        layers.append(av(3, stride, padding=padding, ceil_mode=ceil, count_include_pad=False))
        layers.append(av(3, stride, padding=padding, ceil_mode=ceil, count_include_pad=True))
    checked = 0
    for layer in layers:
        nd = layer._nd  # type: ignore[attr-defined]
        for n in (9, 10):
            x = torch.randn(2, 3, *([n] * nd))
            try:
                ref = fresh_call(layer, x)
            except PaddingError:
                continue
            assert_same(layer(x), ref)  # first call: full path
            assert_same(layer(x), ref)  # second: the memo
            checked += 1
    assert checked > 150


def test_frozen_weight_cache_follows_in_place_updates() -> None:
    torch.manual_seed(0)
    conv = pnn.Conv2d(8, 8, 3, stride=2, padding="same", groups=8)
    x = torch.randn(1, 8, 16, 16)

    def reference() -> torch.Tensor:
        xp = torch.nn.functional.pad(x, (0, 1, 0, 1))  # TF SAME at 16, stride 2
        return torch.nn.functional.conv2d(xp, conv.weight, conv.bias, 2, 0, 1, 8)

    with torch.no_grad():
        conv(x)
        conv(x)
        conv.weight.mul_(3)  # in place: the cached zero-extended kernel is stale
        torch.testing.assert_close(conv(x), reference(), rtol=0, atol=1e-5)
        conv.weight = torch.nn.Parameter(torch.randn_like(conv.weight))  # a new tensor
        torch.testing.assert_close(conv(x), reference(), rtol=0, atol=1e-5)
        conv.weight.data = torch.randn_like(conv.weight)  # new storage, same tensor
        torch.testing.assert_close(conv(x), reference(), rtol=0, atol=1e-5)


def test_copies_and_pickles_leave_the_memo_behind() -> None:
    torch.manual_seed(0)
    conv = pnn.Conv2d(4, 4, 3, stride=2, padding="same")
    x = torch.randn(1, 4, 9, 9)
    conv(x)
    conv(x)
    twin = copy.deepcopy(conv)
    assert twin not in pnn._FAST
    with torch.no_grad():
        twin.weight.zero_()
        twin.bias.zero_()  # type: ignore[union-attr]
    assert torch.count_nonzero(twin(x)) == 0
    assert torch.count_nonzero(twin(x)) == 0
    assert torch.count_nonzero(conv(x)) > 0
    buf = io.BytesIO()
    torch.save(conv, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert torch.equal(loaded(x), conv(x))


def test_changed_attributes_take_effect() -> None:
    torch.manual_seed(0)
    pool = pnn.AvgPool2d(3, 2, padding="same", count_include_pad=False)
    x = torch.randn(1, 2, 9, 9)
    pool(x)
    pool(x)
    pool.count_include_pad = True
    ref = torch.nn.functional.avg_pool2d(
        torch.nn.functional.pad(x, (1, 1, 1, 1)), 3, 2, 0, False, True
    )
    torch.testing.assert_close(pool(x), ref)
    conv = pnn.Conv2d(2, 2, 3, padding=1)
    conv(x)
    conv.stride = (2, 2)
    assert conv(x).shape[-1] == 5


@pytest.mark.parametrize("kw", CONV_KW[:-1], ids=[str(k) for k in CONV_KW[:-1]])
def test_conv_new_sizes_run_the_fast_path_from_their_first_call(
    kw: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # a conv layer that has met one input builds the closure of a new input size at its
    # first call, from the record kept per configuration: the full path never runs again,
    # and every size equals F.pad + the unpadded conv
    torch.manual_seed(0)
    layer = pnn.Conv2d(4, 8, 3, **kw)
    layer(torch.randn(1, 4, 9, 9))
    full: list[int] = []
    real = type(layer)._forward

    def counted(self: Any, *args: Any) -> Any:
        full.append(1)
        return real(self, *args)

    monkeypatch.setattr(type(layer), "_forward", counted)
    for h, w in ((10, 7), (11, 12), (6, 13), (16, 16)):
        x = torch.randn(2, 4, h, w)
        pads = layer.resolved_padding((h, w))
        flat = [p for pair in reversed(pads) for p in pair]
        ref = torch.nn.functional.conv2d(
            torch.nn.functional.pad(x, flat),
            layer.weight,
            layer.bias,
            layer.stride,
            0,
            layer.dilation,
            layer.groups,
        )
        torch.testing.assert_close(layer(x), ref)
    assert full == []


def test_conv_new_size_errors_are_the_full_paths() -> None:
    # a new input shape whose first call would fail (channels, an input smaller than the
    # kernel) gets the full path's padkit error, not torch's, however often it is called
    layer = pnn.Conv2d(4, 8, 5, padding="valid")
    layer(torch.randn(1, 4, 9, 9))
    for _ in range(2):
        with pytest.raises(PaddingError, match=r"input has 3 channels"):
            layer(torch.randn(1, 3, 9, 9))
        with pytest.raises(PaddingError, match=r"smaller than the effective kernel \(5\)"):
            layer(torch.randn(1, 4, 9, 4))
    assert layer(torch.randn(1, 4, 5, 5)).shape == (1, 8, 1, 1)
