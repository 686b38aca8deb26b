"""SequenceParallel on gloo (CPU): 2 and 4 processes, each rank's output shard and its shards'
q, k, v gradients equal to the single-process op's on the same inputs and decisions.

Every built-in pattern (Dense, QKDrop, Hash, TopKFeatures, Hybrid, PerHead with dense heads on
several ranks), grouped-query attention in each of the three head splits (whole kv groups per
rank; Hkv < P, one kv head sent to several ranks; groups straddling ranks, one kv copy per query
head), global and per-rank decisions, decisions made after the all-to-all by each rank's
criteria, a sub-group of a 2-D DeviceMesh, :func:`broadcast_decisions`, and hypothesis-drawn shapes, specs and decisions
(drawn here, checked inside the spawned job: one spawn per world size, since each costs
seconds). Also the head split's bookkeeping and the errors. CPU only; no test depends on speed.
"""

from __future__ import annotations

import functools
import os
import re
import tempfile
from datetime import timedelta

import pytest
import torch
import torch.multiprocessing as mp
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse.distributed import SequenceParallel, broadcast_decisions, local_spec, split_heads
from tilesparse.testing import attention_inputs, decisions, specs

BACKEND = "executor"  # the kernels' torch model: the index tensors are built on the rank's heads
QKD, HASH, TOPK = ts.QKDrop(keep=0.6), ts.Hash(buckets=4), ts.TopKFeatures(k=4)

# (spec, B, H, Hkv, T, causal): every pattern, and each GQA split at both world sizes
FIXED = [
    (ts.Dense(), 1, 4, 4, 64, True),
    (QKD, 2, 4, 2, 64, True),
    (HASH, 1, 4, 1, 64, True),  # Hkv < P: one kv head copied to every rank
    (ts.Hash(buckets=4, attend_self=False), 1, 8, 2, 64, False),
    (TOPK, 1, 4, 2, 64, True),
    (ts.Hybrid(parts=[ts.Hash(buckets=2), QKD]), 1, 8, 4, 64, True),
    (ts.Hybrid(parts=[QKD, TOPK]), 1, 4, 4, 64, False),
    (ts.PerHead(dense_heads=[0, 3, 5], rest=HASH), 1, 8, 2, 64, True),  # dense heads on several ranks
    (ts.PerHead(dense_heads=[0, 1], rest=QKD), 1, 4, 1, 64, True),  # rank 0 all dense at P=2
    (HASH, 1, 12, 3, 48, True),  # G=4 straddles ranks at P=2 and P=4: one kv copy per query head
]


