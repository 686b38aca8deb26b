"""The README's promises, checked as a new user would meet them (CPU).

Every ```python block of README.md runs as written, each in a fresh interpreter (criteria
register globally, so blocks must not share a process); the usage example stays within 15
lines; the commands it names exist: ``make demo`` / ``make test`` in the Makefile, and
``python -m tilesparse demo`` and ``explain`` succeed and print what they promise. The demo's
exit status is also checked the other way: a planted wrong op, or a forced backend that cannot
run a pattern, must make it fail.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tilesparse.backends.executor import ExecutorBackend
from tilesparse.cli import main
from tilesparse.cli.demo import PATTERNS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"^```python\n(.*?)^```", README, flags=re.M | re.S)


def run_python(*args: str) -> subprocess.CompletedProcess:
    """``python *args`` from the repository root, as CI runs things (Triton interpreted)."""
    # one thread: the tensors are small, and under load OpenMP threads that spin cost more than they give
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)  # scripts import this checkout
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def test_readme_has_its_python_blocks():
    # usage, a criterion, a property test
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_python_block_runs(block: str):
    if block.startswith("# needs: pip install 'tilesparse[transformers]'"):
        pytest.importorskip("transformers", reason="the block needs the transformers extra")
    r = run_python("-c", block)
    assert r.returncode == 0, f"README block failed:\n{block}\n--- stderr:\n{r.stderr}"


def test_readme_usage_example_is_at_most_15_lines():
    usage = README.split("## Usage", 1)[1]
    block = re.search(r"```python\n(.*?)```", usage, flags=re.S).group(1)
    assert len(block.strip().splitlines()) <= 15


def test_readme_commands_are_makefile_targets():
    makefile = (ROOT / "Makefile").read_text()
    for target in ("demo", "test"):
        assert f"make {target}" in README
        assert re.search(rf"^{target}:", makefile, flags=re.M), f"Makefile has no {target!r} target"
    assert "## Performance (H200)" in README
    assert "benchmarks/results" in README.split("## Performance (H200)", 1)[1]


def test_demo_checks_every_pattern():
    r = run_python("-m", "tilesparse", "demo")
    assert r.returncode == 0, r.stdout + r.stderr
    for label, spec in PATTERNS:
        assert label in r.stdout
        assert str(spec) in r.stdout  # the section header names the spec
    assert r.stdout.count("max |error| against attn.reference") == len(PATTERNS)
    assert r.stdout.count("visited tiles:") == len(PATTERNS)
    assert r.stdout.count("tiles, layout order:") == len(PATTERNS)  # one tile map each
    assert "stages:" in r.stdout  # the plans are printed
    assert "FAILED" not in r.stdout
    assert "all patterns match the reference" in r.stdout


def test_demo_fails_when_an_op_is_wrong(monkeypatch, capsys):
    attend = ExecutorBackend.attend
    monkeypatch.setattr(ExecutorBackend, "attend", lambda self, g, inputs: attend(self, g, inputs) * 1.01)
    assert main(["demo", "--seqlen", "128"]) == 1
    out = capsys.readouterr().out
    assert "FAILED: output: max |error|" in out
    assert "FAILED: " + ", ".join(label for label, _ in PATTERNS) in out


def test_demo_fails_when_the_backend_refuses_a_pattern(capsys):
    # sdpa runs the identity-layout groups only: Dense and TopKFeatures (over q~, k~)
    assert main(["demo", "--backend", "sdpa", "--seqlen", "64"]) == 1
    out = capsys.readouterr().out
    assert "backend 'sdpa' cannot run head group" in out
    assert out.count("refused") >= len(PATTERNS) - 2


def test_explain_shows_plan_tiles_and_map():
    r = run_python("-m", "tilesparse", "explain", '{"kind":"hash","buckets":4}')
    assert r.returncode == 0, r.stdout + r.stderr
    assert 'spec: {"kind":"hash","buckets":4' in r.stdout
    assert "CompiledAttention(Hash(buckets=4), causal=True, backend='auto')" in r.stdout
    assert "mask=k<=q & same-bucket" in r.stdout
    assert "tiles per head group" in r.stdout
    assert "head 0 (sort)" in r.stdout and "tiles, layout order:" in r.stdout


def test_explain_options_and_errors(capsys):
    spec = '{"kind": "per_head", "dense_heads": [0], "rest": {"kind": "qk_drop", "keep": 0.5}}'
    assert main(["explain", spec, "--no-causal", "--seqlen", "100", "--heads", "3", "--backend", "executor"]) == 0
    out = capsys.readouterr().out
    assert "causal=False, backend='executor'" in out
    assert "head 0 (identity)" in out and "head 1 (compact)" in out  # one map per head group

    assert main(["explain", '{"kind": "hash", "buckets": 0}']) == 2
    assert "buckets must be in [1, 65536], got 0" in capsys.readouterr().err
    assert main(["explain", '{"kind": "dense"}', "--backend", "no-such-backend"]) == 2
    assert "no-such-backend" in capsys.readouterr().err



PLAN_LINES = ("group ", "  stages: ", "  index builder: ", "fusions: ", "steps, as a call runs them: ")


def plan_lines(text: str) -> list[str]:
    """The lines of an explain() printout that say what runs (not the tile counts)."""
    return [line for line in text.splitlines() if line.startswith(PLAN_LINES) and " tiles (" not in line]


def test_readme_cpu_explain_shows_the_plans_the_code_makes():
    """The README's CPU explain() block, rerun as it says (seed=0, after one call): every plan
    line (groups, stages, index builder, fusions, the executed steps) is what explain() prints."""
    import torch

    import tilesparse as ts

    start = README.index("`explain()` on three specs (CPU")
    block = re.search(r"```text\n(.*?)```", README[start:], flags=re.S).group(1)
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 4, 256, 64, requires_grad=True) for _ in range(3))
    specs = (ts.Hybrid(parts=[ts.Hash(buckets=8), ts.QKDrop()]), ts.PerHead(dense_heads=[0], rest=ts.Hash(buckets=8)),
             ts.Hash(buckets=1))  # fmt: skip
    shown = block.strip().split("\n\n")
    assert [t.splitlines()[0] for t in shown] == [f"CompiledAttention({s}, causal=True, backend='auto')" for s in specs]
    for spec, text in zip(specs, shown, strict=True):
        attn = ts.compile(spec, seed=0)
        attn(q, k, v)
        want = plan_lines(text)
        assert any(line.startswith("steps, as a call runs them: ") for line in want)
        assert plan_lines(attn.explain(q, k, v)) == want


PERF_LABELS = {
    "Dense (auto: dispatches to SDPA)": "dense",
    "dense (SDPA)": "dense",
    "QKDrop(0.7)": "keep0.7",
    "QKDrop(0.5)": "keep0.5",
    "QKDrop(0.3)": "keep0.3",
    "Hash(8)": "hash8",
    "Hash(16)": "hash16",
    "Hash(64)": "hash64",
    "Hash(16) + QKDrop(0.7)": "hybrid",
}


def _perf_tables() -> list[list[list[str]]]:
    """The tables of the README's performance section, each a list of rows of cells."""
    section = README.split("## Performance (H200)", 1)[1].split("\n## ", 1)[0]
    tables, current = [], []
    for line in section.splitlines() + [""]:
        if line.startswith("| "):
            if "---" not in line:
                current.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif current:
            tables.append(current)
            current = []
    return tables


