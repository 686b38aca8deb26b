"""Sequence-parallel sparse attention on two GPUs against one: time, all-to-all, exactness, reach.

    torchrun --nproc_per_node=2 benchmarks/bench_sequence_parallel.py --out $OUT/bench_sequence_parallel_h200.json

B=1, H=32, Hkv=8, D=128, bf16, forward+backward (``torch.autograd.grad`` of the output with a
fixed upstream gradient), the op making its own decisions inside the timed call (as training
does; each rank seeds its criteria's generator with seed + rank). For Hash(16) and QKDrop(0.5)
at each ``--t`` (default 131,072 and 262,144 total tokens):

- ``one_gpu``: the whole op on rank 0's GPU, all 32 heads over T tokens (rank 1 waits);
- ``two_gpu``: ``SequenceParallel`` over both ranks, each holding T/2 tokens of every head;
  the slower rank's time;
- ``all_to_all``: the exchanges alone on the same tensors: q, k, v in and the output back, plus
  their backward (four all-to-alls, the call's communication);
- each timed two ways: ``sync_ms`` (median of calls each followed by a device synchronize: what
  a step that waits sees) and ``b2b_ms`` (calls back to back, one synchronize at the end,
  divided by their number: device time); ``speedup`` is one GPU's time over two GPUs' for the
  same total tokens (the target is >= 1.8).

``exactness``: at ``--exact-t`` (65,536) rank 0's decisions for the whole sequence are broadcast,
and both ranks compare the sharded output and q, k, v gradients with the one-GPU op's on the same
inputs and decisions (largest |difference| over the largest |value|, per tensor).

``largest_t``: Hash(16) forward+backward once at each ``--search`` size, on one GPU and on two,
each attempt in fresh processes (an out-of-memory or a device error on one rank cannot leave the
other waiting inside a collective, or poison the next attempt); it stops at the first failure
and skips sizes whose estimated time passes ``--search-budget-s``.

Each part can run alone (each call writing its own ``--out``), to keep every command short:
``--only time`` (exactness and timing), ``--only search --search-gpus 1``, ``--only search
--search-gpus 2``.

NCCL runs with NVLink multicast off: the script sets NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 for its processes before any
communicator exists. ``--smoke`` runs every part on CPU with gloo at tiny sizes (the reference
backend): ``torchrun --nproc_per_node=2 benchmarks/bench_sequence_parallel.py --smoke --out x.json``.
"""

from __future__ import annotations

import os

# before torch creates any communicator: NVLink multicast (NVLS) stays off
NCCL_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
os.environ.update(NCCL_ENV)

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from datetime import timedelta  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import tilesparse as ts  # noqa: E402
from tilesparse.distributed import SequenceParallel, broadcast_decisions  # noqa: E402
from tilesparse.distributed.exchange import heads_to_sequence, sequence_to_heads  # noqa: E402

from benchmarks.shared_options import add_head_options, add_run_options  # noqa: E402

PATTERNS = {"hash16": ts.Hash(buckets=16), "qkdrop0.5": ts.QKDrop(keep=0.5)}
SEARCH_PATTERN = "hash16"


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="JSON file to write (rank 0)")
    p.add_argument("--t", default="131072,262144", help="total tokens to time, comma-separated")
    p.add_argument("--patterns", default=",".join(PATTERNS), help=f"of {sorted(PATTERNS)}")
    p.add_argument("--exact-t", type=int, default=65536, help="total tokens of the exactness check (0: skip)")
    p.add_argument("--search", default="524288,1048576,1572864,2097152,3145728,4194304",
                   help="total tokens tried for the largest T, ascending ('' skips the search)")  # fmt: skip
    p.add_argument("--search-budget-s", type=float, default=150.0, help="skip a size estimated to take longer")
    p.add_argument("--search-gpus", default="1,2", help="GPU counts to search: 1, 2 or both")
    p.add_argument("--only", choices=["time", "search"], default=None, help="run only the timing or the search")
    p.add_argument("--iters", type=int, default=10, help="timed calls per measurement")
    add_head_options(p, heads=32, kv_heads=8, head_dim=128)
    add_run_options(p, smoke_help="CPU, gloo, tiny sizes: checks the script runs")
    a = p.parse_args(argv)
    if a.smoke:
        a.t, a.exact_t, a.search, a.iters, a.warmup = "256,512", 128, "256,512", 2, 1
        a.heads, a.kv_heads, a.head_dim, a.backend = 4, 2, 16, "reference"
    return a


