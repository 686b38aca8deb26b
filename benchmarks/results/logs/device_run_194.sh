#!/bin/bash
# #12: the attention kernels' programs started longest first (TileConfig.heavy_first, kernels._scheduled: heads
# fastest, blocks slowest, the last query block / the first key block first) against the grid's own order, kernels
# alone (logs/ab_heavy_first.py), at the 4k shapes where a kernel's programs fill about two waves and its longest
# causal blocks, started last, set its end; and at 16k. Then the GPU tests that run the kernels under both orders.
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 330 python3 benchmarks/results/logs/ab_heavy_first.py $R/ab_heavy_first_run194_h100.json > $R/ab_heavy_first_run194.log 2>&1
echo "ab rc=$? t=$(( $(date +%s) - T0 ))s"; tail -29 $R/ab_heavy_first_run194.log | cut -c1-160
