"""FlexAttention on the same mask as ours, in its best layout, for comparison.

Per (b, h), rows are stable-sorted by (bucket, position), dropped rows moved to the end
(compacted, original order kept); q/k/v are gathered into that order, a ``mask_mod`` reads the
sorted rows' original positions and buckets (causal on original positions, same bucket,
dropped rows never match), and the output is scattered back to the original order.
``flex_percall`` times layout + ``create_block_mask`` + gather + flex + scatter (the pattern
changes every step); ``flex_prebuilt`` only gather + flex + scatter (Flex's best case).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable

import torch
from torch import Tensor

import tilesparse as ts
from tilesparse.ir import KEY_SENTINEL, QUERY_SENTINEL

from .grid import FLEX_DEFAULT_D, FLEX_DEFAULT_MAX_T
from .measure import measure, record_failure, step
from .schema import Record, Settings
from .timing import sync

__all__ = ["FlexMask", "flex_forward", "flex_functions", "flex_wanted", "run_flex"]

FLEX_TOLERANCE = 2e-2  # relative error of Flex's output against ours (bf16)


@functools.cache
def flex_functions(device_type: str) -> tuple[Callable, Callable]:
    """(flex_attention, create_block_mask): compiled on CUDA (once per process), eager on the CPU."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    if device_type != "cuda":
        return flex_attention, create_block_mask
    for name in ("recompile_limit", "cache_size_limit"):  # one compile per (T, D)
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(64, getattr(torch._dynamo.config, name)))
    return torch.compile(flex_attention, dynamic=False), torch.compile(create_block_mask, dynamic=False)


