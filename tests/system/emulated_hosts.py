"""Hosts emulated on this machine for multi-host tests: each a container with its own
Docker engine (in swarm mode) and Open vSwitch, on an internal Docker network that plays
the underlay. The machine's own engine is never put into swarm mode.

Each emulated host runs from the node-parent image (its entrypoint starts dockerd and a
userspace OVS and publishes their sockets in a state directory bind-mounted from here),
with the capability set node parents get on one host (nestednet.capabilities.nodes).

Each is then prepared as a real host would be (docs/multihost.md "Preparing a host"):
a key and certificate from a test PKI (ovs-pki) in its SSL table, OVSDB listening on its
underlay address, plain (`ptcp:6640`) and SSL (`pssl:6641`), and the helper image loaded
beside the parent image; then `nestednet hosts prepare`'s service starts the per-host
helper on both, plain and TLS (`prepare_helpers`). `control` says how this machine
reaches them; `hostset` and `ssl_hostset` are the hosts files a user would write. Labs
reach these hosts only over the network, as real ones: `local` (their namespaces, pids
and state directories here) is for the tests' own independent checks.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

import docker
import docker.errors

from nestednet import images
from nestednet.adapters import docker_engine, netlink
from nestednet.capabilities.nodes import PARENT_CAPSET_OPTIONS
from nestednet.hostd import service
from nestednet.lab import multihost as mh
from nestednet.lab.multihost import HostHandle
from nestednet.model import placement as pl
from nestednet.model.placement import Host, HostSet, Tls

LABEL = "org.nestednet.emulated-host"
SUBNET = "10.231.0.0/24"
OVSDB_TCP = 6640
OVSDB_SSL = 6641
OVS_ENV = "OVS_RUNDIR=/nestednet/ovs OVS_LOGDIR=/nestednet/log OVS_DBDIR=/etc/openvswitch"
PREPARE = """set -e
export {env}
ovs-vsctl --no-wait set-ssl /nestednet/pki/host-privkey.pem /nestednet/pki/host-cert.pem \
    /nestednet/pki/controllerca.pem
# ovsdb-server as ovs-ctl starts it on a real host: remotes and SSL files from the db.
ovs-appctl -t ovsdb-server exit
while [ -e /nestednet/ovs/ovsdb-server.pid ]; do sleep 0.05; done
ovsdb-server /etc/openvswitch/conf.db --remote=punix:/nestednet/ovs/db.sock \
    --remote=db:Open_vSwitch,Open_vSwitch,manager_options \
    --private-key=db:Open_vSwitch,SSL,private_key \
    --certificate=db:Open_vSwitch,SSL,certificate --ca-cert=db:Open_vSwitch,SSL,ca_cert \
    --pidfile --detach --log-file
ovs-vsctl --no-wait set-manager ptcp:{tcp}:{address} pssl:{ssl}:{address}
"""
"""Run on each emulated host: what `docs/multihost.md` tells a real host's admin to do."""


@dataclass
class Control:
    """How this machine reaches the hosts' control listeners."""

    tls: Tls
    """This machine's key and certificate (ovs-pki `controller`), and the CA that signed
    the hosts' certificates (`switchca`)."""
    pki: Path

    def ovsdb(self, address: str, secure: bool) -> str:
        return f"ssl:{address}:{OVSDB_SSL}" if secure else f"tcp:{address}:{OVSDB_TCP}"


@dataclass
class Local:
    """An emulated host as this machine sees it: for the tests' own checks only."""

    netns: str
    pid: int
    """Its container's init, in this machine's pid namespace."""
    state: Path
    """Its state directory (/nestednet there)."""


CLI = str(Path(sys.executable).parent / "nestednet")
STATE_DIR = "/nestednet"
"""The emulated hosts' state directory (hosts file `state_dir`)."""


