#!/bin/bash
# #11, "compare the dQ + dK/dV split with one pass with atomic dQ, at D=64 and D=128": run 13
# measured D=128; here D=64 (B=2, H=12, T=16,384, QKDrop(0.7): about 388k visited 64x64 tiles,
# 24 heads x (0.7 T / 64)^2 / 2), the atomics alone for 64- and 128-key blocks, and the dQ kernel
# they would replace at the same shape (its GPU time from the profiler, bench_models.kernel_ms)
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
timeout 60 python3 benchmarks/probe_atomics.py --heads 24 --t 16384 --d 64 --tiles 388000 --out $R/atomics_d64 2>&1 | tail -4
timeout 60 python3 benchmarks/probe_atomics.py --heads 24 --t 16384 --d 64 --tiles 194000 --out $R/atomics_d64_128 2>&1 | tail -4
timeout 90 python3 benchmarks/results/logs/kernel_times.py 2,12,12,64,16384 $OUT/r/dq_kernel_d64.json
