#!/bin/bash
# Written in one session (too little device time was left to start a machine) and run as run 200 in the next.
# #12: every built-in pattern's calls at the two 4k shapes on this tree (the programs longest first, run 194), as run
# 179 timed them (call_times.py: host from an idle GPU, back to back, synchronized; cuDNN and flash SDPA in the same
# processes; 16 processes taking turns), forward and forward+backward with decisions given, 2 rounds of 40 calls.
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R /tmp/ct200
for s in 1x16x16x64x4096 1x32x8x128x4096; do
  for p in dense-triton keep0.7 keep0.5 hash16 hash64 hybrid perhead topk8; do
    timeout 170 python3 benchmarks/call_times.py --shapes $s --patterns $p --rounds 2 --calls 40 \
      --modes fwd,fwd_bwd --lock /tmp/ct200 --expect 16 --wait-s 120 \
      --out /tmp/ct200/$s-$p.json > /tmp/ct200/$s-$p.log 2>&1 &
  done
done
wait
grep -il "error\|Traceback" /tmp/ct200/*.log | head
python3 benchmarks/call_times.py --merge /tmp/ct200/1x*.json --out $R/call_times_run200_h100.json > $R/call_times_run200.txt
echo "t=$(( $(date +%s) - T0 ))s"
cut -c1-150 $R/call_times_run200.txt
