#!/bin/bash
set -u
source benchmarks/results/logs/device_prelude.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p $R
timeout 70 python3 -m pytest -q -rfE -m gpu -p no:cacheprovider tests/gpu/test_sequence_parallel_gpu.py > $R/tests_sp.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/tests_sp.log
( CUDA_VISIBLE_DEVICES=0 timeout 170 python3 -m pytest -q -rfE -m gpu -n 4 -p no:cacheprovider tests/gpu/test_decode_gpu.py > $R/tests_decode.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/tests_decode.log ) &
( CUDA_VISIBLE_DEVICES=1 timeout 170 python3 benchmarks/bench_decode.py --out $R > $R/bench_decode.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/bench_decode.log ) &
wait
for f in $R/*.log; do echo "== $(basename $f)"; grep -E "passed|failed|rc=|FAILED|^E " $f | tail -8; done
cd $OUT && tar czf results.tgz r && rm -rf r
