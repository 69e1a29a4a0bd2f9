"""padkit layers under torch.compile (fullgraph, dynamic shapes) and torch.export.

The reference is the same layer run eagerly; the compiled graph must not break and must
stay correct when the input size changes the resolved pads (TF ``same`` at stride 2).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from mixed_model import model_and_twin
from torch import nn

import padkit.nn as pnn
from padkit.spec import Padding

LAYERS: list[tuple[str, Any]] = [
    ("conv-same-s2", lambda: pnn.Conv2d(4, 6, 3, stride=2, padding="same")),
    ("dw-same-s2", lambda: pnn.Conv2d(4, 4, 5, stride=2, padding="same", groups=4)),
    ("conv-dilated-same", lambda: pnn.Conv2d(4, 4, 3, stride=2, dilation=2, padding="same")),
    ("conv-reflect", lambda: pnn.Conv2d(4, 4, 3, padding=((0, 2), (1, 1)), padding_mode="reflect")),
    ("conv1d-causal", lambda: pnn.Conv1d(4, 4, 3, dilation=2, padding="causal")),
    ("convT-same", lambda: pnn.ConvTranspose2d(4, 4, 3, stride=2, padding="same")),
    ("max-same", lambda: pnn.MaxPool2d(3, 2, padding="same")),
    ("avg-same-excl", lambda: pnn.AvgPool2d(3, 2, padding="same", count_include_pad=False)),
    ("avg-same-incl", lambda: pnn.AvgPool2d(3, 2, padding="same", count_include_pad=True)),
    ("avg-same-divisor", lambda: pnn.AvgPool2d(3, 2, padding="same", divisor_override=2)),
    ("avg-dilated", lambda: pnn.AvgPool2d(3, 1, padding="same", dilation=2)),
    ("lp-same", lambda: pnn.LPPool2d(2, 3, 2, padding="same")),
]


def spatial(name: str, n: int) -> tuple[int, ...]:
    return (n,) if name.startswith("conv1d") else (n, n + 1)


@pytest.mark.parametrize("name, build", LAYERS, ids=[n for n, _ in LAYERS])
def test_compile_fullgraph_dynamic_matches_eager(name: str, build: Callable[[], nn.Module]) -> None:
    torch.manual_seed(0)
    torch._dynamo.reset()
    layer = build()
    compiled = torch.compile(layer, fullgraph=True, dynamic=True, backend="eager")
    for n in (9, 10, 13, 16):  # odd and even remainders: different TF 'same' pads
        x = torch.randn(2, 4, *spatial(name, n))
        torch.testing.assert_close(compiled(x), layer(x), rtol=1e-5, atol=1e-5)


def small_model() -> nn.Module:
    return nn.Sequential(
        pnn.Conv2d(3, 8, 3, stride=2, padding="same"),
        nn.ReLU(),
        pnn.Conv2d(8, 8, 3, stride=2, padding="same", groups=8),
        pnn.MaxPool2d(3, 2, padding="same"),
        pnn.AvgPool2d(2, 1, padding=((0, 1), (0, 1)), count_include_pad=False),
    )


def test_compile_aot_autograd_matches_eager_with_gradients() -> None:
    torch.manual_seed(0)
    torch._dynamo.reset()
    model = small_model()
    compiled = torch.compile(model, fullgraph=True, dynamic=True, backend="aot_eager")
    for n in (17, 20):
        x = torch.randn(2, 3, n, n, requires_grad=True)
        out, ref = compiled(x), model(x)
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
        (g_out,) = torch.autograd.grad(out.sum(), x)
        (g_ref,) = torch.autograd.grad(ref.sum(), x)
        torch.testing.assert_close(g_out, g_ref, rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # several minutes of C++ compilation on 2 cores; aot_eager above covers tracing
def test_compile_inductor_matches_eager() -> None:
    torch.manual_seed(0)
    torch._dynamo.reset()
    model = nn.Sequential(
        pnn.Conv2d(3, 8, 3, stride=2, padding="same"),
        nn.ReLU(),
        pnn.Conv2d(8, 8, 3, stride=2, padding="same", groups=8),
        pnn.MaxPool2d(3, 2, padding="same"),
    )
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    for n in (17, 20):
        x = torch.randn(2, 3, n, n)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)


class CountingBackend:
    """A torch.compile backend that counts the graphs dynamo hands it and runs each as is."""

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        self.graphs += 1
        return gm.forward


@pytest.mark.parametrize("name, build", LAYERS, ids=[n for n, _ in LAYERS])
def test_dynamic_compile_one_graph_for_every_size(
    name: str, build: Callable[[], nn.Module]
) -> None:
    torch.manual_seed(0)
    torch._dynamo.reset()
    layer = build()
    backend = CountingBackend()
    compiled = torch.compile(layer, fullgraph=True, dynamic=True, backend=backend)
    for n in (11, 12, 13, 14, 15, 16, 17, 18):  # every remainder mod 2: different 'same' pads
        x = torch.randn(1, 4, *((n,) if name.startswith("conv1d") else (n, n)))
        torch.testing.assert_close(compiled(x), layer(x), rtol=1e-5, atol=1e-5)
    # square inputs: torch itself has nothing to specialise on, and padkit adds no guard
    assert backend.graphs == 1


SIZES = ((33, 35), (32, 34), (31, 40), (40, 41), (27, 28))  # mixed parities in H and W


def test_dynamic_compile_mixed_model_at_most_two_graphs() -> None:
    model, twin = model_and_twin(dtype=torch.float32)
    torch._dynamo.reset()
    backend = CountingBackend()
    compiled = torch.compile(model, fullgraph=True, dynamic=True, backend=backend)
    for h, w in SIZES:
        x = torch.randn(2, 3, h, w)
        out = compiled(x)
        torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(out, twin(x), rtol=1e-5, atol=1e-6)
    # the first call's H == W-free sizes may be specialised by torch's duck sizing once
    assert backend.graphs <= 2


def test_torch_export_mixed_model_dynamic_sizes() -> None:
    model, twin = model_and_twin(dtype=torch.float32)
    h = torch.export.Dim("h", min=16, max=96)
    w = torch.export.Dim("w", min=16, max=96)
    x = torch.randn(2, 3, 30, 37)
    exported = torch.export.export(model, (x,), dynamic_shapes={"input": {2: h, 3: w}})
    run = exported.module()
    for hh, ww in SIZES:
        y = torch.randn(2, 3, hh, ww)
        torch.testing.assert_close(run(y), twin(y), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "name, build", LAYERS[:3] + LAYERS[6:8], ids=[n for n, _ in LAYERS[:3] + LAYERS[6:8]]
)
def test_torch_export_matches_eager(name: str, build: Callable[[], nn.Module]) -> None:
    torch.manual_seed(0)
    layer = build()
    x = torch.randn(2, 4, 12, 13)
    exported = torch.export.export(layer, (x,))
    y = torch.randn(2, 4, 12, 13)
    torch.testing.assert_close(exported.module()(y), layer(y), rtol=1e-5, atol=1e-5)
    h = torch.export.Dim("h", min=6, max=64)
    w = torch.export.Dim("w", min=6, max=64)
    dyn = torch.export.export(layer, (x,), dynamic_shapes={"input": {2: h, 3: w}})
    for n in (9, 10, 13, 16):
        y = torch.randn(2, 4, n, n + 1)
        torch.testing.assert_close(dyn.module()(y), layer(y), rtol=1e-5, atol=1e-5)


class GraphRecorder:
    """A torch.compile backend that keeps the graphs dynamo hands it and runs each as is."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        self.graphs.append(gm)
        return gm.forward

    def calls(self, *names: str) -> list[torch.fx.Node]:
        return [
            n
            for gm in self.graphs
            for n in gm.graph.nodes
            if n.op == "call_function" and getattr(n.target, "__name__", "") in names
        ]


