# The two set-up commands: `make demo` and `make test`. Each (re)creates .venv from the repo's
# own files when they changed, then runs. PYTHON may name another Python 3.11 interpreter.
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PIP := $(VPY) -m pip install --disable-pip-version-check
FAIRSEQ := fairseq-fixed==0.12.3.1

.PHONY: demo test venv clean-venv
venv: $(STAMP)

# torch is pinned first (an unpinned one pulls a multi-GB CUDA build); fairseq is built against
# it without build isolation and without its declared dependencies (torchaudio, which cannot load
# beside torch 2.13); then our requirements, then this package in editable mode.
$(STAMP): setup.py requirements.txt Makefile
	test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(PIP) -q torch==2.13.0 numpy cython setuptools wheel
	$(PIP) -q --no-build-isolation --no-deps $(FAIRSEQ)
	$(PIP) -q -r requirements.txt
	$(PIP) -q --no-build-isolation --no-deps -e .
	# the `hf` extra (import-hf, the Hugging Face parity tests): transformers without its
	# declared dependencies (which could pull another torch), those it needs listed instead
	$(PIP) -q "safetensors>=0.4.3" "tokenizers>=0.22,<=0.23.0" "huggingface-hub>=0.34,<1.0" pyyaml requests filelock
	$(PIP) -q --no-deps transformers==4.57.6
	$(VPY) -c "import fairseq, fairseq_heads; print('fairseq-heads', fairseq_heads.__version__, 'ready')"
	touch $(STAMP)

demo: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash recipes/demo.sh

# The suite in TEST_WORKERS pytest-xdist processes, each test file on one of them (the module
# fixtures that run a recipe once stay one run), one OpenMP thread each, so that the workers and
# the fairseq commands they start do not oversubscribe the cores.
TEST_WORKERS ?= 2
test: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" OMP_NUM_THREADS=1 $(VPY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile tests

clean-venv:
	rm -rf $(VENV)
