# The README's two commands: each sets up what it needs on a fresh machine, then works.
#
#   make run     creates .venv when missing, installs what the quick tour needs (the `tour`
#                extra: BM25, dense, the embedded Wikipedia sample, analysis) with constraints.txt
#                (only when pyproject.toml or constraints.txt changed since the last install, and
#                not at all when a full install is up to date), then runs the quick tour offline:
#                the main experiment on the embedded Wikipedia sample
#   make test    the same set-up with every extra (`all`), then the README's test command
#                (pytest); .ci/run calls it
#
# Variables: PYTHON (the interpreter that makes .venv, default python3), EXPERIMENT (what
# make run runs), ARGS (passed on to dapr run or pytest: make test ARGS="tests/test_io.py -q"),
# PYTEST_STATUS (a file that make test writes pytest's exit status into, as make itself exits 2
# on any failure; .ci/run reads it to tell "no tests collected" (5) apart).

PYTHON ?= python3
VENV ?= .venv
EXPERIMENT ?= experiments/rank_fusion.yaml
ARGS ?=
PYTEST_STATUS ?=

BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
TOUR := $(VENV)/.installed-tour
ACTIVATE := . $(BIN)/activate

# the quick tour needs only the tour extra, unless the full install is already up to date
FULL_FRESH := $(shell [ $(INSTALLED) -nt pyproject.toml ] && \
	[ $(INSTALLED) -nt constraints.txt ] && echo yes)

.PHONY: run test

run: $(if $(FULL_FRESH),$(INSTALLED),$(TOUR))
	$(ACTIVATE) && dapr run $(EXPERIMENT) $(ARGS)

test: $(INSTALLED)
	@status=0; $(ACTIVATE) && pytest $(ARGS) || status=$$?; \
	if [ -n "$(PYTEST_STATUS)" ]; then echo $$status > "$(PYTEST_STATUS)"; fi; \
	exit $$status

# the virtual environment, made once
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# the installs, each redone when what it was made from is newer than the stamp it leaves
$(INSTALLED): pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/python -m pip install -e ".[all]" -c constraints.txt
	touch $@

$(TOUR): pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/python -m pip install -e ".[tour]" -c constraints.txt
	touch $@
