"""Giving every node's inner engine the component image, fast.

`docker load` of the component archive costs seconds per node (PLATFORM.md), and it
writes a private copy of every file, so the page cache holds one copy per node.
Instead the image is loaded once into a template inner data-root, and each node
gets a copy of that template whose image layers are hard links: the layer trees
are only ever used as read-only overlay lower dirs, while the engine's own
databases (which it rewrites in place) are real copies.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import docker
import docker.errors

from nestednet import LABEL_PREFIX, images
from nestednet.adapters import docker_engine
from nestednet.errors import EnvironmentProblem

TEMPLATES_DIR = Path("/var/lib/nestednet/templates")
TEMPLATE_LABEL = f"{LABEL_PREFIX}.template"
STATE_MOUNT = "/nestednet"
DATA_MOUNT = "/var/lib/docker"


def wait_ready(state_dir: Path, container: docker.models.containers.Container,
               timeout: float = 300.0) -> str:
    """Wait for the parent's entrypoint to publish `ready` (or `failed`); then make the
    inner engine's socket root's alone (see root_only).

    Generous: a failed start-up or an exited parent is reported at once, and the
    entrypoint itself gives its dockerd 240 s (the emulated VM on a busy machine needs
    minutes)."""
    deadline = time.monotonic() + timeout
    ready, failed = state_dir / "ready", state_dir / "failed"
    delay = 0.02
    while time.monotonic() < deadline:
        if ready.exists():
            root_only(state_dir / "docker.sock")
            return ready.read_text().strip()
        if failed.exists():
            raise EnvironmentProblem(f"node parent {container.name} failed to start: "
                                     f"{failed.read_text().strip()}")
        time.sleep(delay)
        delay = min(delay * 1.5, 0.2)
        if delay >= 0.2:
            container.reload()
            if container.status not in ("created", "running"):
                logs = container.logs(tail=5).decode(errors="replace").strip()
                raise EnvironmentProblem(f"node parent {container.name} exited: {logs}")
    raise EnvironmentProblem(f"node parent {container.name} not ready after {timeout:.0f} s")


def root_only(path: Path) -> None:
    """``path`` as root:root 0600. The inner dockerd makes its socket root:docker 0660,
    and the image's docker group id (102) is another group on the host (messagebus):
    its members would drive an engine inside a parent that holds nearly every capability.
    """
    os.chown(path, 0, 0)
    os.chmod(path, 0o600)


def private_dir(path: Path) -> Path:
    """Make ``path`` (and missing parents) and keep it root's alone (0700): lab records,
    node state and image templates hold engine and OVSDB sockets."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path, 0o700)
    return path


def parent_binds(state_dir: Path, data_dir: Path) -> dict[str, dict]:
    return {str(state_dir): {"bind": STATE_MOUNT, "mode": "rw"},
            str(data_dir): {"bind": DATA_MOUNT, "mode": "rw"}}


def template_for(client: docker.DockerClient, security: dict) -> Path:
    """The inner data-root holding the current component image (made once per image id)."""
    image = images.require(client, images.COMPONENT_IMAGE)
    key = image.id.split(":")[1][:16]
    final = TEMPLATES_DIR / key
    if (final / "docker").is_dir():
        with contextlib.suppress(OSError):
            os.utime(final)  # marks it in use for _prune
        return final / "docker"
    images.require(client, images.DIND_IMAGE)
    archive = images.component_archive(client)
    private_dir(TEMPLATES_DIR)
    work = TEMPLATES_DIR / f".build-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    state, data = work / "state", work / "docker"
    state.mkdir(parents=True)
    data.mkdir()
    name = f"nestednet-template-{work.name[7:]}"
    try:
        container = docker_engine.start_container(
            client, images.DIND_IMAGE, name=name, labels={TEMPLATE_LABEL: key},
            security=security, binds=parent_binds(state, data))
        wait_ready(state, container)
        inner = docker_engine.connect(f"unix://{state}/docker.sock")
        with open(archive, "rb") as tar:
            inner.images.load(tar.read())
        inner.close()
        container.stop(timeout=30)
        container.remove(v=True, force=True)
        shutil.rmtree(state, ignore_errors=True)
        with contextlib.suppress(OSError):  # another create made it meanwhile: use theirs
            work.rename(final)
    except docker.errors.DockerException as exc:
        raise EnvironmentProblem(f"could not prepare the component image for nodes: "
                                 f"{docker_engine.explain(exc)}") from exc
    finally:
        with contextlib.suppress(docker.errors.DockerException):
            client.containers.get(name).remove(v=True, force=True)
        shutil.rmtree(work, ignore_errors=True)
    _prune(keep=key)
    return final / "docker"


def _prune(keep: str, max_age_s: float = 3600.0) -> None:
    """Drop templates of older images, but only long-unused ones: a create elsewhere may
    be cloning one right now (several checkouts on one host build different images)."""
    now = time.time()
    for old in TEMPLATES_DIR.iterdir():
        if old.name == keep or old.name.startswith(".build-"):
            continue
        with contextlib.suppress(OSError):
            if now - old.stat().st_mtime > max_age_s:
                shutil.rmtree(old, ignore_errors=True)


def clone(template: Path, dest: Path) -> None:
    """Copy ``template`` to ``dest``: image layer trees hard-linked, the rest copied."""
    dest.mkdir(parents=True, exist_ok=True)
    rest = [str(e) for e in template.iterdir() if e.name != "overlay2"]
    # cp keeps owners, modes, xattrs and special files (overlay whiteouts) exactly, which
    # shutil.copytree does not; two processes per node in all.
    for command in (["cp", "-al", str(template / "overlay2"), str(dest)],
                    ["cp", "-a", *rest, str(dest)]):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise EnvironmentProblem(f"copying the image template failed: {done.stderr.strip()}")
