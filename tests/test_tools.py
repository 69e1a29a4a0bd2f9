"""padkit models inside the tools that handle a model from outside: copies and pickles of a
layer's ``__dict__`` and torch-pruning's save path, per-sample gradients (opacus, torch's
ExpandedWeights), FLOP counters (ptflops, fvcore) and ``padkit.surgery.lower``.

Every reference is torch alone: the model's twin built from torch layers with explicit pads
(``nn.ZeroPad2d`` / ``nn.ConstantPad2d`` + the unpadded torch layer, the pads written out
from TensorFlow's documented SAME rule), or a loop over samples for per-sample gradients.
"""

from __future__ import annotations

import copy
import io
import math
import pickle
from multiprocessing.reduction import ForkingPickler
from typing import Any, cast

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import padkit.nn as pn
from padkit import PaddingError
from padkit.surgery import SurgeryError, lower

torch.set_num_threads(1)

SIZE = 16  # the test input's height and width


def tf_same(n: int, k: int, s: int) -> tuple[int, int]:
    """TensorFlow's SAME pads for one axis: total ``max((ceil(n/s)-1)*s + k - n, 0)``, the odd
    pixel at the end."""
    total = max((math.ceil(n / s) - 1) * s + k - n, 0)
    return total // 2, total - total // 2


def padkit_cnn() -> nn.Sequential:
    """'same' stride 2, a depthwise 'same' stride 2 (zero-extended kernel), per-side pads
    (a crop plan), pools with 'same' and per-side pads, then a classifier."""
    torch.manual_seed(0)
    return nn.Sequential(
        pn.Conv2d(3, 8, 3, stride=2, padding="same"),
        nn.ReLU(),
        pn.Conv2d(8, 8, 3, stride=2, padding="same", groups=8),
        nn.ReLU(),
        pn.Conv2d(8, 6, (2, 4), padding=((0, 1), (1, 2))),
        nn.Tanh(),
        pn.MaxPool2d(3, 2, padding="same"),
        pn.AvgPool2d(2, 1, padding=((0, 1), (1, 0))),
        nn.Flatten(),
        nn.Linear(6 * 2 * 2, 5),
    )


def torch_twin(model: nn.Sequential, size: int = SIZE) -> nn.Sequential:
    """The same model from torch layers with explicit pads (for an input of ``size``), sharing
    copies of the padkit model's weights."""
    s1 = tf_same(size, 3, 2)
    n1 = math.ceil(size / 2)
    s2 = tf_same(n1, 3, 2)
    n2 = math.ceil(n1 / 2)  # the per-side conv keeps the size; the max pool halves it
    s3 = tf_same(n2, 3, 2)
    twin = nn.Sequential(
        nn.ZeroPad2d((*s1, *s1)),
        nn.Conv2d(3, 8, 3, stride=2),
        nn.ReLU(),
        nn.ZeroPad2d((*s2, *s2)),
        nn.Conv2d(8, 8, 3, stride=2, groups=8),
        nn.ReLU(),
        nn.ZeroPad2d((1, 2, 0, 1)),  # F.pad order: W (lo, hi), then H (lo, hi)
        nn.Conv2d(8, 6, (2, 4)),
        nn.Tanh(),
        nn.ConstantPad2d((*s3, *s3), -math.inf),
        nn.MaxPool2d(3, 2),
        nn.ZeroPad2d((1, 0, 0, 1)),
        nn.AvgPool2d(2, 1),
        nn.Flatten(),
        nn.Linear(6 * 2 * 2, 5),
    )
    convs = [m for m in model if isinstance(m, (nn.Conv2d, nn.Linear))]
    twins = [m for m in twin if isinstance(m, (nn.Conv2d, nn.Linear))]
    for src, dst in zip(convs, twins, strict=True):
        dst.load_state_dict(src.state_dict())
    return twin


def example(n: int = 4, size: int = SIZE) -> torch.Tensor:
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(1))


def test_the_twin_is_the_padkit_model() -> None:
    model = padkit_cnn()
    x = example()
    torch.testing.assert_close(model(x), torch_twin(model)(x), rtol=0, atol=1e-6)


# ----------------------------------------------------------------------------- __dict__


