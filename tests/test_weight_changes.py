"""A padkit layer computes with the weight it holds now, however that weight was changed.

Weights change in place without torch's version counter seeing it: writes through
``.data``, torch's fused optimizers, EMA updates written with ``.data``, copies under
``torch.autograd._unsafe_preserve_version_counter`` (FSDP2's all-gather). Every forward
after such a change must equal the explicit ``F.pad`` + torch op with the weight's current
values, with the oneDNN backend forced on, chosen by its tuner, and off, for convs,
depthwise convs and transposed convs in 1-3 d, NCHW and channels-last, in inference and
in training. A differential training test runs every torch optimiser in its for-loop,
``foreach`` and ``fused`` forms on padkit layers and on ``F.pad`` twins.
"""

from __future__ import annotations

import copy
import platform
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import padkit.native as native
import padkit.nn as pn
from padkit.native import _dispatch

requires_backend = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")),
    reason="the oneDNN wheels of padkit[native] are built for Linux x86-64 only",
)


@pytest.fixture(scope="module", autouse=True)
def _as_found() -> Iterator[None]:
    before, threads = _dispatch.active, torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    _dispatch.active, _dispatch.HOOK.force = before, False
    torch.set_num_threads(threads)


@pytest.fixture(params=["forced", "planner", "off"])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "off":
        native.disable()
    elif not native.enable(required=False):
        pytest.skip(f"the native backend does not load here: {native.info()['error']}")
    _dispatch.HOOK.force = request.param == "forced"
    yield request.param
    _dispatch.HOOK.force = False
    native.disable()


# ----------------------------------------------------------------------------- layers


@dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[], nn.Module]
    shape: tuple[int, ...]
    #: the reference: F.pad + the unpadded torch op (transposed: full output, cropped)
    ref: Callable[[nn.Module, Tensor], Tensor]


def _conv_ref(pads: list[int], stride: Any) -> Callable[[nn.Module, Tensor], Tensor]:
    def ref(m: nn.Module, x: Tensor) -> Tensor:
        fn = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[x.dim()]
        return fn(F.pad(x, pads), m.weight, m.bias, stride, 0, 1, m.groups)  # type: ignore[arg-type]

    return ref


def _transposed_ref(
    crops: list[tuple[int, int]], stride: Any
) -> Callable[[nn.Module, Tensor], Tensor]:
    def ref(m: nn.Module, x: Tensor) -> Tensor:
        fn = {3: F.conv_transpose1d, 4: F.conv_transpose2d, 5: F.conv_transpose3d}[x.dim()]
        out = fn(x, m.weight, m.bias, stride, 0, 0, m.groups)  # type: ignore[arg-type]
        for axis, (lo, hi) in enumerate(crops):
            out = out.narrow(2 + axis, lo, out.shape[2 + axis] - lo - hi)
        return out

    return ref


CASES = [
    Case(
        "conv1d",
        lambda: pn.Conv1d(8, 16, 3, stride=2, padding=((1, 0),)),
        (2, 8, 33),
        _conv_ref([1, 0], 2),
    ),
    Case(
        "conv2d",
        lambda: pn.Conv2d(16, 32, 3, stride=2, padding=((0, 1), (1, 0))),
        (2, 16, 20, 18),
        _conv_ref([1, 0, 0, 1], 2),
    ),
    Case(
        "depthwise2d",
        lambda: pn.Conv2d(16, 16, 3, stride=2, padding=((0, 1), (0, 1)), groups=16),
        (2, 16, 20, 18),
        _conv_ref([0, 1, 0, 1], 2),
    ),
    Case(
        "conv3d",
        lambda: pn.Conv3d(4, 8, 3, stride=(1, 2, 2), padding=((1, 0), (0, 1), (1, 1))),
        (2, 4, 6, 8, 8),
        _conv_ref([1, 1, 0, 1, 1, 0], (1, 2, 2)),
    ),
    Case(
        "transposed2d",
        lambda: pn.ConvTranspose2d(16, 8, 3, stride=2, padding=((0, 1), (1, 0))),
        (2, 16, 7, 6),
        _transposed_ref([(0, 1), (1, 0)], 2),
    ),
]


def _input(case: Case, channels_last: bool) -> Tensor:
    x = torch.randn(case.shape, generator=torch.Generator().manual_seed(3))
    if channels_last:
        fmt = {4: torch.channels_last, 5: torch.channels_last_3d}.get(x.dim())
        if fmt is None:
            pytest.skip("channels-last has no 1-d form")
        x = x.contiguous(memory_format=fmt)
    return x


def _new_weight(w: Tensor, seed: int) -> Tensor:
    return torch.randn(w.shape, generator=torch.Generator().manual_seed(seed), dtype=w.dtype)


#: each way a weight is changed in place; the module's parameters are changed, not replaced
def _data_copy(m: nn.Module) -> None:
    m.weight.data.copy_(_new_weight(m.weight, 10))


def _data_mul(m: nn.Module) -> None:
    m.weight.data.mul_(0.5)


