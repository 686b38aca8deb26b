#!/bin/bash
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export TRITON_INTERPRET=0 PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=/tmp/tcache
R=$OUT/r; mkdir -p $R/property; T0=$(date +%s)
timeout 100 python3 -m pytest -v -rfE --tb=short -m gpu -n 4 -p no:cacheprovider tests/gpu/test_graph_capture_gpu.py -k "reduce_overhead" > $R/tests_graph_h200_run9.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"
for s in $(seq 21 30); do
  ( timeout 420 python3 benchmarks/property_run.py --shard $s --budget-s 390 --out $R/property/shard$s.json > $R/property/shard$s.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/property/shard$s.log ) &
done
wait
python3 benchmarks/property_run.py --sum $R/property/shard*.json > $R/property/sum.txt 2>&1
du -sh /tmp/tcache; ls /tmp/tcache | wc -l
(cd / && tar czf $OUT/tcache.tgz --exclude='*.llir' --exclude='*.ttir' --exclude='*.ttgir' --exclude='*.ptx' --exclude='*.source' tmp/tcache); (cd $OUT && split -b 15M tcache.tgz tcache.tgz. && rm tcache.tgz && ls -la)
grep -E "FAILED|ERROR|passed|failed" $R/tests_graph_h200_run9.log | cut -c1-300 | head -20
for f in $R/property/*.log $R/property/sum.txt; do echo "== $f"; tail -2 $f | cut -c1-300; done
cd $OUT && tar czf results.tgz r && rm -rf r
