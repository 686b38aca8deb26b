#!/bin/bash
# The warp-specialized Gluon forward probe with 128-key tiles at D=128: its producer now gathers a tile in
# 32-row copies, and the variant compiles without a spill (it spilled 50 times in the loop at 232 consumer
# registers when one copy gathered all 128 rows: the spills were the producer's). Against the Triton
# forward and the 64-key variant of run 116, on the same prepared groups, kernels alone
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 400 python3 benchmarks/probe_gluon_fwd.py --out $R --tag probe_gluon_fwd_n128_run130_h200 \
  --shapes "1,32,8,128,32768;1,32,8,128,16384;2,12,12,128,16384" --patterns keep0.7,keep0.5 \
  --variants ws:64:3:232,ws:128:2:232,ws:128:2:224,ws:128:2:232:0:1,ws:128:2:224:0:1,ws:128:2:232:1:1 \
  > $R/probe_gluon_fwd_n128_run130.log 2>&1; echo "probe rc=$? t=$(( $(date +%s) - T0 ))"
grep -v "^\[" $R/probe_gluon_fwd_n128_run130.log | tail -24 | cut -c1-170
