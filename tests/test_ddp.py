"""padkit layers inside DistributedDataParallel and FSDP2 (2 CPU processes, gloo backend).

After one forward/backward step the all-reduced (averaged) gradients must equal the
single-process gradient of the same mean loss over the concatenated batch, and a few
optimiser steps of data-parallel training (DDP, and FSDP2's ``fully_shard`` with its
sharded parameters) must end with the parameters of single-process training.
"""

from __future__ import annotations

import datetime
import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

import padkit.nn as pn

torch.set_num_threads(1)

WORLD_SIZE = 2
PER_RANK = 2
TIMEOUT_S = 90.0

pytestmark = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="torch.distributed/gloo"
)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        pn.Conv2d(2, 4, 3, stride=2, padding="same", padding_mode="reflect"),
        nn.ReLU(),
        pn.MaxPool2d(3, 2, padding="same_lower"),
        pn.Conv2d(4, 3, (2, 3), padding=((1, 0), "causal")),
        pn.AvgPool2d(2, padding=((0, 1), (1, 0)), count_include_pad=False),
    ).double()


def full_batch() -> torch.Tensor:
    gen = torch.Generator().manual_seed(1)
    return torch.randn(WORLD_SIZE * PER_RANK, 2, 9, 8, generator=gen, dtype=torch.float64)


def loss_of(out: torch.Tensor) -> torch.Tensor:
    return out.pow(2).mean()


def _worker(rank: int, port: int, out_dir: str) -> None:
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(
        "gloo",
        rank=rank,
        world_size=WORLD_SIZE,
        timeout=datetime.timedelta(seconds=60),
    )
    try:
        model = nn.parallel.DistributedDataParallel(build_model())
        x = full_batch()[rank * PER_RANK : (rank + 1) * PER_RANK]
        loss_of(model(x)).backward()
        grads = {name: p.grad.detach().clone() for name, p in model.module.named_parameters()}
        torch.save(grads, Path(out_dir) / f"grads{rank}.pt")
    finally:
        dist.destroy_process_group()


def _run(worker: Any, tmp_path: Path, what: str) -> None:
    """Run ``worker`` on WORLD_SIZE processes; fail (and stop them) past TIMEOUT_S."""
    ctx = mp.spawn(worker, args=(free_port(), str(tmp_path)), nprocs=WORLD_SIZE, join=False)
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not ctx.join(timeout=1.0):
            if time.monotonic() > deadline:
                pytest.fail(f"{what} workers did not finish within {TIMEOUT_S} s")
    finally:
        for proc in ctx.processes:
            if proc.is_alive():
                proc.terminate()
                proc.join(5)


def test_ddp_gradients_equal_single_process(tmp_path: Path) -> None:
    _run(_worker, tmp_path, "DDP")

    model = build_model()
    loss_of(model(full_batch())).backward()
    want = {name: p.grad for name, p in model.named_parameters()}
    assert want and all(g is not None for g in want.values())
    for rank in range(WORLD_SIZE):
        got = torch.load(tmp_path / f"grads{rank}.pt")
        assert list(got) == list(want)
        for name, grad in got.items():
            torch.testing.assert_close(grad, want[name], rtol=1e-10, atol=1e-12, msg=name)
    # the ranks really saw different data: their local gradients differ from each other
    local = build_model()
    loss_of(local(full_batch()[:PER_RANK])).backward()
    first = next(iter(local.parameters())).grad
    assert first is not None
    assert not torch.allclose(first, next(iter(want.values())))


STEPS = 3


def _init(rank: int, port: int) -> None:
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(
        "gloo", rank=rank, world_size=WORLD_SIZE, timeout=datetime.timedelta(seconds=60)
    )


def _train(model: nn.Module, batches: list[torch.Tensor]) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x in batches:
        opt.zero_grad()
        loss_of(model(x)).backward()
        opt.step()


def step_batches() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(2)
    return [
        torch.randn(WORLD_SIZE * PER_RANK, 2, 9 + i, 8 + 2 * i, generator=gen, dtype=torch.float64)
        for i in range(STEPS)  # sizes of both parities: different 'same' pads per step
    ]


def _mine(batches: list[torch.Tensor], rank: int) -> list[torch.Tensor]:
    return [b[rank * PER_RANK : (rank + 1) * PER_RANK] for b in batches]


def _ddp_train(
    rank: int, port: int, out_dir: str, model: nn.Module, batches: list[torch.Tensor]
) -> None:
    """DDP training of ``model`` on this rank's share of ``batches``; saves the parameters."""
    _init(rank, port)
    try:
        ddp = nn.parallel.DistributedDataParallel(model)
        _train(ddp, _mine(batches, rank))
        torch.save(ddp.module.state_dict(), Path(out_dir) / f"params{rank}.pt")
    finally:
        dist.destroy_process_group()


