"""Time tilesparse against SDPA (flash, cuDNN) and FlexAttention, in one process, on one GPU.

What is timed (bf16, causal, q/k/v (B, H, T, D) leaf tensors with requires_grad; fresh random
inputs for every pattern, never zeros):

- ``fwd``: one call, output discarded (autograd records the graph, as in training);
  ``fwd_bwd``: the call, then ``torch.autograd.grad(out, (q, k, v), grad)`` with a fixed random
  ``grad``.
- ours, decisions excluded (``ours``): ``attn(q, k, v, decisions=dec)``, ``dec`` made once by
  ``attn.decide`` outside the timed region; inside: validation, layout (sort/compaction),
  ranges, kernels. Ours, decisions included (``ours_incl``): ``attn(q, k, v)``, which also
  runs the criteria (LSH hashing, Bernoulli draws) every call. ``decide``: ``attn.decide(q, k)``
  alone; ``prep``: ``attn.prepare(q, k, v, decisions=dec)`` alone (the index tensors), wall
  time; ``prep_gpu``: the GPU time of prepare's kernels (the torch profiler's device times,
  mean of 10 calls); ``kernels``: the attention kernels alone on prepared index tensors
  (Triton rows with one head group). ``prep_gpu_share`` = prep_gpu / ours and
  ``overhead_share`` = (ours - kernels) / ours: what the call adds to the kernels.
  ``attn = ts.compile(spec, causal=True, backend="triton", validate=False)``: ``validate=False``
  skips the value checks of given decisions, which read them back (a device sync); the dense
  row uses ``backend="auto"`` (which sends it to SDPA) and reports the chosen backend.
- ``sdpa_flash`` / ``sdpa_cudnn``: ``F.scaled_dot_product_attention(is_causal=True)`` under
  ``sdpa_kernel(FLASH_ATTENTION)`` / ``sdpa_kernel(CUDNN_ATTENTION)``; one measurement per
  (D, T, mode), shared by that (D, T)'s pattern rows.
- FlexAttention (``torch.compile(flex_attention, dynamic=False)``) on the same mask in its
  best layout: per (b, h), rows stable-sorted by (bucket, position), dropped rows moved to
  the end (compacted, original order kept), q/k/v gathered into that order, a ``mask_mod`` over
  the sorted rows' original positions and buckets (causal on original positions, same bucket,
  dropped rows never match), the output scattered back to the original order. Decisions are
  given (as for ``ours``). ``flex_percall``: layout + ``create_block_mask`` (compiled) + gather
  + flex + scatter inside the timed region (the pattern changes every step);
  ``flex_prebuilt``: layout and block mask built once outside, gather + flex + scatter inside
  (Flex's best case). Its output is checked against ours once per row (``flex_check``).

What is not timed: the first call of every measured function (Triton and torch.compile
compilation, plan building), input creation, ``attn.decide`` for ``ours``, the visited-tile
statistics, the peak-memory call and the checks.

Timing, on CUDA: one untimed call (compilation), one for peak memory, one timed estimate,
warm-up calls for ``--warmup-ms``, then ``n = clamp(rep_ms / estimate, min_reps, 100)`` calls
each bracketed by CUDA events after an L2 flush (triton.testing.do_bench's method, with at
least ``--min-reps`` samples); the median is reported, p20/p80 and n under ``spread``. Calls
are queued back to back, so host work that the GPU cannot hide (Python, launches) counts. On
the CPU (``--grid quick`` in CI): ``time.perf_counter`` around each call, median of
``--cpu-reps``.

Peak memory: ``torch.cuda.reset_peak_memory_stats()``, one call, ``max_memory_allocated()``
(bytes, everything live included: inputs, grad, decisions); ``live_mib`` is what was
allocated just before the call.

Tiles: ``visited_fraction`` sums, over the prepared head groups, the forward kernel's visited
(query block x ``fwd_n``-wide key tile) tiles over the dense causal tile count;
``ideal_fraction`` is the fraction an ideal layout must touch (tiles holding a kept element),
computed exactly on a fresh B=1, H=1 slice for T <= ``--ideal-max-t`` (it costs T^2 work),
next to the visited fraction of that same slice.

Every failure of one measurement (out of memory, unsupported backend) is recorded in its row
under ``errors`` and the run goes on. The JSON is rewritten after every pattern, so a run cut
short keeps what it measured; ``--budget-s`` stops starting new work after that many seconds.

Run: ``python benchmarks/bench_attention.py --grid targets --out results.json``; a PNG lands
next to the JSON and a compact table is printed last. ``--grid quick`` runs on the CPU (Triton
under TRITON_INTERPRET=1, else the reference backend). Import ``run`` and ``plot`` to drive it
from Python.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import gc
import json
import math
import platform
import statistics
import subprocess
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

import tilesparse as ts
from tilesparse.backends.triton.op import interpreting, sparse_attention, tile_config
from tilesparse.ir import KEY_SENTINEL, tile_stats

from .plot import plot

__all__ = ["GRIDS", "PATTERNS", "Grid", "Pattern", "plot", "print_table", "run"]

RESULTS_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
DTYPE = torch.bfloat16
MODES = ("fwd", "fwd_bwd")
KEY_DROPPED = KEY_SENTINEL  # Flex layout: original position of a dropped key, after every query
MIB = 2**20


@dataclass(frozen=True)
class Pattern:
    """A benchmarked spec; ``backend`` None means the device's sparse backend (triton)."""

    spec: ts.Spec
    backend: str | None = None


