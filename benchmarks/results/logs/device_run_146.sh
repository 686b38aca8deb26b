#!/bin/bash
# #12: the GPU tests on the final tree (the GQA sum in one launch, one flag fill a call, no k copy
# for bernoulli, the lsh draw rounded in the hashing kernels): first the files that run the changed
# code, then the rest of the suite in the time left; then, if time is left, probe_host with
# autograd's device thread off (eager and replayed; 4 patterns, both 4k shapes).
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
FIRST="tests/gpu/test_triton_gpu.py tests/gpu/test_nan_containment_gpu.py tests/gpu/test_cupy_gpu.py tests/gpu/test_gluon_dkdv_gpu.py tests/gpu/test_graphs_gpu.py"
timeout 260 python3 -m pytest -q -rfEs -m gpu -n 14 -p no:cacheprovider $FIRST > $R/tests_changed_run146.log 2>&1
echo "changed rc=$? t=$(( $(date +%s) - T0 ))s"; grep -v Warning $R/tests_changed_run146.log | grep -v "warner\|^$" | tail -8 | cut -c1-300
rest=$(( 400 - ($(date +%s) - T0) ))
IGN=$(for f in $FIRST; do printf -- "--ignore=%s " $f; done)
timeout $rest python3 -m pytest -q -rfEs -m gpu -n 14 -p no:cacheprovider tests/gpu $IGN > $R/tests_rest_run146.log 2>&1
echo "rest rc=$? t=$(( $(date +%s) - T0 ))s"; grep -v Warning $R/tests_rest_run146.log | grep -v "warner\|^$" | tail -8 | cut -c1-300
left=$(( 450 - ($(date +%s) - T0) ))
if [ $left -gt 60 ]; then
  timeout $left python3 benchmarks/probe_host.py --out $R/probe --no-autograd-threads --no-graphed \
    --shapes 1x16x16x64x4096,1x32x8x128x4096 --patterns hash16,keep0.7,hybrid,dense-triton --calls 20 --stat median \
    > $R/probe_host_nothreads_run146.log 2>&1
  echo "probe rc=$? t=$(( $(date +%s) - T0 ))s"
  [ -f $R/probe/probe_host.json ] && mv $R/probe/probe_host.json $R/probe_host_nothreads_run146_h200.json
  [ -f $R/probe_host_nothreads_run146_h200.json ] && python3 benchmarks/results/logs/replay_table.py $R/probe_host_nothreads_run146_h200.json 2>&1 | tail -14
fi
