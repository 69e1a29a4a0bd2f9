"""Chunkings a lookahead stream is checked with, shared by the streaming tests: one sample
at a time, a prime, the hop (each with its remainder), and a seeded random mix including
empty chunks; and the tolerance of a stream against the full run per dtype."""

from __future__ import annotations

import random

import torch


def plans(n: int, hop: int, seed: int) -> dict[str, list[int]]:
    rng = random.Random(seed)
    mix: list[int] = []
    while sum(mix) < n:
        mix.append(min(rng.choice([0, 1, 2, 3, 5, 8, 13]), n - sum(mix)))

    def even(k: int) -> list[int]:
        return [k] * (n // k) + ([n % k] if n % k else [])

    return {"1": [1] * n, "7": even(7), "hop": even(hop), "mix": mix}


def tol(dtype: torch.dtype) -> dict[str, float]:
    return dict(rtol=1e-9, atol=1e-10) if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-5)
