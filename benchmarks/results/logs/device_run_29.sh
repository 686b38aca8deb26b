#!/bin/bash
# after the one-launch id check and the multiplied poison (#12): host time by stage (alone on
# the machine, decisions given), then the GPU tests of the device-side checks
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
timeout 170 python3 benchmarks/probe_host.py --out $R/probe --shapes 1x16x16x64x4096,1x32x8x128x4096 --patterns dense-triton,keep0.7,hash16,hash64,hybrid,perhead,topk8 --calls 30 --stat median --no-graphed > $R/probe.log 2>&1; echo "probe rc=$? t=$(( $(date +%s) - T0 ))"
timeout 200 python3 -m pytest -v -rfE --tb=short -m gpu -n 4 -p no:cacheprovider tests/gpu/test_reliability_gpu.py tests/gpu/test_graph_capture_gpu.py > $R/tests_checks_run29.log 2>&1; echo "gpu tests rc=$? t=$(( $(date +%s) - T0 ))"
grep -E "FAILED|ERROR|passed|failed" $R/tests_checks_run29.log | cut -c1-300 | tail -20
tail -5 $R/probe.log | cut -c1-300
python3 - <<'PY'
import json, glob, os
for f in glob.glob(os.environ["OUT"] + "/r/probe/*.json"):
    d = json.load(open(f))
    for r in d["rows"]:
        print(r["shape"], r["pattern"], {k: round(v) for k, v in r.items() if k.startswith(("call_", "decision", "backward"))})
PY
