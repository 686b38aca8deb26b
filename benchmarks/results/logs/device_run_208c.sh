#!/bin/bash
# After run 208 (same machine): tests/gpu/test_nan_containment_gpu.py again, its stand-in for the unchanged variants
# (test_finite_inputs_take_the_unchanged_kernels) called as the launch sites are now
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R; timeout 200 python3 -m pytest -q -rfEs -m gpu -n 4 -p no:cacheprovider tests/gpu/test_nan_containment_gpu.py > $R/tests_nan_containment_run208c.log 2>&1; echo rc=$? t=$(( $(date +%s) - T0 )); tail -3 $R/tests_nan_containment_run208c.log
