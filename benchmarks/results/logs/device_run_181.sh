#!/bin/bash
# #12's 4k goals, each call paired with cuDNN SDPA's at the same moment (paired_cudnn.py; run 180 showed the host's
# speed changing from one third of a second to the next): every built-in pattern at the two 4k shapes, forward and
# forward+backward with decisions given, forward+backward with them made in the call; one process per pattern and
# shape, in turns under a lock
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R /tmp/pc181; export R
for s in 1x16x16x64x4096 1x32x8x128x4096; do
  for p in dense-triton keep0.7 keep0.5 hash16 hash64 hybrid perhead topk8; do
    timeout 400 python3 benchmarks/results/logs/paired_cudnn.py --shapes $s --patterns $p --pairs 150 \
      --lock /tmp/pc181 --expect 16 --out /tmp/pc181/$s-$p.json > /tmp/pc181/$s-$p.log 2>&1 &
  done
done
wait
grep -il "error\|Traceback" /tmp/pc181/*.log | head
cat /tmp/pc181/1x16*.log /tmp/pc181/1x32*.log | grep " host " | tee $R/paired_cudnn_run181.txt
python3 -c "
import glob, json
json.dump({f.split('/')[-1][:-5]: json.load(open(f)) for f in sorted(glob.glob('/tmp/pc181/*.json'))},
          open('$R/paired_cudnn_run181_h200.json', 'w'), indent=1)"
echo "t=$(( $(date +%s) - T0 ))s"
