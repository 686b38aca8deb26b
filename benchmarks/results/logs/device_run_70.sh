#!/bin/bash
# replayed calls that make their decisions draw from the generator the eager call would use (the
# call's generator=, the op's own, a fresh one with resample=False: its state handed to the
# slot's registered generator and back): the CUDA-graph GPU test files again
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 200 python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider tests/gpu/test_graphs_gpu.py tests/gpu/test_graph_capture_gpu.py \
  > $R/tests_graphs_run70.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; grep -E "passed|failed|Error|assert" $R/tests_graphs_run70.log | tail -12 | cut -c1-300
