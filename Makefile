# radixgate: `make serve` runs the server on the built-in model, `make test` runs the whole suite.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
WHEELHOUSE := .wheelhouse

.PHONY: install browser redis serve lint mypy mypy-tree mypy-check test test-fast bench demo clean

install: $(STAMP) $(WHEELHOUSE)/.built

# The wheels the pre-commit hook's virtualenv installs (base dependencies and setuptools, not radixgate
# itself), so that its test builds the hook with the package index off (PIP_NO_INDEX=1).
$(WHEELHOUSE)/.built: pyproject.toml | $(STAMP)
	rm -rf $(WHEELHOUSE)
	$(BIN)/python -m pip wheel -q -w $(WHEELHOUSE) . 'setuptools>=77'
	rm -f $(WHEELHOUSE)/radixgate-*.whl
	touch $@

# torch goes in first, pinned, so that nothing later pulls a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

# Debian's Chromium for the dashboard's headless-browser test. Without it the test skips locally and
# fails on CI=true, naming this target; a failed install fails here on CI.
browser:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq chromium >/dev/null) || { echo "make browser: chromium could not be installed"; \
		test "$$CI" != true; }

# Debian's redis-server for HiCache's remote-tier tests (CI runs as root; on CI=true those tests fail without it).
redis:
	@command -v redis-server >/dev/null 2>&1 || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq redis-server >/dev/null) || { echo "make redis: redis-server could not be installed"; \
		test "$$CI" != true; }

serve: install
	$(BIN)/radixgate serve $(ARGS)

# ruff (lint and format) over the tree, mypy over the engine, the gateway, the linter and the SDK (config in pyproject.toml).
lint: install mypy
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# mypy reads the installed layout (sdk/ is `radixgate`, engine/ is `radixgate.engine`): a tree of links.
MYPY_TREE := build/mypy
mypy: install mypy-tree mypy-check

mypy-tree:
	rm -rf $(MYPY_TREE) && mkdir -p $(MYPY_TREE)/radixgate
	cp -rs "$(CURDIR)/sdk/." $(MYPY_TREE)/radixgate/
	for d in engine gateway linter bench; do ln -s "$(CURDIR)/$$d" $(MYPY_TREE)/radixgate/$$d; done

mypy-check:
	$(BIN)/mypy

# The whole suite: tests/e2e and tests/gateway in a shuffled order (pytest-randomly; the seed is printed
# and `make test SEED=N` replays it), then the rest in file order. `make test ARGS=...` runs only ARGS.
SHUFFLED := tests/e2e tests/gateway
ifndef SEED
SEED := $(shell $(PY) -c 'import random; print(random.randrange(10**6))')
endif
test: install browser redis
ifeq ($(strip $(ARGS)),)
	@echo "make test: $(SHUFFLED) shuffled with -p randomly --randomly-seed=$(SEED) (replay: make test SEED=$(SEED))"
	@status=0; \
	$(BIN)/python -m pytest -q -p randomly --randomly-seed=$(SEED) $(SHUFFLED) || status=$$?; \
	$(BIN)/python -m pytest -q $(foreach d,$(SHUFFLED),--ignore=$(d)) || status=$$?; \
	exit $$status
else
	$(BIN)/python -m pytest -q $(ARGS)
endif

# Everything but the `slow` tests (real servers, benchmark commands, compile check, pre-commit).
test-fast: install redis
	$(BIN)/python -m pytest -q -m "not slow" $(ARGS)

bench: install
	$(BIN)/radixgate bench offline $(ARGS)

demo: install
	$(BIN)/radixgate demo $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info $(WHEELHOUSE)
