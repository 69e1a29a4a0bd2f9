"""How many ONNX backend node tests padkit.onnx.load (and onnx2torch) pass.

Every node test case the installed ``onnx`` generates (``collect_testcases()``) whose
outputs are all floating tensors is imported, run on its stored inputs and compared with its
stored outputs (same dtype, same shape, ``assert_allclose`` with the case's rtol/atol, as
the official backend runner does). Each importer runs in this process, one case at a time.

    python scripts/onnx_node_coverage.py                  # padkit and onnx2torch
    python scripts/onnx_node_coverage.py --only padkit    # padkit alone
    python scripts/onnx_node_coverage.py --failures       # why each padkit case fails
    python scripts/onnx_node_coverage.py --json out.json  # per-case results

The summary prints the totals and, per operator, the cases each importer passes.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def as_array(a: Any) -> Any:
    """A stored input or output as numpy (cases store some as TensorProto)."""
    if hasattr(a, "SerializeToString") and hasattr(a, "data_type"):
        from onnx import numpy_helper

        return numpy_helper.to_array(a)
    return a


def is_float(a: Any) -> bool:
    a = as_array(a)
    return isinstance(a, np.ndarray) and a.dtype.name in (
        "float16",
        "float32",
        "float64",
        "bfloat16",
    )


def all_cases() -> list[Any]:
    """Every node test case the installed onnx generates."""
    import onnx.backend.test.case.node as node_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(node_cases.collect_testcases())


def float_cases() -> list[Any]:
    """The node test cases whose every output is a floating-point tensor."""
    return [c for c in all_cases() if c.data_sets and all(is_float(o) for o in c.data_sets[0][1])]


def primary_op(case: Any, by_name: dict[str, Any]) -> str:
    """The operator a case tests (an expanded case counts for its op)."""
    base = re.sub(r"_expanded(_ver\d+)?$", "", case.name)
    source = by_name.get(base, case)
    return str(source.model.graph.node[0].op_type) if source.model.graph.node else "?"


def to_torch(a: Any) -> Any:
    import torch

    if isinstance(a, list):
        return [to_torch(v) for v in a]
    a = np.asarray(as_array(a))
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(a.copy())


def to_numpy(t: Any) -> np.ndarray:
    import torch

    if t.dtype == torch.bfloat16:
        return np.asarray(t.detach().float().numpy())
    return np.asarray(t.detach().numpy())


def check(outs: Any, expected: list[Any], rtol: float, atol: float) -> None:
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    if len(outs) != len(expected):
        raise AssertionError(f"{len(outs)} outputs, expected {len(expected)}")
    for got, want in zip(outs, expected):
        want = as_array(want)
        got_np = to_numpy(got)
        if got_np.dtype.name != want.dtype.name and not (
            want.dtype.name == "bfloat16" and str(got.dtype) == "torch.bfloat16"
        ):
            raise AssertionError(f"dtype {got.dtype}, expected {want.dtype}")
        if got_np.shape != want.shape:
            raise AssertionError(f"shape {got_np.shape}, expected {want.shape}")
        np.testing.assert_allclose(
            got_np.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol
        )


def run_padkit(case: Any) -> Any:
    import torch

    import padkit.onnx

    module = padkit.onnx.load(case.model)
    for inputs, expected in case.data_sets:
        with torch.no_grad():
            out = module(*[to_torch(a) for a in inputs])
        check(out, expected, case.rtol, case.atol)


def run_onnx2torch(case: Any) -> Any:
    import torch
    from onnx2torch import convert

    module = convert(case.model)
    for inputs, expected in case.data_sets:
        with torch.no_grad():
            out = module(*[to_torch(a) for a in inputs])
        check(out, expected, case.rtol, case.atol)


RUNNERS: dict[str, Callable[[Any], Any]] = {"padkit": run_padkit, "onnx2torch": run_onnx2torch}


def outcome(fn: Callable[[Any], Any], case: Any) -> tuple[bool, str]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn(case)
    except Exception as err:  # every failure counts, whatever raised it
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        return False, f"{type(err).__name__}: {first[:200]}"
    return True, ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=sorted(RUNNERS), help="run one importer")
    parser.add_argument("--failures", action="store_true", help="list padkit's failures")
    parser.add_argument("--json", help="write per-case results to this file")
    parser.add_argument("-k", help="only cases whose name contains this")
    parser.add_argument("--all", action="store_true", help="every case, not only float ones")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    cases = all_cases() if args.all else float_cases()
    if args.k:
        cases = [c for c in cases if args.k in c.name]
    by_name = {c.name: c for c in cases}
    names = [args.only] if args.only else list(RUNNERS)
    results: dict[str, dict[str, tuple[bool, str]]] = {n: {} for n in names}
    for name in names:
        start = time.perf_counter()
        for case in cases:
            results[name][case.name] = outcome(RUNNERS[name], case)
        took = time.perf_counter() - start
        passed = sum(ok for ok, _ in results[name].values())
        what = "node tests" if args.all else "float-output node tests"
        print(f"{name}: {passed} of {len(cases)} {what} pass ({took:.0f} s)")

    per_op: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for case in cases:
        op = primary_op(case, by_name)
        per_op[op]["cases"] += 1
        for name in names:
            per_op[op][name] += results[name][case.name][0]
    print()
    print(f"{'op':<34}{'cases':>6}" + "".join(f"{n:>12}" for n in names))
    behind = []
    for op in sorted(per_op):
        row = per_op[op]
        print(f"{op:<34}{row['cases']:>6}" + "".join(f"{row[n]:>12}" for n in names))
        if len(names) == 2 and 0 < row["padkit"] < row["onnx2torch"]:
            behind.append(op)
        if len(names) == 2 and row["padkit"] == 0 and row["onnx2torch"] > 0:
            behind.append(op)
    if len(names) == 2:
        print("\nops where onnx2torch passes more cases than padkit:", ", ".join(behind) or "none")
    if args.failures and "padkit" in results:
        print("\npadkit failures:")
        for case in cases:
            ok, why = results["padkit"][case.name]
            if not ok:
                print(f"  {case.name}: {why}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({n: {k: list(v) for k, v in r.items()} for n, r in results.items()}, fh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
