# make demo: set up .venv and run the demo.  make test: set up .venv and run the CPU tests.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-transformers test-gpu bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch 2.13.0 is the CPU wheel these machines keep on disk; plain "torch" pulls CUDA
	$(BIN)/python -m pip install -q torch==2.13.0
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

# on a machine with a GPU (the device): uses the machine's own python, torch and triton
test-gpu:
	$(PY) -m pytest -q -m gpu tests/gpu -p no:cacheprovider

clean:
	rm -rf $(VENV) build *.egg-info
