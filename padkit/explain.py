"""Where each output window sits over the padded input, under each framework's convention.

:func:`explain` lays out one axis (kernel, stride, dilation, input length) under TF/XLA
``SAME`` (= ONNX ``SAME_UPPER``), ONNX ``SAME_LOWER``, torch ``padding='same'``, torch's
symmetric ``(k_eff-1)//2``, Flux ``SamePad`` and Caffe's ceil rounding, and draws them
aligned on the same input positions, so that one sees where the odd pad pixel goes and
which inputs each output reads. Every pad comes from :mod:`padkit.spec`; this module only
draws. ``padkit explain`` on the command line prints it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .spec import Padding, PaddingError, conv_output_size, resolve_padding

__all__ = ["CONVENTIONS", "ConventionLayout", "Explanation", "explain", "parse_conventions"]

#: The conventions :func:`explain` knows, in the order it draws them.
CONVENTIONS: tuple[str, ...] = ("tf", "onnx-lower", "torch", "torch-sym", "flux", "caffe")

_TITLES = {
    "tf": "TF/XLA SAME = ONNX SAME_UPPER (padkit 'same')",
    "onnx-lower": "ONNX/JAX SAME_LOWER (padkit 'same_lower')",
    "torch": "torch padding='same' (padkit 'same_static')",
    "torch-sym": "torch symmetric padding=(k_eff-1)//2",
    "flux": "Flux SamePad() (padkit 'same_static_lower')",
    "caffe": "Caffe pooling: symmetric pad, ceil rounding (Padding.from_caffe)",
}
_ALIASES = {
    "xla": "tf",
    "same": "tf",
    "onnx-upper": "tf",
    "same_upper": "tf",
    "same-upper": "tf",
    "same_lower": "onnx-lower",
    "same-lower": "onnx-lower",
    "torch_sym": "torch-sym",
    "onnx_lower": "onnx-lower",
}


def parse_conventions(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """Conventions from a comma-separated list (or a sequence); None means all of them.

    Aliases: ``xla``/``onnx-upper``/``same_upper`` for ``tf``, ``same_lower`` for
    ``onnx-lower``.

    Raises:
        ValueError: an unknown name.

    Example:
        >>> parse_conventions("tf,flux")
        ('tf', 'flux')
    """
    if text is None:
        return CONVENTIONS
    items = text.split(",") if isinstance(text, str) else list(text)
    found: list[str] = []
    for raw in items:
        name = raw.strip().lower()
        if not name:
            continue
        name = _ALIASES.get(name, name)
        if name not in CONVENTIONS:
            raise ValueError(
                f"unknown convention {raw.strip()!r}; choose from {', '.join(CONVENTIONS)}"
            )
        if name not in found:
            found.append(name)
    if not found:
        raise ValueError(f"no convention given; choose from {', '.join(CONVENTIONS)}")
    return tuple(found)


@dataclass(frozen=True)
class ConventionLayout:
    """One convention's layout of the axis.

    Attributes:
        convention: a name from :data:`CONVENTIONS`.
        title: what the convention is, in words.
        allowed: False when the framework refuses this configuration.
        reason: why it is refused (None when allowed).
        pads: the ``(lo, hi)`` pads (for ``caffe``, the tight pads that reproduce its
            ceil rounding: the declared pad plus the ceil overhang at the end).
        output: the output length.
        windows: the input positions each output reads (its taps), in input coordinates:
            negative positions are low pad, positions ``>= n`` high pad.
        overhang: how many of the high pad cells are Caffe's ceil overhang rather than
            declared pad (they never count in an average).
    """

    convention: str
    title: str
    allowed: bool
    reason: str | None
    pads: tuple[int, int] | None
    output: int | None
    windows: tuple[tuple[int, ...], ...]
    overhang: int = 0

    @property
    def odd_pad(self) -> str:
        """Where the extra pad pixel goes: ``"start"``, ``"end"`` or ``"-"`` (symmetric)."""
        if self.pads is None:
            return "-"
        lo, hi = self.pads
        return "start" if lo > hi else "end" if hi > lo else "-"


@dataclass(frozen=True)
class Explanation:
    """The layouts of one axis under several conventions; ``str()`` draws them as text.

    Attributes:
        kernel, stride, dilation, input: the axis.
        layouts: one :class:`ConventionLayout` per convention asked for.
    """

    kernel: int
    stride: int
    dilation: int
    input: int
    layouts: tuple[ConventionLayout, ...]

    def layout(self, convention: str) -> ConventionLayout:
        """The layout of ``convention`` (a name from :data:`CONVENTIONS`)."""
        for item in self.layouts:
            if item.convention == convention:
                return item
        raise KeyError(convention)

    def __str__(self) -> str:
        return render_text(self)

    def to_png(self, path: str | Path) -> None:
        """Draw the same picture with matplotlib into ``path``.

        Raises:
            ImportError: matplotlib is not installed (it is not a padkit dependency).
        """
        render_png(self, path)


def _check(value: int, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def _layout(conv: str, k: int, s: int, d: int, n: int, caffe_pad: int | None) -> ConventionLayout:
    title = _TITLES[conv]
    overhang = 0
    try:
        if conv == "tf":
            (pads,) = resolve_padding("same", k, s, d, n)
        elif conv == "onnx-lower":
            (pads,) = resolve_padding("same_lower", k, s, d, n)
        elif conv == "torch":
            if s > 1:
                return ConventionLayout(
                    conv,
                    title,
                    False,
                    "torch refuses padding='same' for strided convolutions (stride > 1); "
                    "padkit's 'same_static' gives its split at any stride",
                    None,
                    None,
                    (),
                )
            (pads,) = resolve_padding("same_static", k, s, d)
        elif conv == "torch-sym":
            ((p, _),) = resolve_padding("same_static", k, s, d)
            title = f"torch symmetric padding=(k_eff-1)//2 = {p}"
            (pads,) = resolve_padding(p, k, s, d)
        elif conv == "flux":
            (pads,) = Padding.from_flux("SamePad", ndim=1).resolve(k, s, d, n)
        else:  # caffe
            p = caffe_pad if caffe_pad is not None else (k - 1) // 2
            title = f"Caffe pooling pad={p}, ceil rounding (Padding.from_caffe)"
            if d != 1:
                return ConventionLayout(
                    conv, title, False, "Caffe pooling has no dilation", None, None, ()
                )
            (pads,) = Padding.from_caffe(p, ndim=1).resolve(k, s, d, n)
            overhang = max(pads[1] - p, 0)
    except PaddingError as err:
        return ConventionLayout(conv, title, False, str(err), None, None, ())
    lo, hi = pads
    out = conv_output_size(n, k, s, d, lo, hi)
    windows = tuple(tuple(i * s - lo + j * d for j in range(k)) for i in range(max(out, 0)))
    return ConventionLayout(conv, title, True, None, (lo, hi), out, windows, overhang)


def explain(
    kernel: int,
    stride: int,
    input: int,
    dilation: int = 1,
    conventions: str | Sequence[str] | None = None,
    *,
    caffe_pad: int | None = None,
) -> Explanation:
    """Lay out one axis under each convention: pads, output length and every window's taps.

    Args:
        kernel, stride, input, dilation: the axis (kernel size, stride, input length).
        conventions: names from :data:`CONVENTIONS` (a list or a comma-separated string);
            None means all.
        caffe_pad: Caffe's declared symmetric pad (default ``(kernel-1)//2``).

    Raises:
        ValueError: a size is < 1 (pad < 0), or an unknown convention.

    Example:
        >>> e = explain(3, 2, 8)
        >>> e.layout("tf").pads, e.layout("onnx-lower").pads, e.layout("flux").pads
        ((0, 1), (1, 0), (1, 1))
        >>> e.layout("tf").windows[-1]        # the last output reads 6, 7 and the pad cell 8
        (6, 7, 8)
        >>> e.layout("torch").allowed
        False
    """
    k = _check(kernel, "kernel", 1)
    s = _check(stride, "stride", 1)
    d = _check(dilation, "dilation", 1)
    n = _check(input, "input", 1)
    if caffe_pad is not None:
        _check(caffe_pad, "caffe_pad", 0)
    names = parse_conventions(conventions)
    layouts = tuple(_layout(c, k, s, d, n, caffe_pad) for c in names)
    return Explanation(k, s, d, n, layouts)


# ----------------------------------------------------------------------------- text


def render_text(e: Explanation) -> str:
    """The text drawing of :func:`explain`'s result (what ``str(explanation)`` gives).

    Columns are input positions, aligned across conventions. In the position row a number
    is an input cell, ``p`` a pad cell and ``c`` Caffe's ceil overhang; in a window row
    ``#`` is a tap on an input cell, ``o`` a tap on a pad cell and ``-`` a cell that a
    dilated window skips.
    """
    allowed = [lay for lay in e.layouts if lay.allowed and lay.pads is not None]
    lo_max = max([lay.pads[0] for lay in allowed if lay.pads is not None] + [0])
    hi_max = max([lay.pads[1] for lay in allowed if lay.pads is not None] + [0])
    positions = list(range(-lo_max, e.input + hi_max))
    width = max(len(str(e.input - 1)), 1) + 1
    label_w = max(
        len("position"), len(f"out {max([lay.output or 0 for lay in allowed] + [1]) - 1}")
    )
    k_eff = e.dilation * (e.kernel - 1) + 1
    lines = [
        f"kernel {e.kernel}, stride {e.stride}, dilation {e.dilation} (k_eff {k_eff}), "
        f"input length {e.input}",
        "position row: number = input cell, p = pad, c = Caffe ceil overhang; "
        "window rows: # = tap on input, o = tap on pad, - = skipped by dilation",
    ]

    def cell(text: str) -> str:
        return text.rjust(width)

    for lay in e.layouts:
        lines.append("")
        lines.append(f"{lay.convention}: {lay.title}")
        if not lay.allowed or lay.pads is None or lay.output is None:
            lines.append(f"  not allowed: {lay.reason}")
            continue
        lo, hi = lay.pads
        lines.append(
            f"  pads (lo, hi) = ({lo}, {hi}), output length {lay.output}, odd pad: {lay.odd_pad}"
            + (f" ({lay.overhang} of the high pad is ceil overhang)" if lay.overhang else "")
        )
        row = []
        for x in positions:
            if 0 <= x < e.input:
                row.append(cell(str(x)))
            elif -lo <= x < 0:
                row.append(cell("p"))
            elif e.input <= x < e.input + hi:
                row.append(cell("c" if x >= e.input + hi - lay.overhang else "p"))
            else:
                row.append(cell(""))
        lines.append(f"  {'position'.ljust(label_w)} " + "".join(row).rstrip())
        for i, taps in enumerate(lay.windows):
            tapset = set(taps)
            row = []
            for x in positions:
                if x in tapset:
                    row.append(cell("#" if 0 <= x < e.input else "o"))
                elif taps[0] < x < taps[-1]:
                    row.append(cell("-"))
                else:
                    row.append(cell(""))
            lines.append(f"  {f'out {i}'.ljust(label_w)} " + "".join(row).rstrip())
        if lay.output <= 0:
            lines.append("  (no output: the window is longer than the padded input)")

    lines.append("")
    name_w = max(len("convention"), *(len(lay.convention) for lay in e.layouts))
    lines.append(f"{'convention'.ljust(name_w)}  pads     output  odd pad")
    for lay in e.layouts:
        if lay.allowed and lay.pads is not None:
            pads = f"({lay.pads[0]}, {lay.pads[1]})"
            lines.append(
                f"{lay.convention.ljust(name_w)}  {pads.ljust(7)}  {str(lay.output).ljust(6)}  "
                f"{lay.odd_pad}"
            )
        else:
            lines.append(f"{lay.convention.ljust(name_w)}  not allowed")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- png


def render_png(e: Explanation, path: str | Path) -> None:
    """Draw :func:`explain`'s result with matplotlib (not a padkit dependency) into ``path``.

    Raises:
        ImportError: matplotlib is not installed.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Rectangle
    except ImportError:
        raise ImportError(
            "drawing a PNG needs matplotlib, which padkit does not install: pip install matplotlib"
        ) from None
    allowed = [lay for lay in e.layouts if lay.allowed and lay.pads is not None]
    lo_max = max([lay.pads[0] for lay in allowed if lay.pads is not None] + [0])
    hi_max = max([lay.pads[1] for lay in allowed if lay.pads is not None] + [0])
    rows = sum(2 + (lay.output or 0) for lay in e.layouts) + 1
    fig_w = max(4.0, 0.45 * (lo_max + e.input + hi_max) + 3.0)
    fig, ax = plt.subplots(figsize=(fig_w, 0.32 * rows + 0.6))
    y = 0.0
    for lay in e.layouts:
        ax.text(
            -lo_max - 3.5,
            y,
            f"{lay.convention}: {lay.title}",
            va="center",
            fontsize=9,
            fontweight="bold",
        )
        y += 1
        if not lay.allowed or lay.pads is None:
            ax.text(
                -lo_max - 3.5,
                y,
                textwrap.fill(f"not allowed: {lay.reason}", 70),
                va="center",
                fontsize=8,
            )
            y += 1
            continue
        lo, hi = lay.pads
        for x in range(-lo, e.input + hi):
            inside = 0 <= x < e.input
            over = x >= e.input + hi - lay.overhang
            color = "white" if inside else ("#f4c7a1" if over else "#cccccc")
            ax.add_patch(Rectangle((x - 0.5, y - 0.4), 1, 0.8, facecolor=color, edgecolor="black"))
            ax.text(
                x,
                y,
                str(x) if inside else ("c" if over else "p"),
                ha="center",
                va="center",
                fontsize=7,
            )
        ax.text(
            e.input + hi_max + 0.2,
            y,
            f"pads ({lo}, {hi}), out {lay.output}",
            va="center",
            fontsize=8,
        )
        y += 1
        for i, taps in enumerate(lay.windows):
            ax.plot([taps[0], taps[-1]], [y, y], color="#1f77b4", linewidth=1)
            for t in taps:
                on_input = 0 <= t < e.input
                ax.plot(t, y, "o", color="#1f77b4" if on_input else "#d62728", markersize=5)
            ax.text(-lo_max - 0.7, y, f"out {i}", va="center", ha="right", fontsize=7)
            y += 1
        y += 0.5
    ax.set_xlim(-lo_max - 3.7, e.input + hi_max + 4)
    ax.set_ylim(y, -1)
    ax.axis("off")
    ax.set_title(
        f"kernel {e.kernel}, stride {e.stride}, dilation {e.dilation}, input {e.input}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(str(path), dpi=120)
    plt.close(fig)
