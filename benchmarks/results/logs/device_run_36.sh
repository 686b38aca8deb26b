#!/bin/bash
# the index-builder GPU test with the Triton-first hashing rank; host time by stage (alone on the
# machine, decisions given, T=4,096) and the target rows after this session's changes
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
timeout 60 python3 -m pytest -v -rfE --tb=short -m gpu -p no:cacheprovider "tests/gpu/test_planner_gpu.py::test_each_index_builder_runs_the_call_exactly" > $R/tests_builders_h200_run36.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"
grep -E "FAILED|ERROR|passed|failed" $R/tests_builders_h200_run36.log | cut -c1-300 | tail -6
timeout 100 python3 benchmarks/probe_host.py --out $R/probe --shapes 1x16x16x64x4096,1x32x8x128x4096 --patterns dense-triton,keep0.7,hash16,hash64 --calls 30 --stat median --no-graphed > $R/probe.log 2>&1; echo "probe rc=$? t=$(( $(date +%s) - T0 ))"
timeout 60 python3 benchmarks/bench_models.py --out $R --tag targets_run36_h200 --shapes 2,12,12,64,16384 --patterns keep0.7,keep0.5,hash16 > $R/bench_d64.log 2>&1; echo "bench64 rc=$? t=$(( $(date +%s) - T0 ))"
timeout 150 python3 benchmarks/bench_models.py --out $R --tag targets_d128_run36_h200 --shapes 1,32,8,128,32768 --patterns keep0.7,keep0.5,hash16 > $R/bench_d128.log 2>&1; echo "bench128 rc=$? t=$(( $(date +%s) - T0 ))"
python3 - <<'PY'
import json, glob, os
for f in sorted(glob.glob(os.environ["OUT"] + "/r/probe/*.json")):
    for r in json.load(open(f))["rows"]:
        print(r["shape"], r["pattern"], {k: round(v) for k, v in r.items() if k.startswith(("call_fwd_host", "call_fwd_bwd_host", "decision"))})
for f in sorted(glob.glob(os.environ["OUT"] + "/r/bench_*.json")):
    for r in json.load(open(f))["rows"]:
        print(r["D"], r["T"], r["name"], {m: (round(r[m]["ms"], 2), round(r[m]["sync_ms"], 2)) for m in ("fwd", "fwd_bwd") if m in r})
PY