@dataclass
class EmulatedHosts:
    prefix: str
    root: Path
    client: docker.DockerClient
    names: list[str]
    handles: dict[str, HostHandle]
    """Handles as a lab opens them (`multihost.connect`, over the network and the
    plain helper)."""
    hostset: HostSet
    """The hosts file with plain TCP (`insecure`): engines, OVSDB on tcp:, the plain
    helper."""
    ssl_hostset: HostSet
    """The same with `ssl`: OVSDB on ssl:, the TLS helper."""
    manager: docker.DockerClient
    timings: dict[str, float]
    control: Control
    local: dict[str, Local]

    def pid_here(self, host: str, pid_there: int) -> int:
        """A pid of ``host``'s pid namespace as this machine numbers it."""
        return netlink.host_pids(self.local[host].pid, [pid_there])[pid_there]

    def close(self) -> None:
        """`nestednet hosts unprepare --all` (the user's command), then the hosts go; a
        helper service left behind by the command fails the close, after the removal."""
        mh.close_all(self.handles.values())
        done = subprocess.run([CLI, "hosts", "unprepare", "--all", "--hosts",
                               str(self.root / "hosts.json")], capture_output=True, text=True)
        left = []
        with contextlib.suppress(Exception):
            left = [s.name for s in self.manager.services.list(
                filters={"label": service.LABEL})]
            service.remove(self.manager)
        remove(self.client, self.prefix, self.root)
        if done.returncode != 0 or left:
            raise RuntimeError(f"hosts unprepare left {left}: {done.stdout} {done.stderr}")


def remove(client: docker.DockerClient, prefix: str, root: Path) -> None:
    for c in client.containers.list(all=True, filters={"label": f"{LABEL}={prefix}"}):
        c.remove(v=True, force=True)
    for n in client.networks.list(filters={"label": f"{LABEL}={prefix}"}):
        n.remove()
    shutil.rmtree(root, ignore_errors=True)


def start(prefix: str, count: int = 2, root: Path | None = None,
          subnet: str = SUBNET) -> EmulatedHosts:
    """``count`` hosts `<prefix>-h0`..., swarm-joined (h0 the manager), each holding the
    node-parent image; nothing of them is left if this fails. ``subnet`` (a /24) lets
    a second set run beside the test suite's."""
    client = docker_engine.connect()
    root = root or Path(f"/var/tmp/nestednet-emulated/{prefix}")
    try:
        return _start(client, prefix, count, root, subnet)
    except BaseException:
        remove(client, prefix, root)
        raise


