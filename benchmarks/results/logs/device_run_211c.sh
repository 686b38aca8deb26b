#!/bin/bash
# Right after run 211, on the same machine: its cProfile files again (run 211's came back without them: too many
# files), packed in one archive (profile_host_run211c.tgz; the medians in profile_host_run211c.log)
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
timeout 90 python3 benchmarks/results/logs/profile_host.py /tmp/ph211 200 hash16,perhead,topk8 1x16x16x64x4096 \
  > $R/profile_host_run211c.log 2>&1
tar czf $R/profile_host_run211c.tgz -C /tmp ph211; tail -9 $R/profile_host_run211c.log
