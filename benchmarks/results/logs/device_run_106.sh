#!/bin/bash
# Probe, second round: one barrier a tile and the stage refilled after the S product is issued (its index load
# then waits behind the product); the overlapped loop four stages deep; D=64 with 4 warps too
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 300 python3 benchmarks/probe_gluon_fwd.py --out $R --tag probe_gluon_fwd_d128_run106_h200 \
  --shapes "1,32,8,128,16384;1,32,8,128,32768" --patterns keep0.7,keep0.5 \
  --variants 64:2:0,64:3:0,128:2:0,64:4:1 > $R/probe_gluon_fwd_d128_run106.log 2>&1
echo "d128 rc=$? t=$(( $(date +%s) - T0 ))"
timeout 150 python3 benchmarks/probe_gluon_fwd.py --out $R --tag probe_gluon_fwd_d64_run106_h200 \
  --shapes "2,12,12,64,16384" --patterns keep0.7,keep0.5 \
  --variants 64:3:0,64:2:0:4,64:3:0:4,128:2:0,64:4:1,128:4:1 > $R/probe_gluon_fwd_d64_run106.log 2>&1
echo "d64 rc=$? t=$(( $(date +%s) - T0 ))"
grep -v "^\[" $R/probe_gluon_fwd_d128_run106.log | tail -40
grep -v "^\[" $R/probe_gluon_fwd_d64_run106.log | tail -20
