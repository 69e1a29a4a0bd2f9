"""Max pools whose pads hold a chosen ``padding_value``, norms over space under ``dilate``,
and stream input errors (issue 39).

Oracles: ``F.pad(x, pads, value=v)`` then torch's unpadded max pool (forward and
backward); the original model (convert); the original model on each phase of the a-trous
lattice (dilate with lattice statistics); onnxruntime (export).
"""

from __future__ import annotations

import copy
import io
import math
import pickle
import re
import warnings
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import padkit.functional as PF
import padkit.nn as PN
from padkit import PaddingError
from padkit.op import max_pad_fill
from padkit.surgery import convert, dilate

torch.set_num_threads(1)

MAX_F = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
MAX_PF = {1: PF.max_pool1d, 2: PF.max_pool2d, 3: PF.max_pool3d}
MAX_NN = {1: PN.MaxPool1d, 2: PN.MaxPool2d, 3: PN.MaxPool3d}


def _flat(pairs: tuple[tuple[int, int], ...]) -> list[int]:
    return [p for pair in reversed(pairs) for p in pair]


def _reference(x: Tensor, k: int, s: int, pairs: Any, value: float, d: int = 1) -> Tensor:
    return MAX_F[x.dim() - 2](F.pad(x, _flat(pairs), value=value), k, s, 0, d)


# ----------------------------------------------------------------------------- the pool


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("value", [0.0, -1.5, 2.0, -math.inf])
@pytest.mark.parametrize("pads", [(1, 2), (0, 1), (2, 0), (1, 1), (3, 3)])
def test_max_pool_value_is_pad_then_pool(nd: int, value: float, pads: tuple[int, int]) -> None:
    g = torch.Generator().manual_seed(nd)
    pairs = (pads,) * nd
    for d in (1, 2):
        x = (torch.randn(2, 3, *[9] * nd, generator=g, dtype=torch.double) - 1).requires_grad_()
        ref = _reference(x, 3, 2, pairs, value, d)
        out = MAX_PF[nd](x, 3, 2, pairs, d, padding_value=value)
        layer = MAX_NN[nd](3, 2, pairs, d, padding_value=value)
        assert torch.equal(out, ref)
        for _ in range(2):  # the full path, then the layer's remembered plan
            assert torch.equal(layer(x), ref)
        grad = torch.randn(ref.shape, generator=g, dtype=torch.double)
        want = torch.autograd.grad(ref, x, grad)[0]
        assert torch.equal(torch.autograd.grad(out, x, grad)[0], want)
        assert torch.equal(torch.autograd.grad(layer(x), x, grad)[0], want)


@pytest.mark.parametrize("padding", ["same", "same_lower", ((0, 1), (2, 1))])
def test_max_pool_value_rules_and_channels_last(padding: Any) -> None:
    pool = PN.MaxPool2d(3, 2, padding, padding_value=0.0)
    for h, w in ((8, 9), (9, 8), (5, 5)):
        x = torch.randn(2, 4, h, w) - 1
        pairs = pool._op().pairs_at((h, w))
        ref = _reference(x, 3, 2, pairs, 0.0)
        assert torch.equal(pool(x), ref)
        xc = x.contiguous(memory_format=torch.channels_last).requires_grad_()
        assert torch.equal(pool(xc), ref)
        assert torch.equal(PF.max_pool2d(x, 3, 2, padding, padding_value=0.0), ref)


def test_max_pool_value_ceil_mode_overhang_holds_no_value() -> None:
    # pads hold the value; the ceil overhang past them is out of every window, as torch's
    x = torch.randn(1, 2, 8, 8) - 3
    out = PF.max_pool2d(x, 3, 2, ((1, 1), (1, 1)), ceil_mode=True, padding_value=0.0)
    ref = F.max_pool2d(F.pad(x, [1, 1, 1, 1], value=0.0), 3, 2, 0, 1, ceil_mode=True)
    assert torch.equal(out, ref)


def test_layer_keeps_state_dict_pickles_copies_and_shows_the_value() -> None:
    pool = PN.MaxPool2d(3, 2, "same", padding_value=0.5)
    plain = PN.MaxPool2d(3, 2, "same")
    assert pool.state_dict().keys() == plain.state_dict().keys() == set()
    assert "padding_value" not in plain.__dict__  # the default is the class's
    assert "padding_value=0.5" in repr(pool) and "padding_value" not in repr(plain)
    x = torch.randn(1, 2, 7, 8) - 2
    ref = pool(x)
    for twin in (pickle.loads(pickle.dumps(pool)), copy.deepcopy(pool), copy.copy(pool)):
        assert twin.padding_value == 0.5
        assert torch.equal(twin(x), ref)
    pool.padding_value = -math.inf  # a live attribute
    assert torch.equal(pool(x), plain(x))


