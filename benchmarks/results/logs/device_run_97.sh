#!/bin/bash
# Run 96 timed the automatic plan's forward (CuPy's index build) at B=2 H=12 D=64 T=32,768 with
# 0.66 ms more host time than Triton's builder, while the build alone differed by 0.09 ms; host
# times vary between runs. The two ops interleaved in one process, then cProfile of each
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
for p in hybrid hash16; do
  timeout 150 python3 benchmarks/results/logs/diag_builder_host.py 2x12x12x64x32768 $p > $R/diag_builder_host_$p.log 2>&1
  echo "$p rc=$? t=$(( $(date +%s) - T0 ))"; grep -E "^(auto|triton)" $R/diag_builder_host_$p.log
done
