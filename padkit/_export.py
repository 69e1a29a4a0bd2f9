"""ONNX export of padkit's conv, transposed-conv and pooling ops.

While ``torch.onnx.export`` runs (either exporter), the private ops of
:mod:`padkit.functional` hand over to this module (one flag check per call; eager,
``torch.compile`` and plain ``torch.export`` never come here). It writes each op as the
ONNX node that means exactly that, instead of tracing the eager execution plan (whose
crops, zero-extended kernels and residual pads would export as several nodes):

* zero padding becomes the node's own ``pads``: one ``Conv`` / ``ConvTranspose`` /
  ``MaxPool`` / ``AveragePool`` / ``LpPool``;
* ``reflect`` / ``replicate`` / ``circular`` become one ``Pad`` (``reflect`` / ``edge`` /
  ``wrap``) and the op;
* ``"same"`` / ``"same_lower"`` on a dynamic (symbolic) size becomes ``auto_pad``
  ``SAME_UPPER`` / ``SAME_LOWER`` where onnxruntime computes it exactly (dilation 1,
  kernel >= stride), else the pad arithmetic ``Shape -> Sub -> Mod -> Sub -> Div -> Sub
  -> Concat -> Pad`` and the op;
* pools always carry ``ceil_mode`` (and ``count_include_pad``); ``ceil_mode=1`` is
  written only where ONNX shape inference and onnxruntime both give torch's output
  size, otherwise the windows are written as explicit end pads;
* ``divisor_override`` and LP pooling with a ``p`` ONNX's ``LpPool`` cannot express
  (odd or fractional: padkit sums ``x**p``, ONNX sums ``|x|**p``) become window sums,
  ``AveragePool(count_include_pad=1)`` times the window size.

Under ``dynamo=True`` the nodes come from ``torch.onnx.ops.symbolic`` (with symbolic
output shapes); under ``dynamo=False`` from an ``autograd.Function`` whose ``symbolic``
writes the same nodes, while its ``forward`` runs padkit eagerly for the tracer.
What ONNX or onnxruntime cannot run exactly raises :class:`~padkit.PaddingError` at
export time.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from .op import Op, max_pad_fill
from .spec import Padding, PaddingError, pool_output_size

__all__ = ["all_static", "conv", "conv_transpose", "exporting", "pool", "static_shape"]

Pairs = tuple[tuple[int, int], ...]

_POOLS = ("max_pool", "avg_pool", "lp_pool")


# ----------------------------------------------------------------------------- detection


class _TorchFlags:
    """Stands in for torch's flag holders on a torch without them (asks torch.onnx)."""

    @property
    def in_onnx_export(self) -> bool:
        return bool(torch.onnx.is_in_onnx_export())

    _is_onnx_exporting = False


#: (torchscript GLOBALS, dynamo _flags) once torch.onnx is loaded
_FLAGS: tuple[Any, Any] | None = None
#: > 0 while padkit runs an op eagerly inside an export (the TorchScript tracer)
_SUSPENDED = 0


def _bind_flags() -> tuple[Any, Any] | None:
    # Export sets these flags, and export means torch.onnx is loaded: until then nothing
    # is imported (torch.onnx costs ~70 ms to import).
    global _FLAGS
    if "torch.onnx" not in sys.modules:
        return None
    try:
        from torch.onnx._internal.exporter import _flags
        from torch.onnx._internal.torchscript_exporter._globals import GLOBALS
    except ImportError:  # pragma: no cover - a torch without these modules
        _FLAGS = (_TorchFlags(), _TorchFlags())
        return _FLAGS
    _FLAGS = (GLOBALS, _flags)
    return _FLAGS


def exporting() -> bool:
    """Whether ``torch.onnx.export`` (TorchScript or dynamo) is tracing padkit right now.

    One cheap check on every padkit op call: two module attributes once torch.onnx is
    loaded, a dict lookup before.

    Example:
        >>> exporting()
        False
    """
    flags = _FLAGS or _bind_flags()
    if flags is None:
        return False
    return bool((flags[0].in_onnx_export or flags[1]._is_onnx_exporting) and not _SUSPENDED)


# dynamo (torch.compile, strict torch.export) evaluates this at trace time instead of
# tracing into sys.modules; the value is fixed for the duration of one trace
exporting._dynamo_marked_constant = True  # type: ignore[attr-defined]


def _torchscript() -> bool:
    return bool(_FLAGS is not None and _FLAGS[0].in_onnx_export)


class _Suspend:
    def __enter__(self) -> None:
        global _SUSPENDED
        _SUSPENDED += 1

    def __exit__(self, *exc: object) -> None:
        global _SUSPENDED
        _SUSPENDED -= 1


# ----------------------------------------------------------------------------- graph builders


