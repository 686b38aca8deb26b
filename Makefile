# make demo: set up .venv and run the demo.  make test: set up .venv and run the CPU tests.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# an exact torch pin: a plain "torch" resolves to a multi-GB CUDA build on Linux; the CPU
# suite needs only a CPU build (set TORCH to pick another one)
TORCH ?= torch==2.13.0

.PHONY: demo test test-transformers test-gpu clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q '$(TORCH)'
	# the test extra: pytest, hypothesis, the cli extra, and numpy<2.4 for Triton 3.6's interpreter
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m tilesparse demo

test: $(STAMP)
	TRITON_INTERPRET=1 $(BIN)/python -m pytest -q

# the Hugging Face integration's tests (the transformers extra is too large for `make test`)
test-transformers: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[transformers]'
	TRITON_INTERPRET=1 $(BIN)/python -m pytest -q -m transformers tests/integrations

# on a machine with a CUDA GPU: uses that machine's own python, torch and triton, kernels compiled
test-gpu:
	TRITON_INTERPRET=0 $(PY) -m pytest -q -m gpu tests/gpu -p no:cacheprovider

clean:
	rm -rf $(VENV) build *.egg-info
