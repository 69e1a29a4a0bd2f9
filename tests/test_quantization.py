"""Quantization of models with padkit convs, each against its quantized reference twin.

The twin is the same model built from torch's layers, each padkit conv replaced by an
explicit ``F.pad`` and the unpadded torch conv, with the same weights, qconfig, observers
and calibration data. A quantized padkit model must equal its quantized twin within one
quantization step of the output, at an even and an odd input size.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.ao import quantization as tq
from torch.ao.quantization import DeQuantStub, QuantStub

import padkit.nn as pn
import padkit.quantization as pq
from padkit import PaddingError

# torch.ao's functions carry no annotations
convert: Callable[..., Any] = tq.convert
fuse_modules: Callable[..., Any] = tq.fuse_modules
fuse_modules_qat: Callable[..., Any] = tq.fuse_modules_qat
get_default_qat_qconfig: Callable[..., Any] = tq.get_default_qat_qconfig
get_default_qconfig: Callable[..., Any] = tq.get_default_qconfig
prepare: Callable[..., Any] = tq.prepare
prepare_qat: Callable[..., Any] = tq.prepare_qat

# torch.ao's eager API, its observers and quantized tensors warn about their deprecation
pytestmark = [
    pytest.mark.filterwarnings("ignore:torch.ao.quantization is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:Please use quant_min and quant_max:UserWarning"),
    pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning"),
    # torchao keeps its XNNPACK quantizer for testing (the maintained one lives in executorch)
    pytest.mark.filterwarnings("ignore:XNNPACKQuantizer is deprecated:UserWarning"),
]


def same_pads(n: int, k: int, s: int) -> tuple[int, int]:
    """TF SAME pads of one axis, written out independently of padkit."""
    out = -(-n // s)
    total = max((out - 1) * s + k - n, 0)
    return total // 2, total - total // 2


def tf_same_pad(x: Tensor, k: int, s: int) -> Tensor:
    """``F.pad`` by TF SAME's pads for this input (fx-wrapped: sizes are read at run time)."""
    pairs = [same_pads(int(n), k, s) for n in x.shape[2:]]
    return F.pad(x, [p for pair in reversed(pairs) for p in pair])


torch.fx.wrap("tf_same_pad")


class Pad(nn.Module):
    """``F.pad`` with fixed (lo, hi) pairs per spatial axis, or TF SAME for (k, s)."""

    def __init__(
        self, pairs: tuple[tuple[int, int], ...] | None, same: tuple[int, int] | None = None
    ) -> None:
        super().__init__()
        self.pairs, self.same = pairs, same

    def forward(self, x: Tensor) -> Tensor:
        if self.same is not None:
            return tf_same_pad(x, *self.same)
        assert self.pairs is not None
        return F.pad(x, [p for pair in reversed(self.pairs) for p in pair])


def models(stubs: bool) -> tuple[nn.Sequential, nn.Sequential]:
    """A padkit CNN ('same' stride 2 + BN + ReLU, depthwise per-side + BN + ReLU, a per-side
    conv alone) and its twin with the same weights and BatchNorm statistics."""
    torch.manual_seed(0)
    body = [
        pn.Conv2d(3, 8, 3, stride=2, padding="same"),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        pn.Conv2d(8, 8, 3, groups=8, padding=((0, 1), (2, 1))),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        pn.Conv2d(8, 4, (2, 3), padding=((1, 0), (1, 1))),
    ]
    twin = [
        nn.Sequential(Pad(None, (3, 2)), nn.Conv2d(3, 8, 3, stride=2)),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Sequential(Pad(((0, 1), (2, 1))), nn.Conv2d(8, 8, 3, groups=8)),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Sequential(Pad(((1, 0), (1, 1))), nn.Conv2d(8, 4, (2, 3))),
    ]
    for layer, ref in zip(body, twin):
        if isinstance(layer, nn.BatchNorm2d):
            stats: Any = layer
            stats.running_mean.uniform_(-0.5, 0.5)
            stats.running_var.uniform_(0.5, 2.0)
            layer.weight.data.uniform_(0.5, 1.5)
            layer.bias.data.uniform_(-0.5, 0.5)
        target = ref[1] if isinstance(ref, nn.Sequential) else ref
        target.load_state_dict(layer.state_dict())
    if stubs:
        return (
            nn.Sequential(QuantStub(), *body, DeQuantStub()),
            nn.Sequential(QuantStub(), *twin, DeQuantStub()),
        )
    return nn.Sequential(*body), nn.Sequential(*twin)


