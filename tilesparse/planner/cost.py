"""The cost model: estimated milliseconds of one call per backend, device and mode.

Per backend (and device type) the model has a line per stage and mode (``fwd``, or ``fwd_bwd``
when gradients are needed) and a host floor::

    ms = max(floor_ms, prepare.fixed_ms + prepare.per_unit_ms * rows
                       + attend.fixed_ms + attend.per_unit_ms * tiles) * dtype_factor

and a plan of several calls (head groups) costs max(sum of floors, sum of work): host work
and device work overlap.

``tiles`` counts work in one unit for every backend: 128 x 64 tiles of D = 64 (a tile of
D = 128 counts twice), over every (batch, head) of the group; a tile-skipping backend
(``skips_tiles``) pays only the visited fraction of the dense (causal) tiles, a dense one pays
them all. ``rows`` is B x Hg x T / 1000 (the layout and ranges stages are O(T)). The floor is
the host time of a call (Python, launches): below it a call is host bound, which is why a
16,384-token sparse call costs ~1 ms on the H200 whatever its sparsity.

The numbers are fitted from benchmark JSON (``python -m tilesparse.planner.calibrate``,
which writes ``costs.json`` next to this file); backends or devices without measurements
carry priors that say so (``source``). A backend with no entry for a device is not an
automatic candidate there.

Index builders (``tilesparse.backends.BUILDERS``: the layout and ranges stages, and LSH
hashing fused into them) are priced apart from attention, with their own lines per device,
``index``: milliseconds of a build against rows, named by builder (``triton``, ``cupy``,
``torch``), ``cupy+lsh`` for the CuPy build hashing in its first launch and ``lsh`` for the
op's ``lsh`` hashing alone (CuPy's one launch where it hashes, else the criterion's torch ops). They are fitted from the features benchmark's
index rows (D = 128): each build timed alone, so a line holds its host time or its GPU time,
whichever is longer. ``index_host`` adds what a builder's launches cost the host beyond the
Triton builder's, whose launches the fitted floors already hold (CuPy's kernel arguments go
through CuPy's launch path: measured from whole calls, interleaved). The planner prices each
builder at its line plus that host time, and moves the host time into the call's floor.

:func:`estimate_visited` is the planner's prior for the visited fraction before any decision
exists; explain() shows it next to the fraction observed on real decisions.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..ir import HeadGroup, Keep, SameBucket

__all__ = [
    "COSTS_PATH",
    "MODES",
    "BackendCost",
    "CostTable",
    "Line",
    "Shape",
    "default_costs",
    "dense_tiles",
    "estimate_visited",
]

COSTS_PATH = Path(__file__).with_name("costs.json")
MODES = ("fwd", "fwd_bwd")
TILE_Q, TILE_K, TILE_D = 128, 64, 64  # the unit tile
# how far a segment's visited region overhangs its kept elements, in tile edges (fitted on the
# H200 rows: Hash(16) and QKDrop at 16k-131k tokens, within 6% of the measured fraction)
EDGE = 1.08


@dataclass(frozen=True)
class Shape:
    """What a group's price depends on: sizes, dtype, and whether gradients are needed."""

    batch: int
    heads: int  # the group's query heads
    seqlen: int
    head_dim: int
    dtype: torch.dtype
    mode: str  # "fwd" or "fwd_bwd"
    causal: bool = True

    @property
    def dense_units(self) -> float:
        """Dense (causal) work of the group in unit tiles."""
        return self.batch * self.heads * dense_tiles(self.seqlen, self.causal) * self.head_dim / TILE_D

    @property
    def row_units(self) -> float:
        return self.batch * self.heads * self.seqlen / 1000


