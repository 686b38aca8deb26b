#!/bin/bash
# Every target shape with the current defaults (the warp-specialized dK/dV kernel, D=128 bucket groups in three
# loops from 1,024-row segments): forward and forward+backward, back to back and synchronized, cuDNN and flash in
# the same process
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
S="2,12,12,64,16384;2,12,12,128,16384;1,32,8,128,32768"
timeout 200 python3 benchmarks/bench_models.py --out $R --tag targets_run122_h200 --shapes "$S" \
  --patterns keep0.7,keep0.5,keep0.3,hash16,hash64 > $R/bench_targets_run122.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"
grep -v "^\[" $R/bench_targets_run122.log | grep -v -i warn | tail -22 | cut -c1-130
