"""Every script in examples/ runs as a user would run it, on CPU, with Triton interpreted.

The two scripts must exit 0 after checking themselves against the reference; the property-test
example must pass under pytest with its planted bug reported as an expected failure, and, run
with ``--runxfail``, must show hypothesis' shrunk failing example and assert_equivalent's
report for that bug. The training script runs its smoke mode (tiny model, T=256, every
variant, the reference backend) and must write a JSON whose losses fall, its figure and its
README table; one step of it through the Triton kernels (interpreted) must give the losses the
reference backend gives. Its GPU run (T=8,192 and 16,384) is the device's.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
SCRIPTS = ("declare_and_compile.py", "custom_criterion.py")
PROPERTY_TEST = "property_test_custom_pattern.py"
TRAIN = "train_lm.py"
SEQUENCE_PARALLEL = "sequence_parallel.py"


def run_python(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python *args`` from the repository root, as CI runs things (Triton interpreted)."""
    # one thread: the tensors are small, and under load OpenMP threads that spin cost more than they give
    # the package from this checkout, installed or not (a script's own folder is its sys.path[0])
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": path, **(env or {})}
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def test_every_example_is_run_here():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted((*SCRIPTS, PROPERTY_TEST, TRAIN, SEQUENCE_PARALLEL))


def test_sequence_parallel_example_matches_the_single_process_model():
    # two gloo processes, one training step of a sequence-sharded model against the whole one
    r = run_python(str(EXAMPLES / SEQUENCE_PARALLEL))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[-1] == "sequence parallel matches the single-process model on cpu"


@pytest.mark.parametrize("script", SCRIPTS)
def test_example_script_runs(script: str):
    r = run_python(str(EXAMPLES / script))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "match the reference on cpu" in r.stdout.splitlines()[-1]
    assert "stages:" in r.stdout  # explain() was printed


