"""On CUDA, a call that makes its decisions (its bound decide step: ``tilesparse.decide.bind_decisions``)
decides as ``attn.decide`` does with the same generator, and as the unbound step did
(``unbound_decide``), bit for bit: the Triton builder hashing the ``lsh`` buckets inside its index
build, the ``topk_abs`` selector kernel, the built-in ``bernoulli`` drawn once with its comparison
made once, and a user criterion (checked on the device), with grouped-query attention, bf16, at
sizes that take several blocks and chunks."""

from __future__ import annotations

import pytest
import torch

import tilesparse as ts
from tilesparse.decide import unbound_decide

from builtin_specs import GPU_SHAPES, cuda_inputs, one_of_each_kind

SPECS = one_of_each_kind(keep=0.6, buckets=16, k=8)


@ts.criterion("test-gpu-norm-bucket", produces="bucket", replace=True)
def _norm_bucket(q, k, /, *, buckets, generator=None):
    def ids(x):
        return ((x.float().norm(dim=-1) * 7).long() % buckets).to(torch.int32)

    return ids(q), ids(k)


SPECS["user"] = ts.Hybrid(parts=[ts.Hash(buckets=16, criterion="test-gpu-norm-bucket"), ts.QKDrop(keep=0.6)])


@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", sorted(SPECS))
def test_a_call_decides_as_attn_decide_does(name, shape):
    T = shape[-1]
    attn = ts.compile(SPECS[name], causal=True, backend="triton")
    q, k, v = cuda_inputs(shape, grad=False, seed=1)

    def seeded(seed):
        return torch.Generator(device="cuda").manual_seed(seed)

    for seed in range(3):  # a new binding, a kept one, a reused one
        out = attn(q, k, v, generator=seeded(seed))
        dec = attn.decide(q, k, generator=seeded(seed))
        assert torch.equal(out, attn(q, k, v, decisions=dec)), (name, seed)
        with unbound_decide():
            assert torch.equal(out, attn(q, k, v, generator=seeded(seed))), (name, seed)
    ts.check_errors()
    if T <= 1000:
        torch.testing.assert_close(out.float(), attn.reference(q, k, v, decisions=dec).float(), atol=2e-2, rtol=2e-2)
