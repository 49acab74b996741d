# The two set-up commands: `make demo` and `make test` (`make test-kernels`: the CI's second
# step). Each (re)creates .venv from the repo's own files when they changed, then runs. PYTHON
# may name another Python 3.11 interpreter.
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PIP := $(VPY) -m pip install --disable-pip-version-check
FAIRSEQ := fairseq-fixed==0.12.3.1

.PHONY: demo test test-kernels venv clean-venv
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

# The numerics tests (@pytest.mark.numerics: float comparisons whose tolerances come from the
# dtype and the size of the sums) again under two other CPU kernel sets, as another processor
# would choose them: torch's own kernels (ATEN_CPU_CAPABILITY), MKL's BLAS
# (MKL_ENABLE_INSTRUCTIONS) and oneDNN's (ONEDNN_MAX_CPU_ISA), capped at AVX2 and at the x86-64
# baseline (SSE4). Their sums run in other orders, so a tolerance that only this processor's
# rounding meets fails here. (`make test` ran them with the native set.) ~1 minute per set
# (2 min for both on 2 cores with one worker; the caps are for x86-64 processors).
KERNELS_avx2 := ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2
KERNELS_default := ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2 ONEDNN_MAX_CPU_ISA=SSE41
NUMERICS := PATH="$(CURDIR)/$(VENV)/bin:$$PATH" OMP_NUM_THREADS=1 $(VPY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m numerics tests
test-kernels: $(STAMP)
	@echo "numerics tests under $(KERNELS_avx2)"
	$(KERNELS_avx2) $(NUMERICS)
	@echo "numerics tests under $(KERNELS_default)"
	$(KERNELS_default) $(NUMERICS)

clean-venv:
	rm -rf $(VENV)