def test_head_split_covers_every_query_head_with_its_kv_head():
    for H, Hkv, P in [(4, 4, 2), (4, 2, 2), (4, 1, 2), (4, 2, 4), (8, 2, 4), (12, 3, 2), (12, 3, 4), (32, 8, 8),
                      (32, 8, 64 // 2), (6, 2, 3)]:  # fmt: skip
        s = split_heads(H, Hkv, P)
        G, Hl = H // Hkv, H // P
        assert [h for r in s.q_heads for h in r] == list(range(H))
        assert len({len(kv) for kv in s.kv_heads}) == 1  # the all-to-all sends equal blocks
        n = s.local_kv_heads
        assert Hl % n == 0
        for r in range(P):  # local query head i reads local kv head i // (Hl / n): the op's GQA rule
            assert [s.kv_heads[r][i // (Hl // n)] for i in range(Hl)] == [h // G for h in s.q_heads[r]]
    assert split_heads(32, 8, 2).kv_copies == 1 and split_heads(32, 8, 16).kv_copies == 2
    assert split_heads(12, 3, 2).kv_copies == 4


def test_head_split_errors_name_the_sizes():
    with pytest.raises(ValueError, match=r"H=6 to be a multiple of the group size 4"):
        split_heads(6, 2, 4)
    with pytest.raises(ValueError, match=r"H=6 must be a multiple of the kv heads Hkv=4"):
        split_heads(6, 4, 2)


def test_local_spec_renumbers_dense_heads():
    spec = ts.PerHead(dense_heads=[0, 3, 5], rest=HASH)
    assert local_spec(spec, range(0, 2)) == ts.PerHead(dense_heads=[0], rest=HASH)
    assert local_spec(spec, range(2, 4)) == ts.PerHead(dense_heads=[1], rest=HASH)
    assert local_spec(spec, range(6, 8)) == HASH
    assert local_spec(HASH, range(2, 4)) == HASH


def test_needs_an_initialized_process_group():
    with pytest.raises(RuntimeError, match="init_process_group"):
        SequenceParallel(ts.compile(ts.Dense(), backend=BACKEND))


def _hypothesis_cases(world: int, n: int) -> list[tuple]:
    """``n`` cases drawn by hypothesis (deterministically): shapes with H a multiple of
    ``world``, a spec, its decisions (edge cases included) and inputs."""
    cases: list[tuple] = []

    @settings(max_examples=n, derandomize=True, database=None, deadline=None)
    @given(data=st.data())
    def draw(data):
        Hkv = data.draw(st.sampled_from([1, 2, 3]), label="Hkv")
        G = data.draw(st.sampled_from([g for g in (1, 2, 4) if (Hkv * g) % world == 0] or [world]), label="G")
        H = Hkv * G
        Ts = data.draw(st.integers(1, 24), label="shard length")
        q, k, v = data.draw(attention_inputs(batch=st.integers(1, 2), heads=H, kv_heads=Hkv, seqlen=world * Ts,
                                             head_dim=16, dtype=torch.float32))  # fmt: skip
        spec = data.draw(specs(heads=H, max_buckets=4, max_k=4))
        dec = data.draw(decisions(spec, tuple(q.shape)))
        causal = data.draw(st.booleans(), label="causal")
        label = f"drawn {spec} q{tuple(q.shape)} k{tuple(k.shape)} causal={causal}"
        cases.append((label, spec, q.detach(), k.detach(), v.detach(), dec, causal, "reference"))

    draw()
    return [c for c in cases if c[2].shape[1] % world == 0]


def _inputs(B: int, H: int, Hkv: int, T: int, seed: int, D: int = 16):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, h, T, D, generator=g) for h in (H, Hkv, Hkv))


def _run_sharded(sp: SequenceParallel, rank: int, world: int, q, k, v, go, **kw):
    """The sharded call on this rank's shards: its output shard and its shards' gradients."""
    Ts = q.shape[2] // world
    sl = slice(rank * Ts, (rank + 1) * Ts)
    shards = [t[:, :, sl].clone().requires_grad_() for t in (q, k, v)]
    out = sp(*shards, **kw)
    out.backward(go[:, :, sl])
    return sl, out, [s.grad for s in shards]


def _single(attn, q, k, v, go, dec):
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = attn(*leaves, decisions=dec)
    out.backward(go)
    return out, [t.grad for t in leaves]


def _check(label: str, sl, got, want, failures: list[str]) -> None:
    names = ("out", "dq", "dk", "dv")
    for name, a, b in zip(names, got, want, strict=True):
        try:
            torch.testing.assert_close(a, b[:, :, sl], rtol=1e-5, atol=1e-5)
        except AssertionError as e:
            failures.append(f"{label}: {name}: {e}")


def _expected(cases: list[tuple]) -> list[tuple]:
    """Each case (label, spec, q, k, v, decisions, causal, backend) with the single-process
    op's output and gradients for a fixed upstream gradient: computed once, here, for every rank."""
    out = []
    for label, spec, q, k, v, dec, causal, backend in cases:
        attn = ts.compile(spec, causal=causal, backend=backend)
        go = torch.randn(q.shape, generator=torch.Generator().manual_seed(7))
        o, grads = _single(attn, q, k, v, go, dec)
        out.append((label, attn, q, k, v, dec, go, [o.detach(), *grads]))
    return out


@functools.cache
def _fixed_expected() -> tuple:
    """The fixed cases and their single-process results, shared by both world sizes."""
    return tuple(_expected(_fixed_cases()))


def _fixed_cases() -> list[tuple]:
    cases = []
    for i, (spec, B, H, Hkv, T, causal) in enumerate(FIXED):
        q, k, v = _inputs(B, H, Hkv, T, seed=i)
        dec = ts.compile(spec).decide(q, k, generator=torch.Generator().manual_seed(i))
        cases.append((f"{spec} B={B} H={H} Hkv={Hkv} T={T} causal={causal}", spec, q, k, v, dec, causal, BACKEND))
    return cases


def _worker(rank: int, world: int, init_file: str, cases_file: str) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=120))  # fmt: skip
    failures: list[str] = []
    group = dist.group.WORLD
    cases = torch.load(cases_file, weights_only=False)

    # every built-in pattern and hypothesis' draws, given global decisions (the same on every
    # rank), against the single-process op's output and gradients computed by the parent
    for label, attn, q, k, v, dec, go, want in cases:
        sl, o, g = _run_sharded(SequenceParallel(attn, group), rank, world, q, k, v, go, decisions=dec)
        _check(f"P={world} {label}", sl, [o, *g], want, failures)

    # per-rank decisions made after the all-to-all by each rank's criteria (its own seed), then
    # given back as this rank's (B, H/P, T) slice; gathered, they drive the single-process op
    spec = ts.Hybrid(parts=[ts.Hash(buckets=4), QKD])
    attn = ts.compile(spec, backend=BACKEND)
    q, k, v = _inputs(1, 4, 2, 64, seed=100)
    go = torch.randn(q.shape, generator=torch.Generator().manual_seed(7))
    sp = SequenceParallel(attn, group)
    Ts = q.shape[2] // world
    mine = sp.decide(q[:, :, rank * Ts : (rank + 1) * Ts], k[:, :, rank * Ts : (rank + 1) * Ts],
                     generator=torch.Generator().manual_seed(1000 + rank))  # fmt: skip
    assert mine.q_bucket.shape == (1, 4 // world, 64), mine
    full = sp.gather_decisions(mine)
    out, grads = _single(attn, q, k, v, go, full)
    sl, o, g = _run_sharded(sp, rank, world, q, k, v, go, decisions=mine)
    _check(f"P={world} per-rank decisions", sl, [o, *g], [out, *grads], failures)
    # the call's own criteria, the same generator seed: the same decisions as decide() made
    sl, o, g = _run_sharded(sp, rank, world, q, k, v, go, generator=torch.Generator().manual_seed(1000 + rank))
    _check(f"P={world} criteria after the all-to-all", sl, [o, *g], [out, *grads], failures)
    # the default group: the same results, and the op holds c10d's None for it, not the group's
    # object (which would outlive destroy_process_group() in the op and in its autograd graph)
    default = SequenceParallel(attn)
    if default.group is not None:
        failures.append(f"P={world}: SequenceParallel(attn) holds {default.group!r} for the default group")
    sl, o, g = _run_sharded(default, rank, world, q, k, v, go, decisions=mine)
    _check(f"P={world} the default group", sl, [o, *g], [out, *grads], failures)

    # a DeviceMesh dimension: the sequence-parallel dim of a (dp, sp) mesh, or the whole 1-D mesh
    shape = (2, world // 2) if world >= 4 else (world,)
    names = ("dp", "sp") if len(shape) == 2 else ("sp",)
    mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
    sp_mesh = SequenceParallel(attn, (mesh, "sp") if len(shape) == 2 else mesh)
    r, w = sp_mesh.rank, sp_mesh.world
    assert w == shape[-1], (w, shape)
    q, k, v = _inputs(1, 4, 2, 32, seed=200)
    mesh_dec = attn.decide(q, k, generator=torch.Generator().manual_seed(3))
    go = torch.randn(q.shape, generator=torch.Generator().manual_seed(7))
    out, grads = _single(attn, q, k, v, go, mesh_dec)
    sl, o, g = _run_sharded(sp_mesh, r, w, q, k, v, go, decisions=mesh_dec)
    _check(f"P={world} DeviceMesh {shape}", sl, [o, *g], [out, *grads], failures)

    # broadcast_decisions: every rank ends with rank 0's, a bool field still bool, None kept
    got = broadcast_decisions(attn.decide(q, k, generator=torch.Generator().manual_seed(50 + rank)), src=0)
    for name, t in attn.decide(q, k, generator=torch.Generator().manual_seed(50)).items():
        u = getattr(got, name)
        if (t is None) != (u is None) or (t is not None and (u.dtype != t.dtype or not torch.equal(u, t))):
            failures.append(f"P={world}: broadcast_decisions gave {name} = {u} on rank {rank}, not rank 0's {t}")

    # errors, raised before any collective (every rank raises the same)
    for call, match in [
        (lambda: sp(*_inputs(1, 3 * world - 1, 1, world, seed=0)), "multiple of the group size"),
        (lambda: sp(*_inputs(1, 4, 2, world, seed=0), decisions=mesh_dec), r"decisions.q_keep must be \(B, 4, "),
    ]:
        try:
            call()
            failures.append(f"P={world}: no error (wanted {match!r})")
        except ValueError as e:
            if not re.search(match, str(e)):
                failures.append(f"P={world}: error {e!r} does not match {match!r}")

    dist.barrier()
    dist.destroy_process_group()
    if failures:
        raise AssertionError(f"rank {rank}:\n" + "\n".join(failures))


def _start(fn, *, args: tuple, nprocs: int) -> None:
    """torch.multiprocessing's spawn, through a fork server that imported torch, tilesparse and
    this module once: each process then starts in a fraction of a second instead of seconds of
    imports (the server itself never runs torch ops, so forking it is safe)."""
    import multiprocessing

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch.distributed", "tilesparse", "tilesparse.distributed", __name__])
    mp.start_processes(fn, args=args, nprocs=nprocs, join=True, start_method="forkserver")


@pytest.mark.parametrize("world", [2, 4])
def test_sequence_parallel_equals_single_process_op(world: int):
    drawn = _hypothesis_cases(world, n=6)
    assert len(drawn) >= 3, "hypothesis drew too few cases with H a multiple of the world size"
    cases = [*_fixed_expected(), *_expected(drawn)]
    with tempfile.TemporaryDirectory() as tmp:
        env = os.environ.get("OMP_NUM_THREADS")
        os.environ["OMP_NUM_THREADS"] = "1"
        try:
            # the cases travel as a file: tensors in the arguments would travel as shared-memory fds
            torch.save(cases, os.path.join(tmp, "cases.pt"))
            _start(_worker, args=(world, os.path.join(tmp, "rendezvous"), os.path.join(tmp, "cases.pt")), nprocs=world)
        finally:
            if env is None:
                os.environ.pop("OMP_NUM_THREADS")
            else:
                os.environ["OMP_NUM_THREADS"] = env
