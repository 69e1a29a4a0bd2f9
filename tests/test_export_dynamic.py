"""ONNX export with dynamic sizes is exact at every size, under both exporters.

A seeded fuzz builds random stacks of padkit layers (1-3-D convs, transposed convs, max,
average and LP pools; per-side pairs, ``same``/``same_lower`` at strides > 1, dilations,
groups, ``ceil_mode``, ``count_include_pad``, padding modes), exports each with dynamic
batch and spatial axes (``dynamo=True`` with ``dynamic_shapes``, ``dynamo=False`` with
``dynamic_axes``) at opsets 17, 18 and 20, and runs the file in onnxruntime at three
spatial sizes other than the export size (odd ones included) and batch 2: shapes and
values must equal the padkit model's. A padkit ``PaddingError`` at export is accepted only
for the documented refusals. The default run keeps a fast slice; ``-m slow`` runs the
long one. The three reproducers of issue 45 are tests too.
"""

from __future__ import annotations

import io
import math
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

import padkit.nn as pnn  # noqa: E402
from padkit import PaddingError  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning"),
]

torch.set_num_threads(1)

#: the refusals docs/onnx-export.md documents (substrings of the PaddingError message)
DOCUMENTED = (
    "needs opset_version >=",
    "count_include_pad=False with padding",
    "has no exact ONNX form",
    "mixes 'same' and 'same_lower'",
    "differs between axes",
)

C = 2  # channels through every stack


# ----------------------------------------------------------------------------- helpers


def export(model: nn.Module, x: Any, *, dynamo: bool, opset: int) -> Any:
    """The ONNX model of ``model`` with its batch and spatial axes dynamic."""
    model = model.eval()
    axes = [0, *range(2, x.dim())]
    if dynamo:
        dim = torch.export.Dim.DYNAMIC
        prog = torch.onnx.export(
            model,
            (x,),
            dynamo=True,
            verbose=False,
            opset_version=opset,
            input_names=["x"],
            dynamic_shapes=({a: dim for a in axes},),
        )
        return prog.model_proto
    buf = io.BytesIO()
    torch.onnx.export(
        model,
        (x,),
        buf,
        dynamo=False,
        opset_version=opset,
        input_names=["x"],
        dynamic_axes={"x": {a: f"d{a}" for a in axes}},
    )
    return onnx.load_from_string(buf.getvalue())


def run_ort(proto: Any, x: Any) -> np.ndarray:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(proto.SerializeToString(), so, providers=["CPUExecutionProvider"])
    out: np.ndarray = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    return out


def assert_same(model: nn.Module, proto: Any, x: Any) -> None:
    """onnxruntime equals the padkit model at ``x`` (a max-pool window lying entirely in
    padding is -inf in padkit and the lowest finite float in onnxruntime's 1-D and 3-D
    MaxPool: a documented deviation, compared at that floor)."""
    with torch.no_grad():
        ref = model(x).numpy()
    got = run_ort(proto, x)
    assert got.shape == ref.shape, (tuple(x.shape), got.shape, ref.shape)
    floor = np.finfo(ref.dtype).min
    np.testing.assert_allclose(
        np.maximum(got, floor), np.maximum(ref, floor), atol=1e-4, rtol=1e-4, equal_nan=True
    )


