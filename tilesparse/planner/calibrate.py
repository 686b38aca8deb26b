"""Fit the cost model (``costs.json``) from benchmark JSON.

    python -m tilesparse.planner.calibrate benchmarks/results/*.json

reads every file it recognizes, fits one :class:`~tilesparse.planner.cost.BackendCost` per
measured backend and device type, adds the priors (``priors.json``) for what was never
measured, writes ``tilesparse/planner/costs.json`` (``--out`` elsewhere) and prints every
measured row next to the model's estimate. Two row formats are read:

- the benchmark engine's (``tilesparse.bench.attention``: ``rows`` with ``backend``, ``ms.ours``,
  ``ms.prep``, ``visited_tiles``); the ``ours`` time is the chosen backend's whole call;
- the planner check's (``tilesparse.bench.planner_check``: ``rows`` with ``ms`` per backend
  name and ``visited_fraction``), so a new backend (CuPy) is calibrated by timing it there.

The fit, per backend, device and mode: the host floor is the minimum time when at least three
rows, whose tile counts differ by 3x or more, lie within 20% of it (a host-bound plateau), else
the prior's; the prepare line is a least-squares line over the ``prep`` times against rows
(slope clamped at >= 0; only for backends that prepare); the attend line a least-squares line
over the device-bound rows (time above 1.2x the floor) of the call time minus the prepared
estimate against visited tiles (intercept clamped at >= 0). The index builders' lines come from
the features benchmark's ``index_build`` rows (``benchmarks/bench_features.py``): a
least-squares line of each build's ms against rows (slope clamped at >= 0). Files of other
formats (probe.py's) are skipped with a note.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from collections import defaultdict
from pathlib import Path

import torch

from .cost import COSTS_PATH, MODES, BackendCost, CostTable, Line, Shape, index_host_of

__all__ = ["INDEX_PATHS", "PRIORS", "calibrate", "index_points_of", "main", "points_of"]

# the features benchmark's index-build columns, by the builder name the cost table uses
INDEX_PATHS = {
    "torch_prepare(buckets given)": "torch",
    "triton_build(buckets given)": "triton",
    "cupy_build(buckets given)": "cupy",
    "cupy_lsh+build": "cupy+lsh",
    "triton_lsh+build": "triton+lsh",
    "lsh_criterion": "lsh",
}

# What no benchmark measured (priors.json): per device type and backend, the fields of a
# BackendCost, each entry's "source" saying why its numbers are what they are. On the CPU the
# reference is the only automatic candidate: the executor and the interpreted Triton kernels
# are models for tests, orders of magnitude slower, and have no entry.
PRIORS: dict[str, dict[str, dict]] = json.loads(Path(__file__).with_name("priors.json").read_text())
# and what an index builder's launches add to a call's host time beyond the Triton builder's
# (its "source" says how it was measured): copied into the table as measured, not fitted
INDEX_HOST: dict = PRIORS.pop("index_host", {})


def points_of(data: dict) -> list[dict]:
    """Measured points of one JSON file: dicts of device, backend, shape, fraction (of dense
    tiles visited by a tile-skipping kernel), ms (the call) and prep_ms (None when not
    measured)."""
    meta, rows = data.get("meta", {}), data.get("rows")
    if not isinstance(rows, list) or not rows:
        return []
    device = "cuda" if str(meta.get("device", "cuda")).startswith("cuda") else "cpu"
    dtype = getattr(torch, str(meta.get("dtype", "bfloat16")))
    causal = bool(meta.get("causal", True))
    out = []
    for r in rows:
        if not {"D", "T", "mode", "ms"} <= set(r):
            continue
        B, H = r.get("B", meta.get("B")), r.get("H", meta.get("H"))
        shape = Shape(B, H, r["T"], r["D"], dtype, r["mode"], causal)
        frac = float(r.get("visited_fraction") or 1.0)
        if "backend" in r and "ours" in r["ms"]:  # the benchmark engine: the chosen backend's call
            out.append(dict(device=device, backend=r["backend"], shape=shape, fraction=frac, ms=r["ms"]["ours"],
                            prep_ms=r["ms"].get("prep")))  # fmt: skip
        elif "visited_fraction" in r:  # the planner check: every candidate backend timed
            for name, ms in r["ms"].items():
                out.append(dict(device=device, backend=name, shape=shape, fraction=frac, ms=ms, prep_ms=None))
    return out


def index_points_of(data: dict) -> dict[str, list[tuple[float, float]]]:
    """(rows, ms) per index builder from a features benchmark's ``index_build`` rows (CUDA)."""
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in data.get("index_build", []) if isinstance(data.get("index_build"), list) else []:
        if not {"B", "H", "T"} <= set(r):
            continue
        rows = r["B"] * r["H"] * r["T"] / 1000
        for column, name in INDEX_PATHS.items():
            if "ms" in r.get(column, {}):
                out[name].append((rows, r[column]["ms"]))
    return dict(out)