def test_refusals_name_the_argument() -> None:
    x = torch.randn(1, 1, 6, 6)
    with pytest.raises(TypeError, match=r"padding_value must be a float.*'a'"):
        PF.max_pool2d(x, 3, 2, "same", padding_value="a")  # type: ignore[arg-type]
    with pytest.raises(PaddingError, match="padding_value must be a number that is not NaN"):
        PN.MaxPool2d(3, 2, "same", padding_value=math.nan)
    with pytest.raises(PaddingError, match="return_indices=True needs padding_value=-inf"):
        PN.MaxPool2d(3, 2, "same", return_indices=True, padding_value=0.0)
    xi = torch.randint(-5, 5, (1, 1, 5, 5))
    with pytest.raises(PaddingError, match=r"padding_value=0.5 cannot pad a torch.int64"):
        PF.max_pool2d(xi, 3, 2, 1, padding_value=0.5)
    got = PF.max_pool2d(xi, 3, 2, ((1, 1), (1, 1)), padding_value=7)
    assert torch.equal(got, _reference(xi, 3, 2, ((1, 1), (1, 1)), 7))


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")
def test_quantized_value_is_exact_or_refused() -> None:
    x = torch.randn(1, 2, 7, 7)
    q = torch.quantize_per_tensor(x, 0.05, 60, torch.quint8)
    assert max_pad_fill(q) == pytest.approx((0 - 60) * 0.05)  # the default: lowest_value
    out = PF.max_pool2d(q, 3, 2, "same", padding_value=0.0)
    ref = _reference(q.dequantize(), 3, 2, ((1, 1), (1, 1)), 0.0)
    assert out.is_quantized and torch.equal(out.dequantize(), ref)
    out = PF.max_pool2d(q, 3, 2, "same", padding_value=-1.0)  # q = 40
    assert torch.equal(out.dequantize(), _reference(q.dequantize(), 3, 2, ((1, 1),) * 2, -1.0))
    with pytest.raises(PaddingError, match=r"padding_value=0.01 is not exactly representable"):
        PF.max_pool2d(q, 3, 2, "same", padding_value=0.01)
    scales, zeros = torch.tensor([0.05, 0.1]), torch.tensor([10, 20])
    pc = torch.quantize_per_channel(x, scales, zeros, 1, torch.quint8)
    with pytest.raises(PaddingError, match="the same q on every channel"):
        PF.max_pool2d(pc, 3, 2, "same", padding_value=0.0)  # q = each zero point: 10, 20


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")
def test_quantized_per_channel_same_q() -> None:
    x = torch.randn(1, 2, 7, 7)
    scales, zeros = torch.tensor([0.05, 0.1]), torch.tensor([10, 10])
    pc = torch.quantize_per_channel(x, scales, zeros, 1, torch.quint8)
    out = PF.max_pool2d(pc, 3, 2, "same", padding_value=0.0)
    assert torch.equal(out.dequantize(), _reference(pc.dequantize(), 3, 2, ((1, 1),) * 2, 0.0))


def test_native_backend_declines_a_value() -> None:
    from padkit.native import _dispatch

    hook = _dispatch.Hook.__new__(_dispatch.Hook)
    x = torch.randn(1, 2, 8, 8)
    got = hook.pool("max", "crop", x, (3, 3), (2, 2), (1, 1), ((0, 1), (0, 1)), (4, 4), value=0.0)
    assert got is None


def test_compiled_layer_keeps_the_value() -> None:
    pool = PN.MaxPool2d(3, 2, "same", padding_value=0.0)
    x = torch.randn(2, 3, 8, 9) - 2
    compiled = torch.compile(pool, backend="eager", fullgraph=False)
    assert torch.equal(compiled(x), pool(x))


