#!/bin/bash
# Prepared, not run yet (no device time left in two sessions): when it runs, rename it device_run_N.sh and its outputs'
# runNNN to that run's number. Carry [".whl", "build/index_1a7cdc3.py"] (the device's copy has no git history; make the
# file with: git show 1a7cdc3:tilesparse/backends/triton/index.py > build/index_1a7cdc3.py).
# #12: the index build's sort kernels before and after the dense-heads flag (ab_sort_kernels.py: the profiler's GPU
# time of every _sort*/_scatter* kernel a build launches, bit-for-bit index tensors), as sm_90 compiles moved their
# registers; then the GPU tests run 206 left unfinished at its time limit (the first subset's last few)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 200 python3 benchmarks/results/logs/ab_sort_kernels.py $R/ab_sort_kernels_runNNN.json \
  > $R/ab_sort_kernels_runNNN.log 2>&1
echo "ab rc=$? t=$(( $(date +%s) - T0 ))s"; tail -22 $R/ab_sort_kernels_runNNN.log | cut -c1-260
timeout 360 python3 -m pytest -q -rfEs -m gpu -n 10 -p no:cacheprovider tests/gpu \
  --ignore=tests/gpu/test_sequence_parallel_gpu.py > $R/tests_gpu_runNNN.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|ERROR" $R/tests_gpu_runNNN.log | tail -15 | cut -c1-300
