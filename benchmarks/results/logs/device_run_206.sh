#!/bin/bash
# #12: (1) one launch's host time by path (launch_costs.py: lean, Triton's run, its C launcher, ctypes cuLaunchKernel,
# torch's zero_); (2) a kept group's index tensors handed to the launches as one launch.Fixed block (read once per
# pool entry), timed call by call (ab_calls.py --ab fixed-args); (3) an identity layout's index tensors built on a pool
# entry's first call only, later calls zeroing the flags with a fill (--ab kept-identity); (4) the whole GPU suite on
# this tree; (5) the index build's sort kernels before and after the dense-heads flag (ab_sort_kernels.py; carry
# [".whl", "build/index_1a7cdc3.py"], made with: git show 1a7cdc3:tilesparse/backends/triton/index.py > build/index_1a7cdc3.py)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 90 python3 benchmarks/results/logs/launch_costs.py $R/launch_costs_run206.json 2>&1 | tail -11 | cut -c1-200
echo "launch rc=$? t=$(( $(date +%s) - T0 ))s"
for ab in fixed-args:hash16,keep0.7 kept-identity:dense-triton,topk8; do
  name=${ab%%:*}; pats=${ab#*:}; out=$R/ab_calls_${name//-/_}_run206
  timeout 120 python3 benchmarks/results/logs/ab_calls.py --ab $name --shapes 1x16x16x64x4096,1x32x8x128x4096 \
    --patterns $pats --modes fwd,fwd_bwd --pairs 200 --out $out.json > $out.txt 2>&1
  echo "ab $name rc=$? t=$(( $(date +%s) - T0 ))s"; tail -18 $out.txt | cut -c1-220
done
LEFT=$(( 520 - ($(date +%s) - T0) ))
timeout $LEFT python3 -m pytest -q -rfEs -m gpu -n 10 -p no:cacheprovider tests/gpu \
  --ignore=tests/gpu/test_sequence_parallel_gpu.py > $R/tests_gpu_run206.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s (limit ${LEFT}s)"; grep -E "passed|failed|FAILED|ERROR" $R/tests_gpu_run206.log | tail -15 | cut -c1-300
LEFT=$(( 590 - ($(date +%s) - T0) ))
timeout $LEFT python3 benchmarks/results/logs/ab_sort_kernels.py $R/ab_sort_kernels_run206.json \
  > $R/ab_sort_kernels_run206.log 2>&1
echo "sort rc=$? t=$(( $(date +%s) - T0 ))s"; tail -12 $R/ab_sort_kernels_run206.log | cut -c1-200