def _close(cell: str, value: float) -> bool:
    """A README figure rounded to 3 significant digits (at least 2 decimals below 10)."""
    return abs(float(cell) - value) <= 0.006 * value + 0.006


def test_readme_performance_figures_come_from_the_results_json():
    """Every figure in the README's H200 tables is the one in the committed results JSON: the
    target table's ms columns, and the grid tables' ms and speed-ups over flash."""
    import json

    tables = _perf_tables()
    assert len(tables) == 3, "the target table and the D=64 and D=128 grid tables"
    results = json.loads((ROOT / "benchmarks" / "results" / "bench_targets_run100_h200.json").read_text())
    rows = {(r["pattern"], r["T"]): r for r in results["rows"] if r["mode"] == "fwd_bwd"}
    for cells in tables[0][1:]:
        pattern, T = PERF_LABELS[cells[0]], int(cells[1].replace(",", ""))
        ms = rows[(pattern, T)]["ms"]
        for cell, key in zip(cells[2:6], ("ours", "ours_incl", "sdpa_flash", "sdpa_cudnn"), strict=True):
            if cell == "-":
                assert key not in ms, f"{cells[0]} T={T}: README omits {key}, the JSON has it"
                continue
            assert _close(cell, ms[key]), f"{cells[0]} T={T} {key}: {cell} vs {ms[key]}"
    for table in tables[1:]:
        D = int(table[0][0].removeprefix("D="))
        grid = json.loads((ROOT / "benchmarks" / "results" / f"bench_full_d{D}_h200.json").read_text())
        rows = {(r["pattern"], r["T"]): r for r in grid["rows"] if r["mode"] == "fwd_bwd" and not r["long"]}
        seqlens = [int(c.removesuffix("k")) * 1024 for c in table[0][1:]]
        for cells in table[1:]:
            for T, cell in zip(seqlens, cells[1:], strict=True):
                ms, speedup = cell.split(" ")
                r = rows[(PERF_LABELS[cells[0]], T)]
                assert _close(ms, r["ms"]["ours"]), f"D={D} {cells[0]} T={T}: {ms} vs {r['ms']['ours']}"
                x = float(speedup.strip("()x"))
                assert abs(x - r["speedup"]["ours_vs_sdpa_flash"]) <= 0.006 * x + 0.006, f"D={D} {cells[0]} T={T}: {speedup}"


