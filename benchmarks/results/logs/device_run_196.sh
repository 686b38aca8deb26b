#!/bin/bash
# #12: run 181's paired comparison with cuDNN (logs/paired_cudnn.py: each call paired with one of cuDNN SDPA's at the
# same moment, host and synchronized, 150 pairs) again on this tree: since run 181 the bound hash draw (189), the
# forward sanitizing in its own launch at D <= 64 on 4k calls (190), and the programs started longest first (194).
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R /tmp/pc196; export R
for s in 1x16x16x64x4096 1x32x8x128x4096; do
  for p in dense-triton keep0.7 keep0.5 hash16 hash64 hybrid perhead topk8; do
    timeout 300 python3 benchmarks/results/logs/paired_cudnn.py --shapes $s --patterns $p --pairs 150 \
      --lock /tmp/pc196 --expect 16 --out /tmp/pc196/$s-$p.json > /tmp/pc196/$s-$p.log 2>&1 &
  done
done
wait
grep -il "error\|Traceback" /tmp/pc196/*.log | head
cat /tmp/pc196/1x16*.log /tmp/pc196/1x32*.log | grep " host " | tee $R/paired_cudnn_run196.txt
python3 -c "
import glob, json
json.dump({f.split('/')[-1][:-5]: json.load(open(f)) for f in sorted(glob.glob('/tmp/pc196/*.json'))},
          open('$R/paired_cudnn_run196_h100.json', 'w'), indent=1)"
echo "t=$(( $(date +%s) - T0 ))s"
