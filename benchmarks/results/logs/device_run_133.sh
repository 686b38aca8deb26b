#!/bin/bash
# After the review folded the dQ and forward kernels' shared pieces into gluon_dq.py (the producer's key-tile
# loop, the output store with its non-finite flag, the barriers' set-up): both kernels' GPU tests again
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 300 python3 -m pytest -v -rfEs -m gpu -n 10 -p no:cacheprovider --timeout 280 tests/gpu/test_gluon_fwd_gpu.py \
  tests/gpu/test_gluon_dq_gpu.py > $R/tests_gluon_run133.log 2>&1; echo "tests rc=$? t=$(( $(date +%s) - T0 ))"
tail -1 $R/tests_gluon_run133.log | cut -c1-200; grep -E "(FAILED|ERROR|SKIPPED|Timeout)" $R/tests_gluon_run133.log | head -8 | cut -c1-300
