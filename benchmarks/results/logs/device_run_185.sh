#!/bin/bash
# #12 after the GQA sum's in-order path, the index build's paired searches and TopKFeatures' q~ and k~ by Triton's
# feature kernel on the SDPA path: (1) every kernel of a 4k forward+backward by name, both 4k shapes (diag_4k.py,
# against run 184's tables); (2) whole calls paired with cuDNN's (paired_cudnn.py, as run 181) for four patterns
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R /tmp/pc185; export R
for s in 1,16,16,64,4096 1,32,8,128,4096; do
  tag=$(echo $s | tr , x)
  timeout 200 python3 benchmarks/results/logs/diag_4k.py $s $R/diag_4k_${tag}_run185_h200.json \
    keep0.7,keep0.5,hash16,hash64,hybrid,perhead,topk8 > $R/diag_4k_${tag}_run185.log 2>&1
  echo "diag $s rc=$? t=$(( $(date +%s) - T0 ))"; tail -9 $R/diag_4k_${tag}_run185.log | cut -c1-260
done
for s in 1x16x16x64x4096 1x32x8x128x4096; do
  for p in keep0.7 hash16 hash64 topk8; do
    timeout 330 python3 benchmarks/results/logs/paired_cudnn.py --shapes $s --patterns $p --pairs 150 \
      --lock /tmp/pc185 --expect 8 --out /tmp/pc185/$s-$p.json > /tmp/pc185/$s-$p.log 2>&1 &
  done
done
wait
grep -il "error\|Traceback" /tmp/pc185/*.log | head
cat /tmp/pc185/1x16*.log /tmp/pc185/1x32*.log | grep " host " | tee $R/paired_cudnn_run185.txt
python3 -c "
import glob, json
json.dump({f.split('/')[-1][:-5]: json.load(open(f)) for f in sorted(glob.glob('/tmp/pc185/*.json'))},
          open('$R/paired_cudnn_run185_h200.json', 'w'), indent=1)"
echo "t=$(( $(date +%s) - T0 ))s"
