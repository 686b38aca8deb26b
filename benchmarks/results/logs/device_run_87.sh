#!/bin/bash
# After the three-loop rule for long bucket segments (TileConfig.long_segment_rows): the whole GPU
# suite, then every target row as whole calls (B=2 H=12 D=64/128 16k, B=1 H=32 Hkv=8 D=128 32k)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 390 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider tests/gpu --ignore=tests/gpu/test_sequence_parallel_gpu.py \
  > $R/tests_gpu_all_run87.log 2>&1; echo "suite rc=$? t=$(( $(date +%s) - T0 ))"; tail -3 $R/tests_gpu_all_run87.log
grep -E "^(FAILED|ERROR)" $R/tests_gpu_all_run87.log | head -20
timeout 190 python3 benchmarks/bench_models.py --out $R --tag targets_run87_h200 \
  --shapes "2,12,12,64,16384;2,12,12,128,16384;1,32,8,128,32768" --patterns keep0.7,keep0.5,keep0.3,hash16,hash64 \
  > $R/bench_targets_run87.log 2>&1; echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; tail -22 $R/bench_targets_run87.log
