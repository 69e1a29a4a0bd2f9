"""convert's pass over pads in code: a pad module outside an ``nn.Sequential`` or an ``F.pad``
whose amounts come from the input size, int attributes or 0-d buffers, folded into the conv or
pool that reads its output, by rewiring the module that makes the calls."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from .. import functional as PF
from ..op import Op
from ._common import (
    Change,
    FoldedPad,
    Skip,
    SurgeryError,
    SurgeryReport,
    _brief,
    _build,
    _Layer,
    _pads_text,
    _paths_by_id,
    _replace,
)
from ._fold import Rule, _fold_into
from ._probe import (
    Dispatch,
    PadCall,
    Pairs,
    base_name,
    call_pad,
    own_run,
    pad_rule,
    passthrough,
    rewired_fast,
    sample_sizes,
)
from ._trace import Event, _tensors, probe_like, record

_Edit = Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]


def _identity(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return args[0] if args else kwargs["input"]


class _PadkitCall:
    """A replacement for a functional conv/pool call: padkit's functional with ``layer``'s
    padding, the call's own tensors (input, weight, bias). A module-level class (holding
    the record), so a module rewired with it pickles."""

    def __init__(self, layer: _Layer) -> None:
        self.layer = layer

    def __call__(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        layer, nd = self.layer, self.layer.nd
        x = args[0] if args else kwargs["input"]
        if layer.kind == "conv":
            w = args[1] if len(args) > 1 else kwargs["weight"]
            b = args[2] if len(args) > 2 else kwargs.get("bias")
            return getattr(PF, f"conv{nd}d")(
                x,
                w,
                b,
                layer.stride,
                layer.padding,
                layer.dilation,
                layer.groups,
                padding_mode=layer.padding_mode,
            )
        if layer.kind == "max":
            return getattr(PF, f"max_pool{nd}d")(
                x,
                layer.kernel,
                layer.stride,
                layer.padding,
                layer.dilation,
                layer.ceil_mode,
                layer.return_indices,
                padding_value=layer.padding_value,
            )
        return getattr(PF, f"avg_pool{nd}d")(
            x,
            layer.kernel,
            layer.stride,
            layer.padding,
            layer.ceil_mode,
            layer.count_include_pad,
            layer.divisor_override,
        )


def _rule_text(rules: Sequence[Rule]) -> str:
    if all(isinstance(r, tuple) for r in rules):
        return f"static {tuple(rules)}"
    return (
        "TF "
        + "/".join(sorted({repr(r) for r in rules if isinstance(r, str)}))
        + (" (amounts computed from the input size)")
    )


class _CodePads:
    """Pads a model computes in code (a pad module outside an nn.Sequential, ``F.pad`` with
    amounts from the input size, from int attributes or 0-d buffers) folded into the conv
    or pool that reads them. One traced forward finds each pad call and the one call that
    reads its output; the module running the pad, alone at many input sizes, tells the rule
    behind its amounts (static, or TF 'same'/'same_lower' for the reader's kernel, stride
    and dilation)."""

    def __init__(self, out: nn.Module, report: SurgeryReport) -> None:
        self.out = out
        self.report = report
        self.swaps: dict[str, nn.Module] = {}
        self.edits: dict[str, dict[tuple[str, int], _Edit]] = {}
        self.notes: dict[str, list[str]] = {}
        self.changes: list[Change] = []
        self.skips: list[Skip] = []
        self.called: set[str] = set()
        self.traced = False
        self.edited: set[int] = set()

    @staticmethod
    def opaque(m: nn.Module) -> bool:
        return Op.from_module(m) is not None

    def run(self) -> nn.Module:
        try:
            shape, like = probe_like(self.out, "convert")
        except SurgeryError:
            return self.out
        try:
            events = record(self.out, shape, self.opaque, like, once=True)
        except SurgeryError as exc:
            self.report.notes.append(f"pads written in code were not searched: {exc}")
            return self.out
        self.traced = True
        self.events = events
        self.modules = dict(self.out.named_modules())
        self.calls = Counter(e.path for e in events if e.kind == "module")
        self.called = set(self.calls)
        self.by_id = _paths_by_id(self.out)
        # a pad whose one reader is another pad: folded with it (inner index -> outer index)
        self.feeds: dict[int, int] = {}
        for i, event in enumerate(events):
            if event.kind == "function" and "pad" in event.info:
                inner = self._pad_reader(i)
                if inner is not None:
                    self.feeds[inner] = i
        outer = set(self.feeds.values())
        for i, event in enumerate(events):
            if event.kind == "function" and "pad" in event.info and i not in outer:
                chain = [i]
                while chain[0] in self.feeds:
                    chain.insert(0, self.feeds[chain[0]])
                why = self.fold(i, event, chain[:-1])
                if why is not None:
                    self.skips.append(Skip(event.path, why))
                    for k in chain[:-1]:
                        self.skips.append(
                            Skip(
                                self.events[k].path,
                                f"its {self.events[k].name}() output is read by the pad of "
                                f"{event.path or '<root>'!r}, which is left in place: {why}",
                            )
                        )
        return self.apply()

    def _pad_reader(self, i: int) -> int | None:
        """The pad call that is the one reader of pad call ``i``'s output, or None."""
        if self.events[i].info.get("uses", 0) != 1:
            return None
        readers = [
            j
            for j, e in enumerate(self.events)
            if e.info.get("src") == i and e.kind == "function" and "pad" in e.info
        ]
        return readers[0] if len(readers) == 1 else None

    def fold(self, i: int, event: Event, before: Sequence[int] = ()) -> str | None:
        """Plan the fold of one pad call, and of the pad calls ``before`` it whose outputs
        it reads in turn (outermost first); the reason they are left in place, or None."""
        pad: PadCall = event.info["pad"]
        owner_path = event.path
        readers = [
            (j, e)
            for j, e in enumerate(self.events)
            if e.info.get("src") == i
            and (
                (e.kind == "function" and "op" in e.info)
                or (e.kind == "module" and self.opaque(self.modules[e.path]))
            )
        ]
        uses = event.info.get("uses", 0)
        if uses != 1 or len(readers) != 1:
            if uses > 1:
                return (
                    f"its {event.name}() output is read {uses} times; only a pad read by one "
                    "conv or pool is folded"
                )
            return f"its {event.name}() output is not read by a conv or pool; left in place"
        j, reader = readers[0]
        reader_path = reader.path
        if reader.kind == "module":
            op = Op.from_module(self.modules[reader_path])
        else:
            op = reader.info["op"]
        if op is None:  # pragma: no cover - readers are conv/pool calls
            return "its reader is not a conv or pool"
        if op.kind == "conv_transpose":
            return "padding a transposed conv's input is not a crop of its output"
        if op.kind not in ("conv", "max", "avg") and reader.kind == "function":
            return f"its reader {reader.name}() has no padkit functional form"
        for path in {owner_path, reader_path}:
            if self.calls.get(path, 0) != 1 or len(self.by_id.get(id(self.modules[path]), [])) > 1:
                return (
                    f"{path or '<root>'!r} is called {self.calls.get(path, 0)} times per forward "
                    "or shared; pads are folded in modules called once"
                )
        if reader_path in self.swaps or (
            reader.kind == "function" and reader_path in self.edits and owner_path != reader_path
        ):
            return f"{reader_path!r} already takes another pad"
        nd = op.nd
        pairs = self._spatial(pad.pairs, nd)
        if pairs is None:
            return f"it pads non-spatial axes ({pad.pairs}) before {reader_path!r}"
        if any(min(p) < 0 for p in pairs):
            return f"it crops (negative pads {pairs})"
        sampled = self.sample(event, i, op)
        if isinstance(sampled, str):
            return sampled
        samples, pad_only, ordinal = sampled
        rules = [pad_rule(samples, op, axis) for axis in range(nd)]
        if any(r is None for r in rules):
            return (
                f"its amounts follow no rule padkit has: neither static nor TF 'same'/"
                f"'same_lower' for the kernel/stride/dilation of {reader_path!r} (samples "
                f"{[(n, p) for n, p in samples[:4]]}...)"
            )
        rules_: list[Rule] = [r for r in rules if r is not None]
        outer = self.outer_pads(before, pad, op, owner_path)
        if isinstance(outer, str):
            return outer
        pre, outer_plans = outer
        name = type(self.modules[reader_path]).__name__
        folded, why = _fold_into(op, name, rules_, pad.mode, pad.value, pre)
        if folded is None:
            return f"not folded into {reader_path!r}: {why}"
        text = _rule_text(rules_)
        if pre is not None:
            text = f"static {tuple(pre)} then {text}"
        reader_module = self.modules[reader_path]
        if reader.kind == "module":
            new = _build(folded, reader_module)
            self.swaps[reader_path] = new
            after = _brief(new, folded)
        else:
            fname = base_name(reader.name)
            k = sum(
                1
                for e in self.events[:j]
                if e.kind == "function" and e.path == reader_path and base_name(e.name) == fname
            )
            self.edits.setdefault(reader_path, {})[(fname, k)] = _PadkitCall(folded)
            self.notes.setdefault(reader_path, []).append(f"{fname} #{k} padkit {text}")
            after = (
                f"{name} (own forward; its {fname}() runs as padkit's) pads={_pads_text(folded)}"
            )
        self.changes.append(
            Change(
                reader_path,
                _brief(reader_module, op),
                after,
                ("padding",),
                False,
                f"takes the {text} {why} pad of {owner_path or '<root>'!r}",
                takes=FoldedPad(owner_path, text, why),
            )
        )
        for k, k_only, k_ordinal, k_text in outer_plans:
            self.drop(self.events[k], k_only, k_ordinal, reader_path, k_text)
        self.drop(event, pad_only, ordinal, reader_path, _rule_text(rules_))
        return None

    def drop(self, event: Event, pad_only: bool, ordinal: int, reader_path: str, text: str) -> None:
        """The pad call of ``event``, folded into ``reader_path``, no longer runs: its module
        becomes a passthrough (where padding is all it computes) or skips that call."""
        owner_path = event.path
        owner = self.modules[owner_path]
        pname = base_name(event.name)
        if pad_only and owner_path != reader_path and owner_path not in self.edits:
            self.swaps[owner_path] = passthrough(owner, f"its pad is folded into {reader_path}")
            after = f"{type(owner).__name__} (passthrough: returns its input)"
        else:
            self.edits.setdefault(owner_path, {})[(pname, ordinal)] = _identity
            self.notes.setdefault(owner_path, []).append(f"{pname} #{ordinal} skipped")
            after = f"{type(owner).__name__} (own forward; its {pname}() call #{ordinal} skipped)"
        self.changes.append(
            Change(
                owner_path,
                type(owner).__name__,
                after,
                ("folded",),
                False,
                f"its {text} pad is folded into {reader_path!r}",
            )
        )

    def outer_pads(
        self, before: Sequence[int], pad: PadCall, op: Op, inner_path: str
    ) -> str | tuple[list[tuple[int, int]] | None, list[tuple[int, bool, int, str]]]:
        """The pad calls ``before`` a folded pad (outermost first, each read only by the
        next): their static pads, summed per axis, which the inner pad's rule resolves after
        (``Padding.pre``), and the plan to drop each; or why they cannot fold. Each must be
        a constant pad with the inner pad's value, in a module called once, with amounts
        that do not depend on the input size."""
        if not before:
            return None, []
        nd = op.nd
        total = [(0, 0)] * nd
        plans: list[tuple[int, bool, int, str]] = []
        inner = f"the pad of {inner_path or '<root>'!r}"
        for k in before:
            ev = self.events[k]
            path = ev.path
            outer: PadCall = ev.info["pad"]
            where = f"{path or '<root>'!r} pads before {inner}, and"
            if (outer.mode, outer.value) != (pad.mode, pad.value) or outer.mode != "constant":
                return (
                    f"{where} they pad with (mode, value) {(outer.mode, outer.value)} and "
                    f"{(pad.mode, pad.value)}: one padkit layer's pads hold one constant value"
                )
            if self.calls.get(path, 0) != 1 or len(self.by_id.get(id(self.modules[path]), [])) > 1:
                return (
                    f"{where} it is called {self.calls.get(path, 0)} times per forward or "
                    "shared; pads are folded in modules called once"
                )
            pairs = self._spatial(outer.pairs, nd)
            if pairs is None or any(min(p) < 0 for p in pairs):
                return f"{where} it pads non-spatial axes or crops ({outer.pairs})"
            sampled = self.sample(ev, k, op)
            if isinstance(sampled, str):
                return f"{where} {sampled}"
            samples, only, ordinal = sampled
            rules = [pad_rule(samples, op, axis) for axis in range(nd)]
            if not all(isinstance(r, tuple) for r in rules):
                return (
                    f"{where} its amounts depend on the input size "
                    f"({[(n, p) for n, p in samples[:4]]}...): padkit folds static pads "
                    "before a rule, not a rule before another"
                )
            static = [r for r in rules if isinstance(r, tuple)]
            total = [(a + lo, b + hi) for (a, b), (lo, hi) in zip(total, static)]
            plans.append((k, only, ordinal, _rule_text(static)))
        return total, plans

    @staticmethod
    def _spatial(pairs: Sequence[tuple[int, int]], nd: int) -> list[tuple[int, int]] | None:
        pairs = list(pairs)
        while len(pairs) < nd:
            pairs.insert(0, (0, 0))
        extra, spatial = pairs[: len(pairs) - nd], pairs[len(pairs) - nd :]
        if any(p != (0, 0) for p in extra):
            return None
        return spatial

    def sample(
        self, event: Event, i: int, op: Op
    ) -> str | tuple[list[tuple[int, Pairs]], bool, int]:
        """Run the module holding the pad alone at many input sizes: the pads it makes per
        size, whether padding is all it computes, and the pad's ordinal in its own code."""
        owner_path = event.path
        owner = self.modules[owner_path]
        own_event = next(e for e in self.events if e.kind == "module" and e.path == owner_path)
        pad_in = event.ins[0][0]
        if len(own_event.ins[0]) != 1 or own_event.ins[0][0] != pad_in:
            return (
                "its input is not the input of the module running it, which padkit runs "
                "alone to learn the rule behind the amounts; left in place"
            )
        mine = [
            k
            for k, e in enumerate(self.events)
            if e.kind == "function" and e.path == owner_path and "pad" in e.info
        ]
        ordinal, total = mine.index(i), len(mine)
        pname = base_name(event.name)
        same_name = [
            k
            for k, e in enumerate(self.events)
            if e.kind == "function" and e.path == owner_path and base_name(e.name) == pname
        ]
        name_ordinal = same_name.index(i)
        nd = op.nd
        sizes = sorted(
            {pad_in[-nd + a] for a in range(nd)}
            | {n for a in range(nd) for n in sample_sizes(op, a, pad_in[-nd + a])}
        )
        lead = (1, *pad_in[1:-nd])
        param = next(iter(owner.parameters()), None)
        dtype = param.dtype if param is not None else torch.float32
        device = param.device if param is not None else None
        samples: list[tuple[int, Pairs]] = []
        pad_only = True
        modes = {m: m.training for m in owner.modules()}
        probe: PadCall = event.info["pad"]
        try:
            owner.eval()
            for n in sizes:
                x = torch.randn(*lead, *([n] * nd), dtype=dtype, device=device)
                try:
                    calls, y = own_run(owner, x)
                except Exception:
                    continue
                pads = [(c, p) for c in calls if (p := call_pad(c[0], c[1], c[2])) is not None]
                if len(pads) == total:
                    (_, cargs, ckw, cout), found = pads[ordinal]
                    src = cargs[0] if cargs else ckw.get("input")
                    if not isinstance(src, Tensor) or tuple(src.shape[-nd:]) != (n,) * nd:
                        return "its input is not the input of its module at other sizes"
                    if (found.mode, found.value) != (probe.mode, probe.value):
                        return "its mode or value changes with the input size"
                    got = self._spatial(found.pairs, nd)
                    if got is None:
                        return "it pads non-spatial axes at other sizes"
                    pairs: Pairs = tuple(got)
                    result = cout
                elif total == 1 and not pads:
                    pairs, result = tuple((0, 0) for _ in range(nd)), x
                else:
                    return "its module pads a varying number of times with the input size"
                others = [
                    c for c in calls if call_pad(c[0], c[1], c[2]) is None and list(_tensors(c[3]))
                ]
                pad_only = pad_only and not others and y is result
                samples.append((n, pairs))
        finally:
            for m, mode in modes.items():
                m.training = mode
        for axis in range(nd):
            s = op.stride[axis]
            if len({n % s for n, _ in samples}) < s or len(samples) < 3:
                return "its module does not run at enough input sizes to tell the rule of its pads"
        return samples, pad_only, name_ordinal

    def _examples(self, path: str, module: nn.Module) -> list[Tensor]:
        """Random inputs for ``module`` at its traced size and two larger ones (an odd and
        an even step), to check a fast rewired copy against the rewired one."""
        event = next((e for e in self.events if e.kind == "module" and e.path == path), None)
        if event is None or len(event.ins[0]) != 1 or len(event.ins[0][0]) < 3:
            return []
        shape = event.ins[0][0]
        param = next(iter(module.parameters()), None)
        dtype = param.dtype if param is not None else torch.float32
        device = param.device if param is not None else None
        g = torch.Generator().manual_seed(0)
        return [
            torch.randn(*shape[:2], *(n + extra for n in shape[2:]), generator=g).to(
                device=device, dtype=dtype
            )
            for extra in (0, 1, 2)
        ]

    def apply(self) -> nn.Module:
        out = self.out
        for path, new in self.swaps.items():
            _replace(out, self.by_id[id(self.modules[path])], new)
        for path, table in self.edits.items():
            module = out.get_submodule(path)
            note = "; ".join(self.notes.get(path, []))
            new = rewired_fast(module, Dispatch(table), note, self._examples(path, module))
            if path == "":
                out = new
            else:
                _replace(out, self.by_id[id(self.modules[path])], new)
        order = {p: k for k, (p, _) in enumerate(out.named_modules(remove_duplicate=False))}
        self.changes.sort(key=lambda c: order.get(c.path, -1))
        self.report.changes.extend(self.changes)
        changed = {c.path for c in self.changes}
        self.report.skipped = [s for s in self.report.skipped if s.path not in changed]
        listed = {s.path for s in self.report.skipped}
        for skip in self.skips:
            if skip.path not in listed:
                self.report.skipped.append(skip)
                listed.add(skip.path)
        self.edited = {id(out.get_submodule(p)) for p in self.edits}
        return out