def _ema(m: nn.Module) -> None:
    src = _new_weight(m.weight, 11)
    m.weight.data.mul_(0.9).add_(src, alpha=0.1)


def _preserved_version(m: nn.Module) -> None:
    with torch.no_grad(), torch.autograd._unsafe_preserve_version_counter(m.weight):
        m.weight.copy_(_new_weight(m.weight, 12))


def _data_assign(m: nn.Module) -> None:
    m.weight.data = _new_weight(m.weight, 13)


def _load_state_dict(m: nn.Module) -> None:
    state = m.state_dict()
    state["weight"] = _new_weight(m.weight, 14)
    m.load_state_dict(state)


def _init_normal(m: nn.Module) -> None:
    nn.init.normal_(m.weight)


def _detach_copy(m: nn.Module) -> None:
    m.weight.detach().copy_(_new_weight(m.weight, 15))


def _set(m: nn.Module) -> None:
    with torch.no_grad():
        m.weight.set_(_new_weight(m.weight, 16))


CHANGES = {
    "data.copy_": _data_copy,
    "data.mul_": _data_mul,
    "ema via .data": _ema,
    "preserved version counter": _preserved_version,
    "data =": _data_assign,
    "load_state_dict": _load_state_dict,
    "init.normal_": _init_normal,
    "detach().copy_": _detach_copy,
    "set_": _set,
}


def _check(m: nn.Module, x: Tensor, case: Case, training: bool) -> None:
    if training:
        xg = x.detach().requires_grad_()
        got = m(xg)
        got.sum().backward()
        want_x = x.detach().requires_grad_()
        twin_w = m.weight.detach().clone().requires_grad_()
        twin = copy.copy(m)
        twin._parameters = dict(m._parameters, weight=nn.Parameter(twin_w))
        want = case.ref(twin, want_x)
        want.sum().backward()
        torch.testing.assert_close(got, want, atol=2e-4, rtol=1e-4)
        assert xg.grad is not None and want_x.grad is not None
        torch.testing.assert_close(xg.grad, want_x.grad, atol=2e-4, rtol=1e-4)
        assert m.weight.grad is not None and twin.weight.grad is not None
        torch.testing.assert_close(m.weight.grad, twin.weight.grad, atol=2e-3, rtol=1e-4)
        m.weight.grad = None
    else:
        with torch.no_grad():
            got = m(x)
            want = case.ref(m, x)
        torch.testing.assert_close(got, want, atol=2e-4, rtol=1e-4)


@requires_backend
@pytest.mark.parametrize("change", list(CHANGES))
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("layout", ["nchw", "channels_last"])
@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_weight_changed_in_place(
    backend: str, change: str, case: Case, layout: str, training: bool
) -> None:
    torch.manual_seed(0)
    m = case.make().train(training)
    x = _input(case, layout == "channels_last")
    for _ in range(3):  # every cache of the first calls is warm
        _check(m, x, case, training)
    before = m.weight.detach().clone()
    CHANGES[change](m)
    assert not torch.equal(m.weight.detach(), before)  # the change changed the weight
    _check(m, x, case, training)


@requires_backend
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_functional_call_and_func_transforms(backend: str, case: Case) -> None:
    m = case.make()
    x = _input(case, False)
    with torch.no_grad():
        m(x), m(x)
    new = {"weight": _new_weight(m.weight, 20), "bias": m.bias}
    got = torch.func.functional_call(m, new, (x,))
    twin = copy.copy(m)
    twin._parameters = {k: nn.Parameter(v.detach()) for k, v in new.items()}
    torch.testing.assert_close(got, case.ref(twin, x), atol=2e-4, rtol=1e-4)

    # torch.func.grad over the substituted weight: the gradient of the weight passed in
    def loss(w: Tensor) -> Tensor:
        return torch.func.functional_call(m, {"weight": w, "bias": m.bias}, (x,)).pow(2).sum()

    def ref_loss(w: Tensor) -> Tensor:
        t = copy.copy(m)
        t._parameters = {"weight": w, "bias": m.bias}  # type: ignore[dict-item]
        return case.ref(t, x).pow(2).sum()

    g = torch.func.grad(loss)(new["weight"])
    torch.testing.assert_close(g, torch.func.grad(ref_loss)(new["weight"]), atol=5e-3, rtol=1e-4)
    with torch.no_grad():  # and the module's own weight is what a plain call uses after
        torch.testing.assert_close(m(x), case.ref(m, x), atol=2e-4, rtol=1e-4)


@requires_backend
def test_weight_shared_between_layers(backend: str) -> None:
    a = pn.Conv2d(16, 16, 3, stride=2, padding=((0, 1), (1, 0)))
    b = pn.Conv2d(16, 16, 3, stride=2, padding=((0, 1), (1, 0)))
    b.weight = a.weight
    x = torch.randn(2, 16, 20, 18)
    with torch.no_grad():
        for _ in range(2):
            a(x), b(x)
        a.weight.data.mul_(-2.0)
        for m in (a, b):
            want = F.conv2d(F.pad(x, [1, 0, 0, 1]), a.weight, m.bias, 2)
            torch.testing.assert_close(m(x), want, atol=2e-4, rtol=1e-4)


