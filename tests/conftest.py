"""Collection order for the whole suite.

TensorFlow, once imported, makes ``torch.export`` (and so torch.onnx's dynamo exporter)
crash the process with a segmentation fault (TensorFlow 2.21 with torch 2.14, both CPU
builds). The modules that import TensorFlow therefore run after every other test,
doctests included.

torch.compile's on-disk inductor cache does not key its compiled code on
``ATEN_CPU_CAPABILITY`` (torch 2.14.1): a run capped at AVX2 on an AVX-512 machine loads
the code an uncapped run built, or the reverse, and computes garbage (a plain torch
Conv2d-ReLU-Conv2d compiled: max difference to eager 0.9, or a crash). A capped run
therefore compiles into a cache of its own, unless ``TORCHINDUCTOR_CACHE_DIR`` is set.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest

_capability = os.environ.get("ATEN_CPU_CAPABILITY", "default").lower()
if _capability != "default" and "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    _user = os.environ.get("USER") or str(os.getuid())
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(
        tempfile.gettempdir(), f"torchinductor_{_user}_{_capability}"
    )

TENSORFLOW_MODULES = ("test_keras.py", "test_onnx_tf2onnx.py")


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    items.sort(key=lambda item: item.path.name in TENSORFLOW_MODULES)


@pytest.fixture
def torch_plans() -> Iterator[None]:
    """padkit's pure-torch plans, for a test about what those plans run (the optional
    oneDNN backend, on by default where its extra is installed, is detached meanwhile)."""
    from padkit.native import _dispatch

    before = _dispatch.active
    _dispatch.active = None
    try:
        yield
    finally:
        _dispatch.active = before