def layers_of_every_kind() -> list[nn.Module]:
    return [
        *[m for m in padkit_cnn() if type(m).__module__ == "padkit.nn"],
        pn.Conv1d(2, 2, 3, padding="causal"),
        pn.ConvTranspose2d(3, 2, 3, stride=2, padding="same"),
        pn.LPPool2d(2, 3, 2, padding="same"),
    ]


def input_for(layer: nn.Module) -> torch.Tensor:
    if isinstance(layer, nn.Conv1d):
        return torch.randn(1, 2, 9)
    channels = getattr(layer, "in_channels", 3)
    return torch.randn(1, channels, 9, 10)


@pytest.mark.parametrize("layer", layers_of_every_kind(), ids=lambda m: type(m).__name__)
def test_a_used_layer_dict_holds_only_plain_data(layer: nn.Module) -> None:
    x = input_for(layer)
    layer(x)
    layer(x)  # the second call runs the memo
    state = pickle.loads(pickle.dumps(layer.__dict__))
    assert set(state) == set(layer.__dict__)
    ForkingPickler.dumps(layer.__dict__)  # what multiprocessing sends
    copy.deepcopy(layer.__dict__)
    for clone in (copy.copy(layer), copy.deepcopy(layer), pickle.loads(pickle.dumps(layer))):
        assert torch.equal(clone(x), layer(x))


def test_a_shallow_copy_does_not_run_the_originals_stale_memo() -> None:
    conv = pn.Conv2d(2, 2, 3, stride=2, padding="same")
    x = torch.randn(1, 2, 9, 9)
    conv(x)
    conv(x)
    twin = copy.copy(conv)
    twin.stride = (1, 1)
    twin.padding = ((0, 2), (2, 0))
    ref = F.conv2d(F.pad(x, (2, 0, 0, 2)), conv.weight, conv.bias)
    torch.testing.assert_close(twin(x), ref, rtol=0, atol=1e-6)
    torch.testing.assert_close(twin(x), ref, rtol=0, atol=1e-6)
    same = F.conv2d(F.pad(x, (1, 1, 1, 1)), conv.weight, conv.bias, 2)  # TF SAME at 9
    torch.testing.assert_close(conv(x), same, rtol=0, atol=1e-6)
    # a __dict__ copied into another layer object (torch-pruning's load path)
    other = pn.Conv2d(2, 2, 3, padding=((0, 2), (2, 0)))
    other(x)
    other.__dict__.update(copy.copy(conv.__dict__))
    torch.testing.assert_close(other(x), same, rtol=0, atol=1e-6)


def test_torch_pruning_save_and_load_round_trip() -> None:
    tp = pytest.importorskip("torch_pruning")
    model = padkit_cnn().eval()
    x = example()
    model(x)
    pruner = tp.pruner.MagnitudePruner(
        model,
        x,
        importance=tp.importance.MagnitudeImportance(p=2),
        pruning_ratio=0.5,
        ignored_layers=[model[-1]],
    )
    pruner.step()
    c0, c2, c4 = (cast(Any, model[i]) for i in (0, 2, 4))
    assert c2.groups == c2.out_channels < 8  # depthwise kept depthwise
    assert c4.pad_spec.axes == ((0, 1), (1, 2))
    expected = model(x)
    buf = io.BytesIO()
    torch.save(tp.state_dict(model), buf)  # torch-pruning's documented save path
    buf.seek(0)
    loaded = padkit_cnn().eval()
    loaded(x)  # a used model: its memo must not serve the loaded layers' new shapes
    tp.load_state_dict(loaded, torch.load(buf, weights_only=False))
    assert torch.equal(loaded(x), expected)
    assert torch.equal(loaded(x), expected)
    # the pruned layers are still exact: F.pad + the unpadded conv with their pruned weights
    ref0 = F.conv2d(F.pad(x, (0, 1, 0, 1)), c0.weight, c0.bias, 2)
    torch.testing.assert_close(c0(x), ref0, rtol=0, atol=1e-6)
    h = torch.randn(1, c4.in_channels, 5, 6)
    ref4 = F.conv2d(F.pad(h, (1, 2, 0, 1)), c4.weight, c4.bias)
    torch.testing.assert_close(c4(h), ref4, rtol=0, atol=1e-6)


