#!/bin/bash
# The warp-specialized Gluon dK/dV kernel (808a61f), in one machine: its GPU tests (a hang named by
# pytest-timeout), then the target shapes with the Triton dK/dV kernel (the default), with the Gluon one
# (--override '{"ws_dkdv": 512}': groups without buckets and bucket groups of >= 512 rows a segment) and
# with it in every bucket group ('{"ws_dkdv": 1}', Hash rows), then probe_gluon_bwd.py at D=128
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 190 python3 -m pytest -v -rfE -m gpu -n 4 -p no:cacheprovider --timeout 150 tests/gpu/test_gluon_dkdv_gpu.py \
  > $R/tests_gluon_dkdv_run113.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"
S="2,12,12,64,16384;2,12,12,128,16384;1,32,8,128,32768"
timeout 100 python3 benchmarks/bench_models.py --out $R --tag targets_triton_dkdv_run113_h200 --shapes "$S" \
  --patterns keep0.7,keep0.5,keep0.3,hash16,hash64 > $R/bench_targets_triton_dkdv_run113.log 2>&1
echo "triton rc=$? t=$(( $(date +%s) - T0 ))"
timeout 110 python3 benchmarks/bench_models.py --out $R --tag targets_ws_dkdv_run113_h200 --shapes "$S" \
  --patterns keep0.7,keep0.5,keep0.3,hash16,hash64 --override '{"ws_dkdv": 512}' > $R/bench_targets_ws_dkdv_run113.log 2>&1
echo "ws rc=$? t=$(( $(date +%s) - T0 ))"
timeout 60 python3 benchmarks/bench_models.py --out $R --tag targets_ws_dkdv_all_run113_h200 --shapes "$S" \
  --patterns hash16,hash64 --override '{"ws_dkdv": 1}' > $R/bench_targets_ws_dkdv_all_run113.log 2>&1
echo "ws all rc=$? t=$(( $(date +%s) - T0 ))"
timeout $(( 555 - ($(date +%s) - T0) )) python3 benchmarks/probe_gluon_bwd.py --out $R --tag probe_gluon_bwd_d128_run113_h200 \
  --shapes "1,32,8,128,32768" --patterns keep0.7,hash16 > $R/probe_gluon_bwd_d128_run113.log 2>&1
echo "probe rc=$? t=$(( $(date +%s) - T0 ))"
grep -cE " PASSED " $R/tests_gluon_dkdv_run113.log; grep -E "(FAILED|ERROR|SKIPPED|Timeout)" $R/tests_gluon_dkdv_run113.log | head -12 | cut -c1-250
tail -2 $R/tests_gluon_dkdv_run113.log | cut -c1-200
for f in triton_dkdv ws_dkdv ws_dkdv_all; do grep -v "^\[" $R/bench_targets_${f}_run113.log | grep -v Warn | tail -20 | cut -c1-130; done
grep -v "^\[" $R/probe_gluon_bwd_d128_run113.log | tail -12 | cut -c1-200
