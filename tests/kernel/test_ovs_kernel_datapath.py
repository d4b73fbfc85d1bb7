"""One openvswitch kernel module, many switches: the host's OVS and a node parent's inner
OVS each keep their own kernel datapath, in their own network namespace.

A nested lab on a host with the module has exactly this: the host's ovs-vswitchd holds the
main bridge, and every parent runs its own ovs-vswitchd for its internal bridge, both of
datapath type `system`, in one kernel. Each vswitchd names its datapath `ovs-system` and,
on start, deletes datapath ports it does not know. This test stands a network namespace
in for the parent (its own ovsdb-server and ovs-vswitchd, as images/dind/entrypoint
starts them) and checks that neither switch sees or disturbs the other: both carry
traffic at once, each datapath lists only its own ports, and stopping the inner one leaves
the host's untouched. No Docker engine needed, so it runs in every `make test`.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from ipaddress import IPv4Interface
from pathlib import Path

import pytest
from recording import record

from nestednet.adapters import netlink, netns_exec
from nestednet.adapters.ovsdb import Ovsdb
from nestednet.capabilities.nodes import ovs_datapath

pytestmark = pytest.mark.kernel


@dataclass
class Switches:
    tag: str
    parent: str
    """The namespace standing in for a node parent, running the inner OVS."""
    hosts: dict[str, str]
    """Endpoint namespace per role: h1, h2 on the host bridge; p1, p2 on the inner one."""
    inner_db: str
    inner_run: Path

    def inner_vsctl(self, *args: str) -> str:
        done = netns_exec.run(self.parent, ["ovs-vsctl", f"--db=unix:{self.inner_db}", *args],
                              timeout=60, check=True)
        return done.stdout

    def ping(self, src: str, dst_ip: str) -> bool:
        done = netns_exec.run(self.hosts[src], ["ping", "-c", "3", "-i", "0.3", "-W", "3",
                                                dst_ip], timeout=60)
        return done.returncode == 0


ADDR = {"h1": "198.18.251.1", "h2": "198.18.251.2", "p1": "198.18.252.1", "p2": "198.18.252.2"}


def dp_ports(namespace: str | None) -> dict[str, list[str]]:
    """Kernel datapaths seen from ``namespace`` (None: this one): name -> port names."""
    argv = ["ovs-dpctl", "show"]
    text = (netns_exec.run(namespace, argv, timeout=30, check=True) if namespace
            else subprocess.run(argv, capture_output=True, text=True, timeout=30,
                                check=True)).stdout
    found: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        if not line.startswith((" ", "\t")):
            current = line.split("@", 1)[-1].rstrip(":")
            found[current] = []
        elif line.strip().startswith("port "):
            found[current].append(line.split(":", 1)[1].split()[0])
    return found


def _endpoint(tag: str, role: str, attach_ns: str | None) -> tuple[str, str]:
    """A namespace with one veth, its other end (returned) left in ``attach_ns``."""
    ns, outer = f"nnd-{tag}-{role}", f"nd{tag}{role}"
    netlink.create_netns(ns)
    with netlink.route() as host:
        netlink.add_veth(host, outer, f"nd{tag}{role}i")
        netlink.move(host, f"nd{tag}{role}i", ns, "eth0")
        if attach_ns:
            netlink.move(host, outer, attach_ns)
        else:
            netlink.up(host, outer)
    if attach_ns:
        with netlink.route(attach_ns) as ipr:
            netlink.up(ipr, outer)
    with netlink.route(ns) as ipr:
        netlink.up(ipr, "lo")
        netlink.configure(ipr, "eth0", IPv4Interface(f"{ADDR[role]}/24"))
    return ns, outer


def _wait_for(path: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.1)


@pytest.fixture
def switches(tmp_path: Path) -> Iterator[Switches]:
    if ovs_datapath() != "system":
        pytest.skip("needs the openvswitch kernel module (the full-kernel VM has it)")
    tag = uuid.uuid4().hex[:4]
    parent = f"nnd-{tag}-parent"
    run = tmp_path / "ovs"
    run.mkdir()
    db, sock = run / "conf.db", run / "db.sock"
    env = {"OVS_RUNDIR": str(run), "OVS_LOGDIR": str(run), "OVS_DBDIR": str(run)}
    hosts: dict[str, str] = {}
    host_bridge, inner_bridge = f"nnd{tag}h", f"nnd{tag}p"
    ovs = Ovsdb()
    try:
        netlink.create_netns(parent)
        with netlink.route(parent) as ipr:
            netlink.up(ipr, "lo")
        subprocess.run(["ovsdb-tool", "create", str(db),
                        "/usr/share/openvswitch/vswitch.ovsschema"], check=True)
        for argv in (["ovsdb-server", str(db), f"--remote=punix:{sock}", "--pidfile",
                      "--detach", "--log-file"],
                     ["ovs-vswitchd", f"unix:{sock}", "--pidfile", "--detach", "--log-file"]):
            netns_exec.run(parent, ["env", *(f"{k}={v}" for k, v in env.items()), *argv],
                           timeout=120, check=True)
        _wait_for(run / "ovs-vswitchd.pid")
        stand_in = Switches(tag, parent, hosts, str(sock), run)
        ovs.add_bridge(host_bridge, datapath_type="system", external_ids={},
                       fail_mode="standalone")
        stand_in.inner_vsctl("add-br", inner_bridge, "--", "set", "bridge", inner_bridge,
                             "datapath_type=system")
        for role in ("h1", "h2"):
            hosts[role], outer = _endpoint(tag, role, None)
            ovs.add_port(host_bridge, outer, external_ids={})
        for role in ("p1", "p2"):
            hosts[role], outer = _endpoint(tag, role, parent)
            stand_in.inner_vsctl("add-port", inner_bridge, outer)
        yield stand_in
    finally:
        for pidfile in ("ovs-vswitchd.pid", "ovsdb-server.pid"):
            if (run / pidfile).exists():
                subprocess.run(["kill", (run / pidfile).read_text().strip()], check=False)
        if ovs.bridge_exists(host_bridge):
            ovs.del_bridge(host_bridge)
        ovs.close()
        for ns in [*hosts.values(), parent]:
            netlink.remove_netns(ns)


def test_host_and_inner_switch_each_keep_their_own_kernel_datapath(switches: Switches):
    tag = switches.tag
    assert switches.ping("h1", ADDR["h2"]), "host bridge (kernel datapath) carries nothing"
    assert switches.ping("p1", ADDR["p2"]), "inner bridge (kernel datapath) carries nothing"
    host_dp, inner_dp = dp_ports(None), dp_ports(switches.parent)
    record("ovs_kernel_datapaths", host=host_dp, inner=inner_dp)
    assert list(inner_dp) == ["ovs-system"], inner_dp
    assert sorted(inner_dp["ovs-system"]) == sorted(
        ["ovs-system", f"nnd{tag}p", f"nd{tag}p1", f"nd{tag}p2"]), inner_dp
    host_ports = host_dp["ovs-system"]
    assert {f"nnd{tag}h", f"nd{tag}h1", f"nd{tag}h2"} <= set(host_ports), host_dp
    assert not [p for p in host_ports if p.startswith((f"nd{tag}p", f"nnd{tag}p"))], host_dp


def test_stopping_the_inner_switch_leaves_the_host_datapath(switches: Switches):
    before = dp_ports(None)
    netns_exec.run(switches.parent, ["env", f"OVS_RUNDIR={switches.inner_run}", "ovs-appctl",
                                     "-t", "ovs-vswitchd", "exit", "--cleanup"],
                   timeout=60, check=True)
    assert dp_ports(None) == before
    assert switches.ping("h1", ADDR["h2"])
    assert not switches.ping("p1", ADDR["p2"]), "inner datapath outlived its vswitchd --cleanup"
