"""Functional conv, transposed conv, pooling and pad with every padkit padding form.

Each function takes the arguments of its ``torch.nn.functional`` namesake, and
``padding=`` accepts every form :class:`padkit.Padding` parses: per-side pairs,
``"same"`` at any stride (TF/XLA), ``"same_lower"``, ``"same_static"``, ``"causal"``,
``"full"`` and per-axis mixes. Results equal an explicit ``F.pad`` followed by the
unpadded op, to float rounding.
"""

from __future__ import annotations

import torch

from ..op import PADDING_MODES as PADDING_MODES
from ._common import (
    _PAD_MODE_CANON as _PAD_MODE_CANON,
    PAD_MODES as PAD_MODES,
    Pairs as Pairs,
    _k_eff as _k_eff,
    _pad_mode as _pad_mode,
    _parse as _parse,
    _torch_pad as _torch_pad,
    resolve as resolve,
)
from ._conv import (
    _CONV as _CONV,
    _conv as _conv,
    _needs_grad as _needs_grad,
    conv1d as conv1d,
    conv2d as conv2d,
    conv3d as conv3d,
    mode_pads as mode_pads,
    pad_steps as pad_steps,
    run_conv_plan as run_conv_plan,
    run_conv_torch as run_conv_torch,
    torch_conv_plan as torch_conv_plan,
)
from ._pad import (
    pad as pad,
)
from ._pool import (
    _avg_pool as _avg_pool,
    _explicit_pads as _explicit_pads,
    _lp_pool as _lp_pool,
    _max_pool as _max_pool,
    _pad_then_pool as _pad_then_pool,
    _pool_setup as _pool_setup,
    avg_pool1d as avg_pool1d,
    avg_pool2d as avg_pool2d,
    avg_pool3d as avg_pool3d,
    channels_last as channels_last,
    default_count_include_pad as default_count_include_pad,
    explicit_avg_traced as explicit_avg_traced,
    explicit_max_pool as explicit_max_pool,
    lp_pool1d as lp_pool1d,
    lp_pool2d as lp_pool2d,
    lp_pool3d as lp_pool3d,
    max_pool1d as max_pool1d,
    max_pool2d as max_pool2d,
    max_pool3d as max_pool3d,
    mean_kernel as mean_kernel,
    padded_avg_pool as padded_avg_pool,
    run_pool_plan as run_pool_plan,
)
from ._transpose import (
    _conv_transpose as _conv_transpose,
    _conv_transpose_crops as _conv_transpose_crops,
    _output_padding_for as _output_padding_for,
    _timed_shift as _timed_shift,
    conv_transpose1d as conv_transpose1d,
    conv_transpose2d as conv_transpose2d,
    conv_transpose3d as conv_transpose3d,
    layout_timing_on as layout_timing_on,
    run_transpose as run_transpose,
    shifted_layout as shifted_layout,
    transpose_args as transpose_args,
    transpose_crops as transpose_crops,
    transpose_layout as transpose_layout,
)

__all__ = [
    "PADDING_MODES",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "conv1d",
    "conv2d",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "lp_pool1d",
    "lp_pool2d",
    "lp_pool3d",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "pad",
]

# torch.fx: a traced model records each public function as one call (its padding is resolved
# when the graph runs, from the actual input size), instead of tracing into padkit's Python.
# Wrapped here, where models look them up (padkit.functional.conv2d), and named as this
# package's.
for _name in __all__:
    if callable(globals()[_name]):
        globals()[_name].__module__ = __name__
        torch.fx.wrap(_name)
del _name
