#!/bin/bash
# after reverting the kept forward graph: the planner and CUDA-graph / torch.compile GPU tests
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
timeout 300 python3 -m pytest -v -rfE --tb=short -m gpu -p no:cacheprovider "tests/gpu/test_planner_gpu.py::test_each_index_builder_runs_the_call_exactly" > $R/tests_planner_graph_h200_run35.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"
grep -E "FAILED|ERROR|passed|failed" $R/tests_planner_graph_h200_run35.log | cut -c1-300 | tail -25
