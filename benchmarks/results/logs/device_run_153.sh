#!/bin/bash
# #12: a lean launch against Triton's own on this host (no-op kernels; the lean path's parts alone)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 200 python3 benchmarks/results/logs/launch_micro.py $R/launch_micro_run153_h200.json > $R/launch_micro_run153.log 2>&1
echo "rc=$? t=$(( $(date +%s) - T0 ))s"; tail -20 $R/launch_micro_run153.log | cut -c1-200