def test_compile_depthwise_conv_pads_the_input() -> None:
    # a depthwise conv with pads (1, 2) runs eagerly with its kernel grown by zero taps where
    # the input is finite; a trace cannot ask that, and the zero taps would turn an infinity
    # outside a window into NaN, so compiled it is one F.pad of the input and the conv with
    # its own kernel and the symmetric part of the pads
    torch.manual_seed(0)
    layer = pnn.Conv2d(8, 8, 5, stride=2, padding="same", groups=8)
    x = torch.randn(1, 8, 16, 16)
    x[0, 3, 5, 6] = float("inf")
    assert layer.plan(x.shape).strategy == "zero_extend"
    torch._dynamo.reset()
    rec = GraphRecorder()
    with torch.no_grad():
        out = torch.compile(layer, fullgraph=True, dynamic=False, backend=rec)(x)
        ref = F.conv2d(F.pad(x, [1, 2, 1, 2]), layer.weight, layer.bias, stride=2, groups=8)
    assert torch.equal(out.isnan(), ref.isnan()) and torch.equal(out.isinf(), ref.isinf())
    finite = ref.isfinite()
    torch.testing.assert_close(out[finite], ref[finite], rtol=1e-5, atol=1e-6)
    (conv,) = rec.calls("conv2d")
    assert tuple(conv.args[1].meta["example_value"].shape) == (8, 1, 5, 5)
    assert [p.args[0].name for p in rec.calls("pad", "constant_pad_nd")] == [
        conv.args[0].args[0].name
    ]


