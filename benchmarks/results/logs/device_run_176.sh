#!/bin/bash
# #12: the final tree (one-launch sort at T <= 4,096, groups copied per lent buffer, the decided calls' hashing build
# bound): every built-in pattern at the two 4k shapes, each call timed three ways (call_times.py, one process per
# pattern and shape, compiling at once, timing in turns under a lock, 2 rounds)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R /tmp/ct176; export R
for s in 1x16x16x64x4096 1x32x8x128x4096; do
  for p in dense-triton keep0.7 keep0.5 hash16 hash64 hybrid perhead topk8; do
    timeout 230 python3 benchmarks/call_times.py --shapes $s --patterns $p --rounds 2 --calls 40 \
      --lock /tmp/ct176 --expect 16 --wait-s 150 --out /tmp/ct176/$s-$p.json > /tmp/ct176/$s-$p.log 2>&1 &
  done
done
wait
grep -il "error\|Traceback" /tmp/ct176/*.log | head
python3 benchmarks/call_times.py --merge /tmp/ct176/*.json --out $R/call_times_run176_h200.json > $R/call_times_run176.txt
echo "t=$(( $(date +%s) - T0 ))s"
cut -c1-140 $R/call_times_run176.txt | head -60
