# The README's commands, the fast test lane and the linters. Each creates .venv and installs headroom into
# it on first use.
PYTHON ?= python3
VENV := .venv
# installed again when the project's description, the compiled part's sources or RUSTFLAGS change. pip builds
# native/ for any x86-64, as the image's wheel is built (infra/image/build-wheels): built for an AVX-512 processor,
# the compiler turns the tree walk's eight interleaved lanes into vector gathers, two on every level's chain of
# dependent loads, and the walk took 2-3x as long (docs/benchmarks.md, Predictor)
STAMP := $(VENV)/.installed-$(shell { echo '$(RUSTFLAGS)'; cat pyproject.toml native/Cargo.toml native/Cargo.lock native/src/*.rs; } | cksum | cut -d' ' -f1)
TYPECHECK_TREE := build/typecheck
HELM ?= $(shell infra/build-tool helm)
CHART_OUT ?= build/chart

.PHONY: demo test test-fast lint chart tools traces

demo: traces $(STAMP)
	$(VENV)/bin/headroom demo

# Before anything is set up: the trace the demo replays must be there (sim/trace_files.py says where).
traces:
	@$(PYTHON) sim/trace_files.py azure

# Test files are shared among TEST_WORKERS pytest processes (pytest-xdist), each with its own broker: much of the
# suite's time is spent waiting on processes (brokers, routers, the demo), so two workers save ~40% even on two cores.
TEST_WORKERS ?= 2
PYTEST := $(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadfile

# Everything: unit and doctests, the real broker, the Kubernetes tools, the end-to-end demo; then the tests marked
# `alone`, with nothing beside them.
test: $(STAMP)
	$(PYTEST) -m "not alone"
	$(VENV)/bin/python -m pytest -m alone

# Minutes: no broker, no Kubernetes tools, no end-to-end processes.
test-fast: $(STAMP)
	$(PYTEST) -m "not kafka and not e2e and not kube"

# ruff over the tree; mypy (strict on the packages pyproject.toml lists) and import-linter (the floors of
# docs/architecture.md) over the modules under their installed names, through a tree of links that both can
# follow (headroom.cli.typecheck_tree; import-linter reads the package from the folder it runs in).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/python -m headroom.cli.typecheck_tree $(TYPECHECK_TREE)
	$(VENV)/bin/mypy
	cd $(TYPECHECK_TREE) && $(CURDIR)/$(VENV)/bin/lint-imports --no-cache --no-logo $(CURDIR)/pyproject.toml

# The Helm chart, linted and rendered with its default values into $(CHART_OUT)/.
chart:
	$(HELM) lint infra/helm/headroom --kube-version 1.30.0
	$(HELM) template headroom infra/helm/headroom --kube-version 1.30.0 --output-dir $(CHART_OUT)

# helm, the test API server and GIE's endpoint picker, built once into ~/.cache/headroom/bin (the tests build them when missing).
tools:
	infra/build-tool helm
	infra/build-tool kube-apiserver
	infra/build-tool epp

$(STAMP): pyproject.toml
	$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is needed")'
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	@echo "installing headroom into $(VENV), building its compiled parts (pip's output: $(VENV)/install.log)"
	@$(VENV)/bin/python -m pip install --upgrade pip > $(VENV)/install.log 2>&1 \
		&& $(VENV)/bin/python -m pip install -e ".[dev]" \
			>> $(VENV)/install.log 2>&1 \
		|| { cat $(VENV)/install.log; echo "installing headroom failed: see above"; exit 1; }
	rm -f $(VENV)/.installed-*
	touch $@