def test_compile_crop_conv_pads_the_input() -> None:
    # eagerly a per-side conv computes the symmetric conv and crops the surplus outputs;
    # compiled, it is one F.pad of the input and the conv with no padding of its own
    torch.manual_seed(0)
    layer = pnn.Conv2d(8, 12, (2, 3), padding=((1, 0), (0, 2)))
    x = torch.randn(1, 8, 14, 13)
    assert layer.plan(x.shape).strategy == "crop"
    torch._dynamo.reset()
    rec = GraphRecorder()
    with torch.no_grad():
        out = torch.compile(layer, fullgraph=True, dynamic=False, backend=rec)(x)
    ref = F.conv2d(F.pad(x, [0, 2, 1, 0]), layer.weight, layer.bias)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    (conv,) = rec.calls("conv2d")
    (pad,) = rec.calls("pad", "constant_pad_nd")
    assert conv.args[0] is pad
    assert tuple(conv.meta["example_value"].shape) == tuple(ref.shape)  # no surplus computed


@pytest.mark.parametrize("divisor", [None, 5])
def test_compile_average_counting_pads_is_pad_then_pool(divisor: int | None) -> None:
    # eagerly an average counting its pads runs as a depthwise conv (a constant kernel);
    # compiled, it is F.pad + torch's unpadded pool, one loop for inductor
    pool = pnn.AvgPool2d(3, 2, padding="same", count_include_pad=True, divisor_override=divisor)
    x = torch.randn(2, 4, 16, 17)
    torch._dynamo.reset()
    rec = GraphRecorder()
    out = torch.compile(pool, fullgraph=True, dynamic=False, backend=rec)(x)
    ref = F.avg_pool2d(F.pad(x, [1, 1, 0, 1]), 3, 2, divisor_override=divisor)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    assert not rec.calls("conv2d")
    assert rec.calls("avg_pool2d")


# ----------------------------------------------------------------------------- static shapes
#
# With static shapes a layer reads its live attributes in the trace (dynamo guards them) and
# takes its plan for them as a constant, made outside the trace (padkit._compiled).

STATIC_LAYERS: list[tuple[str, Any]] = [
    *LAYERS,
    ("conv-crop", lambda: pnn.Conv2d(4, 6, (2, 3), padding=((1, 0), (0, 2)))),
    (
        "conv-modes",
        lambda: pnn.Conv2d(4, 4, 3, stride=2, padding="same", padding_mode=("reflect", "zeros")),
    ),
    (
        "conv-circular",
        lambda: pnn.Conv2d(4, 4, 3, padding=((2, 0), (1, 1)), padding_mode="circular"),
    ),
    ("conv3d-same-s2", lambda: pnn.Conv3d(4, 4, 3, stride=2, padding="same")),
    ("avg3d-same", lambda: pnn.AvgPool3d(3, 2, padding="same")),
    ("max3d-same", lambda: pnn.MaxPool3d(3, 2, padding="same")),
    ("convT-crops", lambda: pnn.ConvTranspose2d(4, 4, 4, stride=2, padding=((2, 1), (0, 3)))),
    ("max-indices", lambda: pnn.MaxPool2d(3, 2, padding="same", return_indices=True)),
    ("max-ceil", lambda: pnn.MaxPool2d(3, 2, padding=((0, 1), (1, 1)), ceil_mode=True)),
    ("avg-s1-excl", lambda: pnn.AvgPool2d(2, 1, padding="same")),
    ("max-caffe", lambda: pnn.MaxPool2d(3, 2, padding=Padding.from_caffe(1))),
]


def static_input(name: str, n: int) -> torch.Tensor:
    if "3d" in name:
        return torch.randn(2, 4, n, n + 1, n + 2)
    return torch.randn(2, 4, *spatial(name, n))


@pytest.mark.parametrize("name, build", STATIC_LAYERS, ids=[n for n, _ in STATIC_LAYERS])
def test_compile_static_matches_eager(name: str, build: Callable[[], nn.Module]) -> None:
    torch.manual_seed(0)
    torch._dynamo.reset()
    layer = build()
    compiled = torch.compile(layer, fullgraph=True, dynamic=False, backend="eager")
    for n in (9, 10):  # odd and even: different TF 'same' pads, a graph each
        x = static_input(name, n)
        torch.testing.assert_close(compiled(x), layer(x), rtol=1e-5, atol=1e-5)
        if x.dim() in (4, 5):
            fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
            cl = x.contiguous(memory_format=fmt)
            torch.testing.assert_close(compiled(cl), layer(cl), rtol=1e-5, atol=1e-5)
        if not name.startswith("conv1d"):
            torch.testing.assert_close(compiled(x[0]), layer(x[0]), rtol=1e-5, atol=1e-5)


