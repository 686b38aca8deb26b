#!/bin/bash
# #12/#14: the make_graphed_callables GPU test; the Llama step through torch.compile
# (reduce-overhead, default); #11: the fused backward's dQ atomics alone
set -u
source benchmarks/results/logs/device_prelude.sh
mkdir -p $R
python3 -c "import transformers; print('transformers', transformers.__version__)"
timeout 60 python3 benchmarks/probe_atomics.py --out $R/atomics64 > $R/atomics64.log 2>&1; echo "atomics64 rc=$? t=$(( $(date +%s) - T0 ))"; cat $R/atomics64.log | tail -4
timeout 60 python3 benchmarks/probe_atomics.py --tiles 1050000 --out $R/atomics128 > $R/atomics128.log 2>&1; echo "atomics128 rc=$? t=$(( $(date +%s) - T0 ))"; tail -4 $R/atomics128.log
timeout 130 python3 -m pytest -v -rfE --tb=short -m gpu -p no:cacheprovider tests/gpu/test_graph_capture_gpu.py -k make_graphed > $R/tests_graphed_run13.log 2>&1; echo "graphed test rc=$? t=$(( $(date +%s) - T0 ))"
grep -E "passed|failed|FAILED|ERROR" $R/tests_graphed_run13.log | cut -c1-300 | tail -8
timeout 190 python3 benchmarks/bench_llama_step.py --compile reduce-overhead --skip-packed --out $R/llama_step_ro_h200.json > $R/llama_ro.log 2>&1; echo "llama ro rc=$? t=$(( $(date +%s) - T0 ))"; tail -8 $R/llama_ro.log
timeout $(( 570 - ($(date +%s) - T0) )) python3 benchmarks/bench_llama_step.py --compile default --skip-packed --out $R/llama_step_compiled_h200.json > $R/llama_c.log 2>&1; echo "llama default rc=$? t=$(( $(date +%s) - T0 ))"; tail -8 $R/llama_c.log
(cd $OUT && tar czf results.tgz r && rm -rf r)