PATTERNS: dict[str, Pattern] = {
    "dense": Pattern(ts.Dense(), backend="auto"),
    "keep0.7": Pattern(ts.QKDrop(keep=0.7)),
    "keep0.5": Pattern(ts.QKDrop(keep=0.5)),
    "keep0.3": Pattern(ts.QKDrop(keep=0.3)),
    "hash8": Pattern(ts.Hash(buckets=8)),
    "hash16": Pattern(ts.Hash(buckets=16)),
    "hash64": Pattern(ts.Hash(buckets=64)),
    "hybrid": Pattern(ts.Hybrid(parts=[ts.Hash(buckets=16), ts.QKDrop(keep=0.7)])),
    # not in any grid: the Triton kernels on the dense pattern (what auto sends to SDPA)
    "dense-triton": Pattern(ts.Dense(), backend="triton"),
}
DEFAULT_PATTERNS = ("dense", "keep0.7", "keep0.5", "keep0.3", "hash8", "hash16", "hash64", "hybrid")
FLEX_DEFAULT_PATTERNS = ("hash16", "keep0.5", "hybrid")
FLEX_DEFAULT_D, FLEX_DEFAULT_MAX_T = 64, 32768


@dataclass(frozen=True)
class Grid:
    """The sizes and patterns of one benchmark grid; ``long_row`` adds T=131072 (Hash 16, D=64,
    forward+backward, ours against SDPA flash: time and peak memory)."""

    batch: int
    heads: int
    head_dims: tuple[int, ...]
    seqlens: tuple[int, ...]
    patterns: tuple[str, ...]
    long_row: bool


GRIDS: dict[str, Grid] = {
    "full": Grid(2, 12, (64, 128), (4096, 8192, 16384, 32768, 65536), DEFAULT_PATTERNS, True),
    "targets": Grid(2, 12, (64,), (16384, 32768), ("dense", "keep0.7", "keep0.5", "keep0.3", "hash16", "hybrid"), True),
    "quick": Grid(1, 2, (32,), (256, 512), DEFAULT_PATTERNS, False),
}
LONG_T, LONG_D, LONG_PATTERN = 131072, 64, "hash16"


# ---------------------------------------------------------------------------------------------
# Measuring


@dataclass
class Record:
    """What was measured for one (D, T, pattern) or (D, T, pattern, mode), by measurement name."""

    ms: dict[str, float] = field(default_factory=dict)
    spread: dict[str, list] = field(default_factory=dict)  # [p20 ms, p80 ms, timed calls]
    peak_mib: dict[str, float] = field(default_factory=dict)
    live_mib: dict[str, float] = field(default_factory=dict)
    first_call_s: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    info: dict[str, object] = field(default_factory=dict)

    def merged(self, *others: Record) -> Record:
        out = Record()
        for r in (self, *others):
            for f in dataclasses.fields(Record):
                getattr(out, f.name).update(getattr(r, f.name))
        return out


@dataclass(frozen=True)
class Settings:
    device: torch.device
    batch: int
    heads: int
    modes: tuple[str, ...]
    decide: str
    flex: str
    grid: str
    warmup_ms: float
    rep_ms: float
    min_reps: int
    cpu_reps: int
    seed: int
    validate: bool
    ideal_max_t: int
    sparse_backend: str
    flex_patterns: tuple[str, ...] = FLEX_DEFAULT_PATTERNS
    flex_seqlens: tuple[int, ...] | None = None  # None: T <= FLEX_DEFAULT_MAX_T

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _free(device: torch.device, *, collect: bool = False) -> None:
    """Return cached blocks to the device; ``collect`` also breaks reference cycles (a caught
    exception's traceback holds its frames' tensors), which costs ~0.3 s with torch loaded."""
    if collect:
        gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _message(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).strip()[:1500]}"


