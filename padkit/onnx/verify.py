"""Check an ONNX model imported with :func:`padkit.onnx.load` against onnxruntime.

:func:`verify` imports the model, runs the padkit module and an onnxruntime session on the
same inputs (random with a fixed seed, or given), and reports the largest absolute
difference per output. ``padkit verify`` on the command line is a thin shell over it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["OutputCheck", "VerifyReport", "verify"]

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


@dataclass(frozen=True)
class OutputCheck:
    """One graph output: padkit's value against onnxruntime's.

    Attributes:
        name: the ONNX output name.
        shape: onnxruntime's output shape.
        padkit_shape: padkit's output shape.
        max_abs_diff: the largest ``|padkit - onnxruntime|`` (``inf`` when shapes differ).
        max_abs_ref: the largest ``|onnxruntime|``, for scale.
        passed: every element within ``atol + rtol * |onnxruntime|`` and shapes equal.
    """

    name: str
    shape: tuple[int, ...]
    padkit_shape: tuple[int, ...]
    max_abs_diff: float
    max_abs_ref: float
    passed: bool


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify` found.

    Attributes:
        model: a label for the model (its path, or ``"<bytes>"``/``"<ModelProto>"``).
        inputs: ``(name, shape, dtype, source)`` per graph input; ``source`` is
            ``"random(seed=0)"`` or ``"given"``.
        outputs: one :class:`OutputCheck` per graph output.
        atol, rtol: the tolerances used.
        timings: seconds spent per stage (``"import"``, ``"padkit"``, ``"onnxruntime"``).
    """

    model: str
    inputs: tuple[tuple[str, tuple[int, ...], str, str], ...]
    outputs: tuple[OutputCheck, ...]
    atol: float
    rtol: float
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """Every output passed."""
        return all(o.passed for o in self.outputs)

    def __str__(self) -> str:
        lines = [f"model: {self.model}"]
        for name, shape, dtype, source in self.inputs:
            lines.append(f"input  {name}: {_shape_text(shape)} {dtype}, {source}")
        width = max([len(o.name) for o in self.outputs] + [6])
        lines.append(f"{'output':<{width}}  {'shape':<16}  {'max |diff|':>10}  {'max |ref|':>10}")
        for o in self.outputs:
            shape_text = _shape_text(o.shape)
            if o.shape != o.padkit_shape:
                shape_text += f" (padkit {_shape_text(o.padkit_shape)})"
            lines.append(
                f"{o.name:<{width}}  {shape_text:<16}  {o.max_abs_diff:>10.2e}  "
                f"{o.max_abs_ref:>10.2e}  {'ok' if o.passed else 'MISMATCH'}"
            )
        verdict = "PASS" if self.passed else "FAIL"
        lines.append(
            f"{verdict}: padkit.onnx.load vs onnxruntime, atol {self.atol:g}, rtol {self.rtol:g}"
        )
        return "\n".join(lines)


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
    if isinstance(model, onnx.ModelProto):
        return model, "<ModelProto>"
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(model)), "<bytes>"
    if isinstance(model, (str, Path)):
        path = Path(model)
        if not path.is_file():
            raise FileNotFoundError(f"no such ONNX file: {str(path)!r}")
        return onnx.load(str(path)), str(path)
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
) -> VerifyReport:
    """Import ``model`` with :func:`padkit.onnx.load` and compare it with onnxruntime.

    Both run on the same inputs: ``inputs`` when given (positionally, or by input name),
    otherwise seeded random values (standard normal for floats) with the model's input
    shapes, where ``input_shapes`` fills in dynamic dims. An output passes when its shape
    matches and every element is within ``atol + rtol * |onnxruntime|``.

    Args:
        model: a path, the serialized bytes, or an ``onnx.ModelProto``.
        inputs: arrays for the graph inputs (those without an initializer).
        input_shapes: shapes for random inputs, positionally or by name.
        seed: the seed of the random inputs.
        atol, rtol: the tolerances.
        progress: called with a short message before each stage and with its timing
            after it (the command line prints these to stderr).
        name: the model's label in the report (default: its path, or ``"<bytes>"``).

    Returns:
        A :class:`VerifyReport`; ``report.passed`` says whether every output matched.

    Raises:
        ImportError: onnx or onnxruntime is not installed.
        FileNotFoundError: ``model`` is a path that does not exist.
        ValueError: the inputs do not fit the model.
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
    module = load(proto)
    timings["import"] = time.perf_counter() - t0
    say(f"imported in {timings['import']:.2f} s")

    say("running padkit ...")
    t0 = time.perf_counter()
    with torch.no_grad():
        result = module(*(torch.from_numpy(np.ascontiguousarray(a)) for a in arrays))
    outs = result if isinstance(result, (tuple, list)) else (result,)
    mine = [
        o.detach().cpu().numpy() if isinstance(o, torch.Tensor) else np.asarray(o) for o in outs
    ]
    timings["padkit"] = time.perf_counter() - t0
    say(f"padkit ran in {timings['padkit']:.2f} s")

    say("running onnxruntime ...")
    t0 = time.perf_counter()
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {name: a for (name, _, _), a in zip(declared, arrays)}
    names = [o.name for o in proto.graph.output]
    theirs = session.run(names, feeds)
    timings["onnxruntime"] = time.perf_counter() - t0
    say(f"onnxruntime ran in {timings['onnxruntime']:.2f} s")

    if len(mine) != len(theirs):
        raise ValueError(f"padkit returned {len(mine)} output(s), the model declares {len(theirs)}")
    checks = tuple(_compare(n, a, b, atol, rtol) for n, a, b in zip(names, mine, theirs))
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
    )


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


def _compare(name: str, mine: np.ndarray, ref: np.ndarray, atol: float, rtol: float) -> OutputCheck:
    ref_scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    if mine.shape != ref.shape:
        return OutputCheck(
            name, tuple(ref.shape), tuple(mine.shape), float("inf"), ref_scale, False
        )
    a = mine.astype(np.float64)
    b = ref.astype(np.float64)
    with np.errstate(invalid="ignore"):
        diff = np.abs(a - b)
    diff[np.isnan(a) & np.isnan(b)] = 0.0  # NaN where onnxruntime has NaN is a match
    diff[np.isnan(diff)] = np.inf
    worst = float(np.max(diff)) if diff.size else 0.0
    ok = bool(np.all(diff <= atol + rtol * np.abs(np.nan_to_num(b)))) if diff.size else True
    return OutputCheck(name, tuple(ref.shape), tuple(mine.shape), worst, ref_scale, ok)
