"""The cost model and its calibration: the shipped table is what the documented command makes
from the shipped benchmark JSON, it reproduces the measured H200 rows, it makes the choices the
planner's rules need on every row of the benchmark grid, and the visited-fraction prior
matches the measured fractions. CPU only (the GPU rows are data)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

import tilesparse as ts
from tilesparse.ir import lower
from tilesparse.planner import CostTable, default_costs, estimate_visited
from tilesparse.planner.calibrate import calibrate, main, points_of, report
from tilesparse.planner.cost import COSTS_PATH, Shape, dense_tiles

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "results" / "bench_targets_run128_h200.json"
GRID_T = (4096, 8192, 16384, 32768, 65536)


def test_the_shipped_table_is_the_calibration_of_the_shipped_results():
    shipped = json.loads(COSTS_PATH.read_text())
    sources = [ROOT / p for p in shipped["meta"]["sources"]]
    assert BENCH in sources and all(p.is_file() for p in sources), "costs.json names its (committed) sources"
    table, _ = calibrate(sources, log=lambda _: None)
    assert json.loads(json.dumps(table.to_dict()))["devices"] == shipped["devices"], (
        "costs.json is stale: run python -m tilesparse.planner.calibrate benchmarks/results/*.json"
    )
    assert table.to_dict().get("index_host") == shipped.get("index_host"), "costs.json's index_host is priors.json's"
    assert shipped["meta"]["command"].startswith("python -m tilesparse.planner.calibrate")


def test_the_model_reproduces_the_measured_rows():
    """The shipped model against the target grid it was fitted from: forward+backward rows of
    2 ms or more within 20%; forward rows and shorter forward+backward ones, host bound at these
    sizes, within 50% (their run-to-run spread on the H200 reaches 2x: QKDrop(0.3) at 16k took
    0.93 ms forward in bench_full_d64_h200.json and 0.42 ms in bench_targets_h200.json, and
    1.46 ms forward+backward in bench_targets_run122_h200.json against 1.98 ms in run 128's)."""
    points = points_of(json.loads(BENCH.read_text()))
    assert len(points) == 25
    lines = report(default_costs(), points)
    checked = 0
    for line in lines[:-1]:
        m = re.search(r"\s(fwd|fwd_bwd) T=.*measured\s+([\d.]+) ms.*\(([+-]\d+)%\)", line)
        if m:
            checked += 1
            limit = 20 if m.group(1) == "fwd_bwd" and float(m.group(2)) >= 2.0 else 50
            assert abs(int(m.group(3))) <= limit, "\n".join(lines)
    assert checked == len(points)


def _ms(backend: str, shape: Shape, fraction: float = 1.0) -> float:
    return default_costs().entry("cuda", backend).ms(shape, fraction)


@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
def test_on_the_grid_dense_goes_to_sdpa_and_sparse_to_triton(D, mode):
    for T in GRID_T:
        shape = Shape(2, 12, T, D, torch.bfloat16, mode)
        assert _ms("sdpa", shape) < min(_ms("triton", shape), _ms("reference", shape)), T
        for spec in (ts.QKDrop(keep=0.7), ts.Hash(buckets=8), ts.Hybrid(parts=[ts.Hash(buckets=16), ts.QKDrop(keep=0.7)])):
            f = estimate_visited(lower(spec, causal=True).groups[0], T)
            assert _ms("triton", shape, f) < _ms("reference", shape), (T, spec)


def test_sparse_beats_dense_below_a_visited_fraction_of_about_two_thirds():
    shape = Shape(2, 12, 16384, 64, torch.bfloat16, "fwd_bwd")
    dense = _ms("sdpa", shape)
    crossing = next(f / 100 for f in range(1, 101) if _ms("triton", shape, f / 100) > dense)
    assert 0.5 < crossing < 0.85
    # a tiny call: sdpa's host cost is far below Triton's, whatever the fraction
    assert _ms("sdpa", Shape(1, 2, 256, 64, torch.bfloat16, "fwd")) < _ms("triton", Shape(1, 2, 256, 64, torch.bfloat16, "fwd"), 0.01)


def test_the_cpu_has_the_reference_alone():
    assert set(default_costs().devices["cpu"]) == {"reference"}


@pytest.mark.parametrize(
    ("spec", "T", "measured"),
    [
        (ts.Hash(buckets=16), 16384, 0.0878),
        (ts.Hash(buckets=16), 32768, 0.0772),
        (ts.Hash(buckets=16), 131072, 0.0688),
        (ts.Hybrid(parts=[ts.Hash(buckets=16), ts.QKDrop(keep=0.7)]), 16384, 0.0479),
        (ts.QKDrop(keep=0.5), 16384, 0.2573),
        (ts.QKDrop(keep=0.3), 32768, 0.0929),
        (ts.QKDrop(keep=0.7), 32768, 0.4953),
        (ts.Dense(), 4096, 1.0),
    ],
    ids=str,
)
def test_the_visited_prior_matches_the_h200_rows(spec, T, measured):
    assert estimate_visited(lower(spec, causal=True).groups[0], T) == pytest.approx(measured, rel=0.06)


def test_dense_tiles_count_the_causal_triangle():
    assert dense_tiles(16384, True) * 24 == 396288  # the benchmark's dense_tiles at B=2, H=12
    assert dense_tiles(100, False) == 1 * 2  # one 128-row block, two 64-wide tiles
    assert dense_tiles(1, True) == 1


def test_a_new_backend_is_calibrated_from_planner_check_rows(tmp_path):
    def units(T):
        return Shape(1, 4, T, 64, torch.bfloat16, "fwd").dense_units

    # cupy: 0.2 ms + 1 us a visited unit tile; sdpa: 0.05 ms + 0.5 us a dense one
    rows = [
        {"T": T, "D": 64, "B": 1, "H": 4, "mode": "fwd", "visited_fraction": 0.1,
         "ms": {"cupy": 0.2 + 0.001 * 0.1 * units(T), "sdpa": 0.05 + 0.0005 * units(T)}}
        for T in (4096, 8192, 16384)
    ]  # fmt: skip
    path = tmp_path / "check.json"
    path.write_text(json.dumps({"meta": {"device": "cuda:0", "dtype": "bfloat16", "causal": True}, "rows": rows}))
    out = tmp_path / "costs.json"
    assert main([str(path), "--out", str(out)]) == 0
    table = CostTable.load(out)
    cupy = table.entry("cuda", "cupy")
    assert cupy is not None and cupy.skips_tiles and "measured: 3 rows" in cupy.source
    shape = Shape(1, 4, 8192, 64, torch.bfloat16, "fwd")
    assert cupy.ms(shape, 0.1) == pytest.approx(0.2 + 0.001 * 0.1 * shape.dense_units, rel=1e-3)
    assert table.entry("cuda", "sdpa").ms(shape, 0.1) == pytest.approx(0.05 + 0.0005 * shape.dense_units, rel=1e-3)
    assert table.entry("cuda", "triton") is not None, "priors stay for what was not measured"


@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("mode", ["fwd", "fwd_bwd"])
def test_topk_features_price_the_cupy_path_above_triton(D, mode):
    """Path 2 (CuPy feature intersection) lost to path 1 (Triton dense tiles) on every measured
    row (bench_features_h200.json): the table must price it higher at every size, so auto picks
    path 1; backend="cupy" still forces path 2."""
    for T in GRID_T:
        shape = Shape(1, 4, T, D, torch.bfloat16, mode)
        for fraction in (1.0, 0.3, 0.05):
            assert _ms("cupy", shape, fraction) > _ms("triton", shape, fraction), (T, fraction)
