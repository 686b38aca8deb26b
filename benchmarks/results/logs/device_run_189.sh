#!/bin/bash
# #12 on the final tree: (1) the lsh hashing launch bound once per signature (hashing.BoundHash), timed call by call
# against the per-call hash_into (ab_calls.py --ab bound-hash, 200 pairs, decided calls at both 4k shapes); (2) the GPU
# suite (every file in tests/gpu but the two-GPU sequence-parallel test, 14 workers), after the timing
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R /tmp/ab189
for s in 1x16x16x64x4096 1x32x8x128x4096; do
  timeout 150 python3 benchmarks/results/logs/ab_calls.py --ab bound-hash --shapes $s --patterns hash16,hybrid \
    --modes fwd_decide_nograd,fwd_bwd_decide --pairs 200 --out /tmp/ab189/ab-$s.json > /tmp/ab189/ab-$s.log 2>&1 &
done
wait
grep -il "error\|Traceback" /tmp/ab189/*.log | head -3
cat /tmp/ab189/ab-*.log | grep "host on" | tee $R/ab_calls_hash_run189.txt
python3 -c "
import glob, json
json.dump({f.split('/')[-1][3:-5]: json.load(open(f)) for f in sorted(glob.glob('/tmp/ab189/ab-*.json'))},
          open('$R/ab_calls_hash_run189_h200.json', 'w'), indent=1)"
echo "ab t=$(( $(date +%s) - T0 ))s"
timeout 400 python3 -m pytest -q -rfEs -m gpu -n 14 -p no:cacheprovider tests/gpu --ignore=tests/gpu/test_sequence_parallel_gpu.py \
  > $R/tests_gpu_run189.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|ERROR" $R/tests_gpu_run189.log | tail -15 | cut -c1-300
