#!/bin/bash
# The whole GPU suite after this session's changes (the traced TopKFeatures decide's layout, the
# topk_abs kernel in 32-bit integers with kv heads selected once, 16 tokens a program)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 540 python3 -m pytest -q -rfEs -m gpu -n 12 -p no:cacheprovider --timeout 500 tests/gpu \
  > $R/tests_gpu_all_run143.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"
tail -3 $R/tests_gpu_all_run143.log | cut -c1-250
grep -E "(FAILED|ERROR|SKIPPED|Timeout)" $R/tests_gpu_all_run143.log | head -12 | cut -c1-300
