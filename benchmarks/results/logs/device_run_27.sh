#!/bin/bash
# #12: the benchmark's own decide-included rows for the hash patterns now that the Triton
# builder hashes (B=2, H=12, D=64 and 128, T=16k and 32k, forward and forward+backward)
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
timeout 280 python3 benchmarks/bench_attention.py --grid full --d 64,128 --t 16384,32768 --patterns hash8,hash16,hash64,hybrid --decide both --flex none --no-long --budget-s 230 --out $R/bench_decide_h200.json > $R/bench.log 2>&1; echo "bench rc=$? t=$(( $(date +%s) - T0 ))"
tail -40 $R/bench.log | cut -c1-200
