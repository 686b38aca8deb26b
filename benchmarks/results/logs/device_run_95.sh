#!/bin/bash
# The D=64 target rows as whole calls with the three-loop rule at D=64 (B=2 H=12 D=64, 16k and 32k)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 300 python3 benchmarks/bench_models.py --out $R --tag targets_d64_run95_h200 \
  --shapes "2,12,12,64,16384;2,12,12,64,32768" --patterns keep0.7,keep0.5,keep0.3,hash16,hash64 \
  > $R/bench_targets_d64_run95.log 2>&1; echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; tail -24 $R/bench_targets_d64_run95.log
