"""The autograd node types behind a tensor: which ops its backward will run."""

from __future__ import annotations

from torch import Tensor


def backward_ops(t: Tensor) -> set[str]:
    """Class names of every autograd node reachable from ``t.grad_fn``."""
    seen: set[str] = set()
    todo = [t.grad_fn]
    while todo:
        fn = todo.pop()
        if fn is not None and type(fn).__name__ not in seen:
            seen.add(type(fn).__name__)
            todo.extend(f for f, _ in fn.next_functions)
    return seen
