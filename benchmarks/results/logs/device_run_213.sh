#!/bin/bash
# Whether the split counters after the call's flags cost PerHead GPU or host time: run 212b had PerHead's ratios to
# cuDNN 2-15% higher in this tree's processes than in the tree before (two processes each, host noise of the same
# size). (1) The attention kernels alone per tree (ab_split.py, profiler: unsplit and the default 4k4 arm), PerHead and
# Hash(16) at D=64; (2) PerHead and Hash(16) paired with cuDNN, six processes a tree in ABBA order, 100 pairs each;
# TopKFeatures' rows moved to device_run_214.sh.
# Make the tree before first (not committed), as device_run_212.sh's header says:
#   mkdir -p ab212_old && git archive 8854504 tilesparse | tar -x -C ab212_old && sed -i \
#     's/fwd_split=4, dq_split=4, split_programs/fwd_split=4, dq_split=4, dkdv_split=4, split_programs/' \
#     ab212_old/tilesparse/backends/triton/op.py
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
tree() { case $1 in old*) echo /tmp/site:$PWD/ab212_old;; *) echo /tmp/site:$PWD;; esac; }
for t in new old; do
  PYTHONPATH=$(tree $t) timeout 90 python3 benchmarks/results/logs/ab_split.py $R/ab_split_${t}_run213_$GPU.json \
    1x16x16x64x4096 perhead,hash16 4k4 > $R/ab_split_${t}_run213.log 2>&1
  echo "ab_split $t rc=$? t=$(( $(date +%s) - T0 ))s"; tail -4 $R/ab_split_${t}_run213.log | cut -c1-200
done
for t in new1 old1 old2 new2 new3 old3 old4 new4 new5 old5 old6 new6; do
  [ $(( $(date +%s) - T0 )) -gt 500 ] && { echo "paired $t skipped: 500 s spent"; continue; }
  PYTHONPATH=$(tree $t) timeout 45 python3 benchmarks/results/logs/paired_cudnn.py --shapes 1x16x16x64x4096 \
    --patterns perhead,hash16 --modes fwd,fwd_bwd --pairs 100 --out $R/paired_cudnn_${t}_run213_$GPU.json \
    > $R/paired_cudnn_${t}_run213.txt 2>&1
  echo "paired $t rc=$? t=$(( $(date +%s) - T0 ))"
done
python3 - $R <<'PY'
import glob, json, statistics, sys
ratios = {}
for f in glob.glob(sys.argv[1] + "/paired_cudnn_[no]*_run213_*.json"):
    tree = f.split("paired_cudnn_")[1][:3]
    for row, modes in json.load(open(f))["rows"].items():
        for mode, rec in modes.items():
            for kind in ("host", "sync"):
                ratios.setdefault((row.split("/")[1], mode, kind), {}).setdefault(tree, []).append(rec[kind]["ratio"])
for key, by in sorted(ratios.items()):
    print(*key, " ".join(f"{t} {statistics.median(v):.3f} ({len(v)})" for t, v in sorted(by.items())))
PY
cd $R && tar czf ../run213.tgz *.log *.txt && rm -f *.log *.txt
