# The two set-up-included entry points (see README): `make scifact` and `make test`.
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.dotcat-installed
INDEX ?= indexes/scifact-minilm
RUNS ?= runs

.PHONY: scifact test test-fast test-kernels test-floors test-zen3 lint reference check-wheel setup clean

$(STAMP): pyproject.toml scripts/bootstrap.sh
	bash scripts/bootstrap.sh $(VENV)
	touch $@

setup: $(STAMP)

# Main job: index the bundled SciFact with the default model (all-MiniLM-L6-v2) and BM25 (the
# hybrid fusion chosen on dev queries carved from train), search the test queries with the
# default (hybrid) first stage and with dense alone, run the BM25 baseline, evaluate all three
# with ir-measures, print the table.
scifact: $(STAMP)
	mkdir -p $(RUNS)
	$(BIN)/dotcat index data/scifact $(INDEX) --overwrite
	$(BIN)/dotcat search $(INDEX) --queries data/scifact --split test --output $(RUNS)/scifact-hybrid.trec -k 100
	$(BIN)/dotcat search $(INDEX) --queries data/scifact --split test --output $(RUNS)/scifact-minilm.trec -k 100 --first-stage dense
	$(BIN)/dotcat bm25 data/scifact --queries data/scifact --split test --output $(RUNS)/scifact-bm25.trec -k 100
	$(BIN)/dotcat eval $(RUNS)/scifact-bm25.trec $(RUNS)/scifact-minilm.trec $(RUNS)/scifact-hybrid.trec data/scifact --split test

# Two processes (pytest-xdist), each given whole test files: a file's tests keep their order and
# module fixtures. The suite on 2 cores: 744 s, against 981 s in one
# (eval/benchmarks/results/ci_time.md).
PARALLEL ?= -n 2 --dist loadfile

# The whole test suite, slow (real-model) tests included.
test: $(STAMP)
	$(BIN)/python -m pytest -q $(PARALLEL) $(PYTEST_ARGS)

# Without the real-model tests, for quick iterations.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q $(PARALLEL) -m "not slow"

# The tests whose result can depend on the CPU: on the kernels FAISS, PyTorch, ONNX Runtime,
# OpenVINO and BLAS pick, or on the precision dotcat's `auto` picks (marked `kernels`: those
# whose run consults dotcat's CPU and precision choice, found by tracing the suite, and that
# compare vectors, scores or rankings; not those that only check messages, pages or files).
# .ci/run runs them again with dotcat's other precision choice (DOTCAT_NATIVE_BF16=on/off).
test-kernels: $(STAMP)
	$(BIN)/python -m pytest -q -m kernels $(PYTEST_ARGS)

# The tests that call each dependency (.ci/floors.py names them; not the real-model ones):
# .ci/run runs them on the oldest versions pyproject.toml admits.
test-floors: $(STAMP)
	$(BIN)/python -m pytest -q $(PARALLEL) -m "not slow" $$(python3 .ci/floors.py --tests) $(PYTEST_ARGS)

# The `kernels` tests as on an AVX2-only AMD Zen 3, from any x86-64 machine: the interpreter
# runs under qemu-x86_64 with a Zen 3's CPUID, so FAISS, PyTorch, ONNX Runtime, OpenVINO and
# BLAS pick their AVX2 kernels (DOTCAT_NATIVE_BF16=off changes dotcat's choice, not theirs).
# About 5-10x slower than native: the tests' wall-clock bounds are scaled by
# DOTCAT_TEST_SLOWDOWN (tests/timing.py); the Ray tests are left out (Ray's native processes
# run outside the emulator), and the real-model ones (minutes each there). Needs qemu-user
# (QEMU >= 10: 7.2 crashed in NumPy's AVX2 sort).
# Only the `kernels` tests of the modules that compute vectors, scores and rankings (models,
# index builds and FAISS's filtered search, the search pipeline, re-ranking, feedback, fusion,
# int8 search, rankings): the workflows built on them (experiments, shards, sync, calibration,
# judging, the filters' search-level cases) compare two runs of the same kernels, and run with
# the other precision choice in `make test-kernels`. 109 of the 203 `kernels` tests; on a
# 2-core Zen 3 host the 203 took 1,458 s under qemu (eval/benchmarks/results/ci_time.md).
# `make test-zen3 ZEN3_TESTS=tests ZEN3_MARK="not ray"` runs the whole suite (~8x slower).
ZEN3_MARK ?= kernels and not ray and not slow
ZEN3_TESTS ?= tests/models tests/index/test_build.py tests/index/test_filtered.py \
	tests/index/test_passages.py tests/search/test_pipeline.py tests/search/test_reranker.py \
	tests/search/test_feedback.py tests/search/test_fusion.py tests/test_cli_int8.py \
	tests/test_rankings.py
test-zen3: $(STAMP)
	bash scripts/zen3-python.sh $(VENV)
	DOTCAT_TEST_SLOWDOWN=10 $(BIN)/python-zen3 -m pytest -q -m "$(ZEN3_MARK)" $(ZEN3_TESTS) $(PYTEST_ARGS)

# ruff, then the import contracts of pyproject.toml (layers, no cycle, the CLI's fast path).
lint: $(STAMP)
	$(BIN)/ruff check src tests eval
	$(BIN)/ruff format --check src tests eval
	$(BIN)/lint-imports

# The API reference, generated from the docstrings (Sphinx autodoc) into build/reference; any
# warning fails it, a docstring's reference to a dotcat name that does not exist included.
reference: $(STAMP)
	rm -rf docs/reference/api build/reference
	$(BIN)/sphinx-build -W -n --keep-going -q -b html docs/reference build/reference

# The wheel as a user installs it: built, installed into a fresh virtualenv outside the
# repository (CPU torch first), then `dotcat index`/`search`, the Python quick start and the
# server run from another directory, offline, on the packaged default model.
check-wheel: $(STAMP)
	BUILD_PYTHON=$(BIN)/python bash scripts/check_wheel.sh

clean:
	rm -rf $(VENV) $(RUNS) $(INDEX)