def test_compile_static_transposed_output_size() -> None:
    torch.manual_seed(0)
    torch._dynamo.reset()
    layer = pnn.ConvTranspose2d(4, 4, 3, stride=2, padding="same")
    compiled = torch.compile(layer, fullgraph=True, dynamic=False, backend="eager")
    x = torch.randn(1, 4, 7, 8)
    for size in ([14, 16], [15, 17]):
        out = compiled(x, output_size=size)
        assert tuple(out.shape[2:]) == tuple(size)
        torch.testing.assert_close(out, layer(x, output_size=size), rtol=1e-5, atol=1e-5)


def test_compile_static_follows_attribute_changes() -> None:
    # the plan is a constant of the graph: dynamo must guard what it was made from
    torch.manual_seed(0)
    torch._dynamo.reset()
    conv = pnn.Conv2d(4, 4, 3, stride=2, padding="same")
    pool = pnn.AvgPool2d(3, 2, padding="same")
    model = nn.Sequential(conv, pool)
    compiled = torch.compile(model, fullgraph=True, dynamic=False, backend="eager")
    x = torch.randn(1, 4, 12, 13)
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)
    for change in (
        lambda: setattr(conv, "stride", (1, 1)),
        lambda: setattr(conv, "padding", ((1, 0), (0, 2))),
        lambda: setattr(conv, "dilation", (2, 1)),
        lambda: setattr(pool, "count_include_pad", True),
        lambda: setattr(pool, "padding", "same_lower"),
        lambda: setattr(pool, "ceil_mode", True),
    ):
        change()
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)


def test_compile_static_bad_input_raises_as_eagerly() -> None:
    layer = pnn.Conv2d(4, 4, 5, padding=((0, 0), (0, 0)))
    x = torch.randn(1, 4, 3, 9)
    with pytest.raises(Exception, match="smaller than the effective kernel"):
        layer(x)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="smaller than the effective kernel"):
        torch.compile(layer, dynamic=False, backend="eager")(x)


def guard_names(module: nn.Module, x: torch.Tensor) -> list[str]:
    """What dynamo guards when it compiles ``module`` for ``x`` (static shapes)."""
    names: list[str] = []
    torch._dynamo.reset()
    opt = torch._dynamo.optimize(
        "eager",
        nopython=True,
        dynamic=False,
        guard_export_fn=lambda guards: names.extend(g.name for g in guards),
    )(module)
    with torch.no_grad():
        opt(x)
    return names


def test_compiled_model_guards_its_attributes_not_padkits_planner() -> None:
    # every call of a compiled model checks its guards; padkit's planning (parsing,
    # resolution, plan choice) must not be traced into them
    model, _ = model_and_twin(dtype=torch.float32)
    names = guard_names(model, torch.randn(1, 3, 33, 34))
    planner = ("padkit_dot_op", "padkit_dot_spec", "padkit_dot_plan", ".pad_spec.")
    assert not [n for n in names if any(p in n for p in planner)]
    # what the plans were made from is guarded: each layer's spec and attributes
    assert sum(n.endswith(".pad_spec") for n in set(names)) == 8
    assert sum(n.endswith(".stride") for n in set(names)) == 8
    # padding modes too (reflect on one axis, zeros on the other)
    modes = pnn.Conv2d(3, 4, 3, stride=2, padding="same", padding_mode=("reflect", "zeros"))
    names = guard_names(nn.Sequential(modes), torch.randn(1, 3, 33, 34))
    assert not [n for n in names if any(p in n for p in planner)]


def test_compile_static_training_matches_eager_with_gradients() -> None:
    # with gradients a zero_extend conv pads its input instead (run-time revision): the
    # constant plan of the compiled path is revised in the trace as eagerly
    torch.manual_seed(0)
    model = nn.Sequential(
        pnn.Conv2d(3, 8, 3, stride=2, padding="same"),
        nn.ReLU(),
        pnn.Conv2d(8, 8, 5, stride=2, padding="same", groups=8),
        pnn.MaxPool2d(3, 2, padding="same"),
        pnn.AvgPool2d(2, 1, padding="same"),
        pnn.ConvTranspose2d(8, 4, 3, stride=2, padding="same"),
    )
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, dynamic=False, backend="aot_eager")
    x = torch.randn(2, 3, 17, 18, requires_grad=True)
    out, ref = compiled(x), model(x)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    inputs = [x, *model.parameters()]
    got = torch.autograd.grad(out.square().sum(), inputs)
    want = torch.autograd.grad(ref.square().sum(), inputs)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
