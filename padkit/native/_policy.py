"""Where the backend runs: the ops where it measured faster than padkit's pure-torch plan
(docs/performance.md has the figures behind each rule).

* Convs whose torch plan copies the input (``residual_pad``, ``explicit``: dense stride-2
  convs, stems), computes surplus outputs (``crop``) or extra taps (``zero_extend``:
  depthwise stride-2 convs), in both layouts.
* 1-D and dilated convs (causal TCN convs) only when training: in inference, with
  per-side pads such as ``(8, 0)`` oneDNN leaves its direct kernel, the 1-D layout costs
  a reorder in and out, and ``F.pad`` plus torch's conv measured as fast or faster; in
  training the backend's backward passes win (1.13-1.41 against 1.56-1.91).
* Transposed convs with asymmetric crops (torch computes the full output and padkit
  slices it).
* Max and average pools with asymmetric pads: oneDNN's pooling kernels beat torch's (by
  far on NCHW max pools, where torch has no vectorised kernel).
* Never for symmetric pads: the torch op is what padkit promises there.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

Pairs = tuple[tuple[int, int], ...]


def conv(
    strategy: str,
    x: Tensor,
    w: Tensor,
    groups: int,
    pads: Pairs,
    d: Sequence[int],
    training: bool = False,
) -> bool:
    if x.dim() == 3 or any(dd > 1 for dd in d):
        return training and strategy in ("residual_pad", "explicit", "crop")
    return strategy in ("residual_pad", "explicit", "crop", "zero_extend")


def conv_transpose(x: Tensor, w: Tensor, groups: int, crops: Pairs) -> bool:
    return any(lo != hi for lo, hi in crops)


def pool(
    kind: str, strategy: str, x: Tensor, k: Sequence[int], s: Sequence[int], pads: Pairs
) -> bool:
    return strategy != "native"
