#!/bin/bash
# D=64 with 128-wide forward tiles outside bucket groups (run 61): the D=64 target rows as whole
# calls, then every GPU test but the two-GPU file on this code
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 100 python3 benchmarks/bench_models.py --out $R --tag targets_run62_h200 --shapes "2,12,12,64,16384" \
  --patterns keep0.7,keep0.5,keep0.3,hash16,hash64 > $R/bench_targets_run62.log 2>&1
echo "bench rc=$? t=$(( $(date +%s) - T0 ))"; tail -8 $R/bench_targets_run62.log
timeout 470 python3 -m pytest -q -m gpu -n 8 -p no:cacheprovider tests/gpu --ignore=tests/gpu/test_sequence_parallel_gpu.py \
  > $R/tests_gpu_all_run62.log 2>&1; echo "suite rc=$? t=$(( $(date +%s) - T0 ))"; tail -3 $R/tests_gpu_all_run62.log
