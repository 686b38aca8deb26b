#!/bin/bash
# after the kernels' query-block prologue and segment lookup were folded into _query_block and
# _segments (#16): the GPU suite (one GPU; sequence parallelism needs two)
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
(TRITON_INTERPRET=0 timeout 500 python3 -m tilesparse.backends.triton.sm90 > $R/sm90_variants_36_run39.jsonl 2> $R/sm90_run39.err; echo "sm90 rc=$? t=$(( $(date +%s) - T0 ))" > $R/sm90_rc.txt) &
timeout 560 python3 -m pytest -v -rfE --tb=short -m gpu -n 8 -p no:cacheprovider tests/gpu --ignore=tests/gpu/test_sequence_parallel_gpu.py > $R/tests_gpu_h200_run39.log 2>&1; echo "gpu tests rc=$? t=$(( $(date +%s) - T0 ))"
grep -E "FAILED|ERROR|passed|failed" $R/tests_gpu_h200_run39.log | cut -c1-300 | tail -25
wait
cat $R/sm90_rc.txt
python3 - <<'PY'
import json, os
rows = [json.loads(l) for l in open(os.environ["OUT"] + "/r/sm90_variants_36_run39.jsonl") if l.startswith("{")]
print(len(rows), "variants;", [(r["variant"][:34], r["loop_spills"], r["stack"]) for r in rows if r["variant"].startswith("dq fp32 D=256")])
PY
