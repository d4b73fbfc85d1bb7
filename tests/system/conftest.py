"""Fixtures of the multi-host suite, shared by its files (one pytest run of
`scripts/test multihost` starts the emulated hosts once)."""

from __future__ import annotations

import emulated_hosts
import pytest

from nestednet import images


@pytest.fixture(scope="session")
def emulated():
    """Two hosts emulated here (tests/system/emulated_hosts.py), swarm-joined, with the
    per-host helper prepared on both, plain (`insecure`) and TLS."""
    hosts = emulated_hosts.start(f"nestednet-emu-{images.IMAGE_TAG}")
    try:
        yield hosts
    finally:
        hosts.close()
