"""benchmarks/bench_decode.py runs on the CPU at tiny sizes (a smoke test of the script: the
rows, the bytes accounting and the JSON; no timing is read)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_decode.py"


def test_decode_benchmark_writes_its_rows(tmp_path):
    spec = importlib.util.spec_from_file_location("bench_decode", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    args = ["--out", str(tmp_path), "--device", "cpu", "--contexts", "64", "--batch", "1", "--heads", "2",
            "--kv-heads", "2", "--head-dim", "16", "--no-prefill"]  # fmt: skip
    assert mod.main(args) == 0
    rows = json.loads((tmp_path / "bench_decode.json").read_text())["decode"]
    assert [r["pattern"] for r in rows] == list(mod.PATTERNS)
    for r in rows:
        assert "error" not in r and r["step_ms"] > 0
        assert r["keys_cached"] == 2 * 65 and 0 <= r["keys_read"] <= r["keys_cached"]
        assert r["bytes_ideal"] <= r["bytes_read"]
    hash_row = rows[0]
    assert hash_row["keys_read"] < hash_row["keys_cached"]  # one bucket of 16
    assert (tmp_path / "bench_decode.png").stat().st_size > 0
