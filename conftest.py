"""Shared pytest set-up: names the doctests in padkit/ may use without importing them.

The optional oneDNN backend is on wherever its extra is installed (as for a user); the
suite runs it in its deterministic mode, so which side runs an op never depends on timing
(tests/test_native.py turns measuring on where it tests it).
"""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("PADKIT_NATIVE_TUNE", "0")

import pytest
import torch


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace: dict[str, Any]) -> None:
    doctest_namespace["torch"] = torch
