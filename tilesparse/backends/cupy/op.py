"""Launching the feature-intersection kernels, and the autograd function that owns them.

:class:`CudaKernels` launches ``kernels/sfa.cu`` through cupy on torch's current stream, with
grids from the prepared group (one program per query block, or key block, per (b, head)) and
tensors passed as raw device pointers (no copies, no dlpack). :class:`TorchModel` has the
same entry points, so :class:`FeatureAttention` runs either: the kernels on a GPU, the model
on the CPU in CI.

The inputs are the kept entries themselves, ``q~`` and ``k~`` as (B, Hg, T, k) values
gathered at the supports (``torch.gather``, so autograd scatters dq~ and dk~ back to the kept
features only and sums grouped-query heads), plus dense v.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from ...ir import PreparedGroup
from ..first_order import first_order_only
from .compile import module
from .layout import BM, BN, NT, CompressedKeys, predicate_bits, shared_bytes
from .model import TorchModel

__all__ = ["CudaKernels", "FeatureAttention", "feature_attention"]

_DTYPE_TAG = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16"}


def _arg(x):
    """A kernel argument: tensors as device pointers, ints as int32, floats as float32
    (numpy int64 passes through, for the ``long long`` strides)."""
    if isinstance(x, Tensor):
        return np.uint64(x.data_ptr())
    if isinstance(x, np.generic):
        return x
    if isinstance(x, bool | int):
        return np.int32(x)
    if isinstance(x, float):
        return np.float32(x)
    raise TypeError(f"cannot pass {type(x).__name__} to a kernel")


_STREAMS: dict[tuple[int, int], object] = {}  # (device, torch stream) -> cupy's handle on it


def launch(source: str, instances: tuple[str, ...], name: str, grid: tuple, block: int, smem: int, args: tuple) -> None:
    """Launch ``name`` of ``kernels/<source>`` on torch's current stream (the stream handle and
    the shared-memory opt-in are set once, not per call: a launch is host time). The opt-in is
    remembered on the compiled module itself: a module compiled again (a cleared cache, another
    compiler) has kernels of its own that need it again."""
    import cupy

    mod = module(source, instances)
    fn = mod.get_function(name)
    device = torch.cuda.current_device()
    opted = mod.__dict__.setdefault("smem_opted_in", {})
    if smem > 48 * 1024 and opted.get((device, name), 0) < smem:
        fn.max_dynamic_shared_size_bytes = smem
        opted[(device, name)] = smem
    ptr = torch.cuda.current_stream(device).cuda_stream
    stream = _STREAMS.get((device, ptr))
    if stream is None:
        with cupy.cuda.Device(device):
            stream = _STREAMS[(device, ptr)] = cupy.cuda.ExternalStream(ptr)
    with cupy.cuda.Device(device), stream:
        fn(grid, (block,), tuple(_arg(a) for a in args), shared_mem=smem)


class CudaKernels:
    """``kernels/sfa.cu`` for one (dtype, head dim), launched on torch's current stream."""

    def __init__(self, head_dim: int, dtype: torch.dtype):
        self.head_dim = head_dim
        t = _DTYPE_TAG[dtype]
        self.names = {
            "compress": f"sfa_compress_keys<{t}>",
            "fwd": f"sfa_fwd<{t}, {head_dim}>",
            "dq": f"sfa_bwd_dq<{t}, {head_dim}>",
            "dkdv": f"sfa_bwd_dkdv<{t}, {head_dim}>",
        }

    def _launch(self, kernel: str, grid: tuple[int, int], k: int, *args) -> None:
        launch("sfa.cu", tuple(self.names.values()), self.names[kernel], grid, NT,
               shared_bytes(kernel, self.head_dim, k), args)  # fmt: skip

    def compress(self, g: PreparedGroup, k_ids: Tensor, k_vals: Tensor) -> CompressedKeys:
        B, Hg, T, K = k_ids.shape
        nt = -(-T // BN)
        dev = k_ids.device
        ck = CompressedKeys(
            torch.empty((B * Hg, nt, self.head_dim + 1), dtype=torch.int16, device=dev),
            torch.empty((B * Hg, nt, BN * K), dtype=torch.int16, device=dev),
            torch.empty((B * Hg, nt, BN * K), dtype=k_vals.dtype, device=dev),
        )
        self._launch("compress", (nt, B * Hg), K, g.k_order, k_ids, k_vals, ck.ptr, ck.row, ck.val,
                     T, nt, self.head_dim, K)  # fmt: skip
        return ck

    def _common(self, g: PreparedGroup, q_ids: Tensor) -> tuple:
        return (g.q_order, g.q_pos, g.q_bucket, g.k_order, g.k_pos, g.k_bucket)

    def forward(self, g, q_ids, q_vals, ck: CompressedKeys, v, scale: float, group: int, flags: int):
        B, Hg, T, K = q_ids.shape
        out = torch.empty((B, Hg, T, self.head_dim), dtype=torch.float32, device=v.device)
        lse = torch.empty((B, Hg, T), dtype=torch.float32, device=v.device)
        nqb, max_seg = g.q_ranges.shape[2], g.q_ranges.shape[3]
        self._launch(
            "fwd", (nqb, B * Hg), K, *self._common(g, q_ids), g.q_ranges, g.q_nseg, g.head_map,
            q_ids, q_vals, ck.ptr, ck.row, ck.val, v, *_strides(v), out, lse,
            T, nqb, -(-T // BN), max_seg, Hg, group, self.head_dim, K, scale * _LOG2E, flags,
        )  # fmt: skip
        return out, lse

    def backward(self, g, q_ids, q_vals, k_ids, ck: CompressedKeys, v, dout, lse, delta, scale, group, flags):
        B, Hg, T, K = q_ids.shape
        dev = v.device
        dq = torch.zeros((B, Hg, T, K), dtype=torch.float32, device=dev)
        dk = torch.zeros((B, Hg, T, K), dtype=torch.float32, device=dev)
        dv = torch.zeros((B, Hg, T, self.head_dim), dtype=torch.float32, device=dev)
        nt = -(-T // BN)
        nqb, qs = g.q_ranges.shape[2], g.q_ranges.shape[3]
        nkb, ks = g.k_ranges.shape[2], g.k_ranges.shape[3]
        self._launch(
            "dq", (nqb, B * Hg), K, *self._common(g, q_ids), g.q_ranges, g.q_nseg, g.head_map,
            q_ids, q_vals, ck.ptr, ck.row, ck.val, v, *_strides(v), dout, lse, delta, dq,
            T, nqb, nt, qs, Hg, group, self.head_dim, K, scale * _LOG2E, scale, flags,
        )  # fmt: skip
        self._launch(
            "dkdv", (nkb, B * Hg), K, *self._common(g, q_ids), g.k_ranges, g.k_nseg, g.head_map,
            q_ids, q_vals, k_ids, ck.ptr, ck.row, ck.val, v, *_strides(v), dout, lse, delta, dk, dv,
            T, nkb, nt, ks, Hg, group, self.head_dim, K, scale * _LOG2E, scale, flags,
        )  # fmt: skip
        return dq, dk, dv


_LOG2E = 1.4426950408889634


def _strides(v: Tensor) -> tuple:
    return tuple(np.int64(s) for s in v.stride()[:3])


class FeatureAttention(torch.autograd.Function):
    """(q~, k~, v) -> out for one prepared group; ``impl`` is CudaKernels or TorchModel."""

    @staticmethod
    def forward(ctx, q_vals, k_vals, v, g: PreparedGroup, scale: float, group: int, impl):
        q_ids = g.q_support.to(torch.int16).contiguous()
        k_ids = g.k_support.to(torch.int16).contiguous()
        flags = predicate_bits(g.group)
        ck = impl.compress(g, k_ids, k_vals)
        out, lse = impl.forward(g, q_ids, q_vals, ck, v, scale, group, flags)
        ctx.save_for_backward(q_vals, k_vals, v, out, lse, q_ids, k_ids, ck.ptr, ck.row, ck.val)
        ctx.g, ctx.scale, ctx.group, ctx.impl, ctx.flags = g, scale, group, impl, flags
        return out

    @staticmethod
    def backward(ctx, dout):
        q_vals, k_vals, v, out, lse, q_ids, k_ids, ptr, row, val = ctx.saved_tensors
        g = ctx.g
        dout = dout.float().contiguous()
        delta = (dout * out).sum(-1).contiguous()  # (B, Hg, T), original positions
        dq, dk, dv_heads = ctx.impl.backward(
            g, q_ids, q_vals, k_ids, CompressedKeys(ptr, row, val), v, dout, lse, delta, ctx.scale, ctx.group, ctx.flags
        )
        # dV per query head -> per kv head (grouped-query attention sums a kv head's heads)
        dv = torch.zeros(v.shape, dtype=torch.float32, device=v.device)
        dv.index_add_(1, g.head_map.long() // ctx.group, dv_heads)
        grads = (dq.to(q_vals.dtype), dk.to(k_vals.dtype), dv.to(v.dtype))
        return (*first_order_only("cupy", grads, (q_vals, k_vals, v)), None, None, None, None)


def feature_attention(q: Tensor, k: Tensor, v: Tensor, g: PreparedGroup, scale: float, *, impl=None) -> Tensor:
    """(B, Hg, T, D) float32 attention of group ``g``'s heads with the feature-sparse score,
    differentiable w.r.t. q, k, v (gradients only on the kept entries of q and k).

    ``impl`` defaults to the CUDA kernels for CUDA tensors and the torch model otherwise."""
    if g.block_q != BM or g.block_k != BN:
        raise ValueError(f"prepared for blocks ({g.block_q}, {g.block_k}); the cupy kernels need ({BM}, {BN})")
    D = q.shape[-1]
    group = q.shape[1] // k.shape[1]
    heads = g.head_map.long()
    q_g = q if len(g.heads) == q.shape[1] and g.heads == tuple(range(q.shape[1])) else q.index_select(1, heads)
    k_h = k.index_select(1, heads // group) if group > 1 or q_g is not q else k
    q_vals = torch.gather(q_g, -1, g.q_support.long()).contiguous()
    k_vals = torch.gather(k_h, -1, g.k_support.long()).contiguous()
    v = v if v.stride(-1) == 1 else v.contiguous()
    if impl is None:
        impl = CudaKernels(D, q.dtype) if q.is_cuda else TorchModel(D)
    return FeatureAttention.apply(q_vals, k_vals, v, g, scale, group, impl)
