#!/bin/bash
# #12 on this session's tree (a PerHead's dense heads built by the index build's sort launch, run 203): every built-in
# pattern paired with cuDNN SDPA call by call (logs/paired_cudnn.py, as run 196: 150 pairs, host and synchronized,
# 16 processes in turns) at both 4k shapes; then the GPU suite (every file in tests/gpu but the two-GPU one), as the
# sort kernels every sorted pattern's build takes were recompiled with the new flag
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R /tmp/pc204; export R
for s in 1x16x16x64x4096 1x32x8x128x4096; do
  for p in dense-triton keep0.7 keep0.5 hash16 hash64 hybrid perhead topk8; do
    timeout 200 python3 benchmarks/results/logs/paired_cudnn.py --shapes $s --patterns $p --pairs 150 \
      --lock /tmp/pc204 --expect 16 --out /tmp/pc204/$s-$p.json > /tmp/pc204/$s-$p.log 2>&1 &
  done
done
wait
grep -il "error\|Traceback" /tmp/pc204/*.log | head
cat /tmp/pc204/1x16*.log /tmp/pc204/1x32*.log | grep " host " > $R/paired_cudnn_run204.txt
python3 -c "
import glob, json
json.dump({f.split('/')[-1][:-5]: json.load(open(f)) for f in sorted(glob.glob('/tmp/pc204/*.json'))},
          open('$R/paired_cudnn_run204_h100.json', 'w'), indent=1)"
echo "paired t=$(( $(date +%s) - T0 ))s"
timeout 330 python3 -m pytest -q -rfEs -m gpu -n 10 -p no:cacheprovider tests/gpu \
  --ignore=tests/gpu/test_sequence_parallel_gpu.py > $R/tests_gpu_run204.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|ERROR" $R/tests_gpu_run204.log | tail -15 | cut -c1-300
cut -c1-200 $R/paired_cudnn_run204.txt
