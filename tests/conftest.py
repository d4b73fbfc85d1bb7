"""Shared test set-up: markers are enforced, and system/kernel tests need root."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        marks = {m.name for m in item.iter_markers()} & {"unit", "system", "kernel"}
        if not marks:
            raise pytest.UsageError(f"{item.nodeid}: every test needs one of unit/system/kernel")
        in_kernel_dir = "tests/kernel/" in item.nodeid or item.nodeid.startswith("kernel/")
        if ("kernel" in marks) != in_kernel_dir:
            # scripts/test collects only tests/kernel inside the (slow, emulated) VM.
            raise pytest.UsageError(f"{item.nodeid}: kernel-marked tests live in tests/kernel, "
                                    "and only they do")
        if marks & {"system", "kernel"} and os.geteuid() != 0:
            item.add_marker(pytest.mark.skip(reason="needs root"))