class _Builder:
    """Writes ONNX nodes; ``shape`` is the output shape (used by the dynamo builder)."""

    #: the opset the nodes are written at (None: unknown, nothing checked)
    opset: int | None = None
    #: the layer or function being lowered, for error messages
    fname: str = "padkit"

    def node(
        self,
        op_type: str,
        inputs: Sequence[Any],
        attrs: dict[str, Any],
        shape: Sequence[Any],
        dtype: torch.dtype,
    ) -> Any:
        """One ONNX node, after checking that the opset has it with these attributes."""
        attrs = self._check(op_type, attrs, dtype)
        return self._write(op_type, inputs, attrs, shape, dtype)

    def _check(self, op_type: str, attrs: dict[str, Any], dtype: torch.dtype) -> dict[str, Any]:
        """The opset check every lowering path goes through; returns the attributes to
        write (``LpPool`` below opset 18 has no ``ceil_mode``: a 0 is left out)."""
        dilated = any(int(v) != 1 for v in attrs.get("dilations", ()))
        if op_type == "AveragePool" and dilated:
            self.need_opset(19, "an average pool with dilation (AveragePool dilations)")
        if op_type == "LpPool":
            if dilated:
                self.need_opset(18, "an LP pool with dilation (LpPool dilations)")
            if attrs.get("ceil_mode", 0):
                self.need_opset(18, "an LP pool with ceil_mode (LpPool ceil_mode)")
            if self.opset is not None and self.opset < 18:
                attrs = {k: v for k, v in attrs.items() if k not in ("ceil_mode", "dilations")}
        if op_type == "Pad" and attrs.get("mode") == "wrap":
            self.need_opset(19, "circular padding (Pad mode 'wrap')")
        if op_type == "Shape" and "start" in attrs:
            self.need_opset(15, "a pad computed from a dynamic size (Shape start)")
        if op_type in ("Max", "Min") and not dtype.is_floating_point:
            self.need_opset(12, "a pad computed from a dynamic size (integer Max/Min)")
        return attrs

    def _write(
        self,
        op_type: str,
        inputs: Sequence[Any],
        attrs: dict[str, Any],
        shape: Sequence[Any],
        dtype: torch.dtype,
    ) -> Any:
        raise NotImplementedError

    def spatial_shape(self, x: Any, nd: int) -> Any:
        """The ``nd`` spatial sizes of ``x`` as an int64 vector (``Shape(start=2)`` from
        opset 15, ``Shape`` then ``Slice`` before)."""
        i64 = torch.int64
        if self.opset is None or self.opset >= 15:
            return self.node("Shape", [x], {"start": 2}, [nd], i64)
        full = self.node("Shape", [x], {}, [nd + 2], i64)
        return self.node(
            "Slice", [full, self.ints([2]), self.ints([nd + 2]), self.ints([0])], {}, [nd], i64
        )

    def ints(self, values: Sequence[int]) -> Any:
        raise NotImplementedError

    def scalar(self, value: float, dtype: torch.dtype) -> Any:
        raise NotImplementedError

    def mul(self, y: Any, c: float, dtype: torch.dtype) -> Any:
        raise NotImplementedError

    def pow(self, y: Any, p: float, dtype: torch.dtype) -> Any:
        raise NotImplementedError

    def need_opset(self, version: int, what: str) -> None:
        if self.opset is not None and self.opset < version:
            raise PaddingError(
                f"{self.fname}(): ONNX export of {what} needs opset_version >= {version}, "
                f"got opset_version={self.opset}"
            )


def _dynamo_opset() -> int | None:
    """The opset the dynamo exporter writes padkit's nodes at: the requested
    ``opset_version``, at least torchlib's (18; the exporter converts down afterwards, or
    keeps 18 where it cannot). torch keeps the request in ``export_compat``'s frame
    only; None (nothing checked) where that frame is not found."""
    frame: Any = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "export_compat" and code.co_filename.endswith("_compat.py"):
            v = frame.f_locals.get("opset_version")
            if isinstance(v, int):
                try:
                    from torch.onnx._internal.exporter._constants import TORCHLIB_OPSET
                except ImportError:  # pragma: no cover - a torch without it
                    TORCHLIB_OPSET = 18
                return max(v, int(TORCHLIB_OPSET))
            return None
        frame = frame.f_back
    return None


class _DynamoBuilder(_Builder):
    def __init__(self) -> None:
        self.opset = _dynamo_opset()

    def _write(
        self,
        op_type: str,
        inputs: Sequence[Any],
        attrs: dict[str, Any],
        shape: Sequence[Any],
        dtype: torch.dtype,
    ) -> Any:
        return torch.onnx.ops.symbolic(op_type, list(inputs), attrs, dtype=dtype, shape=shape)

    def ints(self, values: Sequence[int]) -> Any:
        return torch.tensor(list(values), dtype=torch.int64)

    def scalar(self, value: float, dtype: torch.dtype) -> Any:
        return torch.tensor(value, dtype=dtype)

    def mul(self, y: Any, c: float, dtype: torch.dtype) -> Any:
        return y * c

    def pow(self, y: Any, p: float, dtype: torch.dtype) -> Any:
        return torch.pow(y, p)


class _TorchScriptBuilder(_Builder):
    def __init__(self, g: Any) -> None:
        from torch.onnx._internal.torchscript_exporter._globals import GLOBALS

        self.g = g
        self.opset = int(GLOBALS.export_onnx_opset_version)
        self.need_opset(11, "padkit layers")

    def _write(
        self,
        op_type: str,
        inputs: Sequence[Any],
        attrs: dict[str, Any],
        shape: Sequence[Any],
        dtype: torch.dtype,
    ) -> Any:
        kw: dict[str, Any] = {}
        for key, v in attrs.items():
            if isinstance(v, str):
                kw[key + "_s"] = v
            elif isinstance(v, float):
                kw[key + "_f"] = v
            elif isinstance(v, (list, tuple)):
                kw[key + "_i"] = [int(t) for t in v]
            else:
                kw[key + "_i"] = int(v)
        return self.g.op(op_type, *inputs, **kw)

    def ints(self, values: Sequence[int]) -> Any:
        return self.g.op("Constant", value_t=torch.tensor(list(values), dtype=torch.int64))

    def scalar(self, value: float, dtype: torch.dtype) -> Any:
        return self.g.op("Constant", value_t=torch.tensor(value, dtype=dtype))

    def mul(self, y: Any, c: float, dtype: torch.dtype) -> Any:
        return self.g.op("Mul", y, self.scalar(c, dtype))

    def pow(self, y: Any, p: float, dtype: torch.dtype) -> Any:
        return self.g.op("Pow", y, self.scalar(p, dtype))


# ----------------------------------------------------------------------------- the op


@dataclass(frozen=True)
class _Op:
    """Everything the lowering needs, checked; ``eager`` runs padkit for the tracer."""

    kind: str
    fname: str
    nd: int
    spec: Padding
    k: tuple[int, ...]
    s: tuple[int, ...]
    d: tuple[int, ...]
    dtype: torch.dtype
    eager: Callable[[Tensor, Tensor | None, Tensor | None], Tensor] = field(compare=False)
    groups: int = 1
    modes: tuple[str, ...] = ()
    crops: Pairs = ()
    output_padding: tuple[int, ...] = ()
    ceil: bool = False
    count_include_pad: bool = True
    divisor: int | None = None
    p: float = 2.0
    #: what a max pool pads with (padkit.op.lowest_value of the input, or its padding_value)
    lowest: float = -math.inf
    #: a max pool's pads hold a chosen padding_value (an explicit Pad with it, no own pads)
    valued: bool = False

    @property
    def k_eff(self) -> tuple[int, ...]:
        return tuple(dd * (kk - 1) + 1 for kk, dd in zip(self.k, self.d))


