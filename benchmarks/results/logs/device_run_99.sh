#!/bin/bash
# The planner's GPU tests after index_host (a builder priced at its line plus its host time): what
# backend="auto" picks and runs, each index builder forced by the index lines, and the CuPy tests
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 420 python3 -m pytest -v -m gpu -n 8 -p no:cacheprovider tests/gpu/test_planner_gpu.py tests/gpu/test_cupy_gpu.py \
  > $R/tests_planner_cupy_run99.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; grep -cE " PASSED " $R/tests_planner_cupy_run99.log
grep -E " (FAILED|ERROR) " $R/tests_planner_cupy_run99.log | head; tail -3 $R/tests_planner_cupy_run99.log | cut -c1-160
