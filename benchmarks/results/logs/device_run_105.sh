#!/bin/bash
# Probe: the forward tile loop in Gluon (async wgmma, cp.async stages) against the Triton forward on the same
# prepared groups (outputs compared) and cuDNN's forward; D=128 GQA at 16k and 32k, then D=64 B=2 H=12 at 16k
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 300 python3 benchmarks/probe_gluon_fwd.py --out $R --tag probe_gluon_fwd_d128_run105_h200 \
  --shapes "1,32,8,128,16384;1,32,8,128,32768" --patterns keep0.7,keep0.5 \
  --variants 64:2:0,64:3:0,128:2:0,128:3:0,64:3:1,64:4:1 > $R/probe_gluon_fwd_d128_run105.log 2>&1
echo "d128 rc=$? t=$(( $(date +%s) - T0 ))"
timeout 150 python3 benchmarks/probe_gluon_fwd.py --out $R --tag probe_gluon_fwd_d64_run105_h200 \
  --shapes "2,12,12,64,16384" --patterns keep0.7,keep0.5 \
  --variants 64:3:0,128:2:0,128:3:0,64:3:1,64:4:1,128:3:1 > $R/probe_gluon_fwd_d64_run105.log 2>&1
echo "d64 rc=$? t=$(( $(date +%s) - T0 ))"
grep -v "^\[" $R/probe_gluon_fwd_d128_run105.log | tail -40
grep -v "^\[" $R/probe_gluon_fwd_d64_run105.log | tail -20
