#!/bin/bash
# Run 212b (same machine, right after run 212, whose GPU tests were cut at 100 s): this tree and the tree before the
# split counters' and poison's changes (ab212_old, made as device_run_212.sh's header says), two processes each in
# turn (new, old, new2, old2), PerHead, Hash(16) and TopKFeatures(8) paired with cuDNN; then the id-check, bound-check
# and launch-site GPU tests. Logs: run212.tgz
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
for t in new old new2 old2; do
  case $t in old*) P=$PWD/ab212_old;; *) P=$PWD;; esac
  PYTHONPATH=/tmp/site:$P timeout 45 python3 benchmarks/results/logs/paired_cudnn.py --shapes 1x16x16x64x4096 \
    --patterns perhead,hash16,topk8 --modes fwd,fwd_bwd,fwd_checked,fwd_bwd_checked --pairs 50 \
    --out $R/paired_cudnn_${t}_run212b_h100.json > $R/p_${t}.txt 2>&1
  echo "$t rc=$? t=$(( $(date +%s) - T0 ))"
done
timeout 70 python3 -m pytest -q -rfE --tb=line -m gpu -n 8 -p no:cacheprovider tests/gpu/test_bound_checks_gpu.py \
  tests/gpu/test_reliability_gpu.py tests/gpu/test_lean_launch_gpu.py -k "sites or check or id" > $R/tests.log 2>&1
echo "tests rc=$?"; tail -3 $R/tests.log
