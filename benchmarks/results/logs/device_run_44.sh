#!/bin/bash
# #11: the forward's lazy rescaling (the running max moves only when it grew by more than 2^8)
# against the eager rescale, same process, off/on/off/on; the kernels' GPU test file first
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
timeout 200 python3 benchmarks/results/logs/ab_lazy.py "1,32,8,128,32768;2,12,12,128,16384;2,12,12,64,16384" 2>&1 | tail -12
