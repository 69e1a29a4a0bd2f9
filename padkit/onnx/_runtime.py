"""Functions and modules the imported graphs call at run time (ONNX semantics in torch).

These are the targets of the ``call_function`` / ``call_module`` nodes of a graph made
by :func:`padkit.onnx.load`; they take tensors or Python values and need no onnx.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import functional as PF
from ..spec import Padding, PaddingError

__all__ = [
    "AbsLPPool",
    "DynamicConv",
    "DynamicConvTranspose",
    "LocalResponseNorm",
    "MaxPoolIndices",
    "OnnxPad",
    "Resize",
]

IntsLike = Sequence[int] | Tensor


def as_ints(value: IntsLike) -> list[int]:
    """A list of ints from a sequence or an integer tensor."""
    if isinstance(value, Tensor):
        return [int(v) for v in value.reshape(-1).tolist()]
    return [int(v) for v in value]


def scalar(value: Any) -> Any:
    """A Python number from a 0-d / 1-element tensor (other values pass through)."""
    if isinstance(value, Tensor):
        return value.reshape(-1)[0].item()
    return value


# ----------------------------------------------------------------------------- shape ops


def shape_of(x: Tensor, start: int = 0, end: int | None = None) -> Tensor:
    """ONNX ``Shape`` (with the opset-15 ``start``/``end`` slice)."""
    return torch.tensor(list(x.shape)[start:end], dtype=torch.int64)


def size_of(x: Tensor) -> Tensor:
    """ONNX ``Size``."""
    return torch.tensor(x.numel(), dtype=torch.int64)


def reshape(x: Tensor, shape: IntsLike, allowzero: int = 0) -> Tensor:
    """ONNX ``Reshape``: 0 copies the input dim (unless ``allowzero``), -1 is inferred."""
    dims = as_ints(shape)
    if not allowzero:
        # the input's own (possibly symbolic) size, so torch.export keeps the dim dynamic
        return x.reshape([x.shape[i] if d == 0 else d for i, d in enumerate(dims)])
    return x.reshape(dims)


SizeSpec = Sequence[Any]  # ints, or (tensor, j) for the (possibly symbolic) size of dim j


def sizes(dims: SizeSpec) -> list[Any]:
    """The sizes ``dims`` names: ints as they are, ``(tensor, j)`` as ``tensor.shape[j]``."""
    return [d[0].shape[d[1]] if isinstance(d, (tuple, list)) else d for d in dims]


def reshape_to(x: Tensor, dims: SizeSpec) -> Tensor:
    """Reshape to the sizes ``dims`` names (one may be -1)."""
    return x.reshape(sizes(dims))


def expand_to(x: Tensor, dims: SizeSpec) -> Tensor:
    """ONNX ``Expand`` to the output sizes ``dims`` names."""
    return x.expand(sizes(dims))


def constant_of_sizes(dims: SizeSpec, value: Tensor) -> Tensor:
    """ONNX ``ConstantOfShape`` with the sizes ``dims`` names."""
    return torch.full(sizes(dims), value.reshape(-1)[0].item(), dtype=value.dtype)


def flatten(x: Tensor, axis: int) -> Tensor:
    """ONNX ``Flatten``: a 2-D tensor ``(prod(shape[:axis]), prod(shape[axis:]))``."""
    if axis < 0:
        axis += x.dim()
    # products of the (possibly symbolic) sizes: no int(), so torch.export keeps them dynamic
    return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))


def squeeze(x: Tensor, axes: IntsLike | None = None) -> Tensor:
    """ONNX ``Squeeze`` (all size-1 dims when ``axes`` is None)."""
    if axes is None:
        return x.squeeze()
    dims = sorted({a + x.dim() if a < 0 else a for a in as_ints(axes)})
    return x.squeeze(tuple(dims)) if dims else x


def unsqueeze(x: Tensor, axes: IntsLike) -> Tensor:
    """ONNX ``Unsqueeze``: ``axes`` index the output."""
    dims = as_ints(axes)
    rank = x.dim() + len(dims)
    for a in sorted(a + rank if a < 0 else a for a in dims):
        x = x.unsqueeze(a)
    return x


def reverse_dims(x: Tensor) -> Tensor:
    """ONNX ``Transpose`` without ``perm``: reverse every axis."""
    return x.permute(*reversed(range(x.dim())))


def expand(x: Tensor, shape: IntsLike) -> Tensor:
    """ONNX ``Expand`` (bidirectional broadcast)."""
    target = torch.broadcast_shapes(tuple(x.shape), tuple(as_ints(shape)))  # type: ignore[no-untyped-call]
    return x.expand(target)


def split(
    x: Tensor, axis: int, sizes: IntsLike | None, n_out: int, uneven: bool = False
) -> tuple[Tensor, ...]:
    """ONNX ``Split``: explicit ``sizes``, or ``n_out`` equal parts (``uneven``: opset 18)."""
    if sizes is not None:
        parts = as_ints(sizes)
    else:
        dim = int(x.shape[axis])
        if uneven:
            chunk = -(-dim // n_out)
            parts = [min(chunk, dim - i * chunk) for i in range(n_out)]
        else:
            if dim % n_out:
                raise PaddingError(
                    f"Split: axis {axis} of size {dim} does not split into {n_out} equal parts"
                )
            parts = [dim // n_out] * n_out
    return tuple(torch.split(x, parts, dim=axis))


_HUGE = 2**62  # beyond any tensor size; slice bounds are clamped to it


def onnx_slice(
    x: Tensor,
    starts: IntsLike,
    ends: IntsLike,
    axes: IntsLike | None = None,
    steps: IntsLike | None = None,
) -> Tensor:
    """ONNX ``Slice`` (clamping as numpy does; negative steps supported)."""
    s_list, e_list = as_ints(starts), as_ints(ends)
    a_list = list(range(len(s_list))) if axes is None else as_ints(axes)
    st_list = [1] * len(s_list) if steps is None else as_ints(steps)
    for start, end, axis, step in zip(s_list, e_list, a_list, st_list):
        if axis < 0:
            axis += x.dim()
        if step > 0:  # torch clamps like Python; no int(size), so dims stay symbolic
            lo, hi = (min(max(v, -_HUGE), _HUGE) for v in (start, end))  # INT64_MAX and co
            x = x[(slice(None),) * axis + (slice(lo, hi, step),)]
        else:
            lo, hi, st = slice(start, end, step).indices(int(x.shape[axis]))
            index = torch.arange(lo, hi, st, device=x.device)
            x = x.index_select(axis, index)
    return x


def gather(x: Tensor, indices: Tensor, axis: int) -> Tensor:
    """ONNX ``Gather`` (negative indices count from the end)."""
    if axis < 0:
        axis += x.dim()
    return x[(slice(None),) * axis + (indices.long(),)]


def concat(tensors: Sequence[Tensor], axis: int) -> Tensor:
    """ONNX ``Concat``."""
    return torch.cat(list(tensors), dim=axis)


def constant_of_shape(shape: IntsLike, value: Tensor) -> Tensor:
    """ONNX ``ConstantOfShape``."""
    return torch.full(as_ints(shape), value.reshape(-1)[0].item(), dtype=value.dtype)


def cast(x: Tensor, dtype: torch.dtype) -> Tensor:
    """ONNX ``Cast`` (float to int truncates toward zero, as torch does)."""
    return x.to(dtype)


def cast_like(x: Tensor, like: Tensor) -> Tensor:
    """ONNX ``CastLike``: ``x`` in the element type of ``like``."""
    return x.to(like.dtype)


# ----------------------------------------------------------------------------- math


def legacy_broadcast(a: Tensor, b: Tensor, axis: int | None) -> Tensor:
    """Opsets 1-6 ``broadcast=1``: ``b`` matches ``a``'s dims from ``axis`` on (its suffix by
    default); trailing 1s make it broadcast as numpy does."""
    start = a.dim() - b.dim() if axis is None else (axis + a.dim() if axis < 0 else axis)
    tail = a.dim() - start - b.dim()
    if start < 0 or tail < 0:
        raise PaddingError(
            f"legacy broadcast: B of shape {tuple(b.shape)} does not fit A of shape "
            f"{tuple(a.shape)} at axis {axis}"
        )
    return b.reshape(tuple(b.shape) + (1,) * tail)


def pow_(a: Tensor, b: Tensor) -> Tensor:
    """ONNX ``Pow``: the result has the base's type."""
    return torch.pow(a, b).to(a.dtype)


