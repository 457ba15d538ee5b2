# radixgate: `make serve` runs the server on the built-in model, `make test` runs the whole suite.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install serve test bench demo clean

install: $(STAMP)

# torch goes in first, pinned, so that nothing later pulls a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

serve: install
	$(BIN)/radixgate serve $(ARGS)

test: install
	$(BIN)/python -m pytest -q $(ARGS)

bench: install
	$(BIN)/radixgate bench offline $(ARGS)

demo: install
	$(BIN)/radixgate demo $(ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
