#!/bin/bash
# The lean launch path before run 101 against now (addresses, launch.prepared, the tail cached), A/B in one
# process (diag_lean_ab.py); the lean-launch GPU test (bitwise the normal path) and the Triton GPU tests
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 240 python3 benchmarks/results/logs/diag_lean_ab.py $R/diag_lean_ab_run103_h200.json \
  > $R/diag_lean_ab_run103.log 2>&1; echo "diag rc=$? t=$(( $(date +%s) - T0 ))"
timeout 330 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_lean_launch_gpu.py tests/gpu/test_triton_gpu.py \
  > $R/tests_lean_triton_run103.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"
tail -n 3 $R/tests_lean_triton_run103.log
cat $R/diag_lean_ab_run103.log | cut -c1-200
