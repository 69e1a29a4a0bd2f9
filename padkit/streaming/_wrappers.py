"""convert_causal for wrapper modules: a module whose only child is a conv (or transposed
conv) and whose ``forward`` pads the time axis before it, or crops the time axis after it, in
tensor code. Neural audio codecs are written this way: Hugging Face ``EncodecConv1d`` and
``MimiConv1d`` call ``F.pad(x, (self.padding_total, extra))`` with a 0-d buffer and a right pad
computed from ``kernel_size``/``stride`` in ``forward`` (it completes the last window), in
``pad_mode`` constant, replicate or reflect; ``EncodecConvTranspose1d`` and
``MimiConvTranspose1d`` slice ``padding_right`` off the transposed conv's output.

The pads and crops are recognised from what the module computes on the probes (its input,
its child's input and output, its output), whatever code produced them: the child's input
must be the module's input padded on the time axis in one mode, and the module's output the
child's output (conv) or a fixed time crop of it (transposed conv). The child becomes a padkit
layer with those pads or crops and the module's class is swapped for a subclass whose
``forward`` only calls the child: the module stays an instance of its class, with the same
attributes, children and ``state_dict`` keys.

A right pad that varies with the input length and equals what completes the last stride
window (EnCodec's ``_get_extra_padding_for_conv1d``) becomes the explicit pad ``stride - 1``
in the same mode: the offline output is unchanged for every length (the extra pad samples
past the last window are never read). A stream emits ``floor(n / stride)`` frames of such a
layer; the last, partial frame exists offline only because the sequence ends there.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import nn as pnn
from .._made import stand_in
from ..spec import PaddingError, _tuple_of

__all__ = ["WrapperFinding", "find_wrapper", "unpadded_class"]

_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
_CONVTS = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
_MODES = ("zeros", "replicate", "reflect")


def _unpadded_forward(self: Any, x: Tensor, *args: Any, **kwargs: Any) -> Any:
    if args or kwargs:
        extra = [a for a in args if a is not None and a is not False]
        extra += [k for k, v in kwargs.items() if v is not None and v is not False]
        if extra:
            raise PaddingError(
                f"{type(self).__name__} (converted by convert_causal): called with "
                f"{args!r} {kwargs!r}; the converted module computes its conv only. "
                "Stream it with padkit.streaming.StreamingModule instead of its own "
                "streaming options"
            )
    # the child from the registry itself: getattr would reach it through nn.Module's
    # __getattr__ after a failed lookup, on every call of every converted wrapper
    child = self._modules.get(self._padkit_child)
    if child is None:
        child = getattr(self, self._padkit_child)
    return child(x)


def unpadded_class(cls: type[nn.Module]) -> type[nn.Module]:
    """``cls`` with a ``forward`` that only calls its converted conv child (cached per class).

    The subclass keeps the name of ``cls``; it accepts (and refuses to act on) extra call
    arguments that are not ``None``/``False``, such as Mimi's ``padding_cache=None``.
    """
    sub: type[nn.Module] = stand_in(
        unpadded_class,
        (cls,),
        cls,
        (cls,),
        lambda: {"forward": _unpadded_forward},
        doc=f"{cls.__name__} whose time padding lives in its padkit conv child "
        "(padkit.streaming.convert_causal).",
    )
    return sub


class WrapperFinding:
    """What :func:`find_wrapper` recognised: the child's name, and the new child."""

    def __init__(self, child: str, new: nn.Module, before: str, detail: str) -> None:
        self.child, self.new, self.before, self.detail = child, new, before, detail


def _pad(x: Tensor, td: int, lo: int, hi: int, mode: str) -> Tensor:
    pads = [0, 0] * (x.dim() - 2)
    j = 2 * (x.dim() - 1 - td)
    pads[j], pads[j + 1] = lo, hi
    return F.pad(x, pads, mode="constant" if mode == "zeros" else mode)


