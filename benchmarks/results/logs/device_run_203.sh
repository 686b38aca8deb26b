#!/bin/bash
# #12: a PerHead's dense heads fused into its rest's group, built by the Triton index build's sort launch itself
# (index.bind_group(dense_heads=...)) where the call copied and filled two decision tensors every call
# (execute.with_dense_heads; run 202: 32 us a fill under cProfile): the GPU tests of the fused PerHead plans, then
# the change timed call by call (ab_calls.py --ab dense-heads) at both 4k shapes, forward and forward+backward
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 200 python3 -m pytest -q -rfEs -m gpu -n 8 -p no:cacheprovider tests/gpu/test_dense_heads_gpu.py \
  tests/gpu/test_heavy_first_gpu.py tests/gpu/test_lean_launch_gpu.py > $R/tests_run203.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|ERROR|Error" $R/tests_run203.log | tail -12 | cut -c1-300
timeout 200 python3 benchmarks/results/logs/ab_calls.py --ab dense-heads --shapes 1x16x16x64x4096,1x32x8x128x4096 \
  --patterns perhead --modes fwd,fwd_bwd --pairs 200 --out $R/ab_calls_dense_heads_run203.json \
  > $R/ab_calls_dense_heads_run203.txt 2>&1
echo "ab rc=$? t=$(( $(date +%s) - T0 ))s"; tail -8 $R/ab_calls_dense_heads_run203.txt | cut -c1-220
