#!/bin/bash
set -u
source benchmarks/results/logs/device_prelude.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p $R
S=benchmarks/bench_sequence_parallel.py
timeout 120 torchrun --nproc_per_node=2 $S --only time --t 262144 --iters 5 --exact-t 0 --out $R/bench_sequence_parallel_262k_h200.json > $R/sp262.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/sp262.log
timeout 90 torchrun --nproc_per_node=2 $S --only search --search-gpus 1 --search 524288,1048576 --search-budget-s 40 --out $R/bench_sp_search1_h200.json > $R/search1.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/search1.log
timeout 90 torchrun --nproc_per_node=2 $S --only search --search-gpus 2 --search 524288,1048576 --search-budget-s 40 --out $R/bench_sp_search2_h200.json > $R/search2.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/search2.log
for f in $R/*.log; do echo "== $(basename $f)"; tail -3 $f; done
cd $OUT && tar czf results.tgz r && rm -rf r
