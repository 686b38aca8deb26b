#!/bin/bash
# Run 114's GPU tests again, one line a test (run 114's quiet run passed 212 of them, none failed, before its
# 330 s limit): the names of those that finish within the budget left
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 215 python3 -m pytest -v -rfE -m gpu -n 8 -p no:cacheprovider --timeout 200 tests/gpu/test_triton_gpu.py \
  tests/gpu/test_gluon_dkdv_gpu.py tests/gpu/test_nan_containment_gpu.py tests/gpu/test_graph_capture_gpu.py \
  tests/gpu/test_graphs_gpu.py tests/gpu/test_lean_launch_gpu.py tests/gpu/test_padding_gpu.py \
  > $R/tests_ws_default_run115.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"
grep -cE " PASSED " $R/tests_ws_default_run115.log; grep -E " (FAILED|ERROR) " $R/tests_ws_default_run115.log | head | cut -c1-250
