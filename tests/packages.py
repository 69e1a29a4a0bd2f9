"""Importing a third-party model module whose package ``__init__`` imports what is not
installed (encodec's imports torchaudio, dac's audiotools and argbind, moshi's its server
extras): the module is imported under a bare parent package instead, and a test skips
where the package is not installed at all."""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
import warnings
from typing import Any

import pytest


def load(package: str, module: str) -> Any:
    """``module`` from ``package``, skipping the test when the package is not installed; the
    package's ``__init__`` is bypassed when it imports something not installed."""
    if importlib.util.find_spec(package) is None:
        pytest.skip(f"{package} is not installed")
    try:
        importlib.import_module(package)
    except ImportError:
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations is not None
        bare = types.ModuleType(package)
        bare.__path__ = list(spec.submodule_search_locations)
        bare.__spec__ = spec
        sys.modules[package] = bare
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return importlib.import_module(module)