def _time_cuda(fn: Callable[[], object], s: Settings) -> tuple[float, list]:
    """Median ms of ``fn`` by CUDA events, each call after an L2 flush (fn already warm)."""
    flush = torch.empty(256 * MIB, dtype=torch.int8, device=s.device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    flush.zero_()
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize(s.device)
    estimate = max(start.elapsed_time(end), 1e-3)
    for _ in range(min(int(s.warmup_ms / estimate), 100)):
        fn()
    n = max(s.min_reps, min(100, int(s.rep_ms / estimate)))
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for a, b in events:
        flush.zero_()
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize(s.device)
    times = sorted(a.elapsed_time(b) for a, b in events)
    return statistics.median(times), [_quantile(times, 0.2), _quantile(times, 0.8), n]


def _time_cpu(fn: Callable[[], object], s: Settings) -> tuple[float, list]:
    times = []
    for _ in range(max(1, s.cpu_reps)):
        t0 = time.perf_counter()
        fn()
        times.append(1e3 * (time.perf_counter() - t0))
    times.sort()
    return statistics.median(times), [_quantile(times, 0.2), _quantile(times, 0.8), len(times)]


def _quantile(sorted_times: list[float], q: float) -> float:
    return sorted_times[min(len(sorted_times) - 1, int(q * len(sorted_times)))]


# a CUDA error that poisons the context: every later call would fail, so the run stops
_FATAL = ("illegal memory access", "device-side assert", "unspecified launch failure", "illegal instruction")
_STATE: dict[str, str | None] = {"fatal": None}


def _note_fatal(message: str) -> None:
    if any(f in message for f in _FATAL) and _STATE["fatal"] is None:
        _STATE["fatal"] = message


def measure(name: str, fn: Callable[[], object], rec: Record, s: Settings, *, peak: bool = True) -> None:
    """Warm ``fn`` up (compilation excluded), take its peak memory over one call, time it; a
    failure is recorded under ``rec.errors[name]`` and the run goes on."""
    try:
        t0 = time.perf_counter()
        fn()
        _sync(s.device)
        rec.first_call_s[name] = round(time.perf_counter() - t0, 4)
        if peak and s.cuda:
            torch.cuda.synchronize(s.device)
            live = torch.cuda.memory_allocated(s.device)
            torch.cuda.reset_peak_memory_stats(s.device)
            fn()
            torch.cuda.synchronize(s.device)
            rec.peak_mib[name] = round(torch.cuda.max_memory_allocated(s.device) / MIB, 1)
            rec.live_mib[name] = round(live / MIB, 1)
        ms, spread = (_time_cuda if s.cuda else _time_cpu)(fn, s)
        rec.ms[name] = ms
        rec.spread[name] = spread
    except torch.cuda.OutOfMemoryError as e:
        rec.errors[name] = "out of memory: " + _message(e)
    except Exception as e:  # noqa: BLE001 - every failure is a recorded result, not a crash
        rec.errors[name] = _message(e)
    finally:
        if name in rec.errors:
            _note_fatal(rec.errors[name])
            _free(s.device, collect=True)


def step(forward: Callable[[], Tensor], mode: str, inputs: tuple[Tensor, ...], grad: Tensor) -> Callable[[], object]:
    """The timed unit of ``mode``: the forward call, or the call then its backward."""
    if mode == "fwd":
        return forward

    def fwd_bwd():
        out = forward()
        return torch.autograd.grad(out, inputs, grad)

    return fwd_bwd


def random_inputs(B: int, H: int, T: int, D: int, s: Settings, tag: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """q, k, v (leaves with requires_grad) and the output gradient, seeded by ``tag``."""
    g = torch.Generator(device=s.device).manual_seed(s.seed * 1_000_003 + zlib.crc32(tag.encode()))
    q, k, v, grad = (torch.randn((B, H, T, D), generator=g, device=s.device, dtype=DTYPE) for _ in range(4))
    return q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), grad


# ---------------------------------------------------------------------------------------------
# SDPA


def _sdpa(q: Tensor, k: Tensor, v: Tensor, backend) -> Tensor:
    ctx = contextlib.nullcontext() if backend is None else sdpa_kernel(backend)
    with ctx:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def run_sdpa(D: int, T: int, s: Settings, *, modes: Sequence[str], cudnn: bool = True) -> dict[str, Record]:
    """SDPA flash and cuDNN for every mode at (D, T): one measurement shared by the patterns."""
    q, k, v, grad = random_inputs(s.batch, s.heads, T, D, s, f"sdpa/{D}/{T}")
    out: dict[str, Record] = {}
    for mode in modes:
        rec = out[mode] = Record()
        if s.cuda:
            backends = [("sdpa_flash", SDPBackend.FLASH_ATTENTION)]
            if cudnn:
                backends.append(("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION))
            for name, backend in backends:
                fwd = lambda b=backend: _sdpa(q, k, v, b)  # noqa: E731
                measure(name, step(fwd, mode, (q, k, v), grad), rec, s)
        else:
            measure("sdpa_flash", step(lambda: _sdpa(q, k, v, None), mode, (q, k, v), grad), rec, s)
            rec.notes["sdpa_flash"] = "cpu: SDPA backend not forced (torch's CPU kernel stands in for flash)"
            rec.skipped["sdpa_cudnn"] = "cpu: no cuDNN backend"
    return out


# ---------------------------------------------------------------------------------------------
# FlexAttention


_FLEX: dict[str, tuple[Callable, Callable]] = {}


def _flex_fns(device: torch.device) -> tuple[Callable, Callable]:
    """(flex_attention, create_block_mask): compiled on CUDA, eager on the CPU."""
    key = device.type
    if key not in _FLEX:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        if device.type == "cuda":
            for name in ("recompile_limit", "cache_size_limit"):  # one compile per (T, D)
                if hasattr(torch._dynamo.config, name):
                    setattr(torch._dynamo.config, name, max(64, getattr(torch._dynamo.config, name)))
            _FLEX[key] = (torch.compile(flex_attention, dynamic=False), torch.compile(create_block_mask, dynamic=False))
        else:
            _FLEX[key] = (flex_attention, create_block_mask)
    return _FLEX[key]


class FlexMask:
    """Layout buffers for one (B, H, T) and the one ``mask_mod`` that reads them.

    The buffers hold, per sorted row, the original position (-1 for a dropped query,
    KEY_DROPPED for a dropped key) and the bucket; new decisions are copied into the same
    buffers, so the compiled mask function and flex kernel never see a new closure.
    """

    def __init__(self, B: int, H: int, T: int, device: torch.device):
        self.shape = (B, H, T)
        self.device = device
        q_pos, q_bucket, k_pos, k_bucket = (torch.zeros(self.shape, dtype=torch.int32, device=device) for _ in range(4))
        self.q_pos, self.q_bucket, self.k_pos, self.k_bucket = q_pos, q_bucket, k_pos, k_bucket

        def mask_mod(b, h, q_idx, kv_idx):
            return (k_pos[b, h, kv_idx] <= q_pos[b, h, q_idx]) & (k_bucket[b, h, kv_idx] == q_bucket[b, h, q_idx])

        self.mask_mod = mask_mod

    def load(self, dec: ts.Decisions) -> tuple[Tensor, Tensor]:
        """Lay out the rows for ``dec``: fill the buffers; return the q and k row orders."""
        q_order = self._side(dec.q_keep, dec.q_bucket, self.q_pos, self.q_bucket, dropped=-1)
        k_order = self._side(dec.k_keep, dec.k_bucket, self.k_pos, self.k_bucket, dropped=KEY_DROPPED)
        return q_order, k_order

    def _side(self, keep, bucket, pos_out: Tensor, bucket_out: Tensor, *, dropped: int) -> Tensor:
        B, H, T = self.shape
        pos = torch.arange(T, device=self.device, dtype=torch.int64)
        if keep is None and bucket is None:
            pos_out.copy_(pos.expand(B, H, T))
            bucket_out.zero_()
            return pos.expand(B, H, T)
        key = pos.expand(B, H, T) if bucket is None else bucket.to(torch.int64) * T + pos
        big = 1 << 40  # past every kept row's bucket * T + position
        if keep is not None:
            key = torch.where(keep, key, big + pos)
        skey, order = torch.sort(key, dim=-1)  # keys are distinct: the order is the stable one
        valid = skey < big
        pos_out.copy_(torch.where(valid, order, dropped))
        bucket_out.copy_(torch.where(valid, skey // T, -1))
        return order

    def block_mask(self):
        _, create_block_mask = _flex_fns(self.device)
        B, H, T = self.shape
        return create_block_mask(self.mask_mod, B, H, T, T, device=self.device)


def flex_forward(q: Tensor, k: Tensor, v: Tensor, q_order: Tensor, k_order: Tensor, block_mask) -> Tensor:
    """Gather q, k, v into the layout, run flex, scatter the output back to original order."""
    flex_attention, _ = _flex_fns(q.device)
    D = q.shape[-1]
    qi = q_order.unsqueeze(-1).expand(*q_order.shape, D)
    ki = k_order.unsqueeze(-1).expand(*k_order.shape, D)
    o = flex_attention(q.gather(2, qi), k.gather(2, ki), v.gather(2, ki), block_mask=block_mask)
    return torch.empty_like(o).scatter(2, qi, o)


def run_flex(
    q: Tensor, k: Tensor, v: Tensor, grad: Tensor, dec: ts.Decisions, ours_out: Tensor | None,
    fm: FlexMask, common: Record, per_mode: dict[str, Record], s: Settings,
) -> None:  # fmt: skip
    """Flex per-call and prebuilt for every mode, and the check of its output against ours."""
    if not s.cuda:  # flex has no CPU backward; it refuses inputs that require grad
        q, k, v = q.detach(), k.detach(), v.detach()
    try:
        t0 = time.perf_counter()
        q_order, k_order = fm.load(dec)
        bm = fm.block_mask()
        _sync(s.device)
        t1 = time.perf_counter()
        out = flex_forward(q, k, v, q_order, k_order, bm).detach()
        _sync(s.device)
        common.first_call_s["flex_first_block_mask"] = round(t1 - t0, 3)  # compiles once per T
        common.first_call_s["flex_first_fwd"] = round(time.perf_counter() - t1, 3)  # once per (D, T)
        if ours_out is not None:
            err = float((out.float() - ours_out.float()).norm() / ours_out.float().norm().clamp_min(1e-30))
            ok = math.isfinite(err) and err < 2e-2
            common.info["flex_check"] = {"rel_err": err, "ok": ok, "tolerance": 2e-2}
            if not ok:
                common.errors["flex_check"] = f"flex differs from ours: relative error {err:.3g} >= 2e-2"
        del out
    except torch.cuda.OutOfMemoryError as e:
        common.errors["flex"] = "out of memory: " + _message(e)
        _note_fatal(common.errors["flex"])
        _free(s.device, collect=True)
        return
    except Exception as e:  # noqa: BLE001
        common.errors["flex"] = _message(e)
        _note_fatal(common.errors["flex"])
        _free(s.device, collect=True)
        return

    def percall() -> Tensor:
        qo, ko = fm.load(dec)
        return flex_forward(q, k, v, qo, ko, fm.block_mask())

    def prebuilt() -> Tensor:
        return flex_forward(q, k, v, q_order, k_order, bm)

    for mode, rec in per_mode.items():
        if mode == "fwd_bwd" and not s.cuda:
            for name in ("flex_prebuilt", "flex_percall"):
                rec.skipped[name] = "cpu: FlexAttention has no CPU backward"
            continue
        measure("flex_prebuilt", step(prebuilt, mode, (q, k, v), grad), rec, s)
        measure("flex_percall", step(percall, mode, (q, k, v), grad), rec, s)


def flex_wanted(pattern: str, D: int, T: int, s: Settings) -> str | None:
    """None when Flex runs on this row, else why not."""
    if s.flex == "none":
        return "--flex none"
    if s.flex == "all":
        return None
    if not s.cuda:
        return "cpu: Flex skipped by default (--flex all runs its forward, slowly)"
    if pattern not in s.flex_patterns:
        return f"--flex default runs {', '.join(s.flex_patterns)} only"
    if s.grid == "quick":
        return None
    if D != FLEX_DEFAULT_D:
        return f"--flex default runs D={FLEX_DEFAULT_D} only"
    if s.flex_seqlens is not None and T not in s.flex_seqlens:
        return f"--flex default runs T in {','.join(map(str, s.flex_seqlens))} only"
    if s.flex_seqlens is None and T > FLEX_DEFAULT_MAX_T:
        return f"--flex default runs T<={FLEX_DEFAULT_MAX_T} only"
    return None


# ---------------------------------------------------------------------------------------------
# One pattern


def visited(attn, q: Tensor, k: Tensor, v: Tensor, dec: ts.Decisions, block_n: int, *, exact: bool) -> dict:
    """Tile counts of the prepared groups, as fractions of the dense causal tiles."""
    with torch.no_grad():
        prep = attn.prepare(q, k, v, decisions=dec)
        stats = [tile_stats(g, block_n=block_n, exact=exact) for g in prep.groups]
    dense = sum(st["dense_tiles"] for st in stats)
    out = {
        "visited_tiles": sum(st["visited"] for st in stats),
        "dense_tiles": dense,
        "visited_fraction": sum(st["visited"] for st in stats) / max(dense, 1),
        "block_q": prep.groups[0].block_q if prep.groups else None,
        "block_n": block_n,
    }
    if exact:
        out["ideal_fraction"] = sum(st["ideal"] for st in stats) / max(dense, 1)
        out["missed"] = sum(st["missed"] for st in stats)
    return out


def kernels_alone(attn, q, k, v, grad, dec, common: Record, per_mode: dict[str, Record], s: Settings) -> None:
    """The attention kernels alone on prepared index tensors (``kernels``, per mode), and the
    GPU time of the preparation's own kernels (``prep_gpu``, from the profiler): what the
    call adds on top of the kernels is host work (Python, launches) and the preparation."""
    try:
        prep = attn.prepare(q, k, v, decisions=dec)
    except Exception as e:  # noqa: BLE001
        common.errors["kernels"] = _message(e)
        return
    if len(prep.groups) != 1:
        common.skipped["kernels"] = f"{len(prep.groups)} head groups (measured for one)"
        return
    g = prep.groups[0]
    cfg = tile_config(q.shape[-1], q.dtype, q.device)
    scale = q.shape[-1] ** -0.5
    for mode, rec in per_mode.items():
        measure("kernels", step(lambda: sparse_attention(q, k, v, g, scale, cfg), mode, (q, k, v), grad), rec, s)
    del prep, g
    if s.cuda:
        try:
            common.ms["prep_gpu"] = _gpu_ms(lambda: attn.prepare(q, k, v, decisions=dec), s)
        except Exception as e:  # noqa: BLE001
            common.errors["prep_gpu"] = _message(e)


def _gpu_ms(fn: Callable[[], object], s: Settings, calls: int = 10) -> float:
    """Mean GPU time of ``fn``'s kernels per call (the sum of their device durations, by the
    torch profiler; host time, launch gaps and idle excluded)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    _sync(s.device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        _sync(s.device)
    us = sum(e.device_time_total for e in prof.key_averages() if e.device_time_total and not e.is_user_annotation)
    return us / 1e3 / calls


def run_pattern(
    name: str, D: int, T: int, s: Settings, *, modes: Sequence[str], flex_masks: dict, long: bool = False,
) -> tuple[Record, dict[str, Record]]:  # fmt: skip
    """Everything measured for one pattern at (D, T): shared numbers and per-mode numbers."""
    pat = PATTERNS[name]
    common = Record()
    per_mode = {m: Record() for m in modes}
    backend = pat.backend or s.sparse_backend
    attn = ts.compile(pat.spec, causal=True, backend=backend, validate=s.validate)
    q, k, v, grad = random_inputs(s.batch, s.heads, T, D, s, f"{name}/{D}/{T}")
    inputs = (q, k, v)
    try:
        common.info["backend"] = ",".join(a.backend.NAME for a in attn.plan(q, k, v).assignments)
        dec = attn.decide(q, k)
    except Exception as e:  # noqa: BLE001
        common.errors["ours"] = _message(e)
        _note_fatal(common.errors["ours"])
        del q, k, v, grad, inputs
        _free(s.device, collect=True)
        return common, per_mode
    has_decisions = bool(pat.spec.decision_fields)

    if has_decisions:
        measure("decide", lambda: attn.decide(q, k), common, s, peak=False)
    measure("prep", lambda: attn.prepare(q, k, v, decisions=dec), common, s, peak=False)
    for mode, rec in per_mode.items():
        if s.decide in ("both", "excluded"):
            measure("ours", step(lambda: attn(q, k, v, decisions=dec), mode, inputs, grad), rec, s)
        if s.decide in ("both", "included"):
            if has_decisions:
                measure("ours_incl", step(lambda: attn(q, k, v), mode, inputs, grad), rec, s)
            elif "ours" in rec.ms:
                rec.ms["ours_incl"] = rec.ms["ours"]
                rec.notes["ours_incl"] = "no decisions to make: the same call as ours"

    if backend == "triton":
        kernels_alone(attn, q, k, v, grad, dec, common, per_mode, s)

    block_n = tile_config(D, DTYPE, s.device).fwd_n
    try:
        common.info.update(visited(attn, q, k, v, dec, block_n, exact=False))
    except Exception as e:  # noqa: BLE001
        common.errors["visited"] = _message(e)
        _note_fatal(common.errors["visited"])
        _free(s.device, collect=True)

    why_not = "not run on the long row" if long else flex_wanted(name, D, T, s)
    if why_not is None:
        try:
            ours_out = attn(q, k, v, decisions=dec).detach()
        except Exception as e:  # noqa: BLE001
            ours_out = None
            common.errors["flex_check"] = "ours failed: " + _message(e)
        key = (s.batch, s.heads, T)
        if key not in flex_masks:
            flex_masks[key] = FlexMask(s.batch, s.heads, T, s.device)
        run_flex(q, k, v, grad, dec, ours_out, flex_masks[key], common, per_mode, s)
        del ours_out
    else:
        common.skipped["flex"] = why_not

    del q, k, v, grad, dec, inputs
    _free(s.device)
    if T <= s.ideal_max_t and not long:
        try:
            q1, k1, v1, _ = random_inputs(1, 1, T, D, s, f"ideal/{name}/{D}/{T}")
            q1, k1, v1 = q1.detach(), k1.detach(), v1.detach()
            st = visited(attn, q1, k1, v1, attn.decide(q1, k1), block_n, exact=True)
            common.info["ideal_fraction"] = st["ideal_fraction"]
            common.info["ideal_slice_visited_fraction"] = st["visited_fraction"]
            common.info["ideal_missed_tiles"] = st["missed"]
        except Exception as e:  # noqa: BLE001
            common.errors["ideal"] = _message(e)
            _note_fatal(common.errors["ideal"])
            _free(s.device, collect=True)
    else:
        common.skipped["ideal"] = f"T > {s.ideal_max_t} (exact tile counts cost T^2 work)" if not long else "long row"
    return common, per_mode


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def make_row(name: str, D: int, T: int, mode: str, rec: Record, s: Settings, *, long: bool) -> dict:
    """One JSON row: every number of (D, T, pattern, mode) and the ratios between them."""
    ms = rec.ms
    speedup = {}
    for mine in ("ours", "ours_incl"):
        for base in ("sdpa_flash", "sdpa_cudnn", "flex_percall", "flex_prebuilt"):
            if ms.get(mine) and ms.get(base):
                speedup[f"{mine}_vs_{base}"] = ms[base] / ms[mine]
    for f in ("flex_percall", "flex_prebuilt"):
        if ms.get(f) and ms.get("sdpa_flash"):
            speedup[f"{f}_vs_sdpa_flash"] = ms["sdpa_flash"] / ms[f]
    info = dict(rec.info)
    peak = rec.peak_mib
    return {
        "pattern": name,
        "spec": json.loads(PATTERNS[name].spec.model_dump_json()),
        "D": D,
        "T": T,
        "B": s.batch,
        "H": s.heads,
        "mode": mode,
        "long": long,
        "backend": info.pop("backend", None),
        "ms": ms,
        "spread": rec.spread,
        "speedup": speedup,
        "prep_share": _ratio(ms.get("prep"), ms.get("ours")),
        "prep_gpu_share": _ratio(ms.get("prep_gpu"), ms.get("ours")),
        "overhead_share": _ratio((ms["ours"] - ms["kernels"]) if ms.get("ours") and ms.get("kernels") else None, ms.get("ours")),
        "peak_mib": peak,
        "live_mib": rec.live_mib,
        "peak_ratio_vs_sdpa_flash": _ratio(peak.get("ours"), peak.get("sdpa_flash")),
        "peak_ratio_incl_vs_sdpa_flash": _ratio(peak.get("ours_incl"), peak.get("sdpa_flash")),
        "visited_fraction": info.pop("visited_fraction", None),
        "ideal_fraction": info.pop("ideal_fraction", None),
        "flex_check": info.pop("flex_check", None),
        **info,
        "first_call_s": rec.first_call_s,
        "errors": rec.errors,
        "skipped": rec.skipped,
        "notes": rec.notes,
    }


# ---------------------------------------------------------------------------------------------
# The run


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({platform.processor() or platform.machine()})"


def _versions() -> dict:
    out = {"torch": torch.__version__, "python": platform.python_version(), "tilesparse": ts.__version__}
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = None
    out["cuda"] = torch.version.cuda
    out["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    try:  # the device's copy of the tree may have no .git
        git = ["git", "-C", str(Path(__file__).resolve().parent)]
        head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        out["git_commit"] = head.stdout.strip() or None
        status = subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True, timeout=10)
        out["git_dirty"] = bool(status.stdout.strip()) if status.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        out["git_commit"] = out["git_dirty"] = None
    return out


def _write_json(results: dict, path: Path) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(results, indent=1, default=str))
    tmp.replace(path)


def _csv(values: Sequence | str | None, cast=int) -> tuple | None:
    if values is None:
        return None
    if isinstance(values, str):
        values = [x for x in values.split(",") if x.strip()]
    return tuple(cast(x) if cast is not str else x.strip() for x in values)


def run(
    grid: str = "full",
    *,
    head_dims: Sequence[int] | str | None = None,
    seqlens: Sequence[int] | str | None = None,
    patterns: Sequence[str] | str | None = None,
    batch: int | None = None,
    heads: int | None = None,
    long_row: bool | None = None,
    modes: Sequence[str] = MODES,
    decide: str = "both",
    flex: str = "default",
    flex_patterns: Sequence[str] | str | None = None,
    flex_seqlens: Sequence[int] | str | None = None,
    out: str | Path | None = None,
    png: str | Path | None = None,
    warmup_ms: float = 10.0,
    rep_ms: float = 40.0,
    min_reps: int = 5,
    cpu_reps: int = 3,
    seed: int = 0,
    validate: bool = False,
    budget_s: float | None = None,
    ideal_max_t: int = 16384,
    device: str | torch.device | None = None,
    command: str | None = None,
    log: bool = True,
) -> dict:
    """Run a grid and return ``{"meta": ..., "rows": [...]}``; with ``out``, write the JSON
    there (after every pattern) and the plot to ``png`` (default: ``out`` with .png)."""
    if grid not in GRIDS:
        raise ValueError(f"grid must be one of {sorted(GRIDS)}, got {grid!r}")
    g = GRIDS[grid]
    head_dims = _csv(head_dims) or g.head_dims
    seqlens = _csv(seqlens) or g.seqlens
    patterns = _csv(patterns, str) or g.patterns
    if bad := [p for p in patterns if p not in PATTERNS]:
        raise ValueError(f"unknown patterns {bad}; known: {list(PATTERNS)}")
    modes = _csv(modes, str)
    if bad := [m for m in modes if m not in MODES]:
        raise ValueError(f"unknown modes {bad}; known: {list(MODES)}")
    if decide not in ("both", "excluded", "included"):
        raise ValueError(f"decide must be both, excluded or included, got {decide!r}")
    if flex not in ("all", "default", "none"):
        raise ValueError(f"flex must be all, default or none, got {flex!r}")
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    long_row = g.long_row if long_row is None else long_row
    sparse_backend = "triton" if device.type == "cuda" or interpreting() else "reference"
    s = Settings(
        device=device, batch=batch or g.batch, heads=heads or g.heads, modes=modes, decide=decide, flex=flex,
        grid=grid, warmup_ms=warmup_ms, rep_ms=rep_ms, min_reps=min_reps, cpu_reps=cpu_reps, seed=seed,
        validate=validate, ideal_max_t=ideal_max_t, sparse_backend=sparse_backend,
        flex_patterns=_csv(flex_patterns, str) or FLEX_DEFAULT_PATTERNS, flex_seqlens=_csv(flex_seqlens),
    )  # fmt: skip
    out = Path(out) if out is not None else None
    png = Path(png) if png is not None else (out.with_suffix(".png") if out is not None else None)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)

    meta = {
        "script": "benchmarks/bench_attention.py (tilesparse.bench.attention)",
        "command": command if command is not None else " ".join(["python", *sys.argv]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "device": str(device),
        "device_name": _device_name(device),
        "capability": list(torch.cuda.get_device_capability(device)) if device.type == "cuda" else None,
        **_versions(),
        "grid": grid,
        "B": s.batch,
        "H": s.heads,
        "dtype": str(DTYPE).removeprefix("torch."),
        "causal": True,
        "head_dims": list(head_dims),
        "seqlens": list(seqlens),
        "patterns": {p: json.loads(PATTERNS[p].spec.model_dump_json()) for p in patterns},
        "long_row": {"T": LONG_T, "D": LONG_D, "pattern": LONG_PATTERN} if long_row else None,
        "modes": list(modes),
        "decide": decide,
        "flex": flex,
        "flex_patterns": list(s.flex_patterns),
        "flex_seqlens": list(s.flex_seqlens) if s.flex_seqlens else None,
        "flex_compiled": device.type == "cuda",
        "sparse_backend": sparse_backend,
        "triton_interpret": interpreting(),
        "validate": validate,
        "tile_config": {
            D: dataclasses.asdict(tile_config(D, DTYPE, device))
            for D in sorted({*head_dims, *([LONG_D] if long_row else [])})
        },
        "peak_memory": "max_memory_allocated over one call" if device.type == "cuda" else "cpu: not measured",
        "timing": {
            "method": "cuda events around each call after an L2 flush, median" if s.cuda else "perf_counter, median",
            "warmup_ms": warmup_ms,
            "rep_ms": rep_ms,
            "min_reps": min_reps,
            "cpu_reps": cpu_reps,
        },
        "seed": seed,
        "budget_s": budget_s,
        "doc": __doc__,
    }
    results: dict = {"meta": meta, "rows": []}
    rows = results["rows"]

    work: list[tuple[int, int, tuple[str, ...], bool]] = []
    if long_row:
        work.append((LONG_D, LONG_T, (LONG_PATTERN,), True))
    work += [(D, T, tuple(patterns), False) for D in head_dims for T in seqlens]
    total = sum(len(p) for _, _, p, _ in work)
    t_start = time.perf_counter()
    flex_masks: dict = {}
    console = Console(stderr=True, highlight=False)
    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, disable=not log,
    )  # fmt: skip

    _STATE["fatal"] = None

    def stop_reason() -> str | None:
        if _STATE["fatal"]:
            return f"not run: an earlier CUDA error poisoned the context ({_STATE['fatal'][:120]})"
        if budget_s is not None and time.perf_counter() - t_start > budget_s:
            return f"not run: the time budget of {budget_s} s was spent"
        return None

    with progress:
        task = progress.add_task("bench", total=total)
        for D, T, pats, long in work:
            row_modes = ("fwd_bwd",) if long else modes
            if why := stop_reason():
                for name in pats:
                    for mode in row_modes:
                        rows.append(make_row(name, D, T, mode, Record(skipped={"all": why}), s, long=long))
                    progress.advance(task)
                continue
            progress.update(task, description=f"D={D} T={T} sdpa")
            try:
                sdpa = run_sdpa(D, T, s, modes=row_modes, cudnn=not long)
            except Exception as e:  # noqa: BLE001 - e.g. out of memory making the inputs
                sdpa = {m: Record(errors={"sdpa": _message(e)}) for m in row_modes}
                _note_fatal(_message(e))
                _free(device, collect=True)
            _free(device)
            for name in pats:
                if why := stop_reason():
                    for mode in row_modes:
                        rec = Record(skipped={"all": why}).merged(sdpa[mode])
                        rows.append(make_row(name, D, T, mode, rec, s, long=long))
                    progress.advance(task)
                    continue
                progress.update(task, description=f"D={D} T={T} {name}")
                try:
                    common, per_mode = run_pattern(name, D, T, s, modes=row_modes, flex_masks=flex_masks, long=long)
                except Exception as e:  # noqa: BLE001
                    common, per_mode = Record(errors={"pattern": _message(e)}), {m: Record() for m in row_modes}
                    _note_fatal(_message(e))
                    _free(device, collect=True)
                for mode in row_modes:
                    rows.append(make_row(name, D, T, mode, common.merged(per_mode[mode], sdpa[mode]), s, long=long))
                meta["elapsed_s"] = round(time.perf_counter() - t_start, 1)
                if out is not None:
                    _write_json(results, out)
                if log:
                    progress.console.print(_log_line(rows[-1]))
                progress.advance(task)

    meta["elapsed_s"] = round(time.perf_counter() - t_start, 1)
    meta["stopped"] = next((r["skipped"]["all"] for r in rows if "all" in r["skipped"]), None)
    if png is not None:
        try:
            meta["png"] = str(plot(results, png))
        except Exception as e:  # noqa: BLE001
            meta["png_error"] = _message(e)
    if out is not None:
        meta["json"] = str(out)
        _write_json(results, out)
    return results


# ---------------------------------------------------------------------------------------------
# Reporting


def _fmt(x: float | None, digits: int = 3) -> str:
    if x is None:
        return "-"
    if x >= 100:
        return f"{x:.0f}"
    return f"{x:.{digits}g}"


def _log_line(row: dict) -> str:
    ms, sp = row["ms"], row["speedup"]
    ours = ms.get("ours")
    return (
        f"D={row['D']} T={row['T']} {row['pattern']} {row['mode']}: ours {_fmt(ours)} ms, "
        f"flash {_fmt(ms.get('sdpa_flash'))} ms, x{_fmt(sp.get('ours_vs_sdpa_flash'))}"
        + (f", {len(row['errors'])} errors" if row["errors"] else "")
    )


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def print_table(results: dict, console: Console | None = None) -> None:
    """The compact table of forward+backward rows (failed measurements listed first, the
    table last); other numbers (forward, speed-ups over Flex) are in the JSON."""
    console = console or Console(width=200, highlight=False)
    rows = [r for r in results["rows"] if r["mode"] == "fwd_bwd"]
    order = {p: i for i, p in enumerate(PATTERNS)}
    rows.sort(key=lambda r: (r["long"], r["D"], order.get(r["pattern"], 99), r["T"]))
    errors = [(r, n, m) for r in results["rows"] for n, m in r["errors"].items()]
    if errors:
        seen = set()
        console.print(f"{len(errors)} failed measurements (full messages in the JSON):")
        for r, n, m in errors:
            first = (m.splitlines() or [""])[0][:140]
            if (n, first[:80]) not in seen:
                seen.add((n, first[:80]))
                console.print(f"  D={r['D']} T={r['T']} {r['pattern']} {r['mode']} {n}: {first}")
    meta = results["meta"]
    if meta.get("stopped"):
        console.print(f"stopped early, later rows {meta['stopped']}")
    table = Table(
        title=f"fwd+bwd ms, {meta['device_name']}, B={meta['B']} H={meta['H']} {meta['dtype']} causal",
        caption="ours: decisions given; +dec: decided in the call; kern: attention kernels alone; prep: "
        "prepare() alone (wall), prepGPU: its kernels' GPU time; flex: block mask per call/prebuilt",
        box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1), collapse_padding=True,
    )  # fmt: skip
    for col in (
        "pattern", "D", "T", "ours", "+dec", "kern", "prep", "prepGPU", "flash", "cudnn", "flex", "x flash",
        "visit%", "ideal%", "MiB ours/flash",
    ):  # fmt: skip
        table.add_column(col, justify="left" if col == "pattern" else "right", no_wrap=True)
    for r in rows:
        ms, sp, pk = r["ms"], r["speedup"], r["peak_mib"]
        ours = "err" if "ours" in r["errors"] else _fmt(ms.get("ours"))
        if r["skipped"].get("all"):
            ours = "skipped"
        flex = "-" if not (ms.get("flex_percall") or ms.get("flex_prebuilt")) else (
            f"{_fmt(ms.get('flex_percall'))}/{_fmt(ms.get('flex_prebuilt'))}"
        )  # fmt: skip
        table.add_row(
            r["pattern"], str(r["D"]), str(r["T"]), ours, _fmt(ms.get("ours_incl")), _fmt(ms.get("kernels")),
            _fmt(ms.get("prep")), _fmt(ms.get("prep_gpu")),
            _fmt(ms.get("sdpa_flash")), _fmt(ms.get("sdpa_cudnn")), flex, _fmt(sp.get("ours_vs_sdpa_flash")),
            _pct(r.get("visited_fraction")), _pct(r.get("ideal_fraction")),
            f"{_fmt(pk.get('ours'), 5)}/{_fmt(pk.get('sdpa_flash'), 5)}",
        )  # fmt: skip
    with console.capture() as cap:
        console.print(table)
    # rich pads every line to the table's width; the device returns only the output's tail
    print("\n".join(line.rstrip() for line in cap.get().splitlines()))


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Time tilesparse against SDPA flash/cuDNN and FlexAttention (see the module docstring)."
    )
    parser.add_argument("--grid", choices=sorted(GRIDS), default="full", help="sizes, patterns (default: %(default)s)")
    parser.add_argument("--d", help="head dims, comma-separated (default: the grid's)")
    parser.add_argument("--t", help="sequence lengths, comma-separated (default: the grid's)")
    parser.add_argument("--patterns", help=f"comma-separated, from {','.join(PATTERNS)} (default: the grid's)")
    parser.add_argument("--b", type=int, help="batch (default: the grid's)")
    parser.add_argument("--h", type=int, help="heads (default: the grid's)")
    parser.add_argument(
        "--long", action=argparse.BooleanOptionalAction, default=None,
        help=f"the T={LONG_T} row ({LONG_PATTERN}, D={LONG_D}, fwd+bwd vs SDPA flash; default: full and targets)",
    )  # fmt: skip
    parser.add_argument("--modes", default=",".join(MODES), help="fwd, fwd_bwd or both (default: %(default)s)")
    parser.add_argument("--decide", choices=("both", "excluded", "included"), default="both")
    parser.add_argument(
        "--flex", choices=("all", "default", "none"), default="default",
        help=f"default: --flex-patterns at D={FLEX_DEFAULT_D} and --flex-t on CUDA",
    )  # fmt: skip
    parser.add_argument(
        "--flex-patterns", help=f"patterns Flex runs with --flex default (default: {','.join(FLEX_DEFAULT_PATTERNS)})"
    )
    parser.add_argument("--flex-t", help=f"T values Flex runs with --flex default (default: every T <= {FLEX_DEFAULT_MAX_T})")
    parser.add_argument("--out", help="JSON path (default: benchmarks/results/attention-<grid>-<date>.json)")
    parser.add_argument("--png", help="plot path (default: the JSON path with .png)")
    parser.add_argument("--warmup-ms", type=float, default=10.0)
    parser.add_argument("--rep-ms", type=float, default=40.0)
    parser.add_argument("--min-reps", type=int, default=5, help="timed calls at least (CUDA)")
    parser.add_argument("--cpu-reps", type=int, default=3, help="timed calls on the CPU")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--validate", action="store_true", help="compile with validate=True (a device sync per call)")
    parser.add_argument("--budget-s", type=float, default=520.0, help="start no new work after this (0: no limit)")
    parser.add_argument("--ideal-max-t", type=int, default=16384, help="largest T for the exact ideal fraction")
    parser.add_argument("--device", help="cuda, cuda:1 or cpu (default: cuda when available)")
    args = parser.parse_args(argv)

    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else RESULTS_DIR / f"attention-{args.grid}-{stamp}.json"
    results = run(
        args.grid, head_dims=args.d, seqlens=args.t, patterns=args.patterns, batch=args.b, heads=args.h,
        long_row=args.long, modes=args.modes, decide=args.decide, flex=args.flex, flex_patterns=args.flex_patterns,
        flex_seqlens=args.flex_t, out=out, png=args.png,
        warmup_ms=args.warmup_ms, rep_ms=args.rep_ms, min_reps=args.min_reps, cpu_reps=args.cpu_reps,
        seed=args.seed, validate=args.validate, budget_s=args.budget_s or None, ideal_max_t=args.ideal_max_t,
        device=args.device,
    )  # fmt: skip
    meta = results["meta"]
    print(f"json: {meta.get('json')}  png: {meta.get('png', meta.get('png_error'))}  ({meta['elapsed_s']} s)")
    sys.stdout.flush()
    print_table(results)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
