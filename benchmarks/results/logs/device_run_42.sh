#!/bin/bash
# #12: cProfile of attn.decide's host side (Hash(16), Hash(16)+QKDrop(0.7); B=2 H=12 D=64 T=16k)
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
timeout 200 python3 benchmarks/results/logs/prof_decide.py > $R/prof_decide_h200.txt 2>&1; echo "rc=$?"
grep -E "us per decide" $R/prof_decide_h200.txt
