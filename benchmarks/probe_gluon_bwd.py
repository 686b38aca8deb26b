"""Probe: the warp-specialized dK/dV kernel (tilesparse/backends/triton/gluon_dkdv.py), or with
``--kernel dq`` the warp-specialized dQ kernel (gluon_dq.py), at launch shapes of its own, against
the Triton kernel on the same inputs.

The backward is where the D=128 targets are furthest off, and the dK/dV kernel is most of it
(19 of QKDrop(0.7)'s 31 ms of backward at B=1, H=32, Hkv=8, T=32,768; docs/kernels.md, the
profile of run 77). Both kernels run from one prepared group, forward output and delta, into
fp32 buffers per query head (the GQA buffers the backend sums into the kv heads); each row
records the largest difference of the Gluon kernel's dK and dV (dQ and delta) from the Triton
kernel's, and each kernel's time two ways: back to back (``ms``) and synchronized after every call (``sync_ms``;
the gap is host time).

Compile every launch shape for sm_90 without a GPU (spills, shared memory):

    python benchmarks/probe_gluon_bwd.py --compile

On a GPU:

    python3 benchmarks/probe_gluon_bwd.py --out DIR [--shapes 1,32,8,128,16384] [--patterns keep0.7] \
        [--variants BLOCK_M:STAGES:CONSUMER_REGS:MAXNREG,...]
    python3 benchmarks/probe_gluon_bwd.py --kernel dq --out DIR [...] [--variants BLOCK_N:STAGES:CONSUMER_REGS,...]

The dQ rows time each kernel as the backend launches it: the launch pair of nonfinite.py (the
unchanged kernel, then the Triton kernel's sanitizing variant, which exits at once).
"""

from __future__ import annotations

import functools
import itertools
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_models import probe_args  # noqa: E402

from tilesparse.backends.triton.gluon_dkdv import WsConfig  # noqa: E402
from tilesparse.backends.triton.gluon_dq import DqConfig  # noqa: E402
from tilesparse.backends.triton.nonfinite import new_flags  # noqa: E402
from tilesparse.backends.triton.op import LOG2E  # noqa: E402
from tilesparse.backends.triton.sm90 import DROP_CAUSAL, compile_gluon_dkdv, report  # noqa: E402


def _compile_report() -> int:
    for d, bm, st, (regs, maxnreg) in itertools.product((128, 64), (64, 32), (2, 3), ((216, 128), (240, 255))):
        try:
            r = report(compile_gluon_dkdv(torch.bfloat16, d, DROP_CAUSAL, True, False, WsConfig(bm, st, regs, maxnreg)))
            print(f"D={d} BLOCK_M={bm} STAGES={st} consumer {regs} registers (maxnreg {maxnreg}): "
                  f"stack {r.stack} loop spills {r.loop_spills} shared {r.shared}")  # fmt: skip
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"D={d} BLOCK_M={bm} STAGES={st} {regs}/{maxnreg}: FAILED {type(e).__name__}: {str(e)[-1500:]}")
    return 0


def _dkdv_args(q, k, v, do, dk, dv, lse, delta, g, scale: float, work: tuple = ()) -> tuple:
    """kernels._attn_bwd_dkdv's runtime arguments for prepared group ``g`` (its flag zeroed: the
    dQ kernel flagged nothing), which the Gluon kernel takes too but the workspace: ``work``
    (the Triton kernel's, unsplit: any tensor) or none."""
    H, T, Tk = q.shape[1], q.shape[2], k.shape[2]
    return (
        q, k, v, do, dk, dv, lse, delta, *work, g.q_order, g.q_pos, g.q_bucket, g.k_order, g.k_pos, g.k_bucket,
        g.k_ranges, g.k_nseg, g.head_map, new_flags(q.device)[0], *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
        *do.stride()[:3], *dk.stride()[:3], *dv.stride()[:3], len(g.heads), T, Tk, g.k_ranges.shape[2],
        scale * LOG2E, scale, H // k.shape[1], H // v.shape[1],
    )  # fmt: skip


