#!/bin/bash
set -u
source benchmarks/results/logs/device_prelude.sh
F=tests/gpu/test_graph_capture_gpu.py
SEQ="tests/gpu/test_reliability_gpu.py::test_cupy_refuses_a_second_derivative tests/gpu/test_reliability_gpu.py::test_buckets_triton_cannot_sort_go_elsewhere_exactly"
for t in "dense-decisions_given" "hash-decisions_made" "topk-decisions_given" "topk-decisions_made"; do SEQ="$SEQ $F::test_a_warmed_up_call_does_not_sync[$t]"; done
for t in qkdrop hash perhead; do SEQ="$SEQ $F::test_a_captured_call_replays_the_eager_one_with_new_inputs_and_decisions[$t]"; done
for t in dense qkdrop hash topk hybrid perhead; do SEQ="$SEQ $F::test_make_graphed_callables_replays_the_eager_call[$t]"; done
SEQ="$SEQ $F::test_a_bad_bucket_id_raises_a_clear_error_eagerly"
echo "== kernel"; timeout 120 python3 -m pytest -q -rfE --tb=line -m gpu -p no:cacheprovider -p no:randomly $SEQ 2>&1 | grep -E "passed|failed|FAILED|Error" | cut -c1-250 | tail -8
echo "== torch ops"; PYTHONPATH=$PYTHONPATH:benchmarks/results/logs timeout 120 python3 -m pytest -q -rfE --tb=line -m gpu -p no:cacheprovider -p no:randomly -p no_idcheck_kernel_plugin $SEQ 2>&1 | grep -E "passed|failed|FAILED|Error" | cut -c1-250 | tail -8
echo "== graph file alone, kernel, serial"; timeout 150 python3 -m pytest -q -rfE --tb=line -m gpu -p no:cacheprovider $F 2>&1 | grep -E "passed|failed|FAILED|Error" | cut -c1-250 | tail -8