# ----------------------------------------------------------------------------- ONNX


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("padding", ["same", ((1, 2), (0, 1))])
@pytest.mark.parametrize("dynamic", [False, True])
def test_onnx_export_pads_with_the_value_and_import_folds(padding: Any, dynamic: bool) -> None:
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from padkit.onnx import load

    model = PN.MaxPool2d(3, 2, padding, padding_value=0.0).eval()
    x = torch.randn(1, 3, 9, 10) - 1
    buf = io.BytesIO()
    axes = {"x": {2: "h", 3: "w"}} if dynamic else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), buf, dynamo=False, input_names=["x"], dynamic_axes=axes)
    proto = onnx.load_from_string(buf.getvalue())
    types = [n.op_type for n in proto.graph.node if n.op_type != "Constant"]
    assert types[-2:] == ["Pad", "MaxPool"], types
    pool = next(n for n in proto.graph.node if n.op_type == "MaxPool")
    assert all(a.name != "auto_pad" for a in pool.attribute)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    for h, w in ((9, 10), (8, 8)) if dynamic else ((9, 10),):
        xi = torch.randn(1, 3, h, w) - 1
        got = sess.run(None, {"x": xi.numpy()})[0]
        assert torch.equal(torch.from_numpy(got), model(xi))
    back = load(proto)
    assert torch.equal(back(x), model(x))
    if not dynamic:  # a constant Pad before an unpadded MaxPool folds into one padkit pool
        kinds = [type(m).__name__ for m in back.modules()]
        assert "OnnxPad" not in kinds and "MaxPool2d" in kinds


# ----------------------------------------------------------------------------- convert


