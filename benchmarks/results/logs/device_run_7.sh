#!/bin/bash
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R/property; T0=$(date +%s)
timeout 150 python3 -m pytest -v -rfE --tb=short -m gpu -n 4 -p no:cacheprovider tests/gpu/test_graph_capture_gpu.py > $R/tests_graph_h200_run7.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"
for s in 1 2 3 4 5 6; do
  ( timeout 400 python3 benchmarks/property_run.py --shard $s --budget-s 330 --out $R/property/shard$s.json > $R/property/shard$s.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/property/shard$s.log ) &
done
wait
python3 benchmarks/property_run.py --sum $R/property/shard*.json > $R/property/sum.txt 2>&1
grep -E "FAILED|ERROR|passed|failed" $R/tests_graph_h200_run7.log | cut -c1-300 | head -20
for f in $R/property/*.log $R/property/sum.txt; do echo "== $f"; tail -3 $f | cut -c1-300; done
cd $OUT && tar czf results.tgz r && rm -rf r
