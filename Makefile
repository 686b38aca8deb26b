# make demo: set up .venv and run the demo.  make test: set up .venv and run the CPU tests.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-gpu test-gpu-property bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch 2.13.0 is the CPU wheel these machines keep on disk; plain "torch" pulls CUDA
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m tilesparse demo

# two workers (pytest-xdist), whole files to each: a module-scoped build (the sm_90 compile)
# then runs once
test: $(STAMP)
	TRITON_INTERPRET=1 $(BIN)/python -m pytest -q -n 2 --dist loadfile

# on a machine with a GPU (the device): the machine's own python, torch and triton, the
# kernels compiled (TRITON_INTERPRET=0: tests/conftest.py would default it to the interpreter),
# one line per test as it finishes. SHARD=1, 2 or 3 runs one third (each under 10 minutes on an
# H200, by design: the Triton kernels; the CuPy kernels; planner, SDPA and reliability);
# no SHARD runs all three.
GPU_SHARD_1 := tests/gpu/test_triton_gpu.py
GPU_SHARD_2 := tests/gpu/test_cupy_gpu.py
GPU_SHARD_3 := tests/gpu/test_planner_gpu.py tests/gpu/test_sdpa_gpu.py tests/gpu/test_reliability_gpu.py
GPU_TESTS := $(if $(SHARD),$(GPU_SHARD_$(SHARD)),tests/gpu)
test-gpu:
	@test -n "$(GPU_TESTS)" || { echo "SHARD must be 1, 2 or 3 (got $(SHARD))"; exit 2; }
	TRITON_INTERPRET=0 $(PY) -m pytest -v -rfE --durations=15 -m gpu $(GPU_TESTS) -p no:cacheprovider

# the long property run on the GPU, one shard of < 10 minutes (SHARD=0, 1, ...); the README
# says how many examples the shards' JSON adds up to
test-gpu-property:
	TRITON_INTERPRET=0 $(PY) benchmarks/property_run.py --shard $(or $(SHARD),0) --out benchmarks/results/property/shard$(or $(SHARD),0).json

clean:
	rm -rf $(VENV) build *.egg-info
