#!/bin/bash
# Run 90: CuPy's index build is the faster one on the GPU at B=2, H=12, D=64, T=32,768 (Hybrid:
# 0.064 against 0.133 ms; the forward synchronized 0.69 against 0.75 ms), yet the planner check's
# back-to-back events time the automatic call at 0.94-1.10 ms: host time. Host time per stage there,
# for Hybrid and Hash(16) (the automatic plan builds with CuPy at this T)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 200 python3 benchmarks/probe_host.py --out $R/probe_host_run91 --shapes 2x12x12x64x32768,2x12x12x64x16384 \
  --patterns hybrid,hash16 --calls 50 --no-graphed --no-replay > $R/probe_host_run91.log 2>&1
echo "probe rc=$? t=$(( $(date +%s) - T0 ))"; tail -40 $R/probe_host_run91.log | cut -c1-200
