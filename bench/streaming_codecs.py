"""Streaming codecs from their own packages: padkit beside each package's own streaming, on
the same weights (issue 38, item 4).

Cases (random weights, nothing downloaded):

* **moshi SEANet encoder** (``moshi.modules.seanet.SEANetEncoder``, Mimi's layout: ratios
  8, 6, 5, 4, hop 960, one residual block per stage, ``pad_mode="constant"``, and Mimi's own
  widths ``n_filters=64, dimension=512``; ``--filters 16 --dimension 128`` is a small config,
  where a 1-sample step's Python call costs as much as the work of a sample). Peer: moshi's
  own streaming, ``with model.streaming(1): model(chunk)``
  (``moshi.modules.streaming.StreamingModule``).
* **moshi SEANet decoder**, the same config; its input is latent frames, so its chunks are
  counted in frames (1 frame = the hop, 960 output samples).
* **cached_conv stack**: a causal conv stack built from ``cached_conv`` layers (a 7-tap
  input conv; per stage two dilated 3-tap convs and a strided ``2r``-tap conv, ratios 4, 4, 2:
  hop 32; LeakyReLU between). Peer: the ``CachedConv1d`` model in its cached streaming mode.
  padkit streams the equivalent non-cached model (``cached_conv``'s ``Conv1d``, padding in
  its ``forward``) with the same weights, converted by ``convert_causal``.
* **snac encoder (lookahead)** (``snac.layers.Encoder``, ``d_model`` = ``--filters``,
  strides 2, 4, 8, no attention): non-causal, streamed with ``lookahead="auto"``; its
  last outputs come from ``flush()`` (untimed) and the stream is compared with the full run
  on the same samples. No peer.
* **snac encoder (lookahead) + attention**: the same with SNAC's ``LocalMHA`` at the end
  (blocks of ``--snac-window`` frames, 8 by default: SNAC's own 32 would make the delay
  2 000 samples longer than the streams here), streamed on whole blocks.
* **encodec SEANet encoder** (Meta's ``encodec.modules.seanet.SEANetEncoder``, causal,
  ``pad_mode="constant"``, its two-layer LSTM, old-style weight norm; same widths and ratios
  as the moshi case). No peer: the package has no streaming of its own.

padkit's stream is ``convert_causal`` of a copy of the peer's model, then
``StreamingModule.step``. Both streams run the same input in one loop, interleaved chunk by
chunk (the order swapped every chunk). Each *round* streams every chunk size once (the
order of the sizes reversed every other round), so that the paired ratios of one round were
measured close together in time. Reported, per case and chunk size:

* the median over rounds of the time per step and per input sample (``us/sample``: a
  round's total time over the samples it streamed; a frame for the decoder);
* **padkit/peer**: the median over rounds of the paired ratio of the two streams' total
  times in that round, with the ``[min-max]`` of the per-round ratios;
* **vs hop**: padkit's cost per sample at this chunk size over its cost at hop-sized chunks in
  the same round, median ``[min-max]`` (both streams cover whole hops, so this is also the
  ratio of the costs per output sample); **alone**: the same from rounds that stream padkit
  alone, without the peer's steps in between (whose memory traffic a short step, which
  does little work of its own, otherwise pays for), timed as one loop of steps, as a
  user's loop runs (the interleaved rounds time each step, which adds a timer's call to
  every 1-sample step);
* each stream's outputs, concatenated, against the model's full-sequence run on the same
  samples (``max |diff|``), or what is wrong: a wrong output length, or the error raised.

Chunk sizes: the hop, 7 samples (a prime) and 1 sample; hop chunks stream ``--hops`` hops, the
others ``--short`` hops. ``--profile`` then profiles padkit's step (cProfile and
``torch.profiler``) on the moshi encoder at the hop and at 1 sample, and on the cached_conv
stack at the hop.

    python bench/streaming_codecs.py                 # 1 thread, a few minutes
    python bench/streaming_codecs.py --profile       # and where padkit's step time goes
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import importlib
import importlib.util
import io
import math
import os
import pstats
import statistics
import sys
import time
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

# common turns padkit's optional oneDNN backend off before padkit loads
from common import CpuMonitor, env_header, markdown_table, max_abs_diff  # noqa: E402

from padkit.recognise import model_copy  # noqa: E402
from padkit.streaming import StreamingModule, convert_causal  # noqa: E402

warnings.filterwarnings("ignore", message=".*weight_norm.* is deprecated", category=FutureWarning)


# ----------------------------------------------------------------------------- imports


def load(package: str, module: str) -> Any:
    """``module`` from ``package``, under a bare parent package when the package's own
    ``__init__`` imports something not installed (as ``tests/test_codecs_real.py`` does:
    ``encodec``'s needs torchaudio, ``moshi``'s sentencepiece and more)."""
    if importlib.util.find_spec(package) is None:
        raise ImportError(f"{package} is not installed")
    try:
        importlib.import_module(package)
    except ImportError:
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations is not None
        bare = types.ModuleType(package)
        bare.__path__ = list(spec.submodule_search_locations)
        bare.__spec__ = spec
        sys.modules[package] = bare
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return importlib.import_module(module)


def _version(dist: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


# ----------------------------------------------------------------------------- peers


class Peer:
    """A package's own streaming: ``start()`` a fresh stream, ``step(chunk)``, ``stop()``."""

    def start(self) -> None:
        raise NotImplementedError

    def step(self, chunk: Tensor) -> Tensor:
        raise NotImplementedError

    def stop(self) -> None:
        pass


