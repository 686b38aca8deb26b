#!/bin/bash
# The warp-specialized dQ kernel on by default at D=128 (ws_dq=1024, 64-key tiles in 3 stages): the target shapes at
# D=128 and the model-shape grid (README tables) with the new defaults, the dQ probe on Hash(16)/Hash(64) at 16k
# (1,024- and 256-row segments: the rule's threshold), then the GPU tests of the three Triton-backend kernel files
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 80 python3 benchmarks/bench_models.py --out $R --tag targets_run124_h200 \
  --shapes "2,12,12,128,16384;1,32,8,128,32768" --patterns keep0.7,keep0.5,keep0.3,hash16,hash64 \
  > $R/bench_targets_run124.log 2>&1; echo "targets rc=$? t=$(( $(date +%s) - T0 ))"
timeout 130 python3 benchmarks/bench_models.py --out $R --tag models_run124_h200 > $R/bench_models_run124.log 2>&1
echo "grid rc=$? t=$(( $(date +%s) - T0 ))"
timeout 50 python3 benchmarks/probe_gluon_bwd.py --kernel dq --out $R --tag probe_gluon_dq_d128_16k_run124_h200 \
  --shapes "2,12,12,128,16384" --patterns hash16,hash64 --variants 64:2:224,64:3:224 \
  > $R/probe_gluon_dq_d128_16k_run124.log 2>&1; echo "probe rc=$? t=$(( $(date +%s) - T0 ))"
left=$(( 575 - ($(date +%s) - T0) ))
timeout $left python3 -m pytest -v -rfE -m gpu -n 10 -p no:cacheprovider --timeout $(( left - 15 )) \
  tests/gpu/test_gluon_dq_gpu.py tests/gpu/test_triton_gpu.py tests/gpu/test_gluon_dkdv_gpu.py \
  > $R/tests_ws_dq_run124.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"
grep -cE " PASSED " $R/tests_ws_dq_run124.log; grep -E "(FAILED|ERROR|Timeout)" $R/tests_ws_dq_run124.log | head -12 | cut -c1-300
tail -2 $R/tests_ws_dq_run124.log | cut -c1-200
grep -v "^\[" $R/probe_gluon_dq_d128_16k_run124.log | grep -v -i warn | tail -6 | cut -c1-190
grep -v "^\[" $R/bench_targets_run124.log | grep -v -i warn | tail -16 | cut -c1-130
grep -v "^\[" $R/bench_models_run124.log | grep -v -i warn | tail -42 | cut -c1-130
