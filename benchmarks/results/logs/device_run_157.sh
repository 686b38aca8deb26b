#!/bin/bash
# #12: the bound steps, A/B against the tree before them (5ce1da9, unpacked into ab_base/ for the
# run and not committed), alternating processes: base, bound, base, bound
# ab_base/ made beforehand: mkdir -p benchmarks/results/logs/ab_base && git archive 5ce1da9 tilesparse | tar -x -C benchmarks/results/logs/ab_base
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
for round in 1 2; do
  for tree in base bound; do
    if [ $tree = base ]; then P=/tmp/site:$PWD/benchmarks/results/logs/ab_base; else P=/tmp/site:$PWD; fi
    PYTHONPATH=$P timeout 250 python3 benchmarks/results/logs/ab_bound.py $R/ab_bound_${tree}${round}_run157_h200.json $tree \
      > $R/ab_bound_${tree}${round}_run157.log 2>&1
    echo "$tree$round rc=$? t=$(( $(date +%s) - T0 ))s"
  done
done
python3 - <<'PY'
import json, glob, os
R = os.environ["OUT"] + "/r"
runs = {os.path.basename(p).split("_run")[0][9:]: json.load(open(p))["rows"] for p in sorted(glob.glob(f"{R}/ab_bound_*_h200.json"))}
keys = list(next(iter(runs.values())))
print("row / mode: host, b2b, sync us per call for", " | ".join(runs))
for k in keys:
    for mode in ("fwd", "fwd_bwd", "fwd_decide_nograd"):
        cells = [runs[r].get(k, {}).get(mode) for r in runs]
        if any(cells):
            print(f"{k[-22:]:>22} {mode:>17}: " + " | ".join("-" if c is None else f"{c['host']:6.0f} {c['b2b']:6.0f} {c['sync']:6.0f}" for c in cells))
PY
