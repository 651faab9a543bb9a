# Everyday commands. `make test` is what a plain `python -m pytest -q` runs off CI: the fast
# set (tests not marked slow). `make test-full` runs everything, as CI does (CI=true: every
# test, over 2 pytest-xdist workers; see tests/conftest.py).
PYTHON ?= python

.PHONY: test test-full lint docs

test:
	$(PYTHON) -m pytest -q

test-full:
	CI=true $(PYTHON) -m pytest -q

lint:
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

docs:
	$(PYTHON) -m mkdocs build --strict
