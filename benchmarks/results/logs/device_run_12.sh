#!/bin/bash
# after the planner's tile-size fix: its GPU regression test, the host probe with CUDA-graph
# replay (alone on the machine), then the GPU suite beside a few property shards
set -u
source benchmarks/results/logs/device_prelude.sh
export TRITON_CACHE_DIR=/tmp/tcache
mkdir -p $R/property
cat build/device/tcache/tc.part-* | xz -d -T16 | tar xf - -C / ; echo "cache in: $(find /tmp/tcache -name '*.cubin' | wc -l) cubins t=$(( $(date +%s) - T0 ))"
timeout 90 python3 -m pytest -v -s -rfE --tb=short -m gpu -p no:cacheprovider tests/gpu/test_planner_gpu.py -k different_tiles > $R/tests_tiles_run12.log 2>&1; echo "tiles test rc=$? t=$(( $(date +%s) - T0 ))"
timeout 170 python3 benchmarks/probe_host.py --out $R/probe --shapes 1x16x16x64x4096,1x32x8x128x4096 --patterns dense-triton,keep0.7,keep0.5,hash16,hash64,hybrid,perhead,topk8 --calls 30 --stat median > $R/probe.log 2>&1; echo "probe rc=$? t=$(( $(date +%s) - T0 ))"
B=$(( 480 - ($(date +%s) - T0) ))
timeout $((B - 10)) python3 -m pytest -v -rfE --tb=short -m gpu -n 8 -p no:cacheprovider tests/gpu --ignore=tests/gpu/test_sequence_parallel_gpu.py > $R/tests_gpu_run12.log 2>&1 &
for i in 55 56 57 58; do
  timeout $((B - 10)) python3 benchmarks/property_run.py --shard $i --budget-s $((B - 50)) --out $R/property/shard$i.json > $R/property/shard$i.log 2>&1 &
done
wait; echo "all done t=$(( $(date +%s) - T0 ))"
grep -E "passed|failed|FAILED|ERROR" $R/tests_tiles_run12.log | cut -c1-300 | head -5
grep -E "FAILED|ERROR|passed|failed" $R/tests_gpu_run12.log | cut -c1-300 | head -20; echo "PASSED lines: $(grep -c PASSED $R/tests_gpu_run12.log)"
grep -hE "^shard" $R/property/shard*.log
python3 -c "
import json,os
d=json.load(open(os.environ['OUT']+'/r/probe/probe_host.json'))
for r in d['rows']:
    print(r['shape'], r['pattern'], *(f\"{k}={r[k]:.0f}\" for k in ('call_fwd_host','call_fwd_bwd_host','call_fwd_bwd_sync','graphed_fwd_host','graphed_fwd_bwd_host','graphed_fwd_bwd_sync') if k in r), 'err=%s' % r.get('graphed_max_err', r.get('graphed_error')))
"
(cd $OUT && tar czf results.tgz r && rm -rf r)
