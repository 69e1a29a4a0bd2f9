"""Check an ONNX model imported with :func:`padkit.onnx.load` against onnxruntime.

:func:`verify` imports the model, runs the padkit module and an onnxruntime session on the
same inputs (random with a fixed seed, or given), and reports the largest absolute
difference per output against a tolerance relative to the output's scale. ``padkit
verify`` on the command line is a thin shell over it.

Why relative to the scale: float32 rounding in a deep net grows with the magnitude of the
activations, not element by element (a ResNet50 feature map of magnitude 12 differs from
onnxruntime by about 1e-3, and onnxruntime differs from TensorFlow by as much), while a
wrong pad moves border values by a sizeable fraction of that magnitude. With
``float64=True`` padkit also runs in float64, which shows how much of the difference is
float32 rounding (padkit float32 against padkit float64) and how much is left once
padkit's own rounding is gone (onnxruntime against padkit float64).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "ROUNDING_FACTOR",
    "TOLERANCES",
    "OutputCheck",
    "VerifyReport",
    "compare_output",
    "verify",
]

_INSTALL_HINT = 'pip install "padkit[onnx]"'

# ONNX TensorProto element types -> numpy dtypes for the inputs verify can generate
_NP_DTYPES: dict[int, Any] = {
    1: np.float32,
    2: np.uint8,
    3: np.int8,
    5: np.int16,
    6: np.int32,
    7: np.int64,
    9: np.bool_,
    10: np.float16,
    11: np.float64,
}


#: How :func:`verify` judges an output: ``"scale"`` (the default) allows
#: ``atol + rtol * max|onnxruntime|`` on every element, ``"elementwise"`` allows
#: ``atol + rtol * |onnxruntime|`` element by element.
TOLERANCES = ("scale", "elementwise")

#: With ``float64=True``, the difference to onnxruntime that is left once padkit runs in
#: float64 passes as rounding when it is at most this many times padkit's own float32
#: rounding (``max|padkit float32 - padkit float64|``).
ROUNDING_FACTOR = 10.0


@dataclass(frozen=True)
class OutputCheck:
    """One graph output: padkit's value against onnxruntime's.

    Attributes:
        name: the ONNX output name.
        shape: onnxruntime's output shape.
        padkit_shape: padkit's output shape.
        max_abs_diff: the largest ``|padkit - onnxruntime|`` over the elements where both
            are finite (``inf`` when shapes differ or the non-finite elements disagree).
        max_abs_ref: the largest finite ``|onnxruntime|``, the output's scale.
        passed: shapes equal, equal infinities and NaNs in the same places, and
            ``max_abs_diff`` within ``tolerance`` (or, with a float64 run, the float64
            difference within :data:`ROUNDING_FACTOR` times padkit's own rounding).
        tolerance: the allowed difference (``atol + rtol * max_abs_ref`` by scale; for
            ``"elementwise"`` the allowance at the worst element).
        float64_diff: with a float64 run, ``max|padkit float64 - onnxruntime|``.
        rounding: with a float64 run, ``max|padkit float32 - padkit float64|``.
    """

    name: str
    shape: tuple[int, ...]
    padkit_shape: tuple[int, ...]
    max_abs_diff: float
    max_abs_ref: float
    passed: bool
    tolerance: float = 0.0
    float64_diff: float | None = None
    rounding: float | None = None


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify` found.

    Attributes:
        model: a label for the model (its path, or ``"<bytes>"``/``"<ModelProto>"``).
        inputs: ``(name, shape, dtype, source)`` per graph input; ``source`` is
            ``"random(seed=0)"`` or ``"given"``.
        outputs: one :class:`OutputCheck` per graph output.
        atol, rtol: the tolerances used.
        timings: seconds spent per stage (``"import"``, ``"padkit"``, ``"onnxruntime"``,
            ``"padkit float64"``).
        tolerance: ``"scale"`` or ``"elementwise"`` (see :data:`TOLERANCES`).
        float64: whether padkit also ran in float64.
    """

    model: str
    inputs: tuple[tuple[str, tuple[int, ...], str, str], ...]
    outputs: tuple[OutputCheck, ...]
    atol: float
    rtol: float
    timings: dict[str, float] = field(default_factory=dict)
    tolerance: str = "scale"
    float64: bool = False

    @property
    def passed(self) -> bool:
        """Every output passed."""
        return all(o.passed for o in self.outputs)

    @property
    def randomised(self) -> tuple[str, ...]:
        """The graph inputs that got random values."""
        return tuple(name for name, _, _, source in self.inputs if source.startswith("random"))

    def __str__(self) -> str:
        lines = [f"model: {self.model}"]
        for name, shape, dtype, source in self.inputs:
            lines.append(f"input  {name}: {_shape_text(shape)} {dtype}, {source}")
        random_names = self.randomised
        if len(random_names) > 1:
            lines.append(
                f"note: {len(random_names)} inputs were randomised ({', '.join(random_names)}); "
                "inputs that are not data (statistics or tables an exporter left as graph "
                "inputs) give numbers no real run sees: pass their values with "
                "--input NAME=FILE.npy (inputs= in Python)"
            )
        width = max([len(o.name) for o in self.outputs] + [6])
        head = (
            f"{'output':<{width}}  {'shape':<16}  {'max |diff|':>10}  {'max |ref|':>10}  "
            f"{'tolerance':>10}"
        )
        if self.float64:
            head += f"  {'f64 |diff|':>10}  {'rounding':>10}"
        lines.append(head)
        for o in self.outputs:
            shape_text = _shape_text(o.shape)
            if o.shape != o.padkit_shape:
                shape_text += f" (padkit {_shape_text(o.padkit_shape)})"
            row = (
                f"{o.name:<{width}}  {shape_text:<16}  {o.max_abs_diff:>10.2e}  "
                f"{o.max_abs_ref:>10.2e}  {o.tolerance:>10.2e}"
            )
            if self.float64:
                row += f"  {_num(o.float64_diff):>10}  {_num(o.rounding):>10}"
            lines.append(row + f"  {'ok' if o.passed else 'MISMATCH'}")
        verdict = "PASS" if self.passed else "FAIL"
        rule = (
            "|diff| <= atol + rtol*max|ref| (relative to the output's scale)"
            if self.tolerance == "scale"
            else "|diff| <= atol + rtol*|ref| element by element"
        )
        lines.append(
            f"{verdict}: padkit.onnx.load vs onnxruntime, atol {self.atol:g}, rtol {self.rtol:g}, "
            f"{rule}"
        )
        if self.float64:
            lines.append(
                "float64: 'f64 |diff|' is onnxruntime against padkit run in float64, 'rounding' "
                "padkit float32 against padkit float64; an f64 |diff| within "
                f"{ROUNDING_FACTOR:g}x the rounding also passes (float32 rounding, not a "
                "mismatch)"
            )
        return "\n".join(lines)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2e}"


