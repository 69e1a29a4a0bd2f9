"""The ``padkit`` command: a thin argparse shell over :mod:`padkit.inspect`,
:mod:`padkit.onnx.verify`, :func:`padkit.onnx.verify_export` and :mod:`padkit.explain`.

Exit codes: 0 success, 1 failure (a verify mismatch, a model that does not load, any
library error), 2 usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from . import __version__

__all__ = ["main"]

_DESCRIPTION = (
    "Exact padding for conv and pool layers: inspect models, verify ONNX imports, "
    "and draw every framework's padding convention."
)

_EPILOG = """\
examples:
  padkit verify                                   # the bundled GoogLeNet-style model vs onnxruntime
  padkit verify model.onnx --input-shape 1,3,224,224
  padkit verify net.onnx --against mynets.py:build      # the file vs its torch model, many sizes
  padkit inspect model.onnx
  padkit inspect torchvision.models:resnet18 --input-shape 1,3,224,224
  padkit inspect timm:tf_efficientnet_b0 --input-shape 1,3,224,224 --json
  padkit explain --kernel 3 --stride 2 --input 8
  padkit explain -k 4 -s 2 -n 9 --convention tf,flux --png same.png

Run 'padkit COMMAND --help' for each command's options.
"""

_INSPECT_EPILOG = """\
MODEL is an ONNX file, or a torch model given as 'package.module:factory': padkit imports
the module (the current directory is searched first) and calls factory() with no
arguments. When the module has no such attribute but a create_model function, as timm
does, create_model(name) is called. Weights are whatever the factory gives (torchvision
and timm: random).

examples:
  padkit inspect googlenet.onnx
  padkit inspect torchvision.models:resnet18
  padkit inspect timm:tf_efficientnet_b0 --input-shape 1,3,224,224
  padkit inspect mymodels:build_net --input-shape 1,3,64,64 --json > layers.json
"""

_VERIFY_EPILOG = """\
Without MODEL, verify runs the bundled example: a small GoogLeNet-style graph with
Caffe-style pools (MaxPool pads [0,0,1,1], ceil_mode), LRN, an inception block, Gemm and
softmax. An output passes when its infinities and NaNs sit where onnxruntime's do and
every other element is within atol + rtol*max|onnxruntime| (the output's scale: float32
rounding grows with it); --elementwise allows atol + rtol*|onnxruntime| per element.
--float64 also runs padkit in float64: a difference that is float32 rounding stays near
padkit's own rounding, a wrong pad does not. Every randomised input is named.

examples:
  padkit verify
  padkit verify model.onnx --float64
  padkit verify model.onnx --seed 1 --atol 1e-5
  padkit verify model.onnx --input-shape 1,3,320,320          # fills dynamic dims
  padkit verify two_inputs.onnx --input a.npy --input b.npy    # or --input NAME=FILE.npy

--against FILE.py:FACTORY checks an exported file against the torch model FACTORY()
returns (in eval mode): onnxruntime and the model run on the same seeded random inputs at
several sizes, and shapes and values must agree at each. By default the sizes are taken
around --input-shape (the export size; the file's fixed dims and 32 for dynamic ones when
not given): the base, every dynamic dim +1 with a batch of 2, -1, a different odd step per
axis, and twice the base plus one, so a file that is right only at its export size fails.
A size the model itself refuses is skipped and reported.

  padkit verify net.onnx --against mynets.py:build --input-shape 1,3,33,29
  padkit verify net.onnx --against mynets.py:build --size 1,3,40,40 --size 2,3,17,9
  padkit verify net.onnx --against mypackage.models:build
"""

_EXPLAIN_EPILOG = """\
conventions (default: all):
  tf          TF/XLA SAME = ONNX SAME_UPPER: input-size dependent, odd pad at the end
  onnx-lower  ONNX/JAX SAME_LOWER: odd pad at the start
  torch       torch padding='same': total k_eff-1, odd pad at the end; refused at stride > 1
  torch-sym   torch symmetric padding=(k_eff-1)//2
  flux        Flux SamePad(): total k_eff-1, odd pad at the start
  caffe       Caffe pooling: symmetric --pad, ceil rounding

