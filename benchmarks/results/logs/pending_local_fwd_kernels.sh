#!/bin/bash
# Prepared, not run yet (no GPU could be started for it in the session that wrote it): when it runs, rename it
# device_run_N.sh and its outputs' run191 to that run's number.
# #12: the forward at D <= 64 sanitizing in its own launch (nonfinite.py), the default since run 190 (9-14 µs less
# host time a call) on calls of at most LOCAL_MAX_KEYS = 4,096 keys: its kernel time against the launch pair it
# replaces, Dense on Triton, QKDrop(0.7), QKDrop(0.5), Hash(16) and Hash(64) at B=1 H=16 D=64 T=4,096, B=2 H=12
# T=16,384 and B=1 H=16 T=32,768 (logs/ab_local_fwd.py), to say whether longer calls should take it too.
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 300 python3 benchmarks/results/logs/ab_local_fwd.py $R/ab_local_fwd_run191.json > $R/ab_local_fwd_run191.log 2>&1
echo "ab rc=$? t=$(( $(date +%s) - T0 ))s"; tail -26 $R/ab_local_fwd_run191.log
# then the GPU suite on this tree (every file in tests/gpu but the two-GPU one), which no GPU has run since the local
# forward became the default (run 190 ran its own test against the pairs)
timeout 330 python3 -m pytest -q -rfEs -m gpu -n 14 -p no:cacheprovider tests/gpu \
  --ignore=tests/gpu/test_sequence_parallel_gpu.py > $R/tests_gpu_run191.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|ERROR" $R/tests_gpu_run191.log | tail -15 | cut -c1-300
