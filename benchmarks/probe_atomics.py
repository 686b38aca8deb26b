"""What a fused backward's dQ accumulation would cost: fp32 atomic adds of (query tile x D)
blocks into gathered rows, at a pattern's tile count.

The backward runs as two kernels (dQ; dK and dV), so the tiles' scores and probabilities are
computed twice: seven tile products against a fused backward's five. A fused backward keeps
dK and dV per key block and adds each tile's dQ share (``BLOCK_M x D`` in fp32) into a global
buffer with atomics, as FlashAttention-2 does. This probe times those adds alone: one program
per key block, each adding into ``TILES_PER_PROGRAM`` query tiles whose rows are gathered
through a random permutation (the layout's row order), against the same loop storing
without atomics and the loop loading only. Each figure is ``triton.testing.do_bench``'s median.

    TRITON_INTERPRET=0 python3 benchmarks/probe_atomics.py --out DIR

The default tile count is QKDrop(0.7)'s at B=1, H=32, T=32,768 (about half of the causal
triangle of 64x64 tiles, ``--tiles``); compare the atomic rows with the dQ kernel's time there.
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
def _accumulate(DQ, ORDER, TILE_QB, n_rows, tiles_per_program, MODE: tl.constexpr, BLOCK_M: tl.constexpr,
                D: tl.constexpr):
    pid = tl.program_id(0)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    acc = tl.zeros((BLOCK_M, D), dtype=tl.float32) + pid.to(tl.float32)
    for i in range(tiles_per_program):
        qb = tl.load(TILE_QB + pid.to(tl.int64) * tiles_per_program + i)
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


MODES = {"atomic_add": 0, "store": 1, "load": 2}


def run(args: argparse.Namespace) -> dict:
    dev = torch.device("cuda")
    torch.manual_seed(0)
    rows = args.heads * args.t
    n_qb = triton.cdiv(rows, args.block_m)
    programs = triton.cdiv(args.tiles, args.tiles_per_program)
    dq = torch.zeros((rows, args.d), dtype=torch.float32, device=dev)
    order = torch.randperm(rows, device=dev).to(torch.int32)
    tile_qb = torch.randint(0, n_qb, (programs * args.tiles_per_program,), device=dev, dtype=torch.int32)
    out = []
    for name, mode in MODES.items():
        def call(mode=mode):
            _accumulate[(programs,)](dq, order, tile_qb, rows, args.tiles_per_program, MODE=mode,
                                     BLOCK_M=args.block_m, D=args.d, num_warps=args.warps)
        ms = triton.testing.do_bench(call, warmup=50, rep=300, return_mode="median")
        moved = programs * args.tiles_per_program * args.block_m * args.d * 4
        out.append({"mode": name, "ms": ms, "GB_per_s": moved / ms / 1e6})
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "host": platform.node(), "args": vars(args), "rows": out}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for probe_atomics.json")
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--t", type=int, default=32768)
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--block-m", type=int, default=64)
    p.add_argument("--tiles", type=int, default=2_100_000, help="tiles visited (default: QKDrop(0.7), H=32, T=32k)")
    p.add_argument("--tiles-per-program", type=int, default=128)
    p.add_argument("--warps", type=int, default=4)
    args = p.parse_args()
    res = run(args)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "probe_atomics.json").write_text(json.dumps(res, indent=1))
    for r in res["rows"]:
        print(f"{r['mode']:>10}  {r['ms']:8.3f} ms  {r['GB_per_s']:8.0f} GB/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
