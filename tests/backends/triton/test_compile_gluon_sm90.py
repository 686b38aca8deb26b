"""The warp-specialized dK/dV, dQ and forward kernels (gluon_dkdv.py, gluon_dq.py, gluon_fwd.py), every listed launch
variant compiled for the H200 (sm_90) on the CPU.

Gluon kernels do not run under the interpreter, so this is what CI checks of it: each variant
compiles, its shared memory fits a block, and its in-loop spills (LDL/STL between a backward
branch's target and the branch, sm90._loop_spills) stay at or below the count measured per
release and head dim. The counts, of ``python -m tilesparse.backends.triton.sm90 --gluon`` on
2026-12-02: with Triton 3.6 (the release the kernel is run with on the GPU) at most 9 at D=64
and 37 at D=128, and 3.7.1 (what `make test` installs; no GPU ran it) 9 and 46. The spills sit
in the variants with a bucket predicate (the buckets' registers) and at D=128. The dQ kernel's
variants spilled nothing with either release (2026-12-02), nor did the forward kernel's. Their
exactness rests on the GPU tests (tests/gpu/test_gluon_dkdv_gpu.py, test_gluon_dq_gpu.py,
test_gluon_fwd_gpu.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tilesparse.backends.triton.sm90 import (
    SHARED_LIMIT,
    gluon_dkdv_variants,
    gluon_dq_variant_name,
    gluon_dq_variants,
    gluon_fwd_variant_name,
    gluon_fwd_variants,
    gluon_variant_name,
)
from tilesparse.backends.triton.versions import installed_triton, nearest_measured

# release -> head dim -> the most in-loop spills over that head dim's variants (dK/dV; dQ: none)
KNOWN_LOOP_SPILLS = {(3, 6): {64: 9, 128: 37}, (3, 7): {64: 9, 128: 46}}

VARIANTS = [gluon_variant_name(*v) for v in gluon_dkdv_variants()]
DQ_VARIANTS = [gluon_dq_variant_name(*v) for v in gluon_dq_variants()]
FWD_VARIANTS = [gluon_fwd_variant_name(*v) for v in gluon_fwd_variants()]


@pytest.fixture(scope="module")
def reports() -> dict[str, dict]:
    """Compile every variant in a child process: this one runs Triton's interpreter."""
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    cmd = [sys.executable, "-m", "tilesparse.backends.triton.sm90", "--gluon"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"compiling the Gluon kernel for sm_90 failed:\n{done.stderr[-4000:]}"
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {r["variant"]: r for r in rows}


def test_every_variant_is_listed(reports):
    assert sorted(reports) == sorted(VARIANTS + DQ_VARIANTS + FWD_VARIANTS)


@pytest.mark.parametrize("variant", VARIANTS)
def test_gluon_variant_compiles_and_spills_no_more(variant, reports):
    r = reports[variant]
    assert r["shared"] <= SHARED_LIMIT, f"{variant}: {r['shared']} bytes of shared memory > {SHARED_LIMIT}"
    measured = nearest_measured(installed_triton(), KNOWN_LOOP_SPILLS)
    assert measured is not None, f"no spill count for Triton {installed_triton()} or older"
    known = KNOWN_LOOP_SPILLS[measured][r["head_dim"]]
    assert r["loop_spills"] <= known, f"{variant}: {r['loop_spills']} in-loop spills > {known} (Triton {measured})"


@pytest.mark.parametrize("variant", DQ_VARIANTS + FWD_VARIANTS)
def test_gluon_dq_and_forward_variants_compile_without_spills(variant, reports):
    r = reports[variant]
    assert r["shared"] <= SHARED_LIMIT, f"{variant}: {r['shared']} bytes of shared memory > {SHARED_LIMIT}"
    assert r["loop_spills"] == 0, f"{variant}: {r['loop_spills']} in-loop spills"
