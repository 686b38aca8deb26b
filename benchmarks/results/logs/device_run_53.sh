#!/bin/bash
# Hash(64)'s forward at the model shape runs 27-33% slower with Triton's index builder than with
# the automatic plan's CuPy one (run 52): the index build's kernels one by one, Triton's builder
# against the automatic plan's, Hash(16) and Hash(64) at B=1, H=32, Hkv=8, D=128, T=32k and 64k
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
timeout 240 python3 benchmarks/results/logs/index_kernels.py $R/index_kernels_h200.jsonl 2>&1 | tail -12 | cut -c1-900