# -- processes and devices ------------------------------------------------------------------------


def device_of(rank: int, smoke: bool) -> torch.device:
    return torch.device("cpu") if smoke else torch.device("cuda", rank)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def dtype_of(smoke: bool) -> torch.dtype:
    return torch.float32 if smoke else torch.bfloat16


def make_inputs(a, T: int, device: torch.device, seed: int, tokens: slice | None = None):
    """q, k, v (B=1) over tokens ``tokens`` of a T-token sequence drawn from ``seed`` (every rank
    draws the same sequence), leaves that require grad, and an upstream gradient."""
    g = torch.Generator(device).manual_seed(seed)
    dt = dtype_of(a.smoke)
    shapes = [(1, a.heads, T, a.head_dim), (1, a.kv_heads, T, a.head_dim), (1, a.kv_heads, T, a.head_dim),
              (1, a.heads, T, a.head_dim)]  # fmt: skip
    out = []
    for s in shapes:
        t = torch.randn(s, generator=g, device=device, dtype=dt)
        out.append(t if tokens is None else t[:, :, tokens].contiguous())
    return [t.requires_grad_() for t in out[:3]], out[3]


def fwd_bwd(call, inputs, grad):
    """One training step's attention: the output and the gradients of q, k, v."""
    out = call(*inputs)
    return torch.autograd.grad(out, inputs, grad)


def time_it(fn, device: torch.device, a) -> dict:
    """sync_ms: median of calls each followed by a synchronize; b2b_ms: calls back to back."""
    for _ in range(a.warmup):
        fn()
    sync(device)
    each = []
    for _ in range(a.iters):
        t0 = time.perf_counter()
        fn()
        sync(device)
        each.append(1e3 * (time.perf_counter() - t0))
    t0 = time.perf_counter()
    for _ in range(a.iters):
        fn()
    sync(device)
    b2b = 1e3 * (time.perf_counter() - t0) / a.iters
    return {"sync_ms": statistics.median(each), "b2b_ms": b2b, "calls": a.iters}


