"""`nestednet doctor --hosts FILE`: can every host of a multi-host lab take part?

Per host: its Docker engine answers, is in swarm mode and advertises the address the
hosts file gives (the tunnels' remote), has the node-parent image, and its clock is
close to ours (a step's flows change on all hosts together); its Open vSwitch answers;
its helper (nestednet.hostd, `nestednet hosts prepare`) answers with our protocol.
Seccomp is reported, not required: parents started by Swarm run under the engine's
profile and cope with the default one (docs/multihost.md).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import datetime

from nestednet.capabilities.check import Check
from nestednet.model.placement import Host, HostSet, Tls

MAX_CLOCK_SKEW_S = 0.5
"""Beyond this, a step's changes on two hosts can no longer count as simultaneous."""


def engine_checks(host: Host, info: dict, has_image: bool, image: str,
                  now: float) -> list[Check]:
    """The engine-side checks, from the engine's `docker info` (pure)."""
    name = host.name
    swarm = info.get("Swarm") or {}
    state = swarm.get("LocalNodeState", "inactive")
    checks = [
        Check(f"{name} engine", True, f"Docker {info.get('ServerVersion', '?')} "
              f"({info.get('Name', '?')})", needed_for_create=True),
        Check(f"{name} swarm", state == "active",
              f"swarm {state}" + (f", node {swarm.get('NodeID', '')[:12]}"
                                  if state == "active" else ""),
              "" if state == "active" else "`docker swarm init` on one host, "
              "`docker swarm join` on the others", True),
    ]
    addr = swarm.get("NodeAddr", "")
    if state == "active":
        checks.append(Check(f"{name} address", addr == host.address,
                            f"swarm advertises {addr or '?'}, hosts file says {host.address}",
                            "" if addr == host.address else "make the hosts file's address "
                            "the one the host joined the swarm with (--advertise-addr)", True))
    profiles = [o for o in info.get("SecurityOptions") or [] if o.startswith("name=seccomp")]
    profile = profiles[0].split("profile=")[-1] if profiles else "none"
    checks.append(Check(f"{name} seccomp", True,
                        f"profile {profile}" + ("; parents use runc --no-new-keyring "
                                                "--no-pivot" if profile == "default" else "")))
    checks.append(Check(f"{name} parent image", has_image,
                        f"{image} {'present' if has_image else 'missing'}",
                        "" if has_image else f"`docker save {image} | docker load` on the host",
                        True))
    skew = clock_skew(info.get("SystemTime", ""), now)
    checks.append(Check(f"{name} clock", skew is not None and abs(skew) <= MAX_CLOCK_SKEW_S,
                        "unknown" if skew is None else f"{skew * 1000:+.0f} ms from this machine",
                        "" if skew is not None and abs(skew) <= MAX_CLOCK_SKEW_S
                        else "synchronise the clocks (chrony/NTP)", True))
    return checks


def clock_skew(system_time: str, now: float) -> float | None:
    """The engine's clock minus ours, in seconds, from its RFC 3339 SystemTime."""
    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)",
                         system_time)
    if not match:
        return None
    base, fraction, zone = match.groups()
    stamp = datetime.fromisoformat(base + ("+00:00" if zone == "Z" else zone)).timestamp()
    return stamp + float(f"0.{fraction or 0}") - now


def host_checks(host: Host, image: str, connect: Callable | None = None,
                ovsdb: Callable | None = None, tls: Tls | None = None) -> list[Check]:
    """Every check of one host, over its engine URL and OVSDB remote (an `ssl:` remote
    with ``tls``, the hosts file's `ssl`)."""
    # Lazy: the docker SDK and python-ovs add start-up time to every `doctor`.
    from nestednet.adapters import docker_engine
    from nestednet.adapters.ovsdb import Ovsdb

    checks: list[Check] = []
    if host.engine is None:
        checks.append(Check(f"{host.name} engine", False, "no engine URL in the hosts file",
                            'add "engine": "tcp://HOST:2376" or "ssh://user@HOST"', True))
    else:
        try:
            client = (connect or (lambda url: docker_engine.client_for(url, timeout=10)))(
                host.engine)
            try:
                before = time.time()
                info = client.info()
                now = (before + time.time()) / 2
                has_image = bool(client.images.list(name=image))
            finally:
                client.close()
            checks += engine_checks(host, info, has_image, image, now)
        except Exception as exc:  # any failure to reach it is the finding
            checks.append(Check(f"{host.name} engine", False, f"{host.engine}: {exc}",
                                "start dockerd there and make it reachable from here", True))
    if host.ovsdb is None:
        checks.append(Check(f"{host.name} ovs", False, "no ovsdb remote in the hosts file",
                            'add "ovsdb": "tcp:HOST:6640" (ovsdb-server --remote=ptcp:6640)',
                            True))
    else:
        try:
            with (ovsdb or Ovsdb)(host.ovsdb, tls=tls) as db:
                checks.append(Check(f"{host.name} ovs", True, f"Open vSwitch {db.ovs_version()}",
                                    needed_for_create=True))
        except Exception as exc:
            checks.append(Check(f"{host.name} ovs", False, f"{host.ovsdb}: {exc}",
                                "start Open vSwitch there with a TCP/SSL remote", True))
    return checks


def helper_check(host: Host, hosts: HostSet) -> Check:
    """The host's helper answers `hello` (over TLS with the file's `ssl`) and speaks this
    machine's protocol version: without it `create` cannot wire a node there."""
    # Lazy: the plain `doctor` never needs the helper's client.
    from nestednet.hostd import client as hostd
    from nestednet.hostd import protocol, service

    port = service.port_of(hosts)
    fix = "nestednet hosts prepare --hosts FILE (the helper image on every host)"
    try:
        client = hostd.HelperClient(host.name, host.address, port, hosts.ssl, timeout=10,
                                    insecure=hosts.insecure)
        try:
            hello = client.call("hello")
        finally:
            client.close()
    except Exception as exc:  # any failure to reach it is the finding
        return Check(f"{host.name} helper", False, str(exc), fix, True)
    if hello.get("version") != protocol.VERSION:
        return Check(f"{host.name} helper", False, f"protocol {hello.get('version')}, this "
                     f"machine speaks {protocol.VERSION}", fix, True)
    return Check(f"{host.name} helper", True,
                 f"{'TLS' if hosts.ssl else 'plain TCP'} on port {port}, state directory "
                 f"{hello.get('state_dir')}", needed_for_create=True)
