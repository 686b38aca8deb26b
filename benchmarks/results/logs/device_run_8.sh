#!/bin/bash
set -u
source benchmarks/results/logs/device_prelude.sh
export TRITON_CACHE_DIR=/tmp/tcache
mkdir -p $R/property
timeout 100 python3 -m pytest -v -rfE --tb=short -m gpu -n 4 -p no:cacheprovider tests/gpu/test_graph_capture_gpu.py -k "reduce_overhead" > $R/tests_graph_h200_run9.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"
property_shards 420 390 $(seq 21 30)
du -sh /tmp/tcache; ls /tmp/tcache | wc -l
(cd / && tar czf $OUT/tcache.tgz --exclude='*.llir' --exclude='*.ttir' --exclude='*.ttgir' --exclude='*.ptx' --exclude='*.source' tmp/tcache); (cd $OUT && split -b 15M tcache.tgz tcache.tgz. && rm tcache.tgz && ls -la)
grep -E "FAILED|ERROR|passed|failed" $R/tests_graph_h200_run9.log | cut -c1-300 | head -20
for f in $R/property/*.log $R/property/sum.txt; do echo "== $f"; tail -2 $f | cut -c1-300; done
cd $OUT && tar czf results.tgz r && rm -rf r
