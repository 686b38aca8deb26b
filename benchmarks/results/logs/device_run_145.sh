#!/bin/bash
# #12: the backward's device work cut (the GQA dK/dV sum and cast in one launch, one flag fill a
# call, no copy of k for the bernoulli criterion) against the tree before it (ab_run145.patch
# reversed), in alternating processes, autograd's worker thread on and off (ab_host.py); then
# the GPU tests of the changed code.
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
NEW=$PWD; OLD=/tmp/old
mkdir -p $OLD && cp -r tilesparse $OLD/ && (cd $OLD && patch -s -R -p1 < $NEW/benchmarks/results/logs/ab_run145.patch) || exit 1
ab() { (cd $1 && PYTHONPATH=/tmp/site:$1 python3 $NEW/benchmarks/results/logs/ab_host.py $2 $R/ab_host_$2_run145.json >> $R/ab_run145.log 2>&1); }
ab $OLD old1; ab $NEW new1; ab $OLD old2; ab $NEW new2
echo "ab done t=$(( $(date +%s) - T0 ))s"
timeout 300 python3 -m pytest -q -rfEs -m gpu -n 8 -p no:cacheprovider tests/gpu/test_nan_containment_gpu.py \
  tests/gpu/test_graphs_gpu.py tests/gpu/test_graph_capture_gpu.py tests/gpu/test_triton_gpu.py 2>&1 | tail -25 | tee $R/tests_run145.log
echo "t=$(( $(date +%s) - T0 ))s"
python3 benchmarks/results/logs/ab_host.py table $R/ab_host_*_run145.json | tee $R/ab_host_run145.txt