def _is_static(n: Any) -> bool:
    return isinstance(n, int)


def _ceil_div(n: Any, s: int) -> Any:
    return None if n is None else (n + s - 1) // s


@dataclass
class _Axes:
    """Per axis: static ``(lo, hi)`` pads, or the ``same``/``same_lower`` rule of a
    dynamic axis (pads computed in the graph)."""

    pairs: list[tuple[int, int]]
    dyn: list[str | None]

    @property
    def any_dyn(self) -> bool:
        return any(r is not None for r in self.dyn)


def _axes(op: _Op, sizes: Sequence[Any]) -> _Axes:
    spec = op.spec
    pairs: list[tuple[int, int]] = []
    dyn: list[str | None] = []
    plain = Padding(spec.axes) if spec.ceil_mode else spec
    for i, rule in enumerate(spec.axes):
        k, s, d, n = op.k[i], op.s[i], op.d[i], sizes[i]
        static = _is_static(n)
        if spec.ceil_mode and op.kind not in _POOLS and s > 1:
            if not static:
                raise PaddingError(
                    f"{op.fname}(): padding {spec.describe()} on axis {i} depends on the input "
                    "size, which is dynamic in this export; export with a static size there"
                )
            pairs.append(spec._resolve_axis(i, rule, k, s, d, n))
            dyn.append(None)
            continue
        if rule in ("same", "same_lower") and s > 1 and not static:
            pairs.append((0, 0))
            dyn.append(str(rule))
            continue
        src = plain if op.kind in _POOLS else spec
        pairs.append(src._resolve_axis(i, rule, k, s, d, n if static else None))
        dyn.append(None)
    if op.kind in _POOLS and spec.ceil_mode:
        _check_caffe(op, sizes, pairs)
    for i, ((lo, hi), n, ke) in enumerate(zip(pairs, sizes, op.k_eff)):
        if dyn[i] is None and _is_static(n) and n + lo + hi < ke:
            raise PaddingError(
                f"{op.fname}(): along spatial axis {i} the padded input ({n} + {lo} + {hi} = "
                f"{n + lo + hi}) is smaller than the effective kernel ({ke})"
            )
    return _Axes(pairs, dyn)


