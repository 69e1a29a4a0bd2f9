"""A streamed run against the full-sequence run (:meth:`StreamingModule.verify`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ..spec import PaddingError
from ._state import _STARTUP_KEY

if TYPE_CHECKING:
    from ._runner import StreamingModule


def verify(
    stream: StreamingModule,
    x: Tensor,
    chunk_sizes: Sequence[int],
    *,
    rtol: float,
    atol: float,
) -> float:
    """See :meth:`StreamingModule.verify`."""
    stream._check_chunk(x, "verify(): x")
    dim = stream.axis if stream.axis >= 0 else x.dim() + stream.axis
    sizes = [int(c) for c in chunk_sizes]
    if any(c < 0 for c in sizes) or sum(sizes) != x.shape[dim]:
        raise PaddingError(
            f"verify(): chunk_sizes must be non-negative and sum to the time length "
            f"{x.shape[dim]}, got {list(chunk_sizes)!r}"
        )
    with torch.no_grad():
        full = stream.model(x)
        state = stream.init_state(example=x.narrow(dim, 0, 1))
        outs = []
        for chunk in torch.split(x, sizes, dim=dim):
            y, state = stream.step(chunk, state)
            outs.append(y)
        if stream._lookahead_mode or _STARTUP_KEY in state:
            outs.append(stream.flush(state))
    if not isinstance(full, Tensor):
        raise TypeError(f"verify(): the model must return a Tensor, got {type(full).__name__}")
    # the output's time axis: the stream's (measured where the model returns another
    # layout, (N, T, C) for an (N, C, T) input), or the one axis the chunks' outputs add up on
    nd = full.dim()
    odim = stream._out_dim(nd)
    fits = [
        a
        for a in range(nd)
        if all(
            isinstance(p, Tensor)
            and p.dim() == nd
            and all(p.shape[b] == full.shape[b] for b in range(nd) if b != a)
            for p in outs
        )
    ]
    if fits and odim not in fits:
        odim = fits[0]
    try:
        streamed = torch.cat(outs, dim=odim)
    except RuntimeError as err:
        raise PaddingError(f"verify(): the streamed chunks do not concatenate: {err}") from None
    if streamed.shape != full.shape:
        raise PaddingError(
            f"verify(): streaming gave shape {tuple(streamed.shape)}, the full run "
            f"{tuple(full.shape)} (do added branches emit at different times?)"
        )
    diff = (streamed - full).abs()
    worst = float(diff.max()) if diff.numel() else 0.0
    bad = diff > atol + rtol * full.abs()
    if bool(bad.any()):
        first = int(bad.nonzero()[0][odim])
        raise PaddingError(
            f"verify(): streaming differs from the full run by up to {worst:.3g}, first at "
            f"output step {first}"
        )
    return worst
