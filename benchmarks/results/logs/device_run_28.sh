#!/bin/bash
# the default-mode torch.compile GPU test of the kept forward graph (every built-in pattern)
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export TRITON_INTERPRET=0 PYTHONUNBUFFERED=1
mkdir -p $OUT
timeout 200 python3 -m pytest -v -rfE --tb=short -m gpu -p no:cacheprovider tests/gpu/test_graph_capture_gpu.py -k "default_compile" > $OUT/tests_compile_default.log 2>&1; echo "rc=$?"
grep -E "PASSED|FAILED|passed|failed|Error" $OUT/tests_compile_default.log | cut -c1-250 | tail -12
