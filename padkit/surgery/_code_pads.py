"""convert's pass over pads in code: every pad the model's record
(:func:`padkit.recognise.record`) finds before a conv or pool, however written (``F.pad`` in
any mode, a pad module of any class, ``torch.cat`` with constants) and wherever its amounts
come from (static, the input size, int attributes, 0-d buffers), folded into the conv or pool
that reads its output, by rewiring (or replacing) the module that makes the pad."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from .. import functional as PF
from ..op import Op
from ..recognise import Call, Pad, Record, layer_kind, record
from ._common import (
    PROBE,
    Change,
    FoldedPad,
    Shape,
    Skip,
    SurgeryError,
    SurgeryReport,
    _brief,
    _build,
    _Layer,
    _pads_text,
    _paths_by_id,
    _replace,
    probe_like,
)
from ._fold import Rule, _fold_into
from ._probe import (
    Dispatch,
    Pairs,
    pad_rule,
    passthrough,
    rewired_fast,
    sample_sizes,
)

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


class _CatPiece:
    """An edit of a ``torch.cat`` that pads: the concatenation returns its main piece (the
    tensor the constant pieces pad). Module-level, so a rewired module pickles."""

    def __init__(self, piece: int) -> None:
        self.piece = piece

    def __call__(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        pieces = args[0] if args else kwargs["tensors"]
        return pieces[self.piece]


def sample_pads(
    owner: nn.Module,
    pad_in: Shape,
    owner_ins: Sequence[Shape],
    ordinal: int,
    total: int,
    mode: str,
    value: float,
    op: Op,
) -> str | tuple[list[tuple[int, Pairs]], bool]:
    """Run ``owner`` (the module whose own code makes a pad: its ``ordinal``-th of ``total``,
    in any form :func:`padkit.recognise.record` reads) alone at many input sizes: the pads
    it makes per size, and whether padding is all it computes; or why it cannot be run so.
    ``pad_in`` is the shape the pad read, ``owner_ins`` the shapes ``owner`` was called
    with."""
    if len(owner_ins) != 1 or tuple(owner_ins[0]) != tuple(pad_in):
        return (
            "its input is not the input of the module running it, which padkit runs "
            "alone to learn the rule behind the amounts; left in place"
        )
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
    try:
        owner.eval()
        for n in sizes:
            x = torch.randn(*lead, *([n] * nd), dtype=dtype, device=device)
            try:
                rec = record(owner, x)
            except Exception:
                continue
            own = [c for c in rec.calls if c.owner == 0]
            pads = [c for c in own if c.pad is not None]
            if len(pads) == total:
                found = pads[ordinal].pad
                assert found is not None
                src = rec.tensor(found.source)
                if tuple(src.shape[-nd:]) != (n,) * nd:
                    return "its input is not the input of its module at other sizes"
                if (found.mode, found.value) != (mode, value):
                    return "its mode or value changes with the input size"
                got = _spatial(found.pairs, nd)
                if got is None:
                    return "it pads non-spatial axes at other sizes"
                pairs: Pairs = tuple(got)
                result = pads[ordinal].makes[0] if pads[ordinal].makes else None
            elif total == 1 and not pads:
                pairs, result = tuple((0, 0) for _ in range(nd)), rec.canonical(id(x))
            else:
                return "its module pads a varying number of times with the input size"
            others = [c for c in own if c.pad is None and c.makes and not _feeds_pads(rec, c)]
            out = rec.output
            pad_only = (
                pad_only
                and not others
                and isinstance(out, Tensor)
                and rec.canonical(id(out)) == result
            )
            samples.append((n, pairs))
    finally:
        for m, training in modes.items():
            m.training = training
    for axis in range(nd):
        s = op.stride[axis]
        if len({n % s for n, _ in samples}) < s or len(samples) < 3:
            return "its module does not run at enough input sizes to tell the rule of its pads"
    return samples, pad_only


def _feeds_pads(rec: Record, call: Call) -> bool:
    """Whether every tensor ``call`` made is read, and only by pads (the constant piece of a
    ``torch.cat`` that pads)."""
    for t in call.makes:
        readers = rec.readers(t)
        if not readers or any(r.pad is None for r in readers):
            return False
    return True


def _spatial(pairs: Sequence[tuple[int, int]], nd: int) -> list[tuple[int, int]] | None:
    """The last ``nd`` axes' pairs, or None where an axis before them is padded."""
    pairs = list(pairs)
    while len(pairs) < nd:
        pairs.insert(0, (0, 0))
    extra, spatial = pairs[: len(pairs) - nd], pairs[len(pairs) - nd :]
    if any(p != (0, 0) for p in extra):
        return None
    return spatial


