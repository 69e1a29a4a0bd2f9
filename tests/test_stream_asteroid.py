"""asteroid's causal Conv-TasNet separator (``TDConvNet(causal=True)``), as a user streams it:
``convert_causal`` (its convs pad both sides and a sibling chops the end), then
``StreamingModule``. Its norms are measured: the channel-wise ``cLN`` acts on each time step,
the cumulative ``cgLN`` reads every earlier step and streams with its running sums carried,
the global ``gLN`` reads the whole sequence and is refused with that measurement. The
reference is the package's own module on the full sequence (random weights, no download).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from chunk_plans import plans
from test_codecs_real import load

from padkit import PaddingError
from padkit.streaming import StreamingModule, convert_causal

# asteroid's channel-wise norm warns when it is run on an empty chunk (the stream's chunk
# plans include 0-sample chunks, whose steps run the model for an empty output)
pytestmark = pytest.mark.filterwarnings("ignore:.*degrees of freedom is <= 0:UserWarning")


def separator(norm: str) -> Any:
    convolutional = load("asteroid", "asteroid.masknn.convolutional")
    torch.manual_seed(3)
    return convolutional.TDConvNet(
        in_chan=16,
        n_src=2,
        out_chan=16,
        n_blocks=3,
        n_repeats=2,
        bn_chan=16,
        hid_chan=32,
        skip_chan=16,
        conv_kernel_size=3,
        norm_type=norm,
        causal=True,
    ).eval()


@pytest.mark.parametrize("norm", ["cLN", "cgLN"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_causal_conv_tasnet_streams_exactly(norm: str, dtype: torch.dtype) -> None:
    net = separator(norm).to(dtype)
    x = torch.randn(2, 16, 120, dtype=dtype)
    new, _ = convert_causal(net, example=x[..., :40])
    sm = StreamingModule(new)
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {}
    with torch.no_grad():
        full = net(x)
        for sizes in plans(120, hop=16, seed=4).values():
            state = sm.init_state(example=x[..., :1])
            outs = []
            for chunk in x.split(sizes, -1):
                y, state = sm.step(chunk, state)
                outs.append(y)
            torch.testing.assert_close(torch.cat(outs, -1), full, **tol)
    carried = {name for name in sm._cumulative}
    if norm == "cgLN":  # every CumLN: the bottleneck's and two per block
        assert len(carried) == 1 + 2 * 3 * 2
        assert all(type(new.get_submodule(n)).__name__ == "CumLN" for n in carried)
    else:
        assert not carried


def test_the_global_norm_is_refused_with_its_measured_dependency() -> None:
    net = separator("gLN")
    x = torch.randn(1, 16, 60)
    new, _ = convert_causal(net, example=x[..., :40])
    with pytest.raises(PaddingError, match=r"GlobLN 'bottleneck\.0'.*both directions"):
        StreamingModule(new).step(x[..., :5], {})
