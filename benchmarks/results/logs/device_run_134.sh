#!/bin/bash
# The forward probe's 128-key tiles in 3 stages (229,648 bytes of shared memory: they fit, run 130 timed 2 only)
# against the adopted 2 stages, kernels alone, on the same prepared groups
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 250 python3 benchmarks/probe_gluon_fwd.py --out $R --tag probe_gluon_fwd_n128s3_run134_h200 \
  --shapes "1,32,8,128,32768;1,32,8,128,16384;2,12,12,128,16384" --patterns keep0.7,keep0.5 \
  --variants ws:128:2:224,ws:128:3:224,ws:128:3:232,ws:128:3:224:0:1 \
  > $R/probe_gluon_fwd_n128s3_run134.log 2>&1; echo "probe rc=$? t=$(( $(date +%s) - T0 ))"
grep -v "^\[[0-9]*s\]" $R/probe_gluon_fwd_n128s3_run134.log | tail -18 | cut -c1-150