class _SameMaxPool(nn.Module):
    """A hand-written TF 'same' max pool: zero pads, computed from the input size
    (``dynamic``) or fixed for one size (a ZeroPad2d), then ``F.max_pool2d``."""

    def __init__(self, dynamic: bool) -> None:
        super().__init__()
        self.dynamic = dynamic
        if not dynamic:
            self.pad = nn.ZeroPad2d((0, 1, 0, 1))

    def forward(self, x: Tensor) -> Tensor:
        if self.dynamic:
            h, w = x.shape[-2:]
            ph = max((math.ceil(h / 2) - 1) * 2 + 3 - h, 0)
            pw = max((math.ceil(w / 2) - 1) * 2 + 3 - w, 0)
            x = F.pad(x, [pw // 2, pw - pw // 2, ph // 2, ph - ph // 2])
        else:
            x = self.pad(x)
        return F.max_pool2d(x, 3, 2)


class _Net(nn.Module):
    def __init__(self, dynamic: bool) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = _SameMaxPool(dynamic)
        self.head = nn.Conv2d(4, 2, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.pool(self.stem(x)))


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_convert_zero_pad_then_max_pool(dynamic: bool) -> None:
    torch.manual_seed(0)
    model = _Net(dynamic).eval()
    new, report = convert(model)
    assert not report.skipped, report.skipped
    assert any("0.0 pad" in c.detail for c in report.changes), report.changes
    sizes = ((8, 8), (16, 16)) if not dynamic else ((8, 9), (9, 8), (13, 13), (16, 16))
    for h, w in sizes:
        x = torch.randn(2, 3, h, w) - 1  # negative inputs: a -inf pad would differ
        with torch.no_grad():
            assert torch.equal(new(x), model(x))


def test_convert_sequential_zero_pad_then_max_pool_module() -> None:
    model = nn.Sequential(nn.Conv2d(3, 3, 1), nn.ZeroPad2d((1, 2, 0, 1)), nn.MaxPool2d(3, 2))
    new, _ = convert(model)
    pools = [m for m in new.modules() if isinstance(m, PN.MaxPool2d)]
    assert len(pools) == 1 and pools[0].padding_value == 0.0
    x = torch.randn(2, 3, 9, 10) - 1
    with torch.no_grad():
        assert torch.equal(new(x), model(x))


def test_fold_refuses_mixing_values() -> None:
    model = nn.Sequential(nn.Conv2d(3, 3, 1), nn.ZeroPad2d(1), nn.MaxPool2d(3, 2, padding=1))
    with pytest.warns(UserWarning, match="a padkit max pool's pads hold one value"):
        new, _ = convert(model)
    x = torch.randn(2, 3, 9, 10) - 1
    with torch.no_grad():
        assert torch.equal(new(x), model(x))


def test_lower_pads_with_the_value() -> None:
    from padkit.surgery import lower

    model = nn.Sequential(PN.MaxPool2d(3, 2, "same", padding_value=0.0))
    x = torch.randn(1, 2, 9, 8) - 2
    low, _ = lower(model, x)
    assert not any(isinstance(m, PN.MaxPool2d) for m in low.modules())
    assert torch.equal(low(x), model(x))


# ----------------------------------------------------------------------------- BiT


def _bit(**kwargs: Any) -> nn.Module:
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BitConfig(
        embedding_size=8, hidden_sizes=[8, 16, 16, 32], depths=[1, 1, 1, 1], num_groups=4, **kwargs
    )
    model = transformers.BitModel(config).eval()
    with torch.no_grad():  # GroupNorm affine terms away from the identity
        for m in model.modules():
            if isinstance(m, nn.GroupNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.2)
    return model


#: dynamic padding on: TF 'same' in code everywhere, or (static global padding) a
#: ConstantPad2d read by the max pool's dynamic 'same' pad (a chain of two pads)
BIT_CONFIGS = {
    "same": {"global_padding": "SAME", "embedding_dynamic_padding": True},
    "static-global": {"embedding_dynamic_padding": True},
}


@pytest.mark.parametrize("config", list(BIT_CONFIGS))
def test_bit_dynamic_padding_converts_fully_and_exactly(config: str) -> None:
    model = _bit(**BIT_CONFIGS[config])
    new, report = convert(model)
    assert not report.skipped, report.skipped
    assert list(new.state_dict()) == list(model.state_dict())
    pool = new.embedder.pooler
    detail = next(c.detail for c in report.changes if c.path == "embedder.pooler")
    assert "0.0 pad" in detail
    if config == "static-global":  # the ConstantPad2d folds too, ahead of the 'same' pad
        assert "static ((1, 1), (1, 1)) then TF 'same'" in detail
        assert "embedder.pad" in {c.path for c in report.changes}
    assert isinstance(pool, type(model.embedder.pooler))
    for h, w in ((64, 64), (67, 53), (66, 65)):
        x = torch.randn(2, 3, h, w)
        with torch.no_grad():
            ref, out = model(x).last_hidden_state, new(x).last_hidden_state
        torch.testing.assert_close(out, ref, rtol=0, atol=1e-6 * float(ref.abs().max()))


@pytest.mark.parametrize("config", list(BIT_CONFIGS))
@pytest.mark.parametrize("output_stride", [16, 8])
def test_bit_dilates_exactly_with_lattice_statistics(output_stride: int, config: str) -> None:
    model = _bit(**BIT_CONFIGS[config])
    new, report = dilate(model, output_stride)
    assert list(new.state_dict()) == list(model.state_dict())
    norms = [c for c in report.changes if "statistics per phase" in c.detail]
    assert norms
    for c in norms:  # an instance of the original class, same parameters
        norm = new.get_submodule(c.path)
        assert isinstance(norm, type(model.get_submodule(c.path)))
        assert type(norm).__name__ == "BitGroupNormActivation"
    r = 32 // output_stride
    for h, w in ((64, 64), (67, 53), (66, 65), (97, 80)):
        x = torch.randn(1, 3, h, w)
        with torch.no_grad():
            ref, out = model(x).last_hidden_state, new(x).last_hidden_state
        torch.testing.assert_close(out[..., ::r, ::r], ref, rtol=1e-5, atol=1e-5)
        for n, m in zip(out.shape[-2:], ref.shape[-2:]):  # the window the lattice allows
            assert r * (m - 1) < n <= r * m
    # each norm past the output stride takes statistics per phase: on its dense input, each
    # phase equals the original norm applied to that phase alone (interleaved back)
    seen: dict[str, tuple[Tensor, Tensor]] = {}

    def keep(path: str) -> Any:
        def hook(_m: nn.Module, args: tuple[Tensor, ...], out: Tensor) -> None:
            seen.setdefault(path, (args[0].clone(), out.clone()))

        return hook

    hooks = [new.get_submodule(c.path).register_forward_hook(keep(c.path)) for c in norms]
    with torch.no_grad():
        new(torch.randn(1, 3, 96, 80))
    for h in hooks:
        h.remove()
    factors = {c.path: int(re.findall(r"lattice \((\d+), \d+\)", c.detail)[0]) for c in norms}
    assert set(factors.values()) == ({2} if output_stride == 16 else {2, 4})
    for path, (dense_in, dense_out) in seen.items():
        original, f = model.get_submodule(path), factors[path]
        for p in range(f):
            for q in range(f):
                with torch.no_grad():
                    want = original(dense_in[..., p::f, q::f])
                torch.testing.assert_close(dense_out[..., p::f, q::f], want, rtol=0, atol=0)


class _LN(nn.Module):
    """A layer norm over H and W in code, no affine weight."""

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, x.shape[-2:])


def test_lattice_norm_is_the_norm_of_each_phase() -> None:
    from padkit.surgery._norms import LatticeNorm

    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 8, 9, 7, generator=g)
    weight, bias = torch.rand(8, generator=g) + 0.5, torch.randn(8, generator=g)
    got = LatticeNorm(((2, 2), (3, 3)))(F.group_norm, (x, 4, weight, bias), {})
    for p in range(2):
        for q in range(3):
            want = F.group_norm(x[..., p::2, q::3], 4, weight, bias)
            assert torch.equal(got[..., p::2, q::3], want)
    got = LatticeNorm(((2, 2), (3, 2)))(F.layer_norm, (x, (9, 7)), {})
    for p in range(2):
        for q in range(2):
            want = F.layer_norm(x[..., p::2, q::2], x[..., p::2, q::2].shape[-2:])
            assert torch.equal(got[..., p::2, q::2], want)


