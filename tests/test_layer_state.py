"""Layers keep their numbers exact when other code handles them as torch layers.

List arguments (JSON configs), attributes changed after construction (``stride``,
``dilation``, ``kernel_size``, ``padding``), ``_conv_forward`` callers, directly built
``Padding`` records, torch.fx / torch.jit and torch.ao fusion. Every reference is torch
alone: an explicit ``F.pad`` with the pads the framework's rule gives (JAX's
``padtype_to_pads`` for TF ``SAME``), followed by the unpadded torch op, or the torch layer
configured the same way.
"""

from __future__ import annotations

import copy
import pickle
import warnings

import pytest
import torch
import torch.nn.functional as F
from oracles import rule_pads
from torch import nn

import padkit
import padkit.nn as pn
from padkit import Padding, PaddingError

torch.manual_seed(0)


def f_pad(pairs: list[tuple[int, int]]) -> list[int]:
    """(lo, hi) per spatial axis (axis order) -> F.pad's last-axis-first list."""
    out: list[int] = []
    for lo, hi in reversed(pairs):
        out += [lo, hi]
    return out


def same_conv_ref(conv: nn.Conv2d, x: torch.Tensor, stride: int, dilation: int = 1) -> torch.Tensor:
    """TF SAME: JAX's pads for each axis, F.pad, then the unpadded conv."""
    k = conv.weight.shape[-1]
    pairs = [rule_pads("same", n, k, stride, dilation) for n in x.shape[2:]]
    return F.conv2d(
        F.pad(x, f_pad(pairs)), conv.weight, conv.bias, stride, 0, dilation, conv.groups
    )


# ----------------------------------------------------------------------------- list arguments


@pytest.mark.parametrize(
    ("make", "ref"),
    [
        (lambda: pn.MaxPool2d([3, 3], [2, 2]), lambda: nn.MaxPool2d((3, 3), (2, 2))),
        (lambda: pn.AvgPool2d([3, 3], [2, 2]), lambda: nn.AvgPool2d((3, 3), (2, 2))),
        (lambda: pn.MaxPool2d(3, 2, dilation=[1, 1]), lambda: nn.MaxPool2d(3, 2)),
        (lambda: pn.MaxPool2d([2, 2], []), lambda: nn.MaxPool2d(2, 2)),
        (lambda: pn.AvgPool2d([2, 2], []), lambda: nn.AvgPool2d(2, 2)),
        (lambda: pn.MaxPool1d([3], [2], padding=[1]), lambda: nn.MaxPool1d(3, 2, 1)),
        (lambda: pn.AvgPool3d([2, 2, 2], [1, 2, 2]), lambda: nn.AvgPool3d((2, 2, 2), (1, 2, 2))),
        (lambda: pn.LPPool2d(2, [2, 2], [2, 2]), lambda: nn.LPPool2d(2, (2, 2), (2, 2))),
        (lambda: pn.Conv2d(2, 3, [3, 3], [2, 2], [1, 1], [1, 1]), None),
    ],
)
def test_list_arguments_behave_as_in_torch(make, ref) -> None:  # type: ignore[no-untyped-def]
    layer = make()
    nd = 3 if isinstance(layer, nn.AvgPool3d) else 1 if isinstance(layer, nn.MaxPool1d) else 2
    x = torch.randn(2, 2, *([9, 11, 10][:nd]))
    if ref is None:  # a conv: the torch conv with the same (tuple) arguments
        torch_layer = nn.Conv2d(2, 3, (3, 3), (2, 2), (1, 1), (1, 1))
        torch_layer.load_state_dict(layer.state_dict())
    else:
        torch_layer = ref()
    for _ in range(2):  # the first call, then the per-shape fast path
        torch.testing.assert_close(layer(x), torch_layer(x), rtol=0, atol=1e-6)


# ----------------------------------------------------------------------------- mutation


def test_conv_stride_changed_after_construction_resolves_again() -> None:
    conv = pn.Conv2d(2, 2, 3, padding="same")
    x = torch.randn(1, 2, 8, 8)
    conv(x)  # stride 1: pads (1, 1) remembered for this shape
    conv.stride = (2, 2)
    for _ in range(2):
        torch.testing.assert_close(conv(x), same_conv_ref(conv, x, 2), rtol=0, atol=1e-6)
    assert conv.resolved_padding((8, 8)) == ((0, 1), (0, 1))


