"""Thin adapter over the Docker SDK: connecting, with errors a user can act on.

The host engine and every node's inner engine are both reached through here, so a
down engine reads the same everywhere.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

from nestednet.errors import EnvironmentProblem

HOST_SOCKET = "unix:///var/run/docker.sock"


def client_for(url: str, *, timeout: int = 120) -> docker.DockerClient:
    """A client for a hosts file's engine URL (unix://, tcp://, ssh://), not yet asked
    anything. ssh:// goes through the OpenSSH client (its keys, known hosts and agent, as
    the docker CLI's `-H ssh://` does), not paramiko, which NestedNet does not install."""
    return _client(url, timeout=timeout, use_ssh_client=url.startswith("ssh://"))


def _client(url: str, **kwargs: object) -> docker.DockerClient:
    """A client that, on a unix socket, does not look for proxy settings in the
    environment before every request as requests does by default: no proxy reaches a
    unix socket, and the look took 0.2 of the 0.9 ms of CPU a request to the host's
    engine cost here (500 pings, medians of 5). A create makes about 20 requests a
    node."""
    client = docker.DockerClient(base_url=url, **kwargs)
    if url.startswith("unix://"):
        client.api.trust_env = False
    return client


def connect(base_url: str | None = None, *, timeout: int = 120,
            api_version: str | None = None) -> docker.DockerClient:
    """Return a client for the engine at ``base_url`` after checking it answers.

    The host engine is $DOCKER_HOST when set, as for the docker CLI. Without
    ``api_version`` the client first asks the engine for it (``/version``, for which
    dockerd runs `runc --version` and `docker-init --version`).
    """
    base_url = base_url or os.environ.get("DOCKER_HOST") or HOST_SOCKET
    try:
        client = _client(base_url, timeout=timeout, version=api_version or "auto")
        client.ping()
    except docker.errors.DockerException as exc:
        raise EnvironmentProblem(
            f"Docker engine not reachable at {base_url}: {_short(exc)}",
            hint="start it with `scripts/setup` (or `dockerd &`), then check `nestednet doctor`",
        ) from exc
    return client


def engine_version(client: docker.DockerClient) -> str:
    return str(client.version().get("Version", "unknown"))


def image_exists(client: docker.DockerClient, ref: str) -> bool:
    try:
        client.images.get(ref)
    except docker.errors.ImageNotFound:
        return False
    return True


def _short(exc: Exception) -> str:
    text = str(exc)
    if "Permission denied" in text:
        return "permission denied on the socket (run as root)"
    if "Connection refused" in text or "No such file" in text or "FileNotFoundError" in text:
        return "no engine is listening"
    return text.splitlines()[0][:200] if text else type(exc).__name__


def explain(exc: Exception) -> str:
    """The useful part of a Docker API error (the daemon's own explanation)."""
    text = getattr(exc, "explanation", None) or str(exc)
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return " ".join(str(text).split())[:300]


def start_container(client: docker.DockerClient, image: str, *, name: str,
                    labels: dict[str, str], security: dict | None = None,
                    command: list[str] | None = None, entrypoint: list[str] | None = None,
                    environment: dict[str, str] | None = None,
                    binds: dict[str, dict] | None = None, network_mode: str = "none",
                    mem_limit: str | int | None = None, nano_cpus: int | None = None,
                    hostname: str | None = None, tmpfs: dict[str, str] | None = None,
                    network_disabled: bool = False,
                    ) -> docker.models.containers.Container:
    """Create and start a container through the low-level API.

    Low-level because `--security-opt systempaths=unconfined` is a CLI-side option:
    the engine only knows the empty MaskedPaths/ReadonlyPaths it stands for, which
    the SDK's high-level run() cannot express. ``security`` takes cap_add, cap_drop,
    security_opt, devices, privileged and unmask_system_paths.

    ``network_disabled``: the container still gets a network namespace of its own (runc
    makes it, loopback up) but the engine builds no network sandbox for it, so none of
    its per-start helpers run (each a re-exec of the whole dockerd binary).
    """
    security = dict(security or {})
    unmask = security.pop("unmask_system_paths", False)
    host_config = client.api.create_host_config(
        binds=binds, network_mode=network_mode, mem_limit=mem_limit, nano_cpus=nano_cpus,
        tmpfs=tmpfs, **security)
    if unmask:
        host_config["MaskedPaths"] = []
        host_config["ReadonlyPaths"] = []
    created = client.api.create_container(
        image, command=command, name=name, labels=labels, host_config=host_config,
        environment=environment, entrypoint=entrypoint, hostname=hostname, detach=True,
        network_disabled=network_disabled)
    try:
        client.api.start(created["Id"])
    except docker.errors.DockerException:
        client.api.remove_container(created["Id"], v=True, force=True)
        raise
    return client.containers.get(created["Id"])


@dataclass(frozen=True)
class StoredContainer:
    """A container as its engine last wrote it down."""

    id: str
    name: str
    running: bool
    pid: int


def stored_containers(data_root: Path) -> dict[str, StoredContainer]:
    """Name -> container, read from an engine's data root (containers/<id>/config.v2.json,
    which the engine rewrites at every change of a container's state), without asking
    the engine. A parked node's engine is not running: waking 250 of them one after the
    other, only to read their children's ids and pids, took `run` 141 s. Unreadable
    entries are left out; callers ask the engine for what is missing."""
    found: dict[str, StoredContainer] = {}
    try:
        entries = list((data_root / "containers").iterdir())
    except OSError:
        return found
    for entry in entries:
        try:
            config = json.loads((entry / "config.v2.json").read_text())
            state = config["State"]
            stored = StoredContainer(config["ID"], config["Name"].lstrip("/"),
                                     bool(state["Running"]), int(state.get("Pid") or 0))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
        found[stored.name] = stored
    return found
