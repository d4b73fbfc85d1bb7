"""The helper as a Docker Swarm global service: one task on every host of the swarm.

Made by `nestednet hosts prepare --hosts FILE`, removed by `nestednet hosts unprepare`.
A command of its own, not a step of `create`: the helper lives as long as its host's
place in the swarm, not as long as a lab, many labs share it, and starting it is a
swarm administrator's act (its rights make it root-equivalent on every host), which a
user's `create` should not do behind their back; `create` refuses hosts whose helper
does not answer, naming this command.

The service: the helper image (nestednet.images.HOSTD_IMAGE, which each host must
hold, as it holds the parent image), the host's network, NET_ADMIN (netlink),
SYS_ADMIN (setns into the parents' and children's namespaces), SYS_PTRACE (opening
/proc/PID/ns/net of processes with more capabilities than it), the host's /proc
(writable: components' sysctls are written through it) and cgroup tree (read-only)
bind-mounted below /host, and the host's state directory at its own path. Every
host's task listens on that host's address only (`--listen-map`: the address by Swarm
node hostname) on the hosts file's `hostd_port`, with TLS and client
certificates when the file has `ssl` (the host's key, certificate and the clients' CA
are the files under ``<state_dir>/pki`` that its OVSDB uses), else plain TCP. Labelled
ours; its spec's hash is a label too, so preparing again with the same file does
nothing and with a changed one replaces it.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import docker
import docker.errors
import docker.types

from nestednet import LABEL_PREFIX
from nestednet.adapters import docker_engine
from nestednet.errors import EnvironmentProblem, UsageError
from nestednet.hostd.client import HelperClient, wait_answering
from nestednet.model.placement import HostSet

LABEL = f"{LABEL_PREFIX}.hostd"
SPEC_LABEL = f"{LABEL_PREFIX}.hostd.spec"
HOST_PROC = "/host/proc"
HOST_CGROUP = "/host/cgroup"
DEFAULT_STATE_DIR = "/var/lib/nestednet/host"
PKI_FILES = ("pki/host-privkey.pem", "pki/host-cert.pem", "pki/controllerca.pem")
"""Under the state directory on every host: its key, its certificate, and the CA that
signed the clients' (the CLI machines') certificates."""
CAPABILITIES = ["NET_ADMIN", "SYS_ADMIN", "SYS_PTRACE"]


DEFAULT_TLS_PORT = 6650
DEFAULT_PLAIN_PORT = 6651
"""Defaults differ by mode, so a plain and a TLS helper can serve the same hosts (the
test suite addresses its emulated hosts both ways)."""


def port_of(hosts: HostSet) -> int:
    return hosts.hostd_port or (DEFAULT_TLS_PORT if hosts.ssl else DEFAULT_PLAIN_PORT)


def state_dir_of(hosts: HostSet) -> str:
    return hosts.state_dir or DEFAULT_STATE_DIR


def service_name(hosts: HostSet) -> str:
    """One service per port: a plain and a TLS helper can serve the same hosts."""
    return f"nestednet-hostd-{port_of(hosts)}"


def command(hosts: HostSet) -> list[str]:
    state = state_dir_of(hosts)
    listen = ",".join(f"{h.name}={h.address}" for h in hosts.hosts)
    cmd = ["python3", "-m", "nestednet.hostd", "--listen-map", listen,
           "--port", str(port_of(hosts)), "--state-dir", state, "--proc", HOST_PROC,
           "--cgroup", HOST_CGROUP]
    if hosts.ssl is None:
        return [*cmd, "--plain"]
    key, cert, ca = (f"{state}/{f}" for f in PKI_FILES)
    return [*cmd, "--private-key", key, "--certificate", cert, "--ca-cert", ca]


def spec(hosts: HostSet, image: str) -> dict:
    """The service's settings (what the spec label hashes)."""
    state = state_dir_of(hosts)
    return {"image": image, "command": command(hosts), "cap_add": CAPABILITIES,
            # /proc writable: a component's sysctls are written through it (after setns,
            # /proc/sys/net is the entered namespace's; the container's own is read-only).
            "mounts": [["/proc", HOST_PROC, False], ["/sys/fs/cgroup", HOST_CGROUP, True],
                       [state, state, False]]}