examples:
  padkit explain --kernel 3 --stride 2 --input 8
  padkit explain -k 2 -s 1 -n 5 --convention tf,onnx-lower,torch,flux
  padkit explain -k 3 -s 2 -n 112 --convention caffe --pad 0
  padkit explain -k 3 -s 2 -n 8 --png windows.png        # needs matplotlib
"""


# ----------------------------------------------------------------------------- argument types


def _shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(v) for v in text.replace("x", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a shape is comma-separated positive ints such as 1,3,224,224, got {text!r}"
        ) from None
    if not dims or any(v < 1 for v in dims):
        raise argparse.ArgumentTypeError(
            f"a shape is comma-separated positive ints such as 1,3,224,224, got {text!r}"
        )
    return dims


def _named_shape(text: str) -> tuple[str | None, tuple[int, ...]]:
    name, sep, rest = text.rpartition("=")
    return (name, _shape(rest)) if sep else (None, _shape(text))


def _named_file(text: str) -> tuple[str | None, str]:
    name, sep, rest = text.partition("=")
    if sep and name and not os.path.exists(text):
        return name, rest
    return None, text


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive int, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive int, got {value}")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an int >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an int >= 0, got {value}")
    return value


def _conventions(text: str) -> tuple[str, ...]:
    from .explain import parse_conventions

    try:
        return parse_conventions(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _by_name(items: Sequence[tuple[str | None, Any]], what: str) -> Any:
    """Positional values as a list, or named ones as a dict (not both)."""
    named = [n for n, _ in items if n is not None]
    if named and len(named) != len(items):
        raise _UsageError(f"give every {what} as NAME=... or none of them")
    return {n: v for n, v in items} if named else [v for _, v in items]


class _UsageError(Exception):
    """A usage error found after parsing (exit code 2)."""


# ----------------------------------------------------------------------------- commands


def _progress(command: str) -> Any:
    start = time.perf_counter()

    def say(message: str) -> None:
        print(
            f"padkit {command}: [{time.perf_counter() - start:5.2f} s] {message}", file=sys.stderr
        )

    return say


def _dims_text(shape: Sequence[int]) -> str:
    return ",".join(str(v) for v in shape)


def _is_onnx_target(model: str) -> bool:
    """MODEL names an ONNX file (as padkit.inspect.inspect_model reads it)."""
    return os.path.isfile(model) or model.lower().endswith(".onnx")


def _check_onnx_input_shape(proto: Any, shape: Sequence[int] | None) -> None:
    """--input-shape must have the rank of the model's first graph input."""
    if shape is None:
        return
    inits = {t.name for t in proto.graph.initializer}
    inputs = [vi for vi in proto.graph.input if vi.name not in inits]
    if not inputs or not inputs[0].type.tensor_type.HasField("shape"):
        return
    dims = inputs[0].type.tensor_type.shape.dim
    if len(dims) != len(shape):
        declared = "x".join(
            str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in dims
        )
        raise _UsageError(
            f"--input-shape {_dims_text(shape)} has {len(shape)} dim(s), but the model's "
            f"first input {inputs[0].name!r} has rank {len(dims)} ({declared})"
        )


def _inspect_torch(module: Any, shape: Sequence[int] | None) -> list[Any]:
    """inspect_model on a torch module; a shape that does not fit names --input-shape."""
    from .inspect import inspect_model

    reports = inspect_model(module)  # the layers alone: no forward pass
    if shape is None:
        return reports
    try:
        return inspect_model(module, shape)
    except Exception as err:
        dims = _dims_text(shape)
        first = reports[0] if reports else None
        if first is not None and len(shape) != len(first.kernel) + 2:
            axes = ("N", "C", *("D", "H", "W")[3 - len(first.kernel) :])
            raise _UsageError(
                f"--input-shape {dims} has {len(shape)} dim(s), but the model's first conv/pool "
                f"layer {first.name!r} ({first.op}) takes {len(axes)}-dim input "
                f"({', '.join(axes)})"
            ) from None
        reason = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise _UsageError(
            f"--input-shape {dims}: the model's forward pass on zeros of that shape failed: "
            f"{type(err).__name__}: {reason}"
        ) from None


