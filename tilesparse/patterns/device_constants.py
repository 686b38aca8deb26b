"""Small tensors a call keeps on the device across calls (head lists, error records), made
outside every CUDA graph memory pool.

``torch.compile(mode="reduce-overhead")`` runs a function's first calls with every allocation
of the calling thread routed into its CUDA graphs' private pool, and checks that nothing in the
pool outlives a run: a kept tensor made there fails that check ("tensor(s) in the cudagraph
pool not tracked as outputs") or has its memory reused by the next replay. So a kept tensor is
made on a worker thread, whose allocations go to the ordinary caching allocator; the upload
waits for its copy there, before any of the caller's work can use it. Inside a stream capture
no upload can run: there the tensor is built from capturable fills and not kept.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import torch
from torch import Tensor

__all__ = ["capturing", "device_constant", "outside_graph_pools"]

T = TypeVar("T")
_kept: dict[tuple, Tensor] = {}
_lock = threading.Lock()
_worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tilesparse-constants")


def _pinned_device(device: torch.device) -> torch.device:
    """``device`` with its index ("cuda" -> "cuda:N", the caller's current device)."""
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def capturing(device: torch.device) -> bool:
    """Whether ``device``'s current stream is being captured into a CUDA graph."""
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def outside_graph_pools(device: torch.device, make: Callable[[], T]) -> T:
    """``make()``'s result, its CUDA allocations made outside any CUDA graph memory pool (on a
    worker thread for a CUDA device). Directly on the CPU, and during a stream capture, where
    work the capture does not see could not be replayed (the capture then owns the memory)."""
    if device.type != "cuda" or capturing(device):
        return make()
    return _worker.submit(make).result()


def device_constant(values: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
    """``torch.tensor(values, dtype=dtype)`` on ``device``, made once and kept (one upload,
    outside any CUDA graph pool); during a capture that meets it first, built from fills on the
    capturing stream and not kept. Never written: callers index or read it."""
    t = _kept.get((values, dtype, device))  # a call's devices carry their index: one lookup
    if t is not None:
        return t
    device = _pinned_device(torch.device(device))
    key = (values, dtype, device)
    t = _kept.get(key)
    if t is not None:
        return t
    if capturing(device):
        return _filled(values, dtype, device)
    t = outside_graph_pools(device, lambda: torch.tensor(values, dtype=dtype, device=device))
    with _lock:  # kept for good: one small tensor per distinct head list, never freed while in use
        return _kept.setdefault(key, t)


def _filled(values: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
    """``values`` on ``device`` from capturable ops: one ``arange`` per run of consecutive values."""
    out = torch.empty(len(values), dtype=dtype, device=device)
    start = 0
    for i in range(1, len(values) + 1):
        if i == len(values) or values[i] != values[i - 1] + 1:
            out[start:i] = torch.arange(values[start], values[i - 1] + 1, dtype=dtype, device=device)
            start = i
    return out