def _dq_args(q, k, v, o, do, dq, lse, delta, g, scale: float, work: tuple = ()) -> tuple:
    """kernels._attn_bwd_dq's runtime arguments for prepared group ``g`` (a zeroed flag), with
    ``work`` as :func:`_dkdv_args`."""
    H, T, Tk = q.shape[1], q.shape[2], k.shape[2]
    return (
        q, k, v, o, do, dq, lse, delta, *work, g.q_order, g.q_pos, g.q_bucket, g.k_order, g.k_pos, g.k_bucket,
        g.q_ranges, g.q_nseg, g.head_map, new_flags(q.device)[0], *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
        *o.stride()[:3], *do.stride()[:3], *dq.stride()[:3], len(g.heads), T, Tk, g.q_ranges.shape[2],
        scale * LOG2E, scale, H // k.shape[1], H // v.shape[1],
    )  # fmt: skip


def _pair(kernel, grid: tuple[int, int], args: tuple, constants: dict, gluon=None) -> None:
    """nonfinite.launch_pair of ``kernel`` on its runtime arguments ``args`` (tensors first, the
    workspace among them) with ``constants``; ``gluon``: a Gluon module's ``launch`` (its
    grid and options bound) standing in for the unchanged variant, on the arguments but the
    workspace, as op._without_workspace hands them."""
    from tilesparse.backends.triton.nonfinite import launch_pair
    from tilesparse.backends.triton.op import Launch

    n = sum(isinstance(a, torch.Tensor) for a in args)
    work = 8  # the workspace's position: after the eight tensors before it (dK/dV's and dQ's)

    def unchanged(tensors, rest, scalars, reading=None):
        gluon((*tensors[:work], *tensors[work + 1:], *rest, *scalars))

    launch_pair(kernel, Launch(grid, (), constants, None if gluon is None else unchanged), args[:n], (), args[n:])


def _cases(args):
    """Per shape and pattern of ``args``: (shape, inputs q, k, v, dO, the prepared group, its tile
    configuration, its flags, the scale, and the forward's O and LSE by the Triton forward)."""
    from bench_models import bf16_inputs, probe_group

    from tilesparse.backends.triton.op import _flags, launch_fwd

    for shape in args.shapes.split(";"):
        (B, H, Hkv, D, T), q, k, v, do = bf16_inputs(shape)
        q, k, v = (t.detach() for t in (q, k, v))
        for pname in args.patterns.split(","):
            g, cfg = probe_group(pname, q, k, v)
            scale = D**-0.5
            Hg = len(g.heads)
            o = torch.empty((B, Hg, T, D), dtype=q.dtype, device=q.device)
            lse = torch.empty((B, Hg, T), dtype=torch.float32, device=q.device)
            launch_fwd(q, k, v, o, lse, g, scale, cfg)
            yield (B, H, Hkv, D, T), pname, (q, k, v, do), g, cfg, _flags(g, cfg), scale, o, lse
        del q, k, v, do
        torch.cuda.empty_cache()


