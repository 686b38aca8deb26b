"""The warp-specialized dK/dV, dQ and forward kernels (gluon_dkdv.py, gluon_dq.py, gluon_fwd.py), every listed launch
variant compiled for the H200 (sm_90) on the CPU.

Gluon kernels do not run under the interpreter, so this is what CI checks of it (its bf16 variants;
``make test-compile-all`` the fp16 ones too, and it writes the reports that a session with the
same kernel sources and Triton reuses: compile_cache.py): each variant compiles, its shared memory fits a
block, and its in-loop spills (LDL/STL between a backward branch's target and the branch,
sm90._loop_spills) stay at or below the count measured per release and head dim. The counts, of
``python -m tilesparse.backends.triton.sm90 --gluon`` on 2026-12-02: with Triton 3.6 (the release
the kernel is run with on the GPU) at most 9 at D=64 and 37 at D=128, and 3.7.1 (what `make test`
installs; no GPU ran it) 9 and 46. The spills sit in the variants with a bucket predicate (the
buckets' registers) and at D=128. The dQ kernel's variants spilled nothing with either release
(2026-12-02), nor did the forward kernel's. Their exactness rests on the GPU tests
(tests/gpu/test_gluon_dkdv_gpu.py, test_gluon_dq_gpu.py, test_gluon_fwd_gpu.py).
"""

from __future__ import annotations

import pytest
import torch

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

from compile_cache import compiled  # this folder, on sys.path under pytest

# release -> head dim -> the most in-loop spills over that head dim's variants (dK/dV; dQ: none)
KNOWN_LOOP_SPILLS = {(3, 6): {64: 9, 128: 37}, (3, 7): {64: 9, 128: 46}}

# CI compiles the bf16 variants (60 of 74); the fp16 ones are marked slow (make test-compile-all)
def _params(listed, name):
    return [pytest.param(name(*v), marks=() if v[0] == torch.bfloat16 else pytest.mark.slow) for v in listed()]


VARIANTS = _params(gluon_dkdv_variants, gluon_variant_name)
DQ_VARIANTS = _params(gluon_dq_variants, gluon_dq_variant_name)
FWD_VARIANTS = _params(gluon_fwd_variants, gluon_fwd_variant_name)


@pytest.fixture(scope="module")
def reports(selected_params) -> dict[str, dict]:
    """The variants this session's selected tests read, compiled in a child process (this one
    runs Triton's interpreter; sm90.compile_in_child), or their reports from the last full compile
    of these same sources (compile_cache.py)."""
    return compiled({p["variant"] for p in selected_params}, gluon=True, timeout=900)


def test_every_selected_variant_is_compiled(selected_params, reports):
    assert sorted(reports) == sorted(p["variant"] for p in selected_params)


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
