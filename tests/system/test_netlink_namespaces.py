"""Netlink helpers acting in another network namespace than this machine's (what a
multi-host lab's wiring does on a host's namespace), on the real kernel."""

from __future__ import annotations

import contextlib
import subprocess
import time
import uuid
from ipaddress import IPv4Interface
from pathlib import Path
from socket import AF_INET, AF_INET6

import pytest
from pyroute2.ethtool import Ethtool

from nestednet.adapters import netlink
from nestednet.errors import EnvironmentProblem

IFF_UP = 1
LOCAL_TABLE = 255
RTN_MULTICAST = 5

pytestmark = pytest.mark.system


@contextlib.contextmanager
def scratch_namespace():
    name = f"nnt-ns{uuid.uuid4().hex[:6]}"
    netlink.create_netns(name)
    try:
        yield name
    finally:
        netlink.remove_netns(name)


@pytest.fixture
def namespace():
    with scratch_namespace() as name:
        yield name


def _tx_checksum(ifname: str) -> bool:
    tool = Ethtool()
    try:
        return tool.get_features(ifname).features["tx-checksum-ip-generic"].enable
    finally:
        tool.close()


@pytest.mark.parametrize("offloads", [False, True])
def test_a_veth_made_in_another_namespace_gets_its_offloads_set_there(namespace, offloads):
    tag = uuid.uuid4().hex[:5]
    a, b = f"nnt{tag}a", f"nnt{tag}b"
    with netlink.route(namespace) as ipr:
        netlink.add_veth(ipr, a, b, offloads=offloads, netns=namespace)
        assert netlink.exists(ipr, a) and netlink.exists(ipr, b)
    with netlink.route() as here:
        assert not netlink.exists(here, a), "made in the other namespace only"
    states = netlink.in_namespace(namespace, lambda: (_tx_checksum(a), _tx_checksum(b)))
    assert states == (offloads, offloads)


@pytest.fixture
def second_namespace():
    with scratch_namespace() as name:
        yield name


@pytest.mark.parametrize("offloads", [False, True])
def test_each_end_is_made_in_its_namespace_under_its_final_name(namespace, second_namespace,
                                                                 offloads):
    """What wiring does instead of moving ends: one end in a named namespace, the other in
    a process's (given by pid), none in the namespace that made them, offloads set where
    each end lives."""
    tag = uuid.uuid4().hex[:5]
    a, b = f"nnt{tag}a", "eth-final"
    holder = netlink.in_namespace(second_namespace,
                                  lambda: subprocess.Popen(["sleep", "30"]))
    try:
        with netlink.route() as here:
            netlink.add_veth(here, a, b, offloads=offloads, a_in=namespace, b_in=holder.pid)
            assert not netlink.exists(here, a) and not netlink.exists(here, b)
        with netlink.route(namespace) as first:
            assert netlink.exists(first, a)
        with netlink.route(netlink.netns_path(holder.pid)) as second:
            assert netlink.exists(second, b)
        assert netlink.in_namespace(namespace, lambda: _tx_checksum(a)) == offloads
        assert netlink.in_namespace(netlink.netns_path(holder.pid),
                                    lambda: _tx_checksum(b)) == offloads
    finally:
        holder.kill()
        holder.wait()


def test_configure_sets_address_mac_mtu_and_state_and_port_up_gives_no_ipv6_address(
        namespace):
    with netlink.route(namespace) as ipr:
        netlink.add_veth(ipr, "cfg0", "cfg1", offloads=True, netns=namespace)
        netlink.add_veth(ipr, "prt0", "prt1", offloads=True, netns=namespace)
        netlink.up(ipr, "cfg1")
        netlink.up(ipr, "prt1")
        netlink.configure(ipr, "cfg0", IPv4Interface("10.9.8.7/24"), mac="02:00:00:0a:0b:0c",
                          mtu=1400)
        netlink.port_up(ipr, "prt0", namespace=namespace)
        links = {link.get_attr("IFLA_IFNAME"): link for link in ipr.get_links()}
        cfg, port, peer = links["cfg0"], links["prt0"], links["prt1"]
        assert cfg.get_attr("IFLA_ADDRESS") == "02:00:00:0a:0b:0c"
        assert cfg.get_attr("IFLA_MTU") == 1400
        assert cfg["flags"] & IFF_UP and port["flags"] & IFF_UP
        assert [a.get_attr("IFA_ADDRESS")
                for a in ipr.get_addr(family=AF_INET, index=cfg["index"])] == ["10.9.8.7"]
        # The reference beside it: the port's peer, brought up plainly, gets a link-local
        # address; by then the port would have one too.
        deadline = time.monotonic() + 5
        while not list(ipr.get_addr(family=AF_INET6, index=peer["index"])):
            assert time.monotonic() < deadline, "the plain peer got no link-local address"
            time.sleep(0.1)
        assert list(ipr.get_addr(family=AF_INET6, index=port["index"])) == []
        # Nor the multicast route every IPv6 interface that is up gets (ff00::/8, local
        # table): the plain peer has it.
        assert _multicast_routes(ipr, peer["index"]) == ["ff00::"]
        assert _multicast_routes(ipr, port["index"]) == []
        assert netlink.in_namespace(namespace, lambda: Path(
            "/proc/sys/net/ipv6/conf/prt0/disable_ipv6").read_text().strip()) == "1"


def _multicast_routes(ipr, index: int) -> list[str]:
    return [route.get_attr("RTA_DST")
            for route in ipr.get_routes(family=AF_INET6, table=LOCAL_TABLE, oif=index)
            if route["type"] == RTN_MULTICAST]


def test_port_up_of_a_missing_interface_is_a_named_error(namespace):
    with netlink.route(namespace) as ipr, pytest.raises(EnvironmentProblem, match="nope1"):
        netlink.port_up(ipr, "nope1", namespace=namespace)


def test_setting_a_missing_interface_is_a_named_error(namespace):
    with netlink.route(namespace) as ipr, pytest.raises(EnvironmentProblem, match="nope0"):
        netlink.up(ipr, "nope0")
