#!/bin/bash
# #12: with the programs longest first (run 194), is a 4k call at D=64 still best with 128-row query blocks? Round 14
# (run 183, the grid's order) had 64-row blocks 4-15% slower; the longest causal chain, which now sets the kernels'
# end at 4k, is as many key tiles either way but each half as tall. Kernels alone (logs/ab_heavy_first.py with two
# overrides). Then the plan PerHead(dense_heads=[0], rest=Hash(16)) gets at the 4k shapes with backend='auto'.
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 200 python3 benchmarks/results/logs/ab_heavy_first.py $R/ab_block_q64_run197_h100.json 1x16x16x64x4096 \
  '[{"heavy_first": 1}, {"heavy_first": 1, "block_q": 64}]' > $R/ab_block_q64_run197.log 2>&1
echo "ab rc=$? t=$(( $(date +%s) - T0 ))s"; tail -8 $R/ab_block_q64_run197.log | cut -c1-170
timeout 100 python3 -c "
import torch, tilesparse as ts
attn = ts.compile(ts.PerHead(dense_heads=[0], rest=ts.Hash(buckets=16)), causal=True)
for B, H, Hkv, D, T in ((1, 16, 16, 64, 4096), (1, 32, 8, 128, 4096)):
    q = torch.randn(B, H, T, D, device='cuda', dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(B, Hkv, T, D, device='cuda', dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    print(attn.explain(q, k, v))
" > $R/explain_perhead_4k_run197.txt 2>&1
echo "explain rc=$?"; grep -E "^group|estimated|fusions|steps" $R/explain_perhead_4k_run197.txt | cut -c1-200
