#!/bin/bash
# After run 209b (same machine): the split's GPU tests again, their counter check now reading the call's counters
# only (run 209b's read past them into the shares' slots, which hold floats: 3 failed there)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 200 python3 -m pytest -v -rfE --tb=short -m gpu -n 14 -p no:cacheprovider tests/gpu/test_split_forward_gpu.py \
  > $R/tests_split_run209c.log 2>&1
echo rc=$? t=$(( $(date +%s) - T0 )); grep -c PASSED $R/tests_split_run209c.log
grep -E "FAILED|ERROR|passed|failed" $R/tests_split_run209c.log | tail -5 | cut -c1-200
