"""How each conv, pool and transposed conv of a model streams along the time axis: its
:class:`_Plan` (kernel, stride, dilation and pads on the time axis, the history it keeps, and
the window arithmetic of a chunk), made by :func:`_plan_layer` from the layer, or refused with
the reason."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from torch import Tensor, nn

from .. import nn as pnn
from ..op import Op
from ..recognise import layer_kind, torch_pairs
from ..spec import Padding, PaddingError, _tuple_of

_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
_CONVTS = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
_MAX_POOLS = (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d)
_AVG_POOLS = (nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d)
_LP_POOLS = (nn.LPPool1d, nn.LPPool2d, nn.LPPool3d)
_POOLS = _MAX_POOLS + _AVG_POOLS + _LP_POOLS
_PADKIT_LAYERS = (
    pnn.Conv1d,
    pnn.Conv2d,
    pnn.Conv3d,
    pnn.MaxPool1d,
    pnn.MaxPool2d,
    pnn.MaxPool3d,
    pnn.AvgPool1d,
    pnn.AvgPool2d,
    pnn.AvgPool3d,
    pnn.LPPool1d,
    pnn.LPPool2d,
    pnn.LPPool3d,
    pnn.ConvTranspose1d,
    pnn.ConvTranspose2d,
    pnn.ConvTranspose3d,
)

_ND: dict[type[nn.Module], int] = {
    nn.ConvTranspose1d: 1,
    nn.ConvTranspose2d: 2,
    nn.ConvTranspose3d: 3,
    nn.Conv1d: 1,
    nn.Conv2d: 2,
    nn.Conv3d: 3,
    nn.MaxPool1d: 1,
    nn.MaxPool2d: 2,
    nn.MaxPool3d: 3,
    nn.AvgPool1d: 1,
    nn.AvgPool2d: 2,
    nn.AvgPool3d: 3,
    nn.LPPool1d: 1,
    nn.LPPool2d: 2,
    nn.LPPool3d: 3,
}


# ----------------------------------------------------------------------------- layer plans

# the lean steps (``_Plan.lean``)
LEAN_SIMPLE = 1
LEAN_WINDOW = 2
LEAN_OVERLAP = 3


@dataclass(frozen=True)
class _Plan:
    """How one conv, pool or transposed conv streams along the time axis."""

    name: str
    kind: str  # "conv", "max", "avg", "lp", "convt"
    nd: int
    ti: int  # index of the time axis among the layer's spatial axes
    k: tuple[int, ...]
    s: tuple[int, ...]
    d: tuple[int, ...]
    lo: int  # left pad on the time axis (transposed: what it crops at the start)
    replicate: bool  # time padding repeats the first frame
    padkit: bool  # a padkit layer (else a plain torch one)
    hi: int = 0  # right pad (lookahead mode); transposed: outputs held back at the end
    # time padding reflects samples 1..lo of the layer's input: filled in by the first call,
    # which must bring lo + 1 samples (the stream's start-up hold sees to it)
    reflect: bool = False
    # what a max pool's pads hold (its padding_value; -inf: the lowest value of the input)
    fill: float = float("-inf")
    # old-style weight or spectral norm: forward pre-hooks that set the layer's weight from
    # its parameters, run by the stand-in before each call (as the layer's own call does)
    pre_hooks: bool = False
    # lookahead mode: the layer runs on spans of uncommitted samples (any pads, any stride;
    # transposed convs keep their crops (lo, hi)); ``op``: a transposed conv's time output
    # padding
    look: bool = False
    op: int = 0
    # derived in __post_init__ (read on every step, so stored rather than computed)
    k_eff: int = field(init=False)
    stride: int = field(init=False)
    # samples of the padded input stream kept between chunks: k_eff - 1, or the whole left
    # pad if that is longer (windows made of padding only); transposed convs keep the inputs
    # that still reach the outputs not yet emitted
    history: int = field(init=False)
    # a stride-1 conv/pool padded (k_eff - 1, 0): every chunk maps to itself, no arithmetic
    simple: bool = field(init=False)
    fast: bool = field(init=False)  # ... and a plain 1-d conv: the lean step path
    pointwise: bool = field(init=False)  # a 1-d conv of kernel 1, no pads: no state at all
    # which lean step runs the layer (``padkit.streaming._runner._lean_step``; the general
    # path checks and explains what it declines): LEAN_SIMPLE for ``fast``, LEAN_WINDOW for
    # any other causal 1-d conv with a history (a stride, a left pad other than the kernel's
    # reach), LEAN_OVERLAP for a causal 1-d transposed conv that holds no output back and
    # whose kernel reaches its stride (overlap-add); 0 for none. A default on the class: a
    # plan unpickled from before it existed takes the general path
    lean: int = field(init=False, default=0)
    key_buf: str = field(init=False)
    key_pos: str = field(init=False)

    def __post_init__(self) -> None:
        k_eff = self.d[self.ti] * (self.k[self.ti] - 1) + 1
        stride = self.s[self.ti]
        object.__setattr__(self, "k_eff", k_eff)
        object.__setattr__(self, "stride", stride)
        if self.kind == "convt" and self.look:
            # the inputs before a span whose kernels reach its first (cropped) output
            hist = max(0, (k_eff - 1 - self.lo) // stride)
        elif self.kind == "convt" and self.nd == 1:
            # overlap-add: the outputs complete but held back (``hi``) and the partial sums
            # the inputs so far add to the next ones (``k_eff - s``), without the bias
            hist = self.hi + max(0, k_eff - stride)
        elif self.kind == "convt":
            hist = -(-(k_eff - 1 + self.hi) // stride)
        elif self.hi > 0 or self.look:  # lookahead: the right pad stands for unseen samples
            hist = self.lo
        else:
            hist = max(k_eff - 1, self.lo)
        object.__setattr__(self, "history", hist)
        simple = self.kind != "convt" and stride == 1 and self.lo == k_eff - 1
        object.__setattr__(self, "simple", simple)
        fast = (
            simple
            and self.kind == "conv"
            and self.nd == 1
            and not self.replicate
            and not self.reflect
        )
        object.__setattr__(self, "fast", fast and self.hi == 0 and k_eff > 1)
        object.__setattr__(self, "pointwise", fast and self.hi == 0 and k_eff == 1)
        lean = 0
        if self.fast:
            lean = LEAN_SIMPLE
        elif (
            self.kind == "conv"
            and self.nd == 1
            and not self.replicate
            and not self.reflect
            and not self.look
            and self.hi == 0
            and hist > 0
        ):
            lean = LEAN_WINDOW
        elif self.partial and self.hi == 0 and k_eff >= stride:
            lean = LEAN_OVERLAP
        object.__setattr__(self, "lean", lean)
        object.__setattr__(self, "key_buf", f"{self.name}.buf")
        object.__setattr__(self, "key_pos", f"{self.name}.pos")

    @property
    def ahead(self) -> int:
        """Lookahead mode: how far past its nominal time (output ``j`` of a conv or pool at
        input ``j*s``; of a transposed conv at input ``j/s``) an output reads, in samples of
        the layer's input (conv, pool) or output (transposed conv). A left pad in mode
        ``reflect`` reads samples ``1..lo``: the first outputs wait for them too."""
        if self.kind == "convt":
            return max(0, self.lo)
        reach = max(0, self.k_eff - 1 - self.lo)
        return max(reach, self.lo) if self.reflect and self.look else reach

    @property
    def crops(self) -> tuple[int, int]:
        """A transposed conv's time crops ``(start, end)``: its plan keeps, in causal mode,
        the outputs held back at the end instead of the end crop (``hi``)."""
        if self.look:
            return self.lo, self.hi
        return self.lo, self.hi + self.k_eff - self.stride + self.op

    @property
    def partial(self) -> bool:
        """A causal 1-d transposed conv: its state holds output partial sums (overlap-add:
        each chunk's transposed conv runs on the chunk alone), not past inputs."""
        return self.kind == "convt" and self.nd == 1 and not self.look

    @property
    def stateless(self) -> bool:
        return self.kind != "convt" and self.k_eff == 1 and self.stride == 1 and self.lo == 0

    def offset(self, pos: int) -> int:
        """Where, in ``history ++ chunk``, the next output window starts, after ``pos`` input
        samples (may exceed ``history`` when the kernel is shorter than the stride)."""
        n_prev = self.lo + pos  # samples of the padded stream seen so far
        # windows made of padding only (lo >= k_eff) come out with the first sample
        started = pos > 0 and n_prev >= self.k_eff
        done = (n_prev - self.k_eff) // self.stride + 1 if started else 0
        return done * self.stride - n_prev + self.history

    def outputs(self, pos: int, length: int) -> int:
        """How many outputs a chunk of ``length`` samples completes after ``pos`` samples."""
        if length == 0 and pos == 0:
            return 0
        avail = self.history + length - self.offset(pos)
        return 0 if avail < self.k_eff else (avail - self.k_eff) // self.stride + 1

    def emitted(self, pos: int) -> int:
        """Transposed: outputs final after ``pos`` inputs (output j reads inputs up to
        ``(j + lo) // s``; the last ``hi`` are held back, as the offline run crops them)."""
        return max(0, pos * self.stride - self.lo - self.hi)

    def window(self, pos: int, length: int) -> tuple[int, int]:
        """``(start, count)`` of this chunk's outputs: for convs and pools the start of the
        first window in ``history ++ chunk``; for transposed convs the first output to keep
        in the full (uncropped) transposed output of ``history ++ chunk`` (overlap-add: of
        the kept outputs and the chunk's own transposed conv)."""
        if self.kind == "convt":
            first = self.emitted(pos)
            count = self.emitted(pos + length) - first
            if self.partial:  # in the outputs from pos * s - hi (the kept ones first)
                return first + self.lo + self.hi - pos * self.stride, count
            return first + self.lo - (pos - self.history) * self.stride, count
        if self.simple:
            return 0, length
        return self.offset(pos), self.outputs(pos, length)


def _spatial(plan: _Plan, x: Tensor) -> list[int]:
    """The spatial sizes of ``x`` with the time axis set to the kernel extent: the pads of
    the other axes never depend on it, and export keeps the time length symbolic."""
    sizes = [int(v) if i != plan.ti else plan.k_eff for i, v in enumerate(x.shape[2:])]
    return sizes


def _time_index(axis: int, nd: int, name: str) -> int:
    ti = axis - 2 if axis >= 0 else nd + axis
    if not 0 <= ti < nd:
        raise PaddingError(
            f"StreamingModule: axis={axis} is not a spatial axis of {name!r}, which has {nd} "
            f"spatial axis/axes (inputs (N, C, {', '.join('*' * nd)})); pass an axis in "
            f"2..{nd + 1} or -{nd}..-1"
        )
    return ti


def _plan_layer(name: str, layer: nn.Module, axis: int, lookahead: bool = False) -> _Plan:
    nd = next(v for t, v in _ND.items() if isinstance(layer, t))
    ti = _time_index(axis, nd, name)
    what = f"{type(layer).__name__} {name!r}"
    norms = weight_hooks(layer)
    if layer._forward_hooks or len(norms) != len(layer._forward_pre_hooks):
        raise PaddingError(
            f"StreamingModule: {what} has forward hooks, which streaming would not run (the "
            "layer runs on buffered windows). Remove them (weight norm and spectral norm, "
            "old-style or as parametrizations, stream)"
        )
    if layer_kind(layer, plain=True) is None:
        raise PaddingError(
            f"StreamingModule: {what} overrides forward(); streaming runs the layer's "
            "conv/pool itself and would skip that code. A conv that pads its input, or a "
            "transposed conv that crops its output, there is rewritten into a padkit layer "
            "by padkit.streaming.convert_causal(model, example), whose copy streams"
        )
    is_padkit = isinstance(layer, _PADKIT_LAYERS)
    if isinstance(layer, _CONVTS):
        plan = _plan_transposed(name, layer, nd, ti, what, is_padkit, lookahead)
    else:
        plan = _plan_direct(name, layer, nd, ti, what, is_padkit, axis, lookahead)
    return replace(plan, pre_hooks=True) if norms else plan


def weight_hooks(layer: nn.Module) -> list[Any]:
    """The layer's old-style weight norm and spectral norm forward pre-hooks (each sets the
    layer's weight from its parameters before a call)."""
    from torch.nn.utils.spectral_norm import SpectralNorm
    from torch.nn.utils.weight_norm import WeightNorm

    return [
        h for h in layer._forward_pre_hooks.values() if isinstance(h, (WeightNorm, SpectralNorm))
    ]


def _plan_direct(
    name: str,
    layer: nn.Module,
    nd: int,
    ti: int,
    what: str,
    is_padkit: bool,
    axis: int,
    lookahead: bool,
) -> _Plan:
    rec = Op.from_module(layer, where=f"StreamingModule: {what}")
    if rec is None:  # pragma: no cover - the forward check above rules foreign layers out
        raise PaddingError(f"StreamingModule: {what} is not a conv or pool padkit can read")
    kind, k, s, d, spec = rec.kind, rec.kernel, rec.stride, rec.dilation, rec.padding
    if rec.return_indices:
        raise PaddingError(
            f"StreamingModule: {what} has return_indices=True; indices into a stream are "
            "not supported"
        )
    if rec.ceil_mode and s[ti] > 1:
        raise PaddingError(
            f"StreamingModule: {what} has ceil_mode=True with stride {s[ti]} on the time "
            "axis: its last window depends on where the sequence ends"
        )
    rule = spec.axes[ti]
    if spec.pre is not None and spec.pre[ti] != (0, 0):
        raise PaddingError(
            f"StreamingModule: {what} pads the time axis with {spec.describe()}: a rule "
            "resolved after static pads depends on the sequence length; use 'causal' or "
            "'causal_block'"
        )
    try:
        ((lo, hi),) = Padding((rule,), ceil_mode=spec.ceil_mode).resolve(
            k[ti], s[ti], d[ti], ndim=1
        )
    except PaddingError:
        raise PaddingError(
            f"StreamingModule: {what} pads the time axis with {rule!r} at stride {s[ti]}, "
            "which depends on the sequence length; use 'causal' or 'causal_block'"
        ) from None
    if 0 < hi < s[ti] and not lookahead:
        # a right pad shorter than the stride only completes the last, partial stride window
        # (EnCodec's extra padding; explicit (k_eff - s, s - 1) pairs): the windows before it
        # never read it, and a stream emits them; the partial one exists only at the end
        hi = 0
    if hi != 0 and not lookahead:
        raise PaddingError(
            f"StreamingModule: {what} pads the time axis (axis {axis}) with {(lo, hi)}: the "
            f"right pad {hi} needs samples from the future. Use padding='causal' (or "
            "'causal_block') on the time axis, e.g. ('causal', 'same', 'same') for video, or "
            "stream with a delay: StreamingModule(model, lookahead='auto')"
        )
    replicate = reflect = False
    if kind == "conv" and lo + hi > 0:
        mode: Any = layer.padding_mode
        tmode = mode if isinstance(mode, str) else mode[ti]
        if tmode == "replicate":
            replicate = True
        elif tmode == "reflect" and lookahead:
            # lookahead: the first span reflects its first samples, the flush its last
            reflect = True
        elif tmode == "reflect" and lo > 0:
            # its first outputs read samples 1..lo of its input: the stream holds its input
            # until every such layer's first call brings them (StreamingModule.startup_delay)
            reflect = True
        elif tmode not in ("zeros", "reflect"):
            raise PaddingError(
                f"StreamingModule: {what} pads the time axis in mode {tmode!r}, which reads "
                "samples from the end of the sequence; stream with 'zeros' or 'replicate' "
                "(repeat the first frame) on the time axis, e.g. padding_mode=('replicate', "
                "'zeros', 'zeros')"
            )
    return _Plan(
        name,
        kind,
        nd,
        ti,
        k,
        s,
        d,
        lo,
        replicate,
        is_padkit,
        hi,
        reflect=reflect,
        fill=rec.padding_value,
        look=lookahead,
    )


def _plan_transposed(
    name: str, layer: Any, nd: int, ti: int, what: str, is_padkit: bool, lookahead: bool
) -> _Plan:
    k = _tuple_of(layer.kernel_size, nd, "kernel_size")
    s = _tuple_of(layer.stride, nd, "stride")
    d = _tuple_of(layer.dilation, nd, "dilation")
    op = _tuple_of(layer.output_padding, nd, "output_padding", minimum=0)
    if is_padkit:
        found = set()
        for n in (7, 8, 9):
            sizes = [max(kk, 2) for kk in k]
            sizes[ti] = n
            found.add(tuple(layer.resolved_crops(tuple(sizes)))[ti])
        if len(found) != 1:
            raise PaddingError(
                f"StreamingModule: {what} crops its time axis by an amount that depends on the "
                "sequence length; use padding='causal' on the time axis"
            )
        ((lo, hi),) = found
    else:
        lo, hi = torch_pairs(layer.padding, k, d)[ti]
    k_eff = d[ti] * (k[ti] - 1) + 1
    if lookahead:
        if lo < 0 or hi < 0:  # pragma: no cover - crops are never negative on these layers
            raise PaddingError(f"StreamingModule(lookahead=...): {what} crops {(lo, hi)}")
        return _Plan(name, "convt", nd, ti, k, s, d, lo, False, is_padkit, hi, look=True, op=op[ti])
    # the offline output crops hi - op at the end of the full (n-1)*s + k_eff outputs; the
    # outputs a stream can finalise after n inputs end at n*s: held back = the difference
    held = hi - op[ti] - (k_eff - s[ti])
    if held < 0:
        raise PaddingError(
            f"StreamingModule: {what} (kernel {k[ti]}, stride {s[ti]}, dilation {d[ti]}) crops "
            f"{(lo, hi)} with output_padding {op[ti]} on the time axis: its last {-held} "
            "output(s) read only the last input and exist only once the sequence ends. Crop "
            "k_eff - stride at the end (padding='causal') to stream it causally, or stream "
            "with a delay: StreamingModule(model, lookahead='auto')"
        )
    return _Plan(name, "convt", nd, ti, k, s, d, lo, False, is_padkit, held, op=op[ti])
