#!/bin/bash
# #12: a call's decisions made by steps bound once per signature (tilesparse/decide.py bind_decisions) and given ids'
# device checks bound once per op and layout (decision_errors.BoundChecks): first their GPU tests (and the decided and
# checked calls' capture and planner tests), then each change timed on and off in turns in each process
# (call_times.py --ab bound-decide over the decided modes of six patterns at the two 4k shapes; --ab bound-checks over
# the checked forward of the four patterns with ids at B=1 H=16 D=64), one process per pattern and shape, compiling at
# once and timing in turns under a lock, 3 rounds
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R /tmp/ct176; export R
timeout 180 python3 -m pytest -q -rfEs -m gpu -n 14 -p no:cacheprovider tests/gpu/test_bound_decide_gpu.py \
  tests/gpu/test_bound_checks_gpu.py tests/gpu/test_reliability_gpu.py tests/gpu/test_graph_capture_gpu.py \
  > $R/tests_run176.log 2>&1
echo "tests rc=$? t=$(( $(date +%s) - T0 ))s"; grep -E "passed|failed|FAILED|ERROR" $R/tests_run176.log | tail -12 | cut -c1-300
N=0
for s in 1x16x16x64x4096 1x32x8x128x4096; do
  for p in keep0.5 hash16 hash64 hybrid perhead topk8; do
    timeout 330 python3 benchmarks/call_times.py --shapes $s --patterns $p --rounds 3 --calls 40 --ab bound-decide \
      --modes fwd_decide_nograd,fwd_bwd_decide --lock /tmp/ct176 --expect 16 --wait-s 200 \
      --out /tmp/ct176/decide-$s-$p.json > /tmp/ct176/decide-$s-$p.log 2>&1 &
  done
done
for p in hash16 hybrid perhead topk8; do
  timeout 330 python3 benchmarks/call_times.py --shapes 1x16x16x64x4096 --patterns $p --rounds 3 --calls 40 \
    --ab bound-checks --modes fwd,fwd_checked --lock /tmp/ct176 --expect 16 --wait-s 200 \
    --out /tmp/ct176/checks-$p.json > /tmp/ct176/checks-$p.log 2>&1 &
done
wait
grep -il "error\|Traceback" /tmp/ct176/*.log | head
python3 benchmarks/call_times.py --merge /tmp/ct176/decide-*.json --out $R/call_times_decide_run176_h200.json > $R/call_times_decide_run176.txt
python3 benchmarks/call_times.py --merge /tmp/ct176/checks-*.json --out $R/call_times_checks_run176_h200.json > $R/call_times_checks_run176.txt
echo "t=$(( $(date +%s) - T0 ))s"
python3 - <<'PY'
import json, os
for name, modes in (("decide", ("fwd_decide_nograd", "fwd_bwd_decide")), ("checks", ("fwd", "fwd_checked"))):
    d = json.load(open(os.environ["R"] + f"/call_times_{name}_run176_h200.json"))["rows"]
    print(f"{'row':34} {'mode':18} host on/off   b2b on/off   sync on/off   sync/cuDNN on")
    for key in sorted(d):
        for m in modes:
            on, off = d[key].get(m), d[key].get(m + "@off")
            if on is None:
                continue
            ref = d[key]["sdpa_cudnn"]["fwd_bwd" if "bwd" in m else "fwd"]
            print(f"{key[-34:]:34} {m:18} {on['host']:5.0f} {off['host']:5.0f}   {on['b2b']:5.0f} {off['b2b']:5.0f}   "
                  f"{on['sync']:5.0f} {off['sync']:5.0f}   {on['sync'] / ref['sync']:5.2f}")
PY
