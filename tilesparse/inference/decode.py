"""Attending against a :class:`KVCache`: append the new tokens, then attend their queries.

A call with n new tokens (q (B, H, n, D), k and v (B, Hkv, n, D)) appends them and computes
their rows, queries at absolute positions L - n .. L - 1 of the L cached tokens:

- n > 1 (a prefill chunk): the op itself with Tq = n < Tk = L, over the cache's K (k~ rebuilt
  from the compressed keys under TopKFeatures), V and stored key decisions: every backend's
  tile skipping applies, the chunk is one call;
- n = 1 (a decode step): :func:`decode_step`, which reads only what the pattern keeps: per
  query head the positions of the key index's group the query falls in (its bucket under
  Hash, the kept keys under QKDrop), and for those the stored K (or the compressed ids and
  values: the score is q~ gathered at the key's ids times its values) and V. This torch
  implementation pads the per-head lists to the longest (one read of its length to the host);
  its output is the rows of the op on the whole sequence (tests/test_kv_cache.py).

The cache serves causal ops only: a non-causal row of the whole sequence sees later tokens,
which a cache does not hold yet.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..backends.reference import feature_mask
from ..patterns import Decisions, check_decisions
from .cache import KVCache, StepReads

__all__ = ["attend_cached", "decode_step", "key_slices"]


def attend_cached(attn, cache: KVCache, q: Tensor, k: Tensor, v: Tensor, decisions: Decisions | None) -> Tensor:
    """Append k, v (and their decisions) to ``cache``, then attend q: (B, H, n, D) output."""
    if not isinstance(cache, KVCache):
        raise TypeError(f"cache must be a tilesparse.KVCache (attn.new_cache(...)), got {type(cache).__name__}")
    if cache.spec != attn.spec or cache.causal != attn.causal:
        raise ValueError(f"this cache was made for {cache.spec} (causal={cache.causal}), not for {attn}")
    if not attn.causal:
        raise ValueError("a KV cache serves causal ops only (compile with causal=True)")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.dim() != 4:
            raise ValueError(f"{name} must be a 4-D tensor (B, heads, n, D)")
    n = q.shape[2]
    if q.shape != (cache.batch, cache.heads, n, cache.head_dim) or k.shape[2] != n:
        raise ValueError(
            f"q must be (B={cache.batch}, H={cache.heads}, n, D={cache.head_dim}) with as many tokens as k and v; "
            f"got q {tuple(q.shape)}, k {tuple(k.shape)}"
        )
    if decisions is None:
        dec = cache.decide(q, k)
    else:
        check_decisions(
            decisions, needed=attn.spec.decision_fields, batch=cache.batch, heads=cache.heads, q_len=n, k_len=n,
            head_dim=cache.head_dim, device=q.device, buckets=getattr(cache._hash, "buckets", None),
            support_k=getattr(cache._topk, "k", None), values=attn.validate,
        )  # fmt: skip
        dec = decisions
    with torch.no_grad():
        cache.append(k, v, dec)
        q_dec = Decisions(**{name: t for name, t in dec.items() if t is not None and name.startswith("q_")})
        if n == 1:
            return decode_step(cache, q, q_dec, attn.scale, kernel=cache.decode_kernel)
        return _chunk(attn, cache, q, q_dec)


def _chunk(attn, cache: KVCache, q: Tensor, q_dec: Decisions) -> Tensor:
    """The op over the cached sequence with Tq = n: the chunk's rows."""
    v = cache.values()
    k = cache.keys()
    if cache.k_ids is not None:  # feature-sparse heads score on k~: one key head per query head
        k = cache.keys_per_query_head()
        group = cache.heads // cache.kv_heads
        v = v.repeat_interleave(group, dim=1) if group > 1 else v
    # both halves were checked on their way in (or made by the spec's criteria)
    return attn(q, k, v, decisions=q_dec.merge(cache.key_decisions()).trusted(attn.spec))


def decode_step(cache: KVCache, q: Tensor, q_dec: Decisions, scale: float | None, *, kernel: str = "auto") -> Tensor:
    """The last cached token's queries q (B, H, 1, D), reading per query head only the keys of
    its index group (see the module docstring); (B, H, 1, D) in q's dtype.

    ``kernel``: "torch" (gathers, padded to the longest slice: one host read), "triton" (the
    split-K kernel of ``tilesparse.backends.triton.decode``: no host read) or "auto" (triton
    on CUDA, torch otherwise).
    """
    H, D = q.shape[1], q.shape[3]
    L = cache.length
    scale = D**-0.5 if scale is None else scale
    dense = cache._dense_dev.view(1, H)
    lo, count = key_slices(cache, q_dec)
    not_self = cache._hash is not None and not cache._hash.attend_self
    qf = q[:, :, 0].float()
    if cache.k_ids is not None:
        qf = torch.where(dense.unsqueeze(-1), qf, qf * feature_mask(q_dec.q_support[:, :, 0], D, torch.float32))
    if kernel == "auto":
        kernel = "triton" if q.is_cuda and _triton_reasons(cache, not_self) == [] else "torch"
    if kernel == "triton":
        if reasons := _triton_reasons(cache, not_self):
            raise ValueError("the triton decode kernel cannot run this cache: " + "; ".join(reasons))
        from ..backends.triton.decode import decode_split

        out = decode_split(
            qf, cache.k, cache.v, cache.index, cache.slot, lo, count, scale,
            k_ids=cache.k_ids, k_vals=cache.k_vals, self_pos=L - 1 if not_self else None,
        )  # fmt: skip
        if cache.record_reads:
            _record_reads(cache, int(count.sum()), L)
        return out.unsqueeze(2).to(q.dtype)
    if kernel != "torch":
        raise ValueError(f"kernel must be 'auto', 'torch' or 'triton', got {kernel!r}")
    return _decode_torch(cache, q, qf, lo, count, dense, not_self, scale)


