#!/bin/bash
# #12: where an eager call's host time goes (cProfile per pattern, torch building blocks)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 400 python3 benchmarks/results/logs/profile_host.py $R/prof 150 > $R/profile_host_run152.log 2>&1
echo "rc=$? t=$(( $(date +%s) - T0 ))s"; tail -40 $R/profile_host_run152.log | cut -c1-200
cd $R && tar czf prof.tgz prof && rm -rf prof
