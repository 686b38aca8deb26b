"""Nothing silently wrong, on the GPU: out-of-range decision ids never reach an index build
(validate=True: clamped, the call's output NaN, a ValueError at the op's next call or from
tilesparse.check_errors(); validate=False: a device-side assertion, in a child process since
it ends the CUDA context), a poisoned key no query attends reaches no output or
gradient of the reference on CUDA (the kernels: test_nan_containment_gpu.py), CuPy's
backward refuses a second derivative, and a bucket count Triton's index build cannot sort goes
to another backend, exactly.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import tilesparse as ts

DEVICE = torch.device("cuda")
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("bad_at", [None, 0, 1_000_003, 2 * 32 * 65536 - 1])
def test_the_id_check_kernel_agrees_with_the_torch_ops_at_model_sizes(bad_at):
    """Buckets of B=2, H=32, T=65,536 (4,096 programs per field, both fields in one launch, all
    racing on one counter), an id out of range at the first, a middle or the last place, or
    none: the kernel's clamped ids, poison and record are the torch ops', and its scratch rows
    are reset after every call."""
    from tilesparse.patterns.decision_errors import Row

    g = torch.Generator(DEVICE).manual_seed(1)
    fields = {n: torch.randint(0, 16, (2, 32, 65536), generator=g, device=DEVICE, dtype=torch.int32)
              for n in ("q_bucket", "k_bucket")}  # fmt: skip
    if bad_at is not None:
        fields["k_bucket"].view(-1)[bad_at] = 16
    rows = (Row("q_bucket", "range", 16), Row("k_bucket", "range", 16))
    assert _kernels_agree(fields, rows) == (bad_at is not None)


def _kernels_agree(fields: dict, rows: tuple) -> bool:
    """check_on_device on ``fields`` three times through the torch ops, then through the
    kernel: the same clamped ids, poison and record, and every scratch row reset after each
    call; whether the poison is NaN."""
    from tilesparse.backends.triton.idcheck import ID_CHECK
    from tilesparse.patterns.decision_errors import DeviceErrors, check_on_device

    results = []
    for check in (None, ID_CHECK):
        errors = DeviceErrors("op", rows, DEVICE, check)
        assert errors.id_check is check
        for _ in range(3):  # the scratch rows must be reset between calls
            clamped, poison = check_on_device(dict(fields), rows, errors)
        results.append((clamped, poison.clone(), errors.record.clone(), errors.scratch.clone()))
    (c0, p0, r0, _), (c1, p1, r1, s1) = results
    for n in fields:
        assert torch.equal(c0[n], c1[n])
    assert bool(p0.isnan()) == bool(p1.isnan())
    assert torch.equal(r0, r1)
    assert s1.tolist() == [[torch.iinfo(torch.int64).max, torch.iinfo(torch.int64).min, 0]] * len(rows)
    return bool(p1.isnan())


@pytest.mark.parametrize("k", [2, 8, 64])
@pytest.mark.parametrize("bad", [None, "repeat_first", "repeat_last", "range_middle"])
def test_the_support_check_kernel_agrees_with_the_torch_ops_at_model_sizes(bad, k):
    """TopKFeatures supports of B=1, H=32, T=16,384 (k ids a token: 32 to 2,048 tokens per
    program, every program racing on the scratch rows), a repeated id in the first or the last
    token, an id out of range in the middle, or none: the kernel's clamped ids, poison, range
    and repeat records are the torch ops', and its scratch rows are reset after every call."""
    from tilesparse.patterns.decision_errors import rows_for

    D = 128
    g = torch.Generator(DEVICE).manual_seed(2)
    fields = {n: torch.rand((1, 32, 16384, D), generator=g, device=DEVICE).argsort(-1)[..., :k].to(torch.int16)
              for n in ("q_support", "k_support")}  # fmt: skip
    flat = fields["k_support"].view(-1, k)
    if bad == "repeat_first":
        flat[0, k - 1] = flat[0, 0]
    elif bad == "repeat_last":
        flat[-1, 0] = flat[-1, k - 1]
    elif bad == "range_middle":
        fields["q_support"].view(-1)[fields["q_support"].numel() // 2] = D
    rows = rows_for(ts.Decisions(**fields), buckets=None, head_dim=D)
    assert _kernels_agree(fields, rows) == (bad is not None)


def _qkv(T=1024, H=2, D=64, dtype=torch.float16, seed=0):
    g = torch.Generator(DEVICE).manual_seed(seed)
    return tuple(torch.randn((1, H, T, D), generator=g, device=DEVICE, dtype=dtype) for _ in range(3))


@pytest.mark.parametrize("backend", ["triton", "auto"])
def test_an_id_edited_after_decide_is_refused(backend):
    q, k, v = _qkv()
    attn = ts.compile(ts.Hash(buckets=4), backend=backend)
    dec = attn.decide(q, k)
    attn(q, k, v, decisions=dec)
    dec.k_bucket[0, 1, 7] = 1000
    assert attn(q, k, v, decisions=dec).isnan().all()  # checked on the device, reported later
    with pytest.raises(ValueError, match=r"decisions\.k_bucket values must lie in \[0, 4\)"):
        ts.check_errors()


def test_validate_false_stops_an_out_of_range_id_on_the_device():
    script = textwrap.dedent("""
        import torch, tilesparse as ts
        q, k, v = (torch.randn(1, 2, 1024, 64, device="cuda", dtype=torch.float16) for _ in range(3))
        attn = ts.compile(ts.Hash(buckets=4), backend="triton", validate=False)
        dec = attn.decide(q, k)
        dec = ts.Decisions(q_bucket=dec.q_bucket.clone(), k_bucket=dec.k_bucket.clone())
        dec.q_bucket[0, 0, 5] = 1000
        out = attn(q, k, v, decisions=dec)
        torch.cuda.synchronize()
        print("RAN", float(out.float().abs().max()))
    """)
    env = {**os.environ, "TRITON_INTERPRET": "0"}
    r = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "RAN" not in r.stdout, r.stdout + r.stderr
    assert "assert" in r.stderr.lower(), r.stderr[-3000:]


@pytest.mark.parametrize(
    "spec,backend",
    [(ts.QKDrop(keep=0.5), "reference"), (ts.Hash(buckets=4), "reference")],
    ids=str,
)
def test_a_poisoned_unattended_key_changes_nothing(spec, backend):
    q, k, v = _qkv(dtype=torch.float32)
    attn = ts.compile(spec, backend=backend)
    dec = attn.decide(q, k)
    j = 300
    if dec.k_keep is not None:
        dec = ts.Decisions(**{n: t for n, t in dec.items() if t is not None and n != "k_keep"},
                           k_keep=dec.k_keep.clone().index_fill_(2, torch.tensor([j], device=DEVICE), False))  # fmt: skip
    else:
        qb = dec.q_bucket.clamp_max(2)
        kb = dec.k_bucket.clamp_max(2).index_fill_(2, torch.tensor([j], device=DEVICE), 3)
        dec = ts.Decisions(q_bucket=qb, k_bucket=kb)
    want = attn(q, k, v, decisions=dec)
    kp, vp = k.clone(), v.clone()
    vp[:, :, j] = float("inf")
    kp[:, :, j, 3] = float("nan")
    leaves = [t.clone().requires_grad_() for t in (q, kp, vp)]
    out = attn(*leaves, decisions=dec)
    torch.testing.assert_close(out, want, rtol=0, atol=1e-5)
    out.square().sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in leaves)


def test_cupy_refuses_a_second_derivative():
    q, k, v = _qkv(dtype=torch.float32)
    attn = ts.compile(ts.TopKFeatures(k=8), backend="cupy")
    Q = q.clone().requires_grad_()
    (g,) = torch.autograd.grad(attn(Q, k, v).square().sum(), Q, create_graph=True)
    with pytest.raises(RuntimeError, match="'cupy' backend's backward pass is first order only"):
        torch.autograd.grad(g.square().sum(), Q)


def test_buckets_triton_cannot_sort_go_elsewhere_exactly():
    q, k, v = _qkv(dtype=torch.float32)
    attn = ts.compile(ts.Hash(buckets=65536))
    assert "buckets=65536 > 65535" in attn.explain(q, k, v)
    dec = attn.decide(q, k)
    torch.testing.assert_close(attn(q, k, v, decisions=dec), attn.reference(q, k, v, decisions=dec), rtol=0, atol=2e-3)
