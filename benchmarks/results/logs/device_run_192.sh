#!/bin/bash
# #12: after run 191's GPU suite was cut at its limit with 11 failures unnamed (and too little device time was left
# for the whole suite again): the files its changes touch, one line a test: the folded poison's own test (its
# assertion made principled: run 191's held the NaNs to the product's exactly), the bound id checks, bad ids'
# reliability and NaN containment (the forward in one launch, the default since run 190)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 140 python3 -m pytest -v -rfE -m gpu -n 14 -p no:cacheprovider tests/gpu/test_bound_checks_gpu.py \
  tests/gpu/test_reliability_gpu.py tests/gpu/test_nan_containment_gpu.py > $R/tests_gpu_run192.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed" $R/tests_gpu_run192.log | grep -v "^\[gw" | tail -3 | cut -c1-300
grep -E "FAILED|ERROR" $R/tests_gpu_run192.log | cut -c1-250 | sort | uniq | head -20
