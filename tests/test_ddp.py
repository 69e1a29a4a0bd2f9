"""A padkit layer inside DistributedDataParallel (2 CPU processes, gloo backend).

After one forward/backward step the all-reduced (averaged) gradients must equal the
single-process gradient of the same mean loss over the concatenated batch.
"""

from __future__ import annotations

import datetime
import os
import socket
import time
from pathlib import Path

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


def test_ddp_gradients_equal_single_process(tmp_path: Path) -> None:
    ctx = mp.spawn(_worker, args=(free_port(), str(tmp_path)), nprocs=WORLD_SIZE, join=False)
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not ctx.join(timeout=1.0):
            if time.monotonic() > deadline:
                pytest.fail(f"DDP workers did not finish within {TIMEOUT_S} s")
    finally:
        for proc in ctx.processes:
            if proc.is_alive():
                proc.terminate()
                proc.join(5)

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