def dense_tiles(seqlen: int, causal: bool, block_q: int = TILE_Q, block_k: int = TILE_K) -> int:
    """Tiles of one head's dense attention: the causal triangle's (diagonal included), or all."""
    nq, nk = -(-seqlen // block_q), -(-seqlen // block_k)
    if not causal:
        return nq * nk
    return sum(min(nk, -(-min(seqlen, (m + 1) * block_q) // block_k)) for m in range(nq))


def estimate_visited(group: HeadGroup, seqlen: int, block_q: int = 128, block_k: int = 128) -> float:
    """Expected fraction of the dense (causal) tiles a tile-skipping kernel visits.

    Kept tokens (``keep`` of them) sorted into ``b`` equal buckets: the kept elements cover
    keep^2 / b of the dense area, and every bucket segment overhangs its elements by about one
    tile edge on each side, 2 * EDGE * keep * (block_q + block_k / 2) / T with causality (the
    triangle's area is half the square's); the forward kernel's key tiles are ``block_k / 2``
    wide. A group without keep or bucket predicates is 1.
    """
    keep = group.keep if group.has(Keep) else 1.0
    b = group.buckets if group.has(SameBucket) else 1
    edge = EDGE * keep * (block_q + block_k / 2) / max(seqlen, 1)
    core = keep * keep / b
    frac = core + (2 * edge if group.causal is not None else edge)
    return min(1.0, frac) if (group.has(Keep) or group.has(SameBucket)) else 1.0


@dataclass(frozen=True)
class Line:
    """fixed_ms + per_unit_ms * units."""

    fixed_ms: float
    per_unit_ms: float

    def __call__(self, units: float) -> float:
        return self.fixed_ms + self.per_unit_ms * units


@dataclass(frozen=True)
class BackendCost:
    """One backend's model on one device type (see the module docstring)."""

    stages: dict[str, dict[str, Line]]  # "prepare" / "attend" -> mode -> line
    floor_ms: dict[str, float]
    skips_tiles: bool
    dtype_factor: dict[str, float]
    source: str

    def ms(self, shape: Shape, fraction: float) -> float:
        """Estimated milliseconds of one call of the group at ``fraction`` of tiles visited."""
        floor, work = self.split(shape, fraction)
        return max(floor, work)

    def split(self, shape: Shape, fraction: float) -> tuple[float, float]:
        """(host floor, stage work) in ms: a plan of several calls costs the larger of their
        floors' sum and their work's sum (host and device overlap)."""
        tiles = shape.dense_units * (fraction if self.skips_tiles else 1.0)
        work = 0.0
        for stage, lines in self.stages.items():
            line = lines.get(shape.mode) or lines["fwd"]
            work += line(shape.row_units if stage == "prepare" else tiles)
        factor = self.dtype_factor.get(str(shape.dtype).removeprefix("torch."), 1.0)
        return self.floor_ms.get(shape.mode, 0.0), work * factor

    @staticmethod
    def from_dict(d: dict) -> BackendCost:
        stages = {
            s: {m: Line(float(v[0]), float(v[1]) / 1000) for m, v in modes.items()} for s, modes in d["stages"].items()
        }
        return BackendCost(
            stages=stages,
            floor_ms={m: float(v) for m, v in d.get("floor_ms", {}).items()},
            skips_tiles=bool(d.get("skips_tiles", False)),
            dtype_factor={k: float(v) for k, v in d.get("dtype_factor", {}).items()},
            source=str(d.get("source", "")),
        )

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "skips_tiles": self.skips_tiles,
            "floor_ms": {m: _round(v) for m, v in self.floor_ms.items()},
            "dtype_factor": self.dtype_factor,
            # [fixed ms, us per unit]: microseconds keep the JSON readable
            "stages": {
                s: {m: [_round(li.fixed_ms), _round(li.per_unit_ms * 1000)] for m, li in modes.items()}
                for s, modes in self.stages.items()
            },
        }


@dataclass(frozen=True)
class CostTable:
    """Backend costs per device type; ``meta`` says where the numbers came from."""

    devices: dict[str, dict[str, BackendCost]]
    meta: dict
    index: dict[str, dict[str, Line]] = field(default_factory=dict)  # device -> builder -> line over rows
    # device -> builder -> host ms one build adds beyond the Triton builder's (in the floors)
    index_host: dict[str, dict[str, float]] = field(default_factory=dict)
    index_host_source: str = ""  # the measurement behind index_host

    def entry(self, device_type: str, backend: str) -> BackendCost | None:
        return self.devices.get(device_type, {}).get(backend)

    def index_line(self, device_type: str, builder: str) -> Line | None:
        """ms of an index build by ``builder`` against rows (B x Hg x T / 1000), if measured."""
        return self.index.get(device_type, {}).get(builder)

    def index_host_ms(self, device_type: str, builder: str) -> float:
        """Host ms one build by ``builder`` adds to a call beyond the Triton builder's (whose
        launches are part of the fitted floors); 0 where not measured."""
        return self.index_host.get(device_type, {}).get(builder, 0.0)

    @staticmethod
    def from_dict(d: dict) -> CostTable:
        devices = {
            dev: {n: BackendCost.from_dict(e) for n, e in entries.items()} for dev, entries in d["devices"].items()
        }
        index = {
            dev: {n: Line(float(v[0]), float(v[1]) / 1000) for n, v in lines.items()}
            for dev, lines in d.get("index", {}).items()
        }
        return CostTable(devices, dict(d.get("meta", {})), index, *index_host_of(d.get("index_host", {})))

    def to_dict(self) -> dict:
        out = {
            "meta": self.meta,
            "devices": {dev: {n: e.to_dict() for n, e in entries.items()} for dev, entries in self.devices.items()},
        }
        if self.index:
            out["index"] = {
                dev: {n: [_round(li.fixed_ms), _round(li.per_unit_ms * 1000)] for n, li in lines.items()}
                for dev, lines in self.index.items()
            }
        if self.index_host:
            out["index_host"] = {"source": self.index_host_source, **self.index_host}
        return out

    @staticmethod
    def load(path: str | Path = COSTS_PATH) -> CostTable:
        return CostTable.from_dict(json.loads(Path(path).read_text()))


def index_host_of(raw: dict) -> tuple[dict[str, dict[str, float]], str]:
    """``index_host`` as costs.json and priors.json write it, ``{"source": ..., device:
    {builder: ms}}``: (device -> builder -> ms, the source)."""
    host = {dev: {n: float(v) for n, v in per.items()} for dev, per in raw.items() if dev != "source"}
    return host, str(raw.get("source", ""))


@functools.lru_cache(maxsize=1)
def default_costs() -> CostTable:
    """The shipped table (``costs.json``), read once."""
    return CostTable.load()


def _round(x: float) -> float:
    return float(f"{x:.4g}") if math.isfinite(x) else x