class MoshiPeer(Peer):
    """``with model.streaming(1): model(chunk)``: moshi's streaming state lives in its
    modules; ``streaming()`` creates it, leaving the context drops it."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self._ctx: Any = None

    def start(self) -> None:
        self.stop()
        self._ctx = self.model.streaming(1)  # type: ignore[operator]
        self._ctx.__enter__()

    def step(self, chunk: Tensor) -> Tensor:
        return self.model(chunk)  # type: ignore[no-any-return]

    def stop(self) -> None:
        if self._ctx is not None:
            self._ctx.__exit__(None, None, None)
            self._ctx = None


class CachedConvPeer(Peer):
    """A model of ``cached_conv`` ``CachedConv1d`` layers: each keeps its history in a
    ``CachedPadding1d`` buffer (created on its first call) that every call overwrites; a new
    stream zeroes those buffers."""

    def __init__(self, model: nn.Module, padding_cls: type) -> None:
        self.model = model
        self.padding_cls = padding_cls

    def start(self) -> None:
        for m in self.model.modules():
            if isinstance(m, self.padding_cls) and getattr(m, "initialized", 0):
                m.pad.zero_()

    def step(self, chunk: Tensor) -> Tensor:
        return self.model(chunk)  # type: ignore[no-any-return]


# ----------------------------------------------------------------------------- cases


@dataclass
class Case:
    name: str
    about: str
    model: nn.Module  # the original module: its full-sequence run is the reference
    stream: StreamingModule
    peer: Peer | None
    peer_name: str
    channels: int
    hop: int  # input samples per output frame (1 for the decoder: frames in, audio out)
    chunks: list[int]
    unit: str = "sample"
    convert_s: float = 0.0
    scale: int = 1  # streams ``scale`` times as many hops as ``--hops``/``--short`` say
    lookahead: bool = False  # a lookahead stream: its last outputs come from flush()


def _moshi_kwargs(filters: int, dimension: int) -> dict[str, Any]:
    # Mimi's SEANet (moshi.models.loaders._seanet_kwargs) at reduced widths
    return dict(
        channels=1,
        dimension=dimension,
        causal=True,
        n_filters=filters,
        n_residual_layers=1,
        activation="ELU",
        compress=2,
        dilation_base=2,
        disable_norm_outer_blocks=0,
        kernel_size=7,
        residual_kernel_size=3,
        last_kernel_size=3,
        norm="none",
        pad_mode="constant",
        ratios=[8, 6, 5, 4],
        true_skip=True,
    )


def _padkit(model: nn.Module, example: Tensor) -> tuple[StreamingModule, float]:
    """``convert_causal`` of a copy (the peer keeps the original; ``model_copy`` copies
    old-style weight norm, which ``copy.deepcopy`` refuses), and its stream."""
    t0 = time.perf_counter()
    with torch.no_grad():
        new, _ = convert_causal(model_copy(model), example)
    return StreamingModule(new), time.perf_counter() - t0


def moshi_cases(filters: int, dimension: int) -> list[Case]:
    seanet = load("moshi", "moshi.modules.seanet")
    kw = _moshi_kwargs(filters, dimension)
    torch.manual_seed(0)
    enc = seanet.SEANetEncoder(**kw).eval()
    torch.manual_seed(1)
    dec = seanet.SEANetDecoder(**kw).eval()
    hop = int(enc.hop_length)
    widths = f"n_filters={filters}, dimension={dimension}"
    out = []
    stream, sec = _padkit(enc, torch.zeros(1, 1, 3 * hop))
    out.append(
        Case(
            "moshi SEANet encoder",
            f"moshi {_version('moshi')} SEANetEncoder (Mimi's layout, {widths}, hop {hop})",
            enc,
            stream,
            MoshiPeer(enc),
            "moshi streaming",
            1,
            hop,
            [hop, 7, 1],
            convert_s=sec,
        )
    )
    stream, sec = _padkit(dec, torch.zeros(1, dimension, 3))
    out.append(
        Case(
            "moshi SEANet decoder",
            f"moshi SEANetDecoder (same config; chunks in latent frames, {hop} samples each)",
            dec,
            stream,
            MoshiPeer(dec),
            "moshi streaming",
            dimension,
            1,
            [1, 8],
            unit="frame",
            convert_s=sec,
        )
    )
    return out


class CachedConvStack(nn.Module):
    """A causal conv stack of ``cached_conv`` layers (``conv`` is its ``Conv1d`` or
    ``CachedConv1d``): input conv, then per ratio two dilated convs and a strided one."""

    def __init__(self, cc: Any, conv: Callable[..., nn.Module], width: int, ratios: list[int]):
        super().__init__()

        def causal(cin: int, cout: int, k: int, s: int = 1, d: int = 1) -> nn.Module:
            return conv(
                cin, cout, k, stride=s, dilation=d, padding=cc.get_padding(k, s, d, "causal")
            )

        layers: list[nn.Module] = [causal(1, width, 7)]
        c = width
        for r in ratios:
            for d in (1, 3):
                layers += [nn.LeakyReLU(0.2), causal(c, c, 3, d=d)]
            layers += [nn.LeakyReLU(0.2), causal(c, 2 * c, 2 * r, s=r)]
            c *= 2
        layers += [nn.LeakyReLU(0.2), causal(c, width, 3)]
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)  # type: ignore[no-any-return]


def cached_conv_case(width: int) -> Case:
    cc = load("cached_conv", "cached_conv")
    convs = load("cached_conv", "cached_conv.convs")
    ratios = [4, 4, 2]
    torch.manual_seed(2)
    plain = CachedConvStack(cc, convs.Conv1d, width, ratios).eval()
    cached = CachedConvStack(cc, convs.CachedConv1d, width, ratios).eval()
    cached.load_state_dict(plain.state_dict())
    hop = 1
    for r in ratios:
        hop *= r
    stream, sec = _padkit(plain, torch.zeros(1, 1, 3 * hop))
    n_convs = sum(isinstance(m, convs.Conv1d) for m in plain.modules())
    return Case(
        "cached_conv stack",
        f"cached-conv {_version('cached-conv')}: {n_convs} causal convs, width {width}, "
        f"ratios {ratios} (hop {hop}); peer CachedConv1d, padkit the Conv1d twin",
        plain,
        stream,
        CachedConvPeer(cached, convs.CachedPadding1d),
        "cached_conv",
        1,
        hop,
        [hop, 7, 1],
        convert_s=sec,
        scale=8,
    )


def encodec_case(filters: int, dimension: int) -> Case:
    seanet = load("encodec", "encodec.modules.seanet")
    torch.manual_seed(3)
    enc = seanet.SEANetEncoder(
        channels=1,
        dimension=dimension,
        n_filters=filters,
        ratios=[8, 6, 5, 4],
        causal=True,
        pad_mode="constant",
        lstm=2,
    ).eval()
    hop = int(enc.hop_length)
    stream, sec = _padkit(enc, torch.zeros(1, 1, 3 * hop))
    return Case(
        "encodec SEANet encoder",
        f"encodec {_version('encodec')} SEANetEncoder (causal, LSTM 2, weight norm, "
        f"n_filters={filters}, dimension={dimension}, hop {hop})",
        enc,
        stream,
        None,
        "",
        1,
        hop,
        [hop, 7, 1],
        convert_s=sec,
    )


def snac_case(filters: int, window: int | None = None) -> Case:
    """SNAC's encoder, non-causal: streamed with lookahead; ``window``: with its local
    attention over blocks of that many frames (streamed on whole blocks)."""
    layers = load("snac", "snac.layers")
    torch.manual_seed(3)
    strides = [2, 4, 8]
    enc = layers.Encoder(d_model=filters, strides=strides, attn_window_size=window).eval()
    hop = math.prod(strides)
    t0 = time.perf_counter()
    stream = StreamingModule(model_copy(enc), lookahead="auto")
    # the delay includes the attention's block: measured when the stream checks the model
    stream.init_state(example=torch.zeros(1, 1, 1))
    attention = "no attention" if window is None else f"local attention in blocks of {window}"
    return Case(
        "snac encoder (lookahead)" + ("" if window is None else " + attention"),
        f"snac {_version('snac')} Encoder (d_model={filters}, strides {strides}, {attention}, "
        f"hop {hop}), streamed with lookahead='auto', delay {stream.delay}",
        enc,
        stream,
        None,
        "",
        1,
        hop,
        [hop, 7, 1],
        convert_s=time.perf_counter() - t0,
        scale=32,  # short chunks must stream many times the delay (about 900 samples)
        lookahead=True,
    )


# ----------------------------------------------------------------------------- timing


@dataclass
class Result:
    """One stream at one chunk size: per-round totals, outputs of the first round, error."""

    totals: list[float] = field(default_factory=list)
    steps: int = 0
    outs: list[Tensor] = field(default_factory=list)
    error: str = ""


def _short(err: BaseException) -> str:
    text = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {text[:60]}".rstrip(": ")


def stream_round(
    case: Case, x: Tensor, chunk: int, res: dict[str, Result], keep: bool, alone: bool = False
) -> None:
    """Both streams over ``x`` in chunks of ``chunk``, interleaved chunk by chunk (padkit's
    only, ``alone``)."""
    sm = case.stream
    state = sm.init_state(example=x[..., :1])
    peer = case.peer if not alone else None
    if peer is not None and not res["peer"].error:
        case.peer.start()
    tot = {"padkit": 0.0, "peer": 0.0}
    steps = 0

    def padkit_step(c: Tensor) -> Tensor:
        nonlocal state
        y, state = sm.step(c, state)
        return y

    fns: dict[str, Callable[[Tensor], Tensor]] = {"padkit": padkit_step}
    if peer is not None and not res["peer"].error:
        fns["peer"] = peer.step
    perf = time.perf_counter
    if alone:  # one timer around the loop
        step = sm.step
        parts = x.split(chunk, -1)
        try:
            t0 = perf()
            for c in parts:
                y, state = step(c, state)
            res["padkit"].totals.append(perf() - t0)
            res["padkit"].steps = len(parts)
        except Exception as err:
            res["padkit"].error = _short(err)
        return
    for i, c in enumerate(x.split(chunk, -1)):
        steps += 1
        for name in ("padkit", "peer") if i % 2 == 0 else ("peer", "padkit"):
            fn = fns.get(name)
            if fn is None:
                continue
            t0 = perf()
            try:
                y = fn(c)
            except Exception as err:  # the peer refuses this chunking: report it, go on
                res[name].error = _short(err)
                del fns[name]
                continue
            tot[name] += perf() - t0
            if keep:
                res[name].outs.append(y)
    if peer is not None:
        peer.stop()
    if case.lookahead and keep:  # the held-back outputs, for the comparison (untimed)
        res["padkit"].outs.append(sm.flush(state))
    for name in fns:
        res[name].totals.append(tot[name])
        res[name].steps = steps


def correctness(r: Result, full: Tensor, n_out: int) -> str:
    if r.error:
        return f"raises {r.error}"
    if not r.outs:
        return ""
    got = torch.cat(r.outs, -1)
    if got.shape[-1] != n_out:
        return f"wrong length: {got.shape[-1]} outputs, full run {n_out}"
    return f"{max_abs_diff(got, full[..., :n_out]):.1e}"


def _med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def _spread(xs: list[float]) -> str:
    if not xs:
        return ""
    return f"{statistics.median(xs):.2f} [{min(xs):.2f}-{max(xs):.2f}]"


def run_case(case: Case, rounds: int, hops: int, short: int) -> tuple[list[list[object]], float]:
    """All chunk sizes of one case, ``rounds`` rounds; table rows and the other processes'
    CPU share while it ran."""
    gen = torch.Generator().manual_seed(0)
    hops, short = hops * case.scale, short * case.scale
    n_long = hops * case.hop if case.unit == "sample" else hops
    x = torch.randn(1, case.channels, n_long, generator=gen)
    with torch.no_grad():
        full = case.model(x)
    # hop chunks (and the decoder's frames) stream the whole input, shorter chunks ``short``
    # hops of it
    inputs = {
        c: x if c == case.hop or case.unit == "frame" else x[..., : short * case.hop]
        for c in case.chunks
    }
    # output length of the model's full run on each input (complete outputs only)
    per_in = full.shape[-1] / x.shape[-1]
    n_out = {c: round(inputs[c].shape[-1] * per_in) for c in case.chunks}
    refs = {c: full for c in case.chunks}
    if case.lookahead:  # a flushed stream ends as the full run on its own input does
        with torch.no_grad():
            refs = {c: case.model(inputs[c]) for c in case.chunks}
        n_out = {c: int(refs[c].shape[-1]) for c in case.chunks}
    results = {c: {"padkit": Result(), "peer": Result()} for c in case.chunks}
    solo = {c: {"padkit": Result(), "peer": Result()} for c in case.chunks}
    with torch.no_grad():
        # warm-up: padkit's self-check runs before its first step; allocator, kernels
        for c in case.chunks:
            warm = {"padkit": Result(), "peer": Result()}
            stream_round(
                case,
                inputs[c][..., : min(inputs[c].shape[-1], 4 * max(c, case.hop))],
                c,
                warm,
                False,
            )
        gc.collect()
        gc_was = gc.isenabled()
        gc.disable()
        try:
            with CpuMonitor() as mon:
                for r in range(rounds):
                    order = case.chunks if r % 2 == 0 else case.chunks[::-1]
                    for c in order:
                        stream_round(case, inputs[c], c, results[c], keep=(r == 0))
                    for c in order:
                        stream_round(case, inputs[c], c, solo[c], keep=False, alone=True)
        finally:
            if gc_was:
                gc.enable()
    hop_chunk = case.chunks[0]
    hop_cost = [t / inputs[hop_chunk].shape[-1] for t in results[hop_chunk]["padkit"].totals]
    hop_alone = [t / inputs[hop_chunk].shape[-1] for t in solo[hop_chunk]["padkit"].totals]
    rows: list[list[object]] = []
    for c in case.chunks:
        p, q = results[c]["padkit"], results[c]["peer"]
        n = inputs[c].shape[-1]
        cost = [t / n for t in p.totals]
        vs_hop = [a / b for a, b in zip(cost, hop_cost)] if c != hop_chunk else []
        alone = [t / n / h for t, h in zip(solo[c]["padkit"].totals, hop_alone)]
        ratio = [a / b for a, b in zip(p.totals, q.totals)] if q.totals else []
        label = f"{c} {case.unit}{'s' if c > 1 else ''}" + (" (hop)" if c == case.hop else "")
        rows.append(
            [
                case.name,
                label,
                p.steps,
                f"{1e3 * _med(p.totals) / p.steps:.3f}",
                f"{1e6 * _med(cost):.2f}",
                correctness(p, refs[c], n_out[c]),
                f"{1e3 * _med(q.totals) / q.steps:.3f}" if q.totals else "",
                correctness(q, full, n_out[c]) if case.peer is not None else "(no peer)",
                _spread(ratio),
                _spread(vs_hop) if vs_hop else "1",
                _spread(alone) if c != hop_chunk else "1",
            ]
        )
    return rows, mon.other_share


# ----------------------------------------------------------------------------- profile


def _group(filename: str, fn: str) -> str:
    if "padkit/streaming/_runner.py" in filename:
        return f"_runner.{fn}"
    if "padkit/streaming/" in filename:
        return "padkit.streaming." + Path(filename).stem + f".{fn}"
    if "padkit/" in filename:
        return "padkit." + Path(filename).stem + f".{fn}"
    if "torch/nn/modules/module.py" in filename:
        return "nn.Module call machinery"
    if filename == "~" or filename.startswith("<"):
        return f"builtin {fn}"
    if "site-packages/" in filename:
        return filename.split("site-packages/")[1].split("/")[0] + f" ({Path(filename).stem}.{fn})"
    return f"{Path(filename).stem}.{fn}"


def profile(case: Case, chunk: int, n: int, top: int) -> None:
    """cProfile (self time by function) and torch.profiler (self CPU time by op) of padkit's
    steps over ``n`` samples in chunks of ``chunk``."""
    x = torch.randn(1, case.channels, n, generator=torch.Generator().manual_seed(5))
    sm = case.stream
    chunks = list(x.split(chunk, -1))

    def go() -> float:
        state = sm.init_state(example=x[..., :1])
        t0 = time.perf_counter()
        for c in chunks:
            _, state = sm.step(c, state)
        return time.perf_counter() - t0

    from torch.profiler import ProfilerActivity, profile as tprofile

    gc.collect()
    gc_was = gc.isenabled()
    gc.disable()  # as in the timed rounds: no collection inside a step
    try:
        with torch.no_grad():
            go()
            plain = min(go() for _ in range(3))
            pr = cProfile.Profile()
            pr.enable()
            go()
            pr.disable()
            with tprofile(activities=[ProfilerActivity.CPU]) as tp:
                go()
    finally:
        if gc_was:
            gc.enable()
    steps = len(chunks)
    print(f"\n### padkit step, {case.name}, chunk {chunk}: {steps} steps")
    print(f"- wall time without a profiler: {1e3 * plain / steps:.3f} ms per step")
    stats = pstats.Stats(pr, stream=io.StringIO())
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in raw.values())
    by: dict[str, list[float]] = {}
    for (filename, _line, fn), (_cc, nc, tt, _ct, _callers) in raw.items():
        key = _group(filename, fn)
        acc = by.setdefault(key, [0.0, 0.0])
        acc[0] += tt
        acc[1] += nc
    print(f"- cProfile: {1e3 * total / steps:.3f} ms per step in all (profiler overhead included)")
    rows = [
        [k, f"{1e6 * v[0] / steps:.1f}", f"{100 * v[0] / total:.1f}", f"{v[1] / steps:.1f}"]
        for k, v in sorted(by.items(), key=lambda kv: -kv[1][0])[:top]
    ]
    print(markdown_table(["function (self time)", "us/step", "%", "calls/step"], rows))
    ops = tp.key_averages()
    op_total = sum(e.self_cpu_time_total for e in ops)
    rows = [
        [e.key, f"{e.self_cpu_time_total / steps:.1f}", f"{e.count / steps:.1f}"]
        for e in sorted(ops, key=lambda e: -e.self_cpu_time_total)[:top]
    ]
    print(f"\n- torch.profiler: torch ops' self CPU time {op_total / 1e3 / steps:.3f} ms per step")
    print(markdown_table(["op", "self us/step", "calls/step"], rows))


# ----------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--filters", type=int, default=64, help="SEANet n_filters (Mimi: 64)")
    parser.add_argument("--dimension", type=int, default=512, help="SEANet dimension (Mimi: 512)")
    parser.add_argument("--cc-width", type=int, default=16, help="cached_conv stack width")
    parser.add_argument("--hops", type=int, default=8, help="hops streamed at hop chunks")
    parser.add_argument("--short", type=int, default=1, help="hops streamed at chunks 1, 7")
    parser.add_argument("--no-encodec", action="store_true", help="skip the encodec case")
    parser.add_argument(
        "--snac-window",
        type=int,
        default=8,
        help="SNAC's attention block in frames for its second case (0: no such case)",
    )
    parser.add_argument("--profile", action="store_true", help="profile padkit's step")
    parser.add_argument("--top", type=int, default=15, help="rows per profile table")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    print(env_header(args.threads))
    cases: list[Case] = []
    for make in (
        lambda: moshi_cases(args.filters, args.dimension),
        lambda: [cached_conv_case(args.cc_width)],
        lambda: [] if args.no_encodec else [encodec_case(args.filters, args.dimension)],
        lambda: [snac_case(args.filters)],
        lambda: [snac_case(args.filters, args.snac_window)] if args.snac_window else [],
    ):
        try:
            cases += make()
        except ImportError as err:
            print(f"- skipped: {err}")
    for case in cases:
        params = sum(p.numel() for p in case.model.parameters())
        print(
            f"- {case.name}: {case.about}; {params / 1e3:.0f} k parameters; "
            f"convert_causal {case.convert_s:.2f} s"
        )
    print(
        f"- batch 1; {args.rounds} rounds; hop chunks stream {args.hops} hops, chunks of 7 and "
        f"1 sample {args.short}; padkit's oneDNN backend off (bench/common.py): every stream "
        "runs torch's kernels"
    )
    header = [
        "case",
        "chunk",
        "steps",
        "padkit ms/step",
        "padkit us/input sample",
        "padkit max |diff|",
        "peer ms/step",
        "peer max |diff|",
        "padkit/peer",
        "padkit cost/sample vs hop",
        "alone: vs hop",
    ]
    rows: list[list[object]] = []
    loads = []
    t_all = time.perf_counter()
    for case in cases:
        r, other = run_case(case, args.rounds, args.hops, args.short)
        rows += r
        loads.append(f"{case.name} {100 * other:.0f}%")
    print(
        f"- other processes' share of the machine's CPU time while each case ran: "
        f"{', '.join(loads)}; load average now "
        f"{' / '.join(f'{v:.2f}' for v in os.getloadavg())}; timed part "
        f"{time.perf_counter() - t_all:.0f} s"
    )
    print()
    print(markdown_table(header, rows))
    if args.profile:
        moshi = [c for c in cases if c.name == "moshi SEANet encoder"]
        for case in moshi:
            profile(case, case.hop, 8 * case.hop, args.top)
            profile(case, 1, case.hop, args.top)
        for case in [c for c in cases if c.name == "cached_conv stack"]:
            profile(case, case.hop, 64 * case.hop, args.top)


if __name__ == "__main__":
    main()
