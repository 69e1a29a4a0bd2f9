"""The native backend after ``fork``: DataLoader workers, multiprocessing pools, prefork.

A fresh interpreter warms the backend up at 2 threads (its primitives are built for that
OpenMP team), then forks: DataLoader workers (torch runs them at 1 thread), a
``multiprocessing`` pool whose workers drop to 1 thread, and a bare ``os.fork`` child.
Each child runs the same layers and must return the parent's numbers; a hang is a
failure (the script runs under a timeout). A child that keeps the parent's thread count
is not tested: GNU OpenMP's thread team does not survive ``fork``, and torch's own
kernels hang there too.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")),
    reason="fork and the oneDNN wheels of padkit[native]: Linux x86-64 only",
)

SCRIPT = textwrap.dedent(
    """
    import multiprocessing as mp
    import os
    import sys

    import torch

    import padkit.native as native
    import padkit.nn as pn
    from padkit.native import _dispatch

    if not native.enable(required=False):
        print("SKIP", native.info()["error"])
        sys.exit(0)
    _dispatch.HOOK.force = sys.argv[1] == "forced"
    torch.set_num_threads(2)
    torch.manual_seed(0)
    conv = pn.Conv2d(16, 32, 3, stride=2, padding="same").eval()
    dw = pn.Conv2d(32, 32, 3, stride=2, padding="same", groups=32).eval()
    pool = pn.MaxPool2d(3, 2, padding="same").eval()
    x = torch.randn(2, 16, 64, 64)


    def run() -> torch.Tensor:
        with torch.no_grad():
            return pool(dw(conv(x)))


    want = run()  # the backend's primitives now exist for 2 threads


    class Data(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int) -> torch.Tensor:
            return run()


    def one_thread() -> None:
        torch.set_num_threads(1)


    def in_pool(_: int) -> torch.Tensor:
        return run()


    ctx = mp.get_context("fork")
    loader = torch.utils.data.DataLoader(
        Data(), batch_size=None, num_workers=2, multiprocessing_context=ctx
    )
    got = list(loader)
    with ctx.Pool(2, initializer=one_thread) as workers:
        got += workers.map(in_pool, range(2))
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        torch.set_num_threads(1)
        ok = torch.allclose(run(), want, atol=1e-5, rtol=1e-5)
        os.write(w, b"1" if ok else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    got_fork = os.read(r, 1)
    assert got_fork == b"1", "bare fork child"
    assert len(got) == 6
    for i, y in enumerate(got):
        torch.testing.assert_close(y, want, atol=1e-5, rtol=1e-5, msg=f"child {i}")
    # the parent goes on with its own primitives, at its own thread count
    torch.testing.assert_close(run(), want, atol=0, rtol=0)
    print("OK")
    """
)


@pytest.mark.parametrize("mode", ["forced", "planner"])
def test_forked_children_run_the_backend(tmp_path: Path, mode: str) -> None:
    script = tmp_path / "fork_children.py"
    script.write_text(SCRIPT)
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    try:
        done = subprocess.run(
            [sys.executable, str(script), mode],
            capture_output=True,
            text=True,
            timeout=90,
            env=env,
        )
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"a forked child hung (no result within {err.timeout} s)")
    out = done.stdout + done.stderr
    if done.stdout.startswith("SKIP"):
        pytest.skip(done.stdout.strip())
    assert done.returncode == 0 and "OK" in done.stdout, out
