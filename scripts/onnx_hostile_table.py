"""Run the hostile ONNX cases of tests/hostile_onnx.py through padkit.onnx.load,
onnxruntime and (when importable) onnx2torch, and print the Markdown table of
docs/onnx-import.md.

Each case and runtime runs in a forked child under an address-space limit (what the parent
holds + 3 GiB) and a 30 s alarm, with the canary's folder as its working directory; a
child that dies, hangs or runs out of memory is reported as such. A run "reads the canary"
when the canary's values come out of the model.

    PYTHONPATH=.:tests python scripts/onnx_hostile_table.py [--root DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import numpy as np
import onnx
from hostile_onnx import CANARY_VALUE, CASES, Case

SECONDS = 30


def _inputs(model: Any) -> dict[str, np.ndarray]:
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims = [d.dim_value for d in tt.shape.dim]
        dtype = np.bool_ if tt.elem_type == onnx.TensorProto.BOOL else np.float32
        feeds[vi.name] = np.ones(dims, dtype)
    return feeds


def _proto(case: Case) -> Any:
    if isinstance(case.model, onnx.ModelProto):
        return case.model
    if isinstance(case.model, bytes):
        return onnx.load_from_string(case.model)
    return onnx.load(case.model, load_external_data=False)


def _run_padkit(case: Case) -> str:
    import torch

    import padkit.onnx

    module = padkit.onnx.load(case.model, **case.kwargs)
    feeds = _inputs(_proto(case))
    with torch.no_grad():
        out = module(*[torch.from_numpy(a) for a in feeds.values()])
    return _ran(out.numpy())


def _run_ort(case: Case) -> str:
    import onnxruntime as ort

    source = case.model
    if isinstance(source, onnx.ModelProto):
        source = source.SerializeToString()
    session = ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    feeds = _inputs(_proto(case))
    out = session.run(None, feeds)[0]
    return _ran(np.asarray(out))


def _run_onnx2torch(case: Case) -> str:
    import onnx2torch
    import torch

    model = case.model if isinstance(case.model, str) else _proto(case)
    module = onnx2torch.convert(model)
    feeds = _inputs(_proto(case))
    with torch.no_grad():
        out = module(*[torch.from_numpy(a) for a in feeds.values()])
    if isinstance(out, (tuple, list)):
        out = out[0]
    return _ran(out.detach().numpy() if hasattr(out, "detach") else np.asarray(out))


def _ran(out: np.ndarray) -> str:
    if out.dtype.kind == "f" and np.any(out == np.float32(CANARY_VALUE)):
        return "**runs, reads the canary**"
    return "runs"


RUNNERS = {"padkit": _run_padkit, "onnxruntime": _run_ort, "onnx2torch": _run_onnx2torch}


def _short(err: BaseException) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    text = text.replace("|", "/")
    if len(text) > 90:
        text = text[:87] + "..."
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _vm() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def cell(runner: str, text: str) -> str:
    """A short table cell for an outcome."""
    if not text.startswith("refuses: "):
        return text
    kind, _, message = text[len("refuses: ") :].partition(": ")
    if runner == "onnxruntime":
        when = "fails when run" if "while running" in message else "refuses"
        return f"{when} ({kind})"
    if runner == "padkit":
        return f"refuses ({kind})"
    raw = kind not in ("ValidationError", "NotImplementedError")
    return f"refuses (raw {kind})" if raw else f"refuses ({kind})"


def run_one(runner: str, case: Case, cwd: Path) -> str:
    """The outcome of one runtime on one case, in a forked child."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read)
        os.chdir(cwd)
        limit = _vm() + (3 << 30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        signal.alarm(SECONDS)
        try:
            text = RUNNERS[runner](case)
        except MemoryError:
            text = "out of memory (MemoryError)"
        except BaseException as err:
            text = "refuses: " + _short(err)
        os.write(write, text.encode())
        os._exit(0)
    os.close(write)
    start = time.monotonic()
    chunks = []
    while True:
        left = SECONDS + 10 - (time.monotonic() - start)
        ready, _, _ = select.select([read], [], [], max(left, 0))
        if not ready:
            os.kill(pid, signal.SIGKILL)
            chunks = [f"hangs (killed after {SECONDS + 10} s)".encode()]
            break
        data = os.read(read, 65536)
        if not data:
            break
        chunks.append(data)
    os.close(read)
    _, status = os.waitpid(pid, 0)
    text = b"".join(chunks).decode()
    if not text:
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        name = signal.Signals(sig).name if sig else f"exit {os.WEXITSTATUS(status)}"
        if sig == signal.SIGALRM:
            return f"hangs (over {SECONDS} s)"
        return f"**crashes ({name})**"
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", help="folder for the cases (default: a temporary one)")
    parser.add_argument("--json", help="also write the outcomes to this JSON file")
    args = parser.parse_args()
    root = Path(args.root or tempfile.mkdtemp(prefix="hostile_onnx_"))
    import onnxruntime

    import padkit  # noqa: F401 - imported before forking, as the others

    versions = {"padkit": "padkit", "onnxruntime": f"onnxruntime {onnxruntime.__version__}"}
    try:
        from importlib.metadata import version

        import onnx2torch  # noqa: F401

        versions["onnx2torch"] = f"onnx2torch {version('onnx2torch')}"
    except ImportError:
        pass
    import torch

    torch.set_num_threads(1)
    rows, outcomes = [], {}
    for name, build in CASES.items():
        case = build(root)
        got = {r: run_one(r, case, root / "outside") for r in versions}
        outcomes[name] = got
        cells = [cell(r, got[r]).replace("|", "/") for r in versions]
        rows.append(f"| `{name}` | {case.what} | " + " | ".join(cells) + " |")
        print(rows[-1], file=sys.stderr, flush=True)
    header = "| Case | File | " + " | ".join(versions.values()) + " |"
    print(header)
    print("|" + "---|" * (2 + len(versions)))
    print("\n".join(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(outcomes, indent=1))


if __name__ == "__main__":
    main()