def test_property_test_example_passes_and_shows_its_shrunk_failure(tmp_path):
    # one hypothesis database for both runs: the second replays the first's shrunk example
    env = {"HYPOTHESIS_STORAGE_DIRECTORY": str(tmp_path / "hypothesis")}
    pytest_ = ("-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLES / PROPERTY_TEST))
    r = run_python(*pytest_, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "4 passed, 1 xfailed" in r.stdout

    r = run_python(*pytest_, "--runxfail", "-k", "planted", env=env)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Falsifying example" in r.stdout or "Failing test case" in r.stdout
    assert "HandWritten(diagonal=-1)" in r.stdout  # assert_equivalent's report names the op
    assert "out:" in r.stdout  # and the tensor that differs


def test_train_lm_smoke_learns_and_writes_json_plot_and_table(tmp_path):
    r = run_python(str(EXAMPLES / TRAIN), "--smoke", "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    results = json.loads((tmp_path / "train_lm.json").read_text())
    train_lm = _load_train_lm()
    assert [(run["protocol"], run["variant"], run["T"]) for run in results["runs"]] == [
        ("standard", "dense", 256), ("standard", "hash16", 256),
        ("shared-qk", "dense-noself", 256), ("shared-qk", "hash16-noself", 256),
    ]  # fmt: skip
    for run in results["runs"]:
        assert run["error"] is None and run["stopped"] is None
        assert run["steps_done"] == len(run["train_loss"]) == len(run["step_ms"]) == 6
        assert all(math.isfinite(x) for x in run["train_loss"])
        assert [e["step"] for e in run["eval"]] == [0, 3, 6]
        first, last = run["eval"][0]["val_loss"], run["eval"][-1]["val_loss"]
        assert math.isfinite(last) and last < first - 0.2, run["eval"]  # it learns: from ~ln(256)
        assert run["tokens_per_s"] > 0
    assert results["meta"]["corpus"]["val_files"] > 0
    assert (tmp_path / "train_lm.png").stat().st_size > 0
    table = train_lm.report(results)
    assert table in r.stdout
    assert "| dense | 256 | 6 |" in table and "1.00x" in table and "+0.000" in table
    both = train_lm.protocol_report(results)
    assert both in r.stdout
    assert "| shared-qk | hash16-noself | 256 | " in both and "x vs dense-noself" in both


def test_train_lm_one_step_through_triton_matches_the_reference_backend(tmp_path, capsys):
    # the GPU run's path: q, k, v as strided views, autograd through the kernels (interpreted here)
    train_lm = _load_train_lm()
    losses = {}
    for backend in ("triton", "reference"):
        args = ["--smoke", "--variants", "hybrid", "--t", "128", "--batch", "1", "--layers", "1", "--steps", "1",
                "--val-tokens", "128", "--backend", backend, "--out", str(tmp_path), "--name", backend]  # fmt: skip
        assert train_lm.main(args) == 0, capsys.readouterr().out
        (run,) = json.loads((tmp_path / f"{backend}.json").read_text())["runs"]
        losses[backend] = [run["eval"][0]["val_loss"], run["train_loss"][0], run["eval"][1]["val_loss"]]
    assert losses["triton"] == pytest.approx(losses["reference"], abs=1e-4)


def test_train_lm_plot_and_report_modes(tmp_path, capsys):
    train_lm = _load_train_lm()
    out = tmp_path / "r.json"
    run = {"variant": "dense", "T": 64, "steps_done": 2, "step_ms": [9.0, 1.0], "step_ms_median": 1.0,
           "tokens_per_s": 64000.0, "eval": [{"step": 0, "train_s": 0, "val_loss": 5.5},
                                              {"step": 2, "train_s": 0.01, "val_loss": 5.0}]}  # fmt: skip
    sparse = {**run, "variant": "hash16", "step_ms_median": 0.5, "tokens_per_s": 128000.0,
              "eval": [{"step": 0, "train_s": 0, "val_loss": 5.5}, {"step": 2, "train_s": 0.01, "val_loss": 5.25}]}  # fmt: skip
    meta = {"model": {"layers": 1, "width": 8, "heads": 1}, "device_name": "test", "settings": {"speed_skip": 1}}
    out.write_text(json.dumps({"meta": meta, "runs": [run, sparse, {"variant": "hybrid", "T": 64, "error": "x"}]}))
    assert train_lm.main(["--plot", str(out)]) == 0
    assert out.with_suffix(".png").stat().st_size > 0
    assert train_lm.steady_clock(run, 1) == [0.0, 0.001, 0.002]  # the compile step counts as a steady one
    assert train_lm.main(["--report", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "| hash16 | 64 | 2 | 0.5 | 128,000 | 2.00x | 5.250 | +0.250 |" in lines
    assert not any("hybrid" in line for line in lines)  # a failed run has no numbers


def _load_train_lm():
    spec = importlib.util.spec_from_file_location("train_lm", EXAMPLES / TRAIN)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_train_lm_time_budget_stops_cleanly(tmp_path, capsys, monkeypatch):
    # the script's clock is a fake one that advances 0.1 s a reading: the budget is spent after
    # the same steps however fast or loaded the machine is
    train_lm = _load_train_lm()
    ticks = iter(range(10**9))
    monkeypatch.setattr(train_lm, "time", types.SimpleNamespace(perf_counter=lambda: 0.1 * next(ticks)))
    args = ["--smoke", "--protocols", "standard", "--variants", "dense,hash16", "--t", "64", "--steps", "100000", "--eval-every", "100000",
            "--time-budget-s", "2", "--out", str(tmp_path)]  # fmt: skip
    assert train_lm.main(args) == 0
    dense, hashed = json.loads((tmp_path / "train_lm.json").read_text())["runs"]
    assert dense["stopped"].startswith("time budget of") and 1 < dense["steps_done"] < 100000
    assert dense["eval"][-1]["step"] == dense["steps_done"]  # the last step is evaluated
    assert hashed["stopped"].startswith(("time budget of", "not run: the time budget"))


def test_train_lm_protocol_report_at_equal_steps_and_time():
    train_lm = _load_train_lm()

    def run(protocol, variant, ms, losses):
        return {"protocol": protocol, "variant": variant, "T": 64, "steps_done": 4, "step_ms": [ms] * 4,
                "step_ms_median": ms, "tokens_per_s": 1.0,
                "eval": [{"step": s, "train_s": s * ms / 1e3, "val_loss": x} for s, x in zip((0, 2, 3, 4), losses)]}  # fmt: skip

    results = {"meta": {"settings": {"speed_skip": 0}}, "runs": [
        run("standard", "dense", 100.0, [5.0, 3.0, 2.5, 2.0]),
        run("shared-qk", "dense-noself", 100.0, [5.0, 4.0, 3.5, 3.0]),
        run("shared-qk", "hash16-noself", 50.0, [5.0, 4.2, 3.8, 3.3]),
    ]}  # fmt: skip
    rows = {(r["protocol"], r["variant"]): r for r in train_lm.protocol_comparisons(results)}
    fast = rows[("shared-qk", "hash16-noself")]
    assert fast["gap_steps"] == pytest.approx(0.3) and fast["step"] == 4  # equal steps: 3.3 - 3.0
    # equal time: 0.2 s, the sparse run's whole training; the baseline reached step 2 by then
    assert fast["time_s"] == pytest.approx(0.2) and fast["gap_time"] == pytest.approx(3.3 - 4.0)
    assert fast["speedup"] == pytest.approx(2.0) and fast["gap_standard_dense"] == pytest.approx(1.3)
    assert fast["ranking_stable"] is True and rows[("standard", "dense")]["ranking_stable"] is None
