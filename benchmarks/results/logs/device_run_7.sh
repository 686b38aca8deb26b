#!/bin/bash
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R/property
timeout 150 python3 -m pytest -v -rfE --tb=short -m gpu -n 4 -p no:cacheprovider tests/gpu/test_graph_capture_gpu.py > $R/tests_graph_h200_run7.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"
property_shards 400 330 1 2 3 4 5 6
grep -E "FAILED|ERROR|passed|failed" $R/tests_graph_h200_run7.log | cut -c1-300 | head -20
for f in $R/property/*.log $R/property/sum.txt; do echo "== $f"; tail -3 $f | cut -c1-300; done
cd $OUT && tar czf results.tgz r && rm -rf r
