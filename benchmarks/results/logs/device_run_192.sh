#!/bin/bash
# #12: the GPU suite on the tree of the folded poison and the forward in one launch at D <= 64. Run 191's was cut at
# its time limit (290 s, on an H100) with 11 failures its summary never named: 9 among the first results, as many as
# the cases of test_the_folded_poison_gives_what_the_product_gave, whose assertion (the product's NaNs exactly) has
# since been made what the fold must do (assert_poison_reaches); 2 later, unknown. One line a test (-v), so a cut run
# still names what failed; the folded poison's file first.
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 90 python3 -m pytest -v -rfE -m gpu -n 9 -p no:cacheprovider tests/gpu/test_bound_checks_gpu.py > $R/tests_poison_run192.log 2>&1
echo "poison tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "FAILED|passed|failed" $R/tests_poison_run192.log | grep -v "^\[gw" | tail -12 | cut -c1-300
timeout 420 python3 -m pytest -v -rfE -m gpu -n 14 -p no:cacheprovider tests/gpu --ignore=tests/gpu/test_sequence_parallel_gpu.py \
  --ignore=tests/gpu/test_bound_checks_gpu.py > $R/tests_gpu_run192.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed" $R/tests_gpu_run192.log | grep -v "^\[gw" | tail -3 | cut -c1-300
grep -E "FAILED|ERROR" $R/tests_gpu_run192.log | cut -c1-250 | sort | uniq | head -20
