"""Collection order for the whole suite.

TensorFlow, once imported, makes ``torch.export`` (and so torch.onnx's dynamo exporter)
crash the process with a segmentation fault (TensorFlow 2.21 with torch 2.14, both CPU
builds). The modules that import TensorFlow therefore run after every other test,
doctests included.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

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
