#!/bin/bash
# launch.prepared rewritten (C-level loops, scalar keys remembered): its cost against the previous version,
# then cProfile of forward+backward calls; the lean-launch and capture GPU tests (run 101 gave them too little time)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 200 python3 benchmarks/results/logs/diag_call_profile.py 1x32x8x128x4096 hash16 keep0.7 \
  > $R/diag_call_profile_run102.log 2>&1; echo "diag rc=$? t=$(( $(date +%s) - T0 ))"
timeout 330 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_lean_launch_gpu.py tests/gpu/test_graph_capture_gpu.py \
  > $R/tests_lean_capture_run102.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"
tail -n 3 $R/tests_lean_capture_run102.log
head -n 1 $R/diag_call_profile_run102.log
