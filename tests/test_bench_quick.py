"""The benchmark script end to end on the CPU, at the quick grid's tiny sizes.

Two runs of ``benchmarks/bench_attention.py`` (about 30 s together on a loaded two-core CPU): the whole quick
grid on the reference backend (TRITON_INTERPRET unset), and the hybrid pattern through the Triton
kernels in the interpreter with FlexAttention's forward on, whose output the script checks
against ours. They check the JSON's rows and numbers and that the plot was written; the CUDA
paths (events, peak memory, forced SDPA backends, compiled Flex, its backward) run only on a GPU.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_attention.py"
QUICK_PATTERNS = ("dense", "keep0.7", "keep0.5", "keep0.3", "hash8", "hash16", "hash64", "hybrid")
MODES = ("fwd", "fwd_bwd")


def _run(tmp_path: Path, *args: str, interpret: bool) -> dict:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    out = tmp_path / "results.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--grid", "quick", "--cpu-reps", "1", "--out", str(out), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "pattern" in proc.stdout  # the table comes last
    assert out.with_suffix(".png").is_file()
    assert out.with_suffix(".png").stat().st_size > 0
    return json.loads(out.read_text())


def _check_rows(results: dict, patterns, seqlens, *, backend: str, heads: int = 2) -> None:
    rows = {(r["pattern"], r["T"], r["mode"]): r for r in results["rows"]}
    assert set(rows) == {(p, t, m) for p in patterns for t in seqlens for m in MODES}
    for (pattern, _, _), r in rows.items():
        assert r["errors"] == {}, r["errors"]
        assert (r["D"], r["B"], r["H"]) == (32, 1, heads)
        assert r["backend"] == ("reference" if pattern == "dense" else backend)
        for name in ("ours", "ours_incl", "prep", "sdpa_flash"):
            assert r["ms"][name] > 0, name
        assert r["speedup"]["ours_vs_sdpa_flash"] > 0
        assert 0 < r["visited_fraction"] <= 1
        assert 0 < r["ideal_fraction"] <= r["ideal_slice_visited_fraction"] <= 1
        assert r["ideal_missed_tiles"] == 0
        assert "sdpa_cudnn" in r["skipped"]


def test_quick_grid_reference(tmp_path):
    results = _run(tmp_path, interpret=False)
    meta = results["meta"]
    assert meta["device"] == "cpu" and meta["grid"] == "quick" and meta["dtype"] == "bfloat16"
    assert meta["sparse_backend"] == "reference" and meta["long_row"] is None
    _check_rows(results, QUICK_PATTERNS, (256, 512), backend="reference")
    for r in results["rows"]:
        assert r["ms"]["decide"] > 0 if r["pattern"] != "dense" else "decide" not in r["ms"]
        assert "flex" in r["skipped"]  # skipped by default on the CPU


@pytest.mark.parametrize("patterns", [("hybrid",)])
def test_quick_triton_interpreter_with_flex(tmp_path, patterns):
    # the interpreter costs ~10 ms per program and tile: one head, four query blocks
    args = ("--patterns", ",".join(patterns), "--t", "128", "--h", "1", "--flex", "all")
    results = _run(tmp_path, *args, interpret=True)
    assert results["meta"]["sparse_backend"] == "triton"
    _check_rows(results, patterns, (128,), backend="triton", heads=1)
    for r in results["rows"]:
        assert r["flex_check"]["ok"], r["flex_check"]
        if r["mode"] == "fwd":
            assert r["ms"]["flex_prebuilt"] > 0 and r["ms"]["flex_percall"] > 0
            assert r["speedup"]["ours_vs_flex_prebuilt"] > 0
        else:
            assert "flex_prebuilt" in r["skipped"]  # no Flex backward on the CPU


def test_a_forward_only_run_prints_its_rows(capsys):
    """``--modes fwd``: the table of forward rows is printed (not an empty fwd+bwd table)."""
    from tilesparse.bench.table import print_table

    row = {"pattern": "hash16", "D": 32, "T": 256, "mode": "fwd", "long": False, "ms": {"ours": 1.5, "sdpa_flash": 3.0},
           "speedup": {"ours_vs_sdpa_flash": 2.0}, "peak_mib": {}, "errors": {}, "skipped": {},
           "visited_fraction": 0.25, "ideal_fraction": None}  # fmt: skip
    meta = {"device_name": "cpu", "B": 1, "H": 2, "dtype": "bfloat16"}
    print_table({"meta": meta, "rows": [row]})
    out = capsys.readouterr().out
    assert "fwd ms" in out and "fwd+bwd ms" not in out
    assert "hash16" in out and "1.5" in out and "25.0" in out


def test_synchronized_timing_calls_the_function_its_budget_allows_and_takes_the_median(monkeypatch):
    """Every row's second time (``sync_ms``, CUDA only): calls each followed by a synchronize,
    5 to 40 of them by the estimate, their median."""
    import torch

    from tilesparse.bench import timing

    syncs, calls, waits = [], [], iter([0.0, 3.0, 10.0, 13.0, 20.0, 21.0, 30.0, 39.0, 40.0, 41.0] * 4 + [0.0] * 80)
    monkeypatch.setattr(timing, "sync", lambda device: syncs.append(device))
    monkeypatch.setattr(timing.time, "perf_counter", lambda: next(waits) / 1e3)
    cpu = torch.device("cpu")
    assert timing.synchronized_ms(lambda: calls.append(1), cpu, estimate_ms=80.0) == pytest.approx(3.0)  # 3, 3, 1, 9, 1 ms
    assert len(calls) == len(syncs) == 5
    calls.clear()
    timing.synchronized_ms(lambda: calls.append(1), cpu, estimate_ms=0.001)
    assert len(calls) == 40


def test_cpu_timing_reports_the_median_and_the_20th_and_80th_percentiles():
    from tilesparse.bench.timing import summarize

    assert summarize([5.0, 1.0, 3.0, 2.0, 4.0]) == (3.0, [1.8, 4.2, 5])
    assert summarize([2.0]) == (2.0, [2.0, 2.0, 1])
