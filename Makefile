# Every target bootstraps .venv from nothing, so a fresh clone needs only `make test` or `make demo`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test check lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e '.[dev,bench]'
	@# torch is optional for the codec; its CPU wheel ships on this kind of machine.
	$(BIN)/pip install -q torch==2.13.0 2>/dev/null || echo "torch not installable here: torch codec tests will skip"
	@# The dashboard's browser test drives the system chromium through playwright (dev extra).
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium) || echo "chromium unavailable: browser tests skip"
	rm -f $(VENV)/.installed-*
	touch $@

demo: $(STAMP)
	$(BIN)/python examples/demo.py

test: $(STAMP)
	$(BIN)/python -m pytest tests -q

check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@# mypy cannot follow the folder-to-package mapping, so it checks a tree of links shaped
	@# like the installed package.
	rm -rf .typecheck && mkdir -p .typecheck/dreamlake/lakeshore
	for f in sdk/*; do ln -s "$$PWD/$$f" .typecheck/dreamlake/lakeshore/; done
	for p in server daemon controller providers cli; do \
	  ln -s "$$PWD/$$p" .typecheck/dreamlake/lakeshore/$$p; done
	cd .typecheck && MYPYPATH=. ../$(BIN)/mypy --config-file ../pyproject.toml \
	  --explicit-package-bases -p dreamlake.lakeshore

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build *.egg-info
