"""What the ``lsh`` decisions cost on the GPU, per way of hashing, and what they add to a call.

For each shape and bucket count, on the same q and k (bf16), ``triton.testing.do_bench``'s
median of:

- ``torch``: the criterion's torch ops (``lsh_matmul``: a batched matmul per side, max, min,
  select), the rotation given;
- ``triton``: the Triton builder's hashing kernel (``backends/triton/hashing.py``, one launch);
- ``cupy``: the CuPy builder's hashing alone, where it is installed and takes the size;
- ``decide``: ``attn.decide(q, k)`` end to end (the rotation's draw included), whichever
  builder the op picks (``hasher`` names it);
- ``call`` and ``call_decide``: the forward and forward+backward of ``attn(q, k, v)`` with the
  decisions given, and made in the call (``*_decide``), and their ratio (the goal: at most
  1.10 at T = 16,384 and 32,768).

Each bucket agreement (``agree_torch``) is the fraction of tokens the kernel puts where the
criterion's torch ops do (the rest are near-ties of the fp32 projection against torch's bf16
one, see hashing.py).

    TRITON_INTERPRET=0 python3 benchmarks/probe_lsh.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import tilesparse as ts  # noqa: E402
from tilesparse.backends import lsh_hasher  # noqa: E402
from tilesparse.backends.triton import hashing  # noqa: E402
from tilesparse.ir import check_inputs  # noqa: E402
from tilesparse.patterns.criteria import lsh_matmul, lsh_rotation  # noqa: E402

SHAPES = ("1x32x8x128x16384", "1x32x8x128x32768", "2x12x12x128x16384", "2x12x12x128x32768", "2x12x12x64x16384",
          "2x12x12x64x32768")  # fmt: skip


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=10, rep=50, return_mode="median")


def probe(shape: str, buckets: int, modes: list[str]) -> dict:
    B, H, Hkv, D, T = (int(x) for x in shape.split("x"))
    dev = torch.device("cuda")
    g = torch.Generator(dev).manual_seed(0)
    q = torch.randn(B, H, T, D, device=dev, dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(B, Hkv, T, D, device=dev, dtype=torch.bfloat16, generator=g) for _ in range(2))
    rot = lsh_rotation(H, D, buckets, q.dtype, dev, g).float()
    k_heads = k.repeat_interleave(H // Hkv, dim=1)
    row: dict = {"shape": shape, "buckets": buckets}
    qb, kb = (torch.empty(B, H, T, dtype=torch.int32, device=dev) for _ in range(2))
    row["torch"] = bench(lambda: lsh_matmul(q, k_heads, rot.to(q.dtype), buckets))
    row["triton"] = bench(lambda: hashing.hash_into(q, k, rot, buckets, qb, kb))
    want_q, want_k = lsh_matmul(q, k_heads, rot.to(q.dtype), buckets)
    hashing.hash_into(q, k, rot, buckets, qb, kb)
    row["agree_torch"] = ((qb == want_q).float().mean().item() + (kb == want_k).float().mean().item()) / 2
    try:
        from tilesparse.backends.cupy.index import hash_into as cupy_hash, hash_reasons

        if not hash_reasons("cuda", D, buckets, B * H * T):
            row["cupy"] = bench(lambda: cupy_hash(q, k, rot, buckets, qb, kb))
    except ImportError:
        pass
    inputs = check_inputs(q, k, v)
    hasher = lsh_hasher(inputs, buckets)
    row["hasher"] = hasher.NAME if hasher is not None else "torch"
    attn = ts.compile(ts.Hash(buckets=buckets), causal=True, backend="triton")
    row["decide"] = bench(lambda: attn.decide(q, k))
    dec = attn.decide(q, k)
    for mode in modes:
        grad = mode == "fwd_bwd"
        qq, kk, vv = (t.detach().requires_grad_(grad) for t in (q, k, v))
        go = torch.randn_like(q)

        def call(decisions):
            out = attn(qq, kk, vv, decisions=decisions)
            if grad:
                out.backward(go)

        row[f"call_{mode}"] = bench(lambda: call(dec))
        row[f"call_decide_{mode}"] = bench(lambda: call(None))
        row[f"decide_ratio_{mode}"] = row[f"call_decide_{mode}"] / row[f"call_{mode}"]
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for probe_lsh.json")
    p.add_argument("--shapes", default=",".join(SHAPES), help="BxHxHkvxDxT,... (default: %(default)s)")
    p.add_argument("--buckets", default="8,16,64")
    p.add_argument("--modes", default="fwd,fwd_bwd")
    args = p.parse_args()
    rows = []
    for shape in args.shapes.split(","):
        for b in (int(x) for x in args.buckets.split(",")):
            rows.append(probe(shape, b, args.modes.split(",")))
            print({k: round(v, 3) if isinstance(v, float) else v for k, v in rows[-1].items()}, flush=True)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
            "python": platform.python_version(), "cmd": " ".join(["benchmarks/probe_lsh.py", *sys.argv[1:]]),
            "unit": "ms (do_bench median)"}  # fmt: skip
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "probe_lsh.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
