"""``SequenceParallel``: a compiled op run head-parallel over a sequence-sharded process group.

Rank r of a group of P holds tokens [r*T/P, (r+1)*T/P) of q (B, H, T/P, D) and k, v
(B, Hkv, T/P, D), as the model's other sequence-sharded layers leave them. One all-to-all gives
it H/P query heads and their kv heads over the whole sequence (:mod:`.heads` says which, GQA
included); the op runs there, its criteria deciding on full sequences; a second all-to-all
returns the output's sequence shard (B, H, T/P, D). Exact: every decision and every masked
element lives inside one head, so the result is the single-process op's, shard for shard.

Decisions. ``decisions=`` takes the op's decisions for the whole sequence, either for all H
heads (what ``attn.decide(q, k)`` returns on the unsharded inputs; every rank passes the same
and keeps its heads' slice) or for the rank's H/P heads only (what :meth:`SequenceParallel.decide`
returns); the head dimension tells which. Criteria randomness: without ``decisions=`` each rank
runs the criteria on its own heads, drawing from the call's ``generator`` (or torch's default
one). Generators seeded identically on every rank draw the same stream for different heads (rank
0's head 0 and rank 1's head 0 get the same Bernoulli draw and LSH rotation): give each rank its
own seed (e.g. seed + rank) for independent heads. Either way the ranks' decisions, gathered
with :meth:`SequenceParallel.gather_decisions`, give the single-process op the same result.

PerHead's ``dense_heads`` are global head indices: the rank runs a PerHead of its own dense
heads, renumbered from its first head (:func:`local_spec`).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..api import CompiledAttention
from ..api import compile as compile_spec
from ..patterns import Decisions, PerHead
from .exchange import heads_to_sequence, sequence_to_heads
from .heads import HeadSplit, split_heads

__all__ = ["SequenceParallel", "local_spec", "resolve_group"]


def resolve_group(group):
    """The ProcessGroup of ``group``: None (the default group), a ProcessGroup, a 1-D DeviceMesh,
    or a (DeviceMesh, dim) pair with dim a mesh dimension's index or name."""
    import torch.distributed as dist

    if not dist.is_available():
        raise RuntimeError("tilesparse.distributed needs torch.distributed, which this torch build lacks")
    if not dist.is_initialized():
        raise RuntimeError(
            "torch.distributed is not initialized: call torch.distributed.init_process_group(...) "
            "(or torchrun) before SequenceParallel"
        )
    from torch.distributed.device_mesh import DeviceMesh

    if group is None:
        return dist.group.WORLD
    if isinstance(group, DeviceMesh):
        if group.ndim != 1:
            raise ValueError(
                f"group is a {group.ndim}-D DeviceMesh; pass (mesh, dim) to name the sequence-parallel dimension"
            )
        return group.get_group()
    if isinstance(group, tuple) and len(group) == 2 and isinstance(group[0], DeviceMesh):
        return group[0].get_group(group[1])
    if isinstance(group, dist.ProcessGroup):
        return group
    raise TypeError(
        f"group must be None, a ProcessGroup, a 1-D DeviceMesh or (DeviceMesh, dim), got {type(group).__name__}"
    )


def local_spec(spec, heads: range):
    """The spec a rank attending global query heads ``heads`` runs: PerHead's dense heads
    renumbered from ``heads.start`` (the others dropped); every other spec unchanged."""
    if not isinstance(spec, PerHead):
        return spec
    dense = tuple(h - heads.start for h in spec.dense_heads if h in heads)
    return PerHead(dense_heads=dense, rest=spec.rest) if dense else spec.rest


