"""Shared by the CPU and GPU tests that run over the built-in patterns: one spec of every kind,
sized by the test (a CPU test's T is small, so its bucket counts and kept features are too)."""

from __future__ import annotations

import contextlib
import types

import torch

import tilesparse as ts


def one_of_each_kind(*, keep: float, buckets: int, k: int, hybrid_buckets: int | None = None, hybrid_keep: float = 0.7,
                     perhead_buckets: int | None = None, dense_head: int = 0) -> dict[str, ts.SpecBase]:
    """Dense, QKDrop(keep), Hash(buckets), TopKFeatures(k), a Hybrid of a Hash and a QKDrop, and
    a PerHead with one dense head and Hash on the rest, keyed by kind; the Hybrid's and the
    PerHead's buckets default to ``buckets``."""
    return {
        "dense": ts.Dense(),
        "qkdrop": ts.QKDrop(keep=keep),
        "hash": ts.Hash(buckets=buckets),
        "topk": ts.TopKFeatures(k=k),
        "hybrid": ts.Hybrid(parts=[ts.Hash(buckets=hybrid_buckets or buckets), ts.QKDrop(keep=hybrid_keep)]),
        "perhead": ts.PerHead(dense_heads=[dense_head], rest=ts.Hash(buckets=perhead_buckets or buckets)),
    }


def given_decisions(op: ts.CompiledAttention, q, k) -> ts.Decisions | None:
    """Fresh decisions of ``op``'s criteria as given ones (clones: untrusted, so every call
    checks their ids); None for a pattern without decisions."""
    fields = {n: t.clone() for n, t in op.decide(q, k).items() if t is not None}
    return ts.Decisions(**fields) if fields else None


# the GPU tests' two shapes (B, H, Hkv, D, T): the 4k host-bound one at D=64, and D=128 with
# grouped-query attention at a length that is no multiple of a block
GPU_SHAPES = [(1, 16, 16, 64, 4096), (1, 32, 8, 128, 1000)]


def cuda_inputs(shape: tuple[int, int, int, int, int], *, grad: bool, seed: int = 0):
    """bf16 q (B, H, T, D), k and v (B, Hkv, T, D) on CUDA from one seeded generator."""
    B, H, Hkv, D, T = shape
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn((B, H, T, D), generator=g, device="cuda", dtype=torch.bfloat16, requires_grad=grad)
    k, v = (torch.randn((B, Hkv, T, D), generator=g, device="cuda", dtype=torch.bfloat16, requires_grad=grad)
            for _ in range(2))  # fmt: skip
    return q, k, v


def assert_poison_reaches(folded: list, product: list) -> None:
    """A bad call's output and gradients (out, dq, dk, dv) with the poison folded into the
    forward, against the same call multiplying its output by the poison: the output NaN
    everywhere, and each gradient NaN somewhere, nowhere a finite value but 0 (no plausible
    gradient comes out of a bad call), and NaN only where the product's is. The product's NaN
    reach further: its output gradient is NaN on every row, so a key a computed tile holds
    but no query of it attends gets NaN there and 0 here."""
    assert folded[0].isnan().all()
    for got, want, what in zip(folded[1:], product[1:], ("dq", "dk", "dv"), strict=True):
        assert_poisoned_gradient(got, what)
        assert not (got.isnan() & ~want.isnan()).any(), f"{what}: NaN where the product's gradient is finite"


def assert_poisoned_gradient(grad, what: str = "gradient") -> None:
    """A bad call's gradient: NaN somewhere, and nowhere a finite value but 0."""
    nan = grad.isnan()
    assert nan.any(), what
    assert not grad.masked_fill(nan, 0).any(), f"{what}: finite nonzero values from a poisoned call"


@contextlib.contextmanager
def recorded_workspaces():
    """What the Triton op's split kernels count and store in inside the block, kept alive for
    the test to read after the launches: ``made.works``, the workspaces they take
    (``op.workspace``), and ``made.counters``, each call's split counters after its non-finite
    flags (:func:`counters_after_flags` of ``op._forward``'s, as many as its launches count in).
    Each workspace is filled with NaN here (the op leaves its slots unfilled): a slot read before
    a share stored it poisons the output, and the slots the shares stored are the finite ones."""
    from tilesparse.backends.triton import op

    made = types.SimpleNamespace(works=[], counters=[])
    real_workspace, real_forward = op.workspace, op._forward

    def workspace(device, floats):
        work = real_workspace(device, floats).fill_(float("nan"))
        made.works.append(work)
        return work

    def forward(q, k, v, g, launches, *args, **kwargs):
        out = real_forward(q, k, v, g, launches, *args, **kwargs)
        made.counters.append(counters_after_flags(out[2], launches.counters))
        return out

    op.workspace, op._forward = workspace, forward
    try:
        yield made
    finally:
        op.workspace, op._forward = real_workspace, real_forward


def counters_after_flags(backward_flag: torch.Tensor, n: int) -> torch.Tensor:
    """The ``n`` split counters after a call's two non-finite flags (kernels._split_counters),
    from its backward pass's flag."""
    whole = torch.empty(0, dtype=torch.int32, device=backward_flag.device).set_(backward_flag.untyped_storage())
    start = backward_flag.storage_offset() + 1
    return whole[start : start + n]


def counters_left(made) -> bool:
    """Whether a counter :func:`recorded_workspaces` saw is not back at zero (a split block
    whose last share did not reset its own)."""
    return any(c.any() for c in made.counters)
