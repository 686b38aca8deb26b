#!/bin/bash
# #12: decisions made in the call against decisions given, eagerly, on the current kernels and decide path
# (the lsh hashing kernel, the topk_abs kernel, Bernoulli draws), forward and forward+backward, each row
# timed back to back and synchronized (sync_ms), at T=16,384 and 32,768, D=64 and 128 (the goal: at most 10%)
# First, the GPU test run 139 failed (torch.compile of a TopKFeatures op: the traced decide's
# supports had the torch ops' strides, the kernel's real ones others), with topk_selector's fix.
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider --timeout 120 tests/gpu/test_graph_capture_gpu.py \
  -k reduce_overhead > $R/tests_run140.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -1 $R/tests_run140.log | cut -c1-250
# the topk_abs kernel against the criterion's torch ops alone (GPU time, do_bench), B=1, H=32, Hkv=8, bf16
python3 - <<'PY' | tee $R/topk_kernel_run140.txt
import json, os, torch
from triton.testing import do_bench
from tilesparse.backends.triton.topk import topk_abs_into
from tilesparse.patterns.criteria import topk_abs
rows = []
for T in (16384, 32768):
    for D in (64, 128):
        for n in (8, 32):
            q = torch.randn(1, 32, T, D, device="cuda", dtype=torch.bfloat16)
            k = torch.randn(1, 8, T, D, device="cuda", dtype=torch.bfloat16)
            qs, ks = (torch.empty(1, 32, T, n, device="cuda", dtype=torch.int32) for _ in range(2))
            kernel = do_bench(lambda: topk_abs_into(q, k, n, qs, ks), warmup=50, rep=300)
            torch_ops = do_bench(lambda: topk_abs(q, k.repeat_interleave(4, dim=1), k=n), warmup=50, rep=300)
            same = all(torch.equal(a, b) for a, b in zip((qs, ks), topk_abs(q, k.repeat_interleave(4, dim=1), k=n)))
            rows.append(dict(T=T, D=D, k=n, kernel_ms=kernel, torch_ms=torch_ops, same=same))
            print(rows[-1])
json.dump({"meta": {"what": "topk_abs: one Triton launch vs the criterion's torch ops (with the GQA copy), do_bench ms"},
           "rows": rows}, open(os.environ["OUT"] + "/r/topk_kernel_run140_h200.json", "w"), indent=1)
PY
left=$(( 585 - ($(date +%s) - T0) ))
timeout $left python3 benchmarks/bench_attention.py --grid full --d 64,128 --t 16384,32768 \
  --patterns keep0.7,hash16,hybrid,topk8,hash64,hash8 --decide both --flex none --no-long --budget-s 240 \
  --out $R/bench_decide_run140_h200.json > $R/bench_decide_run140.log 2>&1
echo "grid rc=$? t=$(( $(date +%s) - T0 ))"; grep -v -i warn $R/bench_decide_run140.log | tail -40 | cut -c1-160
