"""A node parent's start-up, alone: what its `ready` says, the host connecting with the
API version it gives, the children's OCI runtime it was given, and an inner engine that
cannot start reported as such."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

import docker.errors
import pytest

from nestednet import images
from nestednet.adapters import docker_engine
from nestednet.capabilities.nodes import (
    PARENT_CAPSET_OPTIONS,
    PARENT_PRIVILEGED_OPTIONS,
    PROBE_LABEL,
    PROBE_PREFIX,
    parent_security_mode,
)
from nestednet.errors import EnvironmentProblem
from nestednet.lab import engine
from nestednet.lab.node_image import wait_ready

pytestmark = pytest.mark.system


@contextlib.contextmanager
def parent(tmp_path: Path, what: str, binds: dict | None = None,
           environment: dict | None = None):
    """A bare node parent (named and labelled as a probe, so `cleanup` removes one a
    crashed run leaves) with its state directory; removed afterwards."""
    client = docker_engine.connect()
    mode = parent_security_mode(images.DIND_IMAGE)
    state = tmp_path / "state"
    state.mkdir()
    container = docker_engine.start_container(
        client, images.DIND_IMAGE, name=f"{PROBE_PREFIX}{os.getpid()}-{what}",
        labels={PROBE_LABEL: what},
        security=PARENT_PRIVILEGED_OPTIONS if mode == "privileged" else PARENT_CAPSET_OPTIONS,
        binds={str(state): {"bind": "/nestednet", "mode": "rw"}, **(binds or {})},
        environment=environment)
    try:
        yield state, container
    finally:
        with contextlib.suppress(docker.errors.DockerException):
            container.remove(v=True, force=True)


def test_ready_gives_the_versions_and_the_host_connects_with_its_api_version(tmp_path):
    with parent(tmp_path, "ready") as (state, container):
        ready = wait_ready(state, container)
        assert re.fullmatch(r"cgroup=v[12] docker=\S+ api=1\.\d+ ovs=\S+ oci=crun tso=on",
                            ready), ready
        version = engine.api_version(state)
        assert version is not None and f"api={version}" in ready
        with engine.using(state, container) as inner:
            assert inner.api.api_version == version
            # the version the engine itself serves agrees with what the image recorded
            served = inner.version()
            assert served["ApiVersion"] == version
            assert f"docker={served['Version']}" in ready
            assert inner.info()["DefaultRuntime"] == "crun"


def test_the_children_runtime_can_be_runc(tmp_path):
    with parent(tmp_path, "runc", environment={"NESTEDNET_OCI_RUNTIME": "runc"}) as (
            state, container):
        assert " oci=runc " in wait_ready(state, container)
        with engine.using(state, container) as inner:
            assert inner.info()["DefaultRuntime"] == "runc"


def test_a_multi_host_parent_keeps_runc_without_keyring_or_pivot(tmp_path):
    # A Swarm service's /proc/sys is read-only, where crun 1.8 sets a child's sysctls.
    with parent(tmp_path, "swarm", environment={"NESTEDNET_INNER_RUNTIME": "no-keyring",
                                                "NESTEDNET_OCI_RUNTIME": "crun"}) as (
            state, container):
        assert " oci=runc " in wait_ready(state, container)
        with engine.using(state, container) as inner:
            info = inner.info()
        assert info["DefaultRuntime"] == "nestednet-nk"
        assert info["Runtimes"]["nestednet-nk"]["path"] == "/usr/local/bin/runc-no-keyring"


def test_a_runtime_other_than_crun_or_runc_fails_the_parent(tmp_path):
    with (parent(tmp_path, "oci", environment={"NESTEDNET_OCI_RUNTIME": "kata"}) as (
            state, container),
          pytest.raises(EnvironmentProblem, match="NESTEDNET_OCI_RUNTIME=kata: the children's "
                        "runtime is crun or runc")):
        wait_ready(state, container, timeout=60)


def test_an_inner_engine_that_cannot_start_fails_the_parent_with_its_log(tmp_path):
    # dockerd makes its socket, then cannot write its image store and exits.
    store = tmp_path / "image"
    store.mkdir()
    binds = {str(store): {"bind": "/var/lib/docker/image", "mode": "ro"}}
    with parent(tmp_path, "broken", binds) as (state, container):
        with pytest.raises(EnvironmentProblem, match=r"inner dockerd exited: .*read-only"):
            wait_ready(state, container, timeout=120)
        assert not (state / "ready").exists()
