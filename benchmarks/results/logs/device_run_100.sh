#!/bin/bash
# The README's D=64 target table again with long bucket segments in three loops at D=64 (its last run,
# bench_targets_h200.json, predates them; run 88's rerun ran Hash(16)'s 2,048- and 8,192-row segments in one loop)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 150 python3 benchmarks/bench_attention.py --grid targets --flex none --ideal-max-t 0 --rep-ms 30 --budget-s 60 \
  --out $R/bench_targets_run100_h200.json > $R/bench_targets_run100.log 2>&1; echo "targets rc=$? t=$(( $(date +%s) - T0 ))"
tail -20 $R/bench_targets_run100.log | cut -c1-200