PADKIT_QUANTIZED = (pq.QuantizedConv2d, pq.QuantizedConvReLU2d)

#: fuse groups of the stubbed models (padkit names, twin names)
GROUPS = ([["1", "2", "3"], ["4", "5", "6"]], [["1.1", "2", "3"], ["4.1", "5", "6"]])


def output_step(model: nn.Module) -> float:
    """The output scale of the last quantized conv of a converted eager model."""
    scales = [m.scale for m in model.modules() if isinstance(m, torch.ao.nn.quantized.Conv2d)]
    return float(scales[-1])


def assert_within_one_step(got: Tensor, want: Tensor, step: float) -> None:
    assert got.shape == want.shape
    err = (got - want).abs().max().item()
    assert err <= step * 1.001, f"max error {err} exceeds one quantization step {step}"


def calibration(sizes: tuple[int, ...]) -> list[Tensor]:
    torch.manual_seed(1)
    return [torch.randn(2, 3, n, n + 1) for n in sizes for _ in range(2)]


# ----------------------------------------------------------------------------- eager PTQ


def eager_ptq(sizes: tuple[int, ...]) -> tuple[nn.Module, nn.Module]:
    model, twin = models(stubs=True)
    out = []
    for m, groups in zip((model, twin), GROUPS):
        m.eval()
        m.qconfig = get_default_qconfig("x86")
        prepared = prepare(fuse_modules(m, groups))
        for x in calibration(sizes):
            prepared(x)
        out.append(convert(prepared))
    return out[0], out[1]


@pytest.mark.parametrize("size", [10, 9])
def test_eager_ptq_matches_the_quantized_twin(size: int) -> None:
    qmodel, qtwin = eager_ptq((size,))
    convs = [m for m in qmodel.modules() if isinstance(m, torch.ao.nn.quantized.Conv2d)]
    assert len(convs) == 3 and all(isinstance(m, PADKIT_QUANTIZED) for m in convs)
    x = torch.randn(2, 3, size, size + 1)
    assert_within_one_step(qmodel(x), qtwin(x), output_step(qtwin))


def test_eager_ptq_same_at_another_size_stays_exact() -> None:
    qmodel, qtwin = eager_ptq((10,))
    for size in (13, 16):
        x = torch.randn(1, 3, size, size - 3)
        assert_within_one_step(qmodel(x), qtwin(x), output_step(qtwin))


def test_eager_fusion_builds_modules_torch_recognises() -> None:
    model, _ = models(stubs=True)
    fused = fuse_modules(model.eval(), GROUPS[0])
    assert isinstance(fused[1], torch.ao.nn.intrinsic.ConvReLU2d)
    assert isinstance(fused[1][0], pn.Conv2d)  # BatchNorm folded into the padkit conv
    assert isinstance(fused[2], nn.Identity)


def test_quantized_model_copies_and_reloads_with_its_padding() -> None:
    qmodel, _ = eager_ptq((9,))
    x = torch.randn(1, 3, 9, 10)
    want = qmodel(x)
    torch.testing.assert_close(copy.deepcopy(qmodel)(x), want, rtol=0, atol=0)
    other, _ = eager_ptq((12,))  # other observers: other scales
    other.load_state_dict(qmodel.state_dict())
    torch.testing.assert_close(other(x), want, rtol=0, atol=0)


