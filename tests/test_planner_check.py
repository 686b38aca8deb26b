"""The planner check (tilesparse.bench.planner_check) on the CPU: offline over the shipped H200
results (every row's choice is the fastest measured exact option), and one timed row per kind
at tiny sizes, whose JSON the calibration reads back. The GPU run is the lead's (see the
module docstring)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

import tilesparse as ts
from tilesparse.bench.planner_check import check_results, main, time_row
from tilesparse.planner.calibrate import points_of

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "results" / "bench_targets_run128_h200.json"


def test_offline_every_h200_row_picks_the_fastest_measured_option(tmp_path):
    lines = []
    rows = check_results(BENCH, log=lines.append)
    assert len(rows) == 25 and all(r["ok"] for r in rows), "\n".join(lines)
    assert {r["chosen"] for r in rows if r["pattern"] == "dense"} == {"sdpa"}
    assert {r["chosen"] for r in rows if r["pattern"] != "dense"} == {"triton"}
    out = tmp_path / "check.json"
    assert main(["--from-results", str(BENCH), "--out", str(out)]) == 0
    assert len(json.loads(out.read_text())["rows"]) == 25


def test_a_timed_row_compares_every_backend_with_the_automatic_plan():
    dense = time_row(ts.Dense(), 1, 2, 64, 16, "fwd_bwd", torch.device("cpu"), reps=1, reference_max_gib=1.0)
    assert set(dense["ms"]) == {"reference", "executor", "sdpa", "triton"}
    assert dense["auto"]["backends"] == ["reference"] and dense["visited_fraction"] == 1.0
    assert dense["best"] in dense["ms"] and isinstance(dense["ok"], bool)
    sparse = time_row(ts.Hash(buckets=4), 1, 2, 64, 16, "fwd", torch.device("cpu"), reps=1, reference_max_gib=0.0)
    assert "sdpa" not in sparse["ms"] and "layout sort is not identity" in sparse["skipped"]["sdpa"]
    assert "exceed 0.0 GiB" in sparse["skipped"]["reference"]
    data = {"meta": {"device": "cpu", "dtype": "float32", "causal": True}, "rows": [dense, sparse]}
    points = points_of(data)
    assert {p["backend"] for p in points} == {"reference", "executor", "sdpa", "triton"}


def test_a_gqa_row_is_timed_and_its_json_checked_offline(tmp_path):
    row = time_row(ts.Hash(buckets=4), 1, 4, 64, 16, "fwd", torch.device("cpu"), reps=1, reference_max_gib=1.0,
                   kv_heads=2)  # fmt: skip
    assert row["Hkv"] == 2 and "triton" in row["ms"] and "sdpa" not in row["ms"]
    path = tmp_path / "check.json"
    path.write_text(json.dumps({"meta": {"device": "cuda", "dtype": "bfloat16", "causal": True}, "rows": [row]}))
    (checked,) = check_results(path, log=lambda line: None)
    # every capable backend was measured, so the model's pick has a time to be judged by
    assert checked["measured"] == row["ms"] and checked["chosen_ms"] is not None
    assert checked["ok"] == (checked["chosen_ms"] <= 1.1 * min(row["ms"].values()))
