# The two commands of the README. Each creates .venv and installs headroom into it on first use.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed-$(shell cksum < pyproject.toml | cut -d' ' -f1)

.PHONY: demo test

demo: $(STAMP)
	$(VENV)/bin/headroom demo

test: $(STAMP)
	$(VENV)/bin/python -m pytest

$(STAMP): pyproject.toml
	$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is needed")'
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(VENV)/bin/python -m pip install -q -e ".[dev]"
	rm -f $(VENV)/.installed-*
	touch $@
