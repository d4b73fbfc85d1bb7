# The two commands at the top of the README. Both run scripts/setup first, which
# installs and starts whatever is missing and skips what is already there.
PY := .venv/bin/python
SHELL := /bin/bash

.PHONY: demo test setup lint unit system kernel clean-labs

demo: setup
	.venv/bin/nestednet demo

test: setup
	scripts/test

setup:
	scripts/setup

lint:
	.venv/bin/ruff check .

unit:
	$(PY) -m pytest -m unit -q

clean-labs:
	.venv/bin/nestednet cleanup