#: a use of a tensor: ("module", module call) for a conv/pool module, ("call", call) else
_Use = tuple[str, int]
#: calls that read a tensor's size, dtype and device only: no use of its values
_SHAPE_READS = frozenset(
    {"new_zeros", "new_ones", "new_empty", "new_full", "zeros_like", "ones_like", "empty_like"}
)


class _CodePads:
    """Pads a model computes before a conv or pool, however written (``F.pad`` in any mode,
    a pad module of any class, ``torch.cat`` with constants; amounts static, from the input
    size, from attributes or buffers), folded into the conv or pool that reads them. The
    model's record (:func:`padkit.recognise.record`) names each pad and the one call that
    reads its output, through any number of wrapper levels; the module making the pad, run
    alone at many input sizes (:func:`sample_pads`), tells the rule behind its amounts
    (static, or TF 'same'/'same_lower' for the reader's kernel, stride and dilation)."""

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
        self._top: dict[int | None, int | None] = {None: None}

    @staticmethod
    def opaque(m: nn.Module) -> bool:
        """A conv or pool module: its own calls are the layer, not code to read."""
        return Op.from_module(m) is not None

    def run(self) -> nn.Module:
        try:
            shape, like = probe_like(self.out, "convert")
            g = torch.Generator(like.device).manual_seed(0)
            x = torch.randn(shape, generator=g, device=like.device, dtype=like.dtype)
        except SurgeryError:
            # no conv to take the channels from: a pool takes any, on its dims
            kinds = [kd for m in self.out.modules() if (kd := layer_kind(m)) is not None]
            if not kinds:
                return self.out
            g = torch.Generator().manual_seed(0)
            x = torch.randn(1, 1, *([PROBE] * kinds[0][1]), generator=g)
        modes = [(m, m.training) for m in self.out.modules()]
        try:
            self.out.eval()
            self.rec = record(self.out, x)
        except Exception as exc:
            self.report.notes.append(
                "pads written in code were not searched: the model does not run on a probe "
                f"of shape {tuple(x.shape)} ({type(exc).__name__}: {exc})"
            )
            return self.out
        finally:
            for m, training in modes:
                m.training = training
        self.traced = True
        rec = self.rec
        self.modules = dict(self.out.named_modules())
        seen = [mc for mc in rec.modules if self._top_opaque(mc.parent) is None]
        self.calls = Counter(mc.path for mc in seen)
        self.called = set(self.calls)
        self.by_id = _paths_by_id(self.out)
        # every call counts, live or not: a conv or pool module may compute its output
        # outside torch's functions (padkit's native backend), which no record links
        sites = [c for c in rec.calls if c.pad is not None and self._top_opaque(c.owner) is None]
        for c in rec.calls:
            if (
                c.name in ("pad", "constant_pad_nd")
                and c.pad is None
                and self._top_opaque(c.owner) is None
            ):
                self.skips.append(
                    Skip(self.path(c), f"its {c.name}() crops (negative pads): no pad to fold")
                )
        # a pad whose one reader is another pad: folded with it (inner index -> outer index)
        self.feeds: dict[int, int] = {}
        for c in sites:
            inner = self._pad_reader(c)
            if inner is not None:
                self.feeds[inner] = c.index
        outer = set(self.feeds.values())
        for c in sites:
            if c.index in outer:
                continue
            chain = [c.index]
            while chain[0] in self.feeds:
                chain.insert(0, self.feeds[chain[0]])
            why = self.fold(c, [rec.calls[k] for k in chain[:-1]])
            if why is not None:
                self.skips.append(Skip(self.path(c), why))
                for k in chain[:-1]:
                    self.skips.append(
                        Skip(
                            self.path(rec.calls[k]),
                            f"its {rec.calls[k].name}() output is read by the pad of "
                            f"{self.path(c) or '<root>'!r}, which is left in place: {why}",
                        )
                    )
        return self.apply()

    def path(self, call: Call) -> str:
        return "" if call.owner is None else self.rec.modules[call.owner].path

    def _top_opaque(self, index: int | None) -> int | None:
        """The outermost conv/pool module call that module call ``index`` is or runs in."""
        if index in self._top:
            return self._top[index]
        assert index is not None
        mc = self.rec.modules[index]
        found = self._top_opaque(mc.parent)
        if found is None and mc.module is not None and self.opaque(mc.module):
            found = index
        self._top[index] = found
        return found

    def uses(self, call: Call) -> list[_Use]:
        """Who reads ``call``'s output: a conv or pool module called with it (once, whatever
        it computes inside), or a call outside such modules."""
        if not call.makes:
            return []
        tid = call.makes[0]
        found: list[_Use] = [
            ("module", mc.index)
            for mc in self.rec.modules
            if tid in mc.inputs and self._top_opaque(mc.index) == mc.index
        ]
        for r in self.rec.readers(tid):
            if r.name in _SHAPE_READS:
                continue
            top = self._top_opaque(r.owner)
            use = ("module", top) if top is not None else ("call", r.index)
            if use not in found:
                found.append(use)
        return found

    def _pad_reader(self, call: Call) -> int | None:
        """The pad call that is the one reader of pad ``call``'s output, or None."""
        uses = self.uses(call)
        if len(uses) != 1 or uses[0][0] != "call":
            return None
        reader = self.rec.calls[uses[0][1]]
        return reader.index if reader.pad is not None else None

    def fold(self, call: Call, before: Sequence[Call] = ()) -> str | None:
        """Plan the fold of one pad call, and of the pad calls ``before`` it whose outputs
        it reads in turn (outermost first); the reason they are left in place, or None."""
        pad = call.pad
        assert pad is not None
        rec = self.rec
        owner_path = self.path(call)
        uses = self.uses(call)
        readers = [u for u in uses if u[0] == "module" or rec.calls[u[1]].op is not None]
        what = f"its {call.name}()" if pad.form == "pad" else f"its {call.name}() (a pad)"
        if len(uses) != 1 or len(readers) != 1:
            if len(uses) > 1:
                return (
                    f"{what} output is read {len(uses)} times; only a pad read by one conv or "
                    "pool is folded"
                )
            if not uses:
                return f"{what} output is read by nothing in the model: nothing to fold into"
            return f"{what} output is not read by a conv or pool; left in place"
        if pad.mode == "state":
            return (
                f"{what} concatenates the buffer {pad.state!r}, which is state, not a pad "
                "a conv or pool can make"
            )
        kind, index = readers[0]
        reader_call = rec.calls[index] if kind == "call" else None
        if reader_call is None:
            reader_path = rec.modules[index].path
            op = Op.from_module(self.modules[reader_path])
        else:
            reader_path = self.path(reader_call)
            op = reader_call.op
        if op is None:  # pragma: no cover - readers are conv/pool calls
            return "its reader is not a conv or pool"
        if op.kind == "conv_transpose":
            return "padding a transposed conv's input is not a crop of its output"
        if op.kind not in ("conv", "max", "avg") and reader_call is not None:
            return f"its reader {reader_call.name}() has no padkit functional form"
        for path in {owner_path, reader_path}:
            if self.calls.get(path, 0) != 1 or len(self.by_id.get(id(self.modules[path]), [])) > 1:
                return (
                    f"{path or '<root>'!r} is called {self.calls.get(path, 0)} times per forward "
                    "or shared; pads are folded in modules called once"
                )
        if reader_path in self.swaps or (
            reader_call is not None and reader_path in self.edits and owner_path != reader_path
        ):
            return f"{reader_path!r} already takes another pad"
        nd = op.nd
        pairs = _spatial(pad.pairs, nd)
        if pairs is None:
            return f"it pads non-spatial axes ({pad.pairs}) before {reader_path!r}"
        sampled = self.sample(call, op)
        if isinstance(sampled, str):
            return sampled
        samples, pad_only = sampled
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
        if reader_call is None:
            new = _build(folded, reader_module)
            self.swaps[reader_path] = new
            after = _brief(new, folded)
        else:
            fname, k = reader_call.name, reader_call.ordinal
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
        for k_call, k_only, k_text in outer_plans:
            self.drop(k_call, k_only, reader_path, k_text)
        self.drop(call, pad_only, reader_path, _rule_text(rules_))
        return None

    def drop(self, call: Call, pad_only: bool, reader_path: str, text: str) -> None:
        """The pad ``call``, folded into ``reader_path``, no longer runs: its module becomes
        a passthrough (where padding is all it computes; in an ``nn.Sequential``, an
        ``nn.Identity``) or skips that call."""
        assert call.pad is not None
        owner_path = self.path(call)
        owner = self.modules[owner_path]
        pname, ordinal = call.name, call.ordinal
        if pad_only and owner_path != reader_path and owner_path not in self.edits:
            parent = owner_path.rpartition(".")[0]
            if owner_path and type(self.out.get_submodule(parent)) is nn.Sequential:
                self.swaps[owner_path] = nn.Identity()
                after = "Identity"
            else:
                self.swaps[owner_path] = passthrough(owner, f"its pad is folded into {reader_path}")
                after = f"{type(owner).__name__} (passthrough: returns its input)"
        else:
            edit: _Edit = _identity if call.pad.form == "pad" else _CatPiece(call.pad.piece)
            self.edits.setdefault(owner_path, {})[(pname, ordinal)] = edit
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
        self, before: Sequence[Call], pad: Pad, op: Op, inner_path: str
    ) -> str | tuple[list[tuple[int, int]] | None, list[tuple[Call, bool, str]]]:
        """The pad calls ``before`` a folded pad (outermost first, each read only by the
        next): their static pads, summed per axis, which the inner pad's rule resolves after
        (``Padding.pre``), and the plan to drop each; or why they cannot fold. Each must be
        a constant pad with the inner pad's value, in a module called once, with amounts
        that do not depend on the input size."""
        if not before:
            return None, []
        nd = op.nd
        total = [(0, 0)] * nd
        plans: list[tuple[Call, bool, str]] = []
        inner = f"the pad of {inner_path or '<root>'!r}"
        for call in before:
            path = self.path(call)
            outer = call.pad
            assert outer is not None
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
            pairs = _spatial(outer.pairs, nd)
            if pairs is None:
                return f"{where} it pads non-spatial axes ({outer.pairs})"
            sampled = self.sample(call, op)
            if isinstance(sampled, str):
                return f"{where} {sampled}"
            samples, only = sampled
            rules = [pad_rule(samples, op, axis) for axis in range(nd)]
            if not all(isinstance(r, tuple) for r in rules):
                return (
                    f"{where} its amounts depend on the input size "
                    f"({[(n, p) for n, p in samples[:4]]}...): padkit folds static pads "
                    "before a rule, not a rule before another"
                )
            static = [r for r in rules if isinstance(r, tuple)]
            total = [(a + lo, b + hi) for (a, b), (lo, hi) in zip(total, static)]
            plans.append((call, only, _rule_text(static)))
        return total, plans

    def sample(self, call: Call, op: Op) -> str | tuple[list[tuple[int, Pairs]], bool]:
        """:func:`sample_pads` for the module whose own code makes pad ``call``."""
        pad = call.pad
        assert pad is not None and call.owner is not None
        mc = self.rec.modules[call.owner]
        mine = [c for c in self.rec.calls if c.owner == call.owner and c.pad is not None]
        return sample_pads(
            self.modules[mc.path],
            tuple(self.rec.tensor(pad.source).shape),
            mc.in_shapes,
            mine.index(call),
            len(mine),
            pad.mode,
            pad.value,
            op,
        )

    def _examples(self, path: str, module: nn.Module) -> list[Tensor]:
        """Random inputs for ``module`` at its traced size and two larger ones (an odd and
        an even step), to check a fast rewired copy against the rewired one."""
        mc = next((m for m in self.rec.modules if m.path == path), None)
        if mc is None or len(mc.in_shapes) != 1 or len(mc.in_shapes[0]) < 3:
            return []
        shape = mc.in_shapes[0]
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
