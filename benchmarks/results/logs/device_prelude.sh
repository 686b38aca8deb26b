# Sourced by device_run_*.sh (repo root): installs .whl/, sets PYTHONPATH, TRITON_INTERPRET, PYTHONUNBUFFERED, R, T0
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
R=$OUT/r; T0=$(date +%s)

# property_shards TIMEOUT BUDGET SHARD...: property_run.py shards in parallel into $R/property, then their sum
property_shards() {
  local limit=$1 budget=$2 s
  shift 2
  for s in "$@"; do
    ( timeout $limit python3 benchmarks/property_run.py --shard $s --budget-s $budget --out $R/property/shard$s.json \
        > $R/property/shard$s.log 2>&1; echo "rc=$? t=$(( $(date +%s) - T0 ))" >> $R/property/shard$s.log ) &
  done
  wait
  python3 benchmarks/property_run.py --sum $R/property/shard*.json > $R/property/sum.txt 2>&1
}
