"""Giving every node's inner engine the component image, fast.

`docker load` of the component archive costs seconds per node (PLATFORM.md), and it
writes a private copy of every file, so the page cache holds one copy per node.
Instead the image is loaded once into a template inner data-root. Each node gets a
copy of the engine's own databases (which it rewrites in place), while the image's
layer trees, only ever used as read-only overlay lower dirs, are bind-mounted
read-only from the template into the node's parent. Hard-linking them instead costs a
link per file (5,000 in the component image): 0.22 CPU-s per node, a seventh of a
node's creation. A node's data root names its template (TEMPLATE_MARK), so a template
that a lab on this machine still mounts is never pruned.
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
from nestednet.adapters import docker_engine, files
from nestednet.errors import EnvironmentProblem
from nestednet.lab.record import LABS_DIR

TEMPLATES_DIR = Path("/var/lib/nestednet/templates")
TEMPLATE_MARK = ".nestednet-template"
"""In a node's inner data root: the template whose layers its parent mounts."""
TEMPLATE_LABEL = f"{LABEL_PREFIX}.template"
STATE_MOUNT = "/nestednet"
DATA_MOUNT = "/var/lib/docker"
LOAD_TIMEOUT_S = 900
"""How long the template's engine may take to load the component image: about 5 s here,
but in the software-emulated VM on a busy host (load average 50-70) it outlasted the
client's default 120 s and `create` failed."""


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
    The parent writes that directory: a link planted at ``path`` is not followed."""
    files.restrict_socket(path)


def parent_binds(state_dir: Path, data_dir: Path,
                 template: Path | None = None) -> dict[str, dict]:
    """The parent's state and data binds; with ``template``, each of its image layers
    read-only at its place in the data root (made by `clone`)."""
    binds = {str(state_dir): {"bind": STATE_MOUNT, "mode": "rw"},
             str(data_dir): {"bind": DATA_MOUNT, "mode": "rw"}}
    for layer in _layers(template) if template else ():
        binds[str(layer / "diff")] = {"bind": f"{DATA_MOUNT}/overlay2/{layer.name}/diff",
                                      "mode": "ro"}
    return binds


def _layers(template: Path) -> list[Path]:
    return sorted(d for d in (template / "overlay2").iterdir() if d.name != "l")


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
    files.private_dir(TEMPLATES_DIR)
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
        inner = docker_engine.connect(f"unix://{state}/docker.sock", timeout=LOAD_TIMEOUT_S)
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


def _prune(keep: str, max_age_s: float = 3600.0, labs: Path = LABS_DIR) -> None:
    """Drop templates of older images, but only long-unused ones (a create elsewhere may
    be cloning one right now: several checkouts on one host build different images) that
    no lab's node mounts (their parents' image layers are the template's own files)."""
    now = time.time()
    mounted = set(in_use(labs))
    for old in TEMPLATES_DIR.iterdir():
        if old.name == keep or old.name.startswith(".build-") or old.name in mounted:
            continue
        with contextlib.suppress(OSError):
            if now - old.stat().st_mtime > max_age_s:
                shutil.rmtree(old, ignore_errors=True)


def in_use(labs: Path = LABS_DIR) -> list[str]:
    """Names of the templates that nodes of the labs recorded under ``labs`` mount."""
    found = []
    for mark in labs.glob(f"*/n*/docker/{TEMPLATE_MARK}"):
        with contextlib.suppress(OSError):
            found.append(Path(mark.read_text().strip()).parent.name)
    return found


def clone(template: Path, dest: Path) -> None:
    """Make ``dest`` a data root for a parent started with `parent_binds(..., template)`:
    the engine's databases copied, the layers' short-name links copied, and per layer its
    directory with its small files copied and an empty diff/ to mount the layer on. The
    mark is written first, so a template is kept from the moment a node may mount it."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / TEMPLATE_MARK).write_text(f"{template}\n")
    overlay = template / "overlay2"
    rest = [str(e) for e in template.iterdir() if e.name != "overlay2"]
    # cp keeps owners, modes and xattrs exactly, which shutil.copytree does not.
    done = subprocess.run(["cp", "-a", *rest, str(dest)], capture_output=True, text=True)
    if done.returncode != 0:
        raise EnvironmentProblem(f"copying the image template failed: {done.stderr.strip()}")
    (dest / "overlay2").mkdir(mode=overlay.stat().st_mode & 0o7777)
    (dest / "overlay2" / "l").mkdir(mode=0o700)
    for link in (overlay / "l").iterdir():
        os.symlink(os.readlink(link), dest / "overlay2" / "l" / link.name)
    for layer in _layers(template):
        mine = dest / "overlay2" / layer.name
        mine.mkdir(mode=layer.stat().st_mode & 0o7777)
        for entry in layer.iterdir():
            if entry.name == "diff":
                (mine / "diff").mkdir(mode=entry.stat().st_mode & 0o7777)
            else:
                shutil.copy2(entry, mine / entry.name)