@requires_backend
@pytest.mark.parametrize("how", ["weight_norm", "orthogonal"])
def test_parametrized_weight(backend: str, how: str) -> None:
    from torch.nn.utils import parametrizations

    m = pn.Conv2d(8, 8, 3, stride=2, padding=((0, 1), (1, 0)))
    if how == "weight_norm":
        m = parametrizations.weight_norm(m)
        raw = m.parametrizations.weight.original1
    else:
        m = parametrizations.orthogonal(m)
        raw = m.parametrizations.weight.original
    x = torch.randn(2, 8, 12, 10)
    with torch.no_grad():
        m(x), m(x)
        raw.data.mul_(-0.7).add_(0.1)
        torch.testing.assert_close(
            m(x), F.conv2d(F.pad(x, [1, 0, 0, 1]), m.weight, m.bias, 2), atol=2e-4, rtol=1e-4
        )


# ----------------------------------------------------------------------------- training


class Twin(nn.Module):
    """The model of :func:`_padkit_model` written with F.pad and torch's unpadded layers."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(8, 16, 3, stride=2)
        self.b = nn.Conv2d(16, 16, 3, stride=2, groups=16)
        self.c = nn.ConvTranspose2d(16, 8, 3, stride=2)

    def forward(self, x: Tensor) -> Tensor:
        x = torch.relu(self.a(F.pad(x, [1, 0, 0, 1])))
        x = torch.relu(self.b(F.pad(x, [0, 1, 0, 1])))
        x = self.c(x)
        return x[:, :, 0 : x.shape[2] - 1, 1:]


def _padkit_model() -> nn.Module:
    return nn.ModuleDict(
        {
            "a": pn.Conv2d(8, 16, 3, stride=2, padding=((0, 1), (1, 0))),
            "b": pn.Conv2d(16, 16, 3, stride=2, padding=((0, 1), (0, 1)), groups=16),
            "c": pn.ConvTranspose2d(16, 8, 3, stride=2, padding=((0, 1), (1, 0))),
        }
    )


def _run_padkit(m: nn.Module, x: Tensor) -> Tensor:
    assert isinstance(m, nn.ModuleDict)
    return m["c"](torch.relu(m["b"](torch.relu(m["a"](x)))))


OPTIMISERS = ["SGD", "Adam", "AdamW", "Adagrad", "RMSprop", "Adamax", "NAdam", "RAdam", "Adadelta"]


def _optimiser(name: str, params: Any, form: str) -> torch.optim.Optimizer:
    cls = getattr(torch.optim, name)
    kw: dict[str, Any] = {"lr": 0.05}
    if name == "SGD":
        kw["momentum"] = 0.9
    if form == "fused":
        kw["fused"] = True
    else:
        kw["foreach"] = form == "foreach"
    return cls(params, **kw)  # type: ignore[no-any-return]


def _train(
    name: str, form: str, model: nn.Module, run: Callable[[nn.Module, Tensor], Tensor], ema: bool
) -> dict[str, Tensor]:
    gen = torch.Generator().manual_seed(5)
    opt = _optimiser(name, model.parameters(), form)
    shadow = copy.deepcopy(model)
    for p in shadow.parameters():
        p.requires_grad_(False)
    for _ in range(4):
        x = torch.randn(2, 8, 17, 18, generator=gen)
        opt.zero_grad()
        run(model, x).pow(2).mean().backward()
        opt.step()
        if ema:  # an EMA model written through .data, evaluated every step
            for pe, ps in zip(shadow.parameters(), model.parameters()):
                pe.data.mul_(0.9).add_(ps.data, alpha=0.1)
            with torch.no_grad():
                run(shadow, x)
    out = {k: v.detach().clone() for k, v in model.state_dict().items()}
    if ema:
        with torch.no_grad():
            out["ema output"] = run(shadow, torch.randn(2, 8, 17, 18, generator=gen))
    return out


@requires_backend
@pytest.mark.parametrize("form", ["for-loop", "foreach", "fused"])
@pytest.mark.parametrize("name", OPTIMISERS)
def test_training_equals_fpad_twin(backend: str, name: str, form: str) -> None:
    if form == "fused":
        cls = getattr(torch.optim, name)
        try:
            probe = nn.Parameter(torch.zeros(2))
            probe.grad = torch.zeros(2)
            cls([probe], lr=0.1, fused=True).step()
        except (RuntimeError, TypeError, ValueError) as err:
            pytest.skip(f"torch.optim.{name} has no fused CPU form here: {err}")
    torch.manual_seed(0)
    padkit_model = _padkit_model()
    twin = Twin()
    twin.load_state_dict(padkit_model.state_dict())
    ema = name == "SGD"
    got = _train(name, form, padkit_model, _run_padkit, ema)
    want = _train(name, form, twin, lambda m, x: m(x), ema)
    assert list(got) == list(want)
    for key in got:
        torch.testing.assert_close(got[key], want[key], atol=2e-5, rtol=1e-4, msg=key)
