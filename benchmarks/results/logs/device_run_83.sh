#!/bin/bash
# the model-shape grid again (B=1, H=32, Hkv=8, D=128, T 8k-64k, the 8 patterns, against cuDNN and
# flash), after dP first in the dK/dV kernel of drop groups and with the back-to-back timing's fix
# (at least 10 calls timed; the grid's earlier file timed each call of 40 ms or more once)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 480 python3 benchmarks/bench_models.py --out $R --tag models_run83_h200 > $R/bench_models_run83.log 2>&1
echo "grid rc=$? t=$(( $(date +%s) - T0 ))"; tail -42 $R/bench_models_run83.log
