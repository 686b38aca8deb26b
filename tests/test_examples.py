"""Every script in examples/ runs as a user would run it, on CPU, with Triton interpreted.

The two scripts must exit 0 after checking themselves against the reference; the property-test
example must pass under pytest with its planted bug reported as an expected failure, and, run
with ``--runxfail``, must show hypothesis' shrunk failing example and assert_equivalent's
report for that bug.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
SCRIPTS = ("declare_and_compile.py", "custom_criterion.py")
PROPERTY_TEST = "property_test_custom_pattern.py"


def run_python(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python *args`` from the repository root, as CI runs things (Triton interpreted)."""
    # one thread: the tensors are small, and under load OpenMP threads that spin cost more than they give
    env = {**os.environ, "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def test_every_example_is_run_here():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted((*SCRIPTS, PROPERTY_TEST))


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
