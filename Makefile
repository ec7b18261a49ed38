# The two commands of the README: `make demo` and `make test`. Both set everything up.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-dev

.PHONY: demo test lint typecheck unit bench clean setup

$(STAMP): pyproject.toml setup.py sparklog/_columns.c scripts/setup.sh scripts/jars.py $(wildcard jvm/*/pom.xml)
	PYTHON=$(PYTHON) VENV=$(VENV) bash scripts/setup.sh
	touch $@

setup: $(STAMP)

demo: $(STAMP)
	./spark-submit.sh demo

lint: $(STAMP)
	$(VENV)/bin/ruff check sparklog sparklog_testkit tests bench jobs
	$(VENV)/bin/ruff format --check sparklog sparklog_testkit tests bench jobs

typecheck: $(STAMP)
	$(VENV)/bin/mypy sparklog sparklog_testkit

unit: $(STAMP)
	PYSPARK_PYTHON=$(abspath $(PY)) SPARK_LOCAL_IP=127.0.0.1 $(PY) -m pytest

test: lint typecheck unit

bench: $(STAMP)
	PYSPARK_PYTHON=$(abspath $(PY)) SPARK_LOCAL_IP=127.0.0.1 $(PY) bench/storage.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache demo-data
