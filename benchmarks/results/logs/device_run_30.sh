#!/bin/bash
set -u
source benchmarks/results/logs/device_prelude.sh
for m in kernel torch-ops; do timeout 60 python3 benchmarks/results/logs/repro_graphed_perhead.py $m perhead 2>&1 | tail -12; done
timeout 90 python3 benchmarks/results/logs/repro_graphed_perhead.py kernel dense,qkdrop,hash,topk,hybrid,perhead 2>&1 | tail -12
timeout 90 python3 benchmarks/results/logs/repro_graphed_perhead.py torch-ops dense,qkdrop,hash,topk,hybrid,perhead 2>&1 | tail -12