def variadic(op: str, *tensors: Tensor) -> Tensor:
    """ONNX ``Sum`` / ``Max`` / ``Min`` / ``Mean`` over broadcastable inputs."""
    from ._unsigned import binary

    out = tensors[0]
    for t in tensors[1:]:
        out = binary("add" if op in ("sum", "mean") else op, out, t)
    return out / len(tensors) if op == "mean" else out


def clip(x: Tensor, lo: Any = None, hi: Any = None) -> Tensor:
    """ONNX ``Clip`` (bounds may be Python numbers or tensors)."""
    if lo is None and hi is None:
        return x
    return torch.clamp(x, lo, hi)


def prelu(x: Tensor, slope: Tensor) -> Tensor:
    """ONNX ``PRelu``: ``slope`` broadcasts to ``x``."""
    return torch.where(x < 0, x * slope, x)


def hard_sigmoid(x: Tensor, alpha: float, beta: float) -> Tensor:
    """ONNX ``HardSigmoid``: ``clamp(alpha*x + beta, 0, 1)``."""
    return torch.clamp(x * alpha + beta, 0.0, 1.0)


def selu(x: Tensor, alpha: float, gamma: float) -> Tensor:
    """ONNX ``Selu`` with its ``alpha`` and ``gamma``."""
    return gamma * torch.where(x > 0, x, alpha * (torch.exp(x) - 1))


