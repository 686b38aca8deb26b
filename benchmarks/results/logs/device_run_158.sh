#!/bin/bash
# #12: run 157 again (it spent its limit compiling): the compile cache filled first by one process
# per pattern at once, then the bound steps A/B against the tree before them (5ce1da9, unpacked
# into ab_base/ for the run and not committed), alternating processes
# ab_base/ made beforehand: mkdir -p benchmarks/results/logs/ab_base && git archive 5ce1da9 tilesparse | tar -x -C benchmarks/results/logs/ab_base
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
L=benchmarks/results/logs
for p in dense qkdrop0.5 hash16 hybrid perhead topk16; do
  PYTHONPATH=/tmp/site:$PWD timeout 180 python3 $L/ab_bound.py /dev/null warm 64,128 $p warm > $R/warm_$p.log 2>&1 &
done
wait; echo "warm t=$(( $(date +%s) - T0 ))s"; tail -qn1 $R/warm_*.log | cut -c1-200
run() {  # tree round shapes limit
  if [ $1 = base ]; then P=/tmp/site:$PWD/$L/ab_base; else P=/tmp/site:$PWD; fi
  PYTHONPATH=$P timeout $4 python3 $L/ab_bound.py $R/ab_bound_$1$2_run158_h200.json $1 $3 > $R/ab_bound_$1$2_run158.log 2>&1
  echo "$1$2 rc=$? t=$(( $(date +%s) - T0 ))s"
}
run base 1 64 45; run bound 1 64 45; run base 2 64 45; run bound 2 64 45
run base 3 128 60; run bound 3 128 60
tar czf $R/ab_logs_run158.tgz -C $R $(cd $R && ls *.log)
python3 - <<'PY'
import json, glob, os
R = os.environ["OUT"] + "/r"
runs = {os.path.basename(p).split("_run")[0][9:]: json.load(open(p))["rows"] for p in sorted(glob.glob(f"{R}/ab_bound_*_h200.json"))}
print("us per call, host / b2b / sync:", " | ".join(runs))
keys = sorted({k for r in runs.values() for k in r})
for k in keys:
    for mode in ("fwd", "fwd_bwd", "fwd_decide_nograd"):
        cells = [runs[r].get(k, {}).get(mode) for r in runs]
        if any(cells):
            print(f"{k[-24:]:>24} {mode[:10]:>10}: " + " | ".join("    -" if c is None else f"{c['host']:4.0f} {c['b2b']:4.0f} {c['sync']:4.0f}" for c in cells))
PY