def spec_hash(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def find(manager: docker.DockerClient, name: str):
    found = [s for s in manager.services.list(filters={"label": LABEL})
             if s.name == name]
    return found[0] if found else None


def prepare(manager: docker.DockerClient, hosts: HostSet, image: str,
            timeout: float = 120.0) -> dict[str, dict]:
    """Start (or keep, or replace) the helper service and wait until every host's helper
    answers; returns each host's `hello`."""
    settings = spec(hosts, image)
    wanted = spec_hash(settings)
    name = service_name(hosts)
    existing = find(manager, name)
    if existing is not None and existing.attrs["Spec"].get("Labels", {}).get(SPEC_LABEL) \
            != wanted:
        existing.remove()
        existing = None
    if existing is None:
        manager.services.create(
            image, command=settings["command"], name=name,
            labels={LABEL: "helper", SPEC_LABEL: wanted},
            container_labels={LABEL: "helper"},
            mode=docker.types.ServiceMode("global"), networks=["host"],
            env=["NESTEDNET_HOSTD_NODE={{.Node.Hostname}}"],
            cap_add=settings["cap_add"],
            mounts=[docker.types.Mount(target, source, type="bind", read_only=ro)
                    for source, target, ro in settings["mounts"]],
            restart_policy=docker.types.RestartPolicy(condition="any", delay=1_000_000_000))
    hellos = {}
    deadline = time.monotonic() + timeout
    for host in hosts.hosts:
        client = HelperClient(host.name, host.address, port_of(hosts), hosts.ssl)
        try:
            hellos[host.name] = wait_answering(client, max(1.0, deadline - time.monotonic()))
        except EnvironmentProblem as exc:
            raise EnvironmentProblem(f"{exc}; service {name}'s tasks: "
                                     f"{task_errors(manager, name) or 'no error reported'}",
                                     hint=f"each host needs the image {image} (`docker save "
                                          "IMAGE | ssh HOST docker load`)") from None
        finally:
            client.close()
    return hellos


def task_errors(manager: docker.DockerClient, name: str) -> str:
    service = find(manager, name)
    if service is None:
        return ""
    return "; ".join(f"{t.get('Status', {}).get('State')}: {t['Status'].get('Err')}"
                     for t in service.tasks() if t.get("Status", {}).get("Err"))[:600]


def remove(manager: docker.DockerClient, hosts: HostSet | None = None) -> list[str]:
    """The helper service of ``hosts``' port (None: every helper service of ours)."""
    removed = []
    for service in manager.services.list(filters={"label": LABEL}):
        if hosts is None or service.name == service_name(hosts):
            service.remove()
            removed.append(service.name)
    return removed


def swarm_manager(handles: Mapping[str, Any]) -> docker.DockerClient:
    """The engine of a host that manages the swarm (services are created there); each
    handle has an ``engine`` (a Docker client of that host)."""
    for handle in handles.values():
        if handle.engine.info().get("Swarm", {}).get("ControlAvailable"):
            return handle.engine
    raise EnvironmentProblem(f"none of the hosts {', '.join(handles)} is a swarm manager",
                             hint="`docker swarm init` on one of them, `docker swarm join` "
                                  "on the others")


def manager_of(hostset: HostSet) -> docker.DockerClient:
    """The swarm manager's engine among the hosts of a hosts file (each at its `engine`
    URL): where `nestednet hosts prepare|unprepare` create and remove the helper."""
    missing = [h.name for h in hostset.hosts if h.engine is None]
    if missing:
        raise UsageError(f"hosts {', '.join(missing)}: the hosts file gives no `engine` URL")
    return swarm_manager({h.name: SimpleNamespace(engine=docker_engine.client_for(h.engine))
                          for h in hostset.hosts})
