"""Shared pytest set-up: names the doctests in padkit/ may use without importing them."""

from __future__ import annotations

from typing import Any

import pytest
import torch


@pytest.fixture(autouse=True)
def _doctest_names(doctest_namespace: dict[str, Any]) -> None:
    doctest_namespace["torch"] = torch
