#!/bin/bash
# #12 on the tree with all three bound changes (decide steps, given ids' checks, TopKFeatures' q~/k~ launches and
# its group copied): the GPU tests of the TopKFeatures path, the q~/k~ change timed call by call (ab_calls.py --ab
# bound-features), then every built-in pattern's calls at the two 4k shapes (call_times.py: forward and
# forward+backward with decisions given, and with decisions made in the call; one process per pattern and shape, in
# turns under a lock, 3 rounds)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R /tmp/ct179; export R
for s in 1x16x16x64x4096 1x32x8x128x4096; do
  timeout 200 python3 benchmarks/results/logs/ab_calls.py --ab bound-features --shapes $s --patterns topk8 \
    --modes fwd,fwd_bwd --pairs 200 --out /tmp/ct179/ab-$s.json > /tmp/ct179/ab-$s.log 2>&1 &
done
timeout 200 python3 -m pytest -q -rfEs -m gpu -n 10 -p no:cacheprovider tests/gpu/test_bound_features_gpu.py \
  tests/gpu/test_topk_gpu.py tests/gpu/test_bound_checks_gpu.py tests/gpu/test_bound_decide_gpu.py > $R/tests_run179.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|ERROR" $R/tests_run179.log | tail -8 | cut -c1-300
wait
cat /tmp/ct179/ab-*.log | grep "host on" | tee $R/ab_calls_features_run179.txt
python3 -c "
import glob, json
json.dump({f.split('/')[-1][3:-5]: json.load(open(f)) for f in sorted(glob.glob('/tmp/ct179/ab-*.json'))},
          open('$R/ab_calls_features_run179_h200.json', 'w'), indent=1)"
for s in 1x16x16x64x4096 1x32x8x128x4096; do
  for p in dense-triton keep0.7 keep0.5 hash16 hash64 hybrid perhead topk8; do
    timeout 400 python3 benchmarks/call_times.py --shapes $s --patterns $p --rounds 3 --calls 40 \
      --modes fwd,fwd_bwd,fwd_decide_nograd,fwd_bwd_decide --lock /tmp/ct179 --expect 16 --wait-s 240 \
      --out /tmp/ct179/$s-$p.json > /tmp/ct179/$s-$p.log 2>&1 &
  done
done
wait
grep -il "error\|Traceback" /tmp/ct179/*.log | head
python3 benchmarks/call_times.py --merge /tmp/ct179/1x*.json --out $R/call_times_run179_h200.json > $R/call_times_run179.txt
echo "t=$(( $(date +%s) - T0 ))s"
cut -c1-150 $R/call_times_run179.txt
