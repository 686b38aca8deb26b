#!/bin/bash
# #12: (1) one launch's host time by path (launch_costs.py: lean, Triton's run, its C launcher, ctypes cuLaunchKernel,
# torch's zero_); (2) a kept group's index tensors handed to the launches as one launch.Fixed block (read once per
# pool entry), timed call by call (ab_calls.py --ab fixed-args); (3) an identity layout's index tensors built on a pool
# entry's first call only, later calls zeroing the flags with a fill (--ab kept-identity); (4) the GPU tests, those
# the changes touch first (lean launches, Gluon launchers, exactness, non-finite flags, pools under CUDA graphs), then
# the rest as the time allows
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 60 python3 benchmarks/results/logs/launch_costs.py $R/launch_costs_run206.json 2>&1 | tail -11 | cut -c1-200
echo "launch t=$(( $(date +%s) - T0 ))s"
for ab in fixed-args:hash16,keep0.7 kept-identity:dense-triton,topk8; do
  name=${ab%%:*}; pats=${ab#*:}; out=$R/ab_calls_${name//-/_}_run206
  timeout 100 python3 benchmarks/results/logs/ab_calls.py --ab $name --shapes 1x16x16x64x4096,1x32x8x128x4096 \
    --patterns $pats --modes fwd,fwd_bwd --pairs 200 --out $out.json > $out.txt 2>&1
  echo "ab $name rc=$? t=$(( $(date +%s) - T0 ))s"; tail -18 $out.txt | cut -c1-220
done
FIRST="test_lean_launch_gpu.py test_gluon_fwd_gpu.py test_gluon_dq_gpu.py test_gluon_dkdv_gpu.py test_triton_gpu.py
  test_nan_containment_gpu.py test_graphs_gpu.py test_graph_capture_gpu.py test_dense_heads_gpu.py test_topk_gpu.py"
LEFT=$(( 380 - ($(date +%s) - T0) ))
timeout $LEFT python3 -m pytest -q -rfEs -m gpu -n 10 -p no:cacheprovider $(for f in $FIRST; do echo tests/gpu/$f; done) \
  > $R/tests_gpu_first_run206.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s (limit ${LEFT}s)"; grep -E "passed|failed|FAILED|ERROR" $R/tests_gpu_first_run206.log | tail -12 | cut -c1-300
LEFT=$(( 585 - ($(date +%s) - T0) ))
[ $LEFT -gt 60 ] || { echo "no time left for the rest"; exit 0; }
timeout $LEFT python3 -m pytest -q -rfEs -m gpu -n 10 -p no:cacheprovider tests/gpu --ignore=tests/gpu/test_sequence_parallel_gpu.py \
  $(for f in $FIRST; do echo --ignore=tests/gpu/$f; done) > $R/tests_gpu_rest_run206.log 2>&1
echo "rest rc=$? t=$(( $(date +%s) - T0 ))s (limit ${LEFT}s)"; grep -E "passed|failed|FAILED|ERROR" $R/tests_gpu_rest_run206.log | tail -12 | cut -c1-300