class SequenceParallel:
    """``attn`` over a sequence-sharded group: ``sp(q, k, v)`` as ``attn(q, k, v)`` on shards.

    q (B, H, T/P, D), k, v (B, Hkv, T/P, D) on each rank, contiguous equal shards in rank order;
    returns the rank's (B, H, T/P, D) shard of the output, differentiable w.r.t. q, k and v.
    H must be a multiple of P. ``group`` is None (the default group), a ProcessGroup, a 1-D
    DeviceMesh or (DeviceMesh, dim).
    """

    def __init__(self, attn: CompiledAttention, group=None):
        if not isinstance(attn, CompiledAttention):
            raise TypeError(
                f"attn must be a tilesparse CompiledAttention (tilesparse.compile(...)), got {type(attn).__name__}"
            )
        self.attn = attn
        resolved = resolve_group(group)  # checks torch.distributed and the group now
        # the default group kept as None (c10d's own name for it), not as its object: an op that
        # held it would keep it alive past destroy_process_group() to interpreter teardown,
        # where gloo's worker threads can abort the process
        self.group = None if group is None else resolved
        self._ops: dict[range, CompiledAttention] = {}

    def __repr__(self) -> str:
        return f"SequenceParallel({self.attn}, world={self.world}, rank={self.rank})"

    @property
    def world(self) -> int:
        import torch.distributed as dist

        return dist.get_world_size(self.group)

    @property
    def rank(self) -> int:
        import torch.distributed as dist

        return dist.get_rank(self.group)

    def split(self, heads: int, kv_heads: int) -> HeadSplit:
        """Which query and kv heads every rank attends (:func:`split_heads`)."""
        return split_heads(heads, kv_heads, self.world)

    def local_op(self, split: HeadSplit) -> CompiledAttention:
        """The op this rank runs on its heads: ``attn`` itself, or for PerHead a compiled
        :func:`local_spec` with ``attn``'s options (built once per head range)."""
        heads = split.q_heads[self.rank]
        spec = local_spec(self.attn.spec, heads)
        if spec == self.attn.spec:
            return self.attn
        op = self._ops.get(heads)
        if op is None:
            a = self.attn
            op = compile_spec(spec, causal=a.causal, scale=a.scale, backend=a.backend, validate=a.validate)
            self._ops[heads] = op
        return op

    def __call__(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        decisions: Decisions | None = None,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """The rank's output shard (B, H, T/P, D); ``decisions`` for the whole sequence (all H
        heads, or this rank's H/P heads), ``generator`` for the criteria of this rank's heads."""
        q, k, v = _autocast(q, k, v)
        split = self._check(q, k, v)
        qh, kh, vh = sequence_to_heads(q, k, v, split, self.group)
        op = self.local_op(split)
        dec = None if decisions is None else self.local_decisions(decisions, split, seqlen=qh.shape[2])
        out = op(qh, kh, vh, decisions=dec, generator=generator)
        return heads_to_sequence(out, split, self.group)

    def decide(self, q: Tensor, k: Tensor, *, generator: torch.Generator | None = None) -> Decisions:
        """The decisions this rank's criteria make for its H/P heads over the whole sequence,
        from the shards q, k (one all-to-all, no gradient)."""
        with torch.no_grad():
            split = self._check(q, k, k)
            qh, kh, _ = sequence_to_heads(q, k, k, split, self.group)
            return self.local_op(split).decide(qh, kh, generator=generator)

    def local_decisions(self, decisions: Decisions, split: HeadSplit, *, seqlen: int) -> Decisions:
        """This rank's slice of ``decisions``: (B, H, T, ...) sliced to its heads, or
        (B, H/P, T, ...) taken as they are."""
        if not isinstance(decisions, Decisions):
            raise TypeError(f"decisions must be a tilesparse.Decisions, got {type(decisions).__name__}")
        heads = split.q_heads[self.rank]
        fields = {}
        for name, t in decisions.items():
            if t is None:
                continue
            if t.dim() < 3 or t.shape[2] != seqlen or t.shape[1] not in (split.heads, split.local_heads):
                raise ValueError(
                    f"decisions.{name} must be (B, {split.heads}, {seqlen}, ...) for all heads or "
                    f"(B, {split.local_heads}, {seqlen}, ...) for this rank's heads, over the whole "
                    f"sequence of {seqlen} tokens; got {tuple(t.shape)}"
                )
            fields[name] = t[:, heads.start : heads.stop] if t.shape[1] == split.heads else t
        out = Decisions(**fields)
        if decisions.trusted_for(self.attn.spec):
            out.trusted(self.local_op(split).spec)
        return out

    def gather_decisions(self, local: Decisions) -> Decisions:
        """Every rank's (B, H/P, T, ...) decisions joined into (B, H, T, ...) on every rank (an
        all-gather): what the single-process op takes to give the same result."""
        import torch.distributed as dist

        fields = {}
        for name, t in local.items():
            if t is None:
                continue
            parts = [torch.empty_like(t) for _ in range(self.world)]
            dist.all_gather(parts, t.contiguous(), group=self.group)
            fields[name] = torch.cat(parts, dim=1)
        return Decisions(**fields)

    def _check(self, q: Tensor, k: Tensor, v: Tensor) -> HeadSplit:
        for name, t in (("q", q), ("k", k), ("v", v)):
            if not isinstance(t, Tensor) or t.dim() != 4:
                raise ValueError(f"{name} must be a 4-D tensor (B, heads, T/P, D) sharded along T, got {_shape(t)}")
        if k.shape != v.shape:
            raise ValueError(
                f"k and v must have the same shape (B, Hkv, T/P, D), got {tuple(k.shape)} and {tuple(v.shape)}"
            )
        if (q.shape[0], q.shape[2], q.shape[3]) != (k.shape[0], k.shape[2], k.shape[3]):
            raise ValueError(
                f"q {tuple(q.shape)} and k {tuple(k.shape)} must agree in batch, shard length and head dim "
                "(every rank holds the same tokens of q, k and v)"
            )
        if not q.dtype == k.dtype == v.dtype:
            raise TypeError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
        return self.split(q.shape[1], k.shape[1])


def _autocast(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """q, k, v in the autocast dtype when autocast is on (as the op casts them): the all-to-all
    then sends the dtype the kernels read."""
    if isinstance(q, Tensor) and torch.is_autocast_enabled(q.device.type):
        dtype = torch.get_autocast_dtype(q.device.type)
        q, k, v = (t.to(dtype) if isinstance(t, Tensor) and t.is_floating_point() else t for t in (q, k, v))
    return q, k, v


def _shape(t) -> str:
    return str(tuple(t.shape)) if isinstance(t, Tensor) else type(t).__name__
