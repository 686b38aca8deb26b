"""The probes behind the kernel issue's measurements run, and compute what they time: on the
CPU (Triton's interpreter) ``benchmarks/probe_tma.py --smoke`` runs the forward tile loop with K
and V gathered, in order and through tensor descriptors, and exits non-zero unless all three
agree with SDPA over the permuted keys."""

from __future__ import annotations

from test_examples import ROOT, run_python


def test_probe_tma_three_ways_of_reading_k_and_v_agree_with_sdpa():
    r = run_python(str(ROOT / "benchmarks" / "probe_tma.py"), "--smoke")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [line for line in r.stdout.splitlines() if "max_err" in line]
    assert [m for m in ("gather", "contiguous", "tma") if any(f"'mode': '{m}'" in line for line in rows)] == [
        "gather", "contiguous", "tma"
    ]


def test_probe_ws_forward_agrees_with_the_backends_forward_kernel():
    """``benchmarks/probe_ws_fwd.py --smoke``: the forward over rows copied into layout order
    (descriptor loads, the loop warp-specialized on a GPU) gives the backend kernel's outputs
    and lse on QKDrop and Dense index tensors; it exits non-zero when they differ."""
    r = run_python(str(ROOT / "benchmarks" / "probe_ws_fwd.py"), "--smoke")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [line for line in r.stdout.splitlines() if "max_err_vs_kernel" in line]
    assert len(rows) == 3 and all("'max_err_vs_kernel': 0.0" in line for line in rows), r.stdout
