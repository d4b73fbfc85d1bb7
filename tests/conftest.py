"""Shared test set-up: markers are enforced, and system/kernel tests need root."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

_TEST_RUNS: Path | None = None


def pytest_configure(config: pytest.Config) -> None:
    """The run records this session's tests make (`nestednet run`, the demo, the API) go
    to a directory of its own, removed at the end: /var/lib/nestednet/runs keeps a user's
    records, and tests added some 20 there per `make test`. Set before any test module
    imports nestednet (RUNS_DIR is read at import), and inherited by the CLIs the tests
    start. Root only: nothing else writes run records."""
    global _TEST_RUNS
    if os.geteuid() != 0 or "NESTEDNET_RUNS_DIR" in os.environ:
        return
    from nestednet.adapters.files import STATE_ROOT, private_dir  # not runs: read at import

    _TEST_RUNS = Path(tempfile.mkdtemp(prefix=f"test-runs-{os.getpid()}-",
                                       dir=private_dir(STATE_ROOT)))
    os.environ["NESTEDNET_RUNS_DIR"] = str(_TEST_RUNS / "runs")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _TEST_RUNS is not None:
        shutil.rmtree(_TEST_RUNS, ignore_errors=True)
        os.environ.pop("NESTEDNET_RUNS_DIR", None)


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