def _lstsq(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line (``torch.linalg.lstsq``); one point:
    through the origin; every x equal: the mean, flat (lstsq would split it between the two)."""
    if len(xs) == 1:
        return 0.0, ys[0] / xs[0] if xs[0] else 0.0
    if min(xs) == max(xs):
        return sum(ys) / len(ys), 0.0
    x = torch.tensor(xs, dtype=torch.float64)
    a = torch.stack([torch.ones_like(x), x], dim=1)
    fit = torch.linalg.lstsq(a, torch.tensor(ys, dtype=torch.float64)[:, None], driver="gelsd").solution
    return float(fit[0, 0]), float(fit[1, 0])


def _slope_through_origin(xs: list[float], ys: list[float]) -> float:
    """The least-squares slope of the line through the origin (``torch.linalg.lstsq``)."""
    x, y = torch.tensor(xs, dtype=torch.float64)[:, None], torch.tensor(ys, dtype=torch.float64)[:, None]
    return float(torch.linalg.lstsq(x, y, driver="gelsd").solution[0, 0])


def _tiles(p: dict, skips: bool) -> float:
    return p["shape"].dense_units * (p["fraction"] if skips else 1.0)


def _fit_floor(pts: list[dict], prior: float, skips: bool) -> float:
    low = min(p["ms"] for p in pts)
    plateau = [p for p in pts if p["ms"] <= 1.2 * low]
    spread = max(_tiles(p, skips) for p in plateau) / max(min(_tiles(p, skips) for p in plateau), 1e-9)
    return low if len(plateau) >= 3 and spread >= 3 else prior


def fit_backend(pts: list[dict], prior: dict) -> BackendCost:
    """One backend's cost on one device from its points (all modes), over ``prior``."""
    base = BackendCost.from_dict(prior) if prior else None
    skips = base.skips_tiles if base else True  # a new backend is presumed to skip tiles
    stages: dict[str, dict[str, Line]] = {s: dict(m) for s, m in (base.stages if base else {}).items()}
    floor = dict(base.floor_ms) if base else {}
    # a backend whose prior has no prepare stage (sdpa) prepares nothing: its rows' prep times
    # are the IR's index building, which its call never runs
    preps = [p for p in pts if p["prep_ms"] is not None] if "prepare" in stages or not base else []
    if preps:
        a, b = _lstsq([p["shape"].row_units for p in preps], [p["prep_ms"] for p in preps])
        if b < 0:
            a, b = sorted(p["prep_ms"] for p in preps)[len(preps) // 2], 0.0
        stages["prepare"] = {"fwd": Line(a, b)}
    for mode in MODES:
        mine = [p for p in pts if p["shape"].mode == mode]
        if not mine:
            continue
        floor[mode] = _fit_floor(mine, floor.get(mode, 0.0), skips)
        bound = [p for p in mine if p["ms"] > 1.2 * floor[mode]] or mine
        prep = stages.get("prepare", {}).get("fwd")
        ys = [p["ms"] - (prep(p["shape"].row_units) if prep else 0.0) for p in bound]
        xs = [_tiles(p, skips) for p in bound]
        a, b = _lstsq(xs, ys)
        if a < 0:
            a, b = 0.0, _slope_through_origin(xs, ys)
        stages.setdefault("attend", {})[mode] = Line(a, b)
    return BackendCost(
        stages=stages,
        floor_ms=floor,
        skips_tiles=skips,
        dtype_factor=dict(base.dtype_factor) if base else {},
        source=f"measured: {len(pts)} rows (16-bit); " + (base.source if base else "no prior"),
    )


def calibrate(paths: list[Path], log=print) -> tuple[CostTable, list[dict]]:
    """The cost table from the files at ``paths`` plus :data:`PRIORS`, and the points used."""
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    index_pts: dict[str, list[tuple[float, float]]] = defaultdict(list)
    used = []
    for path in paths:
        data = json.loads(Path(path).read_text())
        pts, idx = points_of(data), index_points_of(data)
        if not pts and not idx:
            log(f"skipped {path}: no rows in a known format")
            continue
        used.append(str(path))
        for name, xy in idx.items():
            index_pts[name] += xy
        for p in pts:
            # only 16-bit rows calibrate; the dtype factors carry the rest
            if p["shape"].dtype in (torch.float16, torch.bfloat16):
                groups[(p["device"], p["backend"])].append(p)
    devices = {d: {n: BackendCost.from_dict(e) for n, e in es.items()} for d, es in PRIORS.items()}
    for (dev, name), pts in sorted(groups.items()):
        devices.setdefault(dev, {})[name] = fit_backend(pts, PRIORS.get(dev, {}).get(name, {}))
    meta = {
        "command": "python -m tilesparse.planner.calibrate " + " ".join(used),
        "sources": used,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "unit": "tiles: 128x64 tiles at D=64 over B x Hg (visited ones for skips_tiles); rows: B x Hg x T / 1000",
        "stages": "[fixed ms, us per unit]",
    }
    index = {}
    for name, xy in sorted(index_pts.items()):
        a, b = _lstsq([x for x, _ in xy], [y for _, y in xy])
        if b < 0:
            a, b = sorted(y for _, y in xy)[len(xy) // 2], 0.0
        index[name] = Line(a, b)
    points = [p for pts in groups.values() for p in pts]
    return CostTable(devices, meta, {"cuda": index} if index else {}, *index_host_of(INDEX_HOST)), points


def report(table: CostTable, points: list[dict]) -> list[str]:
    """Every measured point against the fitted model, worst relative error last."""
    lines, worst = [], 0.0
    for p in sorted(points, key=lambda p: (p["backend"], p["shape"].mode, p["shape"].seqlen, p["fraction"])):
        s, frac = p["shape"], p["fraction"]
        est = table.entry(p["device"], p["backend"]).ms(s, frac)
        err = est / p["ms"] - 1
        worst = max(worst, abs(err))
        lines.append(f"{p['backend']:>10} {s.mode:>7} T={s.seqlen:>6} D={s.head_dim:>3} visited {100 * frac:5.1f}%  "
                     f"measured {p['ms']:8.3f} ms  model {est:8.3f} ms  ({100 * err:+.0f}%)")  # fmt: skip
    lines.append(f"worst relative error: {100 * worst:.0f}%")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tilesparse.planner.calibrate", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("files", nargs="+", type=Path, help="benchmark or planner-check JSON files")
    parser.add_argument("--out", type=Path, default=COSTS_PATH, help="where to write (default: the shipped costs.json)")
    args = parser.parse_args(argv)
    table, points = calibrate(args.files)
    for line in report(table, points):
        print(line)
    args.out.write_text(json.dumps(table.to_dict(), indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