def _import_problem(model: str) -> tuple[str | None, list[dict[str, Any]]]:
    """Whether padkit.onnx.load imports the model: (one-line error or None, unsupported ops)."""
    from .onnx import OnnxImportError, UnsupportedOnnxError, load

    try:
        load(model)  # the path, so that external data is found
    except UnsupportedOnnxError as err:
        ops: list[dict[str, Any]] = [
            {
                "op": u.op,
                "opset": u.opset,
                "count": u.nodes,
                "reason": u.reason,
            }
            for u in err.unsupported
        ]
        listed = "; ".join(
            f"{o['op']} (opset {o['opset']}) x{o['count']}"
            + (f": {o['reason']}" if o["reason"] else "")
            for o in ops
        )
        total = sum(o["count"] for o in ops)
        return f"{model}: padkit.onnx.load cannot import {total} node(s): {listed}", ops
    except OnnxImportError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        return f"{model}: padkit.onnx.load cannot import it: {first}", []
    return None, []


#: the start of padkit.native.BackendWarning's message (padkit.native.WARNING_PREFIX, not
#: imported here: the CLI checks its arguments before it loads torch)
_BACKEND_OFF = "padkit's oneDNN backend is off"


@contextlib.contextmanager
def _backend_noted() -> Iterator[None]:
    """The backend's one warning is left out: the command prints :func:`_backend_line`."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_BACKEND_OFF)
        yield


def _backend_line() -> str:
    """Whether padkit's ops ran on the oneDNN backend, and if not why (one line)."""
    from . import native

    with _backend_noted():
        return f"native backend: {native.status()}"


def _cmd_inspect(args: argparse.Namespace) -> int:
    with _backend_noted():
        return _inspect(args)


def _inspect(args: argparse.Namespace) -> int:
    from .inspect import format_table, inspect_model, load_factory

    model = args.model
    onnx_file = _is_onnx_target(model)
    if onnx_file:
        from ._onnxfile import read_onnx_file

        proto = read_onnx_file(model, load_external_data=False)
        _check_onnx_input_shape(proto, args.input_shape)
        reports = inspect_model(proto, args.input_shape)
    elif ":" in model:
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())  # 'mymodels:build' from the current directory
        reports = _inspect_torch(load_factory(model), args.input_shape)
    else:
        reports = inspect_model(model, args.input_shape)  # says which forms MODEL takes
    if not args.json:
        print(format_table(reports), flush=True)  # before the import check, which may fail
    problem, unsupported = _import_problem(model) if onnx_file else (None, [])
    if not args.json and reports:
        print(_backend_line())
    if args.json:
        payload: dict[str, Any] = {
            "model": model,
            "input_shape": list(args.input_shape) if args.input_shape else None,
            "layers": [r.to_dict() for r in reports],
            "native_backend": _backend_line().partition(": ")[2],
        }
        if onnx_file:
            payload["imports"] = problem is None
            payload["import_error"] = problem
            payload["unsupported_ops"] = unsupported
        print(json.dumps(payload, indent=2))
    if problem is not None:
        print(f"padkit inspect: error: {problem}", file=sys.stderr)
        return 1
    return 0


def _cmd_verify_against(args: argparse.Namespace) -> int:
    """``padkit verify FILE --against SPEC``: the file against the torch model it came from."""
    if args.model is None:
        raise _UsageError(
            f"--against {args.against!r} needs MODEL, the ONNX file exported from that model"
        )
    for given, option in ((args.input, "--input"), (args.float64, "--float64")):
        if given:
            raise _UsageError(
                f"{option} is for the importer check; --against runs seeded random inputs "
                "at several sizes (give them with --size)"
            )
    shapes = args.input_shape or []
    if len(shapes) > 1 or any(n is not None for n, _ in shapes):
        raise _UsageError(
            "with --against, --input-shape is one unnamed shape: the export size that the "
            "default sizes are taken around (give other sizes with --size)"
        )
    from ._onnxfile import check_onnx_path, read_onnx_file

    check_onnx_path(args.model)
    read_onnx_file(args.model, load_external_data=False)
    say = _progress("verify")
    if not args.quiet:
        say("loading torch ...")
    from .onnx import load_model, verify_export

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # 'mymodels:build' from the current directory
    if not args.quiet:
        say(f"building the model from --against {args.against} ...")
    try:
        model = load_model(args.against)
    except ValueError as err:
        raise _UsageError(f"--against: {err}") from None
    report = verify_export(
        model,
        args.model,
        args.size,
        input_shape=shapes[0][1] if shapes else None,
        seed=args.seed,
        atol=args.atol,
        rtol=args.rtol,
        tolerance="elementwise" if args.elementwise else "scale",
        progress=None if args.quiet else say,
        name=args.model,
        against=args.against,
    )
    print(report)
    return 0 if report.passed else 1


