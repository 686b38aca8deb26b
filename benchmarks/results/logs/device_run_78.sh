#!/bin/bash
# every GPU test but the two-GPU file, on the code at the end of the session that added the replay of
# padded and packed calls and the generator hand-off (the last whole-suite run, 66, came before them)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 540 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider tests/gpu --ignore=tests/gpu/test_sequence_parallel_gpu.py \
  > $R/tests_gpu_all_run78.log 2>&1; echo "suite rc=$? t=$(( $(date +%s) - T0 ))"; tail -5 $R/tests_gpu_all_run78.log | cut -c1-400
