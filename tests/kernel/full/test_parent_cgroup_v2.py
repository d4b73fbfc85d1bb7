"""The node parent's cgroup v2 recipe, both ways a parent can be started.

A stock host where `--privileged` works starts parents privileged (the lab tests cover
that path end to end); a hardened one gets the explicit capability set, where Docker
mounts /sys/fs/cgroup read-only and the entrypoint must remount it. Either way the
inner engine must start a child with a memory limit, inside the parent's own cgroup (so
the parent's limits and accounting cover its children). Needs a Docker engine on a
cgroup v2 host: `scripts/test kernel-full` runs it in the full-kernel VM.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import tarfile
import time
from pathlib import Path

import docker.errors
import pytest
from recording import record

from nestednet import images
from nestednet.adapters import docker_engine
from nestednet.capabilities.nodes import (
    PARENT_CAPSET_OPTIONS,
    PARENT_PRIVILEGED_OPTIONS,
    PROBE_LABEL,
    PROBE_PREFIX,
    cgroup_version,
)
from nestednet.errors import EnvironmentProblem
from nestednet.lab.node_image import wait_ready

pytestmark = pytest.mark.kernel

MODES = {"privileged": PARENT_PRIVILEGED_OPTIONS, "capset": PARENT_CAPSET_OPTIONS}
CHILD_MEMORY = 64 * 1024 * 1024


def _busybox_image() -> bytes:
    """A one-file image (a static busybox): no registry, nothing to load but 2 MB."""
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        tar.add(Path("/bin/busybox").resolve(), arcname="busybox")
    return data.getvalue()


@pytest.mark.parametrize("mode", MODES)
def test_parent_starts_a_limited_child_in_its_own_cgroup(mode: str, tmp_path: Path):
    try:
        docker_engine.connect(timeout=5).close()
    except EnvironmentProblem:
        pytest.skip("needs a Docker engine: `scripts/test kernel-full`")
    client = docker_engine.connect()
    if cgroup_version() != "v2":
        pytest.skip("the cgroup v2 recipe: needs a cgroup v2 host (the full-kernel VM)")
    if not Path("/bin/busybox").exists():
        pytest.skip("needs a static /bin/busybox for the child (scripts/setup installs it)")
    if "/dev/net/tun:/dev/net/tun:rwm" in MODES[mode].get("devices", []):
        # The capability set passes /dev/net/tun; stock hosts have it, the VM loads it.
        subprocess.run(["modprobe", "tun"], check=False)
    name = f"{PROBE_PREFIX}{os.getpid()}-{mode}"
    state = tmp_path / "state"
    state.mkdir()
    started = time.monotonic()
    try:
        parent = docker_engine.start_container(
            client, images.DIND_IMAGE, name=name, labels={PROBE_LABEL: "cgroup-v2"},
            security=MODES[mode], binds={str(state): {"bind": "/nestednet", "mode": "rw"}})
    except docker.errors.APIError as exc:
        if mode == "privileged":
            pytest.skip(f"this engine refuses --privileged: {docker_engine.explain(exc)}")
        raise
    try:
        ready = wait_ready(state, parent)
        assert "cgroup=v2" in ready, ready
        inner = docker_engine.connect(f"unix://{state}/docker.sock")
        inner.api.import_image_from_data(_busybox_image(), repository="nestednet-probe-busybox",
                                         tag="1")
        child = inner.containers.run("nestednet-probe-busybox:1", ["/busybox", "sleep", "60"],
                                     detach=True, network_mode="none", mem_limit=CHILD_MEMORY)
        limit = parent.exec_run(["cat", f"/sys/fs/cgroup/nestednet/{child.id}/memory.max"])
        assert limit.exit_code == 0, limit.output
        assert int(limit.output) == CHILD_MEMORY
        # Seen from this (the outer) side: the child's cgroup sits below the parent's.
        below = list(Path("/sys/fs/cgroup").glob(f"**/*{parent.id}*/nestednet/{child.id}"))
        assert below, f"child {child.id[:12]} not below parent {parent.id[:12]}'s cgroup"
        record("parent_cgroup_v2", mode=mode, ready=ready,
               seconds=round(time.monotonic() - started, 1))
        child.remove(force=True)
    finally:
        with contextlib.suppress(docker.errors.DockerException):
            parent.remove(v=True, force=True)
