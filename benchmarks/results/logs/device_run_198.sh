#!/bin/bash
# #12: PerHead(dense_heads=[0], rest=Hash(16)) at the 4k shapes: the plan backend='auto' makes (its dense head fused
# into the Triton launch of the rest, run 197), whose kernels end with the dense head's last query block, against
# the plan without that fusion (logs/ab_perhead_fuse.py): kernels, host and synchronized time call by call.
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 250 python3 benchmarks/results/logs/ab_perhead_fuse.py $R/ab_perhead_fuse_run198_h100.json > $R/ab_perhead_fuse_run198.log 2>&1
echo "ab rc=$? t=$(( $(date +%s) - T0 ))s"; grep -v "^USDT\|STAGE:" $R/ab_perhead_fuse_run198.log | tail -8 | cut -c1-900
