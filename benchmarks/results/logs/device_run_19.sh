python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit
export TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 300 python3 build/device/diag_host2.py 2>&1 | tee $OUT/diag_host2.log | cut -c1-1500
