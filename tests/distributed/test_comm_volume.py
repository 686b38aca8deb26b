"""The communication-volume table of docs/sequence_parallel.md is what benchmarks/comm_volume.py
prints, and its Ulysses formula counts the two exchanges (q, k, v in, the output back) and their
backward, kv copies included (arithmetic only, CPU)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_doc_table_is_the_scripts_output(capsys):
    _load("comm_volume").main()
    printed = capsys.readouterr().out.strip().splitlines()
    doc = (ROOT / "docs" / "sequence_parallel.md").read_text()
    assert len(printed) == 11
    for line in printed:
        assert line in doc, line


def test_built_row_is_two_exchanges_of_q_k_v_and_the_output():
    cv = _load("comm_volume")
    # P=8, H=32, Hkv=8: each rank sends 7/8 of its shard's q (32 heads), k and v (8 each) and
    # output (32) in the forward, and as much in the backward
    s = cv.T // 8
    assert cv.ulysses(8) == 2 * 7 / 8 * s * 256 * (32 + 16 + 32)
    # Hkv < P: kv heads copied (c = 4 at P = 32, G = 4)
    assert cv.ulysses(32) == 2 * 31 / 32 * (cv.T // 32) * 256 * (32 + 2 * 4 * 8 + 32)
