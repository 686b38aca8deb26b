"""The device-side flag that sends a launch to the kernels' sanitizing variants.

A masked tile multiplies probabilities that are exactly 0 by every k and v (and q, dO) row
it visits, and 0 * inf is NaN: an inf or NaN at a key can reach rows that do not keep it, and
only as a NaN in their outputs. So each kernel's unchanged variant runs first and sets the flag
when a value it stores is not finite; an output without one is exact. Its sanitizing variant
runs next and exits at once unless the flag is set (kernels.py): inputs without a non-finite
value run the unchanged loops, plus one reduction over each output tile and launches that do
nothing, and nothing reads the inputs a second time.

The Triton forward at D <= 64 on at most :data:`LOCAL_MAX_KEYS` keys
(``LOCAL_SANITIZE``) launches once instead of twice: a program whose own output is not finite
computes its block again with the sanitizing loops and stores it over the first. That is
exact for the same reason (a row whose output holds no inf or NaN is exact), and saves a
launch a call: 9-14 µs of host time a call at B=1, H=16, D=64, T=4,096, the synchronized call
-1 to +3 µs, within the method's noise (run 190, call by call). The kernel holds the
sanitizing loops too, behind a branch no finite input takes, which changes its code: on sm_90
its tile loops do not spill, but some are longer (a hash forward's inner loop 1,010 -> 1,194
instructions with Triton 3.6) and the segment loop spills a few registers. Its kernel time,
against the pair's two (run 191, profiler, bf16, causal): 0.5-3% longer for Dense and QKDrop,
4-9% for Hash(16) and Hash(64), at 4,096, 16,384 and 32,768 tokens alike. At 4,096 that is
at most 3 µs, less than the launch saves; longer calls, where the kernels set the time, would
pay 8-31 µs: they keep the pair. The dQ kernel, tried the same
way, spilled in its tile loops and keeps its pair, as do the forwards at D >= 128 (their tile
loops spilled too). :func:`sanitize_in_pairs` brings the forward's pair back everywhere (A/B
timing and tests).

Inside :func:`merged_sanitize`, the backward launches its two unchanged variants and then one
launch of both sanitizing ones (``kernels._attn_bwd_sanitize``: a grid axis picks dQ's programs
or dK/dV's) where it took two: a launch fewer a backward, at every head dim. The two run side
by side, so there the dQ programs leave the delta as the unchanged dQ variant stored it. Off
by default: timed call by call (run 190), it took 7-18 µs *more* host time a forward+backward
than the pairs (its launch read its 45 arguments afresh, where a pair's two launches share one
reading) and 1-4 µs less synchronized; launched from a site since, the kept group's index
tensors one block (run 208), it was within -12 and +4 µs of the pairs, no gain resolved.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..switch import switched_on

__all__ = ["LOCAL_MAX_KEYS", "launch_pair", "merged_sanitize", "merged_sanitize_on", "new_flags", "sanitize_in_pairs"]

# the most keys (and so queries: Tq <= Tk) on which the forward at D <= 64 sanitizes in its own
# launch: where the host, not the kernels, sets a call's time (runs 190 and 191: longer calls
# would pay more kernel time than the launch saves)
LOCAL_MAX_KEYS = 4096

_PAIRED = [False]  # sanitize_in_pairs() in force
_MERGED = [False]  # merged_sanitize() in force


def split_counters(batch_heads: int, *blocks: int) -> int:
    """How many split counters follow a call's two flags (kernels._split_counters): one per
    batch-head and block of the side with the most blocks (``blocks``: each side's), so that
    every split kernel's blocks, either side's, have theirs (the Triton build reserves and zeroes
    them; :func:`new_flags` where asked)."""
    return batch_heads * max(blocks)


def new_flags(device: torch.device, counters: int = 0) -> tuple[Tensor, Tensor]:
    """Zeroed int32 flags on ``device`` for a call's two passes, the forward's and the
    backward's (dQ then dK/dV), followed by ``counters`` zeroed split counters (the split
    attention kernels count their blocks' shares there: kernels._split_counters, and leave
    them zero): one allocation and one fill, for a group whose build wrote no flags of its own
    (``PreparedGroup.flags``: Triton's build zeroes two in its index buffer, in its last launch,
    its counters after them). Launch arguments, never read on the host (graph-capturable). A
    second backward of one call (``retain_graph``) finds the backward's flag as the first left
    it: set, its sanitizing variants compute again, exactly, only slower."""
    flags = torch.zeros(2 + counters, dtype=torch.int32, device=device)
    return (flags[:2] if counters else flags).unbind()


def sanitize_in_pairs():
    """Inside the block a launch marked ``local`` (the Triton forward at D <= 64 on at most
    :data:`LOCAL_MAX_KEYS` keys) is a launch pair again, its unchanged variant then its
    sanitizing one, as every other kernel's (the module docstring): A/B timing and tests."""
    return switched_on(_PAIRED)


def merged_sanitize():
    """Inside the block a backward's two sanitizing variants are one launch after both
    unchanged ones (the module docstring): A/B timing and tests."""
    return switched_on(_MERGED)


def merged_sanitize_on() -> bool:
    """Whether :func:`merged_sanitize` is in force."""
    return _MERGED[0]


def launch_pair(kernel, launch, tensors: tuple, rest: tuple, scalars: tuple, *, sanitize: bool = True) -> None:
    """Launch ``kernel``'s unchanged variant, then its sanitizing one (``SANITIZE=True``) with
    the same arguments, the flag among them: the second computes the outputs again only when
    the first stored a value that is not finite (or, for dK/dV, when the dQ kernel did, in
    which case the unchanged dK/dV variant stores nothing).

    ``launch``: the pair's grid, constants and sites (``op.Launch``): its ``unchanged``, a
    launch called as a ``launch.Site`` is that stands in for the unchanged variant (a kernel
    computing the same outputs under the same flag protocol: gluon_dkdv.py), None for the
    Triton kernel;
    its ``local``: ``kernel`` itself takes ``LOCAL_SANITIZE`` (no ``unchanged`` then), one
    launch, a pair inside :func:`sanitize_in_pairs`. The runtime arguments are
    ``(*tensors, *rest, *scalars)`` (``launch.Site``); the two launches share one reading of
    ``tensors``. ``sanitize=False``: the unchanged variant alone (its sanitizing one runs
    elsewhere: :func:`merged_sanitize`).
    """
    if launch.local and not _PAIRED[0]:
        launch.site(kernel, "LOCAL_SANITIZE")(tensors, rest, scalars)
        return
    unchanged = launch.unchanged or launch.site(kernel)
    reading = unchanged(tensors, rest, scalars)
    if sanitize:
        launch.site(kernel, "SANITIZE")(tensors, rest, scalars, reading)
