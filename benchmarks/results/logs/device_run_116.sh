#!/bin/bash
# The forward probe's warp-specialized kernel (a producer partition gathering K and V, two consumer warpgroups
# over 128-row blocks), first timing: D=128 GQA at 16k and 32k, and D=64, against the Triton forward
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 330 python3 benchmarks/probe_gluon_fwd.py --out $R --tag probe_gluon_fwd_ws_d128_run116_h200 \
  --shapes "1,32,8,128,16384;1,32,8,128,32768" --patterns keep0.7,keep0.5 \
  --variants ws:64:2:232,ws:64:3:232,ws:64:2:232:0:1,ws:64:3:232:0:1,ws:64:3:232:1:0,ws:64:3:232:1:1,ws:64:4:232:1:1 \
  > $R/probe_gluon_fwd_ws_d128_run116.log 2>&1
echo "d128 rc=$? t=$(( $(date +%s) - T0 ))"
timeout 120 python3 benchmarks/probe_gluon_fwd.py --out $R --tag probe_gluon_fwd_ws_d64_run116_h200 \
  --shapes "2,12,12,64,16384" --patterns keep0.7,keep0.5 \
  --variants ws:64:2:232,ws:64:3:232,ws:64:3:232:0:1,ws:128:2:232,ws:128:3:232:0:1,ws:64:4:232:1:1 \
  > $R/probe_gluon_fwd_ws_d64_run116.log 2>&1
echo "d64 rc=$? t=$(( $(date +%s) - T0 ))"
grep -v "^\[" $R/probe_gluon_fwd_ws_d128_run116.log | tail -40
grep -v "^\[" $R/probe_gluon_fwd_ws_d64_run116.log | tail -20
