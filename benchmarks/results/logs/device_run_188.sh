#!/bin/bash
# #12: run 187's A/B again with the old kernel at twice the rows too (four arms; needs build/features_c8ec1d3.py
# carried), and B=2 H=12 D=128 T=16,384; no tests
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 200 python3 benchmarks/results/logs/ab_keep_features.py $R/ab_keep_features_run188_h200.json > $R/ab_keep_features_run188.log 2>&1
echo "ab rc=$? t=$(( $(date +%s) - T0 ))"; tail -21 $R/ab_keep_features_run188.log | cut -c1-200
