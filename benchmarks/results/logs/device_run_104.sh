#!/bin/bash
# (run as one command line on the warm machine right after run 103) the capture and lean-launch GPU tests on
# the final lean path (run 103's test step ran out of time inside test_triton_gpu.py, after the lean tests passed)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 280 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_graph_capture_gpu.py tests/gpu/test_lean_launch_gpu.py \
  > $R/tests_capture_lean_run104.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))"; tail -n 2 $R/tests_capture_lean_run104.log
