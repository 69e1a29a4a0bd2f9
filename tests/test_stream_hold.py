"""Short chunks held in the state until they complete an output (``padkit/streaming/_hold``).

The reference for every value is the model's own full-sequence run. The reference for when
an output is due is independent of the stream too: after ``n`` input samples, the outputs
that are final are those of the full run on the first ``n`` samples that equal the full
run's on the whole input (a causal model's later input changes none of them).
"""

from __future__ import annotations

import io
import random

import pytest
import torch
from hypothesis import given, settings, strategies as st
from torch import Tensor, nn

import padkit.nn as pn
from padkit import PaddingError
from padkit.streaming import StreamingModule

HELD = "<stream>.held"


def due(model: nn.Module, x: Tensor, n: int, full: Tensor) -> int:
    """Outputs final after ``n`` samples: the leading outputs of the run on ``x[..., :n]``
    that equal the full run's."""
    try:
        part = model(x[..., :n])
    except PaddingError:  # shorter than the first strided window: no output yet
        return 0
    k = 0
    while k < part.shape[-1] and torch.allclose(part[..., k], full[..., k], atol=1e-6):
        k += 1
    return k


def chunkings(n: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    rand: list[int] = []
    while sum(rand) < n:
        rand.append(min(rng.randint(1, 23), n - sum(rand)))
    return [[1] * n, [7] * (n // 7) + [n % 7], rand]


def plain() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(
        pn.Conv1d(2, 8, 7, padding="causal"),
        nn.ELU(),
        pn.Conv1d(8, 8, 8, stride=4, padding="causal_block"),
        nn.ELU(),
        pn.Conv1d(8, 8, 3, padding="causal", dilation=3),
        nn.ELU(),
        pn.Conv1d(8, 4, 10, stride=5, padding="causal"),
    )
    return net.eval()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_short_chunks_are_held_and_every_output_comes_when_due(dtype: torch.dtype) -> None:
    model = plain().to(dtype)
    sm = StreamingModule(model)
    x = torch.randn(2, 2, 170, dtype=dtype)
    with torch.no_grad():
        full = model(x)
        expected = {n: due(model, x, n, full) for n in range(x.shape[-1] + 1)}
        for sizes in chunkings(x.shape[-1], 3):
            state = sm.init_state(example=x[..., :1])
            outs, n, held = [], 0, 0
            for chunk in x.split(sizes, -1):
                y, state = sm.step(chunk, state)
                n += chunk.shape[-1]
                outs.append(y)
                held += HELD in state
                assert sum(o.shape[-1] for o in outs) == expected[n], (sizes[0], n)
            torch.testing.assert_close(torch.cat(outs, -1), full[..., : expected[n]])
            assert held > 0  # the mechanism ran: most short chunks complete no output
            tail = sm.flush(state, example=x[..., :1])
            assert tail.shape[-1] == 0


def test_a_held_state_is_a_state_like_any_other() -> None:
    """Saved and loaded, moved (new tensor objects), stepped twice, reset per row, flushed:
    each continues exactly."""
    model = plain()
    sm = StreamingModule(model)
    x = torch.randn(2, 2, 120)
    with torch.no_grad():
        full = model(x)
        state = sm.init_state(example=x[..., :1])
        outs = []
        for chunk in x[..., :53].split(1, -1):
            y, state = sm.step(chunk, state)
            outs.append(y)
        assert HELD in state
        assert all(isinstance(v, Tensor) for v in state.values())
        buffer = io.BytesIO()
        torch.save(state, buffer)
        buffer.seek(0)
        loaded = torch.load(buffer, weights_only=True)
        moved = {k: v.clone() for k, v in state.items()}
        rest = x[..., 53:]
        for start in (state, loaded, moved, state):  # `state` twice: it is not modified
            more = [o for o in outs]
            s = start
            for chunk in rest.split(3, -1):
                y, s = sm.step(chunk, s)
                more.append(y)
            torch.testing.assert_close(torch.cat(more, -1), full, rtol=1e-5, atol=1e-6)
        # every row restarts on a held state: the outputs equal a fresh stream's
        reset = sm.reset_rows(state, [0, 1])
        assert HELD not in reset
        y0, _ = sm.step(rest, reset)
        torch.testing.assert_close(y0, model(rest)[..., : y0.shape[-1]])
        assert y0.shape[-1] == due(model, rest, rest.shape[-1], model(rest))


def test_a_chunk_that_does_not_continue_the_held_input_is_refused() -> None:
    sm = StreamingModule(plain())
    x = torch.randn(1, 2, 60)
    with torch.no_grad():
        state = sm.init_state(example=x[..., :1])
        for chunk in x.split(1, -1):
            _, state = sm.step(chunk, state)
        assert HELD in state
        with pytest.raises(PaddingError, match=r"holds input of shape \(1, 2, \d+\)"):
            sm.step(torch.randn(1, 3, 1), state)
        with pytest.raises(PaddingError, match="float64"):
            sm.step(torch.randn(1, 2, 1, dtype=torch.float64), state)


def test_export_from_a_held_state_runs_the_held_input_first() -> None:
    model = plain()
    sm = StreamingModule(model)
    x = torch.randn(1, 2, 100)
    with torch.no_grad():
        full = model(x)
        state = sm.init_state(example=x[..., :1])
        outs = []
        for chunk in x[..., :47].split(1, -1):  # 47 = 40 + 7 held
            y, state = sm.step(chunk, state)
            outs.append(y)
        assert HELD in state
        step = sm.step_module(x[..., :20], state)
        assert HELD not in step.state_names
        settled = sm._settled(state)
        y, *_ = step(x[..., 47:67], *[settled[k] for k in step.state_names])
        n0 = sum(o.shape[-1] for o in outs)
        torch.testing.assert_close(y, full[..., n0 : n0 + y.shape[-1]])


def test_a_lookahead_step_that_commits_nothing_only_keeps_its_chunk() -> None:
    """A DAC-shaped encoder (symmetric pads, strides 2 and 4) streamed with lookahead at one
    sample a step: exact, and the model runs only on the steps that commit an output (the
    steps between only keep their chunk, even where the committed history would move)."""
    torch.manual_seed(1)

    class Unit(nn.Module):
        def __init__(self, c: int, d: int) -> None:
            super().__init__()
            self.conv = nn.Conv1d(c, c, 3, dilation=d, padding=d)

        def forward(self, x: Tensor) -> Tensor:
            return x + self.conv(torch.tanh(x))

    layers: list[nn.Module] = [nn.Conv1d(1, 4, 7, padding=3)]
    for s in (2, 4):
        layers += [Unit(4, 1), Unit(4, 3), nn.Conv1d(4, 4, 2 * s, stride=s, padding=s // 2)]
    model = nn.Sequential(*layers).double().eval()
    sm = StreamingModule(model, lookahead="auto")
    x = torch.randn(2, 1, 160, dtype=torch.float64)
    runs = []
    handle = model.register_forward_pre_hook(lambda m, a: runs.append(a[0].shape[-1]))
    with torch.no_grad():
        full = model(x)
        state = sm.init_state(example=x[..., :1])
        outs = []
        committing = 0
        for i, chunk in enumerate(x.split(1, -1)):
            if i == 1:  # after the first step's self-check
                del runs[:]
            y, state = sm.step(chunk, state)
            outs.append(y)
            committing += i >= 1 and y.shape[-1] > 0
        steady = len(runs)
        outs.append(sm.flush(state))
    handle.remove()
    torch.testing.assert_close(torch.cat(outs, -1), full, rtol=1e-10, atol=1e-12)
    assert all(o.shape[:2] == (2, 4) for o in outs)
    # one output per 8 samples: a run per output, and one more (the first step that
    # commits nothing runs once, to learn the empty output it returns)
    assert 15 <= committing <= steady <= committing + 1, (steady, committing)


def test_init_state_with_a_short_example_measures_when_outputs_are_due() -> None:
    """Up front: the first short chunks of the stream then run no measurement."""
    model = plain()
    sm = StreamingModule(model)
    x = torch.randn(1, 2, 80)
    runs: list[int] = []
    with torch.no_grad():
        state = sm.init_state(example=x[..., :1])
        _, state = sm.step(x[..., :40], state)  # the first step checks the stream
        handle = model.register_forward_pre_hook(lambda m, a: runs.append(a[0].shape[-1]))
        for chunk in x[..., 40:59].split(1, -1):
            _, state = sm.step(chunk, state)
        handle.remove()
    assert HELD in state
    # the run that completes the one output due in these samples, and the one that finds
    # what a step completing nothing returns; measuring here would take about twenty
    assert len(runs) <= 2, runs


@settings(max_examples=15, deadline=None)
@given(
    convs=st.lists(
        st.tuples(
            st.integers(1, 6),  # kernel
            st.integers(2, 4),  # stride (a stride-1 stack holds nothing)
            st.integers(1, 2),  # dilation
            st.sampled_from(["causal", "causal_block"]),
        ),
        min_size=1,
        max_size=3,
    ),
    up=st.sampled_from([0, 2, 3]),
    seed=st.integers(0, 1000),
)
def test_any_causal_strided_stack_streams_exactly_with_its_outputs_when_due(
    convs: list[tuple[int, int, int, str]], up: int, seed: int
) -> None:
    """Random causal stacks (strides 2-4, a transposed-conv upsampler or none) at random
    chunk sizes: each step's cumulative output count and values equal the references."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    c = 2
    for k, s, d, mode in convs:
        if mode == "causal_block" and (s > k or d > 1):
            mode = "causal"  # a block pad needs the stride within the kernel, undilated
        layers += [pn.Conv1d(c, 3, k, stride=s, dilation=d, padding=mode), nn.Tanh()]
        c = 3
    if up:
        layers.append(pn.ConvTranspose1d(c, 2, 2 * up, stride=up, padding="causal"))
    model = nn.Sequential(*layers).double().eval()
    sm = StreamingModule(model)
    x = torch.randn(2, 2, 150, dtype=torch.float64)
    rng = random.Random(seed)
    sizes: list[int] = []
    while sum(sizes) < x.shape[-1]:
        sizes.append(min(rng.choice([1, 1, 1, 2, 3, 5, 8]), x.shape[-1] - sum(sizes)))
    with torch.no_grad():
        full = model(x)
        state = sm.init_state(example=x[..., :1])
        outs, n = [], 0
        for chunk in x.split(sizes, -1):
            y, state = sm.step(chunk, state)
            outs.append(y)
            n += chunk.shape[-1]
            assert sum(o.shape[-1] for o in outs) == due(model, x, n, full), (sizes, n)
    got = torch.cat(outs, -1)
    torch.testing.assert_close(got, full[..., : got.shape[-1]], rtol=1e-9, atol=1e-10)


def test_branches_from_one_held_state_and_a_reused_chunk_buffer_stream_exactly() -> None:
    """The step from the latest held state writes its chunk into the held buffer in place.
    A second branch from an earlier state must not see the first branch's samples, the
    first must go on after the second ran, and a caller who writes every chunk into one
    tensor must get what fresh chunks give."""
    model = plain()
    sm = StreamingModule(model)
    x, y = torch.randn(2, 2, 140), torch.randn(2, 2, 140)
    y[..., :41] = x[..., :41]  # the branches share their first 41 samples
    with torch.no_grad():
        full_x, full_y = model(x), model(y)
        state = sm.init_state(example=x[..., :1])
        outs = []
        for i in range(41):
            out, state = sm.step(x[..., i : i + 1], state)
            outs.append(out)
        assert HELD in state  # (41 samples: 1 past an output, held)
        branches = {name: {"state": state, "outs": list(outs), "n": 41} for name in "xy"}
        srcs = {"x": x, "y": y}

        def advance(name: str, samples: int) -> None:
            br = branches[name]
            for _ in range(samples):
                n = br["n"]
                out, br["state"] = sm.step(srcs[name][..., n : n + 1], br["state"])
                br["outs"].append(out)
                br["n"] = n + 1

        for _ in range(30):  # one sample of each in turn
            advance("x", 1)
            advance("y", 1)
        advance("x", 20)  # x alone: in place, past what y's state holds
        advance("y", 20)
        advance("x", 140 - branches["x"]["n"])
        advance("y", 140 - branches["y"]["n"])
        for name, full in (("x", full_x), ("y", full_y)):
            got = torch.cat(branches[name]["outs"], -1)
            torch.testing.assert_close(got, full, rtol=1e-5, atol=1e-6)
        # one chunk tensor, rewritten before every step
        buf = torch.empty(2, 2, 1)
        state, outs = sm.init_state(example=buf), []
        for i in range(140):
            buf.copy_(x[..., i : i + 1])
            out, state = sm.step(buf, state)
            outs.append(out)
        torch.testing.assert_close(torch.cat(outs, -1), full_x, rtol=1e-5, atol=1e-6)


def test_a_held_state_with_a_count_that_does_not_fit_is_refused() -> None:
    """A count past the buffer, negative or not a scalar is refused naming it; a state
    saved before the count existed (the held samples alone) goes on exactly."""
    model = plain()
    sm = StreamingModule(model)
    x = torch.randn(1, 2, 60)
    with torch.no_grad():
        state = sm.init_state(example=x[..., :1])
        outs = []
        for chunk in x[..., :30].split(1, -1):
            out, state = sm.step(chunk, state)
            outs.append(out)
        assert HELD in state
        for bad in (torch.tensor(10_000), torch.tensor(-1), torch.tensor([1, 2])):
            with pytest.raises(PaddingError, match="held_count"):
                sm.step(x[..., :1], {**state, "<stream>.held_count": bad})
        n = int(state["<stream>.held_count"])
        old = {k: v for k, v in state.items() if k != "<stream>.held_count"}
        old[HELD] = state[HELD][..., :n].clone()
        out, _ = sm.step(x[..., 30:], old)
        torch.testing.assert_close(torch.cat([*outs, out], -1), model(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64]
)
@pytest.mark.parametrize("shape,dim", [((1, 1, 9), 2), ((2, 3, 9), 2), ((1, 9, 1), 1)])
def test_the_held_buffer_holds_what_a_cat_of_its_chunks_holds(
    dtype: torch.dtype, shape: tuple[int, ...], dim: int
) -> None:
    """``HeldBuffer.write_one`` (a 1-sample chunk's value, where the buffer holds one
    element per sample) and ``write`` (numpy where the dtype has one, torch otherwise), as
    the step tries them, against ``torch.cat``; chunks they cannot take are left to the
    full path (None)."""
    from padkit.streaming._hold import HeldBuffer

    src = (torch.randn(*shape) * 100).to(dtype)
    first = src.narrow(dim, 0, 2)
    buf = torch.zeros(shape, dtype=dtype)
    buf.narrow(dim, 0, 2).copy_(first)
    memo = HeldBuffer(buf, 2, dim, None)
    # one element per sample in a dtype numpy has: the value store takes 1-sample chunks
    by_value = buf.numel() == shape[dim] and dtype != torch.bfloat16
    pos = 2
    for k in (1, 3, 1, 1):
        chunk = src.narrow(dim, pos, k)
        count = memo.write_one(chunk)
        assert (count is not None) == (k == 1 and by_value)
        if count is None:
            count = memo.write(chunk)
        assert count is not None
        pos += k
        assert memo.count == pos and int(memo.count_t) == pos
        assert torch.equal(buf.narrow(dim, 0, pos), src.narrow(dim, 0, pos))
    other = torch.float64 if dtype != torch.float64 else torch.float32
    wide = list(shape)
    wide[0] += 1
    for bad in (
        src.narrow(dim, 0, 2),  # past the room left (9 - 8)
        src.narrow(dim, 0, 1).to(other),
        torch.zeros(wide, dtype=dtype).narrow(dim, 0, 1),
    ):
        assert memo.write_one(bad) is None and memo.write(bad) is None
    if dtype.is_floating_point:
        grad = src.narrow(dim, 0, 1).clone().requires_grad_()
        assert memo.write_one(grad) is None and memo.write(grad) is None
    assert memo.count == 8  # nothing written by a refused chunk
