"""Measuring one callable into a :class:`~.schema.Record`: first call, peak memory, time; a
failure is recorded, never raised (the run goes on)."""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable

import torch
from torch import Tensor

from .grid import DTYPE
from .schema import Record, Settings
from .timing import free, sync, synchronized_ms, time_call

__all__ = ["describe", "measure", "random_inputs", "record_failure", "step"]

MIB = 2**20


def describe(e: BaseException) -> str:
    """A failure as one recorded message: its type and (the start of) its text."""
    prefix = "out of memory: " if isinstance(e, torch.cuda.OutOfMemoryError) else ""
    return f"{prefix}{type(e).__name__}: {str(e).strip()[:1500]}"


def record_failure(rec: Record, name: str, e: BaseException, s: Settings, *, prefix: str = "") -> None:
    """Record ``e`` under ``rec.errors[name]``, note it if it poisoned the CUDA context, and
    free what its traceback held."""
    rec.errors[name] = prefix + describe(e)
    s.failures.note(rec.errors[name])
    free(s.device, collect=True)


def measure(name: str, fn: Callable[[], object], rec: Record, s: Settings, *, peak: bool = True) -> None:
    """Warm ``fn`` up (compilation excluded), take its peak memory over one call, time it back
    to back (``rec.ms``) and synchronized after every call (``rec.sync_ms``); a failure is
    recorded under ``rec.errors[name]`` and the run goes on."""
    try:
        t0 = time.perf_counter()
        fn()
        sync(s.device)
        rec.first_call_s[name] = round(time.perf_counter() - t0, 4)
        if peak and s.cuda:
            torch.cuda.synchronize(s.device)
            live = torch.cuda.memory_allocated(s.device)
            torch.cuda.reset_peak_memory_stats(s.device)
            fn()
            torch.cuda.synchronize(s.device)
            rec.peak_mib[name] = round(torch.cuda.max_memory_allocated(s.device) / MIB, 1)
            rec.live_mib[name] = round(live / MIB, 1)
        rec.ms[name], rec.spread[name] = time_call(
            fn, s.device, warmup_ms=s.warmup_ms, rep_ms=s.rep_ms, min_reps=s.min_reps, cpu_reps=s.cpu_reps
        )
        if s.cuda:  # on the CPU every call already waits for its result
            rec.sync_ms[name] = synchronized_ms(fn, s.device, rec.ms[name])
    except Exception as e:  # noqa: BLE001 - every failure is a recorded result, not a crash
        record_failure(rec, name, e, s)


def step(forward: Callable[[], Tensor], mode: str, inputs: tuple[Tensor, ...], grad: Tensor) -> Callable[[], object]:
    """The timed unit of ``mode``: the forward call, or the call then its backward."""
    if mode == "fwd":
        return forward

    def fwd_bwd():
        out = forward()
        return torch.autograd.grad(out, inputs, grad)

    return fwd_bwd


def random_inputs(B: int, H: int, T: int, D: int, s: Settings, tag: str) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """q, k, v (leaves with requires_grad) and the output gradient, seeded by ``tag``."""
    g = torch.Generator(device=s.device).manual_seed(s.seed * 1_000_003 + zlib.crc32(tag.encode()))
    q, k, v, grad = (torch.randn((B, H, T, D), generator=g, device=s.device, dtype=DTYPE) for _ in range(4))
    return q.requires_grad_(), k.requires_grad_(), v.requires_grad_(), grad
