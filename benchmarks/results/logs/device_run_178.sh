#!/bin/bash
# #12's decide goal (decisions made in the call add at most 10% at T=16,384 and 32,768, every built-in criterion) on
# the bound decide step: a training call's forward+backward with decisions made in it against the same with them
# given (trusted), B=2 H=12 D=64 and D=128, QKDrop(0.5) (bernoulli), Hash(16) and Hash(64) (lsh), the hybrid, and
# TopKFeatures(8) (topk_abs); call_times.py, one process per pattern and shape, in turns under a lock, 2 rounds
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R /tmp/ct178; export R
N=0
for s in 2x12x12x64x16384 2x12x12x64x32768 2x12x12x128x16384 2x12x12x128x32768; do
  for p in keep0.5 hash16 hash64 hybrid topk8; do
    timeout 520 python3 benchmarks/call_times.py --shapes $s --patterns $p --rounds 2 --calls 20 \
      --modes fwd_bwd,fwd_bwd_decide --lock /tmp/ct178 --expect 20 --wait-s 300 \
      --out /tmp/ct178/$s-$p.json > /tmp/ct178/$s-$p.log 2>&1 &
  done
done
wait
grep -il "error\|Traceback" /tmp/ct178/*.log | head
python3 benchmarks/call_times.py --merge /tmp/ct178/*.json --out $R/call_times_decide_goal_run178_h200.json > $R/call_times_decide_goal_run178.txt
echo "t=$(( $(date +%s) - T0 ))s"
python3 - <<'PY'
import json, os
d = json.load(open(os.environ["R"] + "/call_times_decide_goal_run178_h200.json"))["rows"]
print(f"{'row':36} fwd+bwd given / made (us), made/given: b2b  sync")
for key in sorted(d):
    g, m = d[key]["fwd_bwd"], d[key]["fwd_bwd_decide"]
    print(f"{key[-36:]:36} b2b {g['b2b']:7.0f} {m['b2b']:7.0f}  sync {g['sync']:7.0f} {m['sync']:7.0f}   "
          f"{m['b2b'] / g['b2b']:5.2f} {m['sync'] / g['sync']:5.2f}")
PY
