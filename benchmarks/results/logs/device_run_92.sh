#!/bin/bash
# The whole GPU suite again with each test's verdict printed (-v): run 87's reached its time limit
# on a cold machine with 269 passed, none failed, and a few not run
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 470 python3 -m pytest -v -m gpu -n 8 -p no:cacheprovider --durations=12 tests/gpu \
  --ignore=tests/gpu/test_sequence_parallel_gpu.py > $R/tests_gpu_all_run92.log 2>&1
echo "suite rc=$? t=$(( $(date +%s) - T0 ))"; grep -cE " PASSED " $R/tests_gpu_all_run92.log
grep -E " (FAILED|ERROR) " $R/tests_gpu_all_run92.log | head; tail -16 $R/tests_gpu_all_run92.log | cut -c1-160
