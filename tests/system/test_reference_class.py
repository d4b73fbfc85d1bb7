"""The rate judge's reference class (linkemu.measure.reference_class) on a real port:
what it builds, and that it never leaves half a tree or takes away one it did not make."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from pyroute2 import NetlinkError

from linkemu import measure
from nestednet.adapters import netlink, tc
from nestednet.capabilities.shaping import available_qdiscs

pytestmark = pytest.mark.system


@pytest.fixture
def port() -> Iterator[tuple[str, str]]:
    """(namespace, ifname): one end of a veth pair in a scratch namespace of our own."""
    name, tag = f"nnt-rc{uuid.uuid4().hex[:6]}", uuid.uuid4().hex[:5]
    netlink.create_netns(name)
    try:
        with netlink.route(name) as ipr:
            netlink.add_veth(ipr, f"nnt{tag}a", f"nnt{tag}b", netns=name)
            netlink.up(ipr, f"nnt{tag}a")
        yield name, f"nnt{tag}a"
    finally:
        netlink.remove_netns(name)


def root_qdisc(namespace: str, ifname: str) -> tuple[str, int]:
    """(kind, handle) of the port's root qdisc."""
    with netlink.route(namespace) as ipr:
        return tc.root_qdisc(ipr, netlink.index(ipr, ifname))


def test_the_reference_class_is_capped_at_its_rate_and_removed_after_the_block(port):
    """Its class as the kernel reports it inside the block, and no tree after. (With a
    netem leaf it runs in the VM's rate test, tests/kernel/test_linkemu_kernel.py.)"""
    namespace, ifname = port
    with measure.reference_class(namespace, ifname, "htb", 10_000_000):
        assert root_qdisc(namespace, ifname) == ("htb", 0x10000)
        with netlink.route(namespace) as ipr:
            classes = {msg["handle"]: msg
                       for msg in ipr.get_classes(index=netlink.index(ipr, ifname))}
    assert root_qdisc(namespace, ifname)[0] != "htb"
    assert 0x10010 in classes
    rate = classes[0x10010].get_attr("TCA_OPTIONS").get_attr("TCA_HTB_PARMS")["rate"]
    assert rate == 10_000_000 // 8  # bytes per second, as tc stores it


def test_a_reference_that_cannot_be_built_leaves_no_half_tree(port):
    """Here (no sch_netem on this kernel) the netem leaf fails after the root and the
    class exist: both go."""
    if available_qdiscs()["netem"]:
        pytest.skip("this kernel has sch_netem: the leaf cannot fail")
    namespace, ifname = port
    before = root_qdisc(namespace, ifname)
    with pytest.raises(NetlinkError), \
            measure.reference_class(namespace, ifname, "htb", 10_000_000, delay_us=2000):
        pass
    assert root_qdisc(namespace, ifname) == before


def test_a_port_with_a_root_of_its_own_is_refused_and_left_alone(port):
    namespace, ifname = port
    with netlink.route(namespace) as ipr:
        ipr.tc("add", "htb", index=netlink.index(ipr, ifname), handle="5:", default=0x10)
    with pytest.raises(NetlinkError), \
            measure.reference_class(namespace, ifname, "htb", 10_000_000, delay_us=2000):
        pass
    assert root_qdisc(namespace, ifname) == ("htb", 0x50000)