class ModePad(nn.Module):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode

    def forward(self, x: Tensor) -> Tensor:
        return F.pad(x, (2, 1), mode=self.mode)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_eager_ptq_padding_modes(mode: str) -> None:
    """A mode pads by copying values, so padding the float input before quantizing it is the
    twin: the quantized padkit conv pads the quantized input and must give the same."""
    torch.manual_seed(0)
    conv = pn.Conv1d(2, 3, 3, padding=((2, 1),), padding_mode=mode)
    ref = nn.Conv1d(2, 3, 3)
    ref.load_state_dict(conv.state_dict())
    data = [torch.randn(2, 2, 7) for _ in range(2)]
    qs = []
    for m in (
        nn.Sequential(QuantStub(), conv, DeQuantStub()),
        nn.Sequential(ModePad(mode), QuantStub(), ref, DeQuantStub()),
    ):
        m.eval().qconfig = get_default_qconfig("x86")
        prepared = prepare(m)
        for x in data:
            prepared(x)
        qs.append(convert(prepared))
    assert isinstance(qs[0][1], pq.QuantizedConv1d)
    for n in (7, 8):
        x = torch.randn(2, 2, n)
        torch.testing.assert_close(qs[0](x), qs[1](x), rtol=0, atol=0)


@pytest.mark.parametrize("nd", [1, 3])
def test_eager_ptq_1d_and_3d(nd: int) -> None:
    torch.manual_seed(0)
    conv = (pn.Conv1d, pn.Conv3d)[nd // 3](2, 3, 3, stride=2, padding="same")
    ref = (nn.Conv1d, nn.Conv3d)[nd // 3](2, 3, 3, stride=2)
    ref.load_state_dict(conv.state_dict())
    data = torch.randn(2, 2, *(6,) * nd)
    qs = []
    for m in (
        nn.Sequential(QuantStub(), conv, nn.ReLU(), DeQuantStub()),
        nn.Sequential(QuantStub(), nn.Sequential(Pad(None, (3, 2)), ref), nn.ReLU(), DeQuantStub()),
    ):
        m.eval().qconfig = get_default_qconfig("x86")
        names = ["1", "2"] if m[1] is conv else ["1.1", "2"]
        prepared = prepare(fuse_modules(m, [names]))
        prepared(data)
        qs.append(convert(prepared))
    assert isinstance(qs[0][1], (pq.QuantizedConvReLU1d, pq.QuantizedConvReLU3d))
    for n in (6, 7):
        x = torch.randn(1, 2, *(n,) * nd)
        torch.testing.assert_close(qs[0](x), qs[1](x), rtol=0, atol=0)


# ----------------------------------------------------------------------------- eager QAT


@pytest.mark.parametrize("size", [10, 9])
def test_eager_qat_matches_the_quantized_twin(size: int) -> None:
    model, twin = models(stubs=True)
    out = []
    for m, groups in zip((model, twin), GROUPS):
        m.train()
        m.qconfig = get_default_qat_qconfig("x86")
        prepared = prepare_qat(fuse_modules_qat(m, groups))
        for x in calibration((size,)):
            prepared(x)
        out.append(convert(prepared.eval()))
    qmodel, qtwin = out
    qat = [m for m in qmodel.modules() if isinstance(m, PADKIT_QUANTIZED)]
    assert len(qat) == 3
    x = torch.randn(2, 3, size, size + 1)
    assert_within_one_step(qmodel(x), qtwin(x), output_step(qtwin))


def test_eager_qat_trains_like_the_twin() -> None:
    """A training step of the fake-quantized padkit model gives the twin's loss and grads."""
    model, twin = models(stubs=True)
    prepared: list[Any] = []
    for m, groups in zip((model, twin), GROUPS):
        m.train()
        m.qconfig = get_default_qat_qconfig("x86")
        prepared.append(prepare_qat(fuse_modules_qat(m, groups)))
    assert isinstance(prepared[0][1], pq.QATConvBnReLU2d)
    x = torch.randn(2, 3, 9, 10)
    losses = [p(x).square().mean() for p in prepared]
    for loss in losses:
        loss.backward()
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-5, atol=1e-6)
    g0 = prepared[0][1].weight.grad
    g1 = prepared[1][1][1].weight.grad
    assert g0 is not None and g1 is not None
    torch.testing.assert_close(g0, g1, rtol=1e-4, atol=1e-5)


def test_eager_qat_refuses_a_transposed_conv_with_batchnorm() -> None:
    model = nn.Sequential(pn.ConvTranspose2d(2, 2, 3, padding=((0, 1), (1, 0))), nn.BatchNorm2d(2))
    with pytest.raises(NotImplementedError, match="transposed convs"):
        fuse_modules_qat(model.train(), [["0", "1"]])


# ----------------------------------------------------------------------------- FX graph mode


def minmax_qconfig_mapping() -> Any:
    """x86's default activation observer is a histogram, whose parameters depend on the
    values' distribution; the twin's observer sits after its explicit F.pad and sees the
    pads, so the comparison uses min/max observers (the pads' zeros lie in every range)."""
    make_qconfig: Callable[..., Any] = tq.QConfig
    qconfig = make_qconfig(
        activation=tq.MinMaxObserver.with_args(reduce_range=True),
        weight=tq.default_per_channel_weight_observer,
    )
    return tq.QConfigMapping().set_global(qconfig)


def test_fx_ptq_matches_the_quantized_twin() -> None:
    from torch.ao.quantization import quantize_fx

    from padkit.quantization import fx as pfx

    for size in (10, 9):
        model, twin = models(stubs=False)
        data = calibration((size,))
        ours = pfx.prepare_fx(model.eval(), minmax_qconfig_mapping(), (data[0],))
        ref = quantize_fx.prepare_fx(twin.eval(), minmax_qconfig_mapping(), (data[0],))
        for x in data:
            ours(x)
            ref(x)
        q_ours, q_ref = pfx.convert_fx(ours), quantize_fx.convert_fx(ref)
        convs = [m for m in q_ours.modules() if isinstance(m, PADKIT_QUANTIZED)]
        assert len(convs) == 3  # BatchNorm folded: no other module left
        assert not any(isinstance(m, nn.BatchNorm2d) for m in q_ours.modules())
        for n in (size, 13):
            x = torch.randn(2, 3, n, n + 1)
            assert_within_one_step(q_ours(x), q_ref(x), output_step(q_ref))


def test_fx_with_torchs_functions_and_padkits_configs() -> None:
    from torch.ao.quantization import quantize_fx

    from padkit.quantization import fx as pfx

    model, _ = models(stubs=False)
    x = torch.randn(1, 3, 9, 10)
    prepared = quantize_fx.prepare_fx(
        model.eval(),
        minmax_qconfig_mapping(),
        (x,),
        prepare_custom_config=pfx.prepare_custom_config(),
        backend_config=pfx.backend_config(),
    )
    prepared(x)
    converted = quantize_fx.convert_fx(prepared, backend_config=pfx.backend_config())
    assert sum(isinstance(m, PADKIT_QUANTIZED) for m in converted.modules()) == 3


def test_fx_qat_matches_the_eager_qat_twin() -> None:
    """FX QAT of the padkit model against eager QAT of the twin (the FX twin would add a
    second fake-quantize after each explicit F.pad, which the padkit model has not)."""
    from padkit.quantization import fx as pfx

    for size in (10, 9):
        model, _ = models(stubs=False)
        _, twin = models(stubs=True)
        data = calibration((size,))
        ours = pfx.prepare_qat_fx(
            model.train(), tq.get_default_qat_qconfig_mapping("x86"), (data[0],)
        )
        twin.train().qconfig = get_default_qat_qconfig("x86")
        ref = prepare_qat(fuse_modules_qat(twin, GROUPS[1]))
        assert sum(isinstance(m, pq.QATConvBnReLU2d) for m in ours.modules()) == 2
        assert sum(isinstance(m, pq.QATConv2d) for m in ours.modules()) == 1
        for x in data:
            torch.testing.assert_close(ours(x), ref(x), rtol=1e-5, atol=1e-5)
        q_ours, q_ref = pfx.convert_fx(ours.eval()), convert(ref.eval())
        for n in (size, 13):
            x = torch.randn(2, 3, n, n + 1)
            assert_within_one_step(q_ours(x), q_ref(x), output_step(q_ref))


def test_fx_backend_config_refuses_a_non_config() -> None:
    from padkit.quantization import fx as pfx

    with pytest.raises(TypeError, match="base must be a torch"):
        pfx.backend_config("x86")  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- PT2E

pt2e = pytest.importorskip("torchao.quantization.pt2e.quantize_pt2e")


def x86_quantizer() -> Any:
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq

    return xiq.X86InductorQuantizer().set_global(xiq.get_default_x86_inductor_quantization_config())


def xnnpack_quantizer() -> Any:
    xnn = pytest.importorskip("torchao.testing.pt2e._xnnpack_quantizer")
    return xnn.XNNPACKQuantizer().set_global(xnn.get_symmetric_quantization_config())


QUANTIZERS = {"x86_inductor": x86_quantizer, "xnnpack": xnnpack_quantizer}


def pt2e_prepared(model: nn.Module, quantizer: Any, example: Tensor, **kw: Any) -> Any:
    exported = torch.export.export(model.eval(), (example,), **kw).module()
    return pt2e.prepare_pt2e(exported, quantizer)


def quantized_convs(gm: Any) -> int:
    """Convs whose activation input is dequantized from int8 (i.e. quantized convs)."""
    count = 0
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target == torch.ops.aten.conv2d.default:
            src = node.args[0]
            count += "dequantize" in str(getattr(src, "target", ""))
    return count


@pytest.mark.parametrize("name", sorted(QUANTIZERS))
@pytest.mark.parametrize("size", [10, 9])
def test_pt2e_matches_the_quantized_twin(name: str, size: int) -> None:
    model, twin = models(stubs=False)
    data = calibration((size,))
    converted = []
    for m, quantizer in (
        (model, pq.PadkitQuantizer(QUANTIZERS[name]())),
        (twin, QUANTIZERS[name]()),
    ):
        prepared = pt2e_prepared(m, quantizer, data[0])
        for x in data:
            prepared(x)
        converted.append(pt2e.convert_pt2e(prepared))
    ours, ref = converted
    assert quantized_convs(ours) == quantized_convs(ref) == 3
    targets = {str(n.target) for n in ours.graph.nodes}
    assert not any("batch_norm" in t for t in targets)  # folded
    x = torch.randn(2, 3, size, size + 1)
    out_scale = [
        n.args[1] for n in ref.graph.nodes if "quantize_per_tensor" in str(n.target)
    ]  # every activation scale; the output's is among them
    assert_within_one_step(ours(x), ref(x), max(float(s) for s in out_scale))


def test_pt2e_same_at_another_size() -> None:
    """A static export refuses other sizes (torch.export's guard); a dynamic one resolves
    'same' per size and equals the twin exported at that size with the same observers."""
    model, twin = models(stubs=False)
    data = calibration((10,))
    quantizer = pq.PadkitQuantizer(x86_quantizer())
    static = pt2e_prepared(copy.deepcopy(model), quantizer, data[0])
    for x in data:
        static(x)
    with pytest.raises(Exception, match="size"):
        pt2e.convert_pt2e(static)(torch.randn(2, 3, 13, 11))

    h = torch.export.Dim("h", min=6, max=64)
    ours = pt2e_prepared(
        model, pq.PadkitQuantizer(x86_quantizer()), data[0], dynamic_shapes=({2: h},)
    )
    ref10 = pt2e_prepared(twin, x86_quantizer(), data[0])
    for x in data:
        ours(x)
        ref10(x)
    x = torch.randn(2, 3, 13, 11)
    ref13 = pt2e_prepared(twin, x86_quantizer(), x)
    ref13.load_state_dict(ref10.state_dict())  # the calibrated observers
    q_ours, q_ref = pt2e.convert_pt2e(ours), pt2e.convert_pt2e(ref13)
    assert quantized_convs(q_ours) == 3
    torch.testing.assert_close(q_ours(x), q_ref(x), rtol=0, atol=1e-6)


def test_padkit_quantizer_refuses_a_non_quantizer() -> None:
    with pytest.raises(TypeError, match="quantizer must be a torchao PT2E Quantizer"):
        pq.PadkitQuantizer("x86")


@pytest.mark.slow  # torchao's convert_pt2e folds QAT BatchNorm in ~20 s (the twin's too)
def test_pt2e_qat_matches_the_quantized_twin() -> None:
    from torchao.quantization.pt2e import move_exported_model_to_eval
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq

    def quantizer() -> Any:
        config = xiq.get_default_x86_inductor_quantization_config(is_qat=True)
        return xiq.X86InductorQuantizer().set_global(config)

    model, twin = models(stubs=False)
    data = calibration((9,))
    converted = []
    for m, q in ((model, pq.PadkitQuantizer(quantizer())), (twin, quantizer())):
        exported = torch.export.export(m.train(), (data[0],)).module()
        prepared = pt2e.prepare_qat_pt2e(exported, q)
        for x in data:
            prepared(x)
        out = pt2e.convert_pt2e(prepared)
        move_exported_model_to_eval(out)
        converted.append(out)
    ours, ref = converted
    assert quantized_convs(ours) == quantized_convs(ref) == 3
    assert not any("batch_norm" in str(n.target) for n in ours.graph.nodes)
    x = torch.randn(2, 3, 9, 10)
    torch.testing.assert_close(ours(x), ref(x), rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("padding", "count_include_pad"), [("same", None), (((0, 1), (1, 2)), True), (1, True)]
)
def test_average_pool_of_a_quantized_tensor(padding: Any, count_include_pad: bool | None) -> None:
    """The exact average of the quantized values, rounded once to the input's scale and zero
    point; with symmetric pads, equal to torch's own quantized average pool within a step."""
    import padkit.functional as PF

    torch.manual_seed(0)
    x = torch.quantize_per_tensor(torch.randn(2, 3, 9, 8), 0.05, 120, torch.quint8)
    got = PF.avg_pool2d(x, 3, 2, padding, count_include_pad=count_include_pad)
    assert got.is_quantized and got.q_scale() == 0.05 and got.q_zero_point() == 120
    xf = x.dequantize()
    if padding == "same":  # TF: pads (1, 1) on H, (0, 1) on W at 9x8, excluded from the mean
        total = F.avg_pool2d(F.pad(xf, [0, 1, 1, 1]), 3, 2, divisor_override=1)
        count = F.avg_pool2d(F.pad(torch.ones(1, 1, 9, 8), [0, 1, 1, 1]), 3, 2, divisor_override=1)
        ref = total / count
    elif padding == 1:
        ref = F.avg_pool2d(xf, 3, 2, 1)
        torch_q = F.avg_pool2d(x, 3, 2, 1)
        assert (got.int_repr().int() - torch_q.int_repr().int()).abs().max() <= 1
    else:
        ref = F.avg_pool2d(F.pad(xf, [1, 2, 0, 1]), 3, 2)
    want = torch.quantize_per_tensor(ref, 0.05, 120, torch.quint8)
    assert (got.int_repr().int() - want.int_repr().int()).abs().max() <= 1
    per_channel = torch.quantize_per_channel(
        torch.randn(1, 3, 5, 5),
        torch.ones(3) * 0.1,
        torch.zeros(3, dtype=torch.long),
        1,
        torch.qint8,
    )
    with pytest.raises(PaddingError, match="per-tensor"):
        PF.avg_pool2d(per_channel, 3, 2, "same")