def _check_caffe(op: _Op, sizes: Sequence[Any], pairs: Sequence[tuple[int, int]]) -> None:
    for i, (n, (lo, _), ke, s) in enumerate(zip(sizes, pairs, op.k_eff, op.s)):
        if lo == 0 and s > 1 and _is_static(n) and -(-(n - ke) // s) * s >= n:
            raise PaddingError(
                f"{op.fname}(): Caffe ceil rounding without padding puts the last window on "
                f"axis {i} outside the input (Caffe computes -FLT_MAX there); padkit refuses "
                "to approximate it"
            )


def _auto_pad(op: _Op, axes: _Axes) -> str | None:
    """``SAME_UPPER``/``SAME_LOWER`` where onnxruntime computes this op's pads exactly."""
    if not axes.any_dyn or op.spec.ceil_mode or op.spec.pre is not None:
        return None
    rules = set(op.spec.axes)
    if len(rules) != 1 or next(iter(rules)) not in ("same", "same_lower"):
        return None
    # onnxruntime refuses (conv) or mis-sizes (pools) SAME_* with dilation; with a kernel
    # smaller than the stride its pools compute negative pads
    if any(dd != 1 for dd in op.d) or any(ke < ss for ke, ss in zip(op.k_eff, op.s)):
        return None
    if op.modes and any(m != "zeros" for m in op.modes):
        return None
    return "SAME_UPPER" if op.spec.axes[0] == "same" else "SAME_LOWER"


def _same_total(n: Any, ke: int, s: int) -> Any:
    """TF SAME total pad for a (symbolic) size, written without guards."""
    total = ke - 1 - (n - 1) % s
    return total if ke >= s else torch.sym_max(total, 0)


def _dynamic_pad(
    b: _Builder,
    op: _Op,
    x: Any,
    axes: _Axes,
    sizes: Sequence[Any],
    lead: Sequence[Any],
    mode: str,
    value: float,
) -> tuple[Any, list[Any]]:
    """``Pad`` of the dynamic ``same`` axes, its pads computed from ``Shape``."""
    nd = op.nd
    flavours = {r for r in axes.dyn if r is not None}
    if len(flavours) != 1:
        raise PaddingError(
            f"{op.fname}(): padding {op.spec.describe()} mixes 'same' and 'same_lower' on "
            "dynamic axes, which padkit does not export; export with static sizes"
        )
    upper = flavours == {"same"}
    dyn = [r is not None for r in axes.dyn]
    km1 = [op.k_eff[i] - 1 if dyn[i] else 0 for i in range(nd)]
    strides = [op.s[i] if dyn[i] else 1 for i in range(nd)]
    i64 = torch.int64
    # static pads before the rule (Padding.pre): the rule resolves on the padded size
    pre = [op.spec.pre[i] if dyn[i] and op.spec.pre is not None else (0, 0) for i in range(nd)]
    shp = b.spatial_shape(x, nd)
    rem = b.node(
        "Mod",
        [b.node("Sub", [shp, b.ints([1 - a - c for a, c in pre])], {}, [nd], i64), b.ints(strides)],
        {},
        [nd],
        i64,
    )
    total = b.node("Sub", [b.ints(km1), rem], {}, [nd], i64)
    if any(dyn[i] and op.k_eff[i] < op.s[i] for i in range(nd)):
        total = b.node("Max", [total, b.ints([0])], {}, [nd], i64)
    small = b.node("Div", [total, b.ints([2])], {}, [nd], i64)
    big = b.node("Sub", [total, small], {}, [nd], i64)
    lo, hi = (small, big) if upper else (big, small)
    if any(p != (0, 0) for p in pre):
        lo = b.node("Add", [lo, b.ints([a for a, _ in pre])], {}, [nd], i64)
        hi = b.node("Add", [hi, b.ints([c for _, c in pre])], {}, [nd], i64)
    pads = b.node(
        "Concat", [b.ints([0, 0]), lo, b.ints([0, 0]), hi], {"axis": 0}, [2 * nd + 4], i64
    )
    new_sizes = [
        (
            None
            if n is None
            else n + sum(pre[i]) + _same_total(n + sum(pre[i]), op.k_eff[i], op.s[i])
        )
        if dyn[i]
        else n
        for i, n in enumerate(sizes)
    ]
    inputs = [x, pads]
    if mode == "constant" and value != 0.0:
        inputs.append(b.scalar(value, op.dtype))
    out = b.node("Pad", inputs, {"mode": mode}, [*lead, *new_sizes], op.dtype)
    return out, new_sizes


def _const_pad(
    b: _Builder,
    op: _Op,
    x: Any,
    pairs: Sequence[tuple[int, int]],
    sizes: Sequence[Any],
    lead: Sequence[Any],
    mode: str,
    value: float,
) -> tuple[Any, list[Any]]:
    """One ``Pad`` with constant pads (``mode``: constant, reflect, edge or wrap)."""
    if mode == "wrap":
        b.need_opset(19, "circular padding (Pad mode 'wrap')")
    for i, ((lo, hi), n) in enumerate(zip(pairs, sizes)):
        if _is_static(n) and mode == "reflect" and max(lo, hi) >= n:
            raise PaddingError(
                f"{op.fname}(): reflect padding {(lo, hi)} on axis {i} needs pads smaller "
                f"than the input size there ({n})"
            )
        if _is_static(n) and mode == "wrap" and max(lo, hi) > n:
            raise PaddingError(
                f"{op.fname}(): circular padding {(lo, hi)} on axis {i} needs pads no larger "
                f"than the input size there ({n})"
            )
    los = [lo for lo, _ in pairs]
    his = [hi for _, hi in pairs]
    inputs = [x, b.ints([0, 0, *los, 0, 0, *his])]
    if mode == "constant" and value != 0.0:
        inputs.append(b.scalar(value, op.dtype))
    new_sizes = [None if n is None else n + lo + hi for n, (lo, hi) in zip(sizes, pairs)]
    return b.node("Pad", inputs, {"mode": mode}, [*lead, *new_sizes], op.dtype), new_sizes


_ONNX_MODE = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _out_size(n: Any, k: int, s: int, d: int, lo: int, hi: int) -> Any:
    if n is None:
        return None
    return (n + lo + hi - (d * (k - 1) + 1)) // s + 1


# ----------------------------------------------------------------------------- conv


def _emit_conv(
    b: _Builder, op: _Op, x: Any, w: Any, bias: Any, sizes: Sequence[Any], lead: list[Any]
) -> Any:
    nd = op.nd
    axes = _axes(op, sizes)
    attrs: dict[str, Any] = {
        "kernel_shape": list(op.k),
        "strides": list(op.s),
        "dilations": list(op.d),
        "group": op.groups,
    }
    tail = [w] if bias is None else [w, bias]
    auto = _auto_pad(op, axes)
    if auto is not None:
        attrs["auto_pad"] = auto
        out = [_ceil_div(n, s) for n, s in zip(sizes, op.s)]
        return b.node("Conv", [x, *tail], attrs, [lead[0], lead[2], *out], op.dtype)
    modes = op.modes
    cur, cur_sizes = x, list(sizes)
    pad_lead = lead[:2]
    lead = [lead[0], lead[2]]
    # non-zero modes first, in axis order (one Pad when those axes share one mode)
    moded = [
        i
        for i in range(nd)
        if modes[i] != "zeros" and axes.dyn[i] is None and axes.pairs[i] != (0, 0)
    ]
    batches = [moded] if len({modes[i] for i in moded}) == 1 else [[i] for i in moded]
    for batch in batches:
        pp = [axes.pairs[i] if i in batch else (0, 0) for i in range(nd)]
        mode = _ONNX_MODE[modes[batch[0]]]
        cur, cur_sizes = _const_pad(b, op, cur, pp, cur_sizes, pad_lead, mode, 0.0)
    if axes.any_dyn:
        dyn_modes = {modes[i] for i in range(nd) if axes.dyn[i] is not None}
        if len(dyn_modes) > 1:
            raise PaddingError(
                f"{op.fname}(): padding_mode {modes!r} differs between axes whose 'same' "
                "padding is dynamic in this export; export with static sizes"
            )
        mode = next(iter(dyn_modes))
        onnx_mode = "constant" if mode == "zeros" else _ONNX_MODE[mode]
        cur, cur_sizes = _dynamic_pad(b, op, cur, axes, cur_sizes, pad_lead, onnx_mode, 0.0)
    conv_pairs = [
        axes.pairs[i] if modes[i] == "zeros" and axes.dyn[i] is None else (0, 0) for i in range(nd)
    ]
    attrs["pads"] = [lo for lo, _ in conv_pairs] + [hi for _, hi in conv_pairs]
    out = [
        _out_size(n, k, s, d, lo, hi)
        for n, k, s, d, (lo, hi) in zip(cur_sizes, op.k, op.s, op.d, conv_pairs)
    ]
    return b.node("Conv", [cur, *tail], attrs, [*lead, *out], op.dtype)


# ----------------------------------------------------------------------------- transposed


def _emit_conv_transpose(
    b: _Builder, op: _Op, x: Any, w: Any, bias: Any, sizes: Sequence[Any], lead: list[Any]
) -> Any:
    begins: list[int] = []
    ends: list[int] = []
    extra: list[int] = []
    out: list[Any] = []
    for i, ((lo, hi), o) in enumerate(zip(op.crops, op.output_padding)):
        end = hi - o
        if lo < 0:
            raise PaddingError(f"{op.fname}(): a transposed conv cannot crop {lo} at the start")
        pe, oo = (hi, o) if hi >= 0 else (0, -end)
        if oo >= max(op.s[i], op.d[i]):
            raise PaddingError(
                f"{op.fname}(): extending the output by {oo} on axis {i} exceeds what a "
                f"transposed conv with stride {op.s[i]} and dilation {op.d[i]} can produce"
            )
        begins.append(lo)
        ends.append(pe)
        extra.append(oo)
        n = sizes[i]
        size = None if n is None else (n - 1) * op.s[i] + op.k_eff[i] + oo - lo - pe
        if isinstance(size, int) and size <= 0:
            raise PaddingError(f"{op.fname}(): the crops {op.crops[i]} leave no output on axis {i}")
        out.append(size)
    attrs: dict[str, Any] = {
        "kernel_shape": list(op.k),
        "strides": list(op.s),
        "dilations": list(op.d),
        "group": op.groups,
        "pads": begins + ends,
        "output_padding": extra,
    }
    tail = [w] if bias is None else [w, bias]
    return b.node("ConvTranspose", [x, *tail], attrs, [lead[0], lead[2], *out], op.dtype)


# ----------------------------------------------------------------------------- pools


def _pool_out(n: int, ke: int, s: int, lo: int, hi: int, ceil: bool) -> tuple[int, int]:
    """(ONNX shape inference's count, onnxruntime's = torch's count) for one axis."""
    span = n + lo + hi - ke
    naive = (-(-span // s) if ceil else span // s) + 1
    runtime = naive
    if ceil and (naive - 1) * s >= n + lo:
        runtime -= 1
    return naive, runtime


def _axis_counts(n: int, k: int, s: int, d: int, lo: int, hi: int, out: int) -> list[int]:
    """Window sizes counted by an average with count_include_pad=1 (the ceil overhang,
    past ``n + hi``, never counts)."""
    return [sum(1 for t in range(k) if -lo <= o * s - lo + t * d < n + hi) for o in range(out)]


def _sym_pool_out(n: Any, ke: int, s: int, lo: int, hi: int, ceil: bool) -> Any:
    """torch's pool output length (:func:`~padkit.spec.pool_output_size`) for a size that
    may be symbolic: the ceil-mode drop is written with ``sym_min``/``sym_max``, so no
    guard specialises the export; None for a size the exporter does not know."""
    if n is None:
        return None
    if _is_static(n):
        return pool_output_size(n, ke, s, 1, lo, hi, ceil)
    span = n + lo + hi - ke
    if not ceil:
        return span // s + 1
    before = (span + s - 1) // s  # out - 1 before the drop
    drop = torch.sym_min(torch.sym_max(before * s - n - lo + 1, 0), 1)
    return before + 1 - drop


def _sizes_to_check(op: _Op, i: int, n: Any, lo: int, hi: int) -> list[int]:
    """The sizes an axis's ONNX form is checked at: ``n`` itself when static; for a
    dynamic size, every size from the smallest the op accepts over a range that proves
    the form for all sizes. Every quantity checked (torch's and ONNX's window counts, the
    windows' divisors) is periodic in the size: ``n + s`` has one window more than ``n``,
    added at the start of the list of full windows, as soon as the first window is full,
    which holds from the smallest accepted size on; the range below spans several
    periods past the sizes where a pad smaller than the kernel may not fit."""
    if _is_static(n):
        return [int(n)]
    ke, s = op.k_eff[i], op.s[i]
    first = max(1, ke - lo - hi)
    return list(range(first, first + 2 * (lo + hi + ke) + 3 * s))


@dataclass(frozen=True)
class _AxisCfg:
    attr: tuple[int, int]  # the pool's own pads
    pre: tuple[int, int] | None  # a constant Pad before the pool, or None
    #: a Pad before the pool whose start is ``pre[0]`` and whose end is computed in the
    #: graph from the (dynamic) size: the input then ends where torch's last window ends
    graph: bool = False


def _axis_cfg(
    op: _Op, i: int, n: Any, lo: int, hi: int, ceil: int, sem: str, pre: bool
) -> _AxisCfg | None:
    """Pads for one axis, given the pool's ``ceil_mode`` attribute ``ceil``.

    ``sem`` says what must stay equal besides the windows: ``window`` (max, LpPool and
    count_include_pad=0: the in-input taps of each window), ``incl`` (also the
    count_include_pad=1 divisor) or ``sum`` (an AveragePool whose every divisor is the
    full window: the window-sum lowering). A dynamic ``n`` gets constant pads only where
    they are exact at every size (:func:`_sizes_to_check`), else (an explicit Pad
    allowed) an end pad computed in the graph.
    """
    k, s, d, ke = op.k[i], op.s[i], op.d[i], op.k_eff[i]
    ns = _sizes_to_check(op, i, n, lo, hi)
    outs = [pool_output_size(m, k, s, d, lo, hi, op.ceil) for m in ns]
    fulls = [[k] * o for o in outs]
    wants = [_axis_counts(m, k, s, d, lo, hi, o) for m, o in zip(ns, outs)]

    def own_pads_fit(h: int) -> bool:
        for m, o, want, full in zip(ns, outs, wants, fulls):
            if m + lo + h < ke or _pool_out(m, ke, s, lo, h, bool(ceil)) != (o, o):
                return False
            if sem in ("incl", "sum"):
                counts = _axis_counts(m, k, s, d, lo, h, o)
                if counts != (want if sem == "incl" else full):
                    return False
        return True

    # onnxruntime: the pool's own pads must be smaller than the kernel
    if (sem != "sum" or ceil == 0) and lo < k:
        for h in dict.fromkeys([hi, *range(k)]):
            if 0 <= h < k and own_pads_fit(h):
                return _AxisCfg((lo, h), None)
    # pad explicitly: every window then lies in the padded input
    if not pre or (sem == "window" and op.kind == "avg_pool"):
        return None  # count_include_pad=0 would count the explicit pads
    if sem == "incl" and wants != fulls:
        return None  # a window overhangs the end pad: its divisor is not the window's
    lows = [max((o - 1) * s + ke - m - lo, 0) for m, o in zip(ns, outs)]
    # a sum or a count_include_pad=1 divisor needs every window inside the padded input
    # (a ceil-mode overhang past it would shrink the divisor)
    first = max(lows) if sem in ("sum", "incl") else min(lows)
    for h in range(first, max(lows) + s):
        if all(_pool_out(m + lo + h, ke, s, 0, 0, bool(ceil)) == (o, o) for m, o in zip(ns, outs)):
            return _AxisCfg((0, 0), (lo, h))
    if not _is_static(n):
        return _AxisCfg((0, 0), (lo, 0), graph=True)
    return None


def _end_pad(n: Any, ke: int, s: int, lo: int, hi: int, ceil: bool) -> Any:
    """The end pad (negative: a crop) after which the input ends where torch's last
    window ends: a pool without pads of its own then makes exactly torch's windows, in
    either ceil mode (the span is a multiple of the stride)."""
    o = _sym_pool_out(n, ke, s, lo, hi, ceil)
    return None if o is None else (o - 1) * s + ke - n - lo


def _graph_pad(
    b: _Builder,
    op: _Op,
    x: Any,
    cfgs: Sequence[_AxisCfg | None],
    axes: _Axes,
    sizes: Sequence[Any],
    lead: Sequence[Any],
    value: float,
) -> tuple[Any, list[Any]]:
    """One ``Pad`` before a pool: the constant pads of the other axes, and on each
    ``graph`` axis its start pad and an end pad up to where torch's last window ends,
    computed from the axis's size (``Shape``; torch's output-length formula). That end
    pad is negative (a crop of what no window reads) where the windows stop short of the
    input's end."""
    nd, i64 = op.nd, torch.int64
    g = [c is not None and c.graph for c in cfgs]
    pre = [c.pre if c is not None and c.pre is not None else (0, 0) for c in cfgs]
    # torch's pads, kernel and stride on the graph axes (harmless stand-ins elsewhere:
    # those entries are multiplied by 0)
    lo = [axes.pairs[i][0] if g[i] else 0 for i in range(nd)]
    hi = [axes.pairs[i][1] if g[i] else 0 for i in range(nd)]
    ke = [op.k_eff[i] if g[i] else 1 for i in range(nd)]
    st = [op.s[i] if g[i] else 1 for i in range(nd)]
    shape = [nd]

    def op2(kind: str, u: Any, v: Any) -> Any:
        return b.node(kind, [u, v], {}, shape, i64)

    n = b.spatial_shape(x, nd)
    adjust = [lo[i] + hi[i] - ke[i] + (st[i] - 1 if op.ceil else 0) for i in range(nd)]
    before = op2("Div", op2("Add", n, b.ints(adjust)), b.ints(st))  # out - 1
    if op.ceil:  # torch drops a last window that starts in the end pad
        late = op2(
            "Sub", op2("Mul", before, b.ints(st)), op2("Add", n, b.ints([v - 1 for v in lo]))
        )
        drop = op2("Min", op2("Max", late, b.ints([0])), b.ints([1]))
        before = op2("Sub", before, drop)
    end = op2(
        "Sub",
        op2("Add", op2("Mul", before, b.ints(st)), b.ints([ke[i] - lo[i] for i in range(nd)])),
        n,
    )
    end = op2("Mul", end, b.ints([int(v) for v in g]))
    end = op2("Add", end, b.ints([0 if g[i] else pre[i][1] for i in range(nd)]))
    pads = b.node(
        "Concat", [b.ints([0, 0, *[p[0] for p in pre], 0, 0]), end], {"axis": 0}, [2 * nd + 4], i64
    )
    inputs = [x, pads]
    if value != 0.0:
        inputs.append(b.scalar(value, op.dtype))
    new_sizes = [
        None
        if m is None
        else m
        + pre[i][0]
        + (_end_pad(m, op.k_eff[i], op.s[i], *axes.pairs[i], op.ceil) if g[i] else pre[i][1])
        for i, m in enumerate(sizes)
    ]
    out = b.node("Pad", inputs, {"mode": "constant"}, [*lead, *new_sizes], op.dtype)
    return out, new_sizes


def _emit_pool(b: _Builder, op: _Op, x: Any, sizes: Sequence[Any], lead: list[Any]) -> Any:
    lead = lead[:2]
    nd = op.nd
    axes = _axes(op, sizes)
    dtype = op.dtype
    kprod = math.prod(op.k)
    if op.kind == "lp_pool":
        if math.isinf(op.p):
            raise PaddingError(
                f"{op.fname}(): norm_type={op.p} has no ONNX form here (LpPool takes an "
                "integer p); export MaxPool of Abs (with zero pads) instead"
            )
        even = float(op.p).is_integer() and int(op.p) % 2 == 0
        sem = "window" if even else "sum"
    elif op.kind == "avg_pool":
        sem = "sum" if op.divisor is not None else ("incl" if op.count_include_pad else "window")
    else:
        sem = "window"
    node = {"max_pool": "MaxPool", "avg_pool": "AveragePool", "lp_pool": "LpPool"}[op.kind]
    if sem == "sum":
        node = "AveragePool"
    dilated = any(dd != 1 for dd in op.d)
    if dilated and node == "AveragePool":
        what = (
            "an LP pool with an odd or fractional p" if op.kind == "lp_pool" else "an average pool"
        )
        b.need_opset(19, f"{what} with dilation (AveragePool dilations)")
    if dilated and node == "LpPool":
        b.need_opset(18, "an LP pool with dilation (LpPool dilations)")
    value = op.lowest if op.kind == "max_pool" else 0.0
    cur = x
    if op.kind == "lp_pool" and sem == "sum":
        cur = b.pow(cur, float(op.p), dtype)
    attrs: dict[str, Any] = {"kernel_shape": list(op.k), "strides": list(op.s)}
    if dilated:
        attrs["dilations"] = list(op.d)
    if node == "AveragePool":
        attrs["count_include_pad"] = 1 if sem in ("sum", "incl") else 0
    if node == "LpPool":
        attrs["p"] = int(op.p)
    auto = None if op.valued else _auto_pad(op, axes)
    if op.valued and (axes.any_dyn or any(p != (0, 0) for p in axes.pairs)):
        out = _valued_max_pool(b, op, cur, axes, sizes, lead, attrs)
    elif auto is not None:
        attrs["auto_pad"] = auto
        attrs["ceil_mode"] = 0  # SAME windows fit exactly: nothing to round
        out = b.node(
            node, [cur], attrs, [*lead, *[_ceil_div(n, s) for n, s in zip(sizes, op.s)]], dtype
        )
    else:
        ceil, per_axis = _choose_cfgs(b, op, axes, sizes, sem, node)
        cur_sizes = list(sizes)
        pre = [c.pre if c is not None and c.pre is not None else (0, 0) for c in per_axis]
        if any(c is not None and c.graph for c in per_axis):
            cur, cur_sizes = _graph_pad(b, op, cur, per_axis, axes, cur_sizes, lead, value)
        elif any(p != (0, 0) for p in pre):
            cur, cur_sizes = _const_pad(b, op, cur, pre, cur_sizes, lead, "constant", value)
        if axes.any_dyn:
            if sem == "window" and op.kind == "avg_pool":
                raise PaddingError(
                    f"{op.fname}(): count_include_pad=False with padding "
                    f"{op.spec.describe()} on a dynamic size has no exact ONNX form here "
                    "(the pads are computed in the graph and an explicit Pad would count); "
                    "export with static sizes, or with dilation 1"
                )
            cur, cur_sizes = _dynamic_pad(b, op, cur, axes, cur_sizes, lead, "constant", value)
        pairs = [c.attr if c is not None else (0, 0) for c in per_axis]
        attrs["pads"] = [lo for lo, _ in pairs] + [hi for _, hi in pairs]
        attrs["ceil_mode"] = ceil
        out_sizes = [
            _ceil_div(sizes[i], op.s[i])
            if axes.dyn[i] is not None
            else _sym_pool_out(sizes[i], op.k_eff[i], op.s[i], *axes.pairs[i], op.ceil)
            for i in range(nd)
        ]
        out = b.node(node, [cur], attrs, [*lead, *out_sizes], dtype)
    if sem == "sum":
        scale = float(kprod) / float(op.divisor) if op.divisor is not None else float(kprod)
        if scale != 1.0:
            out = b.mul(out, scale, dtype)
        if op.kind == "lp_pool":
            out = b.pow(out, 1.0 / float(op.p), dtype)
    return out


def _valued_max_pool(
    b: _Builder,
    op: _Op,
    x: Any,
    axes: _Axes,
    sizes: Sequence[Any],
    lead: list[Any],
    attrs: dict[str, Any],
) -> Any:
    """A max pool whose pads hold ``padding_value``: one ``Pad`` with that value (static
    pads, and the TF ``same`` pads of dynamic axes computed in the graph), then a
    ``MaxPool`` without pads of its own (its pads would hold -inf)."""
    if op.ceil:
        raise PaddingError(
            f"{op.fname}(): padding_value={op.lowest} with ceil_mode has no exact ONNX form "
            "here (the ceil overhang must stay out of the windows while the pads count); "
            "export with ceil_mode=False or padding_value=-inf"
        )
    nd = op.nd
    pre = [axes.pairs[i] if axes.dyn[i] is None else (0, 0) for i in range(nd)]
    cur, cur_sizes = x, list(sizes)
    if any(p != (0, 0) for p in pre):
        cur, cur_sizes = _const_pad(b, op, cur, pre, cur_sizes, lead, "constant", op.lowest)
    if axes.any_dyn:
        cur, cur_sizes = _dynamic_pad(b, op, cur, axes, cur_sizes, lead, "constant", op.lowest)
    attrs["pads"] = [0] * (2 * nd)
    attrs["ceil_mode"] = 0
    out_sizes = [
        _ceil_div(sizes[i], op.s[i])
        if axes.dyn[i] is not None
        else _sym_pool_out(sizes[i], op.k_eff[i], op.s[i], *axes.pairs[i], False)
        for i in range(nd)
    ]
    return b.node("MaxPool", [cur], attrs, [*lead, *out_sizes], op.dtype)


def _choose_cfgs(
    b: _Builder, op: _Op, axes: _Axes, sizes: Sequence[Any], sem: str, node: str
) -> tuple[int, list[_AxisCfg | None]]:
    """The ``ceil_mode`` attribute and each axis's pads (None: a dynamic ``same`` axis)."""
    # the pool's own pads first (either ceil_mode), then an explicit Pad
    order = [(c, pre) for pre in (False, True) for c in ((1, 0) if op.ceil else (0, 1))]
    old_lp = node == "LpPool" and b.opset is not None and b.opset < 18  # no ceil_mode
    for ceil, pre in order:
        if ceil and old_lp:
            continue
        if ceil and any(axes.dyn[i] is not None and op.k_eff[i] < op.s[i] for i in range(op.nd)):
            continue
        per_axis: list[_AxisCfg | None] = []
        for i in range(op.nd):
            if axes.dyn[i] is not None:
                per_axis.append(None)
                continue
            cfg = _axis_cfg(op, i, sizes[i], *axes.pairs[i], ceil, sem, pre)
            if cfg is None:
                break
            per_axis.append(cfg)
        else:
            return ceil, per_axis
    dynamic = [i for i in range(op.nd) if not _is_static(sizes[i])]
    where = f", axes {dynamic} dynamic" if dynamic else ""
    raise PaddingError(
        f"{op.fname}(): padding {op.spec.describe()} (pads {axes.pairs}, ceil_mode={op.ceil}, "
        f"input {tuple(None if not _is_static(n) else n for n in sizes)}{where}) has no exact "
        "ONNX form: onnxruntime needs pads smaller than the kernel, and an explicit Pad "
        "would change the average's divisor" + ("; export with static sizes" if dynamic else "")
    )


# ----------------------------------------------------------------------------- dispatch


def _emit(
    b: _Builder, op: _Op, x: Any, w: Any, bias: Any, sizes: Sequence[Any], lead: list[Any]
) -> Any:
    b.fname = op.fname
    if op.kind == "conv":
        return _emit_conv(b, op, x, w, bias, sizes, lead)
    if op.kind == "conv_transpose":
        return _emit_conv_transpose(b, op, x, w, bias, sizes, lead)
    return _emit_pool(b, op, x, sizes, lead)


class _TorchScriptOp(torch.autograd.Function):
    """Under ``dynamo=False``: padkit runs eagerly for the tracer; ``symbolic`` writes
    the ONNX nodes."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, w: Tensor | None, bias: Tensor | None, op: _Op) -> Tensor:
        # the tracer records this Function as one node (written by ``symbolic``): run
        # padkit with tracing off, where sizes are plain ints again
        state = torch._C._get_tracing_state()
        torch._C._set_tracing_state(None)  # type: ignore[attr-defined]
        try:
            with _Suspend():
                out = op.eager(x, w, bias)
        finally:
            torch._C._set_tracing_state(state)  # type: ignore[attr-defined]
        return out.detach()

    @staticmethod
    def symbolic(g: Any, x: Any, w: Any, bias: Any, op: _Op) -> Any:
        from torch.onnx._internal.torchscript_exporter import symbolic_helper as sh

        full = sh._get_tensor_sizes(x)
        sizes = list(full[2:]) if full is not None else [None] * op.nd
        w = None if w is None or sh._is_none(w) else w
        bias = None if bias is None or sh._is_none(bias) else bias
        return _emit(_TorchScriptBuilder(g), op, x, w, bias, sizes, [None, None, None])


def _run(op: _Op, x: Tensor, w: Tensor | None, bias: Tensor | None, channels: int) -> Tensor:
    if _torchscript():
        out: Tensor = _TorchScriptOp.apply(x, w, bias, op)
        return out
    sizes = tuple(x.shape[2:])
    return _emit(_DynamoBuilder(), op, x, w, bias, sizes, [x.shape[0], x.shape[1], channels])  # type: ignore[no-any-return]


def _shape(t: Tensor) -> tuple[Any, ...]:
    """``t.shape``; plain ints under the TorchScript tracer (which hands out sizes as
    tensors)."""
    state: Any = torch._C._get_tracing_state()
    if state is None:
        return tuple(t.shape)
    torch._C._set_tracing_state(None)  # type: ignore[attr-defined]
    try:
        return tuple(int(v) for v in t.shape)
    finally:
        torch._C._set_tracing_state(state)  # type: ignore[attr-defined]


def weight_of(w: Tensor | None) -> Tensor:
    """The weight a conv's lowering always passes (the eager callables' type allows None)."""
    if w is None:  # pragma: no cover - only convs pass weights to their lowering
        raise TypeError("a conv lowering needs its weight")
    return w


def static_shape(t: Tensor) -> tuple[Any, ...]:
    """``t``'s shape with plain ints under the TorchScript tracer (see :func:`_shape`)."""
    return _shape(t)


def all_static(sizes: Sequence[Any]) -> bool:
    """Whether every size is a plain int (not dynamic in the export being traced)."""
    return all(_is_static(n) for n in sizes)


_KIND = {"conv": "conv", "conv_transpose": "conv_transpose"} | {
    k: f"{k}_pool" for k in ("max", "avg", "lp")
}

Eager = Callable[[Tensor, Tensor | None, Tensor | None], Tensor]


def _lowering(fname: str, rec: Op, x: Tensor, eager: Eager, **extra: Any) -> _Op:
    """The export lowering's view of a checked record."""
    modes = rec.padding_mode
    return _Op(
        _KIND[rec.kind],
        fname,
        rec.nd,
        rec.padding,
        rec.kernel,
        rec.stride,
        rec.dilation,
        x.dtype,
        eager,
        groups=rec.groups,
        modes=(modes,) * rec.nd if isinstance(modes, str) else tuple(modes),
        ceil=rec.ceil_mode or rec.padding.ceil_mode,
        count_include_pad=rec.count_include_pad,
        divisor=rec.divisor_override,
        p=rec.norm_type if rec.norm_type is not None else 2.0,
        lowest=max_pad_fill(x, rec.padding_value, where=f"{fname}()")
        if rec.kind == "max"
        else -math.inf,
        valued=rec.kind == "max" and not rec.neutral_pads,
        **extra,
    )


# ----------------------------------------------------------------------------- entry points
#
# padkit.functional checks its arguments into a record (padkit.op.Op) and hands it here with
# the batched input and an ``eager`` callable that runs padkit for the tracer.


def conv(
    fname: str, rec: Op, x: Tensor, weight: Tensor, bias: Tensor | None, eager: Eager
) -> Tensor:
    """``padkit.functional.conv{1,2,3}d`` under ONNX export."""
    return _run(_lowering(fname, rec, x, eager), x, weight, bias, _shape(weight)[0])


def conv_transpose(
    fname: str,
    rec: Op,
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    eager: Eager,
    crops: Pairs,
    output_padding: tuple[int, ...],
) -> Tensor:
    """``padkit.functional.conv_transpose{1,2,3}d`` under ONNX export."""
    op = _lowering(fname, rec, x, eager, crops=crops, output_padding=output_padding)
    return _run(op, x, weight, bias, _shape(weight)[1] * rec.groups)


def pool(fname: str, rec: Op, x: Tensor, eager: Eager) -> Tensor:
    """``padkit.functional`` max, average and LP pools under ONNX export."""
    if rec.return_indices:
        raise PaddingError(
            f"{fname}(): return_indices=True is not exported to ONNX by padkit (ONNX MaxPool "
            "indices count the padded batch and channel planes); export with "
            "return_indices=False"
        )
    return _run(_lowering(fname, rec, x, eager), x, None, None, _shape(x)[1])