def softmax(x: Tensor, axis: int, log: bool = False, legacy: bool = False) -> Tensor:
    """ONNX ``Softmax`` / ``LogSoftmax``; ``legacy`` (opset < 13) flattens at ``axis``."""
    fn = torch.log_softmax if log else torch.softmax
    if not legacy:
        return fn(x, dim=axis)
    return fn(flatten(x, axis), dim=1).reshape(x.shape)


def gemm(
    a: Tensor,
    b: Tensor,
    c: Tensor | None,
    alpha: float,
    beta: float,
    trans_a: int,
    trans_b: int,
) -> Tensor:
    """ONNX ``Gemm``: ``alpha * A' @ B' + beta * C``."""
    out = (a.t() if trans_a else a) @ (b.t() if trans_b else b)
    if alpha != 1.0:
        out = out * alpha
    if c is not None:
        out = out + (c * beta if beta != 1.0 else c)
    return out


def global_pool(x: Tensor, op: str) -> Tensor:
    """ONNX ``GlobalAveragePool`` / ``GlobalMaxPool`` over every spatial axis."""
    dims = tuple(range(2, x.dim()))
    return x.mean(dim=dims, keepdim=True) if op == "mean" else x.amax(dim=dims, keepdim=True)


def batch_norm(
    x: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor, eps: float
) -> Tensor:
    """ONNX ``BatchNormalization`` in inference mode (parameters as inputs)."""
    return F.batch_norm(x, mean, var, scale, bias, False, 0.0, eps)


def instance_norm(x: Tensor, scale: Tensor, bias: Tensor, eps: float) -> Tensor:
    """ONNX ``InstanceNormalization``."""
    return F.instance_norm(x, None, None, scale, bias, True, 0.0, eps)


def ones_mask(x: Tensor) -> Tensor:
    """The ``mask`` output of an inference-mode ``Dropout``."""
    return torch.ones_like(x, dtype=torch.bool)


# ----------------------------------------------------------------------------- conv