def main() -> int:
    args = probe_args("probe_gluon_bwd", {"dkdv": "64:2:216:128,32:2:232:128,32:3:232:128,64:2:240:255",
                                          "dq": "64:2:224,64:3:224,128:2:224"},
                      "dkdv: BLOCK_M:STAGES:CONSUMER_REGS:MAXNREG,...; dq: BLOCK_N:STAGES:CONSUMER_REGS,...",
                      kernels=("dkdv", "dq"))  # fmt: skip
    if args.kernel == "dq":
        return _compile_report_dq() if args.compile else _main_dq(args)
    if args.compile:
        return _compile_report()

    from bench_models import probe_results, timed

    from tilesparse.backends.triton import gluon_dkdv, kernels
    from tilesparse.backends.triton.op import _block_d, _precision, dp_first

    dev = torch.device("cuda")
    res, write = probe_results(args)
    t0 = time.time()
    for (B, H, Hkv, D, T), pname, (q, k, v, do), g, cfg, flags, scale, o, lse in _cases(args):
        Hg = len(g.heads)
        # delta from the dQ kernel, as the backward computes it (its dq is not used here)
        common = dict(HEAD_DIM=D, BLOCK_D=_block_d(D), PRECISION=_precision(q.dtype))
        delta = torch.empty((B, Hg, T), dtype=torch.float32, device=dev)
        dq = torch.zeros_like(q)
        n_qb = g.q_ranges.shape[2]
        _pair(kernels._attn_bwd_dq, (n_qb, B * Hg), _dq_args(q, k, v, o, do, dq, lse, delta, g, scale, (lse,)),
              dict(BLOCK_M=cfg.block_q, BLOCK_N=cfg.dq_n, MAX_SEG=g.q_ranges.shape[3], num_warps=cfg.dq_warps,
                   num_stages=cfg.dq_stages, **common, **flags))  # fmt: skip
        dk_ref = torch.zeros((B, Hg, T, D), dtype=torch.float32, device=dev)
        dv_ref = torch.zeros_like(dk_ref)
        n_kb = g.k_ranges.shape[2]

        tri = functools.partial(
            _pair, kernels._attn_bwd_dkdv, (n_kb, B * Hg),
            _dkdv_args(q, k, v, do, dk_ref, dv_ref, lse, delta, g, scale, (lse,)),
            dict(DKV_PER_QUERY_HEAD=True, BLOCK_M=cfg.dkdv_m, BLOCK_N=cfg.block_k, MAX_SEG=g.k_ranges.shape[3],
                 DP_FIRST=dp_first(cfg, flags["SINGLE_LOOP"]), num_warps=cfg.bwd_warps, num_stages=cfg.bwd_stages,
                 **common, **flags),
        )  # fmt: skip
        t = timed(tri)
        tri_ms = t["ms"]
        _record(res, write, t0, {"shape": [B, H, Hkv, D, T], "name": f"{pname} triton dkdv", **t,
                                 "block": [cfg.block_k, cfg.dkdv_m]})  # fmt: skip
        ref_scale = float(dk_ref.abs().max()), float(dv_ref.abs().max())
        for var in args.variants.split(","):
            bm, st, regs, maxnreg = (int(x) for x in var.split(":"))
            row = {"shape": [B, H, Hkv, D, T], "name": f"{pname} gluon-ws dkdv m{bm} s{st} r{regs}/{maxnreg}",
                   "config": [bm, st, regs, maxnreg]}  # fmt: skip
            dk = torch.full_like(dk_ref, float("nan"))
            dv = torch.full_like(dv_ref, float("nan"))
            run = functools.partial(
                gluon_dkdv.launch, (n_kb, B * Hg), _dkdv_args(q, k, v, do, dk, dv, lse, delta, g, scale),
                head_dim=D, per_query_head=True, max_seg=g.k_ranges.shape[3], flags=flags,
                config=WsConfig(bm, st, regs, maxnreg),
            )  # fmt: skip

            def compare(dk=dk, dv=dv):
                return dict(max_diff_dk=float((dk - dk_ref).abs().max()), max_diff_dv=float((dv - dv_ref).abs().max()),
                            max_dk=ref_scale[0], max_dv=ref_scale[1])  # fmt: skip

            _record(res, write, t0, _measure(row, run, compare, tri_ms, timed))
    write()
    _print_rows(res["rows"], 40, lambda r: f" diff dk {r['max_diff_dk']:.2e} (max {r['max_dk']:.2e}) dv "
                                           f"{r['max_diff_dv']:.2e} (max {r['max_dv']:.2e})")
    return 0


def _measure(row: dict, run, compare, tri_ms: float, timed) -> dict:
    """``row`` with a variant's run: its differences from the Triton kernel's outputs
    (``compare()`` after one run), then its times; or the error it failed with."""
    try:
        run()
        torch.cuda.synchronize()
        row.update(compare())
        t = timed(run)
        row.update(t, vs_triton=tri_ms / t["ms"])
    except Exception as e:  # noqa: BLE001 - a variant that fails to compile or run
        row["error"] = repr(e)[:600]
    return row


def _record(res: dict, write, t0: float, row: dict) -> None:
    res["rows"].append(row)
    print(f"[{time.time() - t0:.0f}s] {row}", file=sys.stderr, flush=True)
    write()


