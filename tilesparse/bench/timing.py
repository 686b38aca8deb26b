"""How one call is timed: ``triton.testing.do_bench`` on CUDA, ``time.perf_counter`` on the CPU.

On CUDA, ``do_bench`` runs the call to estimate it, warms up for ``warmup_ms``, then times
calls for about ``rep_ms`` (stretched to ``min_reps`` calls of one CUDA-event estimate, so a
slow call still gets that many samples), each bracketed by CUDA events after an L2 flush; it
returns the median and the 20th and 80th percentiles. Calls are queued back to back, so host work that the
GPU cannot hide (Python, launches) counts. On the CPU (where ``do_bench`` needs a GPU driver):
``time.perf_counter`` around each of ``cpu_reps`` calls, the same statistics from
:mod:`statistics`.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable

import torch

__all__ = ["free", "gpu_ms", "host_us", "summarize", "sync", "synchronized_ms", "time_call"]


def sync(device: torch.device) -> None:
    """Wait for ``device``'s queued work (nothing to wait for on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def free(device: torch.device, *, collect: bool = False) -> None:
    """Return cached blocks to the device; ``collect`` also breaks reference cycles (a caught
    exception's traceback holds its frames' tensors), which costs ~0.3 s with torch loaded."""
    if collect:
        gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def summarize(times_ms: list[float]) -> tuple[float, list]:
    """(median, [p20, p80, n]) of ``times_ms``."""
    med = statistics.median(times_ms)
    if len(times_ms) < 2:
        return med, [med, med, len(times_ms)]
    q = statistics.quantiles(times_ms, n=5, method="inclusive")  # the 20th, 40th, 60th, 80th
    return med, [q[0], q[3], len(times_ms)]


def time_call(
    fn: Callable[[], object],
    device: torch.device,
    *,
    warmup_ms: float,
    rep_ms: float,
    min_reps: int,
    cpu_reps: int,
) -> tuple[float, list]:
    """(median ms, [p20, p80, n]) of ``fn`` (already warm); n is None on CUDA, where
    ``do_bench`` picks the count (at least about ``min_reps``)."""
    if device.type == "cuda":
        from triton.testing import do_bench

        with torch.cuda.device(device):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(device)
            rep = max(rep_ms, 1.2 * min_reps * start.elapsed_time(end))
            med, p20, p80 = do_bench(fn, warmup=warmup_ms, rep=rep, quantiles=[0.5, 0.2, 0.8])
        return med, [p20, p80, None]
    times = []
    for _ in range(max(1, cpu_reps)):
        t0 = time.perf_counter()
        fn()
        times.append(1e3 * (time.perf_counter() - t0))
    return summarize(times)


def synchronized_ms(
    fn: Callable[[], object], device: torch.device, estimate_ms: float = 1.0, *, calls: int | None = None,
    budget_ms: float = 400.0,
) -> float:
    """Median wall time (ms) of ``fn`` with a synchronize after every call (what a step that
    waits for its result sees; its gap to the back-to-back time is host time the GPU did not
    hide): ``calls`` calls, or ``budget_ms / estimate_ms`` of them, 5 to 40."""
    n = calls or int(min(40, max(5, budget_ms / max(estimate_ms, 1e-3))))
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times)


def host_us(
    fn: Callable[[], object], device: torch.device, calls: int, *, stat: str = "mean", sync_each: bool = False,
    warmup: int = 3,
) -> float:
    """Host time of ``fn`` (us; the ``stat``, "mean" or "median", over ``calls`` runs): each run
    starts on an idle device (a synchronize before it, outside the timing), so the figure is
    the time to enqueue the call, never the wait for a full launch queue behind kernels slower
    than the host; ``sync_each``: the run includes a synchronize after the call (the wall time
    of a call that waits on its result)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(calls):
        sync(device)
        t0 = time.perf_counter()
        fn()
        if sync_each:
            sync(device)
        times.append(time.perf_counter() - t0)
    sync(device)
    return 1e6 * (statistics.median(times) if stat == "median" else statistics.fmean(times))


def gpu_ms(fn: Callable[[], object], device: torch.device, calls: int = 10) -> float:
    """Mean GPU time of ``fn``'s kernels per call (the sum of their device durations, by the
    torch profiler; host time, launch gaps and idle excluded)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    sync(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        sync(device)
    us = sum(e.device_time_total for e in prof.key_averages() if e.device_time_total and not e.is_user_annotation)
    return us / 1e3 / calls
