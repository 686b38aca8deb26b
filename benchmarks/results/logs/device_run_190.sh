#!/bin/bash
# Ran on an H100 (the machine that came): its JSON, written as ..._run190_h200.json, is committed as ..._run190_h100.json
# #12: fewer sanitizing launches (backends/triton/nonfinite.py, both off by default): local_sanitize (the forward at
# D <= 64 sanitizing in its own launch) and merged_sanitize (the backward's two sanitizing variants in one launch).
# (1) their GPU test against the launch pairs they replace (bf16 and fp16, finite inputs and an inf in v or a NaN in k;
# merged at D=128 too, after the warp-specialized kernels); (2) each timed call by call against the pairs
# (logs/ab_calls.py, 200 pairs, decisions given): local at B=1 H=16 D=64 T=4,096, merged there and at B=1 H=32 Hkv=8
# D=128, Hash(16) and QKDrop(0.5), forward and forward+backward
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R /tmp/abp
timeout 300 python3 -m pytest -q -rfEs -m gpu -n 8 -p no:cacheprovider tests/gpu/test_nan_containment_gpu.py \
  -k fewer > $R/tests_sanitizing_launches_run190.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|Error" $R/tests_sanitizing_launches_run190.log | tail -5 | cut -c1-300
ab() {  # NAME SHAPE
  timeout 200 python3 benchmarks/results/logs/ab_calls.py --ab $1 --shapes $2 --patterns hash16,keep0.5 \
    --modes fwd,fwd_bwd --pairs 200 --out /tmp/abp/$1-$2.json > /tmp/abp/$1-$2.log 2>&1
}
ab local-sanitize 1x16x16x64x4096 & ab merged-sanitize 1x16x16x64x4096 & ab merged-sanitize 1x32x8x128x4096 & wait
grep -il "error\|Traceback" /tmp/abp/*.log | head -3
grep -H "host on" /tmp/abp/*.log | tee $R/ab_calls_sanitizing_launches_run190.txt
python3 -c "
import glob, json
json.dump({f.split('/')[-1][:-5]: json.load(open(f)) for f in sorted(glob.glob('/tmp/abp/*.json'))},
          open('$R/ab_calls_sanitizing_launches_run190_h200.json', 'w'), indent=1)"
echo "ab t=$(( $(date +%s) - T0 ))s"