class FlexMask:
    """Layout buffers for one (B, H, T) and the one ``mask_mod`` that reads them.

    The buffers hold, per sorted row, the original position (``QUERY_SENTINEL`` for a dropped
    query, ``KEY_SENTINEL`` for a dropped key) and the bucket; new decisions are copied into
    the same buffers, so the compiled mask function and flex kernel never see a new closure.
    """

    def __init__(self, B: int, H: int, T: int, device: torch.device):
        self.shape = (B, H, T)
        self.device = device
        q_pos, q_bucket, k_pos, k_bucket = (torch.zeros(self.shape, dtype=torch.int32, device=device) for _ in range(4))
        self.q_pos, self.q_bucket, self.k_pos, self.k_bucket = q_pos, q_bucket, k_pos, k_bucket

        def mask_mod(b, h, q_idx, kv_idx):
            return (k_pos[b, h, kv_idx] <= q_pos[b, h, q_idx]) & (k_bucket[b, h, kv_idx] == q_bucket[b, h, q_idx])

        self.mask_mod = mask_mod

    def load(self, dec: ts.Decisions) -> tuple[Tensor, Tensor]:
        """Lay out the rows for ``dec``: fill the buffers; return the q and k row orders."""
        q_order = self._side(dec.q_keep, dec.q_bucket, self.q_pos, self.q_bucket, dropped=QUERY_SENTINEL)
        k_order = self._side(dec.k_keep, dec.k_bucket, self.k_pos, self.k_bucket, dropped=KEY_SENTINEL)
        return q_order, k_order

    def _side(self, keep, bucket, pos_out: Tensor, bucket_out: Tensor, *, dropped: int) -> Tensor:
        B, H, T = self.shape
        pos = torch.arange(T, device=self.device, dtype=torch.int64)
        if keep is None and bucket is None:
            pos_out.copy_(pos.expand(B, H, T))
            bucket_out.zero_()
            return pos.expand(B, H, T)
        key = pos.expand(B, H, T) if bucket is None else bucket.to(torch.int64) * T + pos
        big = 1 << 40  # past every kept row's bucket * T + position
        if keep is not None:
            key = torch.where(keep, key, big + pos)
        skey, order = torch.sort(key, dim=-1)  # keys are distinct: the order is the stable one
        valid = skey < big
        pos_out.copy_(torch.where(valid, order, dropped))
        bucket_out.copy_(torch.where(valid, skey // T, -1))
        return order

    def block_mask(self):
        _, create_block_mask = flex_functions(self.device.type)
        B, H, T = self.shape
        return create_block_mask(self.mask_mod, B, H, T, T, device=self.device)


def flex_forward(q: Tensor, k: Tensor, v: Tensor, q_order: Tensor, k_order: Tensor, block_mask) -> Tensor:
    """Gather q, k, v into the layout, run flex, scatter the output back to original order."""
    flex_attention, _ = flex_functions(q.device.type)
    D = q.shape[-1]
    qi = q_order.unsqueeze(-1).expand(*q_order.shape, D)
    ki = k_order.unsqueeze(-1).expand(*k_order.shape, D)
    o = flex_attention(q.gather(2, qi), k.gather(2, ki), v.gather(2, ki), block_mask=block_mask)
    return torch.empty_like(o).scatter(2, qi, o)


def run_flex(
    q: Tensor, k: Tensor, v: Tensor, grad: Tensor, dec: ts.Decisions, ours_out: Tensor | None,
    fm: FlexMask, common: Record, per_mode: dict[str, Record], s: Settings,
) -> None:  # fmt: skip
    """Flex per-call and prebuilt for every mode, and the check of its output against ours."""
    if not s.cuda:  # flex has no CPU backward; it refuses inputs that require grad
        q, k, v = q.detach(), k.detach(), v.detach()
    try:
        t0 = time.perf_counter()
        q_order, k_order = fm.load(dec)
        bm = fm.block_mask()
        sync(s.device)
        t1 = time.perf_counter()
        out = flex_forward(q, k, v, q_order, k_order, bm).detach()
        sync(s.device)
        common.first_call_s["flex_first_block_mask"] = round(t1 - t0, 3)  # compiles once per T
        common.first_call_s["flex_first_fwd"] = round(time.perf_counter() - t1, 3)  # once per (D, T)
        if ours_out is not None:
            err = float((out.float() - ours_out.float()).norm() / ours_out.float().norm().clamp_min(1e-30))
            ok = math.isfinite(err) and err < FLEX_TOLERANCE
            common.info["flex_check"] = {"rel_err": err, "ok": ok, "tolerance": FLEX_TOLERANCE}
            if not ok:
                common.errors["flex_check"] = f"flex differs from ours: relative error {err:.3g} >= {FLEX_TOLERANCE}"
        del out
    except Exception as e:  # noqa: BLE001
        record_failure(common, "flex", e, s)
        return

    def percall() -> Tensor:
        qo, ko = fm.load(dec)
        return flex_forward(q, k, v, qo, ko, fm.block_mask())

    def prebuilt() -> Tensor:
        return flex_forward(q, k, v, q_order, k_order, bm)

    for mode, rec in per_mode.items():
        if mode == "fwd_bwd" and not s.cuda:
            for name in ("flex_prebuilt", "flex_percall"):
                rec.skipped[name] = "cpu: FlexAttention has no CPU backward"
            continue
        measure("flex_prebuilt", step(prebuilt, mode, (q, k, v), grad), rec, s)
        measure("flex_percall", step(percall, mode, (q, k, v), grad), rec, s)


def flex_wanted(pattern: str, D: int, T: int, s: Settings) -> str | None:
    """None when Flex runs on this row, else why not."""
    if s.flex == "none":
        return "--flex none"
    if s.flex == "all":
        return None
    if not s.cuda:
        return "cpu: Flex skipped by default (--flex all runs its forward, slowly)"
    if pattern not in s.flex_patterns:
        return f"--flex default runs {', '.join(s.flex_patterns)} only"
    if s.grid == "quick":
        return None
    if D != FLEX_DEFAULT_D:
        return f"--flex default runs D={FLEX_DEFAULT_D} only"
    if s.flex_seqlens is not None and T not in s.flex_seqlens:
        return f"--flex default runs T in {','.join(map(str, s.flex_seqlens))} only"
    if s.flex_seqlens is None and T > FLEX_DEFAULT_MAX_T:
        return f"--flex default runs T<={FLEX_DEFAULT_MAX_T} only"
    return None
