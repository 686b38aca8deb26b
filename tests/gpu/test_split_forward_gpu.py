"""The Triton forward and dQ kernels with their query blocks split over windows of their key
tiles, and dK/dV with its key blocks split over windows of their query tiles
(``TileConfig.fwd_split``, ``dq_split``, ``dkdv_split``; kernels._share_window, _merged_shares,
_summed_shares) on the GPU: outputs and gradients within rounding of the
unsplit kernels' and no further from the float32 reference's (mean error); the same bits call
after call (the shares' merge and sums take them in share order, whoever arrives last); the
counters zero after every launch; a CUDA graph captured with it replays the eager result."""

from __future__ import annotations

import pytest
import torch

import tilesparse as ts
from tilesparse.backends.triton.op import override_config

from builtin_specs import counters_left, cuda_inputs, recorded_workspaces

pytestmark = pytest.mark.gpu

SPECS = {"dense": ts.Dense(), "qkdrop": ts.QKDrop(keep=0.5), "hash": ts.Hash(buckets=16),
         "perhead": ts.PerHead(dense_heads=[0], rest=ts.Hash(buckets=16))}
SHAPES = [(1, 16, 16, 64, 4096), (1, 8, 2, 64, 1000), (1, 32, 8, 128, 4096), (1, 8, 2, 128, 1000)]
IDS = ["D64_4k", "D64_GQA_1000", "D128_GQA_4k", "D128_GQA_1000"]


def split(shares: int = 4):
    return override_config(fwd_split=shares, dq_split=shares, dkdv_split=shares, split_programs=10**9, split_all=1)


def _call(attn, q, k, v, dec, go):
    out = attn(q, k, v, decisions=dec)
    return (out, *torch.autograd.grad(out, (q, k, v), go))


@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_split_forward_matches_the_unsplit_one(name, shape):
    q, k, v = cuda_inputs(shape, grad=True)
    go = torch.randn_like(q)
    attn = ts.compile(SPECS[name], causal=True, backend="triton")
    dec = attn.decide(q, k)
    with override_config(fwd_split=0, dq_split=0, dkdv_split=0):  # unsplit (the default splits short calls)
        want = _call(attn, q, k, v, dec, go)
    with split(), recorded_workspaces() as made:
        got = _call(attn, q, k, v, dec, go)
        torch.cuda.synchronize()
        assert not counters_left(made)
        for _ in range(3):  # the same bits every call
            assert all(torch.equal(a, b) for a, b in zip(_call(attn, q, k, v, dec, go), got, strict=True)), name
    for a, b, what in zip(got, want, ("out", "dq", "dk", "dv"), strict=True):
        torch.testing.assert_close(a, b, atol=2e-2, rtol=2e-2, msg=f"{name} {what}")
    qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
    ref = attn.reference(qf, kf, vf, decisions=dec)
    refs = (ref.detach(), *torch.autograd.grad(ref, (qf, kf, vf), go.float()))
    for a, b, r, what in zip(got, want, refs, ("out", "dq", "dk", "dv"), strict=True):
        err_split, err_base = (a.float() - r).abs().mean(), (b.float() - r).abs().mean()
        assert err_split <= 1.05 * err_base + 1e-5, (name, what, float(err_split), float(err_base))  # no further off


@pytest.mark.parametrize("name", ["dense", "qkdrop"])
def test_a_captured_split_forward_replays_the_eager_result(name):
    q, k, v = cuda_inputs((1, 16, 16, 64, 4096), grad=False)
    attn = ts.compile(SPECS[name], causal=True, backend="triton")
    dec = attn.decide(q, k)
    static = [t.clone() for t in (q, k, v)]
    static_dec = None if dec is None else ts.Decisions(**{n: t.clone() for n, t in dec.items() if t is not None})
    with split(), recorded_workspaces() as made:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                attn(*static, decisions=static_dec)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = attn(*static, decisions=static_dec)
        q2, k2, v2 = cuda_inputs((1, 16, 16, 64, 4096), grad=False, seed=5)
        dec2 = attn.decide(q2, k2)
        for s, t in zip(static, (q2, k2, v2), strict=True):
            s.copy_(t)
        if dec2 is not None:
            for n, t in dec2.items():
                if t is not None:
                    getattr(static_dec, n).copy_(t)
        for _ in range(3):
            graph.replay()
            torch.cuda.synchronize()
            assert torch.equal(out, attn(q2, k2, v2, decisions=dec2))
        assert not counters_left(made)  # the captured workspace's too, replay after replay
