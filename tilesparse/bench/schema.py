"""The results schema: what one measurement records (:class:`Record`), the run's settings
(:class:`Settings`), and one JSON row of (D, T, pattern, mode) (:func:`make_row`).

A results file is ``{"meta": {...}, "rows": [make_row(...), ...]}``; ``tilesparse.bench.plot``,
the planner's calibration and the tests read it.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

import torch

from .grid import FLEX_DEFAULT_PATTERNS, PATTERNS

__all__ = ["FATAL", "Failures", "Record", "Settings", "make_row"]

# a CUDA error that poisons the context: every later call would fail, so the run stops
FATAL = ("illegal memory access", "device-side assert", "unspecified launch failure", "illegal instruction")


@dataclass
class Record:
    """What was measured for one (D, T, pattern) or (D, T, pattern, mode), by measurement name."""

    ms: dict[str, float] = field(default_factory=dict)  # back to back
    sync_ms: dict[str, float] = field(default_factory=dict)  # synchronized after every call
    spread: dict[str, list] = field(default_factory=dict)  # [p20 ms, p80 ms, timed calls or None]
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


@dataclass
class Failures:
    """The first failure of a run that poisoned the CUDA context (after it, nothing runs)."""

    fatal: str | None = None

    def note(self, message: str) -> None:
        if self.fatal is None and any(f in message for f in FATAL):
            self.fatal = message


@dataclass(frozen=True)
class Settings:
    """One run's settings (the command line's options, resolved), and its failure log."""

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
    cuda_graphs: bool = False  # ours compiled with cuda_graphs=True: its calls replayed
    flex_patterns: tuple[str, ...] = FLEX_DEFAULT_PATTERNS
    flex_seqlens: tuple[int, ...] | None = None  # None: T <= FLEX_DEFAULT_MAX_T
    failures: Failures = field(default_factory=Failures, compare=False)

    @property
    def cuda(self) -> bool:
        return self.device.type == "cuda"


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
        "sync_ms": rec.sync_ms,
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
