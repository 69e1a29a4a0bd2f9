"""Which modules a stream passes through (they act on each time step on its own), which it
refuses with the reason (they mix time non-causally, keep a hidden state padkit does not
thread, or resample time), and the batch norms it checks at each step."""

from __future__ import annotations

from torch import nn

# Modules that act on each time step on its own.
_PER_STEP: tuple[type[nn.Module], ...] = (
    nn.Identity,
    nn.ReLU,
    nn.ReLU6,
    nn.LeakyReLU,
    nn.PReLU,
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
)

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
        (nn.GroupNorm, nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d),
        "it normalises with statistics over the whole sequence",
    ),
    (
        (nn.Upsample, nn.PixelShuffle, nn.PixelUnshuffle, nn.Fold, nn.Unfold),
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
        "(padding='causal') instead",
    ),
    ((nn.Flatten,), "it flattens the time axis into the features"),
    ((nn.MaxUnpool1d, nn.MaxUnpool2d, nn.MaxUnpool3d), "unpooling is not streamed"),
)

_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)
