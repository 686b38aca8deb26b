#!/bin/bash
# #12: (1) launches from launch.Site (keyed by their per-call tensors' dtypes, their block and their scalars), timed
# call by call against every launch keyed by all its arguments (ab_calls.py --ab sites); (2) the GPU tests the change
# touches first (lean launches and sites, Gluon launchers, exactness, non-finite flags, CUDA graphs, dense heads,
# top-k); (3) the index build's sort kernels before and after the dense-heads flag (ab_sort_kernels.py: the profiler's
# GPU time of every _sort*/_scatter* kernel a build launches, bit-for-bit index tensors); (4) the rest of the GPU tests
# as the time allows. Carry [".whl", "build/index_1a7cdc3.py"] (git show 1a7cdc3:tilesparse/backends/triton/index.py)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
for ab in sites:hash16,keep0.7 sites:dense-triton,topk8; do
  name=${ab%%:*}; pats=${ab#*:}; out=$R/ab_calls_${name}_${pats//[,.]/_}_run207
  timeout 110 python3 benchmarks/results/logs/ab_calls.py --ab $name --shapes 1x16x16x64x4096,1x32x8x128x4096 \
    --patterns $pats --modes fwd,fwd_bwd --pairs 200 --out $out.json > $out.txt 2>&1
  echo "ab $name $pats rc=$? t=$(( $(date +%s) - T0 ))s"; tail -18 $out.txt | cut -c1-220
done
FIRST="test_lean_launch_gpu.py test_gluon_fwd_gpu.py test_gluon_dq_gpu.py test_gluon_dkdv_gpu.py test_triton_gpu.py
  test_nan_containment_gpu.py test_graphs_gpu.py test_graph_capture_gpu.py test_dense_heads_gpu.py test_topk_gpu.py"
LEFT=$(( 400 - ($(date +%s) - T0) ))
timeout $LEFT python3 -m pytest -q -rfEs -m gpu -n 10 -p no:cacheprovider $(for f in $FIRST; do echo tests/gpu/$f; done) \
  > $R/tests_gpu_first_run207.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s (limit ${LEFT}s)"; grep -E "passed|failed|FAILED|ERROR" $R/tests_gpu_first_run207.log | tail -12 | cut -c1-300
LEFT=$(( 450 - ($(date +%s) - T0) ))
[ $LEFT -gt 30 ] || { echo "no time left for the sort kernels"; exit 0; }
timeout $LEFT python3 benchmarks/results/logs/ab_sort_kernels.py $R/ab_sort_kernels_run207.json \
  > $R/ab_sort_kernels_run207.log 2>&1
echo "sort ab rc=$? t=$(( $(date +%s) - T0 ))s"; tail -22 $R/ab_sort_kernels_run207.log | cut -c1-260
