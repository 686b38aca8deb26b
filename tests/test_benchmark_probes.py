"""The probes behind the kernel issue's measurements run, and compute what they time: on the
CPU (Triton's interpreter) ``benchmarks/probe_tma.py --smoke`` runs the forward tile loop with K
and V gathered, in order and through tensor descriptors, and exits non-zero unless all three
agree with SDPA over the permuted keys; ``benchmarks/call_times.py --device cpu`` (the script
that times every call three ways against SDPA) times and merges what it says."""

from __future__ import annotations

import json
import statistics

import torch

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


def test_call_times_times_every_mode_of_every_row_in_each_round_and_merges(tmp_path):
    """``benchmarks/call_times.py --device cpu`` (the script's own check; its figures come from
    the GPU): under a lock, two rounds of a pattern's three modes and SDPA's two, each timed three
    ways, and again with the ``--ab`` change off; ``--merge`` then gives each pattern row its own
    process's SDPA rows and prints the ratios."""
    script = str(ROOT / "benchmarks" / "call_times.py")
    one = tmp_path / "keep.json"
    r = run_python(script, "--device", "cpu", "--shapes", "1x2x1x16x64", "--patterns", "keep0.5", "--calls", "2",
                   "--warmup", "1", "--rounds", "2", "--lock", str(tmp_path / "lock"), "--out", str(one),
                   "--ab", "index-pool")  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(p.name.split(".")[0] for p in (tmp_path / "lock").iterdir()) == ["done", "lock", "ready"]
    rows = json.loads(one.read_text())["rows"]
    assert sorted(rows) == ["B1_H2_Hkv1_D16_T64/keep0.5", "B1_H2_Hkv1_D16_T64/sdpa_math"]
    modes = ["fwd", "fwd_bwd", "fwd_decide_nograd"]
    assert sorted(rows["B1_H2_Hkv1_D16_T64/keep0.5"]) == sorted(modes + [m + "@off" for m in modes])  # --ab
    for row in rows.values():
        for fig in row.values():
            assert len(fig["rounds"]) == 2 and all(rr[m] > 0 for rr in fig["rounds"] for m in ("host", "b2b", "sync"))
            assert fig["host"] == round(statistics.median(rr["host"] for rr in fig["rounds"]), 1)
    merged = tmp_path / "merged.json"
    r = run_python(script, "--merge", str(one), "--out", str(merged))
    assert r.returncode == 0, r.stdout + r.stderr
    out = json.loads(merged.read_text())["rows"]
    assert list(out) == ["B1_H2_Hkv1_D16_T64/keep0.5"]
    assert out["B1_H2_Hkv1_D16_T64/keep0.5"]["sdpa_math"] == rows["B1_H2_Hkv1_D16_T64/sdpa_math"]
    assert sum("B1_H2_Hkv1_D16_T64/keep0.5" in line for line in r.stdout.splitlines()) == 6  # each mode, on and off


def test_call_times_compiles_a_pattern_named_with_a_backend_with_that_backend(monkeypatch):
    """``call_times.calls_of``: a pattern compiles with ``backend="triton"``, one named
    ``NAME@BACKEND`` (``topk8@auto``: what a default compile runs) with that backend, its row
    under the full name."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import call_times

    backends = []
    real = call_times.ts.compile
    monkeypatch.setattr(call_times.ts, "compile", lambda spec, **kw: backends.append(kw["backend"]) or real(spec, **kw))
    monkeypatch.setattr(call_times, "DEVICE", torch.device("cpu"))
    rows = call_times.calls_of("1x2x1x16x64", ["topk8", "topk8@auto"])
    assert backends == ["triton", "auto"]
    assert "B1_H2_Hkv1_D16_T64/topk8@auto" in rows and "B1_H2_Hkv1_D16_T64/topk8" in rows


def test_ab_arms_turn_a_taken_change_off_and_a_new_one_on(monkeypatch):
    """``call_times.ab_arms``: an --ab change from ``SWITCHES`` (taken) is on outside its
    context manager and off inside; one from ``ENABLES`` (not taken yet) the other way round;
    without a change, neither (run() enters it for every mode: run 200 found it None there)."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import call_times

    from tilesparse.backends import buffers
    from tilesparse.backends.triton import nonfinite

    turned = call_times.ab_arms("merged-sanitize")
    with turned(False):
        assert nonfinite._MERGED[0]
    with turned(True):
        assert not nonfinite._MERGED[0]
    turned = call_times.ab_arms("index-pool")
    with turned(True):
        assert buffers._OFF[0]
    with turned(False):
        assert not buffers._OFF[0]
    turned = call_times.ab_arms(None)  # without --ab: contexts that change nothing, either way
    for off in (False, True):
        with turned(off):
            assert not buffers._OFF[0] and not nonfinite._MERGED[0]
