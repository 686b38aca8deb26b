#!/bin/bash
# #12, "decisions made in the call add at most 10%", re-run with one script (logs/diag_decide.py)
# for what three earlier scripts of this session measured (folded into it): where a deciding
# call's time goes (rows, profiler tables, a cProfile of attn.decide), then this session's small decide cuts against the files
# before them (build/device/old/, from the commit before them) in a copy of the tree, A B A B,
# each in its own process
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
timeout 150 python3 benchmarks/results/logs/diag_decide.py --out $R/diag_decide_h200.jsonl --tables hash64,hybrid --cprofile hash16,hybrid 2>&1 | tail -10
rm -rf /tmp/old && cp -r $PWD /tmp/old && cp -r build/device/old/tilesparse/. /tmp/old/tilesparse/
for round in 1 2; do
  for tree in old new; do
    dir=$PWD; [ $tree = old ] && dir=/tmp/old
    (cd $dir && PYTHONPATH=/tmp/site:$dir timeout 100 python3 $PWD/benchmarks/results/logs/diag_decide.py --shapes 2,12,12,64,16384 --tag $tree$round --out $R/ab_decide_h200.jsonl 2>&1 | tail -4)
  done
done