def _shape_text(shape: Sequence[int]) -> str:
    return "x".join(str(v) for v in shape) if shape else "scalar"


def _require_runtime() -> tuple[Any, Any]:
    try:
        import onnx
        import onnxruntime
    except ImportError as err:
        raise ImportError(
            f"padkit verify needs onnx and onnxruntime ({err.name} is missing): {_INSTALL_HINT}"
        ) from None
    return onnx, onnxruntime


def _read(onnx: Any, model: Any) -> tuple[Any, str]:
    """The proto (external data not read: padkit.onnx.load and onnxruntime read it from the
    file's folder themselves) and a label."""
    if isinstance(model, onnx.ModelProto):
        return model, "<ModelProto>"
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(model)), "<bytes>"
    if isinstance(model, (str, Path)):
        path = Path(model)
        if not path.is_file():
            raise FileNotFoundError(f"no such ONNX file: {str(path)!r}")
        return onnx.load(str(path), load_external_data=False), str(path)
    raise TypeError(
        f"model must be a path, bytes or an onnx.ModelProto, got {type(model).__name__}"
    )


def graph_inputs(model: Any) -> list[tuple[str, tuple[int | str | None, ...], int]]:
    """``(name, dims, elem_type)`` for each graph input that has no initializer.

    Dims are ints, symbolic names (``dim_param``) or None (unknown).

    Example:
        >>> from padkit.examples import example_model
        >>> import onnx
        >>> graph_inputs(onnx.load_from_string(example_model()))
        [('data', (1, 3, 56, 56), 1)]
    """
    inits = {t.name for t in model.graph.initializer}
    found = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims: list[int | str | None] = []
        for d in tt.shape.dim:
            if d.HasField("dim_value"):
                dims.append(int(d.dim_value))
            elif d.HasField("dim_param"):
                dims.append(d.dim_param)
            else:
                dims.append(None)
        found.append((vi.name, tuple(dims), int(tt.elem_type)))
    return found