def _cmd_verify(args: argparse.Namespace) -> int:
    if args.against is not None:
        return _cmd_verify_against(args)
    if args.size:
        raise _UsageError("--size needs --against: the sizes the model and the file run at")
    if args.model is not None:  # a missing or empty file is reported before the slow imports
        from ._onnxfile import check_onnx_path, read_onnx_file

        check_onnx_path(args.model)
        read_onnx_file(args.model, load_external_data=False)  # onnx only: no torch yet
    say = _progress("verify")
    if not args.quiet:
        say("loading torch ...")
    from .onnx.verify import verify

    inputs: Any = None
    if args.input:
        import numpy as np

        files = _by_name([_named_file(t) for t in args.input], "--input")
        if isinstance(files, dict):
            inputs = {name: np.load(path) for name, path in files.items()}
        else:
            inputs = [np.load(path) for path in files]
    shapes = _by_name(args.input_shape, "--input-shape") if args.input_shape else None
    if args.model is None:
        from .examples import example_model

        model: Any = example_model("googlenet_mini")
        name = "googlenet_mini (bundled example, padkit/examples/googlenet_mini.onnx)"
        if not args.quiet:
            say("model: the bundled example googlenet_mini")
    else:
        model, name = args.model, args.model
        if not args.quiet:
            say(f"model: {name}")
    with _backend_noted():
        report = verify(
            model,
            inputs,
            input_shapes=shapes,
            seed=args.seed,
            atol=args.atol,
            rtol=args.rtol,
            progress=None if args.quiet else say,
            name=name,
            tolerance="elementwise" if args.elementwise else "scale",
            float64=args.float64,
        )
    print(_backend_line())
    print(report)
    return 0 if report.passed else 1


def _cmd_explain(args: argparse.Namespace) -> int:
    from .explain import explain

    result = explain(
        args.kernel,
        args.stride,
        args.input,
        args.dilation,
        args.convention,
        caffe_pad=args.pad,
    )
    if args.png:
        result.to_png(args.png)
        print(f"wrote {args.png}", file=sys.stderr)
    print(result)
    return 0


