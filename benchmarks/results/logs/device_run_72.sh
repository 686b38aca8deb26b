#!/bin/bash
# the CUDA-graph GPU tests (the padded and packed replay's test has not run yet), then where the GPU
# time of a T=4,096 call goes (#12's 4k rows): every kernel per forward+backward call, eager and
# replayed, against cuDNN, at D=64 (B=1, H=16) and D=128 (B=1, H=32, Hkv=8)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 200 python3 -m pytest -q -m gpu -n 4 -p no:cacheprovider tests/gpu/test_graphs_gpu.py \
  > $R/tests_graphs_run72.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"; tail -3 $R/tests_graphs_run72.log | cut -c1-300
for s in 1,16,16,64,4096 1,32,8,128,4096; do
  timeout 150 python3 benchmarks/results/logs/diag_4k.py $s $R/diag_4k_${s//,/x}_run72_h200.json > $R/diag_4k_${s//,/x}.log 2>&1
  echo "diag $s rc=$? t=$(( $(date +%s) - T0 ))"; tail -9 $R/diag_4k_${s//,/x}.log | cut -c1-260
done
