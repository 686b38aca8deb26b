#!/bin/bash
# After run 209e (same machine): the CUDA-graph, graph-capture and dense-heads GPU tests on the tree with the split on
# by default (PerHead's fused group at 4k)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 125 python3 -m pytest -v -rfE --tb=short -m gpu -n 14 -p no:cacheprovider tests/gpu/test_graphs_gpu.py \
  tests/gpu/test_graph_capture_gpu.py tests/gpu/test_dense_heads_gpu.py > $R/tests_graphs_run209f.log 2>&1
echo rc=$? t=$(( $(date +%s) - T0 )); grep -c PASSED $R/tests_graphs_run209f.log
grep -E "FAILED|ERROR|passed|failed" $R/tests_graphs_run209f.log | tail -6 | cut -c1-200