def _fsdp2_train(
    rank: int, port: int, out_dir: str, build: Any, batches: list[torch.Tensor]
) -> None:
    """FSDP2 training (each layer with parameters and the model sharded) of ``build()``."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    _init(rank, port)
    try:
        mesh = init_device_mesh("cpu", (WORLD_SIZE,))
        model = build()
        for layer in model.children():
            if any(True for _ in layer.parameters()):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        # the parameters are sharded: each rank holds part of every weight
        assert all(type(p).__name__ == "DTensor" for p in model.parameters())
        _train(model, _mine(batches, rank))
        full = {k: v.full_tensor() for k, v in model.state_dict().items()}
        torch.save(full, Path(out_dir) / f"params{rank}.pt")
    finally:
        dist.destroy_process_group()


def _ddp_train_worker(rank: int, port: int, out_dir: str) -> None:
    _ddp_train(rank, port, out_dir, build_model(), step_batches())


def _fsdp2_train_worker(rank: int, port: int, out_dir: str) -> None:
    _fsdp2_train(rank, port, out_dir, build_model, step_batches())


@pytest.mark.parametrize("worker", [_ddp_train_worker, _fsdp2_train_worker], ids=["ddp", "fsdp2"])
def test_data_parallel_training_equals_single_process(tmp_path: Path, worker: Any) -> None:
    _run(worker, tmp_path, worker.__name__)
    model = build_model()
    start = {k: v.clone() for k, v in model.state_dict().items()}
    _train(model, step_batches())
    want = model.state_dict()
    for rank in range(WORLD_SIZE):
        got = torch.load(tmp_path / f"params{rank}.pt")
        assert list(got) == list(want)
        for name, value in got.items():
            torch.testing.assert_close(value, want[name], rtol=1e-10, atol=1e-12, msg=name)
    # training moved every weight
    assert all(not torch.equal(want[k], start[k]) for k in want)


# ----------------------------------------------------------------------------- native backend
# The same training in float32 with padkit's oneDNN backend forced onto every eligible op:
# FSDP2 all-gathers each sharded weight into the same storage under a preserved version
# counter, and the backend must compute with the gathered values of this step.


def build_model32() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        pn.Conv2d(2, 8, 3, stride=2, padding="same"),
        nn.ReLU(),
        pn.Conv2d(8, 8, 3, stride=2, padding=((0, 1), (1, 0)), groups=8),
        pn.MaxPool2d(3, 2, padding="same_lower"),
        pn.ConvTranspose2d(8, 3, 3, stride=2, padding=((0, 1), (1, 0))),
    )


def step_batches32() -> list[torch.Tensor]:
    return [b.float() for b in step_batches()]


def _force_backend() -> bool:
    import padkit.native as native
    from padkit.native import _dispatch

    if not native.enable(required=False):
        return False
    _dispatch.HOOK.force = True
    return True


def _ddp_native_worker(rank: int, port: int, out_dir: str) -> None:
    assert _force_backend()
    _ddp_train(rank, port, out_dir, build_model32(), step_batches32())


def _fsdp2_native_worker(rank: int, port: int, out_dir: str) -> None:
    assert _force_backend()
    _fsdp2_train(rank, port, out_dir, build_model32, step_batches32())


def _native_training_matches(worker: Any, tmp_path: Path) -> None:
    import padkit.native as native

    if not native.available():
        pytest.skip(f"the native backend does not load here: {native.info()['error']}")
    _run(worker, tmp_path, worker.__name__)
    model = build_model32()
    start = {k: v.clone() for k, v in model.state_dict().items()}
    _train(model, step_batches32())  # single process, torch's own kernels as found
    want = model.state_dict()
    for rank in range(WORLD_SIZE):
        got = torch.load(tmp_path / f"params{rank}.pt")
        assert list(got) == list(want)
        for name, value in got.items():
            torch.testing.assert_close(value, want[name], rtol=1e-4, atol=2e-5, msg=name)
    assert all(not torch.equal(want[k], start[k]) for k in want)


@pytest.mark.parametrize("worker", [_ddp_native_worker, _fsdp2_native_worker], ids=["ddp", "fsdp2"])
def test_native_backend_data_parallel_training(tmp_path: Path, worker: Any) -> None:
    _native_training_matches(worker, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("run", range(20))
def test_native_backend_fsdp2_repeated(tmp_path: Path, run: int) -> None:
    """Whether a stale weight showed depended on the allocator handing back an address."""
    _native_training_matches(_fsdp2_native_worker, tmp_path)
