#!/bin/bash
# #12, "decisions made in the call add at most 10%": where a call that decides spends its time
# (given vs made, back to back and host enqueue time, attn.decide alone, profiler tables)
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
cp build/device/diag_decide.py $R/
timeout 400 python3 build/device/diag_decide.py 2>&1 | tail -150