# ----------------------------------------------------------------------------- per-sample grads

# torch warns when a module's full backward hook (opacus's) fires for an input that does not
# require grad (the model's first layer); opacus warns that its default RNG is not secure
HOOK_WARNING = "ignore:Full backward hook is firing:UserWarning"
RNG_WARNING = "ignore:Secure RNG turned off:UserWarning"
LABELS = torch.tensor([0, 1, 2, 3])


def loop_grads(model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """Per-sample gradients of the summed cross entropy, one backward per sample."""
    per_sample = []
    for i in range(len(x)):
        model.zero_grad()
        loss = F.cross_entropy(model(x[i : i + 1]), LABELS[i : i + 1], reduction="sum")
        loss.backward()  # type: ignore[no-untyped-call]
        per_sample.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
    return [torch.stack(g) for g in zip(*per_sample, strict=True)]


def assert_all_close(got: list[torch.Tensor], want: list[torch.Tensor]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_expanded_weights_per_sample_grads_of_each_layer() -> None:
    from torch.nn.utils._per_sample_grad import call_for_per_sample_grads

    x = torch.randn(2, 4, 9, 8)
    for kw in (
        {"padding": 1},
        {"padding": "same", "stride": 2},
        {"padding": "same", "stride": 2, "groups": 4},  # zero_extend plan
        {"padding": ((0, 1), (1, 2))},  # crop plan
    ):
        conv = pn.Conv2d(4, 4, 3, **kw)
        call_for_per_sample_grads(conv)(x).sum().backward()  # type: ignore[no-untyped-call]
        want = []
        for i in range(len(x)):
            conv.zero_grad()
            conv(x[i : i + 1]).sum().backward()
            want.append(conv.weight.grad.clone())  # type: ignore[union-attr]
        got: Any = conv.weight
        torch.testing.assert_close(got.grad_sample, torch.stack(want), rtol=1e-5, atol=1e-6)


@pytest.mark.filterwarnings(HOOK_WARNING)
@pytest.mark.parametrize("mode", ["hooks", "functorch", "ew"])
def test_opacus_per_sample_grads_equal_a_loop(mode: str) -> None:
    grad_sample = pytest.importorskip("opacus.grad_sample")
    x = example()
    want = loop_grads(padkit_cnn(), x)
    model = padkit_cnn()
    if mode == "ew":
        wrapped = grad_sample.GradSampleModuleExpandedWeights(model, loss_reduction="sum")
    else:
        wrapped = grad_sample.GradSampleModule(
            model, loss_reduction="sum", force_functorch=mode == "functorch"
        )
    F.cross_entropy(wrapped(x), LABELS, reduction="sum").backward()  # type: ignore[no-untyped-call]
    assert_all_close([cast(Any, p).grad_sample for p in model.parameters()], want)


@pytest.mark.filterwarnings(HOOK_WARNING, RNG_WARNING)
@pytest.mark.parametrize("mode", ["hooks", "functorch", "ew", "ghost"])
def test_opacus_make_private_clips_exactly(mode: str) -> None:
    """``make_private`` without noise: the step's gradient is the mean of the per-sample
    gradients, each clipped to ``max_grad_norm`` (ghost clipping computes the norms without
    the per-sample gradients)."""
    opacus = pytest.importorskip("opacus")
    x = example()
    per_sample = loop_grads(padkit_cnn(), x)
    norms = torch.stack([g.flatten(1).norm(dim=1) for g in per_sample]).norm(dim=0)
    clip = 0.5
    assert bool((norms > clip).all())  # every sample is clipped
    scale = (clip / (norms + 1e-6)).clamp(max=1.0)  # opacus's clipping factor
    want = [(g * scale.view(-1, *[1] * (g.dim() - 1))).mean(0) for g in per_sample]
    model = padkit_cnn()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, LABELS), batch_size=4)
    criterion: Any = nn.CrossEntropyLoss()
    extra = {"criterion": criterion} if mode == "ghost" else {}
    private = opacus.PrivacyEngine().make_private(
        module=model,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.0),
        data_loader=loader,
        noise_multiplier=0.0,
        max_grad_norm=clip,
        poisson_sampling=False,
        grad_sample_mode=mode,
        **extra,
    )
    wrapped, optimizer, loader = private[0], private[1], private[-1]
    if mode == "ghost":
        criterion = private[2]
    for xb, yb in loader:
        optimizer.zero_grad()
        criterion(wrapped(xb), yb).backward()
        optimizer.step()
    assert_all_close([cast(Any, p).grad for p in model.parameters()], want)


