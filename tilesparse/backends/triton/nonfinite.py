"""The device-side flag that sends a launch to the kernels' sanitizing loops.

A masked tile multiplies probabilities that are exactly 0 by every k and v (and q, dO) row
it visits, and 0 * inf is NaN: without care an inf or NaN at a key reaches rows that do not
keep it. The kernels contain it in separate loops, taken only when this flag is set, so inputs
without a non-finite value run the unchanged loops.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from torch import Tensor

from .launch import lean

__all__ = ["MAX_TENSORS", "block_sizes", "launch_pair", "nonfinite_flag"]

MAX_TENSORS = 4
FLOAT32_MAX: tl.constexpr = tl.constexpr(3.4028234663852886e38)  # only an inf lies above it


@triton.jit
def _rows_nonfinite(ptr, H, T, s0, s1, s2, rows, pid, nprog, D: tl.constexpr, BLOCK_R: tl.constexpr,
                    BLOCK_D: tl.constexpr):
    """1 where a row of the (B, H, T, D) tensor at ``ptr`` (unit stride in D) that program
    ``pid`` of ``nprog`` reads holds an inf or NaN, else 0."""
    cols = tl.arange(0, BLOCK_D)
    bad = tl.zeros([BLOCK_R], dtype=tl.int32)
    for start in range(pid * BLOCK_R, rows, nprog * BLOCK_R):
        r = start + tl.arange(0, BLOCK_R)
        t = r % T
        h = (r // T) % H
        b = r // T // H
        row = b.to(tl.int64) * s0 + h.to(tl.int64) * s1 + t.to(tl.int64) * s2
        x = tl.load(ptr + row[:, None] + cols[None, :], mask=(r < rows)[:, None] & (cols < D)[None, :], other=0.0)
        x = x.to(tl.float32)
        bad = tl.maximum(bad, tl.max(((x != x) | (tl.abs(x) > FLOAT32_MAX)).to(tl.int32), 1))
    return tl.max(bad, 0)


@triton.jit
def _nonfinite_kernel(flag, B,
                      a, Ha, Ta, sa0, sa1, sa2, b, Hb, Tb, sb0, sb1, sb2,
                      c, Hc, Tc, sc0, sc1, sc2, d, Hd, Td, sd0, sd1, sd2,
                      N: tl.constexpr, D: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):  # fmt: skip
    """Sets ``flag`` (zeroed by the caller) to 1 when one of the first N tensors holds an inf or
    NaN; every program that finds one stores the same 1."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    bad = _rows_nonfinite(a, Ha, Ta, sa0, sa1, sa2, B * Ha * Ta, pid, nprog, D, BLOCK_R, BLOCK_D)
    if N > 1:
        bad = tl.maximum(bad, _rows_nonfinite(b, Hb, Tb, sb0, sb1, sb2, B * Hb * Tb, pid, nprog, D, BLOCK_R, BLOCK_D))
    if N > 2:
        bad = tl.maximum(bad, _rows_nonfinite(c, Hc, Tc, sc0, sc1, sc2, B * Hc * Tc, pid, nprog, D, BLOCK_R, BLOCK_D))
    if N > 3:
        bad = tl.maximum(bad, _rows_nonfinite(d, Hd, Td, sd0, sd1, sd2, B * Hd * Td, pid, nprog, D, BLOCK_R, BLOCK_D))
    if bad > 0:
        tl.store(flag, 1)


@functools.lru_cache(maxsize=8)
def _programs(device: torch.device) -> int:
    """Programs of one flag launch: a few per SM on a GPU; few under the CPU interpreter, where
    each costs its own Python loop."""
    if device.type != "cuda":
        return 4
    return 4 * torch.cuda.get_device_properties(device).multi_processor_count


def nonfinite_flag(*tensors: Tensor) -> Tensor:
    """An int32 (1,) tensor on the tensors' device: 1 when some element of them is inf or NaN.

    ``tensors``: one to four (B, H_i, T_i, D) tensors of one batch size and head dim, each
    with unit stride in D (the attention kernels' inputs). One zero-fill and one kernel launch
    whatever their number (a read of each at memory speed), and no host read: a launch argument
    of the kernels, graph-capturable.
    """
    if not 1 <= len(tensors) <= MAX_TENSORS:
        raise ValueError(f"nonfinite_flag takes 1 to {MAX_TENSORS} tensors, got {len(tensors)}")
    first = tensors[0]
    B, D = first.shape[0], first.shape[-1]
    args = []
    for t in tensors + (first,) * (MAX_TENSORS - len(tensors)):
        if t.dim() != 4 or t.shape[0] != B or t.shape[-1] != D or t.stride(-1) != 1:
            raise ValueError(f"nonfinite_flag: tensors must be (B={B}, H, T, D={D}) with unit stride in D, got "
                             f"shape {tuple(t.shape)} and strides {t.stride()}")  # fmt: skip
        args += [t, t.shape[1], t.shape[2], *t.stride()[:3]]
    flag = torch.zeros(1, dtype=torch.int32, device=first.device)
    blocks = block_sizes(D)
    rows = max(B * t.shape[1] * t.shape[2] for t in tensors)
    grid = (max(1, min(_programs(first.device), triton.cdiv(rows, blocks["BLOCK_R"]))),)
    lean(_nonfinite_kernel)[grid](flag, B, *args, N=len(tensors), D=D, **blocks, num_warps=4)
    return flag


def block_sizes(head_dim: int) -> dict[str, int]:
    """The flag kernel's tile: whole rows, about 4,096 elements a step (32 a thread)."""
    block_d = triton.next_power_of_2(head_dim)
    return dict(BLOCK_R=max(1, 4096 // block_d), BLOCK_D=block_d)


def launch_pair(kernel, grid, *args, **kwargs) -> None:
    """Launch ``kernel``'s unchanged variant and its sanitizing one (``SANITIZE=True``) with the
    same arguments: each reads the flag and writes nothing unless it is its case (the
    sanitizing variant exits at once on finite inputs; the unchanged dK/dV kernel reads the
    flag only before its stores, where it leaves its loops' code as it was), so exactly one
    writes the outputs and the unchanged tile loops stay as they were compiled. The two
    launches share one reading of the arguments' specialization key."""
    launcher = lean(kernel)
    args_key = launcher.keyed(args)
    launcher.launch(grid, args, kwargs, args_key)
    launcher.launch(grid, args, {**kwargs, "SANITIZE": True}, args_key)
