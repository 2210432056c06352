# Transformer Attention Lab — the two commands are `make run` and `make test`.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PORT ?= 8501

.PHONY: run test install browser bench train eval import-bergamot clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

## make run: set up, make sure the checkpoints are there, start the app on http://localhost:$(PORT)
run: $(STAMP)
	-$(BIN)/python -m core import-bergamot --if-missing
	$(BIN)/streamlit run viz_app/app.py --server.port $(PORT)

## make test: set up (venv, pinned deps, Chromium for the browser test), run every test
test: $(STAMP) browser
	$(BIN)/python -m pytest -q

browser:
	@bash scripts/setup_browser.sh

bench: $(STAMP)
	$(BIN)/pip install --quiet -c constraints.txt -e '.[test,bench]'
	$(BIN)/python benchmarks/run.py

train: $(STAMP)
	$(BIN)/python -m core train --out checkpoints/ding-en-de

eval: $(STAMP)
	$(BIN)/python -m core eval --checkpoint checkpoints/ding-en-de

import-bergamot: $(STAMP)
	$(BIN)/python -m core import-bergamot

clean:
	rm -rf $(VENV) .pytest_cache test-artifacts
