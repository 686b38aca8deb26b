#!/bin/bash
# #12: the GPU suite again (run 191's was cut at its time limit with 11 failures unnamed): the folded poison's own test
# first (its assertion made principled: run 191's held the NaNs to the product's exactly), then the rest, one line a
# test, so that a cut run still names what failed
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 70 python3 -m pytest -q -rfE -m gpu -n 9 -p no:cacheprovider tests/gpu/test_bound_checks_gpu.py > $R/tests_poison_run192.log 2>&1
echo "poison tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|Error|assert" $R/tests_poison_run192.log | tail -12 | cut -c1-300
timeout 265 python3 -m pytest -v -rfE -m gpu -n 14 -p no:cacheprovider tests/gpu --ignore=tests/gpu/test_sequence_parallel_gpu.py \
  --ignore=tests/gpu/test_bound_checks_gpu.py > $R/tests_gpu_run192.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "FAILED|ERROR|passed|failed" $R/tests_gpu_run192.log | grep -v "^\[gw" | tail -5 | cut -c1-300
grep -E "FAILED|ERROR" $R/tests_gpu_run192.log | cut -c1-250 | sort | uniq | head -20
