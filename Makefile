# The two commands at the top of the README. Both run scripts/setup first, which
# installs and starts whatever is missing and skips what is already there.
PY := .venv/bin/python
SHELL := /bin/bash

.PHONY: demo test setup lint unit system kernel clean-labs

# DEMO_ARGS: options for `nestednet demo`, e.g. make demo DEMO_ARGS="--speed 10 --keep".
demo: setup
	.venv/bin/nestednet demo $(DEMO_ARGS)

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
