#!/bin/bash
# #11's closing run, part 2: the model-shape grid's 64k rows (run 135's grid stopped at its 140 s limit after 32k:
# the Gluon kernels compiled on a fresh machine), then the whole GPU suite on the current defaults
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 170 python3 benchmarks/bench_models.py --out $R --tag models64k_run136_h200 --shapes "1,32,8,128,65536" \
  > $R/bench_models64k_run136.log 2>&1; echo "grid 64k rc=$? t=$(( $(date +%s) - T0 ))"
left=$(( 585 - ($(date +%s) - T0) ))
timeout $left python3 -m pytest -q -rfEs -m gpu -n 12 -p no:cacheprovider --timeout $(( left - 20 )) tests/gpu \
  > $R/tests_gpu_all_run136.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"
tail -3 $R/tests_gpu_all_run136.log | cut -c1-250
grep -E "(FAILED|ERROR|SKIPPED|Timeout)" $R/tests_gpu_all_run136.log | head -12 | cut -c1-300
grep -v "^\[" $R/bench_models64k_run136.log | grep -v -i warn | tail -12 | cut -c1-130
