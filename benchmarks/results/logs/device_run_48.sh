#!/bin/bash
# after this session's decide cuts (Decisions' field names, the capability read once): the GPU
# tests of the planner, CUDA graphs / torch.compile and the reliability checks
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
timeout 200 python3 -m pytest -v -rfE --tb=short -m gpu -n 8 -p no:cacheprovider tests/gpu/test_planner_gpu.py tests/gpu/test_graph_capture_gpu.py tests/gpu/test_reliability_gpu.py > $R/tests_gpu_h200_run48.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"
grep -E "FAILED|ERROR|passed|failed" $R/tests_gpu_h200_run48.log | cut -c1-300 | tail -15
