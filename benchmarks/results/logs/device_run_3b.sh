#!/bin/bash
set -u
source benchmarks/results/logs/device_prelude.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p $R/property
# GPU 1: the training comparison, both protocols, T=8192
( CUDA_VISIBLE_DEVICES=1 timeout 400 python3 examples/train_lm.py --device cuda --protocols standard,shared-qk --variants standard:dense,standard:hash16,shared-qk:dense-noself,shared-qk:hash16-noself,shared-qk:dense --t 8192 --steps 300 --eval-every 25 --tokens-per-step 131072 --time-budget-s 380 --name train_lm_protocols_h200 --out $R > $R/train.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/train.log ) &
# GPU 0: ncu on the target kernels, then the property run's throughput with 6 shards at once
export CUDA_VISIBLE_DEVICES=0
for p in keep0.7 hash16; do
  timeout 150 ncu --clock-control none --profile-from-start off --kernel-name regex:"_attn_" --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis python3 build/device/ncu_target.py $p 16384 > $R/ncu_$p.txt 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/ncu_$p.txt
done
property_shards 200 150 0 1 2 3 4 5
for f in $R/*.log $R/property/*.log $R/property/sum.txt; do echo "== $f"; tail -4 $f; done
for f in $R/ncu_*.txt; do echo "== $f"; grep -E "_attn_|Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Issue Slots Busy|No Eligible|Local Memory|Theoretical Occupancy" $f | head -60; done
cd $OUT && tar czf results.tgz r && rm -rf r
