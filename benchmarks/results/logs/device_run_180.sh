#!/bin/bash
# #12: does the CPU a benchmark process runs on move its host time? (diag_numa.py: one process pinned to each
# CPU in turn, 2 rounds, cuDNN SDPA forward+backward and a Hash(16) forward at B=1 H=16 D=64 T=4,096); the machine's
# CPU and GPU topology first
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
(lscpu | grep -iE "model name|socket|numa|^cpu\(s\)|thread"; nvidia-smi topo -m) > $R/topology_run180.txt 2>&1
cat $R/topology_run180.txt
timeout 300 python3 benchmarks/results/logs/diag_numa.py $R/diag_numa_run180_h200.json 2>&1 | grep -v Warn | tee $R/diag_numa_run180.log
echo "t=$(( $(date +%s) - T0 ))s"
