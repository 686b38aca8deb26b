#!/bin/bash
# round 8: the backward kernels with dP's product issued before the probabilities' exponentials
# (dp_first_dq / dp_first_dkdv), so that the exponentials run while the tensor cores compute dP
# (their SASS, Triton 3.6: the dK/dV kernel's dP product overlaps the exponentials in the
# unmasked loop, and the D=128 drop variant's in-loop spills fall from 84 to 50); kernels alone
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 200 python3 benchmarks/sweep_kernels.py --no-sdpa --out $R --tag d128_round8 --shapes 1,32,8,128,32768 \
  --patterns keep0.7,keep0.5,hash16 --configs @benchmarks/sweeps/d128_round8.json > $R/sweep_d128_round8.log 2>&1
echo "d128 rc=$? t=$(( $(date +%s) - T0 ))"; tail -13 $R/sweep_d128_round8.log | cut -c1-250
timeout 200 python3 benchmarks/sweep_kernels.py --no-sdpa --out $R --tag d64_round8 --shapes 2,12,12,64,16384 \
  --patterns keep0.7,keep0.3,hash16,hash64 --configs @benchmarks/sweeps/d64_round8.json > $R/sweep_d64_round8.log 2>&1
echo "d64 rc=$? t=$(( $(date +%s) - T0 ))"; tail -17 $R/sweep_d64_round8.log | cut -c1-250
