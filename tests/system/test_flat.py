"""Flat (Containernet-style) labs on the real engine and OVS: same addresses, same link
mechanism, components as processes in one namespace, nothing left after delete."""

from __future__ import annotations

import pytest

from nestednet.adapters import docker_engine, netlink
from nestednet.adapters.ovsdb import Ovsdb
from nestednet.errors import UsageError
from nestednet.lab import flat
from nestednet.lab import status as lab_status
from nestednet.lab.components import exec_in, swap
from nestednet.lab.create import CreateRequest, create
from nestednet.lab.links import LabLinks
from nestednet.lab.nodes import Lab
from nestednet.lab.record import LabRecord
from nestednet.lab.teardown import delete_lab
from nestednet.model.topology import Endpoint

pytestmark = pytest.mark.system

LAB = "bft"


def run(lab, node, comp, argv) -> tuple[int, str]:
    out: list[bytes] = []
    code = exec_in(lab, node, comp, argv, out.append, out.append)
    return code, b"".join(out).decode()


@pytest.fixture(scope="module")
def lab():
    if LabRecord(LAB).exists():
        delete_lab(LabRecord(LAB))
    meta = create(CreateRequest(lab=LAB, nodes=2, iphys=2, design="flat"))
    assert meta["kind"] == "flat"
    try:
        yield Lab.open(LAB)
    finally:
        delete_lab(LabRecord(LAB))


def test_components_are_processes_sharing_one_namespace(lab):
    code, out = run(lab, "n1", "iphy2", ["sh", "-c", "echo $NESTEDNET_COMPONENT; ip -br addr"])
    assert code == 0
    assert out.splitlines()[0] == "iphy2"
    for ifname, address in (("gnab", "192.168.0.1/24"), ("iphy1", "192.168.0.11/24"),
                            ("iphy2-inter", "192.168.2.2/24"), ("ctl", "10.99.0.2/16")):
        assert any(line.split()[0].split("@")[0] == ifname and address in line
                   for line in out.splitlines()), out
    nodes = lab_status.status(lab)["nodes"]
    assert lab_status.status(lab)["kind"] == "flat"
    assert all(c["state"] == "running" and c["pid"] for n in nodes for c in n["components"])
    assert run(lab, "n1", "iphy1", ["ping", "-c1", "-W2", "192.168.0.1"])[0] == 0


def test_inter_node_traffic_follows_links(lab):
    links = LabLinks.of(lab.record)
    # Three tries, a reply to any is success: the first packets of a new link may wait
    # for ARP and an OVS upcall on a loaded machine.
    ping = ["ping", "-c3", "-i0.5", "-W2", "-I", "192.168.2.1", "192.168.2.3"]
    assert run(lab, "n1", "iphy1", ping)[0] != 0
    links.add(Endpoint(1, 1), Endpoint(2, 1))
    try:
        code, out = run(lab, "n1", "iphy1", ping)
        assert code == 0, out
        # iphy2 of n1 has no link: its packets must leave by its own port and get nowhere
        assert run(lab, "n1", "iphy2",
                   ["ping", "-c1", "-W2", "-I", "192.168.2.2", "192.168.2.3"])[0] != 0
    finally:
        links.delete(Endpoint(1, 1), Endpoint(2, 1))
    assert run(lab, "n1", "iphy1", ping)[0] != 0


def test_swap_is_refused_on_flat_labs(lab, tmp_path):
    (tmp_path / "main.py").write_text("print('hi')\n")
    with pytest.raises(UsageError, match="flat"):
        swap(lab, "n1", "iphy1", tmp_path, restart=False)


def test_delete_leaves_nothing():
    name = "bft2"
    if LabRecord(name).exists():
        delete_lab(LabRecord(name))
    create(CreateRequest(lab=name, nodes=1, iphys=1, design="flat"))
    delete_lab(LabRecord(name))
    client = docker_engine.connect()
    assert not client.containers.list(all=True, filters={"label": f"org.nestednet.lab={name}"})
    with Ovsdb() as ovs:
        assert not [b for b in ovs.bridges() if b.startswith(f"{name}-")]
    with netlink.route() as host:
        assert not [link.get_attr("IFLA_IFNAME") for link in host.get_links()
                    if link.get_attr("IFLA_IFNAME").startswith(f"{name}-")]
    assert f"nestednet-{name}-ctl" not in netlink.list_netns()
    assert flat.node_switch(name, 1) == f"{name}-s1"