def slowest(d: dict, device: torch.device) -> dict:
    """The slower rank's times (an all-reduce of the maxima)."""
    keys = ["sync_ms", "b2b_ms"]
    t = torch.tensor([d[k] for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return {**d, **{k: float(x) for k, x in zip(keys, t.tolist())}}


def peak_gib(device: torch.device) -> float | None:
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


# -- the timing -----------------------------------------------------------------------------------


def timing(a, rank: int, world: int, device: torch.device) -> list[dict]:
    rows = []
    for name in a.patterns.split(","):
        spec = PATTERNS[name]
        attn = ts.compile(spec, causal=True, backend=a.backend)
        for T in (int(x) for x in a.t.split(",")):
            row = {"pattern": name, "spec": json.loads(spec.model_dump_json()), "T": T, "B": 1, "H": a.heads,
                   "Hkv": a.kv_heads, "D": a.head_dim, "dtype": str(dtype_of(a.smoke)), "mode": "fwd_bwd"}  # fmt: skip
            # one GPU: rank 0 alone, the whole sequence and every head
            if rank == 0:
                try:
                    inputs, grad = make_inputs(a, T, device, seed=T)
                    gen = torch.Generator(device).manual_seed(1)
                    if device.type == "cuda":
                        torch.cuda.reset_peak_memory_stats(device)
                    row["one_gpu"] = time_it(lambda: fwd_bwd(lambda q, k, v: attn(q, k, v, generator=gen),
                                                             inputs, grad), device, a)  # fmt: skip
                    row["one_gpu"]["peak_gib"] = peak_gib(device)
                except Exception as e:  # noqa: BLE001 - an OOM is a result
                    row["one_gpu"] = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
                inputs = grad = None
                free(device)
            dist.barrier()
            # two GPUs: each rank its shard of the same sequence
            shard = slice(rank * T // world, (rank + 1) * T // world)
            inputs, grad = make_inputs(a, T, device, seed=T, tokens=shard)
            sp = SequenceParallel(attn)
            gen = torch.Generator(device).manual_seed(1 + rank)
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            two = time_it(lambda: fwd_bwd(lambda q, k, v: sp(q, k, v, generator=gen), inputs, grad), device, a)
            two["peak_gib"] = peak_gib(device)
            row["two_gpu"] = slowest(two, device)
            split = sp.split(a.heads, a.kv_heads)

            def exchanges():
                qh, kh, vh = sequence_to_heads(*inputs, split, sp.group)
                back = heads_to_sequence(qh, split, sp.group)  # an output's size, sent back
                return torch.autograd.grad([back, kh, vh], inputs, [grad, torch.ones_like(kh), torch.ones_like(vh)])

            row["all_to_all"] = slowest(time_it(exchanges, device, a), device)
            row["all_to_all"]["bytes_per_rank"] = _exchange_bytes(a, T, world, split)
            one = row.get("one_gpu", {})
            if rank == 0 and "sync_ms" in one:
                for k in ("sync_ms", "b2b_ms"):
                    row.setdefault("speedup", {})[k] = one[k] / row["two_gpu"][k]
                row["all_to_all_share"] = row["all_to_all"]["b2b_ms"] / row["two_gpu"]["b2b_ms"]
            inputs = grad = None
            free(device)
            if rank == 0:
                print(json.dumps(row), flush=True)
            rows.append(row)
    return rows


def _exchange_bytes(a, T: int, world: int, split) -> int:
    """Bytes one rank sends in a forward+backward call: q, k, v in and the output back, twice."""
    elem = torch.finfo(dtype_of(a.smoke)).bits // 8
    per_token = (split.local_heads + 2 * split.local_kv_heads) * (world - 1) + split.local_heads * (world - 1)
    return 2 * per_token * (T // world) * a.head_dim * elem


# -- exactness -----------------------------------------------------------------------------------


def exactness(a, rank: int, world: int, device: torch.device) -> list[dict]:
    rows = []
    T = a.exact_t
    for name in a.patterns.split(","):
        spec = PATTERNS[name]
        attn = ts.compile(spec, causal=True, backend=a.backend)
        inputs, grad = make_inputs(a, T, device, seed=7)
        dec = attn.decide(inputs[0].detach(), inputs[1].detach(), generator=torch.Generator(device).manual_seed(3))
        dec = broadcast_decisions(dec, src=0)  # rank 0's decisions on every rank
        whole = attn(*inputs, decisions=dec)
        want = [whole.detach(), *torch.autograd.grad(whole, inputs, grad)]
        shard = slice(rank * T // world, (rank + 1) * T // world)
        mine = [t[:, :, shard].detach().clone().requires_grad_() for t in inputs]
        sp = SequenceParallel(attn)
        out = sp(*mine, decisions=dec)
        got = [out.detach(), *torch.autograd.grad(out, mine, grad[:, :, shard])]
        errs = {}
        for label, g_, w in zip(("out", "dq", "dk", "dv"), got, want, strict=True):
            w = w[:, :, shard].float()
            err = torch.tensor([float((g_.float() - w).abs().max() / w.abs().max().clamp_min(1e-12))], device=device)
            dist.all_reduce(err, op=dist.ReduceOp.MAX)
            errs[label] = float(err)
        rows.append({"pattern": name, "T": T, "relative_max_error": errs})
        if rank == 0:
            print(json.dumps(rows[-1]), flush=True)
        inputs = grad = want = got = mine = out = dec = None
        free(device)
    return rows


# -- the largest T -------------------------------------------------------------------------------


def _attempt(rank: int, world: int, init_file: str, a, T: int, result_file: str) -> None:
    """One forward+backward of the search pattern at T total tokens on ``world`` ranks."""
    device = device_of(rank, a.smoke)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = "gloo" if a.smoke else "nccl"
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=600))  # fmt: skip
    attn = ts.compile(PATTERNS[SEARCH_PATTERN], causal=True, backend=a.backend)
    shard = slice(rank * T // world, (rank + 1) * T // world)
    g = torch.Generator(device).manual_seed(rank)
    dt = dtype_of(a.smoke)
    q = torch.randn(1, a.heads, T // world, a.head_dim, generator=g, device=device, dtype=dt).requires_grad_()
    k, v = (torch.randn(1, a.kv_heads, T // world, a.head_dim, generator=g, device=device, dtype=dt).requires_grad_()
            for _ in range(2))  # fmt: skip
    grad = torch.randn_like(q)
    call = SequenceParallel(attn) if world > 1 else attn
    t0 = time.perf_counter()
    fwd_bwd(lambda q_, k_, v_: call(q_, k_, v_, generator=g), [q, k, v], grad)
    sync(device)
    ms = 1e3 * (time.perf_counter() - t0)
    dist.barrier()
    if rank == 0:
        record = {"ms_first_call": ms, "peak_gib": peak_gib(device), "shard": str(shard)}
        Path(result_file).write_text(json.dumps(record))
    dist.destroy_process_group()


def largest_t(a) -> dict:
    """Per GPU count, every size tried (ok, error, or skipped) and the largest that ran."""
    import torch.multiprocessing as mp

    sizes = [int(x) for x in a.search.split(",") if x]
    out = {}
    for world in (int(x) for x in a.search_gpus.split(",")):
        tried, last_ok = [], None
        for T in sizes:
            est = None if last_ok is None else last_ok[1] / 1e3 * (T / last_ok[0]) ** 2
            if est is not None and est > a.search_budget_s:
                tried.append({"T": T, "skipped": f"estimated {est:.0f} s > --search-budget-s {a.search_budget_s:.0f}"})
                continue
            with tempfile.TemporaryDirectory() as tmp:
                result = os.path.join(tmp, "result.json")
                ctx = mp.start_processes(_attempt, args=(world, os.path.join(tmp, "rendezvous"), a, T, result),
                                         nprocs=world, join=False, start_method="spawn")  # fmt: skip
                try:
                    while not ctx.join(timeout=5):
                        pass
                    rec = {"T": T, "ok": True, **json.loads(Path(result).read_text())}
                    last_ok = (T, rec["ms_first_call"])
                except Exception as e:  # noqa: BLE001 - an OOM is the answer
                    lines = [ln for ln in str(e).splitlines() if ln.strip()]
                    rec = {"T": T, "ok": False, "error": " | ".join(lines[-3:])[:600]}
            print(json.dumps({"gpus": world, **rec}), flush=True)
            tried.append(rec)
            if not rec.get("ok") and "skipped" not in rec:
                break
        ok = [r["T"] for r in tried if r.get("ok")]
        out[f"{world}_gpu"] = {"largest_t": max(ok) if ok else None, "tried": tried}
    return out


# -- main ----------------------------------------------------------------------------------------


def meta(a, world: int) -> dict:
    try:
        head = subprocess.run(["git", "-C", str(Path(__file__).resolve().parent), "rev-parse", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip() or None  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        head = None
    return {
        "cmd": " ".join(sys.argv), "world": world, "torch": torch.__version__, "python": platform.python_version(),
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() and not a.smoke else "cpu",
        "git_commit": head, "backend": a.backend,
        "env": {k: os.environ[k] for k in NCCL_ENV},
        "timing": "sync_ms: median of calls each followed by a synchronize; b2b_ms: back-to-back calls / count",
    }  # fmt: skip


def main(argv=None) -> int:
    a = parse_args(argv)
    if "RANK" not in os.environ:
        raise SystemExit("launch with torchrun --nproc_per_node=2 (see the docstring)")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world != 2:
        raise SystemExit(f"this benchmark compares 2 GPUs with 1: run it with --nproc_per_node=2, got {world}")
    device = device_of(rank, a.smoke)
    if device.type == "cuda":
        if torch.cuda.device_count() < 2:
            raise SystemExit(f"needs 2 GPUs, found {torch.cuda.device_count()}")
        torch.cuda.set_device(device)
    results = {"meta": meta(a, world)}
    if a.only != "search":
        dist.init_process_group("gloo" if a.smoke else "nccl", device_id=device if device.type == "cuda" else None)
        if a.exact_t:
            results["exactness"] = exactness(a, rank, world, device)
        results["rows"] = timing(a, rank, world, device)
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0 and a.search and a.only != "time":
        free(device)  # rank 1 has left: both GPUs are the attempts'
        results["largest_t"] = largest_t(a)
    if rank == 0:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(results, indent=1, default=str))
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
