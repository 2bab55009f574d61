# Every target bootstraps .venv from nothing, so a fresh clone needs only `make test` or `make demo`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) * 3 / 2 )))
SUM    := $(shell cat pyproject.toml | cksum | cut -d' ' -f1)
# One stamp per purpose, so `make demo` installs only what the demo runs (the daemon extra),
# `make test` the test stack, and only `make bench` the peers it measures.
DEMO   := $(VENV)/.demo-$(SUM)
TEST   := $(VENV)/.test-$(SUM)
BENCH  := $(VENV)/.bench-$(SUM)

.PHONY: demo test check bench clean

# uv installs the dependencies in a few seconds where pip takes half a minute; where uv cannot
# be had, or cannot reach an index (it reads no pip.conf), pip does the same install.
INSTALL = install() { $(BIN)/uv pip install -q --python $(BIN)/python "$$@" 2>/dev/null \
	|| $(BIN)/pip install -q "$$@"; }; install
# pip's find-links folders (PIP_FIND_LINKS), for uv: where this kind of machine keeps torch.
TORCH_LINKS := $(foreach links,$(PIP_FIND_LINKS),--find-links $(links))
# Bytecode is written (into .venv and the checkout's ignored __pycache__ folders). Where
# PYTHONDONTWRITEBYTECODE is set, as on our CI machines, no process would write any, so each
# server, daemon and CLI run the tests start compiled every module it imported from source:
# 0.3-0.6 s of CPU per process start, a fifth of the suite's CPU. Unset, each module is
# compiled once, by the first process that imports it.
unexport PYTHONDONTWRITEBYTECODE

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q uv || echo "uv not installable here: pip installs the dependencies"

$(DEMO): $(BIN)/python pyproject.toml
	$(INSTALL) -e '.[daemon]'
	rm -f $(VENV)/.demo-*
	touch $@

$(TEST): $(BIN)/python pyproject.toml
	$(INSTALL) -e '.[dev]'
	@# torch is optional for the codec; its CPU wheel ships on this kind of machine, in pip's
	@# find-links folder, where uv is pointed too (3 s where pip takes 30; uv reads no pip.conf).
	$(if $(TORCH_LINKS),$(BIN)/uv pip install -q --python $(BIN)/python $(TORCH_LINKS) \
	  torch==2.13.0 2>/dev/null ||) $(BIN)/pip install -q torch==2.13.0 2>/dev/null \
	  || echo "torch not installable here: torch codec tests will skip"
	@# The dashboard's browser test drives the system chromium through playwright (dev extra).
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium) || echo "chromium unavailable: browser tests skip"
	rm -f $(VENV)/.test-*
	touch $@

$(BENCH): $(TEST)
	$(INSTALL) -e '.[dev,bench]'
	rm -f $(VENV)/.bench-*
	touch $@

demo: $(DEMO)
	$(BIN)/python examples/demo.py

test: $(TEST)
	@# Three workers per two cores: the real-process tiers spend much of their time waiting on
	@# the servers and daemons they start, so one worker per core leaves about half the CPU
	@# idle (tests share no state: a namespace, a schema or a temporary home each). Not four on
	@# 2 cores: a warm checkout ran pytest in 246 s at four against 292 s at three, but fresh
	@# clones took 304-310 s at four against 291-298 s at three (bytecode is compiled then).
	@# Each worker's HTTP conformance planes keep three servers up: PostgreSQL's connections
	@# peaked at 62-65 of its default 100 with four workers, 81 with five (six ran out).
	@# worksteal: a worker that runs out of tests takes half of a busy one's queue, where the
	@# default handed out fixed shares and one worker ran on alone for the last 38 s.
	$(BIN)/python -m pytest tests -q -n $(TEST_WORKERS) --dist worksteal

check: $(TEST)
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
	@# The import contracts ([tool.importlinter]) over the same tree: the editable install
	@# would show it sdk/ alone. PYTHONPATH puts the tree before the install's finder.
	cd .typecheck && PYTHONPATH=. ../$(BIN)/lint-imports --no-cache ../pyproject.toml

bench: $(BENCH)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build *.egg-info
