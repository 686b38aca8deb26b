#!/bin/bash
# #12: why a QKDrop forward's host time at B=1 H=16 D=64 T=4,096 (run 196: 182-226 µs) exceeds Hash(16)'s (114) with
# the same three launches: host per call, the lean launch path's misses, cProfile (logs/diag_fwd_host.py).
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 150 python3 benchmarks/results/logs/diag_fwd_host.py > $R/diag_fwd_host_run199.log 2>&1
echo "diag rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "^==|tottime" $R/diag_fwd_host_run199.log; grep -A13 "^== keep0.5" $R/diag_fwd_host_run199.log | tail -12 | cut -c1-150
