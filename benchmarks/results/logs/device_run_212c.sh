#!/bin/bash
# Run 212c (same machine, after 212b): the GPU tests run 212 cut short: splits, NaN containment, dense heads, graph
# capture. Log: run212.tgz (tests_run212c.log)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 170 python3 -m pytest -q -rfE --tb=line -m gpu -n 14 -p no:cacheprovider tests/gpu/test_split_forward_gpu.py \
  tests/gpu/test_nan_containment_gpu.py tests/gpu/test_dense_heads_gpu.py tests/gpu/test_graph_capture_gpu.py \
  > $R/tests_run212c.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; grep -E "FAILED|ERROR|passed|failed" $R/tests_run212c.log | tail -12