def _print_rows(rows: list[dict], width: int, extra) -> None:
    """The closing table: one line per row, ``extra(row)`` after the times of a measured variant."""
    for r in rows:
        if "error" in r:
            print(f"{r['shape']} {r['name']:{width}s} ERROR {r['error'][:200]}")
        else:
            more = extra(r) if "vs_triton" in r else ""
            print(f"{r['shape']} {r['name']:{width}s} {r['ms']:.3f} ms ({r['sync_ms']:.3f} synchronized){more}")


def _compile_report_dq() -> int:
    from tilesparse.backends.triton.sm90 import HASH_CAUSAL, compile_gluon_dq

    for d, bn, st, regs, flags in itertools.product((128, 64), (64, 128), (2, 3), (232, 224, 216),
                                                    (DROP_CAUSAL, HASH_CAUSAL)):  # fmt: skip
        name = f"D={d} BLOCK_N={bn} STAGES={st} consumers at {regs} registers {'hash' if flags == HASH_CAUSAL else 'drop'}"
        try:
            r = report(compile_gluon_dq(torch.bfloat16, d, flags, False, DqConfig(bn, st, regs)))
            print(f"{name}: stack {r.stack} loop spills {r.loop_spills} shared {r.shared}")
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"{name}: FAILED {type(e).__name__}: {str(e)[-1500:]}")
    return 0


def _main_dq(args) -> int:
    from bench_models import probe_results, timed

    from tilesparse.backends.triton import gluon_dq, kernels
    from tilesparse.backends.triton.op import _block_d, _precision

    dev = torch.device("cuda")
    res, write = probe_results(args)
    t0 = time.time()
    for (B, H, Hkv, D, T), pname, (q, k, v, do), g, cfg, flags, scale, o, lse in _cases(args):
        Hg = len(g.heads)
        grid = (g.q_ranges.shape[2], B * Hg)
        consts = dict(HEAD_DIM=D, BLOCK_D=_block_d(D), PRECISION=_precision(q.dtype), BLOCK_M=cfg.block_q,
                      BLOCK_N=cfg.dq_n, MAX_SEG=g.q_ranges.shape[3], num_warps=cfg.dq_warps,
                      num_stages=cfg.dq_stages, **flags)  # fmt: skip
        dq_ref = torch.zeros_like(q)
        delta_ref = torch.empty((B, Hg, T), dtype=torch.float32, device=dev)
        ref_args = _dq_args(q, k, v, o, do, dq_ref, lse, delta_ref, g, scale, (lse,))
        t = timed(functools.partial(_pair, kernels._attn_bwd_dq, grid, ref_args, consts))
        tri_ms = t["ms"]
        _record(res, write, t0, {"shape": [B, H, Hkv, D, T], "name": f"{pname} triton dq", **t,
                                 "block": [cfg.block_q, cfg.dq_n]})  # fmt: skip
        for var in args.variants.split(","):
            bn, st, regs = (int(x) for x in var.split(":"))
            row = {"shape": [B, H, Hkv, D, T], "name": f"{pname} gluon-ws dq n{bn} s{st} r{regs}",
                   "config": [bn, st, regs]}  # fmt: skip
            dq = torch.full_like(dq_ref, float("nan"))
            delta = torch.full_like(delta_ref, float("nan"))
            dq_args = _dq_args(q, k, v, o, do, dq, lse, delta, g, scale, (lse,))
            stand_in = functools.partial(gluon_dq.launch, grid, head_dim=D, max_seg=g.q_ranges.shape[3], flags=flags,
                                         config=DqConfig(bn, st, regs))  # fmt: skip
            run = functools.partial(_pair, kernels._attn_bwd_dq, grid, dq_args, consts, stand_in)

            def compare(dq=dq, delta=delta, flag=dq_args[18]):
                return dict(flagged=int(flag.item()), max_diff_dq=float((dq.float() - dq_ref.float()).abs().max()),
                            max_dq=float(dq_ref.float().abs().max()),
                            max_diff_delta=float((delta - delta_ref).abs().max()))  # fmt: skip

            _record(res, write, t0, _measure(row, run, compare, tri_ms, timed))
    write()
    _print_rows(res["rows"], 36, lambda r: f" diff dq {r['max_diff_dq']:.2e} (max {r['max_dq']:.2e}) delta "
                                           f"{r['max_diff_delta']:.2e} flag {r['flagged']} x{r['vs_triton']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
