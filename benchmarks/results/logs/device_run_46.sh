#!/bin/bash
# run 45's first command again, after diag_decide.py's cProfile helper was rewritten (a context
# manager; what it measures is unchanged): the diag_decide_h200.jsonl rows come from this run
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
timeout 150 python3 benchmarks/results/logs/diag_decide.py --out $R/diag_decide_h200.jsonl --tables hash64,hybrid --cprofile hash16,hybrid 2>&1 | grep -v Warn | tail -9