# ----------------------------------------------------------------------------- lower


def torch_only(model: nn.Module) -> bool:
    return all(type(m).__module__.startswith("torch.nn") for m in model.modules())


LOWERABLE = {
    "conv same s2": lambda: pn.Conv2d(2, 3, 3, stride=2, padding="same"),
    "conv same d2": lambda: pn.Conv2d(2, 3, 3, padding="same", dilation=2),
    "conv causal 1d": lambda: pn.Conv1d(2, 3, 3, padding="causal", dilation=2),
    "conv 3d per side": lambda: pn.Conv3d(2, 2, 2, padding=((1, 0), (0, 1), 1)),
    "conv reflect": lambda: pn.Conv2d(2, 3, 4, padding="same", padding_mode="reflect"),
    "conv circular": lambda: pn.Conv2d(2, 3, 3, padding=((0, 2), 1), padding_mode="circular"),
    "conv mixed modes": lambda: pn.Conv2d(
        2, 3, 3, padding=((2, 0), (1, 1)), padding_mode=("replicate", "reflect")
    ),
    "conv_t same": lambda: pn.ConvTranspose2d(2, 3, 3, stride=2, padding="same"),
    "conv_t per side": lambda: pn.ConvTranspose1d(2, 3, 4, stride=2, padding=((1, 2),)),
    "max same": lambda: pn.MaxPool2d(3, 2, padding="same"),
    "max ceil": lambda: pn.MaxPool2d(3, 2, padding=((0, 1), 1), ceil_mode=True),
    "max wide pads": lambda: pn.MaxPool1d(2, 1, padding=((2, 0),)),
    "avg same counted": lambda: pn.AvgPool2d(3, 2, padding="same", count_include_pad=True),
    "avg same TF": lambda: pn.AvgPool2d(3, 2, padding="same", count_include_pad=False),
    "avg divisor": lambda: pn.AvgPool2d(2, 1, padding=((0, 1), (1, 0)), divisor_override=3),
    "lp same": lambda: pn.LPPool2d(2, 3, 2, padding="same"),
}


@pytest.mark.parametrize("make", LOWERABLE.values(), ids=list(LOWERABLE))
def test_lower_each_layer_equals_the_padkit_layer(make: Any) -> None:
    torch.manual_seed(0)
    layer = make()
    nd = 1 if isinstance(layer, (nn.Conv1d, nn.ConvTranspose1d, nn.MaxPool1d)) else 2
    nd = 3 if isinstance(layer, nn.Conv3d) else nd
    x = torch.randn(2, 2, *[9, 10, 7][:nd])
    lowered, report = lower(layer, x)
    assert torch_only(lowered)
    want = layer(x)
    torch.testing.assert_close(lowered(x), want, rtol=1e-5, atol=1e-6)
    assert report.paths == [""]
    if report.size_dependent:
        with pytest.raises(PaddingError, match=r"'<root>'.*size \(9.*got input size \(11"):
            lowered(torch.randn(2, 2, *[11, 12, 8][:nd]))


def test_lower_a_model_and_count_its_macs_with_ptflops() -> None:
    ptflops = pytest.importorskip("ptflops")
    model = padkit_cnn().eval()
    x = example(1)
    lowered, report = lower(model, x)
    assert torch_only(lowered)
    torch.testing.assert_close(lowered(x), model(x), rtol=1e-5, atol=1e-6)
    assert report.size_dependent == ["0", "2", "6"]  # the 'same' layers at stride 2
    assert report.paths == ["0", "2", "4", "6", "7"]

    def macs(net: nn.Module) -> int:
        count, _ = ptflops.get_model_complexity_info(
            net, (3, SIZE, SIZE), as_strings=False, print_per_layer_stat=False
        )
        return int(count)

    assert macs(lowered) == macs(torch_twin(model))
    tp = pytest.importorskip("torch_pruning")  # it looks modules up by exact class too
    ops_lowered, _ = tp.utils.count_ops_and_params(lowered, x)
    ops_twin, _ = tp.utils.count_ops_and_params(torch_twin(model), x)
    assert ops_lowered == ops_twin
    with pytest.raises(PaddingError, match=r"layer '0'.*\(16, 16\).*got input size \(15, 15\)"):
        lowered(example(1, size=15))


