#!/bin/bash
# D=128 bucket groups run three loops from 1,024-row segments (long_segment_rows 2,048 -> 1,024, run 118): the GPU
# tests of the Triton backend's kernels (Hash(16) at 16k and the hybrid at 32k now run three loops in
# test_long_sequences_against_chunked_reference), then the whole calls, new rule and old (--override), at the
# D=128 shapes whose segments it moves
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 290 python3 -m pytest -v -rfE -m gpu -n 10 -p no:cacheprovider --timeout 270 tests/gpu/test_triton_gpu.py \
  tests/gpu/test_gluon_dkdv_gpu.py > $R/tests_long1024_run119.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"
S="2,12,12,128,16384;1,32,8,128,16384;1,32,8,128,32768"
timeout 120 python3 benchmarks/bench_models.py --out $R --tag long1024_run119_h200 --shapes "$S" \
  --patterns hash16,hybrid > $R/bench_long1024_run119.log 2>&1; echo "bench rc=$? t=$(( $(date +%s) - T0 ))"
timeout 120 python3 benchmarks/bench_models.py --out $R --tag long2048_run119_h200 --shapes "$S" \
  --patterns hash16,hybrid --override '{"long_segment_rows": 2048}' > $R/bench_long2048_run119.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"
echo "passed $(grep -cE ' PASSED ' $R/tests_long1024_run119.log)"; grep -E " (FAILED|ERROR) " $R/tests_long1024_run119.log | head | cut -c1-250
tail -3 $R/tests_long1024_run119.log
grep -v "^\[" $R/bench_long1024_run119.log | grep -v -i warn | tail -12 | cut -c1-130
grep -v "^\[" $R/bench_long2048_run119.log | grep -v -i warn | tail -12 | cut -c1-130