class DynamicConv(nn.Module):
    """An ONNX ``Conv`` whose weight (and bias) are call inputs, not parameters."""

    def __init__(
        self,
        nd: int,
        stride: Sequence[int],
        padding: Padding,
        dilation: Sequence[int],
        groups: int,
    ) -> None:
        super().__init__()
        self.nd = nd
        self.stride = tuple(stride)
        self.pad_spec = padding
        self.dilation = tuple(dilation)
        self.groups = groups

    def forward(self, x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
        fn = (PF.conv1d, PF.conv2d, PF.conv3d)[self.nd - 1]
        return fn(x, weight, bias, self.stride, self.pad_spec, self.dilation, self.groups)

    def extra_repr(self) -> str:
        return (
            f"stride={self.stride}, padding={self.pad_spec.describe()}, "
            f"dilation={self.dilation}, groups={self.groups}"
        )


def transpose_pads(
    n: Sequence[int],
    k: Sequence[int],
    s: Sequence[int],
    d: Sequence[int],
    output_padding: Sequence[int],
    pads: Sequence[tuple[int, int]],
    auto_pad: str,
    output_shape: Sequence[int] | None,
) -> tuple[tuple[tuple[int, int], ...], tuple[int, ...]]:
    """ONNX ``ConvTranspose`` crops ``(lo, hi)`` of the full output and the output padding.

    The full output is ``(n-1)*s + k_eff``; ``output_padding`` extends it at the end, then
    ``(lo, hi)`` are cropped. With ``output_shape`` the crop total is
    ``full + output_padding - output_shape``, split with the extra pixel at the end for
    ``SAME_UPPER`` and at the start otherwise (the spec's "else" branch); a negative
    total extends the end (as onnxruntime does). ``SAME_*`` without ``output_shape`` crops
    ``max(output_padding + k_eff - s, 0)`` so that the output is ``n*s`` (onnxruntime and
    the reference implementation; pads cannot be negative, so ``k_eff + output_padding
    < s`` keeps the full output).
    """
    crops: list[tuple[int, int]] = []
    ops: list[int] = []
    for i in range(len(k)):
        k_eff = d[i] * (k[i] - 1) + 1
        full = (n[i] - 1) * s[i] + k_eff + output_padding[i]
        if output_shape is not None:
            total = full - output_shape[i]
        elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            total = max(output_padding[i] + k_eff - s[i], 0)
        else:
            crops.append(pads[i])
            ops.append(output_padding[i])
            continue
        if total < 0:
            lo, hi = 0, total
        elif auto_pad == "SAME_UPPER":
            lo, hi = total // 2, total - total // 2
        else:
            lo, hi = total - total // 2, total // 2
        op = output_padding[i]
        if hi < 0:  # extend the end: padkit expresses that as more output padding
            op, hi = op - hi, 0
        crops.append((lo, hi))
        ops.append(op)
    return tuple(crops), tuple(ops)


class DynamicConvTranspose(nn.Module):
    """An ONNX ``ConvTranspose`` whose crops depend on the input size or whose weight is a
    call input (the weight and bias parameters are used when not passed)."""

    def __init__(
        self,
        nd: int,
        stride: Sequence[int],
        dilation: Sequence[int],
        groups: int,
        output_padding: Sequence[int],
        pads: Sequence[tuple[int, int]],
        auto_pad: str,
        output_shape: Sequence[int] | None,
        weight: Tensor | None = None,
        bias: Tensor | None = None,
    ) -> None:
        super().__init__()
        self.nd = nd
        self.stride = tuple(stride)
        self.dilation = tuple(dilation)
        self.groups = groups
        self.output_padding = tuple(output_padding)
        self.pads = tuple(pads)
        self.auto_pad = auto_pad
        self.output_shape = None if output_shape is None else tuple(output_shape)
        self.weight = None if weight is None else nn.Parameter(weight)
        self.bias = None if bias is None else nn.Parameter(bias)

    def forward(
        self, x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None
    ) -> Tensor:
        w = self.weight if weight is None else weight
        b = self.bias if bias is None else bias
        if w is None:
            raise PaddingError("ConvTranspose: no weight given")
        k = tuple(int(v) for v in w.shape[2:])
        n = tuple(int(v) for v in x.shape[2:])
        crops, op = transpose_pads(
            n,
            k,
            self.stride,
            self.dilation,
            self.output_padding,
            self.pads,
            self.auto_pad,
            self.output_shape,
        )
        fn = (PF.conv_transpose1d, PF.conv_transpose2d, PF.conv_transpose3d)[self.nd - 1]
        return fn(x, w, b, self.stride, crops, op, self.groups, self.dilation)

    def extra_repr(self) -> str:
        return (
            f"stride={self.stride}, dilation={self.dilation}, groups={self.groups}, "
            f"pads={self.pads}, auto_pad={self.auto_pad!r}, output_padding="
            f"{self.output_padding}, output_shape={self.output_shape}"
        )


# ----------------------------------------------------------------------------- pooling


class MaxPoolIndices(nn.Module):
    """ONNX ``MaxPool`` with its ``Indices`` output (flat over the whole input tensor,
    row-major, or column-major over the spatial axes with ``storage_order=1``)."""

    def __init__(self, pool: nn.Module, storage_order: int) -> None:
        super().__init__()
        self.pool = pool
        self.storage_order = storage_order

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        y, idx = self.pool(x)
        spatial = [int(v) for v in x.shape[2:]]
        plane = math.prod(spatial)
        if self.storage_order:
            coords = []
            rem = idx
            for size in reversed(spatial):
                coords.append(torch.remainder(rem, size))
                rem = torch.div(rem, size, rounding_mode="floor")
            coords.reverse()  # row-major coordinates, now recombine column-major
            flat = torch.zeros_like(idx)
            for c, size in zip(reversed(coords), reversed(spatial)):
                flat = flat * size + c
            idx = flat
        batch, channels = x.shape[0], x.shape[1]
        offset = torch.arange(batch * channels, dtype=idx.dtype, device=idx.device).view(
            batch, channels, *([1] * len(spatial))
        )
        return y, idx + offset * plane


class AbsLPPool(nn.Module):
    """ONNX ``LpPool``: ``(sum |x|**p)**(1/p)`` per window (a padkit LP pool of ``|x|``)."""

    def __init__(self, pool: nn.Module) -> None:
        super().__init__()
        self.pool = pool

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.pool(x.abs())
        return out


class LocalResponseNorm(nn.Module):
    """ONNX ``LRN``: the channel window is ``[c - (size-1)//2, c + ceil((size-1)/2)]``
    (torch's ``LocalResponseNorm`` puts the extra channel of an even ``size`` first)."""

    def __init__(self, size: int, alpha: float, beta: float, bias: float) -> None:
        super().__init__()
        self.size = size
        self.alpha = alpha
        self.beta = beta
        self.bias = bias

    def forward(self, x: Tensor) -> Tensor:
        n, c = x.shape[0], x.shape[1]
        sq = (x * x).reshape(n, 1, c, -1)
        lo = (self.size - 1) // 2
        hi = self.size - 1 - lo
        sq = F.pad(sq, (0, 0, lo, hi))
        avg = F.avg_pool2d(sq, (self.size, 1), stride=1).reshape(x.shape)
        return x / (self.bias + self.alpha * avg).pow(self.beta)

    def extra_repr(self) -> str:
        return f"size={self.size}, alpha={self.alpha}, beta={self.beta}, bias={self.bias}"


# ----------------------------------------------------------------------------- Pad


class OnnxPad(nn.Module):
    """ONNX ``Pad``: ``pads`` ``[x1_begin, x2_begin, ..., x1_end, ...]`` over ``axes`` (all
    axes by default); negative pads crop first; modes constant, reflect, edge, wrap.

    Runs :func:`padkit.functional.pad`; ``wrap`` pads larger than the axis wrap around
    repeatedly (onnxruntime and numpy do; torch's circular mode refuses).
    """

    def __init__(
        self,
        mode: str,
        pads: Sequence[int] | None = None,
        axes: Sequence[int] | None = None,
        value: float | None = None,
    ) -> None:
        super().__init__()
        self.mode = mode
        self.pads = None if pads is None else tuple(pads)
        self.axes = None if axes is None else tuple(axes)
        self.value = value

    def forward(
        self,
        x: Tensor,
        pads: Tensor | None = None,
        value: Tensor | None = None,
        axes: Tensor | None = None,
    ) -> Tensor:
        flat = as_ints(pads) if pads is not None else list(self.pads or ())
        ax = as_ints(axes) if axes is not None else self.axes
        rank = x.dim()
        ax_list = list(range(rank)) if ax is None else [a + rank if a < 0 else a for a in ax]
        if len(flat) != 2 * len(ax_list):
            raise PaddingError(
                f"Pad: pads {flat} must hold 2 values per padded axis ({len(ax_list)} axes, "
                f"input shape {tuple(x.shape)})"
            )
        pairs = [(0, 0)] * rank
        half = len(ax_list)
        for i, a in enumerate(ax_list):
            pairs[a] = (flat[i], flat[i + half])
        first = next((i for i, p in enumerate(pairs) if p != (0, 0)), rank)
        if first == rank:
            return x
        fill = self.value if value is None else scalar(value)
        kept = tuple(pairs[first:])
        if self.mode == "wrap" and any(
            max(lo, hi) > int(x.shape[first + i]) for i, (lo, hi) in enumerate(kept)
        ):
            return _wrap_pad(x, first, kept)
        if self.mode != "constant":
            if len(kept) <= 3:
                return PF.pad(x, kept, mode=self.mode)
            for i, pair in enumerate(kept):  # edge / reflect / wrap are separable per axis
                if pair != (0, 0):
                    moved = x.movedim(first + i, -1)
                    x = PF.pad(moved, (pair,), mode=self.mode).movedim(-1, first + i)
            return x
        if fill is not None and not x.dtype.is_floating_point:
            fill = int(fill)
        return PF.pad(x, kept, mode="constant", value=fill)

    def extra_repr(self) -> str:
        return f"mode={self.mode!r}, pads={self.pads}, axes={self.axes}, value={self.value}"


def _wrap_pad(x: Tensor, first: int, pairs: Sequence[tuple[int, int]]) -> Tensor:
    """Wrap padding of any size (crops first), by modular indexing."""
    for i, (lo, hi) in enumerate(pairs):
        axis = first + i
        n = int(x.shape[axis])
        cut_lo, cut_hi = max(-lo, 0), max(-hi, 0)
        x = x.narrow(axis, cut_lo, n - cut_lo - cut_hi)
        n = int(x.shape[axis])
        lo, hi = max(lo, 0), max(hi, 0)
        if lo or hi:
            index = torch.remainder(torch.arange(-lo, n + hi, device=x.device), n)
            x = x.index_select(axis, index)
    return x


# ----------------------------------------------------------------------------- Resize

_COORD_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nn",
    "tf_crop_and_resize",
)
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple")


