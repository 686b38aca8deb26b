#!/bin/bash
# #12: runs 153-154 again with a synchronized time per call next to the back-to-back one (and the
# host time from an idle device), cuDNN and flash SDPA in the same process
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 120 python3 benchmarks/results/logs/launch_micro.py $R/launch_micro_run156_h200.json > $R/launch_micro_run156.log 2>&1
echo "micro rc=$? t=$(( $(date +%s) - T0 ))s"; tail -14 $R/launch_micro_run156.log | cut -c1-200
timeout 420 python3 benchmarks/results/logs/host_layers.py $R/host_layers_run156_h200.json > $R/host_layers_run156.log 2>&1
echo "layers rc=$? t=$(( $(date +%s) - T0 ))s"; tail -12 $R/host_layers_run156.log | cut -c1-700
