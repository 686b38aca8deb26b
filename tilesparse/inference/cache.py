"""``KVCache``: a key/value cache that knows the pattern it serves.

One cache holds one attention layer's past tokens for a batch, up to ``max_tokens`` each,
and is filled by the op it was made by (``attn.new_cache(...)``, then
``attn(q_new, k_new, v_new, cache=cache)``: append the new tokens, then attend). It stores:

- K and V once per kv head (grouped-query attention shares them), in slots: a token takes a
  slot of a kv head only when some query head of that head's group may read it. Under QKDrop a
  key that every head of the group drops is never stored (``memory_bytes()`` counts the slots
  used; the buffers hold ``kv_capacity`` slots, ``max_tokens`` unless given smaller);
- each token's key-side decisions, per query head (keep flags, buckets, feature supports);
- TopKFeatures: no dense K for the feature-sparse heads: per query head the ``k`` kept
  feature ids (int16) and their values, V dense;
- a per-query-head key index: the cached positions a head may read, grouped by bucket (one
  group without Hash), in position order inside a group; appending merges the new tokens in
  with one scatter (no sort, no host read), so a decode query reads its bucket's slice only.

Decisions per chunk. Given ``decisions=`` for the new tokens are used as they are. Otherwise
the spec's criteria run on the new tokens: the built-in ``lsh`` hashes with rotations the cache
drew once (from ``seed``), so a token's bucket does not depend on how the sequence is chunked;
``topk_abs`` decides each token alone; other criteria (``bernoulli``, user criteria) are called
on each chunk with the cache's generator, so their random draws differ from a whole-sequence
call: pass decisions to compare against one. :meth:`KVCache.decide` is the same rule for any
q, k (a whole sequence gives the per-token decisions a chunked fill makes).

Graph capture: a decode step (``attn(q, k, v, cache=cache)`` with one token, decisions made by
the cache or given with ``validate=False``) reads nothing back to the host when
``cache.record_reads`` is False and ``kv_capacity == max_tokens``: appending is scatters, the
Triton decode kernel's grid comes from the capacity.

Exactness: the tokens' outputs equal the rows of the same op run on the whole sequence with
the same decisions (tests/test_kv_cache.py, a property test over patterns, GQA, chunkings).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ..ir import check_inputs
from ..patterns import Decisions, Hash, Hybrid, PerHead, QKDrop, SpecBase, TopKFeatures
from ..patterns.criteria import lsh_matmul

__all__ = ["KVCache"]


def _parts(spec: SpecBase) -> tuple[SpecBase, ...]:
    spec = spec.rest if isinstance(spec, PerHead) else spec
    return tuple(spec.parts) if isinstance(spec, Hybrid) else (spec,)


@dataclass(frozen=True)
class StepReads:
    """What one decode step read, summed over the batch and query heads."""

    keys: int  # key rows read (each: K or its compressed form, and V)
    cached: int  # key rows a dense decode would read (every cached token, per query head)
    bytes: int  # bytes of K/V (or compressed K and V) and index entries read
    dense_bytes: int  # bytes a dense decode reads (K and V of every cached token, per kv head)


class KVCache:
    """Pattern-aware KV cache of one attention layer; made by ``CompiledAttention.new_cache``,
    which documents the arguments and holds their defaults (this constructor takes each one)."""

    def __init__(
        self,
        spec: SpecBase,
        *,
        causal: bool,
        batch: int,
        max_tokens: int,
        heads: int,
        kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str,
        kv_capacity: int | None,
        seed: int,
    ):
        for name, n in (("batch", batch), ("max_tokens", max_tokens), ("heads", heads), ("kv_heads", kv_heads)):
            if not isinstance(n, int) or n < 1:
                raise ValueError(f"{name} must be an int >= 1, got {n!r}")
        if heads % kv_heads:
            raise ValueError(f"heads={heads} must be a multiple of kv_heads={kv_heads} (grouped-query attention)")
        # the inputs check names a bad head dim or dtype as the op does
        probe = torch.empty((1, heads, 1, head_dim), dtype=dtype) if isinstance(head_dim, int) and head_dim > 0 else None
        if probe is None:
            raise ValueError(f"head_dim must be an int >= 1, got {head_dim!r}")
        check_inputs(probe, probe[:, :kv_heads], probe[:, :kv_heads])
        cap = max_tokens if kv_capacity is None else kv_capacity
        if not isinstance(cap, int) or not 1 <= cap <= max_tokens:
            raise ValueError(f"kv_capacity must be an int in [1, max_tokens={max_tokens}], got {kv_capacity!r}")
        self.spec, self.causal = spec, causal
        self.batch, self.max_tokens, self.heads, self.kv_heads = batch, max_tokens, heads, kv_heads
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:  # "cuda" means the current device, as for tensors
            device = torch.device("cuda", torch.cuda.current_device())
        self.head_dim, self.dtype, self.device = head_dim, dtype, device
        self.kv_capacity = cap
        self.length = 0  # tokens appended so far (the host knows every call's size)
        B, H, Hkv, T, D = batch, heads, kv_heads, max_tokens, head_dim
        dev = self.device
        parts = _parts(spec)
        self._dense = spec.dense_heads_mask(H)  # (H,) bool or None
        self._dense = torch.zeros(H, dtype=torch.bool) if self._dense is None else self._dense
        self._dense_dev = self._dense.to(dev)  # on the device: no copy inside a captured step
        self._hash = next((p for p in parts if isinstance(p, Hash)), None)
        self._drop = next((p for p in parts if isinstance(p, QKDrop)), None)
        self._topk = next((p for p in parts if isinstance(p, TopKFeatures)), None)
        if self._topk is not None and self._topk.k > D:
            raise ValueError(f"TopKFeatures.k={self._topk.k} exceeds the head dim D={D}")
        # dense K is kept for kv heads whose group has a query head scoring on all features
        group = H // Hkv
        self._dense_k = self._dense.view(Hkv, group).any(1)
        if self._topk is None:
            self._dense_k = torch.ones(Hkv, dtype=torch.bool)
        self.v = torch.zeros((B, Hkv, cap, D), dtype=dtype, device=dev)
        self.k = torch.zeros((B, Hkv, cap, D), dtype=dtype, device=dev) if bool(self._dense_k.any()) else None
        self.slot = torch.full((B, Hkv, T), -1, dtype=torch.int32, device=dev)  # position -> slot, -1 not stored
        self.n_slots = torch.zeros((B, Hkv), dtype=torch.int64, device=dev)
        self.k_keep = torch.zeros((B, H, T), dtype=torch.bool, device=dev) if self._drop else None
        self.k_bucket = torch.zeros((B, H, T), dtype=torch.int32, device=dev) if self._hash else None
        self.k_ids = self.k_vals = None
        if self._topk is not None:
            self.k_ids = torch.zeros((B, H, T, self._topk.k), dtype=torch.int16, device=dev)
            self.k_vals = torch.zeros((B, H, T, self._topk.k), dtype=dtype, device=dev)
        # key index: per (b, h) the readable positions grouped by bucket, and each group's start
        self.n_groups = self._hash.buckets if self._hash else 1
        self.index = torch.zeros((B, H, T + 1), dtype=torch.int32, device=dev)  # slot T: a dump for scatters
        self.starts = torch.zeros((B, H, self.n_groups + 1), dtype=torch.int64, device=dev)
        # randomness: lsh rotations drawn once; other criteria draw from the generator per chunk
        g = torch.Generator(device="cpu").manual_seed(seed)
        self._rotations = None
        if self._hash is not None and self._hash.criterion == "lsh" and self._hash.buckets > 1:
            half = math.ceil(self._hash.buckets / 2)
            self._rotations = torch.randn((H, D, half), generator=g, dtype=torch.float32).to(device=dev, dtype=dtype)
        self.generator = torch.Generator(device=dev).manual_seed(seed + 1)
        self.last_reads: StepReads | None = None
        self.record_reads = True  # count each decode step's reads (a host read: off for graph capture)
        self.decode_kernel = "auto"  # decode_step's kernel: "auto", "torch" or "triton"

    def __repr__(self) -> str:
        return (
            f"KVCache({self.spec}, B={self.batch}, H={self.heads}, Hkv={self.kv_heads}, D={self.head_dim}, "
            f"{self.length}/{self.max_tokens} tokens, {self.memory_bytes()} bytes used)"
        )

    # -- decisions ------------------------------------------------------------------------------

    def decide(self, q: Tensor, k: Tensor) -> Decisions:
        """The decisions the cache makes for q (B, H, T, D) and k (B, Hkv, T, D) (see the
        module docstring): ``lsh`` with the cache's rotations, other criteria per call."""
        inputs = check_inputs(q, k, k)
        kq = inputs.k_per_query_head()
        out = Decisions()
        with torch.no_grad():
            for p in _parts(self.spec):
                if isinstance(p, Hash) and p.criterion == "lsh":
                    if self._rotations is None:  # one bucket
                        shape = q.shape[:3]
                        qb = torch.zeros(shape, dtype=torch.int32, device=q.device)
                        kb = torch.zeros(kq.shape[:3], dtype=torch.int32, device=q.device)
                    else:
                        qb, kb = lsh_matmul(q, kq, self._rotations.to(q.dtype), p.buckets)
                    out = out.merge(Decisions(q_bucket=qb, k_bucket=kb))
                elif isinstance(p, QKDrop | Hash | TopKFeatures):
                    out = out.merge(p.decide(q, kq, generator=self.generator))
        return out.trusted(self.spec)

    # -- appending ------------------------------------------------------------------------------

    def append(self, k: Tensor, v: Tensor, decisions: Decisions) -> None:
        """Store n new tokens: k, v (B, Hkv, n, D) and their key-side decisions (B, H, n)."""
        B, Hkv, n, D = k.shape
        L = self.length
        if (B, Hkv, D) != (self.batch, self.kv_heads, self.head_dim) or v.shape != k.shape:
            raise ValueError(
                f"k and v must be (B={self.batch}, Hkv={self.kv_heads}, n, D={self.head_dim}) for this cache, "
                f"got {tuple(k.shape)} and {tuple(v.shape)}"
            )
        if k.dtype != self.dtype or k.device != self.device:
            raise ValueError(f"k, v must be {self.dtype} on {self.device}, got {k.dtype} on {k.device}")
        if L + n > self.max_tokens:
            raise ValueError(f"the cache holds {L} of max_tokens={self.max_tokens} tokens; {n} more do not fit")
        H, group = self.heads, self.heads // self.kv_heads
        dense = self._dense_dev.view(1, H, 1)
        keep = decisions.k_keep if self._drop else torch.ones((B, H, n), dtype=torch.bool, device=self.device)
        readable = keep | dense  # per query head: may a query of this head read the key
        # slots: a token is stored for a kv head when some query head of its group may read it
        stored = readable.view(B, Hkv, group, n).any(2)
        slots = self.n_slots.unsqueeze(-1) + stored.cumsum(-1) - 1  # (B, Hkv, n)
        # a host read, only where slots can run out (kv_capacity < max_tokens)
        if self.kv_capacity < self.max_tokens and int((self.n_slots + stored.sum(-1)).max()) > self.kv_capacity:
            raise ValueError(f"kv_capacity={self.kv_capacity} slots per kv head are full; make the cache larger")
        self.slot[:, :, L : L + n] = torch.where(stored, slots, -1).to(torch.int32)
        dump = torch.where(stored, slots, self.kv_capacity)  # unstored rows write past the end, dropped
        self._write_rows(self.v, v, dump)
        if self.k is not None:
            self._write_rows(self.k, k, dump)
        self.n_slots += stored.sum(-1)
        if self.k_keep is not None:
            self.k_keep[:, :, L : L + n] = decisions.k_keep
        if self.k_bucket is not None:
            self.k_bucket[:, :, L : L + n] = decisions.k_bucket.to(torch.int32)
        if self.k_ids is not None:
            ids = decisions.k_support.long()
            kq = k.repeat_interleave(group, dim=1) if group > 1 else k
            self.k_ids[:, :, L : L + n] = ids.to(torch.int16)
            self.k_vals[:, :, L : L + n] = torch.gather(kq, -1, ids)
        bucket = torch.zeros((B, H, n), dtype=torch.int64, device=self.device)
        if self._hash:  # dense heads read every key: one group, 0
            bucket = torch.where(dense, 0, decisions.k_bucket.long())
        self._merge_index(torch.where(readable, bucket, -1), L)
        self.length = L + n

    @staticmethod
    def _write_rows(buf: Tensor, rows: Tensor, slots: Tensor) -> None:
        """buf[b, h, slots[b, h, t]] = rows[b, h, t], slots == capacity dropped."""
        B, Hkv, cap, D = buf.shape
        padded = torch.cat([buf, buf.new_zeros((B, Hkv, 1, D))], dim=2)
        padded.scatter_(2, slots.unsqueeze(-1).expand(-1, -1, -1, D), rows)
        buf.copy_(padded[:, :, :cap])

    def _merge_index(self, bucket: Tensor, L: int) -> None:
        """Merge n new positions L.. with buckets ``bucket`` (B, H, n; -1: not readable) into
        the key index: each old entry moves past the new tokens of earlier groups, each new one
        lands after its group's old entries, ranked by position. One scatter, no sort."""
        B, H, n = bucket.shape
        G, T = self.n_groups, self.max_tokens
        valid = bucket >= 0
        # (B, H, n, G); a comparison, not one_hot: one_hot reads its input's range back
        onehot = ((bucket.unsqueeze(-1) == torch.arange(G, device=self.device)) & valid.unsqueeze(-1)).long()
        new_counts = onehot.sum(2)  # (B, H, G)
        old_counts = self.starts[..., 1:] - self.starts[..., :-1]
        new_starts = torch.nn.functional.pad((old_counts + new_counts).cumsum(-1), (1, 0))
        # old entries: entry r of group g goes to r - starts[g] + new_starts[g]
        r = torch.arange(T, device=self.device).expand(B, H, T)
        g = torch.searchsorted(self.starts[..., 1:].contiguous(), r.contiguous(), right=True).clamp(max=G - 1)
        old_valid = r < self.starts[..., -1:]
        dest = torch.where(old_valid, r - self.starts.gather(-1, g) + new_starts.gather(-1, g), T)
        out = torch.zeros_like(self.index)
        out.scatter_(2, dest, self.index[..., :T])
        # new entries: after the group's old entries, in position order
        rank = (onehot.cumsum(2) - 1).gather(-1, bucket.clamp_min(0).unsqueeze(-1)).squeeze(-1)
        b0 = bucket.clamp_min(0)
        dest_new = torch.where(valid, new_starts.gather(-1, b0) + old_counts.gather(-1, b0) + rank, T)
        pos = torch.arange(L, L + n, device=self.device, dtype=torch.int32).expand(B, H, n)
        out.scatter_(2, dest_new, pos)
        self.index.copy_(out)
        self.starts.copy_(new_starts)

    # -- reading --------------------------------------------------------------------------------

    def keys(self, length: int | None = None) -> Tensor | None:
        """Dense K of the first ``length`` tokens by position, (B, Hkv, L, D) (zeros where not
        stored); None when every head scores on compressed keys."""
        return None if self.k is None else self._rows(self.k, self.length if length is None else length)

    def keys_per_query_head(self, length: int | None = None) -> Tensor:
        """K of the first ``length`` tokens as the scores see it, (B, H, L, D): the stored rows
        (zeros where nothing is stored) or, for feature-sparse heads, k~ rebuilt from the
        compressed ids and values."""
        L = self.length if length is None else length
        group = self.heads // self.kv_heads
        out = torch.zeros((self.batch, self.heads, L, self.head_dim), dtype=self.dtype, device=self.device)
        if self.k is not None:
            out.copy_(self._rows(self.k, L).repeat_interleave(group, dim=1))
        if self.k_ids is not None:
            sparse = ~self._dense_dev
            kt = torch.zeros_like(out).scatter_(-1, self.k_ids[:, :, :L].long(), self.k_vals[:, :, :L])
            out[:, sparse] = kt[:, sparse]
        return out

    def values(self, length: int | None = None) -> Tensor:
        """V of the first ``length`` tokens by position, (B, Hkv, L, D) (zeros where not stored)."""
        return self._rows(self.v, self.length if length is None else length)

    def _rows(self, buf: Tensor, L: int) -> Tensor:
        if self._drop is None:  # every token stored: slot == position, a view
            return buf[:, :, :L]
        slot = self.slot[:, :, :L].long()
        rows = torch.gather(buf, 2, slot.clamp_min(0).unsqueeze(-1).expand(-1, -1, -1, self.head_dim))
        return torch.where((slot >= 0).unsqueeze(-1), rows, 0)

    def key_decisions(self, length: int | None = None) -> Decisions:
        """The stored key-side decisions of the first ``length`` tokens."""
        L = self.length if length is None else length
        fields = {}
        if self.k_keep is not None:
            fields["k_keep"] = self.k_keep[:, :, :L]
        if self.k_bucket is not None:
            fields["k_bucket"] = self.k_bucket[:, :, :L]
        if self.k_ids is not None:
            fields["k_support"] = self.k_ids[:, :, :L].to(torch.int32)
        return Decisions(**fields)

    # -- reporting ------------------------------------------------------------------------------

    def memory_bytes(self, *, allocated: bool = False) -> int:
        """Bytes of what the cache holds for its tokens: K/V rows in used slots, compressed
        keys, the key decisions and the index. ``allocated``: the buffers' full size."""
        esize = torch.finfo(self.dtype).bits // 8
        L = self.max_tokens if allocated else self.length
        rows = self.kv_capacity * self.batch * self.kv_heads if allocated else int(self.n_slots.sum())
        total = rows * self.head_dim * esize * (1 if self.k is None else 2)  # V, and K where stored dense
        per_token = self.batch * self.heads
        if self.k_ids is not None:
            total += per_token * L * self._topk.k * (2 + esize)
        if self.k_keep is not None:
            total += per_token * L
        if self.k_bucket is not None:
            total += per_token * L * 4
        if self._hash is not None or self._drop is not None:
            total += per_token * L * 4 + self.starts.numel() * 8  # the key index
        total += self.batch * self.kv_heads * L * 4  # position -> slot
        return total

    def memory_per_token(self) -> float:
        """Bytes per cached token (per sequence of the batch), against a dense cache's
        2 * Hkv * D * element size."""
        return self.memory_bytes() / max(self.length * self.batch, 1)

    def dense_bytes_per_token(self) -> int:
        return 2 * self.kv_heads * self.head_dim * (torch.finfo(self.dtype).bits // 8)

    def explain(self) -> str:
        """The decode plan: what one step stores and reads, per query head."""
        L, esize = self.length, torch.finfo(self.dtype).bits // 8
        lines = [repr(self)]
        dense = int(self._dense.sum())
        if self._hash is not None:
            lines.append(
                f"index: per query head the cached positions grouped by bucket ({self.n_groups} groups); "
                f"a decode query reads the positions of its own bucket (~1/{self.n_groups} of the keys)"
            )
        if self._drop is not None:
            lines.append(
                "dropped keys: not in the index, never read; a key dropped by every query head of a kv group "
                f"is not stored ({int(self.n_slots.sum())} of {self.batch * self.kv_heads * L} token rows stored)"
            )
        if self._topk is not None:
            lines.append(
                f"keys: compressed per query head, {self._topk.k} feature ids (int16) + values "
                f"({self._topk.k * (2 + esize)} bytes a key) instead of {self.head_dim * esize}; V dense; "
                "a score reads q at the key's ids"
            )
        if dense:
            lines.append(f"dense heads: {dense} query heads read every cached key")
        if not (self._hash or self._drop or self._topk):
            lines.append("dense: every query head reads every cached key")
        lines.append(
            f"memory: {self.memory_per_token():.1f} bytes a token vs {self.dense_bytes_per_token()} dense "
            f"(allocated {self.memory_bytes(allocated=True)} bytes)"
        )
        if self.last_reads is not None:
            r = self.last_reads
            lines.append(
                f"last decode step: read {r.keys} of {r.cached} key rows ({100 * r.keys / max(r.cached, 1):.1f}%), "
                f"{r.bytes} bytes vs {r.dense_bytes} for dense decoding"
            )
        return "\n".join(lines)
