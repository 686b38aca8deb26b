#!/bin/bash
# #12: (1) the GQA gradients' sum before and after the in-order unrolled path (kernel alone, bit for bit against
# the old kernel; needs build/gqa_e2800bd.py carried, see ab_gqa_sum.py); (2) where a 4k forward+backward's GPU
# time goes on today's tree, every kernel by name, both 4k shapes (diag_4k.py, as run 72)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 150 python3 benchmarks/results/logs/ab_gqa_sum.py $R/ab_gqa_sum_run184_h200.json > $R/ab_gqa_sum_run184.log 2>&1
echo "ab rc=$? t=$(( $(date +%s) - T0 ))"; tail -8 $R/ab_gqa_sum_run184.log | cut -c1-200
for s in 1,16,16,64,4096 1,32,8,128,4096; do
  tag=$(echo $s | tr , x)
  timeout 200 python3 benchmarks/results/logs/diag_4k.py $s $R/diag_4k_${tag}_run184_h200.json \
    keep0.7,keep0.5,hash16,hash64,hybrid,perhead,topk8 > $R/diag_4k_${tag}_run184.log 2>&1
  echo "diag $s rc=$? t=$(( $(date +%s) - T0 ))"; tail -9 $R/diag_4k_${tag}_run184.log | cut -c1-260
done
