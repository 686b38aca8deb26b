# make demo: set up .venv and run the demo.  make test: set up .venv and run the CPU tests.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# an exact torch pin: a plain "torch" resolves to a multi-GB CUDA build on Linux; the CPU
# suite needs only a CPU build (set TORCH to pick another one)
TORCH ?= torch==2.13.0
# the tests' Triton: the one CUDA builds of torch 2.13 require (the package itself takes any
# Triton 3.6 or newer); TRITON=triton==3.6.0 tests the Triton of torch 2.11. The sm_90 compile
# test holds spill counts measured with each of the two.
TRITON ?= triton==3.7.1
# Triton 3.6's CPU interpreter fails on numpy 2.4 (backends/triton/versions.py); newer ones do not
NUMPY := $(if $(findstring 3.6,$(TRITON)),numpy<2.4,numpy)
PINS := $(TORCH) $(TRITON) $(NUMPY)

.PHONY: demo test test-compile-all test-gpu test-gpu-property clean FORCE

# rewritten only when the pins change, so that a change reinstalls
$(VENV)/.pins: FORCE
	@mkdir -p $(VENV) && echo '$(PINS)' | cmp -s - $@ || echo '$(PINS)' > $@

$(STAMP): pyproject.toml $(VENV)/.pins
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q '$(TORCH)' '$(TRITON)' '$(NUMPY)'
	# the test extra: pytest, pytest-xdist, hypothesis, the cli and transformers extras
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m tilesparse demo

# two workers (pytest-xdist), whole files to each: a module-scoped build (the sm_90 compile)
# then runs once; files in collection order, where tests/conftest.py puts the longest first
test: $(STAMP)
	TRITON_INTERPRET=1 $(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder

# every Triton and Gluon kernel variant compiled for sm_90 and held to its spill table, the fp16,
# fp32 and sanitizing ones included (marked slow: CI compiles the bf16 ones); no GPU needed, one
# compile process per core (minutes on a few cores). It writes the reports to
# tests/backends/triton/sm90_reports.json, which make test reuses while the kernels' sources and
# Triton are unchanged (tests/backends/triton/compile_cache.py): commit it after a kernel change
test-compile-all: $(STAMP)
	TILESPARSE_SM90_REPORTS=write TRITON_INTERPRET=1 $(BIN)/python -m pytest -q -m 'slow or not gpu' \
		tests/backends/triton/test_compile_sm90.py tests/backends/triton/test_compile_gluon_sm90.py

# on a machine with a CUDA GPU: that machine's own python, torch and triton, the
# kernels compiled (TRITON_INTERPRET=0: tests/conftest.py would default it to the interpreter),
# one line per test as it finishes. SHARD=1 to 4 runs one part (each meant to fit 10 minutes:
# the Triton kernels; the CuPy kernels; planner, SDPA, reliability and CUDA graphs; decoding, padding and
# sequence parallelism, the last needing two GPUs); no SHARD runs them all.
GPU_SHARD_1 := tests/gpu/test_triton_gpu.py tests/gpu/test_gluon_dkdv_gpu.py tests/gpu/test_gluon_dq_gpu.py \
               tests/gpu/test_gluon_fwd_gpu.py tests/gpu/test_topk_gpu.py
GPU_SHARD_2 := tests/gpu/test_cupy_gpu.py
GPU_SHARD_3 := tests/gpu/test_planner_gpu.py tests/gpu/test_sdpa_gpu.py tests/gpu/test_reliability_gpu.py \
	tests/gpu/test_graph_capture_gpu.py tests/gpu/test_nan_containment_gpu.py tests/gpu/test_graphs_gpu.py \
	tests/gpu/test_lean_launch_gpu.py tests/gpu/test_bound_decide_gpu.py tests/gpu/test_bound_checks_gpu.py \
	tests/gpu/test_bound_features_gpu.py
GPU_SHARD_4 := tests/gpu/test_decode_gpu.py tests/gpu/test_padding_gpu.py tests/gpu/test_sequence_parallel_gpu.py
GPU_TESTS := $(if $(SHARD),$(GPU_SHARD_$(SHARD)),tests/gpu)
test-gpu:
	@test -n "$(GPU_TESTS)" || { echo "SHARD must be 1, 2, 3 or 4 (got $(SHARD))"; exit 2; }
	TRITON_INTERPRET=0 $(PY) -m pytest -v -rfE --durations=15 -m gpu $(GPU_TESTS) -p no:cacheprovider

# the long property run on the GPU, one shard of < 10 minutes (SHARD=0, 1, ...); the README
# says how many examples the shards' JSON adds up to
test-gpu-property:
	TRITON_INTERPRET=0 $(PY) benchmarks/property_run.py --shard $(or $(SHARD),0) --out benchmarks/results/property/shard$(or $(SHARD),0).json

clean:
	rm -rf $(VENV) build *.egg-info
