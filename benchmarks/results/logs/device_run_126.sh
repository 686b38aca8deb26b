#!/bin/bash
# The dQ kernel's launch shape at D=128 once more (probe_gluon_bwd.py --kernel dq): 3 stages at 224 registers (the
# default) against 4 stages, 216/208 consumer registers (more for the producer) and 32-key tiles in 4 stages
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
V=64:3:224,64:4:224,64:4:216,64:3:216,64:3:208,32:4:224
timeout 200 python3 benchmarks/probe_gluon_bwd.py --kernel dq --out $R --tag probe_gluon_dq_d128_run126_h200 \
  --shapes "1,32,8,128,32768;2,12,12,128,16384" --patterns keep0.7,keep0.3,hash16 --variants $V \
  > $R/probe_gluon_dq_d128_run126.log 2>&1; echo "probe rc=$? t=$(( $(date +%s) - T0 ))"
grep -v "^\[" $R/probe_gluon_dq_d128_run126.log | grep -v -i warn | tail -24 | cut -c1-190
