#!/bin/bash
# The dQ kernel at 216 consumer registers (run 126): its GPU tests, then the D=128 target rows as whole calls
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 200 python3 -m pytest -v -rfE -m gpu -n 6 -p no:cacheprovider --timeout 180 tests/gpu/test_gluon_dq_gpu.py \
  > $R/tests_gluon_dq_run127.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"
timeout 120 python3 benchmarks/bench_models.py --out $R --tag targets_run127_h200 \
  --shapes "2,12,12,128,16384;1,32,8,128,32768" --patterns keep0.7,keep0.5,hash16 \
  > $R/bench_targets_run127.log 2>&1; echo "targets rc=$? t=$(( $(date +%s) - T0 ))"
grep -cE " PASSED " $R/tests_gluon_dq_run127.log; grep -E "(FAILED|ERROR|Timeout)" $R/tests_gluon_dq_run127.log | head | cut -c1-300
tail -2 $R/tests_gluon_dq_run127.log | cut -c1-200
grep -v "^\[" $R/bench_targets_run127.log | grep -v -i warn | tail -12 | cut -c1-130
