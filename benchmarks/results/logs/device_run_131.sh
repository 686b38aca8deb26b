#!/bin/bash
# The warp-specialized Gluon forward (gluon_fwd.py: 128-key tiles, 2 stages, consumers at 224 registers, on by
# default at D=128 for groups without buckets and bucket groups from 2,048-row segments): its GPU tests, the
# target rows with it (default) and without it (ws_fwd=0), and Hash(16) at B=2 H=12 16k (1,024-row segments)
# with it forced (ws_fwd=1); then the Triton backend's GPU tests on the new default with the time left
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 200 python3 -m pytest -v -rfEs -m gpu -n 8 -p no:cacheprovider --timeout 190 tests/gpu/test_gluon_fwd_gpu.py \
  > $R/tests_gluon_fwd_run131.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -1 $R/tests_gluon_fwd_run131.log | cut -c1-200
grep -E "(FAILED|ERROR|SKIPPED|Timeout)" $R/tests_gluon_fwd_run131.log | head -8 | cut -c1-400
for tag in on off; do
  ov=$([ $tag = off ] && echo '{"ws_fwd": 0}' || echo '{}')
  timeout 130 python3 benchmarks/bench_models.py --out $R --tag targets_fwd_${tag}_run131_h200 --override "$ov" \
    --shapes "1,32,8,128,32768;2,12,12,128,16384" --patterns keep0.7,keep0.5,hash16 \
    > $R/bench_targets_fwd_${tag}_run131.log 2>&1; echo "targets $tag rc=$? t=$(( $(date +%s) - T0 ))"
done
timeout 60 python3 benchmarks/bench_models.py --out $R --tag targets_fwd_forced_run131_h200 --override '{"ws_fwd": 1}' \
  --shapes "2,12,12,128,16384" --patterns hash16 > $R/bench_targets_fwd_forced_run131.log 2>&1
echo "forced rc=$? t=$(( $(date +%s) - T0 ))"
for tag in on off forced; do grep -v "^\[" $R/bench_targets_fwd_${tag}_run131.log | grep -v -i warn | tail -9 | cut -c1-140; done
left=$(( 570 - ($(date +%s) - T0) ))
timeout $left python3 -m pytest -q -rfE -m gpu -n 8 -p no:cacheprovider --timeout 200 tests/gpu/test_triton_gpu.py \
  > $R/tests_triton_run131.log 2>&1; echo "triton tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -1 $R/tests_triton_run131.log | cut -c1-200
grep -E "(FAILED|ERROR)" $R/tests_triton_run131.log | head -5 | cut -c1-300
