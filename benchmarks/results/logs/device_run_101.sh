#!/bin/bash
# Tensors handed to Triton's launcher as their addresses on the lean path (launch.prepared): a launch's
# host time each way, A/B in one process (diag_launch_addresses.py); then the lean-launch and capture GPU tests
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 300 python3 benchmarks/results/logs/diag_launch_addresses.py $R/diag_launch_addresses_run101_h200.json \
  > $R/diag_launch_addresses_run101.log 2>&1; echo "diag rc=$? t=$(( $(date +%s) - T0 ))"
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_lean_launch_gpu.py tests/gpu/test_graph_capture_gpu.py \
  > $R/tests_lean_capture_run101.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"
tail -3 $R/tests_lean_capture_run101.log
cat $R/diag_launch_addresses_run101.log | cut -c1-200