def test_lower_keeps_the_original_and_its_training_flags() -> None:
    model = padkit_cnn().train()
    x = example(2)
    before = model(x)
    lowered, _ = lower(model, x)
    assert all(m.training for m in lowered.modules())
    assert type(model[0]) is pn.Conv2d
    assert torch.equal(model(x), before)
    # the lowered copy pickles, and its size guard with it
    again = pickle.loads(pickle.dumps(lowered))
    with pytest.raises(PaddingError, match="got input size"):
        again(example(1, size=15))


def test_lower_refuses_what_torch_layers_cannot_compute() -> None:
    x = torch.randn(1, 2, 9, 9)
    tf_avg = pn.AvgPool2d(2, 1, padding="same", count_include_pad=False)
    with pytest.raises(SurgeryError, match=r"count_include_pad=False"):
        lower(tf_avg, x)
    with pytest.raises(SurgeryError, match=r"dilation"):
        lower(pn.AvgPool2d(2, 1, padding=1, dilation=2), x)
    shared = pn.Conv2d(2, 2, 3, stride=2, padding="same")
    with pytest.raises(SurgeryError, match=r"sizes \(9, 9\) and \(5, 5\)"):
        lower(nn.Sequential(shared, shared), x)
    with pytest.raises(TypeError, match="example inputs"):
        lower(shared)
    normed = nn.utils.parametrizations.weight_norm(pn.Conv2d(2, 2, 3, padding=1))
    with pytest.raises(SurgeryError, match=r"parametrized.*remove_parametrizations"):
        lower(normed, x)


# ----------------------------------------------------------------------------- FLOP counts


@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
def test_inspect_counts_the_declared_op_and_what_runs_as_fvcore_does() -> None:
    """fvcore counts the conv that runs (one flop per multiply-accumulate): on the padkit
    layer that is ``plan_macs`` (a crop plan's surplus outputs, a zero_extend plan's zero
    taps), on the torch twin (F.pad + the unpadded conv) it is ``macs``."""
    fvcore = pytest.importorskip("fvcore.nn")
    from padkit.inspect import inspect_model

    cases = [
        (pn.Conv2d(3, 8, (2, 4), padding=((0, 1), (1, 2))), (1, 2, 0, 1), 1, "crop"),
        (pn.Conv2d(8, 8, 3, stride=2, padding="same", groups=8), (0, 1, 0, 1), 2, "zero_extend"),
        (pn.Conv2d(3, 8, 3, padding=1), (1, 1, 1, 1), 1, "native"),
    ]
    for conv, pad, stride, strategy in cases:
        x = torch.randn(1, conv.in_channels, SIZE, SIZE)
        (report,) = inspect_model(conv, input_shape=tuple(x.shape))
        assert report.plan == strategy
        twin = nn.Sequential(
            nn.ZeroPad2d(pad),
            nn.Conv2d(conv.in_channels, 8, conv.kernel_size, stride, groups=conv.groups),
        )
        with torch.no_grad():
            ran = fvcore.FlopCountAnalysis(conv, x).unsupported_ops_warnings(False).total()
            declared = fvcore.FlopCountAnalysis(twin, x).unsupported_ops_warnings(False).total()
        assert report.macs == declared
        if strategy == "zero_extend":
            # fvcore counts a torch.jit.trace, where padkit cannot look at the input's values
            # (a zero tap may meet an infinity): the traced conv is the exact padded form
            assert ran == declared
        else:
            assert report.plan_macs == ran
        assert report.macs is not None and report.plan_macs is not None
        assert (report.plan_macs > report.macs) == (strategy != "native")
