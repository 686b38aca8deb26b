#!/bin/bash
# whether QKDrop(0.7)'s long step at T=32,768 runs at the power limit: SM clock, power and
# temperature per configuration (dp_first 0 / 1, A/B/A/B, then cuDNN), each sustained 6 s
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 240 python3 benchmarks/results/logs/diag_power.py 1,32,8,128,32768 keep0.7 $R/diag_power_run84_h200.json \
  > $R/diag_power_run84.log 2>&1; echo "power rc=$? t=$(( $(date +%s) - T0 ))"; tail -7 $R/diag_power_run84.log | cut -c1-200
