#!/bin/bash
# GPU tests touched by the GQA-runtime change + target rows, then property shards; the Triton
# cache (cubins and metadata only) comes back to be carried into the next call
set -u
source benchmarks/results/logs/device_prelude.sh
export TRITON_CACHE_DIR=/tmp/tcache
mkdir -p $R/property
MODE=${1:-full}; FIRST=${2:-31}; N=${3:-10}; END=${4:-520}
if ls build/device/tcache/tc.part-* >/dev/null 2>&1; then
  cat build/device/tcache/tc.part-* | xz -d -T16 | tar xf - -C / ; echo "cache in: $(find /tmp/tcache -name '*.cubin' | wc -l) cubins t=$(( $(date +%s) - T0 ))"
fi
if [ "$MODE" = full ]; then
timeout 70 python3 benchmarks/bench_models.py --out $R --tag targets_kgroup_h200 --shapes 2,12,12,64,16384 --patterns keep0.7,keep0.5,hash16 > $R/bench_d64.log 2>&1; echo "bench64 rc=$? t=$(( $(date +%s) - T0 ))"
timeout 150 python3 benchmarks/bench_models.py --out $R --tag targets_d128_kgroup_h200 --shapes 1,32,8,128,32768 --patterns keep0.7,keep0.5,hash16 > $R/bench_d128.log 2>&1; echo "bench128 rc=$? t=$(( $(date +%s) - T0 ))"
( timeout 280 python3 -m pytest -v -rfE --tb=short -m gpu -n 4 -p no:cacheprovider tests/gpu/test_graph_capture_gpu.py tests/gpu/test_lean_launch_gpu.py tests/gpu/test_padding_gpu.py tests/gpu/test_triton_gpu.py > $R/tests_run11.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))" ) &
fi
B=$(( END - ($(date +%s) - T0) - 20 )); echo "shards $FIRST..$((FIRST+N-1)) budget $B"
for i in $(seq $FIRST $((FIRST+N-1))); do
  timeout $((B+35)) python3 benchmarks/property_run.py --shard $i --budget-s $B --out $R/property/shard$i.json > $R/property/shard$i.log 2>&1 &
done
wait; echo "all done t=$(( $(date +%s) - T0 ))"
grep -hE "^shard" $R/property/shard*.log
[ "$MODE" = full ] && { grep -E "FAILED|ERROR|passed|failed" $R/tests_run11.log | cut -c1-300 | head -20; tail -7 $R/bench_d64.log; tail -7 $R/bench_d128.log; }
(cd $OUT && tar czf results.tgz r && rm -rf r)
cd / && find /tmp/tcache \( -name '*.cubin' -o -name '*.json' \) -print0 | tar cf - --null -T - | xz -T16 -5 | split -b 15M -d - $OUT/tc.part-
echo "cache out: $(find /tmp/tcache -name '*.cubin' | wc -l) cubins, $(du -shc $OUT/tc.part-* | tail -1) t=$(( $(date +%s) - T0 ))"
