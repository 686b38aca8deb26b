"""What the GPU tests of the Gluon kernels (test_gluon_dkdv_gpu.py, test_gluon_dq_gpu.py) share:
the patterns, the tolerances, and a random call with its gradients."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

import tilesparse as ts

from builtin_specs import one_of_each_kind

DEVICE = torch.device("cuda")

SPECS = [
    *one_of_each_kind(keep=0.5, buckets=16, k=8, hybrid_buckets=8, perhead_buckets=4).values(),
    ts.QKDrop(keep=0.05),
    ts.Hash(buckets=3, attend_self=False),
    ts.Hash(buckets=1),
]
# gradients against the masked reference, relative to its largest magnitude (test_triton_gpu.py's)
TOL = {torch.float16: 5e-3, torch.bfloat16: 3e-2}
# against the Triton kernel: the same products in another order of the fp32 sums, then one rounding
SAME = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
# one hypothesis test per (dtype, D): pytest-xdist compiles their variants in parallel
SHARDS = [(dtype, D) for dtype in (torch.bfloat16, torch.float16) for D in (64, 128)]
SHARD_IDS = [f"{str(d).removeprefix('torch.')}-D{D}" for d, D in SHARDS]
# the hypothesis strategies of random_call's arguments but the head dim and dtype (a shard's)
CASES = dict(
    spec=st.sampled_from(SPECS),
    causal=st.booleans(),
    T=st.one_of(st.integers(1, 200), st.integers(200, 3000)),
    extra_k=st.sampled_from([0, 0, 37]),
    heads=st.sampled_from([(2, 2), (4, 2), (8, 2), (3, 1)]),
    padded=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-6))


def grads(attn, q, k, v, dec, go, **sdpa):
    return torch.autograd.grad(attn(q, k, v, decisions=dec, **sdpa), (q, k, v), go)


def random_call(spec, causal, T, extra_k, heads, D, dtype, padded, seed):
    """(attn, q, k, v, decisions, output gradient, SDPA keywords) of a random call: batch 2,
    ``heads`` = (H, Hkv), Tk = T + ``extra_k``; ``padded``: the second sequence's last keys are
    padding."""
    H, Hkv = heads
    Tk = T + extra_k
    g = torch.Generator(DEVICE).manual_seed(seed)
    q = torch.randn((2, H, T, D), generator=g, device=DEVICE, dtype=dtype).requires_grad_()
    k, v = (torch.randn((2, Hkv, Tk, D), generator=g, device=DEVICE, dtype=dtype).requires_grad_() for _ in range(2))
    attn = ts.compile(spec, causal=causal, backend="triton")
    dec = attn.decide(q, k, generator=g)
    go = torch.randn((2, H, T, D), generator=g, device=DEVICE, dtype=dtype)
    sdpa = {}
    if padded:
        mask = torch.ones((2, Tk), dtype=torch.bool, device=DEVICE)
        mask[1, Tk - max(1, Tk // 3):] = False
        sdpa["key_padding_mask"] = mask
    return attn, q, k, v, dec, go, sdpa


def nonfinite_call(where: str, seed: int = 7):
    """(attn, q, k, v, decisions, output gradient): QKDrop(0.6), D=128, GQA, an inf and a NaN in
    ``where`` (q, k or v)."""
    g = torch.Generator(DEVICE).manual_seed(seed)
    q = torch.randn((1, 4, 700, 128), generator=g, device=DEVICE, dtype=torch.bfloat16)
    k, v = (torch.randn((1, 2, 700, 128), generator=g, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
    bad = {"q": q, "k": k, "v": v}[where]
    bad[0, 0, 300, 5] = float("inf")
    bad[0, -1, 500, 9] = float("nan")
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    go = torch.randn_like(q)
    attn = ts.compile(ts.QKDrop(keep=0.6), causal=True, backend="triton")
    return attn, q, k, v, attn.decide(q, k, generator=g), go


def assert_same_nonfinite(ws, tri) -> None:
    """Gradients of the two kernels with inputs holding inf or NaN: the same places, and the
    finite values within ``SAME``."""
    for name, a, b in zip(("dq", "dk", "dv"), ws, tri, strict=True):
        assert torch.equal(torch.isnan(a), torch.isnan(b)), f"{name}: NaN in other places"
        assert torch.equal(torch.isinf(a), torch.isinf(b)), f"{name}: inf in other places"
        fin = torch.isfinite(a)
        assert fin.any() and rel_err(a[fin], b[fin]) <= SAME[torch.bfloat16], name


def lean_and_normal(override: dict):
    """Yield (label, gradients of the second lean-path call, gradients on Triton's normal launch
    path) under ``override_config(**override)``, for QKDrop(0.5) and Hash(8) at D=64 and D=128 GQA."""
    from tilesparse.backends.triton.launch import normal_launches
    from tilesparse.backends.triton.op import override_config

    g = torch.Generator(DEVICE).manual_seed(3)
    for D, heads in ((64, (4, 4)), (128, (8, 2))):
        q = torch.randn((1, heads[0], 1500, D), generator=g, device=DEVICE, dtype=torch.bfloat16).requires_grad_()
        k, v = (torch.randn((1, heads[1], 1500, D), generator=g, device=DEVICE, dtype=torch.bfloat16).requires_grad_()
                for _ in range(2))  # fmt: skip
        go = torch.randn_like(q)
        for spec in (ts.QKDrop(keep=0.5), ts.Hash(buckets=8)):
            attn = ts.compile(spec, causal=True, backend="triton")
            dec = attn.decide(q, k, generator=g)
            with override_config(**override):
                lean = [grads(attn, q, k, v, dec, go) for _ in range(2)]  # the second call takes the lean path
                with normal_launches():
                    normal = grads(attn, q, k, v, dec, go)
            yield f"{spec} D={D}", lean[1], normal
