# adfunnel: the two quick-start commands are `make replay` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup replay test lint serve simulate bench clean

$(BIN)/adfunnel: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(BIN)/adfunnel

setup: $(BIN)/adfunnel

## The main job: replay the real iPinYou trace through a real server, write replay-report.json.
replay: setup
	$(BIN)/adfunnel replay --report replay-report.json

## The whole test suite, on two worker processes (one test file each at a time). Needs
## PostgreSQL on 127.0.0.1:5432, Redis on 127.0.0.1:6379 and
## NATS with JetStream on 127.0.0.1:4222.
test: setup
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/pytest -n 2 --dist loadfile --no-loadscope-reorder

serve: setup
	$(BIN)/adfunnel serve

simulate: setup
	$(BIN)/adfunnel simulate --scenario baseline --report simulate-report.json --plots plots

bench: setup
	$(BIN)/adfunnel bench index --ads 100000 --workload real --json bench-index.json

clean:
	rm -rf $(VENV) *.egg-info src/*.egg-info .pytest_cache .ruff_cache
