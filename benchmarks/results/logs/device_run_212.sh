#!/bin/bash
# The split counters after the call's flags (zeroed by the index build, or by new_flags' one fill; no fill per split
# launch), the forward's poison launched through its site and the given ids' check launched from launch sites (no
# general launch on calls with checked ids):
# (1) the GPU tests of the splits, graph capture, dense heads, lean launches and NaN containment;
# (2) the tree before these two changes against this one, one process each; make it first (not committed):
#   mkdir -p ab212_old && git archive 8854504 tilesparse | tar -x -C ab212_old && sed -i \
#     's/fwd_split=4, dq_split=4, split_programs/fwd_split=4, dq_split=4, dkdv_split=4, split_programs/' \
#     ab212_old/tilesparse/backends/triton/op.py
# PerHead, Hash(16) and TopKFeatures(8) paired with cuDNN call by call, decisions given trusted and checked; then
# TopKFeatures(8) compiled with backend="auto" (a default compile) paired at D=64 and at D=128 GQA
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
timeout 100 python3 -m pytest -v -rfE --tb=short -m gpu -n 14 -p no:cacheprovider tests/gpu/test_split_forward_gpu.py \
  tests/gpu/test_graph_capture_gpu.py tests/gpu/test_dense_heads_gpu.py tests/gpu/test_lean_launch_gpu.py \
  tests/gpu/test_nan_containment_gpu.py tests/gpu/test_bound_checks_gpu.py tests/gpu/test_reliability_gpu.py \
  > $R/tests_counters_run212.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "FAILED|ERROR|passed|failed" $R/tests_counters_run212.log | tail -8 | cut -c1-220
# TopKFeatures(8) as a default compile runs it (backend="auto": the planner's choice, printed), both shapes
python3 -c "
import torch, tilesparse as ts
for B, H, Hkv, D in ((1, 16, 16, 64), (1, 32, 8, 128)):
    q = torch.randn(B, H, 4096, D, device='cuda', dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn(B, Hkv, 4096, D, device='cuda', dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    plan = ts.compile(ts.TopKFeatures(k=8)).plan(q, k, v)
    print('topk8 auto D=%d:' % D, [a.backend.NAME for a in plan.assignments])
" > $R/topk8_auto_plan_run212.txt 2>&1; cat $R/topk8_auto_plan_run212.txt | tail -3
# in order of need, each its own process: this tree, TopKFeatures(8) by default at D=64, the tree before, at D=128 GQA
paired() {  # paired TREE SHAPE PATTERNS NAME
  PYTHONPATH=/tmp/site:$1 timeout 60 python3 benchmarks/results/logs/paired_cudnn.py --shapes $2 --patterns $3 \
    --modes fwd,fwd_bwd,fwd_checked,fwd_bwd_checked --pairs 50 --out $R/paired_cudnn_$4_run212_$GPU.json \
    > $R/paired_cudnn_$4_run212.txt 2>&1
  echo "paired $4 rc=$? t=$(( $(date +%s) - T0 ))"
}
paired $PWD 1x16x16x64x4096 perhead,hash16,topk8 new
paired $PWD 1x16x16x64x4096 topk8@auto topk8_auto_d64
paired $PWD/ab212_old 1x16x16x64x4096 perhead,hash16,topk8 old
paired $PWD 1x32x8x128x4096 topk8@auto topk8_auto_d128
for f in $R/paired_cudnn_*_run212.txt; do echo "== $(basename $f)"; grep " host " $f | cut -c1-150; done