# ----------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    """The ``padkit`` argument parser."""
    fmt = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="padkit", description=_DESCRIPTION, epilog=_EPILOG, formatter_class=fmt
    )
    parser.add_argument("--version", action="version", version=f"padkit {__version__}")
    parser.add_argument(
        "--traceback", action="store_true", help="show the full traceback of an error"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser(
        "inspect",
        help="table of every conv/pool layer's padding, with warnings",
        description="List every conv, transposed conv and pool layer: kernel, stride, "
        "dilation, resolved pads per side, auto_pad, symmetric or not, input-size dependent "
        "or not, and what it exports to (torch) or how padkit imports it (ONNX), with "
        "warnings for the padding that breaks ports.",
        epilog=_INSPECT_EPILOG,
        formatter_class=fmt,
    )
    p.add_argument("model", metavar="MODEL", help="an ONNX file or 'package.module:factory'")
    p.add_argument(
        "--input-shape",
        type=_shape,
        metavar="SHAPE",
        help="full input shape, e.g. 1,3,224,224: resolves input-size dependent pads "
        "(torch: one traced forward of zeros; ONNX: shape inference)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.set_defaults(run=_cmd_inspect)

    p = sub.add_parser(
        "verify",
        help="import an ONNX model with padkit and compare it with onnxruntime",
        description="Import MODEL with padkit.onnx.load, run it and onnxruntime on the same "
        "inputs, print the max abs difference per output and PASS/FAIL (exit 0/1).",
        epilog=_VERIFY_EPILOG,
        formatter_class=fmt,
    )
    p.add_argument("model", metavar="MODEL", nargs="?", help="an ONNX file (default: bundled)")
    p.add_argument(
        "--input",
        action="append",
        metavar="[NAME=]FILE.npy",
        help="an input array (repeat for several graph inputs, in graph order or by name)",
    )
    p.add_argument(
        "--input-shape",
        action="append",
        type=_named_shape,
        metavar="[NAME=]SHAPE",
        help="shape of a random input, e.g. 1,3,224,224 (repeatable; fills dynamic dims)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--atol", type=float, default=1e-4, help="absolute tolerance (default 1e-4)")
    p.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance (default 1e-4)")
    p.add_argument(
        "--elementwise",
        action="store_true",
        help="tolerance atol + rtol*|ref| per element instead of relative to max|ref|",
    )
    p.add_argument(
        "--float64",
        action="store_true",
        help="also run padkit in float64 and report float32 rounding against mismatch",
    )
    p.add_argument(
        "--against",
        metavar="FILE.py:FACTORY",
        help="check MODEL against the torch model FACTORY() returns ('path/to/file.py:factory' "
        "or 'package.module:factory') at several sizes the export never saw, instead of "
        "against padkit's importer",
    )
    p.add_argument(
        "--size",
        action="append",
        type=_shape,
        metavar="SHAPE",
        help="with --against: an input shape to run (repeatable; replaces the default sizes "
        "around --input-shape)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no progress messages on stderr")
    p.set_defaults(run=_cmd_verify)

    p = sub.add_parser(
        "explain",
        help="draw where each output window sits under each padding convention",
        description="Draw, for one axis, the padded input and every output window's taps "
        "under each convention, aligned on the input positions, with the (lo, hi) pads and "
        "the output length. All numbers come from padkit.spec.",
        epilog=_EXPLAIN_EPILOG,
        formatter_class=fmt,
    )
    p.add_argument("-k", "--kernel", type=_positive, required=True, help="kernel size")
    p.add_argument("-s", "--stride", type=_positive, default=1, help="stride (default 1)")
    p.add_argument("-n", "--input", type=_positive, required=True, help="input length")
    p.add_argument("-d", "--dilation", type=_positive, default=1, help="dilation (default 1)")
    p.add_argument(
        "-c",
        "--convention",
        type=_conventions,
        default=None,
        metavar="LIST",
        help="comma-separated: tf, onnx-lower, torch, torch-sym, flux, caffe (default: all)",
    )
    p.add_argument(
        "--pad",
        type=_non_negative,
        default=None,
        help="Caffe's symmetric pad (default (kernel-1)//2)",
    )
    p.add_argument("--png", metavar="FILE", help="also draw the picture with matplotlib")
    p.set_defaults(run=_cmd_explain)
    return parser


def _closed_pipe() -> int:
    """Stdout's reader went away (``padkit explain ... | head -1``): end quietly.

    Like other Unix tools, which die of SIGPIPE, exit 141 (128 + 13) with no message.
    Stdout is pointed at the null device so that the interpreter's final flush of what
    is still buffered does not fail again.
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout without a file descriptor
        pass
    return 141


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``padkit`` command; returns the exit code.

    Example:
        >>> main(["explain", "-k", "3", "-s", "2", "-n", "8", "-c", "tf"])  # doctest: +ELLIPSIS
        kernel 3, stride 2, ...
        tf          (0, 1)   4       end
        0
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, --version, usage errors (2)
        return exit_.code if isinstance(exit_.code, int) else 0
    try:
        code = int(args.run(args))
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return code
    except BrokenPipeError:
        return _closed_pipe()
    except _UsageError as err:
        print(f"padkit {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("padkit: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # the CLI boundary: a plain message instead of a traceback
        if args.traceback:
            raise
        print(f"padkit {args.command}: error: {type(err).__name__}: {err}", file=sys.stderr)
        return 1