def _pad_forms(x: Tensor, ci: Tensor, td: int) -> set[tuple[int, int, str]] | None:
    """Every ``(lo, hi, mode)`` with ``pad(x) == ci`` on the time axis ``td``."""
    if ci.dim() != x.dim() or any(ci.shape[b] != x.shape[b] for b in range(x.dim()) if b != td):
        return None
    total = int(ci.shape[td]) - int(x.shape[td])
    if total < 0:
        return None
    found: set[tuple[int, int, str]] = set()
    for mode in _MODES:
        for lo in range(total + 1):
            try:
                ref = _pad(x, td, lo, total - lo, mode)
            except (RuntimeError, NotImplementedError):
                continue
            if ref.shape == ci.shape and torch.equal(ref, ci):
                found.add((lo, total - lo, mode))
    return found


def _completion(n: int, lo: int, k_eff: int, s: int) -> int:
    """The right pad that completes the last stride window (EnCodec's extra padding)."""
    frames = -(-(n - k_eff + lo) // s)
    return frames * s + k_eff - lo - n


def right_pad_rule(his: list[tuple[int, int]], lo: int, k_eff: int, s: int) -> int | None:
    """The fixed right pad of a conv (kernel reach ``k_eff``, stride ``s``, left pad ``lo``)
    that reproduces the pads ``his`` (per probe: input length, right pad), or None. Pads
    that are a fixed pad ``c`` and then what completes the last stride window (EnCodec's
    extra padding; ``c > 0`` where it pads a non-causal conv) become ``c + s - 1``: the conv
    reads the same zeros and gives as many outputs at every length. Two probes may fit that
    for several ``c``: the one whose fixed pads add up to ``k_eff - s`` (EnCodec's
    ``padding_total``) first, then none; a pad the probes see constant is that pad unless
    the completion alone (``c = 0``) fits it. The caller checks the result at other lengths."""
    constant = len({h for _, h in his}) == 1
    fits = [
        c
        for c in (range(k_eff) if not constant else (0,))
        if s > 1
        and all(h == c + _completion(n, lo + c, k_eff, s) for n, h in his)
        and any(h != c for _, h in his)
    ]
    fits.sort(key=lambda c: (lo + c != k_eff - s, c != 0, c))
    if fits:
        return fits[0] + s - 1
    return his[0][1] if constant and his else None


def find_wrapper(
    w: nn.Module, calls_w: list[Any], calls_c: list[Any], ti: int
) -> WrapperFinding | str | None:
    """Recognise ``w`` as a padding (or cropping) wrapper of its only child conv.

    Returns the finding, a reason why ``w`` pads or crops but cannot be converted, ``""``
    when ``w`` is such a wrapper but pads nothing, or None when it is not one at all."""
    children = list(w.named_children())
    if len(children) != 1 or not isinstance(children[0][1], _CONVS + _CONVTS):
        return None
    cname, conv = children[0]
    c: Any = conv
    if hasattr(c, "pad_spec"):
        return None  # already a padkit layer
    if not any(type(c).forward is base.forward for base in _CONVS + _CONVTS):
        return None  # a conv subclass with a forward of its own: the pads it writes are its
        # own (the self-padding pass solves them), not this module's
    if len(calls_w) < 2 or len(calls_w) != len(calls_c):
        return None
    transposed = isinstance(conv, _CONVTS)
    nd = len(c.kernel_size)
    if not 0 <= ti < nd:
        return None
    td = 2 + ti
    k = _tuple_of(c.kernel_size, nd, "kernel_size")
    s = _tuple_of(c.stride, nd, "stride")
    d = _tuple_of(c.dilation, nd, "dilation")
    k_eff, st = d[ti] * (k[ti] - 1) + 1, s[ti]
    if isinstance(c.padding, str) or any(_tuple_of(c.padding, nd, "padding", minimum=0)):
        return None
    if transposed:
        if any(_tuple_of(c.output_padding, nd, "output_padding", minimum=0)):
            return None
        crops: set[tuple[int, int]] | None = None
        for cw, cc in zip(calls_w, calls_c):
            x, y, ci, co = cw.inp, cw.out, cc.inp, cc.out
            if not all(isinstance(t, Tensor) for t in (x, y, ci, co)) or ci is not x:
                return None
            if y.dim() != co.dim() or y.shape[:td] != co.shape[:td]:
                return None
            extra = int(co.shape[td]) - int(y.shape[td])
            if extra < 0:
                return None
            here = {
                (a, extra - a)
                for a in range(extra + 1)
                if torch.equal(co.narrow(td, a, int(y.shape[td])), y)
            }
            crops = here if crops is None else crops & here
        if not crops or crops == {(0, 0)}:
            return None  # crops nothing, or is not a crop of its child's output
        if len(crops) != 1:
            return "its crop of the transposed conv's output is ambiguous on the probes"
        ((a, b),) = crops
        pairs = [(0, 0)] * nd
        pairs[ti] = (a, b)
        cls: Any = {1: pnn.ConvTranspose1d, 2: pnn.ConvTranspose2d, 3: pnn.ConvTranspose3d}[nd]
        new: nn.Module = cls(
            c.in_channels,
            c.out_channels,
            c.kernel_size,
            stride=c.stride,
            padding=tuple(pairs),
            groups=c.groups,
            bias=c.bias is not None,
            dilation=c.dilation,
            device=c.weight.device,
            dtype=c.weight.dtype,
        )
        return WrapperFinding(
            cname,
            new,
            f"{type(w).__name__} (crops {(a, b)} off its {type(c).__name__})",
            "the time crop its forward sliced off, moved into the padkit transposed conv",
        )
    forms: set[tuple[int, str]] | None = None
    his: list[tuple[int, int]] = []  # (input length, right pad) per probe
    for cw, cc in zip(calls_w, calls_c):
        x, y, ci, co = cw.inp, cw.out, cc.inp, cc.out
        if not all(isinstance(t, Tensor) for t in (x, y, ci, co)):
            return None
        if y is not co and not (y.shape == co.shape and torch.equal(y, co)):
            if ci.shape != x.shape:
                return "its output is not its conv's output (it computes more after the conv)"
            return None
        pads_here = _pad_forms(x, ci, td)
        if pads_here is None:
            return None
        if not pads_here:
            return (
                "its conv's input is not its own input padded on the time axis in mode "
                "zeros, replicate or reflect"
            )
        lo_modes = {(lo, mode) for lo, _, mode in pads_here}
        forms = lo_modes if forms is None else forms & lo_modes
        his.append((int(x.shape[td]), next(hi for _, hi, _ in pads_here)))
    if not forms:
        return "its left pad or pad mode changes with the input length"
    if len(forms) > 1:
        # no pads at all on the probes fit every mode; zeros otherwise ambiguous: take zeros
        forms = {f for f in forms if f[1] == "zeros"} or {sorted(forms)[0]}
    ((lo, mode),) = forms
    if all(hi == 0 for _, hi in his) and lo == 0:
        hi, mode = 0, "zeros"
        how = "pad code that pads nothing here, removed"
    else:
        rule = right_pad_rule(his, lo, k_eff, st)
        if rule is None:
            return (
                f"its right pad ({[h for _, h in his]} on the probes) changes with the input "
                "length in a way that is not the completion of the last stride window"
            )
        if len({h for _, h in his}) == 1 and rule == his[0][1]:
            how = f"pads {(lo, rule)} in mode {mode!r}"
        else:
            fixed = rule - (st - 1)
            how = f"pads {(lo, fixed)} in mode {mode!r} and completes the last stride window"
        hi = rule
    pairs = [(0, 0)] * nd
    pairs[ti] = (lo, hi)
    ccls: Any = {1: pnn.Conv1d, 2: pnn.Conv2d, 3: pnn.Conv3d}[nd]
    new = ccls(
        c.in_channels,
        c.out_channels,
        c.kernel_size,
        stride=c.stride,
        padding=tuple(pairs),
        dilation=c.dilation,
        groups=c.groups,
        bias=c.bias is not None,
        padding_mode=mode,
        device=c.weight.device,
        dtype=c.weight.dtype,
    )
    return WrapperFinding(
        cname,
        new,
        f"{type(w).__name__} ({how} in its forward)",
        "the pads its forward applied, recognised from its conv's input, moved into the conv",
    )
