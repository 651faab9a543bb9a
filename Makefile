# Everyday commands. `make test` is what a plain `python -m pytest -q` runs off CI: the fast
# set (tests not marked slow, over 2 pytest-xdist workers). `make test-full` runs everything, as CI does (CI=true: every
# test, over 2 pytest-xdist workers; see tests/conftest.py). `make check-reference` makes one
# run of the reference study again and compares it with the committed one (about 8 minutes).
PYTHON ?= python

.PHONY: test test-full lint docs check-reference

test:
	$(PYTHON) -m pytest -q

test-full:
	CI=true $(PYTHON) -m pytest -q

lint:
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

docs:
	$(PYTHON) -m mkdocs build --strict

check-reference:
	$(PYTHON) -m scripts.study.reference --only rope-s0 --check
