#!/bin/bash
# The GPU tests alone of run 212's changes (the split counters after the call's flags; the forward's poison at its
# launch site), on a machine with little device time left: the splits, lean launches and NaN containment
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 110 python3 -m pytest -v -rfE --tb=short -m gpu -n 14 -p no:cacheprovider tests/gpu/test_split_forward_gpu.py \
  tests/gpu/test_lean_launch_gpu.py tests/gpu/test_nan_containment_gpu.py > $R/tests_counters_run212a.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "FAILED|ERROR|passed|failed" $R/tests_counters_run212a.log | tail -8 | cut -c1-220
