#!/bin/bash
set -u
source benchmarks/results/logs/device_prelude.sh
export TRITON_CACHE_DIR=/tmp/tcache
mkdir -p $R/property

property_shards 370 340 $(seq 21 30)
du -sh /tmp/tcache; ls /tmp/tcache | wc -l
(cd / && tar czf $OUT/tcache.tgz --exclude='*.llir' --exclude='*.ttir' --exclude='*.ttgir' --exclude='*.ptx' --exclude='*.source' tmp/tcache); (cd $OUT && split -b 15M tcache.tgz tcache.tgz. && rm tcache.tgz && ls -la)
for f in $R/property/*.log $R/property/sum.txt; do echo "== $f"; tail -2 $f | cut -c1-300; done
cd $OUT && tar czf results.tgz r && rm -rf r
