"""Netlink helpers acting in another network namespace than this machine's (what a
multi-host lab's wiring does on a host's namespace), on the real kernel."""

from __future__ import annotations

import uuid

import pytest
from pyroute2.ethtool import Ethtool

from nestednet.adapters import netlink

pytestmark = pytest.mark.system


@pytest.fixture
def namespace():
    name = f"nnt-ns{uuid.uuid4().hex[:6]}"
    netlink.create_netns(name)
    try:
        yield name
    finally:
        netlink.remove_netns(name)


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
