#!/bin/bash
# The warp-specialized Gluon dQ kernel (gluon_dq.py, off by default): its GPU tests, then probe_gluon_bwd.py --kernel dq
# (the Gluon kernel at three launch shapes against the Triton dQ kernel on the same inputs) at D=128 GQA 32k and
# D=64 B=2 H=12 16k, then whole calls at the target shapes with it taken (--override '{"ws_dq": 1}') and without
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 200 python3 -m pytest -v -rfE -m gpu -n 6 -p no:cacheprovider --timeout 180 tests/gpu/test_gluon_dq_gpu.py \
  > $R/tests_gluon_dq_run123.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"
timeout 120 python3 benchmarks/probe_gluon_bwd.py --kernel dq --out $R --tag probe_gluon_dq_d128_run123_h200 \
  --shapes "1,32,8,128,32768" --patterns keep0.7,keep0.3,hash16 > $R/probe_gluon_dq_d128_run123.log 2>&1
echo "probe d128 rc=$? t=$(( $(date +%s) - T0 ))"
timeout 80 python3 benchmarks/probe_gluon_bwd.py --kernel dq --out $R --tag probe_gluon_dq_d64_run123_h200 \
  --shapes "2,12,12,64,16384" --patterns keep0.7,keep0.3,hash16 --variants 64:2:224,64:3:224,128:2:224,128:3:224 \
  > $R/probe_gluon_dq_d64_run123.log 2>&1; echo "probe d64 rc=$? t=$(( $(date +%s) - T0 ))"
S="2,12,12,64,16384;2,12,12,128,16384;1,32,8,128,32768"
timeout 80 python3 benchmarks/bench_models.py --out $R --tag targets_ws_dq_run123_h200 --shapes "$S" \
  --patterns keep0.7,keep0.5,keep0.3,hash16,hash64 --override '{"ws_dq": 1}' > $R/bench_targets_ws_dq_run123.log 2>&1
echo "ws_dq rc=$? t=$(( $(date +%s) - T0 ))"
grep -cE " PASSED " $R/tests_gluon_dq_run123.log; grep -E "(FAILED|ERROR|SKIPPED|Timeout)" $R/tests_gluon_dq_run123.log | head -12 | cut -c1-300
tail -2 $R/tests_gluon_dq_run123.log | cut -c1-200
grep -v "^\[" $R/probe_gluon_dq_d128_run123.log | grep -v -i warn | tail -14 | cut -c1-190
grep -v "^\[" $R/probe_gluon_dq_d64_run123.log | grep -v -i warn | tail -16 | cut -c1-190
grep -v "^\[" $R/bench_targets_ws_dq_run123.log | grep -v -i warn | tail -22 | cut -c1-130
