#!/bin/bash
# #12: TopKFeatures' q~ and k~ kernel (features.py) with each row's kept features as bit words
# (run 147's kernel compared every element with every kept id: 4% slower at B=2 H=12 D=64 T=16k):
# (1) its A/B against the torch ops, the four shapes of run 147, and where a forward+backward at
# B=2 H=12 D=64 T=16k spends GPU time on each path; (2) the GPU tests that run it; (3) the host
# table of every built-in pattern with autograd's device thread off (eager and replayed, 4k shapes).
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 150 python3 benchmarks/results/logs/ab_topk_features.py $R/ab_topk_features_run148_h200.json > $R/ab_topk_features_run148.log 2>&1
echo "ab rc=$? t=$(( $(date +%s) - T0 ))s"; tail -9 $R/ab_topk_features_run148.log | cut -c1-300
timeout 60 python3 benchmarks/results/logs/ab_topk_features.py profile 2,12,12,64,16384 $R/profile_topk_run148.txt > /dev/null 2>&1
echo "profile rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "^==|_keep_features|aten::mul|_attn_" $R/profile_topk_run148.txt | cut -c1-50,120-200
timeout 200 python3 -m pytest -v -rfEs -m gpu -n 14 -p no:cacheprovider \
  -k "topk or TopK or feature or Feature or test_triton_matches_reference" tests/gpu > $R/tests_topk_run148.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|ERROR" $R/tests_topk_run148.log | tail -8 | cut -c1-300
left=$(( 585 - ($(date +%s) - T0) ))
timeout $left python3 benchmarks/probe_host.py --out $R/probe --no-autograd-threads --no-graphed \
  --shapes 1x16x16x64x4096,1x32x8x128x4096 --patterns dense-triton,keep0.7,keep0.5,hash16,hash64,hybrid,perhead,topk8 \
  --calls 30 --stat median > $R/probe_host_nothreads_run148.log 2>&1
echo "probe rc=$? t=$(( $(date +%s) - T0 ))s"
[ -f $R/probe/probe_host.json ] && mv $R/probe/probe_host.json $R/probe_host_nothreads_run148_h200.json
[ -f $R/probe_host_nothreads_run148_h200.json ] && python3 benchmarks/results/logs/replay_table.py $R/probe_host_nothreads_run148_h200.json 2>&1 | tail -20
