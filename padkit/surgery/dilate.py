"""surgery.dilate: output-stride dilation with every padding it affects fixed."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import torch
from torch import Tensor, nn

from ..recognise import Pad, Record, func_name as _name, record as _record
from ..spec import (
    Padding,
)
from . import _dilate_check as check
from ._common import (
    PROBE,
    STEP,
    Change,
    Shape,
    SurgeryError,
    SurgeryReport,
    _brief,
    _build,
    _check_bool,
    _check_model,
    _classes,
    _Layer,
    _layer,
    _paths_by_id,
    _replace,
    _tensors,
    probe_input,
    probe_like,
    strides,
)
from ._lattice import (
    _GATE_MODES,
    _GATES,
    _LATTICE_READS,
    _LAYOUT,
    LatticeGate,
    _base,
    _lattice,
    _LatticePad,
    _LatticeReads,
    _pointwise,
    _reads_lattice,
)
from ._norms import LatticeNorm
from ._probe import (
    Dispatch,
    base_name,
    module_op,
    owns,
    pad_rule,
    rewired,
)

_HINTS: dict[str, str] = {
    "AvgPool2dSame": (
        "; this is timm's own dilated average downsample, which is not exact: build the "
        "model at output stride 32 and dilate that"
    ),
}


@dataclass
class Event:
    """One module call, or one torch call a module's own code made, as the recogniser's
    :class:`~padkit.recognise.Record` holds it at the two probe sizes: ``path`` the module
    (for a torch call, the module whose own code made it), ``call`` which call of it,
    ``name`` the class or the name the function was called by, ``ordinal`` the record's
    count of that function's name in that code (the key :func:`rewired` edits by), and the
    shapes of its tensors per run. ``info`` holds the record's facts: ``op``, ``pad``,
    ``reduce`` (with ``adaptive`` or ``norm``), ``elementwise``, ``training`` (a batch
    norm's batch statistics); ``src`` the index of the pad event whose output it reads
    first, and for a pad ``uses``, the calls that read its output."""

    kind: str  # "module" or "function"
    path: str
    call: int
    name: str
    ordinal: int = 0
    info: dict[str, Any] = field(default_factory=dict)
    ins: list[list[Shape]] = field(default_factory=list)  # per run
    outs: list[list[Shape]] = field(default_factory=list)  # per run


def _read(rec: Record, opaque: Callable[[nn.Module], bool]) -> list[Event]:
    """The events of one record in the order they began: every module call of the model
    (those inside an ``opaque`` module's call excepted) and every torch call that reads a
    tensor, made by the own code of a module outside every opaque call. A module made
    during the forward (not in the model) is its caller's code."""
    events: list[Event] = []
    hidden: set[int] = set()  # module calls whose code is not read (opaque, or inside one)
    owner: dict[int, int | None] = {}  # module call -> the model's module call it counts as
    number: dict[int, int] = {}
    counts: dict[str, int] = {}
    made_by: dict[int, int] = {}  # a pad's output -> its event
    place: list[tuple[int, int, int]] = []  # (at, 0 module / 1 call, index)
    for m in rec.modules:
        place.append((m.at, 0, m.index))
    for c in rec.calls:
        place.append((c.index, 1, c.index))
    uses: dict[int, int] = {}

    def link(event: Event, tid: int | None) -> None:
        if tid is not None and tid in made_by:
            event.info["src"] = made_by[tid]

    def count(tids: Sequence[int]) -> None:
        for t in tids:
            if t in made_by:
                uses[made_by[t]] = uses.get(made_by[t], 0) + 1

    def shape(tid: int) -> Shape:
        return tuple(rec.tensor(tid).shape)

    for _, is_call, i in sorted(place):
        if not is_call:
            m = rec.modules[i]
            parent = m.parent
            if m.path == "?":
                if parent in hidden:
                    hidden.add(i)
                owner[i] = owner.get(parent) if parent is not None else None
                continue
            number[i] = counts.get(m.path, 0)
            counts[m.path] = number[i] + 1
            owner[i] = i
            if parent is not None and parent in hidden:
                hidden.add(i)
                continue
            shut = m.module is not None and opaque(m.module)
            if shut:
                hidden.add(i)
            event = Event("module", m.path, number[i], m.cls)
            event.ins.append(list(m.in_shapes))
            event.outs.append(list(m.out_shapes))
            link(event, m.inputs[0] if m.inputs else None)
            if shut:
                count(m.inputs)
            events.append(event)
            continue
        c = rec.calls[i]
        at = owner.get(c.owner) if c.owner is not None else None
        if at is None or c.owner in hidden or at in hidden or not c.reads:
            continue
        reads = list(c.reads)
        if c.pad is not None and c.pad.form == "cat":
            reads.insert(0, reads.pop(c.pad.piece))  # the padded tensor first
        event = Event("function", rec.modules[at].path, number[at], c.func, c.ordinal)
        info = event.info
        if c.op is not None:
            info["op"] = c.op
        if c.pad is not None:
            info["pad"] = c.pad
        if c.reduce is not None:
            info["reduce"] = c.reduce.dims
            if c.reduce.kind != "reduce":
                info[c.reduce.kind] = True
        if c.elementwise:
            info["elementwise"] = True
        if c.batch_stats is not None:
            info["training"] = c.batch_stats
        event.ins.append([shape(t) for t in reads])
        event.outs.append([shape(t) for t in c.makes])
        link(event, c.pad.source if c.pad is not None else reads[0])
        if c.makes:  # a size read is no use of the numbers
            count(c.reads)
        if c.pad is not None and c.makes:
            made_by[c.makes[0]] = len(events)
        events.append(event)
    for j, n in uses.items():
        events[j].info["uses"] = n
    return events


def _events(
    model: nn.Module,
    shape: Shape,
    opaque: Callable[[nn.Module], bool],
    like: Tensor | None = None,
) -> list[Event]:
    """The model's record at a random input of ``shape`` and at one ``STEP`` larger per
    spatial axis (in eval mode, restored afterwards), read into merged events (``ins`` and
    ``outs`` hold both runs' shapes)."""
    runs: list[list[Event]] = []
    modes = [(m, m.training) for m in model.modules()]
    try:
        model.eval()
        for extra in (0, STEP):
            x = probe_input(shape, extra, like)
            try:
                rec = _record(model, x)
            except SurgeryError:
                raise
            except Exception as exc:
                raise SurgeryError(
                    f"the model does not run on a probe of shape {tuple(x.shape)} "
                    f"({type(exc).__name__}: {exc}); padkit traces its strides that way"
                ) from exc
            runs.append(_read(rec, opaque))
            del rec
    finally:
        for m, training in modes:
            m.training = training
    first, second = runs
    if [(e.kind, e.path, e.name) for e in first] != [(e.kind, e.path, e.name) for e in second]:
        raise SurgeryError(
            "the model calls other modules or functions at other input sizes; "
            "its strides cannot be traced"
        )
    for a, b in zip(first, second):
        if len(a.ins[0]) != len(b.ins[0]) or len(a.outs[0]) != len(b.outs[0]):
            raise SurgeryError(
                f"{a.path or '<root>'!r} passes other tensors at other input sizes; "
                "its strides cannot be traced"
            )
        a.ins.append(b.ins[0])
        a.outs.append(b.outs[0])
    return first


_FUNCTIONS = {"max": "max_pool{nd}d", "avg": "avg_pool{nd}d", "lp": "lp_pool{nd}d"}


class _Tensors:
    """The strides of the tensors of one event (both runs), and their lattice factors."""

    def __init__(self, first: list[Shape], second: list[Shape], output_stride: int) -> None:
        self.shapes = first
        self.strides = [strides(a, b) for a, b in zip(first, second)]
        self.sizes = [
            sorted((a[d], b[d]) for d in st) for a, b, st in zip(first, second, self.strides)
        ]
        self.factors = [
            {d: max(Fraction(1), a / output_stride) for d, a in st.items()} for st in self.strides
        ]

    def dilated(self) -> bool:
        return any(f > 1 for fs in self.factors for f in fs.values())

    def largest(self) -> Fraction:
        return max((f for fs in self.factors for f in fs.values()), default=Fraction(1))


class _Dilation:
    """Plans a dilation from one traced forward: which modules change, and how."""

    def __init__(self, root: nn.Module, output_stride: int, gates: str) -> None:
        self.root = root
        self.os = output_stride
        self.gates = gates
        self.gate_kinds = _known(_GATES)
        self.plans: dict[str, tuple[nn.Module, Change]] = {}
        self.states: dict[str, _State] = {}
        self.reads: dict[tuple[str, int], dict[int, tuple[tuple[int, int], ...]]] = {}
        self.read_names: dict[tuple[str, int], list[str]] = {}
        self.dense_reads: list[str] = []
        self.strides_out: dict[str, int] = {}
        self.calls_of: dict[tuple[str, int], int] = {}
        self.events: list[Event] = []
        self.pads: list[int] = []
        self.pad_edits: dict[str, dict[tuple[str, int], Any]] = {}
        self.pad_notes: dict[str, list[str]] = {}
        self.calls: dict[str, int] = {}
        # a conv or pool that reads a pad in code: its path -> (the pad's module, its edit)
        self.code_pads: dict[str, tuple[str, _LatticePad]] = {}
        # a layer whose stride became dilation: (module, new layer, overhang, owned, factor)
        self.converted: dict[
            str, tuple[nn.Module, _Layer, tuple[int, ...], bool, tuple[int, ...]]
        ] = {}

    def module(self, path: str) -> nn.Module:
        return self.root.get_submodule(path)

    def refuse(self, path: str, why: str) -> SurgeryError:
        module = self.module(path)
        name = type(module).__name__
        hint = _HINTS.get(name, "")
        if isinstance(module, LatticeGate) or _reads_lattice(module):
            hint = (
                "; it reads the lattice of an earlier dilate(), whose factor padkit does not "
                "rescale: dilate the original model to the new output stride instead"
            )
        return SurgeryError(f"dilate(): cannot handle {path or '<root>'!r} ({name}): {why}{hint}")

    def run(self, events: list[Event]) -> None:
        self.events = events
        for i, event in enumerate(events):
            if event.kind == "module":
                self.on_module(event)
            elif "pad" in event.info:
                self.pads.append(i)
            else:
                self.on_function(event)
        for i in self.pads:
            self.code_pad(i)
        for path, table in self.pad_edits.items():
            base = self.plans[path][0] if path in self.plans else self.module(path)
            new = rewired(base, Dispatch(table), "; ".join(self.pad_notes[path]))
            change = self.plans[path][1] if path in self.plans else None
            if change is not None:  # a layer whose own code pads: both in its detail
                change = replace(
                    change, detail=f"{change.detail}; {'; '.join(self.pad_notes[path])}"
                )
            else:
                change = Change(
                    path,
                    type(base).__name__,
                    f"{type(base).__name__} (own forward; its pads and norms are the lattice's)",
                    ("padding",),
                    False,
                    "; ".join(self.pad_notes[path]),
                )
            self.plans[path] = (new, change)

    def code_pad(self, i: int) -> None:
        """A pad written in code (a pad module, ``F.pad`` with amounts from the input size,
        attributes or buffers) before a conv or pool that dilate changes: re-derived for the
        lattice. Its rule (static, or TF 'same' for the reader's kernel, stride and
        dilation) comes from running its module alone at many sizes, as convert does; on the
        lattice of factor ``f`` the pads are ``f`` times the original's at size
        ``ceil(n / f)``, and the pad call in the module's own code computes them. Before a
        reader whose stride becomes dilation, a TF 'same' rule ends where the dense map
        keeps its length ``n`` (:func:`~padkit.surgery._probe.lattice_pairs`), at every
        size, as a strided 1x1 shortcut beside it does."""
        event = self.events[i]
        ins = _Tensors(event.ins[0], event.ins[1], self.os)
        where = f"its forward pads in code ({event.name}())"
        last = i  # a pad read only by another pad (a chain): the reader is the chain's
        readers: list[Event] = []
        while True:
            readers = [
                e
                for e in self.events
                if e.info.get("src") == last
                and (
                    (e.kind == "function" and "op" in e.info)
                    or (e.kind == "module" and _layer(self.module(e.path)) is not None)
                )
            ]
            pads = [
                j
                for j, e in enumerate(self.events)
                if e.info.get("src") == last and e.kind == "function" and "pad" in e.info
            ]
            if readers or len(pads) != 1 or self.events[last].info.get("uses", 0) != 1:
                break
            last = pads[0]
        reader = readers[0] if len(readers) == 1 else None
        op = None
        if reader is not None:
            op = (
                reader.info["op"] if reader.kind == "function" else _layer(self.module(reader.path))
            )
        changed = ins.dilated()
        restrided: tuple[bool, ...] = ()
        if op is not None and ins.strides:
            st = ins.strides[0]
            dims = range(len(ins.shapes[0]) - op.nd, len(ins.shapes[0]))
            restrided = tuple(
                s > 1 and (a := st.get(d)) is not None and a * s > self.os
                for d, s in zip(dims, op.stride)
            )
            changed = changed or any(restrided)
        if not changed:
            return
        if reader is None or op is None or event.info.get("uses", 0) != 1:
            raise self.refuse(
                event.path,
                f"{where} on a map past the output stride, and its output is not read by "
                "exactly one conv or pool, whose padding dilate could re-derive it for",
            )
        pad: Pad = event.info["pad"]
        if pad.mode != "constant":
            raise self.refuse(
                event.path,
                f"{where} in mode {pad.mode!r} past the output stride: it pads from the "
                "dense map's edge, not the lattice's",
            )
        if self.calls.get(event.path, 0) != 1:
            raise self.refuse(
                event.path,
                f"{where}, and it is called {self.calls.get(event.path, 0)} times per forward; "
                "pads in code are re-derived in modules called once",
            )
        from ._code_pads import sample_pads

        own_event = next(e for e in self.events if e.kind == "module" and e.path == event.path)
        mine = [
            k
            for k, e in enumerate(self.events)
            if e.kind == "function" and e.path == event.path and "pad" in e.info
        ]
        name = base_name(event.name)
        ordinal = event.ordinal
        sampled = sample_pads(
            self.module(event.path),
            event.ins[0][0],
            own_event.ins[0],
            mine.index(i),
            len(mine),
            pad.mode,
            pad.value,
            op,
        )
        if isinstance(sampled, str):
            raise self.refuse(event.path, f"{where} past the output stride: {sampled}")
        samples, _ = sampled
        rules = [pad_rule(samples, op, axis) for axis in range(op.nd)]
        if any(r is None for r in rules):
            raise self.refuse(
                event.path,
                f"{where} past the output stride, with amounts that follow no rule padkit "
                f"knows (neither static nor TF 'same' for {reader.path!r}: "
                f"{[(n, p) for n, p in samples[:4]]}...)",
            )
        shape = ins.shapes[0]
        spatial = range(len(shape) - op.nd, len(shape))
        factor = tuple(int(ins.factors[0].get(d, 1)) for d in spatial)
        rules_ = [r for r in rules if r is not None]
        if reader.path not in self.plans and all(r == (0, 0) for r in rules_):
            return  # no pads, before a layer that keeps its attributes: nothing to re-derive
        edit = _LatticePad(
            op,
            tuple(rules_),
            factor,
            pad.value,
            restrided or None,
            piece=pad.piece if pad.form == "cat" else None,
        )
        self.pad_edits.setdefault(event.path, {})[(name, ordinal)] = edit
        self.code_pads[reader.path] = (event.path, edit)
        keeps = any(isinstance(r, str) and c for r, c in zip(rules_, restrided))
        self.pad_notes.setdefault(event.path, []).append(
            f"its {name}() #{ordinal} pads the lattice {factor} ({_rules_text(rules_)}"
            + (", ending where the dense map keeps its length" if keeps else "")
            + ")"
        )

    # --------------------------------------------------------------------- modules

    def on_module(self, event: Event) -> None:
        module = self.module(event.path)
        self.calls[event.path] = self.calls.get(event.path, 0) + 1
        ins = _Tensors(event.ins[0], event.ins[1], self.os)
        outs = _Tensors(event.outs[0], event.outs[1], self.os)
        if outs.strides and outs.strides[0]:
            a = max(outs.strides[0].values())
            f = max(outs.factors[0].values())
            if a.denominator == 1 and f.denominator == 1:
                self.strides_out.setdefault(event.path, int(a // f))
        layer = _layer(module)
        if layer is not None:
            self.layer(event.path, module, layer, ins, outs)
            return
        kind = self.gate_kinds.get(type(module))
        if kind is not None and ins.dilated():
            self.gate(event.path, module, kind, ins)

    def layer(
        self,
        path: str,
        module: nn.Module,
        layer: _Layer,
        ins: _Tensors,
        outs: _Tensors,
        owned: bool = False,
    ) -> None:
        """Plan one conv or pool: an exact torch/padkit layer is rebuilt as a padkit layer;
        a module that ``owned`` its call (a subclass with its own forward) keeps its class
        and gets new ``stride``/``dilation``/``padding`` attributes."""
        if not ins.shapes:
            return
        shape, st = ins.shapes[0], ins.strides[0]
        if len(shape) < layer.nd + 1:
            raise self.refuse(path, f"a {layer.nd}-d layer called on a tensor of shape {shape}")
        dims = range(len(shape) - layer.nd, len(shape))
        actual = tuple(st.get(d) for d in dims)
        convert = tuple(
            s > 1 and a is not None and a * s > self.os for a, s in zip(actual, layer.stride)
        )
        factor_f = tuple(
            Fraction(1) if a is None else max(Fraction(1), a / self.os) for a in actual
        )
        if any(f.denominator != 1 for f in factor_f):  # pragma: no cover - checked before
            raise self.refuse(path, f"its input strides {actual} are not multiples of the output")
        factor = tuple(int(f) for f in factor_f)
        if not any(convert) and all(f == 1 for f in factor):
            return
        if layer.kind != "conv" and outs.strides and not outs.strides[0] and not owned:
            self.global_pool(path, module, layer, shape, factor)
            return
        state: _State = (tuple(int(a or 0) for a in actual), factor)
        seen = self.states.get(path)
        if seen is not None:
            if seen != state:
                raise self.refuse(path, "it is called at places of other strides")
            return
        self.states[path] = state
        new_layer, overhang = self.transform(path, layer, factor, convert)
        if new_layer == layer:
            return  # a 1x1 stride-1 layer: the same on any grid
        new = (
            self.restride(path, module, new_layer, overhang)
            if owned
            else self.build(new_layer, module, overhang)
        )
        if any(convert):
            self.converted[path] = (module, new_layer, overhang, owned, factor)
        what = tuple(
            name
            for name, a, b in (
                ("stride", layer.stride, new_layer.stride),
                ("dilation", layer.dilation, new_layer.dilation),
                ("padding", layer.static_pairs(), new_layer.static_pairs()),
                ("ceil_mode", layer.ceil_mode, new_layer.ceil_mode),
                ("count_include_pad", layer.count_include_pad, new_layer.count_include_pad),
            )
            if a != b
        )
        new_factor = tuple(f * s if c else f for f, s, c in zip(factor, layer.stride, convert))
        detail = f"on the lattice of factor {factor}"
        if any(convert):
            detail = f"stride -> dilation: lattice factor {factor} -> {new_factor}"
        after = (
            _brief(new, new_layer)
            if not isinstance(new, nn.Sequential)
            else (f"zero pad {new_layer.static_pairs()} counted, then {_brief(new[1])}")
        )
        self.plans[path] = (new, Change(path, _brief(module, layer), after, what, False, detail))

    def global_pool(
        self, path: str, module: nn.Module, layer: _Layer, shape: Shape, factor: tuple[int, ...]
    ) -> None:
        """A pool whose output is one cell at every probe size (a kernel wider than its
        input, as Hugging Face EfficientNet's pooler) is a global read: it pools the
        lattice, and keeps its class."""
        state: _State = ((), factor)
        if self.states.setdefault(path, state) != state:
            raise self.refuse(path, "it is called at places of other strides")
        if self.gates == "dense":
            self.dense_reads.append(path)
            return
        nd = layer.nd
        spec = tuple((len(shape) - nd + i, f) for i, f in enumerate(factor) if f > 1)
        name = _base(_FUNCTIONS[layer.kind].format(nd=nd))

        new = rewired(module, _LatticeReads({(name, 0): spec}), f"reads the lattice {factor}")
        self.plans[path] = (
            new,
            Change(
                path,
                f"{_brief(module, layer)} (one output cell: pools the whole map)",
                f"{type(module).__name__} on the lattice {factor}",
                ("global pool",),
                False,
                "its kernel covers the whole map; it pools the a-trous lattice",
            ),
        )

    def restride(
        self, path: str, module: nn.Module, layer: _Layer, overhang: tuple[int, ...]
    ) -> nn.Module:
        """A shallow copy of a conv/pool subclass (same class, parameters and children)
        whose attributes its own forward hands to the conv or pool are the dilated ones."""
        pairs = layer.static_pairs() or ()
        if any(overhang) or any(lo != hi for lo, hi in pairs):
            raise self.refuse(
                path,
                f"its own forward hands its padding attribute to {layer.kind} as symmetric "
                f"pads, and the dilated layer needs per-side pads {pairs}",
            )
        m: Any = copy.copy(module)
        if layer.kind == "avg" and any(d != 1 for d in layer.dilation):
            raise self.refuse(
                path,
                f"its own forward hands its kernel, stride and padding to avg_pool{layer.nd}d(), "
                f"which takes no dilation, and the dilated layer needs dilation {layer.dilation}",
            )
        m.stride = tuple(layer.stride)
        if layer.kind != "avg":
            m.dilation = tuple(layer.dilation)
        m.padding = tuple(lo for lo, _ in pairs)
        if layer.kind != "conv":
            m.ceil_mode = layer.ceil_mode
        if layer.kind == "avg":
            m.count_include_pad = layer.count_include_pad
        return m  # type: ignore[no-any-return]

    def build(self, layer: _Layer, old: nn.Module, overhang: tuple[int, ...]) -> nn.Module:
        if (
            layer.kind == "avg"
            and layer.count_include_pad
            and layer.divisor_override is None
            and any(overhang)
        ):
            # counted pads and an uncounted overhang: the pads become explicit zeros
            pairs = layer.static_pairs() or ()
            counted = tuple((lo, hi - e) for (lo, hi), e in zip(pairs, overhang))
            pool = replace(
                layer,
                padding=Padding(tuple((0, e) for e in overhang)),
                count_include_pad=False,
            )
            flat: Any = tuple(p for lo_hi in reversed(counted) for p in lo_hi)
            pad_cls = (nn.ConstantPad1d, nn.ConstantPad2d, nn.ConstantPad3d)[layer.nd - 1]
            return nn.Sequential(pad_cls(flat, 0.0), _build(pool, old))
        return _build(layer, old)

    def lengthen(self, path: str, cells: dict[int, int]) -> str | None:
        """Give the layer at ``path``, whose stride became dilation, ``cells[axis]`` more
        output cells at the end of each spatial axis: that much more end padding (zeros for
        a conv, never counted nor winning for a pool). No lattice output reads them: they
        only move the dense length within ``(F*(m-1), F*m]``, so that a join's inputs
        match. Returns None, or why it cannot."""
        module, layer, overhang, owned, factor = self.converted[path]
        if owned or path in self.pad_edits:
            if path in self.code_pads:
                return self.lengthen_code_pad(path, cells)
            return "its own forward hands its padding to the layer, which cannot grow at one end"
        pairs = list(layer.static_pairs() or ())
        extra = list(overhang)
        for axis, n in sorted(cells.items()):
            if not 0 <= axis < len(pairs) or layer.stride[axis] != 1:
                return f"its spatial axis {axis} keeps a stride"
            lo, hi = pairs[axis]
            k_eff = layer.dilation[axis] * (layer.kernel[axis] - 1) + 1
            if layer.kind != "conv" and hi + n >= k_eff:
                return (
                    f"its last window would lie wholly in padding ({hi + n} end pad cells "
                    f"for a dilated window of {k_eff})"
                )
            pairs[axis] = (lo, hi + n)
            extra[axis] += n
        new_layer = replace(layer, padding=Padding(tuple(pairs)))
        self.converted[path] = (module, new_layer, tuple(extra), owned, factor)
        new = self.build(new_layer, module, tuple(extra))
        _, change = self.plans[path]
        added = tuple(cells.get(axis, 0) for axis in range(len(pairs)))
        note = (
            f"{added} more end cells per axis, read by no lattice output, so that its dense "
            "length equals the other branches' where they join"
        )
        after = (
            _brief(new, new_layer)
            if not isinstance(new, nn.Sequential)
            else (f"zero pad {new_layer.static_pairs()} counted, then {_brief(new[1])}")
        )
        self.plans[path] = (new, replace(change, after=after, detail=f"{change.detail}; {note}"))
        return None

    def lengthen_code_pad(self, path: str, cells: dict[int, int]) -> str | None:
        """:meth:`lengthen` for a layer that reads a pad in code: the pad call (dilate's
        :class:`_LatticePad`) pads ``cells[axis]`` more end cells, holding its value, which
        no lattice output reads. A pool's last window must keep an input cell."""
        owner, edit = self.code_pads[path]
        _, layer, _, _, factor = self.converted[path]
        more = list(edit.more)
        for axis, n in sorted(cells.items()):
            if not 0 <= axis < len(more) or layer.stride[axis] != 1:
                return f"its spatial axis {axis} keeps a stride"
            if layer.kind != "conv":
                k_eff = layer.dilation[axis] * (layer.kernel[axis] - 1) + 1
                rule = edit.rules[axis]
                # the most end pad the rule makes on the lattice, at any size
                most = (
                    factor[axis] * rule[1]
                    if isinstance(rule, tuple)
                    else k_eff - 1
                    if edit.restrided[axis]
                    else factor[axis] * (edit.op.k_eff[axis] - 1)
                )
                most += (layer.static_pairs() or ((0, 0),) * layer.nd)[axis][1]  # its own
                if most + more[axis] + n >= k_eff:
                    return (
                        f"its last window would lie wholly in padding at some sizes (up to "
                        f"{most + more[axis] + n} end pad cells for a dilated window of {k_eff})"
                    )
            more[axis] += n
        edit.more = tuple(more)
        added = tuple(cells.get(axis, 0) for axis in range(len(more)))
        note = (
            f"its pad in code ({owner!r}) gives {added} more end cells per axis, read by no "
            "lattice output, so that its dense length equals the other branches' where they join"
        )
        new, change = self.plans[path]
        self.plans[path] = (new, replace(change, detail=f"{change.detail}; {note}"))
        return None

    def transform(
        self,
        path: str,
        layer: _Layer,
        factor: tuple[int, ...],
        convert: tuple[bool, ...],
    ) -> tuple[_Layer, tuple[int, ...]]:
        """The layer on the dilated grid: a stride that becomes 1 multiplies the later
        factors; each pad scales by the factor; a ceil-mode pool's overhang of up to
        ``s-1`` cells becomes explicit end padding (never counted, never winning). Returns
        the new layer and that overhang per axis."""
        pairs = layer.static_pairs()
        if pairs is None:
            raise self.refuse(
                path, f"its padding {layer.padding.describe()} depends on the input size"
            )
        if layer.kind == "conv" and layer.padding_mode != "zeros":
            raise self.refuse(
                path,
                f"padding_mode={layer.padding_mode!r} pads from the dense map's edge, "
                "not the lattice's",
            )
        if layer.return_indices:
            raise self.refuse(path, "return_indices would index the dilated grid")
        new_pairs = []
        extras = []
        for (lo, hi), k, s, d, f, c in zip(
            pairs, layer.kernel, layer.stride, layer.dilation, factor, convert
        ):
            extra = 0
            if layer.kind != "conv" and layer.ceil_mode and c:
                k_eff = d * (k - 1) + 1
                if hi + s - 1 >= k_eff:
                    raise self.refuse(
                        path, "ceil_mode may drop a window that starts in the padding"
                    )
                extra = s - 1
                if layer.kind == "max" and not layer.neutral_pads:
                    raise self.refuse(
                        path,
                        f"ceil_mode with padding_value={layer.padding_value}: on the dense "
                        "grid the ceil overhang becomes pads, which would hold that value",
                    )
            extras.append(f * extra)
            new_pairs.append((f * lo, f * (hi + extra)))
        stride = tuple(1 if c else s for s, c in zip(layer.stride, convert))
        count = layer.count_include_pad
        if layer.kind == "avg" and not any(lo or hi for lo, hi in pairs):
            count = False  # no pads: torch counts only input cells either way
        new = replace(
            layer,
            stride=stride,
            dilation=tuple(
                d * f if k > 1 else d for k, d, f in zip(layer.kernel, layer.dilation, factor)
            ),
            padding=Padding(tuple(new_pairs)),
            ceil_mode=layer.ceil_mode and any(s > 1 for s in stride),
            count_include_pad=count,
        )
        return new, tuple(extras)

    def gate(self, path: str, module: nn.Module, kind: str, ins: _Tensors) -> None:
        shape, factors = ins.shapes[0], ins.factors[0]
        factor = tuple(int(factors.get(d, 1)) for d in range(2, len(shape)))
        if self.gates == "dense":
            self.dense_reads.append(path)
            return
        seen = self.states.get(path)
        if seen is not None:
            if seen[1] != factor:
                raise self.refuse(path, "it is called at places of other strides")
            return
        self.states[path] = ((), factor)
        new = LatticeGate(module, kind, factor)
        self.plans[path] = (
            new,
            Change(
                path,
                f"{type(module).__name__} (pools the whole map)",
                f"LatticeGate(lattice={factor})",
                ("global pool",),
                False,
                "the gate pools the a-trous lattice, as the original pools its map",
            ),
        )

    # --------------------------------------------------------------------- functions in code

    def on_function(self, event: Event) -> None:
        name = _base(event.name)
        op = event.info.get("op")
        if op is not None:
            self.on_call(event, op)
            return
        key = (event.path, event.call)
        ordinal = -1
        if name in _LATTICE_READS:
            names = self.read_names.setdefault(key, [])
            ordinal = len(names)
            names.append(name)
        ins = _Tensors(event.ins[0], event.ins[1], self.os)
        outs = _Tensors(event.outs[0], event.outs[1], self.os)
        if not ins.dilated() and not outs.dilated():
            return
        if not event.outs[0]:
            return  # a size, a dtype, a flag: no numbers are computed
        f = max(ins.largest(), outs.largest())
        where = (
            f"its forward calls {event.name}() on a map past the output stride (lattice factor {f})"
        )
        info = event.info
        if info.get("training"):
            raise self.refuse(
                event.path,
                f"{where} with batch statistics, which the dense map changes "
                "(no running statistics, or training mode)",
            )
        if "training" in info:
            return  # batch_norm with running statistics: per channel, position-wise
        if name in ("group_norm", "instance_norm"):
            self.lattice_norm(event, name, ins, where)
            return
        reduce: frozenset[int] | None = info.get("reduce")
        if reduce is not None and ins.strides:
            spatial = set(ins.strides[0])
            hit = reduce & spatial
            if not hit:
                return  # over channels or the batch: position-wise
            if name in _LATTICE_READS:
                spec = tuple(sorted((d, int(ins.factors[0][d])) for d in hit))
                if self.gates == "dense":
                    self.dense_reads.append(event.path)
                    return
                self.reads.setdefault(key, {})[ordinal] = spec
                return
            if name == "layer_norm":
                self.lattice_norm(event, name, ins, where)
                return
            raise self.refuse(event.path, f"{where}: it normalises over spatial positions")
        if info.get("elementwise") or _pointwise(name) or name in _LAYOUT:
            if name == "linear" and ins.strides and (len(ins.shapes[0]) - 1) in ins.strides[0]:
                raise self.refuse(event.path, f"{where}: it mixes the positions of the last axis")
            known = {tuple(s) for s in ins.sizes}
            for sizes in outs.sizes:
                if sizes and tuple(sizes) not in known:
                    raise self.refuse(
                        event.path,
                        f"{where}, which changes the spatial sizes "
                        f"({_sizes(ins)} -> {_sizes(outs)}): a crop, a stride or a merge of "
                        "spatial axes in code reads positions off the lattice",
                    )
            return
        raise self.refuse(
            event.path,
            f"{where}; only conv and pool modules are re-strided and dilated, and this "
            "operation in code would read positions off the lattice",
        )

    def lattice_norm(self, event: Event, name: str, ins: _Tensors, where: str) -> None:
        """A norm over space (group, instance, or layer norm over H and W) in a module's own
        code, on a dense map: its call takes statistics per phase of the lattice
        (:class:`~padkit.surgery._norms.LatticeNorm`), which on the original's phase are
        the original's statistics; the module keeps its class and parameters."""
        shapes, factors = ins.shapes, ins.factors[0]
        rank = len(shapes[0])
        if any(f.denominator != 1 for f in factors.values()):
            raise self.refuse(
                event.path, f"{where}: its map is no whole-number lattice ({dict(factors)})"
            )
        if name == "layer_norm" and len(shapes) > 1 and len(shapes[1]) >= rank - 2:
            raise self.refuse(
                event.path,
                f"{where}: its elementwise affine weight {shapes[1]} holds one value per "
                "position of the original map, and the dense map's phases have other sizes",
            )
        spec = tuple((d, int(f)) for d, f in sorted(factors.items()) if d >= 2 and f > 1)
        ordinal = event.ordinal
        table = self.pad_edits.setdefault(event.path, {})
        seen = table.get((name, ordinal))
        if seen is not None:
            if getattr(seen, "spec", None) != spec:
                raise self.refuse(event.path, f"{where}: it is called at places of other strides")
            return
        table[(name, ordinal)] = LatticeNorm(spec)
        self.pad_notes.setdefault(event.path, []).append(
            f"its {name}() #{ordinal} takes statistics per phase of the lattice "
            f"{tuple(f for _, f in spec)}"
        )

    def on_call(self, event: Event, op: _Layer) -> None:
        """A conv or pool called by a module's own code: the module owns it when the call
        computes what the module's attributes say (a conv subclass that transforms its
        weight, timm's and Hugging Face's weight-standardised convs, a pool subclass)."""
        ins = _Tensors(event.ins[0], event.ins[1], self.os)
        outs = _Tensors(event.outs[0], event.outs[1], self.os)
        if not ins.shapes:
            return
        st = ins.strides[0]
        dims = range(len(ins.shapes[0]) - op.nd, len(ins.shapes[0]))
        past = any(
            (a := st.get(d)) is not None and (a * s > self.os or a > self.os)
            for d, s in zip(dims, op.stride)
        )
        if not past:
            return
        module = self.module(event.path)
        if module_op(module) is None:
            raise self.refuse(
                event.path,
                f"its forward calls {event.name}() in code on a map past the output stride; "
                "only conv and pool modules are re-strided (and their subclasses, whose own "
                "call uses their stride/padding/dilation)",
            )
        key = (event.path, event.call)
        self.calls_of[key] = self.calls_of.get(key, 0) + 1
        if not owns(module, op, as_called=True) or self.calls_of[key] > 1:
            raise self.refuse(
                event.path,
                f"its forward calls {event.name}() past the output stride with arguments "
                f"other than its own attributes ({_brief(module)} vs {op.kind} k={op.kernel} "
                f"s={op.stride} d={op.dilation} pads={op.static_pairs()}); only conv and pool "
                "modules are re-strided, by the attributes their own call uses",
            )
        self.layer(event.path, module, op, ins, outs, owned=True)

    # --------------------------------------------------------------------- code that reads the map

    def traced(self, out: nn.Module, inplace: bool) -> list[tuple[str, nn.Module, Change]]:
        """A traced copy of each module whose own code pools the map, reading the lattice."""
        by_path: dict[str, list[tuple[int, dict[int, tuple[tuple[int, int], ...]]]]] = {}
        for (path, call), reads in self.reads.items():
            by_path.setdefault(path, []).append((call, reads))
        done = []
        for path, calls in by_path.items():
            reads = calls[0][1]
            if any(r != reads for _, r in calls[1:]):
                raise self.refuse(path, "it pools maps of other strides at other calls")
            names = self.read_names[(path, calls[0][0])]
            if path == "" and inplace:
                raise self.refuse(
                    path,
                    "its own forward pools the map, so the model itself must be replaced by a "
                    "copy that reads the lattice, which inplace=True cannot do",
                )
            module = out.get_submodule(path)
            done.append((path, *self.retrace(path, module, names, reads)))
        return done

    def rewire_reads(
        self,
        path: str,
        module: nn.Module,
        names: list[str],
        reads: dict[int, tuple[tuple[int, int], ...]],
    ) -> tuple[nn.Module, Change]:
        """A module whose own forward pools the map and that torch.fx cannot trace (Hugging
        Face ``ConvNextModel``'s root: a mean over H, W, then a LayerNorm): a copy of it,
        of its class, whose own code runs with those reads taking the lattice first. Each
        read is found by its function's name and its place among that name's calls in the
        module's own code, as the traced forward recorded them."""
        table: dict[tuple[str, int], tuple[tuple[int, int], ...]] = {}
        for i, spec in reads.items():
            name = names[i]
            table[(name, names[:i].count(name))] = spec

        ops = ", ".join(f"{names[i]}{tuple(f for _, f in spec)}" for i, spec in reads.items())
        new = rewired(module, _LatticeReads(table), f"reads the lattice: {ops}")
        name = type(module).__name__
        change = Change(
            path,
            f"{name} (pools the whole map in its forward)",
            f"{name} (its own code pools the lattice)",
            ("global pool",),
            False,
            f"reads the a-trous lattice before: {ops} (torch.fx cannot trace it: a copy whose "
            "own code runs with those reads replaced)",
        )
        return new, change

    def retrace(
        self,
        path: str,
        module: nn.Module,
        names: list[str],
        reads: dict[int, tuple[tuple[int, int], ...]],
    ) -> tuple[nn.Module, Change]:
        import torch.fx as fx

        class Own(fx.Tracer):
            def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
                return True

        why = "its own forward pools the map in code, and "
        try:
            graph = Own().trace(module)
        except Exception:
            return self.rewire_reads(path, module, names, reads)
        nodes = [
            n
            for n in graph.nodes
            if n.op in ("call_function", "call_method")
            and _base(n.target if isinstance(n.target, str) else _name(n.target)) in _LATTICE_READS
        ]
        found = [_base(n.target if isinstance(n.target, str) else _name(n.target)) for n in nodes]
        if found != names:
            raise self.refuse(
                path, f"{why}its traced graph pools {found} where its forward pooled {names}"
            )
        for i, spec in reads.items():
            node = nodes[i]
            source = node.args[0]
            with graph.inserting_before(node):
                sub = graph.call_function(_lattice, (source, spec))
                sub.meta["is_wrapped"] = True  # traced again as one call
            node.args = (sub, *node.args[1:])
        name = type(module).__name__
        traced = _as_instance(fx.GraphModule(module, graph, class_name=name), module)
        traced.train(module.training)
        a, b = module.state_dict(), traced.state_dict()
        if list(a) != list(b):
            raise self.refuse(
                path, f"{why}its traced copy would hold other state_dict keys than the original"
            )
        ops = ", ".join(f"{names[i]}{tuple(f for _, f in spec)}" for i, spec in reads.items())
        change = Change(
            path,
            f"{name} (pools the whole map in its forward)",
            f"{name} (a traced copy that pools the lattice)",
            ("global pool",),
            False,
            f"reads the a-trous lattice before: {ops}",
        )
        return traced, change


def _rules_text(rules: Sequence[str | tuple[int, int]]) -> str:
    if all(isinstance(r, tuple) for r in rules):
        return f"static {tuple(rules)}"
    return "TF " + "/".join(sorted({repr(r) for r in rules if isinstance(r, str)}))


class _ModuleInit(nn.Module):
    """Ends the ``__init__`` chain of a traced copy at ``nn.Module`` (a GraphModule's
    ``__init__``, which deepcopy calls, must not reach the original class's)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        nn.Module.__init__(self)


def _as_instance(traced: nn.Module, original: nn.Module) -> nn.Module:
    """``traced`` (a GraphModule) made an instance of ``original``'s class too, under the
    same class name and with its plain attributes, so that tools which find layers by type
    or by class name (fastai's ``create_body`` cuts at the last ``...Pool2d``) still find it."""
    orig = type(original)
    if isinstance(traced, orig):
        return traced
    try:
        cls = type(
            orig.__name__,
            (torch.fx.GraphModule, _ModuleInit, orig),
            {
                # the generated code, as a plain method (no __call__ wrapper of fx's, whose
                # super() chain would recurse through a subclass made by deepcopy)
                "forward": type(traced).forward,
                "__module__": orig.__module__,
                "__doc__": orig.__doc__,
                # GraphModule's deepcopy re-inits under the name "GraphModule" otherwise
                "_deepcopy_init": lambda self: functools.partial(
                    torch.fx.GraphModule.__init__, class_name=orig.__name__
                ),
            },
        )
        traced.__class__ = cls
    except TypeError:  # pragma: no cover - a metaclass or layout conflict
        return traced
    for key, value in original.__dict__.items():
        if key not in traced.__dict__ and not key.startswith("_"):
            traced.__dict__[key] = value
    return traced


def _sizes(t: _Tensors) -> str:
    return ", ".join(str(s[: 2 + len(st)]) for s, st in zip(t.shapes[:2], t.strides[:2]))


def _known(table: dict[tuple[str, str], Any]) -> dict[type, Any]:
    found: dict[type, Any] = {}
    for (module_name, name), value in table.items():
        for cls in _classes(module_name, name):
            found[cls] = value
    return found


_State = tuple[tuple[int, ...], tuple[int, ...]]  # (input stride, lattice factor) per axis
_Converted = tuple[nn.Module, _Layer, tuple[int, ...], bool, tuple[int, ...]]


# ----------------------------------------------------------------------------- the probe


def _probe_like(model: nn.Module) -> tuple[tuple[int, ...], Tensor]:
    return probe_like(model, "dilate")


def _sites(
    events: list[Event], model: nn.Module
) -> list[tuple[_Layer, Shape, Shape, Shape, Shape]]:
    """Every conv and pool the forward computes, module or call in code, with its first
    input's and output's shapes in both runs."""
    found = []
    for event in events:
        if not event.ins[0] or not event.outs[0]:
            continue
        layer = event.info.get("op")
        if event.kind == "module":
            layer = _layer(model.get_submodule(event.path))
        if layer is None:
            continue
        found.append((layer, event.ins[0][0], event.ins[1][0], event.outs[0][0], event.outs[1][0]))
    return found


def _reachable(events: list[Event], model: nn.Module) -> tuple[list[int], int]:
    """The output strides a dilation can stop at, and the model's deepest stride: read from
    every conv and pool the forward computes (modules, subclasses, calls in code) whose
    output is a map (a pool that always returns one cell, a global read, adds no stride)."""
    spans: list[tuple[Fraction, Fraction]] = []
    deepest = Fraction(1)
    for layer, in0, in1, out0, out1 in _sites(events, model):
        st, out_st = strides(in0, in1), strides(out0, out1)
        for i, s in enumerate(layer.stride):
            d = len(in0) - layer.nd + i
            a, b = st.get(d), out_st.get(len(out0) - layer.nd + i)
            if a is None or b is None:
                continue
            deepest = max(deepest, b)
            if s > 1:
                spans.append((a, b))
    candidates = {Fraction(1)} | {hi for _, hi in spans}

    def fits(c: Fraction) -> bool:
        return c.denominator == 1 and all(
            not lo < c < hi and (lo <= c or (lo / c).denominator == 1) for lo, hi in spans
        )

    reachable = sorted(int(c) for c in candidates if c <= deepest and fits(c))
    return reachable, int(deepest) if deepest.denominator == 1 else int(deepest) + 1


def _trace(model: nn.Module, gate_kinds: dict[type, Any]) -> list[Event]:
    shape, like = _probe_like(model)

    def opaque(m: nn.Module) -> bool:
        return _layer(m) is not None or type(m) in gate_kinds

    try:
        return _events(model, shape, opaque, like)
    except SurgeryError as exc:
        raise SurgeryError(f"dilate(): {exc}") from None


# ----------------------------------------------------------------------------- dilate


def dilate(
    model: nn.Module,
    output_stride: int,
    *,
    gates: str = "lattice",
    inplace: bool = False,
) -> tuple[nn.Module, SurgeryReport]:
    """Trade the later strides of a CNN for dilation, exactly (the a-trous identity).

    The model is traced (two forwards without gradients on small random inputs): every
    module and every tensor function it calls is recorded with the stride of the tensors it
    sees. Once the stride reaches ``output_stride``, each later stride ``s`` of a conv or pool
    module becomes 1 and multiplies the lattice factor ``f`` of everything after it; every
    later conv and pool gets dilation ``d*f`` and pads ``(f*lo, f*hi)`` (a ceil-mode pool's
    overhang becomes ``f*(s-1)`` explicit end padding, never counted). A pad written in code
    before a conv or pool that changes (a pad module, ``F.pad`` with amounts from the input
    size such as TF 'same') is re-derived: ``f`` times the original's pads at the original's
    size ``ceil(n/f)``, computed by its module's own code; before a layer whose stride
    becomes dilation a TF 'same' pad ends where the dense map keeps its length ``n``, at
    every size, as a strided 1x1 shortcut beside it does. Global reads (adaptive
    pools, means in squeeze-excitation gates, a head's pool) then read only the lattice
    ``x[..., ::f, ::f]``. In eval mode every output of the dilated model, subsampled at
    ``[..., ::r, ::r]`` (``r`` = its old / new stride), equals the original's:
    :func:`dilation_error` measures it. Branches that a join (``+``, ``*``, ``cat``) brings
    together get equal dense lengths: a re-strided layer on a shorter branch (a patchify
    conv beside a ceil-mode pool shortcut) gets end padding that no lattice output reads.
    Before it returns, dilate runs the dilated model on the trace's probes and checks every
    output against the original's on its lattice; a model that crashes or differs is
    refused, naming the module.

    Works on any model whose spatial operations past the output stride are torch or padkit
    conv and pool modules, position-wise code (activations, BatchNorm with running
    statistics, sums, products, channel concatenation, reshapes that keep the spatial axes)
    and global reductions: torchvision and timm ResNets, fastai XResNets, smp encoders,
    RegNets, EfficientNets, MobileNets, ``create_feature_extractor`` graphs, timm
    ``features_only`` models, one's own CNN. Anything else that reads positions off the
    lattice is refused, naming the module, its class and the operation.

    Squeeze-excitation gates of timm (SE/ESE/ECA) become :class:`LatticeGate` modules; a
    module whose own code pools the map becomes a ``torch.fx`` copy that subsamples before
    the pool (where fx cannot trace it, a copy of its class whose own code runs with that
    pool reading the lattice). ``gates="dense"`` keeps every global read on the dense map
    instead, as timm's own ``output_stride`` does (not exact). No weight is touched and the
    ``state_dict`` keys and shapes stay the same.

    Args:
        model: a CNN built of torch (or padkit) conv and pool modules.
        output_stride: the new output stride: a stride the model reaches (1, 2, 4, 8, 16
            for a ResNet), at most its current one.
        gates: ``"lattice"`` or ``"dense"``.
        inplace: modify ``model`` itself instead of a deep copy.

    Returns:
        ``(model, report)``; the report lists every changed module.

    Raises:
        SurgeryError: naming the first module it cannot handle and why, or for an output
            stride the model cannot reach.

    Example:
        >>> from torchvision.models import resnet18
        >>> net = resnet18().eval()
        >>> os8, report = dilate(net, 8)
        >>> os8.layer4[0].conv1.dilation, os8.layer4[0].conv1.padding
        ((2, 2), (2, 2))
        >>> x = torch.randn(1, 3, 64, 64)
        >>> body = lambda m: torch.nn.Sequential(*list(m.children())[:-2])
        >>> bool((body(os8)(x)[..., ::4, ::4] - body(net)(x)).abs().max() < 1e-4)
        True
        >>> dilation_error(net, os8, x) < 1e-4  # the logits too: the head pools the lattice
        True
    """
    _check_model(model, "dilate")
    _check_bool(inplace, "inplace", "dilate")
    if isinstance(output_stride, bool) or not isinstance(output_stride, int):
        raise TypeError(
            f"dilate(): output_stride must be an int (8 or 16 for a ResNet), got "
            f"{type(output_stride).__name__} ({output_stride!r})"
        )
    if not isinstance(gates, str) or gates not in _GATE_MODES:
        raise SurgeryError(
            f"dilate(): gates must be one of {', '.join(map(repr, _GATE_MODES))}, got {gates!r}"
        )
    gate_kinds = _known(_GATES)
    events = _trace(model, gate_kinds)
    reachable, deepest = _reachable(events, model)
    if output_stride not in reachable:
        raise SurgeryError(
            f"dilate(): output_stride={output_stride!r} is not a stride this model reaches; "
            f"accepted: {reachable} (its current output stride is {deepest})"
        )
    shape, like = _probe_like(model)
    probes = [probe_input(shape, extra, like) for extra in (0, STEP)]
    refs = [check.outputs(model, x) for x in probes]  # the original's, before any change
    out = model if inplace else _copy(model)
    plan = _Dilation(out, output_stride, gates)
    plan.run(events)
    plan.traced(out, inplace)  # refuses, if it must, before anything is changed
    undo: list[tuple[list[str], nn.Module]] = []

    def put(path: str) -> None:
        paths = _paths_by_id(out)[id(out.get_submodule(path))]
        undo.append((paths, out.get_submodule(path)))
        _replace(out, paths, plan.plans[path][0])

    for path in plan.plans:
        put(path)
    root = out
    by_id = _paths_by_id(out)
    traced_changes = []
    for path, new, change in plan.traced(out, inplace):
        if path == "":
            out = new
        else:
            undo.append((by_id[id(out.get_submodule(path))], out.get_submodule(path)))
            _replace(out, by_id[id(out.get_submodule(path))], new)
        traced_changes.append(change)
    try:
        _self_check(plan, model if not inplace else None, out, probes, refs, events, put)
    except SurgeryError:
        for paths, old in reversed(undo):
            _replace(root, paths, old)
        raise
    report = SurgeryReport("dilate")
    report.changes.extend(change for _, change in plan.plans.values())
    report.changes.extend(traced_changes)
    order = {p: i for i, (p, _) in enumerate(out.named_modules(remove_duplicate=False))}
    report.changes.sort(key=lambda c: order.get(c.path, len(order)))
    info = getattr(out, "feature_info", None)
    entries = getattr(info, "info", info)
    if isinstance(entries, list):
        for entry in entries:
            if isinstance(entry, dict) and entry.get("module") in plan.strides_out:
                entry["reduction"] = plan.strides_out[entry["module"]]
    if plan.dense_reads:
        shown = ", ".join(repr(p) for p in plan.dense_reads[:3])
        more = ", ..." if len(plan.dense_reads) > 3 else ""
        report.notes.append(
            f"gates='dense': {len(plan.dense_reads)} global read(s) pool the dense map "
            f"({shown}{more}); the identity is approximate"
        )
    if report.changes and not plan.dense_reads:
        report.notes.append(
            "exact in eval mode (BatchNorm with running statistics): every output subsampled "
            "at its lattice equals the original's; padkit.surgery.dilation_error(original, "
            "dilated, x) measures it"
        )
    return out, report


# ----------------------------------------------------------------------------- the check


def _self_check(
    plan: _Dilation,
    original: nn.Module | None,
    out: nn.Module,
    probes: list[Tensor],
    refs: list[list[Tensor]],
    events: list[Event],
    put: Any,
) -> None:
    """Run the dilated model at each probe size. A join whose inputs differ in dense length
    gets its shorter inputs' converted layers lengthened (:meth:`_Dilation.lengthen`), and
    the run is made again; then each output, subsampled at its lattice, must equal the
    original's on the same probe. Anything else is refused, naming the module."""
    converted = {path: plan.converted[path][1].nd for path in plan.converted}

    def refuse(path: str, why: str) -> SurgeryError:
        try:
            name = type(out.get_submodule(path)).__name__
        except AttributeError:  # pragma: no cover - a path of the original only
            name = type(plan.module(path)).__name__
        return SurgeryError(f"dilate(): cannot handle {path or '<root>'!r} ({name}): {why}")

    for _ in range(4):
        results = [check.watch(out, x, converted) for x in probes]
        mismatches = results[0][1] or results[1][1]
        if not mismatches:
            break
        fixes: dict[str, dict[int, int]] = {}
        for found in mismatches:
            joins = (
                f"its {found.name}() joins maps of dense lengths {found.lengths} along dim "
                f"{found.dim} past the output stride"
            )
            for short in found.short:
                if short is None:
                    raise refuse(
                        found.join,
                        f"{joins}, and a shorter one does not come through a layer dilate "
                        "re-strided, so no end padding can even them out",
                    )
                fixes.setdefault(short[0], {}).setdefault(short[1], short[2])
        for path, cells in fixes.items():
            why = plan.lengthen(path, cells)
            if why is not None:
                found = next(m for m in mismatches if any(s and s[0] == path for s in m.short))
                nd = plan.converted[path][1].nd
                more = tuple(cells.get(axis, 0) for axis in range(nd))
                raise refuse(
                    found.join,
                    f"its {found.name}() joins maps of dense lengths {found.lengths} along dim "
                    f"{found.dim} past the output stride, and {path!r}, where a shorter one "
                    f"comes from, cannot get {more} more end cells per axis: {why}",
                )
            put(path)
    else:
        raise refuse(
            mismatches[0].join,
            f"its {mismatches[0].name}() joins maps of dense lengths {mismatches[0].lengths} "
            "past the output stride, and lengthening the layers they come from does not even "
            "them out",
        )
    for x, (_, _, error, failed_in) in zip(probes, results):
        if error is not None:
            first = (str(error).strip().splitlines() or [""])[0]
            raise refuse(
                failed_in or "",
                f"the dilated model fails here on a probe of shape {tuple(x.shape)} "
                f"({type(error).__name__}: {first})",
            )
    if plan.dense_reads:
        return  # gates="dense": global reads pool the dense map, approximately by design
    outs = [r[0] or [] for r in results]
    bad = check.compare(refs, outs)
    if bad is None:
        return
    probe, index, why = bad
    where = None
    if original is not None:
        factors = {
            (e.path, e.call): _Tensors(e.outs[0], e.outs[1], plan.os).factors[0]
            for e in events
            if e.kind == "module" and e.outs[0] and e.path
        }
        where = check.first_difference(original, out, probes[probe], factors)
    raise refuse(
        where or "",
        f"the dilated model's output {index} on a probe of shape "
        f"{tuple(probes[probe].shape)} is not the original's: {why}"
        + ("" if where is None else " (this module's output is the first that differs)"),
    )


def _copy(model: nn.Module) -> nn.Module:
    """A deep copy in the original's train/eval modes (a GraphModule's copy resets them)."""
    out = copy.deepcopy(model)
    for a, b in zip(model.modules(), out.modules()):
        b.training = a.training
    return out


def _flat(value: Any) -> list[Tensor]:
    return list(_tensors(value))


def dilation_error(original: nn.Module, dilated: nn.Module, x: Tensor) -> float:
    """How far a dilated model is from the a-trous identity on the input ``x``.

    Both models run on ``x`` (without gradients, in their current mode: use eval mode).
    Each output tensor of ``dilated`` (a tensor, or the tensors in a list, tuple or dict) is
    subsampled at ``::r`` from offset 0 along each spatial axis, where ``r`` is the
    original's stride of that output over the dilated one's (traced on two small inputs),
    and compared with the original's output. The result is the largest
    ``max |dilated_sub - original| / max |original|`` over the outputs: about 1e-7 to 1e-6
    in float32 for an exact dilation.

    Args:
        original: the model before :func:`dilate`.
        dilated: the model it returned.
        x: an input batch, of any spatial size the original accepts.

    Returns:
        The relative error, a float.

    Raises:
        SurgeryError: when the outputs do not pair up (count, or shape after subsampling).

    Example:
        >>> net = torch.nn.Sequential(
        ...     torch.nn.Conv2d(3, 4, 3, 2, 1), torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1),
        ...     torch.nn.Conv2d(4, 4, 3, 2, 1), torch.nn.AdaptiveAvgPool2d(1)).eval()
        >>> os2, _ = dilate(net, 2)
        >>> dilation_error(net, os2, torch.randn(2, 3, 21, 19)) < 1e-5
        True
    """
    _check_model(original, "dilation_error")
    _check_model(dilated, "dilation_error")
    if not isinstance(x, Tensor) or x.dim() < 3:
        raise TypeError(
            f"dilation_error(): x must be a tensor of shape (batch, channels, *spatial), got "
            f"{type(x).__name__} {tuple(getattr(x, 'shape', ()))}"
        )
    shape = (*x.shape[:2], *([PROBE] * (x.dim() - 2)))

    def output_strides(model: nn.Module) -> list[dict[int, Fraction]]:
        try:
            (root, *_) = _events(model, shape, lambda m: True, x)
        except SurgeryError as exc:
            raise SurgeryError(f"dilation_error(): {exc}") from None
        return [strides(a, b) for a, b in zip(root.outs[0], root.outs[1])]

    before, after = output_strides(original), output_strides(dilated)
    with torch.no_grad():
        refs, outs = _flat(original(x)), _flat(dilated(x))
    if len(refs) != len(outs) or len(refs) != len(before) or len(outs) != len(after):
        raise SurgeryError(
            f"dilation_error(): the original returns {len(refs)} tensor(s), the dilated "
            f"model {len(outs)}"
        )
    worst = 0.0
    for i, (ref, out, a, b) in enumerate(zip(refs, outs, before, after)):
        spec = []
        for d, stride in a.items():
            r = stride / b.get(d, stride)
            if r.denominator != 1:
                raise SurgeryError(
                    f"dilation_error(): output {i} axis {d}: stride {stride} in the original, "
                    f"{b.get(d)} in the dilated model, not a whole ratio"
                )
            spec.append((d, int(r)))
        sub = _lattice(out, tuple(spec))
        if sub.shape != ref.shape:
            raise SurgeryError(
                f"dilation_error(): output {i}: the dilated model's {tuple(out.shape)} "
                f"subsampled at {spec} is {tuple(sub.shape)}, the original's is "
                f"{tuple(ref.shape)}"
            )
        scale = float(ref.abs().max()) or 1.0
        worst = max(worst, float((sub - ref).abs().max()) / scale)
    return worst
