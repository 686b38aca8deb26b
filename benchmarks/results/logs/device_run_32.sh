#!/bin/bash
# run three times: reporting garbage collections during a capture; again with gc.DEBUG_COLLECTABLE (the
# collected objects: tensors and an autograd Function class of the previous make_graphed_callables); and
# after the graph tests began collecting garbage after each test (16 passed)
set -u
source benchmarks/results/logs/device_prelude.sh
export PYTHONPATH=$PYTHONPATH:$PWD/benchmarks/results/logs
F=tests/gpu/test_graph_capture_gpu.py
SEQ="tests/gpu/test_reliability_gpu.py::test_cupy_refuses_a_second_derivative tests/gpu/test_reliability_gpu.py::test_buckets_triton_cannot_sort_go_elsewhere_exactly"
for t in "dense-decisions_given" "hash-decisions_made" "topk-decisions_given" "topk-decisions_made"; do SEQ="$SEQ $F::test_a_warmed_up_call_does_not_sync[$t]"; done
for t in qkdrop hash perhead; do SEQ="$SEQ $F::test_a_captured_call_replays_the_eager_one_with_new_inputs_and_decisions[$t]"; done
for t in dense qkdrop hash topk hybrid perhead; do SEQ="$SEQ $F::test_make_graphed_callables_replays_the_eager_call[$t]"; done
echo "== kernel, diag"; timeout 120 python3 -m pytest -q -s -rfE --tb=line -m gpu -p no:cacheprovider -p diag_capture_gc_plugin $F::test_a_bad_bucket_id_raises_a_clear_error_eagerly $SEQ 2>&1 | grep -E "DIAG|gc: coll|passed|failed|FAILED" | grep -vE "<(dict|NodeView|DiGraph|InEdgeView|OutEdgeView|AdjacencyView|builtin_function_or_method|cell|tuple|function) " | cut -c1-250 | tail -60
