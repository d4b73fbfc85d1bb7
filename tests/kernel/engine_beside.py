"""The guard of the whole-lab kernel tests (tests/kernel/full): they need a Docker engine
beside the kernel features, which `scripts/test kernel-full` gives them in the VM."""

from __future__ import annotations

import pytest

from nestednet.adapters import docker_engine
from nestednet.capabilities.nodes import ovs_datapath
from nestednet.capabilities.shaping import available_qdiscs
from nestednet.errors import EnvironmentProblem


def engine_or_skip() -> None:
    try:
        docker_engine.connect(timeout=5).close()
    except EnvironmentProblem:
        pytest.skip("needs a Docker engine beside the kernel features: `scripts/test kernel-full`")
    if ovs_datapath() != "system" or not available_qdiscs()["netem"]:
        pytest.skip("needs the openvswitch module and sch_netem (the full-kernel VM has them)")
