"""The datapath choice: which switches let their veths keep TX offloads, and doctor's advice."""

import pytest

from nestednet import datapath as dp

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(("kind", "config", "tso", "offloads"), [
    ("system", {}, False, True),
    ("system", {"userspace-tso-enable": "true"}, False, True),
    ("netdev", {}, False, False),
    ("netdev", {"userspace-tso-enable": "false"}, False, False),
    ("netdev", {"userspace-tso-enable": "true"}, True, True),
    ("netdev", {"userspace-tso-enable": "TRUE"}, True, True),
])
def test_offloads_stay_on_unless_userspace_without_tso(kind, config, tso, offloads):
    chosen = dp.from_config(kind, config)
    assert (chosen.kind, chosen.userspace_tso, chosen.veth_offloads) == (kind, tso, offloads)


def test_nodes_own_their_switch_so_userspace_nodes_get_tso():
    assert dp.node_datapath("netdev") == dp.Datapath("netdev", True)
    assert dp.node_datapath("system").veth_offloads


def test_advice_only_where_something_is_faster():
    assert dp.advice(dp.Datapath("system"), ["afxdp"]) == ""
    assert dp.advice(dp.Datapath("netdev", True), ["afxdp"]) == ""
    slow = dp.advice(dp.Datapath("netdev", False), ["afxdp", "internal"])
    assert "userspace-tso-enable=true" in slow and "restart ovs-vswitchd" in slow
    assert "AF_XDP" in slow
    assert "AF_XDP" not in dp.advice(dp.Datapath("netdev", False), ["internal"])


def test_only_the_userspace_datapath_reads_ports_through_sockets():
    assert dp.reads_ports_by_socket(dp.NETDEV)
    assert not dp.reads_ports_by_socket(dp.SYSTEM)
    assert dp.PORT_RCVBUF_BYTES > 208 * 1024  # above the kernel default it replaces
