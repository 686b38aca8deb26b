"""Which heads each rank of a sequence-parallel group attends: the head split of the all-to-all.

Rank r of P holds the query heads [r*H/P, (r+1)*H/P) over the whole sequence, and the kv heads
those query heads read. With grouped-query attention (G = H/Hkv query heads per kv head) the
split is one of three, chosen for the whole group so every rank receives the same number of kv
heads (the all-to-all sends equal blocks):

- H/P a multiple of G: the rank's kv heads are [r*Hkv/P, (r+1)*Hkv/P), no copy;
- G a multiple of H/P (Hkv < P included): the rank's query heads share one kv head, which is
  sent to each of the G*P/H ranks that read it;
- otherwise (e.g. H=12, Hkv=3, P=2): each query head gets its own copy of its kv head, and the
  rank attends as multi-head attention.

A kv head sent to several ranks (or several times) is an ``index_select`` before the exchange,
so its gradient is the sum of the copies' gradients. Pure bookkeeping: no torch.distributed.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["HeadSplit", "split_heads"]


@dataclass(frozen=True, slots=True)
class HeadSplit:
    """The heads of every rank: ``q_heads[r]`` (a range of global query heads) and
    ``kv_heads[r]`` (the global kv heads rank r receives, in its local order: local query head
    i reads local kv head i // (H/P / len(kv_heads[r])))."""

    heads: int
    kv_heads_total: int
    world: int
    q_heads: tuple[range, ...]
    kv_heads: tuple[tuple[int, ...], ...]

    @property
    def local_heads(self) -> int:
        return self.heads // self.world

    @property
    def local_kv_heads(self) -> int:
        return len(self.kv_heads[0])

    @property
    def kv_copies(self) -> int:
        """How many kv heads the group sends in all, over the Hkv it holds (1 = no copy)."""
        return self.world * self.local_kv_heads // self.kv_heads_total


def split_heads(heads: int, kv_heads: int, world: int) -> HeadSplit:
    """The head split of H query heads and Hkv kv heads over ``world`` ranks; raises when H is
    not a multiple of the world size (each rank must hold whole heads)."""
    if world < 1:
        raise ValueError(f"the world size must be >= 1, got {world}")
    if heads % kv_heads:
        raise ValueError(f"the query heads H={heads} must be a multiple of the kv heads Hkv={kv_heads}")
    if heads % world:
        raise ValueError(
            f"sequence parallelism over {world} ranks needs the query heads H={heads} to be a multiple of "
            f"the group size {world} (each rank attends H/{world} whole heads); use a group of a size "
            f"dividing {heads}"
        )
    local, group = heads // world, heads // kv_heads
    q_heads = tuple(range(r * local, (r + 1) * local) for r in range(world))
    if local % group == 0:  # whole kv groups per rank
        n = local // group
        kv = tuple(tuple(range(r * n, (r + 1) * n)) for r in range(world))
    elif group % local == 0:  # the rank's query heads share one kv head
        kv = tuple((q.start // group,) for q in q_heads)
    else:  # groups straddle ranks: one kv copy per query head
        kv = tuple(tuple(h // group for h in q) for q in q_heads)
    return HeadSplit(heads, kv_heads, world, q_heads, kv)
