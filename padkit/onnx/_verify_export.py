"""Check an exported ONNX file against the torch model it came from, at many sizes.

:func:`padkit.onnx.verify.verify` compares padkit's importer with onnxruntime on the same
file, so a file that is wrong everywhere but its export size (pads baked in for that size,
an output one cell short at others) passes it. :func:`verify_export` holds the file to the
model instead: it runs onnxruntime and the torch model on the same seeded random inputs
at several sizes, sizes the export never saw among them (odd ones, one per axis, a batch of
2), and compares shapes and values with :func:`padkit.onnx.verify.compare_output`.
``padkit verify FILE.onnx --against module.py:factory`` is a thin shell over it, with
:func:`load_model` building the model.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .verify import (
    OutputCheck,
    _dims_text,
    _random,
    _read,
    _require_runtime,
    _shape_text,
    compare_output,
    graph_inputs,
)

__all__ = [
    "AGAINST_FORMS",
    "ExportReport",
    "SizeCheck",
    "default_sizes",
    "load_model",
    "verify_export",
]

#: The forms :func:`load_model` accepts (and ``padkit verify --against``).
AGAINST_FORMS = (
    "'path/to/file.py:factory' (the file is loaded by its path)",
    "'package.module:factory' (imported from sys.path)",
)

#: The size of a dynamic dim that neither ``input_shape`` nor the file fixes: 1 for the
#: first (batch) dim, this for the others.
DEFAULT_DYNAMIC = 32


@dataclass(frozen=True)
class SizeCheck:
    """One size: the torch model's outputs against onnxruntime's.

    Attributes:
        inputs: ``(name, shape)`` per graph input.
        outputs: one :class:`~padkit.onnx.verify.OutputCheck` per output (``padkit_shape``
            is the torch model's shape, ``shape`` onnxruntime's).
        error: why no comparison was made, when onnxruntime failed on a size the model
            runs at (a failure), or the outputs do not pair up.
        skipped: why this size was left out: the torch model itself refuses it.
    """

    inputs: tuple[tuple[str, tuple[int, ...]], ...]
    outputs: tuple[OutputCheck, ...] = ()
    error: str | None = None
    skipped: str | None = None

    @property
    def passed(self) -> bool:
        """Every output matched (a skipped size passes)."""
        if self.skipped is not None:
            return True
        return self.error is None and all(o.passed for o in self.outputs)


@dataclass(frozen=True)
class ExportReport:
    """What :func:`verify_export` found.

    Attributes:
        model: the file's label (its path, or ``"<bytes>"``/``"<ModelProto>"``).
        against: a label for the torch model.
        declared: ``(name, dims)`` per graph input as the file declares it (``"?"`` or a
            name for a dynamic dim).
        sizes: one :class:`SizeCheck` per size, in the order run.
        atol, rtol, tolerance: as in :func:`padkit.onnx.verify.verify`.
        seed: the seed of the random inputs.
        timings: seconds per stage.
    """

    model: str
    against: str
    declared: tuple[tuple[str, str], ...]
    sizes: tuple[SizeCheck, ...]
    atol: float
    rtol: float
    tolerance: str = "scale"
    seed: int = 0
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def compared(self) -> int:
        """How many sizes were compared (not skipped)."""
        return sum(1 for s in self.sizes if s.skipped is None)

    @property
    def passed(self) -> bool:
        """At least one size compared, and every compared size matched."""
        return self.compared > 0 and all(s.passed for s in self.sizes)

    def __str__(self) -> str:
        lines = [f"model: {self.model}", f"against: {self.against}"]
        for name, dims in self.declared:
            lines.append(f"input  {name}: {dims} declared, random(seed={self.seed})")
        for s in self.sizes:
            shapes = ", ".join(f"{n} {_shape_text(shape)}" for n, shape in s.inputs)
            if s.skipped is not None:
                lines.append(f"size {shapes}: skipped, {s.skipped}")
                continue
            if s.error is not None:
                lines.append(f"size {shapes}: MISMATCH, {s.error}")
                continue
            worst = [o for o in s.outputs if not o.passed]
            verdict = "ok" if not worst else "MISMATCH"
            lines.append(f"size {shapes}: {verdict}")
            for o in s.outputs:
                shape_text = _shape_text(o.shape)
                if o.shape != o.padkit_shape:
                    shape_text += f" (torch {_shape_text(o.padkit_shape)})"
                lines.append(
                    f"  {o.name}: {shape_text}  max |diff| {o.max_abs_diff:.2e}  "
                    f"max |ref| {o.max_abs_ref:.2e}  tolerance {o.tolerance:.2e}  "
                    f"{'ok' if o.passed else 'MISMATCH'}"
                )
        failed = sum(1 for s in self.sizes if not s.passed)
        rule = (
            "|diff| <= atol + rtol*max|ref|"
            if self.tolerance == "scale"
            else "|diff| <= atol + rtol*|ref| element by element"
        )
        if self.compared == 0:
            verdict = "FAIL: the torch model ran at none of the sizes"
        elif failed:
            verdict = f"FAIL: {failed} of {self.compared} size(s) differ"
        else:
            verdict = f"PASS: {self.compared} size(s)"
        lines.append(
            f"{verdict}; the torch model vs onnxruntime on the file, atol {self.atol:g}, "
            f"rtol {self.rtol:g}, {rule}"
        )
        return "\n".join(lines)


def load_model(spec: str) -> Any:
    """The torch model ``factory()`` returns, in eval mode, from ``spec``.

    ``spec`` is ``"path/to/file.py:factory"`` (the file is loaded by its path with
    importlib; its folder is on ``sys.path`` while it loads, for its own imports) or
    ``"package.module:factory"`` (imported from ``sys.path``). ``factory`` may be a dotted
    path inside the module (``"Class.build"``) and is called with no arguments.

    Raises:
        ValueError: ``spec`` is not of either form, names a missing file or attribute,
            or the factory raised or returned something other than a ``torch.nn.Module``;
            the message echoes ``spec`` and lists the accepted forms.

    Example:
        >>> type(load_model("torch.nn:Identity")).__name__
        'Identity'
    """
    forms = "; accepted forms: " + ", ".join(AGAINST_FORMS)
    if not isinstance(spec, str):
        raise ValueError(f"expected a string, got {type(spec).__name__} ({spec!r}){forms}")
    source, sep, attr = spec.rpartition(":")
    if not sep or not source or not attr or not all(p.isidentifier() for p in attr.split(".")):
        raise ValueError(f"{spec!r} is not 'module:factory'{forms}")
    if source.endswith(".py"):
        path = Path(source)
        if not path.is_file():
            raise ValueError(f"{spec!r}: no such file {source!r}{forms}")
        module = _load_file(spec, path, forms)
    else:
        try:
            module = importlib.import_module(source)
        except Exception as err:
            raise ValueError(
                f"{spec!r}: cannot import {source!r} ({type(err).__name__}: {err}){forms}"
            ) from None
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ValueError(f"{spec!r}: {source!r} has no attribute {attr!r}{forms}")
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"{spec!r}: {attr!r} is a {type(target).__name__}, not a factory{forms}")
    try:
        model = target()
    except Exception as err:
        raise ValueError(f"{spec!r}: {attr}() raised {type(err).__name__}: {err}") from None
    from torch import nn

    if not isinstance(model, nn.Module):
        raise ValueError(
            f"{spec!r}: {attr}() returned a {type(model).__name__}, not a torch.nn.Module{forms}"
        )
    return model.eval()


def _load_file(spec: str, path: Path, forms: str) -> Any:
    name = f"_padkit_against_{abs(hash(str(path.resolve())))}"
    loader_spec = importlib.util.spec_from_file_location(name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise ValueError(f"{spec!r}: {str(path)!r} cannot be loaded as a Python file{forms}")
    module = importlib.util.module_from_spec(loader_spec)
    folder = str(path.resolve().parent)
    sys.modules[name] = module
    sys.path.insert(0, folder)
    try:
        loader_spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[name]
        raise ValueError(
            f"{spec!r}: loading {str(path)!r} raised {type(err).__name__}: {err}"
        ) from None
    finally:
        sys.path.remove(folder)
    return module


def default_sizes(
    declared: Sequence[tuple[str, tuple[int | str | None, ...], int]],
    input_shape: Sequence[int] | None = None,
) -> list[tuple[tuple[int, ...], ...]]:
    """Sizes around the base size, each a shape per graph input.

    The base is ``input_shape`` (the export size) for a file with one input, else the
    file's fixed dims with 1 for a dynamic first dim and :data:`DEFAULT_DYNAMIC` for other
    dynamic dims. Only dynamic dims move: every non-batch one by +1 (with a batch of 2),
    by -1, by 3, 5, 7, ... (a different odd step per axis), and to twice the base plus one.

    Example:
        >>> default_sizes([("x", ("n", 3, "h", "w"), 1)], (1, 3, 8, 6))
        [((1, 3, 8, 6),), ((2, 3, 9, 7),), ((1, 3, 7, 5),), ((1, 3, 11, 11),), ((1, 3, 17, 13),)]
    """
    bases: list[list[int]] = []
    for i, (name, dims, _) in enumerate(declared):
        given = input_shape if (i == 0 and input_shape is not None) else None
        if given is not None and len(given) != len(dims):
            raise ValueError(
                f"input_shape {tuple(given)} has {len(given)} dims, but input {name!r} has "
                f"rank {len(dims)} ({_dims_text(dims)})"
            )
        base = []
        for j, d in enumerate(dims):
            if isinstance(d, int):
                if given is not None and given[j] != d:
                    raise ValueError(
                        f"input_shape {tuple(given)}: dim {j} of input {name!r} is fixed at "
                        f"{d} in the file ({_dims_text(dims)})"
                    )
                base.append(d)
            elif given is not None:
                base.append(int(given[j]))
            else:
                base.append(1 if j == 0 else DEFAULT_DYNAMIC)
        bases.append(base)

    def moved(step: Callable[[int, int], int], batch: int | None = None) -> tuple[Any, ...]:
        out = []
        for (_, dims, _), base in zip(declared, bases):
            shape = []
            for j, (d, b) in enumerate(zip(dims, base)):
                if isinstance(d, int):
                    shape.append(b)
                elif j == 0:
                    shape.append(batch if batch is not None else b)
                else:
                    shape.append(max(1, step(j, b)))
            out.append(tuple(shape))
        return tuple(out)

    runs = [
        moved(lambda j, b: b),
        moved(lambda j, b: b + 1, batch=2),
        moved(lambda j, b: b - 1),
        moved(lambda j, b: b + 2 * j - 1),
        moved(lambda j, b: 2 * b + 1),
    ]
    seen: list[tuple[tuple[int, ...], ...]] = []
    for r in runs:
        if r not in seen:
            seen.append(r)
    return seen


def _given_sizes(
    declared: Sequence[tuple[str, tuple[int | str | None, ...], int]], sizes: Sequence[Any]
) -> list[tuple[tuple[int, ...], ...]]:
    names = [name for name, _, _ in declared]
    runs = []
    for i, size in enumerate(sizes):
        if isinstance(size, Mapping):
            unknown = [k for k in size if k not in names]
            missing = [n for n in names if n not in size]
            if unknown or missing:
                raise ValueError(
                    f"sizes[{i}]: {'unknown input(s) ' + str(unknown) if unknown else ''}"
                    f"{'; ' if unknown and missing else ''}"
                    f"{'no shape for ' + str(missing) if missing else ''}; the file takes {names}"
                )
            shapes = [size[n] for n in names]
        elif len(size) and all(isinstance(v, (int, np.integer)) for v in size):
            shapes = [size]
        else:
            shapes = list(size)
        if len(shapes) != len(names):
            raise ValueError(
                f"sizes[{i}]: {len(shapes)} shape(s) for {len(names)} graph input(s) {names}; "
                "give one shape per input (a shape alone for a file with one input)"
            )
        run = []
        for (name, dims, _), shape in zip(declared, shapes):
            shape_t = tuple(int(v) for v in shape)
            if len(shape_t) != len(dims) or any(v < 1 for v in shape_t):
                raise ValueError(
                    f"sizes[{i}]: {shape_t} does not fit input {name!r} of rank {len(dims)} "
                    f"({_dims_text(dims)}); give positive sizes"
                )
            run.append(shape_t)
        runs.append(tuple(run))
    if not runs:
        raise ValueError("sizes is empty; give at least one size, or None for the default")
    return runs


def verify_export(
    model: Any,
    file: Any,
    sizes: Sequence[Any] | None = None,
    *,
    input_shape: Sequence[int] | None = None,
    seed: int = 0,
    atol: float = 1e-4,
    rtol: float = 1e-4,
    tolerance: str = "scale",
    progress: Callable[[str], None] | None = None,
    name: str | None = None,
    against: str | None = None,
) -> ExportReport:
    """Run the ONNX ``file`` in onnxruntime and the torch ``model`` at several sizes and
    compare their outputs, shapes and values.

    A file exported with dynamic axes must equal its model at every size those axes allow,
    not only at the export size. By default the sizes are those of :func:`default_sizes`
    around ``input_shape`` (the export size; the file's fixed dims and 32 for the others
    when not given): the base, every dynamic dim one larger (an odd size for an even base)
    with a batch of 2, one smaller, moved by a different odd step per axis, and twice the
    base plus one. A size the torch model itself refuses (an input smaller than a kernel)
    is skipped and reported; one onnxruntime refuses while the model runs fails, as does a
    file whose dims are fixed where the model takes other sizes (with explicit ``sizes``).
    Inputs are seeded standard normal values (of the graph input's element type); each
    output is judged as :func:`padkit.onnx.verify.verify` judges it.

    Args:
        model: the torch module the file was exported from (run in eval mode, without
            gradients, on torch tensors of the same values).
        file: the ONNX file: a path, the serialized bytes, or an ``onnx.ModelProto``.
        sizes: the sizes to run, each a shape (a file with one input), a sequence of shapes
            (one per graph input) or a mapping from input name to shape.
        input_shape: the base of the default sizes (one-input files).
        seed: the seed of the random inputs.
        atol, rtol, tolerance: as in :func:`padkit.onnx.verify.verify`.
        progress: called with a short message before each stage.
        name: the file's label in the report.
        against: the model's label in the report (default: its class name).

    Returns:
        An :class:`ExportReport`; ``report.passed`` says whether every size matched.

    Raises:
        ImportError: onnx or onnxruntime is not installed.
        FileNotFoundError: ``file`` is a path that does not exist.
        TypeError: ``model`` is not a ``torch.nn.Module``.
        ValueError: ``sizes``, ``input_shape`` or ``tolerance`` does not fit the file.

    Example:
        >>> import io, warnings, torch, padkit
        >>> net = padkit.nn.Conv1d(2, 3, 4, stride=2, padding="same").eval()
        >>> buf = io.BytesIO()
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation
        ...     torch.onnx.export(net, (torch.randn(1, 2, 9),), buf, input_names=["x"],
        ...                       dynamo=False, dynamic_axes={"x": {0: "n", 2: "t"}})
        >>> report = verify_export(net, buf.getvalue(), input_shape=(1, 2, 9))
        >>> report.passed, len(report.sizes)
        (True, 5)
    """
    from .verify import TOLERANCES

    def say(message: str) -> None:
        if progress is not None:
            progress(message)

    import torch
    from torch import nn

    if not isinstance(model, nn.Module):
        raise TypeError(
            f"verify_export(): model must be a torch.nn.Module, got {type(model).__name__}"
        )
    if tolerance not in TOLERANCES:
        raise ValueError(
            f"verify_export(): tolerance must be one of {TOLERANCES}, got {tolerance!r}"
        )
    say("loading onnx and onnxruntime ...")
    onnx, ort = _require_runtime()
    say("reading the file ...")
    proto, label = _read(onnx, file)
    label = name if name is not None else label
    declared = graph_inputs(proto)
    runs = default_sizes(declared, input_shape) if sizes is None else _given_sizes(declared, sizes)
    timings: dict[str, float] = {"onnxruntime": 0.0, "torch": 0.0}
    t0 = time.perf_counter()
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    timings["session"] = time.perf_counter() - t0
    out_names = [o.name for o in proto.graph.output]
    rng = np.random.default_rng(seed)
    checks = []
    modes = [(m, m.training) for m in model.modules()]
    try:
        model.eval()
        for run in runs:
            inputs = tuple((n, shape) for (n, _, _), shape in zip(declared, run))
            say("size " + ", ".join(f"{n} {_shape_text(s)}" for n, s in inputs) + " ...")
            arrays = [_random(shape, elem, rng) for (_, _, elem), shape in zip(declared, run)]
            t0 = time.perf_counter()
            try:
                with torch.no_grad():
                    result = model(*(torch.from_numpy(np.ascontiguousarray(a)) for a in arrays))
            except Exception as err:
                checks.append(
                    SizeCheck(inputs, skipped=f"the torch model refuses it ({_one_line(err)})")
                )
                continue
            finally:
                timings["torch"] += time.perf_counter() - t0
            mine = _flat(result)
            t0 = time.perf_counter()
            try:
                theirs = session.run(out_names, {n: a for (n, _), a in zip(inputs, arrays)})
            except Exception as err:
                checks.append(
                    SizeCheck(
                        inputs,
                        error=f"onnxruntime fails where the torch model runs ({_one_line(err)})",
                    )
                )
                continue
            finally:
                timings["onnxruntime"] += time.perf_counter() - t0
            if len(mine) != len(theirs):
                checks.append(
                    SizeCheck(
                        inputs,
                        error=f"the torch model returns {len(mine)} tensor(s), the file "
                        f"{len(theirs)} output(s)",
                    )
                )
                continue
            outs = tuple(
                compare_output(n, a, b, atol, rtol, tolerance)
                for n, a, b in zip(out_names, mine, theirs)
            )
            checks.append(SizeCheck(inputs, outs))
    finally:
        for m, training in modes:
            m.training = training
    return ExportReport(
        model=label,
        against=against if against is not None else type(model).__name__,
        declared=tuple((n, _dims_text(dims)) for n, dims, _ in declared),
        sizes=tuple(checks),
        atol=atol,
        rtol=rtol,
        tolerance=tolerance,
        seed=seed,
        timings=timings,
    )


def _one_line(err: BaseException) -> str:
    text = str(err).strip()
    first = text.splitlines()[0] if text else ""
    if len(first) > 200:
        first = first[:200] + " ..."
    return f"{type(err).__name__}: {first}"


def _flat(value: Any) -> list[np.ndarray]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value.detach().cpu().numpy()]
    if isinstance(value, (list, tuple)):
        return [a for v in value for a in _flat(v)]
    if isinstance(value, dict):
        return [a for v in value.values() for a in _flat(v)]
    return [np.asarray(value)]