def _start(client: docker.DockerClient, prefix: str, count: int, root: Path,
           subnet: str = SUBNET) -> EmulatedHosts:
    remove(client, prefix, root)
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    net = client.networks.create(f"{prefix}-underlay", driver="bridge", internal=True,
                                 labels={LABEL: prefix},
                                 ipam=docker.types.IPAMConfig(pool_configs=[
                                     docker.types.IPAMPool(subnet=subnet)]))
    names = [f"{prefix}-h{i}" for i in range(count)]
    base = subnet.rsplit(".", 1)[0]
    addresses = [f"{base}.{11 + i}" for i in range(count)]
    for name, address in zip(names, addresses, strict=True):
        state = root / name
        state.mkdir(parents=True)
        host_config = client.api.create_host_config(
            binds={str(state): {"bind": "/nestednet", "mode": "rw"}},
            network_mode=net.name, cap_add=PARENT_CAPSET_OPTIONS["cap_add"],
            cap_drop=PARENT_CAPSET_OPTIONS["cap_drop"],
            security_opt=PARENT_CAPSET_OPTIONS["security_opt"],
            devices=PARENT_CAPSET_OPTIONS["devices"])
        host_config["MaskedPaths"] = []
        host_config["ReadonlyPaths"] = []
        created = client.api.create_container(
            images.DIND_IMAGE, name=name, hostname=name, labels={LABEL: prefix},
            # Its node parents start through runc, as a real host's engine starts them.
            environment={"NESTEDNET_OCI_RUNTIME": "runc"},
            host_config=host_config, networking_config=client.api.create_networking_config(
                {net.name: client.api.create_endpoint_config(ipv4_address=address)}))
        client.api.start(created["Id"])
    for name in names:
        _wait_ready(root / name)
    timings["hosts_up_s"] = time.monotonic() - t0
    engines = {n: docker.DockerClient(base_url=f"unix://{root / n}/docker.sock", timeout=300)
               for n in names}
    t0 = time.monotonic()
    manager = engines[names[0]]
    manager.swarm.init(advertise_addr=addresses[0], listen_addr=f"{addresses[0]}:2377")
    token = manager.swarm.attrs["JoinTokens"]["Worker"]
    for name in names[1:]:
        engines[name].swarm.join(remote_addrs=[f"{addresses[0]}:2377"], join_token=token,
                                 advertise_addr=addresses[names.index(name)],
                                 listen_addr=f"{addresses[names.index(name)]}:2377")
    timings["swarm_s"] = time.monotonic() - t0
    t0 = time.monotonic()
    # One archive of both images: the helper's shares every layer of the parent's.
    archive = root / "images.tar"
    subprocess.run(["docker", "save", "-o", str(archive), images.DIND_IMAGE,
                    images.HOSTD_IMAGE], check=True, capture_output=True)
    try:
        for name in names:
            with open(archive, "rb") as tar:
                engines[name].images.load(tar)
    finally:
        archive.unlink(missing_ok=True)
    timings["image_load_s"] = time.monotonic() - t0
    t0 = time.monotonic()
    control = prepare_control(client, root, dict(zip(names, addresses, strict=True)))
    timings["control_s"] = time.monotonic() - t0
    for engine in engines.values():
        engine.close()
    local = {}
    for name in names:
        pid = int(client.containers.get(name).attrs["State"]["Pid"])
        local[name] = Local(f"/proc/{pid}/ns/net", pid, root / name)
    hostset = HostSet(tuple(Host(n, a, engine=f"unix://{root / n}/docker.sock",
                                 ovsdb=control.ovsdb(a, secure=False), emulated=n)
                            for n, a in zip(names, addresses, strict=True)),
                      state_dir=STATE_DIR, insecure=True)
    ssl_hostset = replace(hostset, ssl=control.tls, insecure=False, hosts=tuple(
        replace(h, ovsdb=control.ovsdb(h.address, secure=True)) for h in hostset.hosts))
    t0 = time.monotonic()
    manager = service.swarm_manager({n: SimpleNamespace(engine=docker.DockerClient(
        base_url=h.engine, timeout=300)) for n, h in zip(names, hostset.hosts, strict=True)})
    for each, file in ((hostset, "hosts.json"), (ssl_hostset, "hosts-ssl.json")):
        # The user's command, as on real hosts.
        (root / file).write_text(json.dumps(pl.hosts_doc(each)))
        done = subprocess.run([CLI, "hosts", "prepare", "--hosts", str(root / file)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"hosts prepare ({file}): {done.stderr}")
    timings["helpers_s"] = time.monotonic() - t0
    handles = mh.connect_all(hostset, names)
    return EmulatedHosts(prefix, root, client, names, handles, hostset, ssl_hostset, manager,
                         timings, control, local)


def prepare_control(client: docker.DockerClient, root: Path,
                    addresses: dict[str, str]) -> Control:
    """A test PKI (ovs-pki: a switch CA for the hosts, a controller CA for this machine),
    each host's key and certificate in its SSL table, its OVSDB listening on its address
    (plain and SSL). The main bridges' OpenFlow listeners are not set up here: each lab
    gives its bridge one (nestednet.lab.multihost)."""
    pki, work = root / "pki", root / "pki-work"
    work.mkdir(exist_ok=True)

    def ovs_pki(*args: str) -> None:
        # Relative names in ``work``: a certificate's CN is the name (64 characters).
        subprocess.run(["ovs-pki", f"--dir={pki}", f"--log={root / 'pki.log'}", "--force",
                        *args], check=True, capture_output=True, cwd=work)

    ovs_pki("init")
    ovs_pki("-b", "req+sign", "cli", "controller")
    for name, address in addresses.items():
        ovs_pki("-b", "req+sign", name, "switch")
        there = root / name / "pki"
        there.mkdir(exist_ok=True)
        shutil.copy(work / f"{name}-privkey.pem", there / "host-privkey.pem")
        shutil.copy(work / f"{name}-cert.pem", there / "host-cert.pem")
        shutil.copy(pki / "controllerca" / "cacert.pem", there / "controllerca.pem")
        done = client.containers.get(name).exec_run(
            ["sh", "-c", PREPARE.format(env=OVS_ENV, tcp=OVSDB_TCP, ssl=OVSDB_SSL,
                                        address=address)])
        if done.exit_code != 0:
            raise RuntimeError(f"preparing {name}'s control listeners: {done.output.decode()}")
    return Control(Tls(str(work / "cli-privkey.pem"), str(work / "cli-cert.pem"),
                       str(pki / "switchca" / "cacert.pem")), pki)


def _wait_ready(state: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (state / "ready").exists():
            return
        if (state / "failed").exists():
            raise RuntimeError(f"emulated host {state.name}: {(state / 'failed').read_text()}")
        time.sleep(0.2)
    raise RuntimeError(f"emulated host {state.name} not ready after {timeout} s")
