#!/bin/bash
# TopKFeatures' q~ and k~ in one launch for both sides (features._keep_features_pair), forward and backward: (1) the
# GPU tests of the feature launches (bitwise against a launch a side, Tq < Tk too), of TopKFeatures and of the SDPA
# backend; (2) TopKFeatures(8) on the Triton backend and as a default compile (the SDPA backend), the pair on and off
# in one process (--ab paired-features), then the default compile with its launches bound and not (--ab
# bound-features); (3) both paired with cuDNN; (4) a checked call's host time taken apart (checked_host.py).
# Run after device_run_213.sh (or alone: nothing here needs its tree).
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/gpu/test_bound_features_gpu.py \
  tests/gpu/test_topk_gpu.py tests/gpu/test_sdpa_gpu.py > $R/tests_features_run214.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; tail -3 $R/tests_features_run214.log | cut -c1-200
for p in topk8 topk8@auto; do
  timeout 120 python3 benchmarks/call_times.py --shapes 1x16x16x64x4096,1x32x8x128x4096 --patterns $p \
    --modes fwd,fwd_bwd --ab paired-features --rounds 4 --out $R/call_times_paired_features_${p/@/_}_run214_$GPU.json \
    > $R/call_times_paired_features_${p/@/_}_run214.txt 2>&1
  echo "call_times $p paired-features rc=$? t=$(( $(date +%s) - T0 ))"
  tail -8 $R/call_times_paired_features_${p/@/_}_run214.txt | cut -c1-200
done
# TopKFeatures(8) as a default compile (the SDPA backend) with its q~ and k~ launches bound per signature, and with
# them made per call (--ab bound-features), in one process; then paired with cuDNN
timeout 120 python3 benchmarks/call_times.py --shapes 1x16x16x64x4096,1x32x8x128x4096 --patterns topk8@auto \
  --modes fwd,fwd_bwd --ab bound-features --rounds 4 --out $R/call_times_topk8_auto_run214_$GPU.json \
  > $R/call_times_topk8_auto_run214.txt 2>&1
echo "call_times topk8@auto rc=$? t=$(( $(date +%s) - T0 ))"; tail -8 $R/call_times_topk8_auto_run214.txt | cut -c1-200
for shape in 1x16x16x64x4096 1x32x8x128x4096; do
  timeout 60 python3 benchmarks/results/logs/paired_cudnn.py --shapes $shape --patterns topk8@auto,topk8 \
    --modes fwd,fwd_bwd --pairs 100 --out $R/paired_cudnn_topk8_auto_${shape}_run214_$GPU.json \
    > $R/paired_cudnn_topk8_auto_${shape}_run214.txt 2>&1
  echo "paired topk8 $shape rc=$? t=$(( $(date +%s) - T0 ))"; grep host $R/paired_cudnn_topk8_auto_${shape}_run214.txt
done
# where a checked call's extra host time goes: the record's copy and event, the id check's launch, both taken out
timeout 120 python3 benchmarks/results/logs/checked_host.py $R/checked_host_run214_$GPU.json \
  > $R/checked_host_run214.txt 2>&1
echo "checked_host rc=$? t=$(( $(date +%s) - T0 ))"; cat $R/checked_host_run214.txt | cut -c1-200
cd $R && tar czf ../run214.tgz *.log *.txt && rm -f *.log *.txt
