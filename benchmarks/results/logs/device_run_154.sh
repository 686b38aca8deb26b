#!/bin/bash
# #12: an eager dense / QKDrop / Hash forward's host time, layer by layer (decisions trusted)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 300 python3 benchmarks/results/logs/host_layers.py $R/host_layers_run154_h200.json > $R/host_layers_run154.log 2>&1
echo "rc=$? t=$(( $(date +%s) - T0 ))s"; tail -8 $R/host_layers_run154.log | cut -c1-900
