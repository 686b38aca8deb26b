"""What a fused backward's dQ accumulation would cost: fp32 atomic adds of (query tile x D)
blocks into gathered rows, at a pattern's tile count.

The backward runs as two kernels (dQ; dK and dV), so the tiles' scores and probabilities are
computed twice: seven tile products against a fused backward's five. A fused backward keeps
dK and dV per key block and adds each tile's dQ share (``BLOCK_M x D`` in fp32) into a global
buffer with atomics, as FlashAttention-2 does. This probe times those adds alone: one program
per key block, each adding into query tiles whose rows are gathered through the layout's row
order, against the same loop storing without atomics and the loop loading only; and
(``tma_add``) the adds as one tensor-memory reduction per tile into a buffer kept in layout
order, FlashAttention-3's way (rows contiguous, cast back to original positions afterwards).
Each figure is ``triton.testing.do_bench``'s median.

Which query tiles a program visits (``--schedule``):

- ``random``: ``--tiles-per-program`` tiles drawn at random over all heads and a random row
  order, so that no two programs share rows in the cache: the worst case;
- ``causal``: a key block's program visits the query blocks from its own to the last of its
  head, as a fused causal backward does, with the key blocks of one head launched next to each
  other and rows in order: programs that run together add into the same rows, which stay in
  the L2 cache. ``--t`` is then the length after the pattern's compaction, so that the tile
  count is the pattern's (QKDrop(0.7) at B=1, H=32, T=32,768 visits about 2.1M tiles of
  64x64: ``--t 23168``).

    TRITON_INTERPRET=0 python3 benchmarks/probe_atomics.py --out DIR

The default tile count is QKDrop(0.7)'s at B=1, H=32, T=32,768 (about half of the causal
triangle of 64x64 tiles, ``--tiles``, for the random schedule); compare the atomic rows with
the dQ kernel's time there.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import torch
import triton
import triton.language as tl


@triton.jit
def _accumulate(DQ, ORDER, TILE_QB, STARTS, n_rows, MODE: tl.constexpr, BLOCK_M: tl.constexpr, D: tl.constexpr):
    pid = tl.program_id(0)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    acc = tl.zeros((BLOCK_M, D), dtype=tl.float32) + pid.to(tl.float32)
    if MODE == 3:
        desc = tl.make_tensor_descriptor(DQ, shape=[n_rows, D], strides=[D, 1], block_shape=[BLOCK_M, D])
    start = tl.load(STARTS + pid)
    end = tl.load(STARTS + pid + 1)
    for i in range(start, end):
        qb = tl.load(TILE_QB + i)
        if MODE == 3:
            desc.atomic_add([qb * BLOCK_M, 0], acc)
        else:
            rows = tl.load(ORDER + qb.to(tl.int64) * BLOCK_M + offs_m, mask=qb * BLOCK_M + offs_m < n_rows, other=0)
            ptrs = DQ + rows.to(tl.int64)[:, None] * D + offs_d[None, :]
            if MODE == 0:
                tl.atomic_add(ptrs, acc, sem="relaxed")
            elif MODE == 1:
                tl.store(ptrs, acc)
            else:
                acc += tl.load(ptrs)
        acc = acc * 0.5 + 1.0
    if MODE == 2:
        tl.store(DQ + offs_m[:, None] * D + offs_d[None, :], acc, mask=pid == 0)


MODES = {"atomic_add": 0, "store": 1, "load": 2, "tma_add": 3}


def schedule(args: argparse.Namespace, n_qb: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(row order, each program's query blocks back to back, where each program's start)."""
    rows = n_qb * args.block_m
    if args.schedule == "random":
        programs = triton.cdiv(args.tiles, args.tiles_per_program)
        order = torch.randperm(rows, device=dev)
        tile_qb = torch.randint(0, n_qb, (programs * args.tiles_per_program,), device=dev)
        starts = torch.arange(programs + 1, device=dev) * args.tiles_per_program
    else:  # program (head h, key block kb), kb fastest: query blocks kb .. n - 1 of head h
        n = n_qb // args.heads
        order = torch.arange(rows, device=dev)
        h, kb = torch.meshgrid(torch.arange(args.heads, device=dev), torch.arange(n, device=dev), indexing="ij")
        counts = (n - kb).flatten()
        starts = torch.cat([torch.zeros(1, dtype=torch.int64, device=dev), counts.cumsum(0)])
        first = torch.repeat_interleave(h.flatten() * n + kb.flatten(), counts)
        tile_qb = first + torch.arange(len(first), device=dev) - torch.repeat_interleave(starts[:-1], counts)
    return order.to(torch.int32), tile_qb.to(torch.int32), starts.to(torch.int32)


def run(args: argparse.Namespace) -> dict:
    dev = torch.device("cuda")
    torch.manual_seed(0)
    triton.set_allocator(lambda size, alignment, stream: torch.empty(size, device=dev, dtype=torch.int8))
    n_qb = args.heads * triton.cdiv(args.t, args.block_m)
    rows = n_qb * args.block_m
    dq = torch.zeros((rows, args.d), dtype=torch.float32, device=dev)
    order, tile_qb, starts = schedule(args, n_qb, dev)
    programs, tiles = len(starts) - 1, len(tile_qb)
    out = []
    sums = {}
    for name, mode in MODES.items():
        def call(mode=mode):
            _accumulate[(programs,)](dq, order, tile_qb, starts, rows, MODE=mode, BLOCK_M=args.block_m, D=args.d,
                                     num_warps=args.warps)  # fmt: skip
        if mode in (0, 3):  # one call's adds from zero: the two ways of adding must agree
            dq.zero_()
            call()
            sums[name] = dq[order.long()] if mode == 0 else dq.clone()  # layout order, both
        ms = triton.testing.do_bench(call, warmup=50, rep=300, return_mode="median")
        moved = tiles * args.block_m * args.d * 4
        out.append({"mode": name, "ms": ms, "GB_per_s": moved / ms / 1e6})
    err = ((sums["atomic_add"] - sums["tma_add"]).abs().max() / sums["atomic_add"].abs().max()).item()
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "host": platform.node(), "args": vars(args), "programs": programs, "tiles": tiles,
            "tma_add_rel_err": err, "rows": out}  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for probe_atomics.json")
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--t", type=int, default=32768)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--block-m", type=int, default=64)
    p.add_argument("--tiles", type=int, default=2_100_000,
                   help="tiles visited, random schedule (default: QKDrop(0.7), H=32, T=32k)")
    p.add_argument("--tiles-per-program", type=int, default=128, help="random schedule")
    p.add_argument("--schedule", choices=["random", "causal"], default="random", help="see the module docstring")
    p.add_argument("--warps", type=int, default=4)
    args = p.parse_args()
    res = run(args)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "probe_atomics.json").write_text(json.dumps(res, indent=1))
    print(f"{res['programs']} programs, {res['tiles']} tiles, tma_add against atomic_add: {res['tma_add_rel_err']:.1e}")
    for r in res["rows"]:
        print(f"{r['mode']:>10}  {r['ms']:8.3f} ms  {r['GB_per_s']:8.0f} GB/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