class Resize(nn.Module):
    """ONNX ``Resize`` / ``Upsample`` (nearest, linear, cubic), separable per axis.

    ``nearest_mode="simple"`` is the legacy rule of ``Upsample`` and ``Resize-10``
    (floor, or ceil when downsampling), as onnxruntime implements it.
    """

    def __init__(
        self,
        mode: str,
        coordinate_mode: str,
        nearest_mode: str = "round_prefer_floor",
        cubic_coeff_a: float = -0.75,
        exclude_outside: int = 0,
        extrapolation_value: float = 0.0,
        axes: Sequence[int] | None = None,
        scales: Sequence[float] | None = None,
        sizes: Sequence[int] | None = None,
        roi: Sequence[float] | None = None,
    ) -> None:
        super().__init__()
        self.mode = mode
        self.coordinate_mode = coordinate_mode
        self.nearest_mode = nearest_mode
        self.cubic_coeff_a = cubic_coeff_a
        self.exclude_outside = exclude_outside
        self.extrapolation_value = extrapolation_value
        self.axes = None if axes is None else tuple(axes)
        self.scales = None if scales is None else tuple(float(v) for v in scales)
        self.sizes = None if sizes is None else tuple(int(v) for v in sizes)
        self.roi = None if roi is None else tuple(float(v) for v in roi)

    def forward(
        self,
        x: Tensor,
        scales: Tensor | None = None,
        sizes: Tensor | None = None,
        roi: Tensor | None = None,
    ) -> Tensor:
        rank = x.dim()
        axes = list(range(rank)) if self.axes is None else [a % rank for a in self.axes]
        sc = self.scales if scales is None else tuple(float(v) for v in scales.tolist())
        sz = self.sizes if sizes is None else tuple(as_ints(sizes))
        rois = self.roi if roi is None else tuple(float(v) for v in roi.reshape(-1).tolist())
        for j, axis in enumerate(axes):
            n = int(x.shape[axis])
            if sz:
                out = sz[j]
                scale = out / n
            elif sc:
                scale = sc[j]
                out = math.floor(n * scale)
            else:
                raise PaddingError("Resize: neither scales nor sizes given")
            start, end = 0.0, 1.0
            if rois and self.coordinate_mode == "tf_crop_and_resize":
                start, end = rois[j], rois[j + len(axes)]
                if not sz:
                    out = math.floor(n * (end - start) * scale)
            elif out == n and scale == 1.0:
                continue
            x = self._resize_axis(x, axis, n, out, scale, start, end)
        return x

    def _coords(self, n: int, out: int, scale: float, start: float, end: float) -> Tensor:
        """Source coordinate of every output position.

        ``length_resized`` is the integer output length, as the spec's text defines it and
        onnxruntime computes it (the reference implementation uses ``scale * n``).
        """
        i = torch.arange(out, dtype=torch.float64)
        length = out
        mode = self.coordinate_mode
        if mode == "half_pixel":
            return (i + 0.5) / scale - 0.5
        if mode == "half_pixel_symmetric":
            offset = n / 2 * (1 - out / (scale * n))
            return offset + (i + 0.5) / scale - 0.5
        if mode == "pytorch_half_pixel":
            if length == 1:
                return torch.zeros(out, dtype=torch.float64)
            return (i + 0.5) / scale - 0.5
        if mode == "align_corners":
            if length == 1:
                return torch.zeros(out, dtype=torch.float64)
            return i * (n - 1) / (length - 1)
        if mode == "asymmetric":
            return i / scale
        if mode == "tf_half_pixel_for_nn":
            return (i + 0.5) / scale
        if length == 1:  # tf_crop_and_resize
            return torch.full((out,), 0.5 * (start + end) * (n - 1), dtype=torch.float64)
        return start * (n - 1) + i * (end - start) * (n - 1) / (length - 1)

    def _resize_axis(
        self, x: Tensor, axis: int, n: int, out: int, scale: float, start: float, end: float
    ) -> Tensor:
        coords = self._coords(n, out, scale, start, end)
        outside = (coords < 0) | (coords > n - 1)
        if self.mode == "nearest":
            idx = self._nearest(coords, scale).clamp(0, n - 1)
            y = x.index_select(axis, idx.to(x.device))
        else:
            taps, weights = (
                self._linear(coords, n) if self.mode == "linear" else self._cubic(coords, n)
            )
            shape = [1] * x.dim()
            shape[axis] = out
            y = torch.zeros((), dtype=x.dtype, device=x.device)
            for t in range(taps.shape[1]):
                w = weights[:, t].to(x.dtype).view(shape).to(x.device)
                y = y + x.index_select(axis, taps[:, t].to(x.device)) * w
        if self.coordinate_mode == "tf_crop_and_resize" and bool(outside.any()):
            shape = [1] * x.dim()
            shape[axis] = out
            mask = outside.view(shape).to(y.device)
            y = torch.where(mask, torch.tensor(self.extrapolation_value, dtype=y.dtype), y)
        return y

    def _nearest(self, coords: Tensor, scale: float) -> Tensor:
        mode = self.nearest_mode
        if mode == "simple":
            rounded = torch.ceil(coords) if scale < 1 else torch.floor(coords)
        elif mode == "floor":
            rounded = torch.floor(coords)
        elif mode == "ceil":
            rounded = torch.ceil(coords)
        else:
            fl = torch.floor(coords)
            frac = coords - fl
            tie = frac == 0.5
            up = torch.where(frac > 0.5, fl + 1, fl)
            rounded = torch.where(tie, fl if mode == "round_prefer_floor" else fl + 1, up)
        return rounded.long()

    @staticmethod
    def _linear(coords: Tensor, n: int) -> tuple[Tensor, Tensor]:
        c = coords.clamp(0, n - 1)
        x0 = torch.floor(c)
        w1 = c - x0
        i0 = x0.long()
        i1 = (i0 + 1).clamp(max=n - 1)
        return torch.stack([i0, i1], 1), torch.stack([1 - w1, w1], 1)

    def _cubic(self, coords: Tensor, n: int) -> tuple[Tensor, Tensor]:
        a = self.cubic_coeff_a
        x0 = torch.floor(coords)
        t = coords - x0
        offsets = torch.tensor([-1.0, 0.0, 1.0, 2.0], dtype=torch.float64)
        dist = (t.unsqueeze(1) - offsets).abs()
        w = torch.where(
            dist <= 1,
            ((a + 2) * dist - (a + 3)) * dist * dist + 1,
            torch.where(dist < 2, ((a * dist - 5 * a) * dist + 8 * a) * dist - 4 * a, 0.0),
        )
        idx = x0.long().unsqueeze(1) + offsets.long()
        if self.exclude_outside:
            inside = (idx >= 0) & (idx <= n - 1)
            w = torch.where(inside, w, torch.zeros_like(w))
            w = w / w.sum(1, keepdim=True)
        return idx.clamp(0, n - 1), w

    def extra_repr(self) -> str:
        return (
            f"mode={self.mode!r}, coordinate_mode={self.coordinate_mode!r}, "
            f"nearest_mode={self.nearest_mode!r}, scales={self.scales}, sizes={self.sizes}"
        )
