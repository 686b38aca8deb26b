#!/bin/bash
# the target rows after the folds of run 39 (#16: within noise of run 36?), then the same rows with
# the forward and dQ kernels walking their query blocks last-first (#11: the heaviest causal
# blocks first, a shorter tail; predicted <= 3% on QKDrop, nothing on Hash): a copy of the tree
# with _query_block's block index reversed, timed in its own processes after the first
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
bench() {  # TAG TREE
  PYTHONPATH=/tmp/site:$2 timeout 70 python3 $2/benchmarks/bench_models.py --out $R --tag targets_$1_h200 --shapes 2,12,12,64,16384 --patterns keep0.7,keep0.5,hash16 > $R/bench_d64_$1.log 2>&1; echo "bench64 $1 rc=$? t=$(( $(date +%s) - T0 ))"
  PYTHONPATH=/tmp/site:$2 timeout 160 python3 $2/benchmarks/bench_models.py --out $R --tag targets_d128_$1_h200 --shapes 1,32,8,128,32768 --patterns keep0.7,keep0.5,hash16 > $R/bench_d128_$1.log 2>&1; echo "bench128 $1 rc=$? t=$(( $(date +%s) - T0 ))"
}
bench run40 $PWD
rm -rf /tmp/rev && cp -r $PWD /tmp/rev
sed -i 's/    pid_m = tl.program_id(0)$/    pid_m = tl.num_programs(0) - 1 - tl.program_id(0)  # last block first/' /tmp/rev/tilesparse/backends/triton/kernels.py
grep -c "last block first" /tmp/rev/tilesparse/backends/triton/kernels.py
bench run40_reversed /tmp/rev
python3 - <<'PY'
import json, glob, os
for f in sorted(glob.glob(os.environ["OUT"] + "/r/bench_*.json")):
    print(os.path.basename(f))
    for r in json.load(open(f))["rows"]:
        print(" ", r["D"], r["T"], r["name"], {m: (round(r[m]["ms"], 2), round(r[m]["sync_ms"], 2)) for m in ("fwd", "fwd_bwd") if m in r})
PY
