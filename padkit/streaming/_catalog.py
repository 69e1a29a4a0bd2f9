"""Which modules a stream passes through (they act on each time step on its own), which it
refuses with the reason (they mix time non-causally, keep a hidden state padkit does not
thread, or resample time), and the batch norms it checks at each step.

These lists are a fast path only. Elementwise modules (:data:`_ELEMENTWISE`) act on each
element whatever the layout, so they pass without a probe. Every other leaf module a model
calls (the layout-dependent ones listed in :data:`_MEASURED`, the ones declared with
``allow=``, and every module no list names) is measured before the first step: its input at
one time step is perturbed and the outputs that change are recorded
(``padkit.streaming._check``). A module whose output ``t`` depends on its input ``t`` only
passes; any other is refused with the dependency measured."""

from __future__ import annotations

from torch import nn

# Modules that act on each element on its own, whatever the layout: passed without a probe.
_ELEMENTWISE: tuple[type[nn.Module], ...] = (
    nn.Identity,
    nn.ReLU,
    nn.ReLU6,
    nn.LeakyReLU,
    nn.RReLU,
    nn.ELU,
    nn.SELU,
    nn.CELU,
    nn.GELU,
    nn.SiLU,
    nn.Mish,
    nn.Sigmoid,
    nn.Tanh,
    nn.Hardtanh,
    nn.Hardswish,
    nn.Hardsigmoid,
    nn.Hardshrink,
    nn.Softshrink,
    nn.Softplus,
    nn.Softsign,
    nn.Tanhshrink,
    nn.Threshold,
    nn.LogSigmoid,
    nn.Dropout,
    nn.Dropout1d,
    nn.Dropout2d,
    nn.Dropout3d,
    nn.AlphaDropout,
    nn.FeatureAlphaDropout,
)

# Modules that act on each time step on its own when applied to the channels (as streaming
# models use them), but on time when applied along it (a LayerNorm over the last axis of
# (N, C, T), a softmax over time): measured like unknown modules, trusted where the probe
# cannot measure them.
_MEASURED: tuple[type[nn.Module], ...] = (
    nn.PReLU,
    nn.LocalResponseNorm,
    nn.ChannelShuffle,
    nn.Embedding,
    # channel-wise when applied channels-last, as streaming models use them
    nn.Linear,
    nn.LayerNorm,
    nn.RMSNorm,
    nn.GLU,
    nn.Softmax,
    nn.LogSoftmax,
    nn.Softmin,
    nn.Softmax2d,
    nn.Unflatten,
    # per-channel statistics kept from training (track_running_stats=True, eval mode)
    nn.InstanceNorm1d,
    nn.InstanceNorm2d,
    nn.InstanceNorm3d,
    # an integer factor along time in mode "nearest": each input step becomes that many
    # output steps, read from it alone (measured; other modes read neighbours: refused so)
    nn.Upsample,
)

_PER_STEP = _ELEMENTWISE + _MEASURED
_ELEMENTWISE_FORWARDS = frozenset(c.forward for c in _ELEMENTWISE)


def elementwise(module: nn.Module) -> bool:
    """Whether ``module`` is one of the elementwise classes with that class's own forward (a
    subclass that overrides it is measured like any other module)."""
    return isinstance(module, _ELEMENTWISE) and type(module).forward in _ELEMENTWISE_FORWARDS


# Modules that hold parameters or submodules and compute nothing (never called).
_HOLDERS: tuple[type[nn.Module], ...] = (nn.ParameterList, nn.ParameterDict)

# Modules that mix time non-causally, keep their own hidden state, or change the time rate in
# a way padkit does not stream: refused with the reason.
_REFUSED: tuple[tuple[tuple[type[nn.Module], ...], str], ...] = (
    (
        (
            nn.AdaptiveAvgPool1d,
            nn.AdaptiveAvgPool2d,
            nn.AdaptiveAvgPool3d,
            nn.AdaptiveMaxPool1d,
            nn.AdaptiveMaxPool2d,
            nn.AdaptiveMaxPool3d,
        ),
        "adaptive pooling pools over the whole sequence",
    ),
    (
        (nn.FractionalMaxPool2d, nn.FractionalMaxPool3d),
        "fractional pooling draws windows over the whole sequence",
    ),
    (
        (nn.GroupNorm,),
        "it normalises with statistics over the whole sequence",
    ),
    (
        (nn.PixelShuffle, nn.PixelUnshuffle, nn.Fold, nn.Unfold),
        "it resamples or regroups the spatial axes, time included",
    ),
    (
        (nn.RNNBase, nn.RNNCellBase),
        "only nn.LSTM, nn.GRU and nn.RNN layers stream (a cell called step by step in Python, "
        "or another recurrent class, keeps a hidden state padkit does not thread)",
    ),
    (
        (
            nn.MultiheadAttention,
            nn.Transformer,
            nn.TransformerEncoder,
            nn.TransformerDecoder,
            nn.TransformerEncoderLayer,
            nn.TransformerDecoderLayer,
        ),
        "attention mixes every time step",
    ),
    (
        (
            nn.ZeroPad1d,
            nn.ZeroPad2d,
            nn.ZeroPad3d,
            nn.ConstantPad1d,
            nn.ConstantPad2d,
            nn.ConstantPad3d,
            nn.ReflectionPad1d,
            nn.ReflectionPad2d,
            nn.ReflectionPad3d,
            nn.ReplicationPad1d,
            nn.ReplicationPad2d,
            nn.ReplicationPad3d,
            nn.CircularPad1d,
            nn.CircularPad2d,
            nn.CircularPad3d,
        ),
        "a pad module pads every chunk; put the causal padding in the conv "
        "(padding='causal') instead: padkit.streaming.convert_causal(model, example) moves "
        "a pad that feeds convs into them, and says why where it cannot",
    ),
    ((nn.Flatten,), "it flattens the time axis into the features"),
    ((nn.MaxUnpool1d, nn.MaxUnpool2d, nn.MaxUnpool3d), "unpooling is not streamed"),
)

_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)


def refused_norm(module: nn.Module) -> str | None:
    """Why an instance norm cannot stream (it normalises with statistics over the whole
    sequence), or None where it uses running statistics (eval mode, tracked)."""
    norms = (nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d)
    if isinstance(module, norms) and not getattr(module, "track_running_stats", False):
        return "it normalises with statistics over the whole sequence (track_running_stats=False)"
    return None