def test_conv_dilation_and_padding_changed_after_construction() -> None:
    conv = pn.Conv2d(2, 2, 3, padding="same")
    x = torch.randn(1, 2, 9, 7)
    conv(x)
    conv.dilation = [2, 2]  # a list, as JSON-driven surgery writes it
    torch.testing.assert_close(conv(x), same_conv_ref(conv, x, 1, 2), rtol=0, atol=1e-6)
    conv.padding = ((0, 2), (1, 0))
    want = F.conv2d(F.pad(x, [1, 0, 0, 2]), conv.weight, conv.bias, 1, 0, 2)
    for _ in range(2):
        torch.testing.assert_close(conv(x), want, rtol=0, atol=1e-6)


def test_padding_assigned_as_torch_ints_replaces_the_spec() -> None:
    conv = pn.Conv2d(3, 3, 3, padding="same")
    conv(torch.randn(1, 3, 8, 8))
    conv.stride, conv.dilation, conv.padding = (1, 1), (2, 2), (2, 2)  # torchvision-style
    ref = nn.Conv2d(3, 3, 3, padding=2, dilation=2)
    ref.load_state_dict(conv.state_dict())
    x = torch.randn(1, 3, 16, 16)
    torch.testing.assert_close(conv(x), ref(x), rtol=0, atol=1e-6)
    assert conv.padding == (2, 2)
    assert conv(x).shape[-2:] == (16, 16)


def test_pool_kernel_size_and_padding_changed_after_construction() -> None:
    pool = pn.MaxPool2d(3, 2, padding="same")
    x = torch.randn(1, 2, 9, 9)
    pool(x)
    pool.kernel_size = 2
    pairs = [rule_pads("same", 9, 2, 2)] * 2
    want = F.max_pool2d(F.pad(x, f_pad(pairs), value=-float("inf")), 2, 2)
    torch.testing.assert_close(pool(x), want)
    pool.padding = 1
    torch.testing.assert_close(pool(x), F.max_pool2d(x, 2, 2, 1))
    assert pool.padding == 1


def test_avg_pool_flags_changed_after_construction() -> None:
    pool = pn.AvgPool2d(3, 1, padding=1)
    x = torch.randn(1, 2, 6, 6)
    pool(x)
    pool.count_include_pad = False
    torch.testing.assert_close(pool(x), F.avg_pool2d(x, 3, 1, 1, count_include_pad=False))


def test_invalid_mutation_is_reported_on_the_next_call() -> None:
    conv = pn.Conv2d(1, 1, 3)
    conv(torch.randn(1, 1, 5, 5))
    conv.stride = (0, 1)
    with pytest.raises(PaddingError, match=r"stride\[0\] must be >= 1"):
        conv(torch.randn(1, 1, 5, 5))
    with pytest.raises(PaddingError, match="unknown padding string 'samee'"):
        conv.padding = "samee"


# ----------------------------------------------------------------------------- _conv_forward


