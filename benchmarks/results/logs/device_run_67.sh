#!/bin/bash
# the final code: inference mode in a slot's signature, a failed capture named as such, the tests'
# shared given_decisions helper: the two CUDA-graph GPU test files again
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 240 python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider tests/gpu/test_graphs_gpu.py tests/gpu/test_graph_capture_gpu.py \
  > $R/tests_graphs_run67.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -3 $R/tests_graphs_run67.log | cut -c1-300
