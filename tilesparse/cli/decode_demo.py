"""The demo's decode section: prefill a KV cache in one chunk, decode the last tokens one by
one, and check the rows against the same op on the whole sequence (same decisions)."""

from __future__ import annotations

import argparse

import torch
from rich.console import Console
from torch import Tensor

from .. import Decisions, Hash, Hybrid, QKDrop, compile

__all__ = ["DECODE_SPEC", "show_decode"]

DECODE_SPEC = Hybrid(parts=[Hash(buckets=4), QKDrop(keep=0.8)])


def show_decode(args: argparse.Namespace, q: Tensor, k: Tensor, v: Tensor, console: Console, atol: float) -> list[str]:
    """Run the decode section; the failures (empty when the decoded rows match)."""
    if not args.causal:
        console.print("decode: skipped (a KV cache serves causal ops only)")
        return []
    q, k, v = (t.detach() for t in (q, k, v))
    B, H, T, D = q.shape
    steps = min(8, T - 1)
    attn = compile(DECODE_SPEC, causal=True, backend=args.backend)
    cache = attn.new_cache(B, T, k.shape[1], D, dtype=q.dtype, device=q.device, heads=H, seed=args.seed)
    dec = cache.decide(q, k)
    part = lambda sl: Decisions(**{n: t[:, :, sl] for n, t in dec.items() if t is not None})  # noqa: E731
    head = slice(0, T - steps)
    rows = [attn(q[:, :, head], k[:, :, head], v[:, :, head], cache=cache, decisions=part(head))]
    for t in range(T - steps, T):
        sl = slice(t, t + 1)
        rows.append(attn(q[:, :, sl], k[:, :, sl], v[:, :, sl], cache=cache, decisions=part(sl)))
    with torch.no_grad():
        whole = attn(q, k, v, decisions=dec).float()
    err = float((torch.cat(rows, dim=2).float() - whole).abs().max())
    scale = max(float(whole.abs().max()), 1e-6)
    console.print(f"{DECODE_SPEC}: prefill {T - steps} tokens in one chunk, then decode {steps} one by one")
    console.print(cache.explain())
    console.print(f"max |error| of the cached rows against the whole-sequence op: {err:.2e}")
    if err > atol * scale:
        return [f"decode: max |error| {err:.3g} > {atol:g} x {scale:.3g}"]
    return []