def _input_shape(
    name: str,
    dims: tuple[int | str | None, ...],
    given: Sequence[int] | None,
) -> tuple[int, ...]:
    if given is not None:
        shape = tuple(int(v) for v in given)
        if len(shape) != len(dims):
            raise ValueError(
                f"input {name!r} has rank {len(dims)} ({_dims_text(dims)}), but the input shape "
                f"given has {len(shape)} dims ({_shape_text(shape)})"
            )
        for i, (d, v) in enumerate(zip(dims, shape)):
            if isinstance(d, int) and d != v:
                raise ValueError(
                    f"input {name!r}: dim {i} is fixed at {d} in the model, got {v} "
                    f"(model shape {_dims_text(dims)})"
                )
        return shape
    if not all(isinstance(d, int) for d in dims):
        raise ValueError(
            f"input {name!r} has dynamic dims ({_dims_text(dims)}); give a concrete shape "
            "(--input-shape on the command line, input_shapes= in Python)"
        )
    return tuple(int(d) for d in dims if isinstance(d, int))


def _dims_text(dims: Sequence[int | str | None]) -> str:
    return "x".join("?" if d is None else str(d) for d in dims)


def _random(shape: tuple[int, ...], elem_type: int, rng: np.random.Generator) -> np.ndarray:
    if elem_type not in _NP_DTYPES:
        raise ValueError(f"cannot generate random inputs of ONNX element type {elem_type}")
    dtype = _NP_DTYPES[elem_type]
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 10, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def verify(
    model: Any,
    inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray] | None = None,
    *,
    input_shapes: Sequence[Sequence[int]] | Mapping[str, Sequence[int]] | None = None,
    seed: int = 0,
    atol: float = 1e-4,
    rtol: float = 1e-4,
    progress: Callable[[str], None] | None = None,
    name: str | None = None,
    tolerance: str = "scale",
    float64: bool = False,
) -> VerifyReport:
    """Import ``model`` with :func:`padkit.onnx.load` and compare it with onnxruntime.

    Both run on the same inputs: ``inputs`` when given (positionally, or by input name),
    otherwise seeded random values (standard normal for floats) with the model's input
    shapes, where ``input_shapes`` fills in dynamic dims; the report names every input
    that was randomised. An output passes when its shape matches, its infinities and NaNs
    sit where onnxruntime's do (``-inf`` against ``-inf`` is a match), and every other
    element is within ``atol + rtol * max|onnxruntime|`` (``tolerance="scale"``, the
    default: float32 rounding grows with the output's scale) or within
    ``atol + rtol * |onnxruntime|`` (``tolerance="elementwise"``).

    With ``float64=True`` padkit runs a second time in float64 (float inputs cast up): the
    report shows ``max|padkit float64 - onnxruntime|`` and padkit's own float32 rounding
    ``max|padkit float32 - padkit float64|``; an output whose float64 difference is within
    :data:`ROUNDING_FACTOR` times that rounding passes too, since what is left is float32
    rounding (a wrong pad leaves a difference far above it).

    Args:
        model: a path, the serialized bytes, or an ``onnx.ModelProto``.
        inputs: arrays for the graph inputs (those without an initializer).
        input_shapes: shapes for random inputs, positionally or by name.
        seed: the seed of the random inputs.
        atol, rtol: the tolerances.
        progress: called with a short message before each stage and with its timing
            after it (the command line prints these to stderr).
        name: the model's label in the report (default: its path, or ``"<bytes>"``).
        tolerance: ``"scale"`` or ``"elementwise"`` (see above).
        float64: also run padkit in float64 and report the rounding.

    Returns:
        A :class:`VerifyReport`; ``report.passed`` says whether every output matched.

    Raises:
        ImportError: onnx or onnxruntime is not installed.
        FileNotFoundError: ``model`` is a path that does not exist.
        ValueError: the inputs do not fit the model, or ``tolerance`` is unknown.
        padkit.onnx.OnnxImportError: padkit cannot import the model.

    Example:
        >>> from padkit.examples import example_model
        >>> report = verify(example_model())
        >>> report.passed, [o.name for o in report.outputs]
        (True, ['prob', 'inception'])
    """

    def say(message: str) -> None:
        if progress is not None:
            progress(message)

    if tolerance not in TOLERANCES:
        raise ValueError(f"tolerance must be one of {TOLERANCES}, got {tolerance!r}")
    say("loading onnx and onnxruntime ...")
    onnx, ort = _require_runtime()
    import torch

    from ._graph import load

    say("reading the model ...")
    proto, label = _read(onnx, model)
    label = name if name is not None else label
    declared = graph_inputs(proto)
    arrays = _collect_inputs(declared, inputs, input_shapes, seed)
    sources = "given" if inputs is not None else f"random(seed={seed})"
    timings: dict[str, float] = {}

    say("importing with padkit.onnx.load ...")
    t0 = time.perf_counter()
    by_path = isinstance(model, (str, Path))
    module = load(str(model)) if by_path else load(proto)
    timings["import"] = time.perf_counter() - t0
    say(f"imported in {timings['import']:.2f} s")

    say("running padkit ...")
    t0 = time.perf_counter()
    mine = _run(module, arrays)
    timings["padkit"] = time.perf_counter() - t0
    say(f"padkit ran in {timings['padkit']:.2f} s")
    wide: list[np.ndarray] | None = None
    if float64:
        say("running padkit in float64 ...")
        t0 = time.perf_counter()
        wide = _run(module.to(torch.float64), [_widen(a) for a in arrays])
        timings["padkit float64"] = time.perf_counter() - t0
        say(f"padkit ran in float64 in {timings['padkit float64']:.2f} s")

    say("running onnxruntime ...")
    t0 = time.perf_counter()
    session = ort.InferenceSession(
        str(model) if by_path else proto.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    feeds = {name: a for (name, _, _), a in zip(declared, arrays)}
    names = [o.name for o in proto.graph.output]
    theirs = session.run(names, feeds)
    timings["onnxruntime"] = time.perf_counter() - t0
    say(f"onnxruntime ran in {timings['onnxruntime']:.2f} s")

    if len(mine) != len(theirs):
        raise ValueError(f"padkit returned {len(mine)} output(s), the model declares {len(theirs)}")
    checks = tuple(
        compare_output(
            n, a, b, atol, rtol, tolerance, None if wide is None else wide[i], scale=None
        )
        for i, (n, a, b) in enumerate(zip(names, mine, theirs))
    )
    return VerifyReport(
        model=label,
        inputs=tuple(
            (name, tuple(a.shape), str(a.dtype), sources)
            for (name, _, _), a in zip(declared, arrays)
        ),
        outputs=checks,
        atol=atol,
        rtol=rtol,
        timings=timings,
        tolerance=tolerance,
        float64=float64,
    )


def _run(module: Any, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    import torch

    with torch.no_grad():
        result = module(*(torch.from_numpy(np.ascontiguousarray(a)) for a in arrays))
    outs = result if isinstance(result, (tuple, list)) else (result,)
    return [
        o.detach().cpu().numpy() if isinstance(o, torch.Tensor) else np.asarray(o) for o in outs
    ]


def _widen(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) if np.issubdtype(a.dtype, np.floating) else a


def _collect_inputs(
    declared: list[tuple[str, tuple[int | str | None, ...], int]],
    inputs: Sequence[np.ndarray] | Mapping[str, np.ndarray] | None,
    input_shapes: Sequence[Sequence[int]] | Mapping[str, Sequence[int]] | None,
    seed: int,
) -> list[np.ndarray]:
    names = [name for name, _, _ in declared]
    if inputs is not None:
        given = _by_name(names, inputs, "inputs")
        missing = [n for n in names if n not in given]
        if missing:
            raise ValueError(f"no value given for input(s) {missing}; the model takes {names}")
        arrays = []
        for name, dims, _ in declared:
            a = np.asarray(given[name])
            _input_shape(name, dims, a.shape)
            arrays.append(a)
        return arrays
    shapes = _by_name(names, input_shapes, "input_shapes") if input_shapes is not None else {}
    rng = np.random.default_rng(seed)
    return [
        _random(_input_shape(name, dims, shapes.get(name)), elem, rng)
        for name, dims, elem in declared
    ]


def _by_name(names: list[str], values: Any, what: str) -> dict[str, Any]:
    if isinstance(values, Mapping):
        unknown = [k for k in values if k not in names]
        if unknown:
            raise ValueError(f"{what}: unknown input name(s) {unknown}; the model takes {names}")
        return dict(values)
    values = list(values)
    if len(values) != len(names):
        raise ValueError(
            f"{what}: got {len(values)} value(s) for {len(names)} graph input(s) {names}"
        )
    return dict(zip(names, values))


def compare_output(
    name: str,
    mine: np.ndarray,
    ref: np.ndarray,
    atol: float = 1e-4,
    rtol: float = 1e-4,
    tolerance: str = "scale",
    wide: np.ndarray | None = None,
    *,
    scale: float | None = None,
) -> OutputCheck:
    """Judge one output of padkit (``mine``, and ``wide`` from a float64 run) against
    onnxruntime's ``ref``, as :func:`verify` does.

    Infinities must be equal (``-inf`` against ``-inf`` is a match), NaNs must sit where
    ``ref`` has NaNs; the finite elements are compared within ``atol + rtol * scale``
    (``scale`` defaults to the largest finite ``|ref|``) or, for ``"elementwise"``,
    ``atol + rtol * |ref|``.

    Example:
        >>> ref = np.array([11.7, 0.02, -np.inf], dtype=np.float32)
        >>> mine = ref + np.array([0.0, 9.3e-4, 0.0], dtype=np.float32)
        >>> compare_output("y", mine, ref).passed
        True
        >>> compare_output("y", mine, ref, tolerance="elementwise").passed
        False
    """
    finite_ref = ref[np.isfinite(ref)] if ref.size else ref
    ref_scale = float(np.max(np.abs(finite_ref))) if finite_ref.size else 0.0
    if scale is None:
        scale = ref_scale
    if mine.shape != ref.shape:
        return OutputCheck(
            name,
            tuple(ref.shape),
            tuple(mine.shape),
            float("inf"),
            ref_scale,
            False,
            tolerance=atol + rtol * scale,
        )
    worst, agree = _abs_diff(mine, ref)
    b = ref.astype(np.float64)
    if tolerance == "scale":
        allowed = atol + rtol * scale
        ok = agree and worst <= allowed
    else:
        diff = _elementwise(mine, ref)
        bound = atol + rtol * np.abs(np.nan_to_num(b, posinf=0.0, neginf=0.0))
        excess = diff - bound
        at = int(np.argmax(excess)) if diff.size else 0
        allowed = float(bound.reshape(-1)[at]) if diff.size else atol
        ok = agree and (bool(np.all(excess <= 0)) if diff.size else True)
    f64: float | None = None
    rounding: float | None = None
    if wide is not None and wide.shape == ref.shape:
        f64, f64_agree = _abs_diff(wide, ref)
        rounding, _ = _abs_diff(mine, wide)
        if not ok and agree and f64_agree and f64 <= ROUNDING_FACTOR * rounding:
            ok = True
    return OutputCheck(
        name,
        tuple(ref.shape),
        tuple(mine.shape),
        worst,
        ref_scale,
        ok,
        tolerance=allowed,
        float64_diff=f64,
        rounding=rounding,
    )


def _elementwise(mine: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """``|mine - ref|`` with equal non-finite values (and NaN against NaN) as 0."""
    a = mine.astype(np.float64)
    b = ref.astype(np.float64)
    with np.errstate(invalid="ignore"):
        diff = np.abs(a - b)
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    diff[same] = 0.0
    diff[np.isnan(diff)] = np.inf
    return diff


def _abs_diff(mine: np.ndarray, ref: np.ndarray) -> tuple[float, bool]:
    """The largest ``|mine - ref|`` over the elements where both are finite, and whether
    every other element agrees (equal infinities, NaN against NaN)."""
    if not ref.size:
        return 0.0, True
    diff = _elementwise(mine, ref)
    both = np.isfinite(mine) & np.isfinite(ref)
    agree = bool(np.all(diff[~both] == 0))
    worst = float(np.max(diff[both])) if both.any() else 0.0
    return (worst if agree else float("inf")), agree