def key_slices(cache: KVCache, q_dec: Decisions) -> tuple[Tensor, Tensor]:
    """(lo, count), each (B, H): the slice of the cache's key index that each query head of the
    last token reads, its group's start (its bucket under Hash, group 0 otherwise and for a
    dense head) and length (0 for a query QKDrop dropped)."""
    B, H = cache.batch, cache.heads
    dense = cache._dense_dev.view(1, H)
    qg = torch.zeros((B, H), dtype=torch.int64, device=cache.device)
    if cache._hash is not None:
        qg = torch.where(dense, 0, q_dec.q_bucket[..., 0].long())
    lo = cache.starts.gather(-1, qg.unsqueeze(-1)).squeeze(-1)
    count = cache.starts.gather(-1, (qg + 1).unsqueeze(-1)).squeeze(-1) - lo
    if cache._drop is not None:
        count = torch.where(q_dec.q_keep[..., 0] | dense, count, 0)
    return lo, count


def _triton_reasons(cache: KVCache, not_self: bool) -> list[str]:
    reasons = []
    if cache.k_ids is not None and bool(cache._dense.any()):
        reasons.append("dense heads next to feature-sparse heads (PerHead over TopKFeatures) need both key forms")
    if not_self and bool(cache._dense.any()):
        reasons.append("dense heads next to attend_self=False heads read their own key")
    return reasons


def _decode_torch(cache: KVCache, q, qf, lo, count, dense, not_self, scale) -> Tensor:
    B, H, _, D = q.shape
    L, T = cache.length, cache.max_tokens
    dev = q.device
    group = H // cache.kv_heads
    R = max(int(count.max()), 1)
    j = torch.arange(R, device=dev)
    pos = cache.index.gather(2, (lo.unsqueeze(-1) + j).clamp(max=T - 1)).long()  # (B, H, R)
    valid = j < count.unsqueeze(-1)
    if not_self:
        valid &= (pos != L - 1) | dense.unsqueeze(-1)  # strictly earlier keys (Reformer)
    pos = torch.where(valid, pos, 0)
    kv_head = (torch.arange(H, device=dev) // group).view(1, H, 1).expand(B, H, R)
    slot = cache.slot[torch.arange(B, device=dev).view(B, 1, 1), kv_head, pos].long().clamp_min(0)
    scores = torch.zeros((B, H, R), dtype=torch.float32, device=dev)
    if cache.k is not None:
        rows = _gather_rows(cache.k, kv_head, slot)
        scores = (rows.float() * qf.unsqueeze(2)).sum(-1)
    if cache.k_ids is not None:
        b_idx, h_idx = torch.arange(B, device=dev).view(B, 1, 1), torch.arange(H, device=dev).view(1, H, 1)
        ids = cache.k_ids[b_idx, h_idx, pos].long()  # (B, H, R, k)
        vals = cache.k_vals[b_idx, h_idx, pos].float()
        sparse = (qf.unsqueeze(2).expand(-1, -1, R, -1).gather(-1, ids) * vals).sum(-1)
        scores = torch.where(dense.unsqueeze(-1), scores, sparse)
    scores = torch.where(valid, scores * scale, float("-inf"))
    m = scores.amax(-1, keepdim=True)
    p = torch.exp(scores - torch.where(torch.isfinite(m), m, 0.0))
    denom = p.sum(-1, keepdim=True)
    vrows = _gather_rows(cache.v, kv_head, slot).float()
    out = (p.unsqueeze(-1) * vrows).sum(2) / torch.where(denom == 0, 1.0, denom)
    if cache.record_reads:
        _record_reads(cache, int(valid.sum()), L)
    return out.unsqueeze(2).to(q.dtype)


def _gather_rows(buf: Tensor, kv_head: Tensor, slot: Tensor) -> Tensor:
    """buf[b, kv_head[b, h, r], slot[b, h, r]] as (B, H, R, D)."""
    B = buf.shape[0]
    return buf[torch.arange(B, device=buf.device).view(B, 1, 1), kv_head, slot]


def _record_reads(cache: KVCache, keys: int, L: int) -> None:
    """The step's reads (a host read of the count: off while capturing a graph)."""
    esize = torch.finfo(cache.dtype).bits // 8
    k_bytes = cache.head_dim * esize if cache.k_ids is None else cache._topk.k * (2 + esize)
    cache.last_reads = StepReads(
        keys=keys,
        cached=cache.batch * cache.heads * L,
        bytes=keys * (k_bytes + cache.head_dim * esize + 4),
        dense_bytes=cache.batch * cache.kv_heads * L * 2 * cache.head_dim * esize,
    )
