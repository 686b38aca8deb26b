#!/bin/bash
# #12: run 176's A/Bs again call by call (ab_calls.py: each pair of calls one with the change on and one with it off,
# from an idle GPU, order alternating; run 176's rounds drifted more than the changes' size): the bound decide step
# over the decided modes at the two 4k shapes, the bound checks over the checked forward at D=64; then py-spy samples
# (non-blocking, 2,000 Hz) of a checked forward and a decided one (Hash(16), D=64), where the host time still goes
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R /tmp/ab177; export R
for s in 1x16x16x64x4096 1x32x8x128x4096; do
  for p in keep0.5 hash16 hybrid topk8; do
    timeout 300 python3 benchmarks/results/logs/ab_calls.py --ab bound-decide --shapes $s --patterns $p \
      --modes fwd_decide_nograd,fwd_bwd_decide --pairs 200 --out /tmp/ab177/decide-$s-$p.json > /tmp/ab177/decide-$s-$p.log 2>&1 &
  done
done
wait
for p in hash16 hybrid perhead topk8; do
  timeout 200 python3 benchmarks/results/logs/ab_calls.py --ab bound-checks --shapes 1x16x16x64x4096 --patterns $p \
    --modes fwd_checked --pairs 200 --out /tmp/ab177/checks-$p.json > /tmp/ab177/checks-$p.log 2>&1 &
done
SPY=/tmp/site/bin/py-spy
for mode in fwd fwd_decide; do
  ( $SPY record -r 2000 -f raw -o /tmp/ab177/spy_$mode.raw -- python3 benchmarks/results/logs/diag_host_spy.py \
      1x16x16x64x4096 hash16 $mode 15 > /tmp/ab177/spy_$mode.log 2>&1 ) &
done
wait
echo "t=$(( $(date +%s) - T0 ))s"
grep -il "error\|Traceback" /tmp/ab177/*.log | head
python3 - <<'PY'
import glob, json, os
rows = {}
for f in sorted(glob.glob("/tmp/ab177/*.json")):
    name = os.path.basename(f).split("-")[0]
    for key, modes in json.load(open(f))["rows"].items():
        rows.setdefault(name, {})[key] = modes
json.dump(rows, open(os.environ["R"] + "/ab_calls_run177_h200.json", "w"), indent=1)
PY
cat /tmp/ab177/decide-*.log /tmp/ab177/checks-*.log | grep "host on" > $R/ab_calls_run177.txt; cat $R/ab_calls_run177.txt
grep -h "host median" /tmp/ab177/spy_*.log
python3 benchmarks/results/logs/spy_summary.py $R/spy_run177_h200.json 47 /tmp/ab177/spy_fwd.raw /tmp/ab177/spy_fwd_decide.raw
python3 - <<'PY'
import json, os
d = json.load(open(os.environ["R"] + "/spy_run177_h200.json"))
for k, v in d.items():
    print(k, v.get("all", v).get("samples") if isinstance(v, dict) else "")
    inc = (v.get("all", v) if isinstance(v, dict) else {}).get("inclusive_pct", {})
    for f, p in list(inc.items())[:28]:
        print(f"  {p:5.1f} {f[:110]}")
PY
