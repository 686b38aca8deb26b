#!/bin/bash
# The whole GPU suite with the three-loop rule at D=64 (68717de): long-sequence tests at T=32,768 reach it
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 540 python3 -m pytest -v -m gpu -n 8 -p no:cacheprovider --durations=12 tests/gpu \
  --ignore=tests/gpu/test_sequence_parallel_gpu.py > $R/tests_gpu_all_run94.log 2>&1
echo "suite rc=$? t=$(( $(date +%s) - T0 ))"; grep -cE " PASSED " $R/tests_gpu_all_run94.log
grep -E " (FAILED|ERROR) " $R/tests_gpu_all_run94.log | head; tail -16 $R/tests_gpu_all_run94.log | cut -c1-160
