#!/bin/bash
# #12, three parts in one run. (1) The forward at D <= 64 sanitizing in its own launch (nonfinite.py), the default
# since run 190 (9-14 µs less host time a call) on calls of at most LOCAL_MAX_KEYS = 4,096 keys: its kernel time
# against the launch pair it replaces, Dense on Triton, QKDrop(0.7), QKDrop(0.5), Hash(16) and Hash(64) at B=1 H=16
# D=64 T=4,096, B=2 H=12 T=16,384 and B=1 H=16 T=32,768 (logs/ab_local_fwd.py), to say whether longer calls should
# take it too. (2) Given ids' poison folded into the Triton forward's stored O and lse (execute.py,
# kernels._poisoned) against the product of the output with it (unfolded_poison), call by call, with the decisions
# given as a user's own tensors (checked every call). (3) The GPU suite on this tree (every file in tests/gpu but the
# two-GPU one), which no GPU has run since the local forward became the default.
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 150 python3 benchmarks/results/logs/ab_local_fwd.py $R/ab_local_fwd_run191.json > $R/ab_local_fwd_run191.log 2>&1
echo "ab rc=$? t=$(( $(date +%s) - T0 ))s"; tail -16 $R/ab_local_fwd_run191.log | cut -c1-160
timeout 130 python3 benchmarks/results/logs/ab_calls.py --ab folded-poison --shapes 1x16x16x64x4096,1x32x8x128x4096 \
  --patterns hash16,hybrid,topk8 --modes fwd_checked,fwd_bwd_checked --pairs 200 \
  --out $R/ab_calls_folded_poison_run191.json > $R/ab_calls_folded_poison_run191.txt 2>&1
echo "poison rc=$? t=$(( $(date +%s) - T0 ))s"; tail -12 $R/ab_calls_folded_poison_run191.txt | cut -c1-200
timeout 290 python3 -m pytest -q -rfEs -m gpu -n 14 -p no:cacheprovider tests/gpu \
  --ignore=tests/gpu/test_sequence_parallel_gpu.py > $R/tests_gpu_run191.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|ERROR" $R/tests_gpu_run191.log | tail -15 | cut -c1-300
