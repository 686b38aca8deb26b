python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit
export TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 400 python3 benchmarks/probe_ws_fwd.py --out $OUT 2>&1 | tee $OUT/probe_ws_fwd.log | cut -c1-900