def test_readme_training_results_are_the_committed_json():
    """The training run's table in the README is ``train_lm.py --report`` of the committed JSON;
    until that JSON exists, the README says the run is not yet measured."""
    section = README.split("### Training a byte-level LM with sparse attention", 1)[1].split("\n## ", 1)[0]
    results = ROOT / "benchmarks" / "results" / "train_lm_h200.json"
    if not results.is_file():
        assert "not yet measured" in section
        return
    r = run_python("examples/train_lm.py", "--report", str(results))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() in section


def test_readme_index_build_table_is_the_committed_json():
    """The index-build table of the CuPy section: every figure is bench_index_h200.json's."""
    import json

    section = README.split("## Top-k feature sparsity and the CuPy backend", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    header, *rows = ([c.strip() for c in line.strip().strip("|").split("|")] for line in lines if "build" in line
                     or line.startswith("| 4,096") or line.startswith("| 16,384") or line.startswith("| 65,536"))  # fmt: skip
    columns = {
        "torch LSH + torch prepare": "torch_lsh+prepare",
        "torch LSH + Triton build": "torch_lsh+triton_build",
        "Triton build, buckets given": "triton_build(buckets given)",
        "CuPy build, buckets given": "cupy_build(buckets given)",
        "CuPy build hashing itself": "cupy_lsh+build",
        "Triton hashing launch + Triton build": "triton_lsh+build",
    }
    assert header[:2] == ["T", "build"] and header[2:] == list(columns)
    specs = {"Hash 16": "Hash()", "Hash 16 + QKDrop 0.7": "Hybrid(parts=[Hash(), QKDrop()])"}
    results = json.loads((ROOT / "benchmarks" / "results" / "bench_index_h200.json").read_text())
    measured = {(r["T"], r["spec"]): r for r in results["index_build"]}
    assert len(rows) == len(measured) == 6
    for cells in rows:
        r = measured[(int(cells[0].replace(",", "")), specs[cells[1]])]
        for cell, key in zip(cells[2:], columns.values(), strict=True):
            assert _close(cell, r[key]["ms"]), f"{cells[:2]} {key}: {cell} vs {r[key]['ms']}"


def test_readme_model_shape_tables_are_the_committed_json():
    """The tables of the model-shape section are ``bench_models.py --table`` of the committed
    JSON, figure for figure."""
    section = README.split("## Performance at model shapes (H200)", 1)[1].split("\n## ", 1)[0]
    results = ROOT / "benchmarks" / "results"
    for names in (("bench_models_run135_h200.json", "bench_models64k_run136_h200.json"),
                  ("bench_targets_grid_run135_h200.json",)):
        name = " + ".join(names)
        r = run_python("benchmarks/bench_models.py", "--table", *(str(results / n) for n in names))
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() in section, f"{name}: the README's tables differ from --table"