class _Scaled(pn.Conv2d):
    """A subclass that supplies its own weight, as weight-norm and fake-quant wrappers do."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self._conv_forward(input, 2 * self.weight, self.bias)


@pytest.mark.parametrize("mode", ["zeros", "reflect", "circular"])
def test_conv_forward_hook_applies_the_padding(mode: str) -> None:
    conv = _Scaled(2, 2, 3, padding=1, padding_mode=mode)
    x = torch.randn(1, 2, 8, 8)
    torch_mode = "constant" if mode == "zeros" else mode
    want = F.conv2d(F.pad(x, [1, 1, 1, 1], mode=torch_mode), 2 * conv.weight, conv.bias)
    for _ in range(2):
        torch.testing.assert_close(conv(x), want, rtol=0, atol=1e-5)


def test_conv_forward_hook_with_per_side_pads() -> None:
    conv = _Scaled(2, 2, 3, stride=2, padding=((0, 1), (1, 0)))
    x = torch.randn(1, 2, 8, 7)
    want = F.conv2d(F.pad(x, [1, 0, 0, 1]), 2 * conv.weight, conv.bias, 2)
    for _ in range(2):
        torch.testing.assert_close(conv(x), want, rtol=0, atol=1e-5)


# ----------------------------------------------------------------------------- Padding(...)


def test_padding_built_directly_is_validated_and_canonical() -> None:
    with pytest.raises(PaddingError, match=r"unknown rule 'bogus'"):
        Padding(("bogus",))
    with pytest.raises(TypeError, match=r"must be a \(lo, hi\) pair"):
        Padding(((1, 2, 3),))  # type: ignore[arg-type]
    spec = Padding([(0, 1)])  # type: ignore[arg-type]
    assert spec == Padding(((0, 1),)) and hash(spec) == hash(Padding(((0, 1),)))
    layer = pn.MaxPool1d(2, 1, padding=spec)
    x = torch.randn(1, 1, 5)
    torch.testing.assert_close(layer(x), F.max_pool1d(F.pad(x, [0, 1], value=-float("inf")), 2, 1))


# ----------------------------------------------------------------------------- construction


@pytest.mark.parametrize("name", ["ceil_mode", "count_include_pad"])
def test_non_bool_flags_are_refused_at_construction(name: str) -> None:
    with pytest.raises(TypeError, match=rf"AvgPool2d: {name} must be True or False, got str"):
        pn.AvgPool2d(3, 2, padding="same", **{name: "yes"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="MaxPool2d: ceil_mode must be True or False"):
        pn.MaxPool2d(3, 2, padding="same", ceil_mode="yes")  # type: ignore[arg-type]


def test_group_errors_are_value_errors_not_padding_errors() -> None:
    with pytest.raises(ValueError, match="groups must be a positive int") as info:
        pn.Conv2d(4, 4, 3, groups=0)
    assert not isinstance(info.value, PaddingError)
    with pytest.raises(ValueError, match="in_channels=3 must be a positive multiple") as info:
        pn.Conv2d(3, 4, 3, groups=2)
    assert not isinstance(info.value, PaddingError)


# ----------------------------------------------------------------------------- tracing


def _model() -> nn.Module:
    return nn.Sequential(
        pn.Conv2d(3, 4, 3, stride=2, padding="same"),
        nn.ReLU(),
        pn.MaxPool2d(3, 2, padding="same"),
        pn.AvgPool2d(2, 1, padding=((0, 1), (0, 1)), count_include_pad=False),
        pn.ConvTranspose2d(4, 2, 3, stride=2, padding="same"),
    ).eval()


def test_fx_symbolic_trace_resolves_pads_per_input_size() -> None:
    model = _model()
    graph = torch.fx.symbolic_trace(model)
    for size in ((17, 16), (32, 31)):  # one trace, every size: 'same' resolves at run time
        x = torch.randn(2, 3, *size)
        torch.testing.assert_close(graph(x), model(x), rtol=0, atol=0)
    # a model that is not a Sequential, with a padkit layer called on a computed tensor
    assert "padkit_functional_conv2d" in graph.code


def test_jit_trace_matches_at_the_traced_size() -> None:
    model = _model()
    x = torch.randn(2, 3, 17, 16)
    with pytest.warns(Warning):  # torch warns that it specialises sizes (and that trace is old)
        traced = torch.jit.trace(model, x)
    x2 = torch.randn(2, 3, 17, 16)
    # the trace holds torch's ops; eager may run the oneDNN backend: equal to float rounding
    torch.testing.assert_close(traced(x2), model(x2))


def test_jit_script_compiles_symmetric_layers_and_refuses_the_rest_clearly() -> None:
    model = nn.Sequential(
        pn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect"), pn.MaxPool2d(3, 1, 1)
    ).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch deprecates TorchScript
        scripted = torch.jit.script(model)
        x = torch.randn(1, 3, 9, 8)
        torch.testing.assert_close(scripted(x), model(x), rtol=0, atol=0)
        # torch's __prepare_scriptable__ protocol puts the plain layer into the model itself:
        # the same numbers either way
        torch.testing.assert_close(model(x), scripted(x), rtol=0, atol=0)
        same = nn.Sequential(pn.Conv2d(3, 4, 3, stride=2, padding="same"))
        with pytest.raises(TypeError, match=r"jit\.script cannot compile padkit\.nn\.Conv2d: "):
            torch.jit.script(same)
        with pytest.raises(TypeError, match=r"pads \(\(0, 1\),\) differ per side"):
            torch.jit.script(pn.MaxPool1d(2, 1, padding=((0, 1),)))


# ----------------------------------------------------------------------------- copies


def test_copies_keep_the_mutated_state() -> None:
    conv = pn.Conv2d(2, 2, 3, padding="same")
    x = torch.randn(1, 2, 8, 8)
    conv(x)
    conv.stride = (2, 2)
    want = same_conv_ref(conv, x, 2)
    for clone in (copy.deepcopy(conv), pickle.loads(pickle.dumps(conv))):
        torch.testing.assert_close(clone(x), want, rtol=0, atol=1e-6)
    fresh = pn.Conv2d(2, 2, 3, stride=2, padding="same")
    fresh.load_state_dict(conv.state_dict())
    torch.testing.assert_close(fresh(x), want, rtol=0, atol=1e-6)


def test_padkit_namespace_exports_the_record() -> None:
    op = padkit.op.Op.from_module(pn.MaxPool2d([3, 3], [], padding="same"))
    assert op is not None and op.stride == (3, 3) and op.kind == "max"
    assert padkit.op.Op.from_module(nn.Conv2d(1, 1, 3, padding="same")).padding == Padding.parse(
        "same_static", 2
    )