def test_dilate_plain_group_norm_instance_norm_and_layer_norm() -> None:
    def net(norm: nn.Module) -> nn.Module:
        return nn.Sequential(
            *[nn.Conv2d(3 if i == 0 else 4, 4, 3, 2, 1) for i in range(5)],
            norm,
            nn.Conv2d(4, 4, 3, 1, 1),
        ).eval()

    for norm in (nn.GroupNorm(2, 4), nn.InstanceNorm2d(4, affine=True), _LN()):
        torch.manual_seed(0)
        model = net(norm)
        new, _ = dilate(model, 16)
        assert list(new.state_dict()) == list(model.state_dict())
        assert isinstance(new[5], type(norm))
        x = torch.randn(1, 3, 64, 96)
        with torch.no_grad():
            ref, out = model(x), new(x)
        torch.testing.assert_close(out[..., ::2, ::2], ref, rtol=1e-5, atol=1e-5)
        assert pickle.loads(pickle.dumps(new))(x).shape == out.shape


# ----------------------------------------------------------------------------- streaming


def _stream() -> tuple[Any, nn.Module]:
    from padkit.streaming import StreamingModule

    torch.manual_seed(0)
    model = nn.Sequential(
        PN.Conv1d(1, 4, 3, padding="causal"),
        PN.MaxPool1d(3, 1, padding="causal", padding_value=0.0),
        PN.Conv1d(4, 2, 3, padding="causal"),
    ).eval()
    return StreamingModule(model), model


def test_stream_max_pool_pads_with_its_value() -> None:
    stream, model = _stream()
    x = torch.randn(2, 1, 20) - 2
    state = stream.init_state(example=x[..., :4])
    outs = []
    with torch.no_grad():
        for i in range(0, 20, 4):
            y, state = stream.step(x[..., i : i + 4], state)
            outs.append(y)
        assert torch.equal(torch.cat(outs, -1), model(x))


@pytest.mark.parametrize(
    "chunk, message",
    [
        (
            torch.randn(2, 3, 4),
            r"step\(\): chunk has 3 channels; this stream was initialised for 1 "
            r"\(layer `0`, in_channels=1\)",
        ),
        (
            torch.randn(2, 1, 4, dtype=torch.float64),
            r"chunk has dtype torch.float64; this stream was initialised for dtype "
            r"torch.float32 \(layer `0`, in_channels=1\)",
        ),
        (
            torch.randn(3, 1, 4),
            r"chunk has batch size 3; this stream was initialised for batch size 2 "
            r"\(layer `0`, in_channels=1\)",
        ),
    ],
    ids=["channels", "dtype", "batch"],
)
def test_stream_input_errors_name_argument_value_expected_and_layer(
    chunk: Tensor, message: str
) -> None:
    stream, _ = _stream()
    state = stream.init_state(example=torch.randn(2, 1, 4))
    with pytest.raises(PaddingError, match=message):
        stream.step(chunk, state)


def test_stream_device_error() -> None:
    stream, _ = _stream()
    state = stream.init_state(example=torch.randn(2, 1, 4))
    state = {k: v.to("meta") if k.endswith(".buf") else v for k, v in state.items()}
    with pytest.raises(PaddingError, match=r"chunk has device cpu; .* device meta \(layer `0`"):
        stream.step(torch.randn(2, 1, 4), state)