def refusal(exc: BaseException) -> PaddingError | None:
    """The PaddingError behind an export failure (dynamo wraps it), or None."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, PaddingError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


# ----------------------------------------------------------------------------- the fuzz


def _pairs(rng: random.Random, nd: int, top: int = 3) -> tuple[tuple[int, int], ...]:
    return tuple((rng.randint(0, top), rng.randint(0, top)) for _ in range(nd))


def _ints(rng: random.Random, nd: int, lo: int, hi: int) -> tuple[int, ...]:
    return tuple(rng.randint(lo, hi) for _ in range(nd))


def _layer(rng: random.Random, nd: int) -> nn.Module:
    kind = rng.choice(["conv", "conv", "transpose", "max", "avg", "lp"])
    k = _ints(rng, nd, 1, 4)
    s = _ints(rng, nd, 1, 3)
    d = _ints(rng, nd, 1, 2) if rng.random() < 0.4 else 1
    if kind == "conv":
        padding: Any = rng.choice(
            [_pairs(rng, nd), "same", "same_lower", "valid", "causal", rng.randint(0, 2)]
        )
        mode = rng.choice(["zeros", "zeros", "zeros", "reflect", "replicate", "circular"])
        groups = rng.choice([1, C])
        return getattr(pnn, f"Conv{nd}d")(
            C, C, k, s, padding=padding, dilation=d, groups=groups, padding_mode=mode
        )
    if kind == "transpose":
        k = _ints(rng, nd, 2, 4)
        padding = rng.choice([0, 1, _pairs(rng, nd, 1)])
        op = tuple(rng.randint(0, si - 1) for si in s) if rng.random() < 0.5 else 0
        groups = rng.choice([1, C])
        return getattr(pnn, f"ConvTranspose{nd}d")(
            C, C, k, s, padding=padding, output_padding=op, groups=groups, dilation=d
        )
    k = _ints(rng, nd, 1, 3)
    padding = rng.choice([_pairs(rng, nd), _pairs(rng, nd), "same", "same_lower", 0])
    ceil = rng.random() < 0.4
    if kind == "max":
        return getattr(pnn, f"MaxPool{nd}d")(k, s, padding=padding, dilation=d, ceil_mode=ceil)
    if kind == "avg":
        return getattr(pnn, f"AvgPool{nd}d")(
            k,
            s,
            padding=padding,
            ceil_mode=ceil,
            count_include_pad=rng.random() < 0.6,
            divisor_override=rng.choice([None, None, None, 3]),
            dilation=d,
        )
    # LP pools sum x**p: positive inputs keep odd p real
    p = rng.choice([2.0, 3.0, 2.0])
    lp = getattr(pnn, f"LPPool{nd}d")(p, k, s, ceil_mode=ceil, padding=padding, dilation=d)
    return nn.Sequential(nn.Sigmoid(), lp)


SIZES = {1: (9, 18), 2: (7, 13), 3: (5, 8)}


def _comparable(model: nn.Sequential, x: Any, out: Any) -> bool:
    """Whether onnxruntime can match ``out``: finite, or -inf only from a last max pool
    (a window lying entirely in padding: the documented deviation, compared at the
    lowest float; -inf fed to a later layer would make it differ there)."""
    if bool(torch.isfinite(out).all()):
        return True
    last = model[-1]
    if not type(last).__name__.startswith("MaxPool") or bool((out == math.inf).any()):
        return False
    if bool(out.isnan().any()):
        return False
    with torch.no_grad():
        return len(model) == 1 or bool(torch.isfinite(model[:-1](x)).all())


def fuzz_case(seed: int) -> tuple[nn.Module, Any, list[Any]]:
    """A random stack, its export input (batch 3) and three inputs (batch 2) at other
    spatial sizes, odd ones included; every one runs in padkit."""
    rng = random.Random(seed)
    nd = rng.choice([1, 1, 2, 2, 3])
    lo, hi = SIZES[nd]
    for _ in range(200):
        model = nn.Sequential(*[_layer(rng, nd) for _ in range(rng.randint(1, 3))]).eval()
        size = _ints(rng, nd, lo, hi)
        others: list[tuple[int, ...]] = []
        while len(others) < 3:
            t = _ints(rng, nd, lo - 2, hi + 3)
            if t != size and t not in others:
                others.append(t)
        if all(all(v % 2 == 0 for v in t) for t in others):
            others[0] = tuple(v | 1 for v in others[0])
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(3, C, *size, generator=g)
        xs = [torch.randn(2, C, *t, generator=g) for t in others]
        try:
            with torch.no_grad():
                outs = [model(v) for v in (x, *xs)]
        except (PaddingError, RuntimeError, ValueError):
            continue
        if not all(o.numel() > 0 for o in outs) or outs[0].shape[2:] == outs[1].shape[2:]:
            continue
        if not all(_comparable(model, v, o) for v, o in zip((x, *xs), outs)):
            continue
        if True:
            torch.manual_seed(seed)
            for m in model.modules():
                if hasattr(m, "reset_parameters"):
                    m.reset_parameters()
            return model, x, xs
    raise AssertionError(f"seed {seed}: no valid stack")  # pragma: no cover


def check_case(seed: int, dynamo: bool, opset: int) -> str:
    """'ok' (exact at every size) or 'refused' (a documented PaddingError)."""
    model, x, xs = fuzz_case(seed)
    try:
        proto = export(model, x, dynamo=dynamo, opset=opset)
    except Exception as exc:
        err = refusal(exc)
        if err is None or not any(t in str(err) for t in DOCUMENTED):
            raise
        return "refused"
    for v in xs:
        assert_same(model, proto, v)
    return "ok"


def run_fuzz(seeds: range, configs: list[tuple[bool, int]]) -> None:
    results: dict[str, int] = {"ok": 0, "refused": 0}
    for seed in seeds:
        dynamo, opset = configs[seed % len(configs)]
        try:
            results[check_case(seed, dynamo, opset)] += 1
        except Exception as exc:
            model, _, _ = fuzz_case(seed)
            raise AssertionError(
                f"seed {seed}, dynamo={dynamo}, opset {opset}:\n{model}\n{exc}"
            ) from exc
    # the fuzz must mostly export: refusals are the documented corners
    assert results["ok"] >= 0.7 * len(seeds), results


TS_CONFIGS = [(False, 17), (False, 18), (False, 20)]
DYNAMO_CONFIGS = [(True, 20), (True, 18), (True, 17)]


def test_fuzz_torchscript_fast() -> None:
    run_fuzz(range(0, 36), TS_CONFIGS)


def test_fuzz_dynamo_fast() -> None:
    run_fuzz(range(1000, 1009), DYNAMO_CONFIGS)


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(10))
def test_fuzz_torchscript_long(chunk: int) -> None:
    """1,000 seeded stacks under the TorchScript exporter (100 a chunk)."""
    run_fuzz(range(100 + 100 * chunk, 200 + 100 * chunk), TS_CONFIGS)


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(10))
def test_fuzz_dynamo_long(chunk: int) -> None:
    """1,000 seeded stacks under the torch.export-based exporter (100 a chunk)."""
    run_fuzz(range(2000 + 100 * chunk, 2100 + 100 * chunk), DYNAMO_CONFIGS)


# ----------------------------------------------------------------------------- issue 45


POOLS_PAST_INPUT: list[Callable[[], nn.Module]] = [
    lambda: pnn.AvgPool1d(2, 3, padding=((2, 2),)),
    lambda: pnn.MaxPool1d(2, 3, padding=((2, 2),)),
    lambda: pnn.MaxPool2d(2, 3, padding=((2, 2), (2, 2))),
    lambda: nn.Sequential(nn.Sigmoid(), pnn.LPPool1d(2, 2, 3, padding=((2, 2),))),
]


@pytest.mark.parametrize("make", POOLS_PAST_INPUT, ids=["avg1d", "max1d", "max2d", "lp1d"])
@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
def test_pool_pads_past_the_input_exact_at_every_size(
    make: Callable[[], nn.Module], dynamo: bool
) -> None:
    """Reproducer 1: an end pad the export size does not read is not trimmed."""
    model = make().eval()
    nd = 2 if "2d" in type(model).__name__ else 1
    x = torch.randn(1, 2, *([9] * nd))
    proto = export(model, x, dynamo=dynamo, opset=20)
    for n in (5, 8, 9, 10, 11):
        assert_same(model, proto, torch.randn(2, 2, *([n] * nd)))


class _SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            pnn.Conv2d(3, 4, 3, stride=2, padding="same"),
            nn.ReLU(),
            pnn.MaxPool2d(3, 2, padding=((1, 0), (0, 1))),
            pnn.Conv2d(4, 4, 3, padding=2, dilation=2),
            pnn.AvgPool2d(2, 3, padding=((2, 2), (0, 2))),
        )

    def forward(self, x: Any) -> Any:
        return self.body(x)


@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
def test_small_cnn_exact_at_other_sizes(dynamo: bool) -> None:
    torch.manual_seed(0)
    model = _SmallCNN().eval()
    proto = export(model, torch.randn(1, 3, 33, 29), dynamo=dynamo, opset=20)
    for h, w in ((40, 40), (33, 29), (31, 37), (45, 26)):
        assert_same(model, proto, torch.randn(2, 3, h, w))
    with torch.no_grad():
        assert tuple(model(torch.randn(1, 3, 40, 40)).shape) == (1, 4, 5, 4)


@pytest.mark.parametrize("opset", [17, 18, 20])
@pytest.mark.parametrize(
    "make",
    [
        lambda: pnn.MaxPool1d(3, 1, padding=1),
        lambda: pnn.MaxPool2d(3, 2, padding=((0, 2), (1, 1)), ceil_mode=True),
        lambda: pnn.AvgPool1d(3, 2, padding=((1, 2),), ceil_mode=True),
        lambda: nn.Sequential(nn.Sigmoid(), pnn.LPPool1d(3, 3, 2, padding=((1, 0),))),
    ],
    ids=["max1d", "max2d-ceil", "avg1d-ceil", "lp1d"],
)
def test_torchscript_pools_with_dynamic_axes(make: Callable[[], nn.Module], opset: int) -> None:
    """Reproducer 2: dynamo=False exports pools whose spatial axis is dynamic."""
    model = make().eval()
    nd = 2 if isinstance(model, pnn.MaxPool2d) else 1
    proto = export(model, torch.randn(1, 2, *([10] * nd)), dynamo=False, opset=opset)
    for n in (6, 7, 10, 13):
        assert_same(model, proto, torch.randn(2, 2, *([n] * nd)))


@pytest.mark.parametrize("p", [1.5, 3.0])
@pytest.mark.parametrize("dynamo", [True, False], ids=["dynamo", "torchscript"])
def test_dilated_lp_pool_below_opset_19_refused(p: float, dynamo: bool) -> None:
    """Reproducer 3: the Pow/AveragePool/Mul/Pow lowering of a dilated LP pool needs
    AveragePool dilations (opset 19); below it padkit refuses instead of writing a file
    onnxruntime rejects."""
    model = pnn.LPPool1d(p, 3, 3, dilation=2)
    x = torch.rand(1, 2, 19) + 0.1
    with pytest.raises(Exception) as info:
        export(model, x, dynamo=dynamo, opset=18)
    err = refusal(info.value)
    assert err is not None and "LPPool1d()" in str(err) and "opset_version >= 19" in str(err)
    proto = export(model, x, dynamo=dynamo, opset=19)
    assert_same(model, proto, x)


def test_even_lp_pool_exports_below_opset_18() -> None:
    """LpPool without ceil_mode or dilation exists before opset 18 (no ceil_mode written)."""
    model = nn.Sequential(nn.Sigmoid(), pnn.LPPool1d(2, 3, 2, padding=((1, 1),))).eval()
    proto = export(model, torch.randn(1, 2, 11), dynamo=False, opset=13)
    for n in (7, 11, 12):
        assert_same(model, proto, torch.randn(2, 2, n))
