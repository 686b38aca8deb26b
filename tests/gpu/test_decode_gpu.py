"""Decoding and chunked prefill against the KV cache on a real GPU (H200), at 32k context.

- a decode step (the Triton split-K kernel) equals the last row of the whole-sequence op with
  the same decisions, for every pattern of the decode benchmark and a GQA / PerHead / Hybrid mix;
- a 1,024-token prefill chunk through the cache equals the whole sequence's last rows;
- a decode step replayed from a CUDA graph equals the eager step (nothing read back to the host);
- queries shorter than keys (Tq < Tk) through the Triton kernels, both passes, against the
  reference computed in float32 on the same device.
"""

from __future__ import annotations

import pytest
import torch

import tilesparse as ts
from tilesparse.inference import decode_step
from tilesparse.testing import assert_equivalent

DEVICE = torch.device("cuda")
SPECS = [
    ts.Dense(),
    ts.Hash(buckets=16),
    ts.QKDrop(keep=0.5),
    ts.TopKFeatures(k=8),
    ts.Hybrid(parts=[ts.Hash(buckets=8), ts.QKDrop(keep=0.7)]),
    ts.PerHead(dense_heads=[0], rest=ts.Hash(buckets=4)),
]


def _split(dec: ts.Decisions, sl: slice, sides: str = "qk") -> ts.Decisions:
    return ts.Decisions(**{n: t[:, :, sl] for n, t in dec.items() if t is not None and n[0] in sides})


def _inputs(B, H, Hkv, T, D, dtype, seed=0):
    g = torch.Generator(device=DEVICE).manual_seed(seed)
    q = torch.randn((B, H, T, D), generator=g, device=DEVICE, dtype=dtype)
    k = torch.randn((B, Hkv, T, D), generator=g, device=DEVICE, dtype=dtype)
    v = torch.randn((B, Hkv, T, D), generator=g, device=DEVICE, dtype=dtype)
    return q, k, v


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_decode_and_chunk_equal_the_whole_sequence_at_32k(spec):
    B, H, Hkv, T, D, n = 2, 4, 2, 32768, 128, 1024
    q, k, v = _inputs(B, H, Hkv, T, D, torch.bfloat16)
    attn = ts.compile(spec)
    cache = attn.new_cache(B, T, Hkv, D, dtype=torch.bfloat16, device=DEVICE, heads=H)
    dec = cache.decide(q, k)
    with torch.no_grad():
        whole = attn(q, k, v, decisions=dec).float()
        pre = slice(0, T - n - 1)
        cache.append(k[:, :, pre], v[:, :, pre], _split(dec, pre, "k"))
        chunk = slice(T - n - 1, T - 1)
        got_chunk = attn(q[:, :, chunk], k[:, :, chunk], v[:, :, chunk], cache=cache, decisions=_split(dec, chunk))
        last = slice(T - 1, T)
        got_last = attn(q[:, :, last], k[:, :, last], v[:, :, last], cache=cache, decisions=_split(dec, last))
    scale = whole.abs().max()
    assert (got_chunk.float() - whole[:, :, chunk]).abs().max() <= 3e-2 * scale
    assert (got_last.float() - whole[:, :, last]).abs().max() <= 3e-2 * scale


def test_a_captured_decode_step_replays_the_eager_one():
    B, H, T, D = 8, 8, 8192, 128
    attn = ts.compile(ts.Hash(buckets=16))
    q, k, v = _inputs(B, H, H, T, D, torch.bfloat16, seed=1)
    cache = attn.new_cache(B, T, H, D, dtype=torch.bfloat16, device=DEVICE)
    cache.record_reads = False
    dec = cache.decide(q, k)
    cache.append(k, v, _split(dec, slice(0, T), "k"))
    qd = _split(dec, slice(T - 1, T), "q")
    q1 = q[:, :, -1:].clone()
    eager = decode_step(cache, q1, qd, None, kernel="triton")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        decode_step(cache, q1, qd, None, kernel="triton")
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = decode_step(cache, q1, qd, None, kernel="triton")
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_shorter_queries_both_passes_on_the_gpu(spec):
    B, H, Hkv, T, Tq, D = 1, 4, 2, 2048, 300, 64
    q, k, v = _inputs(B, H, Hkv, T, D, torch.float16, seed=2)
    attn = ts.compile(spec, backend="triton")
    assert_equivalent(attn, q[:, :, T - Tq :], k, v)
