"""SequenceParallel on two GPUs (NCCL): the sharded output and q, k, v gradients equal the
one-GPU op's on the same inputs and decisions, at T=65,536 (B=1, H=32, Hkv=8, D=128, bf16) for
Hash(16) and QKDrop(0.5), and for kv heads copied to both ranks (Hkv=1) and PerHead's dense
heads on both ranks at T=4,096. Skips, saying so, unless two GPUs are present. NCCL's NVLink
multicast stays off (NCCL_NVLS_ENABLE=0 and the variables the device documentation names).
"""

from __future__ import annotations

import os
import tempfile

import pytest
import torch
import torch.multiprocessing as mp

import tilesparse as ts

pytestmark = pytest.mark.skipif(
    torch.cuda.device_count() < 2,
    reason=f"needs 2 GPUs for a two-rank NCCL group, found {torch.cuda.device_count()}",
)

# (spec, H, Hkv, T): the shape, then the head splits that copy kv heads
CASES = [
    (ts.Hash(buckets=16), 32, 8, 65536),
    (ts.QKDrop(keep=0.5), 32, 8, 65536),
    (ts.Hybrid(parts=[ts.Hash(buckets=8), ts.QKDrop(keep=0.7)]), 4, 1, 4096),
    (ts.PerHead(dense_heads=[1, 2], rest=ts.Hash(buckets=8)), 4, 2, 4096),
]
TOLERANCE = {"out": 1e-2, "dq": 2e-2, "dk": 2e-2, "dv": 2e-2}  # largest |difference| / largest |value|, bf16


def _worker(rank: int, world: int, init_file: str) -> None:
    import torch.distributed as dist

    from tilesparse.distributed import SequenceParallel, broadcast_decisions

    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank, world_size=world, device_id=device)
    failures = []
    for spec, H, Hkv, T in CASES:
        g = torch.Generator(device).manual_seed(0)  # the same sequence on both ranks
        q = torch.randn(1, H, T, 128, generator=g, device=device, dtype=torch.bfloat16)
        k, v = (torch.randn(1, Hkv, T, 128, generator=g, device=device, dtype=torch.bfloat16) for _ in range(2))
        go = torch.randn(q.shape, generator=g, device=device, dtype=torch.bfloat16)  # the same on both ranks
        attn = ts.compile(spec, causal=True)
        dec = attn.decide(q, k, generator=torch.Generator(device).manual_seed(1))
        dec = broadcast_decisions(dec, src=0)  # rank 0's decisions on every rank
        whole = [t.clone().requires_grad_() for t in (q, k, v)]
        out = attn(*whole, decisions=dec)
        want = [out.detach(), *torch.autograd.grad(out, whole, go)]
        sl = slice(rank * T // world, (rank + 1) * T // world)
        mine = [t[:, :, sl].clone().requires_grad_() for t in (q, k, v)]
        o = SequenceParallel(attn)(*mine, decisions=dec)
        got = [o.detach(), *torch.autograd.grad(o, mine, go[:, :, sl])]
        for name, a, b in zip(("out", "dq", "dk", "dv"), got, want, strict=True):
            b = b[:, :, sl].float()
            err = float((a.float() - b).abs().max() / b.abs().max().clamp_min(1e-12))
            if not err <= TOLERANCE[name]:
                failures.append(f"{spec} H={H} Hkv={Hkv} T={T}: {name} relative error {err:.3g} > {TOLERANCE[name]}")
        del whole, out, want, mine, o, got
        torch.cuda.empty_cache()
    dist.barrier()
    dist.destroy_process_group()
    if failures:
        raise AssertionError(f"rank {rank}:\n" + "\n".join(failures))


def test_two_gpus_equal_one_gpu_at_65536_tokens():
    os.environ.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_worker, args=(2, os.path.join(tmp, "rendezvous")), nprocs=2, join=True)
