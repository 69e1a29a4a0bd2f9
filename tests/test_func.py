"""padkit layers under torch.func: vmap, grad, jacrev, jvp and functional_call.

The reference is the twin (tests/mixed_model.py: torch layers and an explicit ``F.pad``
whose pads come from the TF/ONNX definitions), under the same transform or run sample by
sample with plain autograd; single layers under ``vmap`` must equal the same layer run
on the whole batch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from mixed_model import model_and_twin
from torch import Tensor, nn
from torch.func import functional_call, grad, jacrev, jvp, vmap

import padkit.nn as pn

torch.set_num_threads(1)

LAYERS: list[tuple[str, Callable[[], nn.Module]]] = [
    ("avg-same-s2", lambda: pn.AvgPool2d(3, 2, padding="same")),
    ("avg-same-incl", lambda: pn.AvgPool2d(3, 2, padding="same", count_include_pad=True)),
    ("avg-crop", lambda: pn.AvgPool2d(2, 1, padding="same")),
    ("avg-dilated", lambda: pn.AvgPool2d(3, 1, padding="same", dilation=2)),
    ("max-same-s2", lambda: pn.MaxPool2d(3, 2, padding="same")),
    ("max-crop", lambda: pn.MaxPool2d(2, 1, padding="same")),
    ("max-indices", lambda: pn.MaxPool2d(3, 2, padding="same_lower", return_indices=True)),
    ("lp-same", lambda: pn.LPPool2d(2, 3, 2, padding="same")),
    ("conv-same-s2", lambda: pn.Conv2d(4, 6, 3, stride=2, padding="same")),
    ("dw-same-s2", lambda: pn.Conv2d(4, 4, 5, stride=2, padding="same", groups=4)),
    ("conv-causal", lambda: pn.Conv2d(4, 4, 3, dilation=2, padding=("same", "causal"))),
    ("conv-reflect", lambda: pn.Conv2d(4, 4, 3, padding=((0, 2), (1, 1)), padding_mode="reflect")),
    ("convT-same", lambda: pn.ConvTranspose2d(4, 4, 3, stride=2, padding="same")),
    ("avg3d-same", lambda: pn.AvgPool3d(3, 2, padding="same")),
    ("conv1d-causal", lambda: pn.Conv1d(4, 4, 3, dilation=2, padding="causal")),
]


def batch(name: str, channels_last: bool = False) -> Tensor:
    shape = {"avg3d": (5, 4, 6, 7, 9), "conv1d": (5, 4, 21)}.get(name.split("-")[0], (5, 4, 20, 21))
    x = torch.randn(shape, dtype=torch.float64)
    if channels_last and x.dim() == 4:
        x = x.to(memory_format=torch.channels_last)
    return x


def _close(got: Any, want: Any) -> None:
    if isinstance(want, tuple):
        for g, w in zip(got, want, strict=True):
            _close(g, w)
    else:
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
@pytest.mark.parametrize("name, build", LAYERS, ids=[n for n, _ in LAYERS])
def test_vmap_layer_equals_batched_call(name: str, build: Any, channels_last: bool) -> None:
    torch.manual_seed(0)
    layer = build().double()
    x = batch(name, channels_last)
    _close(vmap(layer)(x), layer(x))


def test_vmap_model_equals_twin() -> None:
    model, twin = model_and_twin()
    for shape in ((4, 3, 33, 35), (4, 3, 32, 30)):
        x = torch.randn(shape, dtype=torch.float64)
        got = vmap(lambda xs: model(xs.unsqueeze(0)).squeeze(0))(x)
        _close(got, twin(x))
        x_cl = x.to(memory_format=torch.channels_last)
        _close(vmap(lambda xs: model(xs.unsqueeze(0)).squeeze(0))(x_cl), twin(x))


def _loss(module: nn.Module) -> Callable[..., Tensor]:
    def loss(params: dict[str, Tensor], x: Tensor, y: Tensor) -> Tensor:
        out: Tensor = functional_call(module, params, (x.unsqueeze(0),))
        return (out.squeeze(0) - y).pow(2).mean()

    return loss


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "nhwc"])
def test_per_sample_gradients_equal_twin(channels_last: bool) -> None:
    model, twin = model_and_twin()
    x = torch.randn(3, 3, 29, 26, dtype=torch.float64)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    y = torch.randn_like(twin(x))
    params = {k: v.detach() for k, v in model.named_parameters()}
    got = vmap(grad(_loss(model)), in_dims=(None, 0, 0))(params, x, y)
    for i in range(x.shape[0]):
        twin.zero_grad()
        (twin(x[i : i + 1]).squeeze(0) - y[i]).pow(2).mean().backward()
        for key, p in twin.named_parameters():
            assert p.grad is not None
            _close(got[key][i], p.grad)


def test_grad_of_input_equals_twin() -> None:
    model, twin = model_and_twin()
    x = torch.randn(2, 3, 27, 30, dtype=torch.float64)

    def f(m: nn.Module) -> Callable[[Tensor], Tensor]:
        return lambda inp: m(inp).pow(3).sum()

    _close(grad(f(model))(x), grad(f(twin))(x))


def test_jacrev_equals_twin() -> None:
    model, twin = model_and_twin()
    x = torch.randn(1, 3, 13, 14, dtype=torch.float64)
    got = jacrev(model)(x)
    assert got.abs().sum() > 0
    _close(got, jacrev(twin)(x))
    params = {k: v.detach() for k, v in model.named_parameters()}
    jac_p = jacrev(lambda p: functional_call(model, p, (x,)))(params)
    jac_t = jacrev(lambda p: functional_call(twin, p, (x,)))(params)
    for key in params:
        _close(jac_p[key], jac_t[key])


# torch.func.jvp imports torch's jvp decompositions, which torch.jit.script them (deprecated)
@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:FutureWarning")
def test_jvp_equals_twin() -> None:
    model, twin = model_and_twin()
    x = torch.randn(2, 3, 31, 24, dtype=torch.float64)
    v = torch.randn_like(x)
    out, tangent = jvp(model, (x,), (v,))[:2]
    want_out, want_tangent = jvp(twin, (x,), (v,))[:2]
    _close(out, want_out)
    _close(tangent, want_tangent)
    # and a directional derivative that is not trivially zero
    assert tangent.abs().max() > 0


def test_functional_call_with_other_weights_equals_twin() -> None:
    model, twin = model_and_twin()
    other = {k: torch.randn_like(v) for k, v in model.state_dict().items()}
    x = torch.randn(2, 3, 25, 22, dtype=torch.float64)
    _close(functional_call(model, other, (x,)), functional_call(twin, other, (x,)))
