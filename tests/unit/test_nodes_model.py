"""The lab model: names, endpoints, the address plan and the manual-link rules."""

from __future__ import annotations

import contextlib
from ipaddress import IPv4Address, IPv4Interface, IPv4Network

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nestednet.errors import UsageError
from nestednet.model import link_rules
from nestednet.model import topology as topo
from nestednet.model.addressing import INTRA_NET, AddressPlan, address_owner, inter_network

E = topo.Endpoint


@pytest.mark.unit
@pytest.mark.parametrize("name", ["nn", "t", "t1", "abcdefgh", "lab7"])
def test_good_lab_names(name):
    assert topo.check_lab_name(name) == name


@pytest.mark.unit
@pytest.mark.parametrize("name", ["", "1ab", "abcdefghi", "Nn", "a-b", "a_b", "a b", "ab/"])
def test_bad_lab_names(name):
    with pytest.raises(UsageError):
        topo.check_lab_name(name)


@pytest.mark.unit
@pytest.mark.parametrize(("nodes", "iphys"), [(0, 1), (1, 0), (-1, 2), (2, -3),
                                              (topo.MAX_NODES + 1, 1), (1, topo.MAX_IPHYS + 1)])
def test_shape_limits(nodes, iphys):
    with pytest.raises(UsageError):
        topo.Shape(nodes, iphys)


@pytest.mark.unit
def test_components_and_endpoints():
    shape = topo.Shape(3, 2)
    assert shape.components() == ["gnab", "iphy1", "iphy2"]
    assert topo.parse_endpoint("n3:iphy2", shape) == E(3, 2)
    for bad in ("n4:iphy1", "n1:iphy3", "n1:gnab", "n1", "x1:iphy1", "n0:iphy1",
                "n1:iphy0", "n01:iphy1", "n1:iphy1:x"):
        with pytest.raises(UsageError):
            topo.parse_endpoint(bad, shape)


@pytest.mark.unit
@given(st.integers(1, topo.MAX_NODES), st.integers(1, topo.MAX_IPHYS))
def test_endpoint_round_trip(node, iphy):
    end = E(node, iphy)
    assert topo.parse_endpoint(str(end)) == end


@pytest.mark.unit
@given(st.text(max_size=12))
def test_endpoint_parser_never_crashes(text):
    with contextlib.suppress(UsageError):
        topo.parse_endpoint(text)


@pytest.mark.unit
def test_host_interface_names_fit_and_are_unique():
    names = {topo.veth_name("abcdefgh", node, role, comp)
             for node in (1, 9, 10, 999) for comp in (0, 1, 99) for role in topo.VETH_ROLES}
    assert all(len(n) <= topo.IFNAME_MAX for n in names)
    assert len(names) == 4 * 3 * len(topo.VETH_ROLES)
    assert len(topo.main_bridge("abcdefgh")) <= topo.IFNAME_MAX
    assert len(topo.control_bridge("abcdefgh")) <= topo.IFNAME_MAX
    # Lab "t1" node 1 and lab "t" node 11 must not collide.
    assert topo.veth_name("t1", 1, "inter-host", 1) != topo.veth_name("t", 11, "inter-host", 1)


@pytest.mark.unit
def test_intra_plan():
    plan = AddressPlan.for_shape(topo.Shape(2, 4))
    assert str(plan.intra_address(0)) == "192.168.0.1/24"
    assert str(plan.intra_address(3)) == "192.168.0.13/24"


@pytest.mark.unit
def test_intra_neighbours_name_every_other_component_by_its_intra_mac():
    plan = AddressPlan.for_shape(topo.Shape(3, 2))
    assert plan.intra_neighbours(2, 0) == [(IPv4Address("192.168.0.11"), "02:4e:00:02:01:01"),
                                           (IPv4Address("192.168.0.12"), "02:4e:00:02:02:01")]
    assert plan.intra_neighbours(2, 1) == [(IPv4Address("192.168.0.1"), "02:4e:00:02:00:01"),
                                           (IPv4Address("192.168.0.12"), "02:4e:00:02:02:01")]
    for component in range(3):
        told = plan.intra_neighbours(3, component)
        assert plan.intra_address(component).ip not in {ip for ip, _ in told}
        assert {mac for _, mac in told} == {plan.mac_address(3, c, 1)
                                            for c in range(3) if c != component}


@pytest.mark.unit
def test_inter_plan_default_and_unique():
    shape = topo.Shape(12, 4)
    plan = AddressPlan.for_shape(shape)
    assert plan.inter == IPv4Network("192.168.2.0/24")
    addresses = {plan.inter_address(i, j).ip for i in range(1, 13) for j in range(1, 5)}
    assert len(addresses) == 48
    assert all(a in plan.inter and not a in INTRA_NET for a in addresses)  # noqa: E713
    assert str(plan.inter_address(1, 1)) == "192.168.2.1/24"
    assert address_owner(plan, IPv4Address("192.168.2.6")) == (2, 2)


@pytest.mark.unit
def test_inter_plan_widens_when_needed():
    assert inter_network(topo.Shape(254, 1)).prefixlen == 24
    assert inter_network(topo.Shape(255, 1)) == IPv4Network("192.168.2.0/23")
    plan = AddressPlan.for_shape(topo.Shape(100, 5))
    assert plan.inter == IPv4Network("192.168.2.0/23")
    last = plan.inter_address(100, 5)
    assert last.ip == IPv4Address("192.168.3.244") and last.network.prefixlen == 23


@pytest.mark.unit
def test_inter_plan_moves_above_the_intra_net_when_a_23_is_too_small():
    # 510 = 2**9 - 2 fit 192.168.2.0/23; 511 need 2**10 addresses, and 192.168.0.0/22
    # would cover 192.168.0.0/24, so the next aligned /22 is 192.168.4.0 (4 * 256).
    assert inter_network(topo.Shape(255, 2)) == IPv4Network("192.168.2.0/23")
    assert inter_network(topo.Shape(511, 1)) == IPv4Network("192.168.4.0/22")
    plan = AddressPlan.for_shape(topo.Shape(250, 4))
    assert plan.inter == IPv4Network("192.168.4.0/22")
    # iPHY 4 of node 250 is host 1,000 = 3 * 256 + 232
    assert plan.inter_address(250, 4) == IPv4Interface("192.168.7.232/22")
    assert address_owner(plan, IPv4Address("192.168.7.232")) == (250, 4)
    # 999 x 8 = 7,992 addresses: a /19 (8,190); 192.168.0.0/19 covers the intra net
    assert inter_network(topo.Shape(999, 8)) == IPv4Network("192.168.32.0/19")


@pytest.mark.unit
def test_inter_plan_refuses_more_than_a_17_with_its_capacity():
    # 192.168.128.0/17 holds 2**15 - 2 = 32,766; 999 x 33 = 32,967 do not fit
    AddressPlan.for_shape(topo.Shape(999, 32))
    with pytest.raises(UsageError, match=r"32967 .*at most 32766 iPHYs"):
        AddressPlan.for_shape(topo.Shape(999, 33))


@pytest.mark.unit
@given(st.integers(1, 999), st.integers(1, 99))
def test_plan_is_collision_free_or_refused(nodes, iphys):
    shape = topo.Shape(nodes, iphys)
    try:
        plan = AddressPlan.for_shape(shape)
    except UsageError:
        assert nodes * iphys > 32766
        return
    assert not plan.inter.overlaps(plan.intra) and not plan.control.overlaps(plan.inter)
    assert plan.inter.subnet_of(IPv4Network("192.168.0.0/16"))
    assert plan.inter.num_addresses - 2 >= nodes * iphys
    seen = set()
    for i in (1, nodes):
        for j in (1, iphys):
            a = plan.inter_address(i, j).ip
            assert a in plan.inter and a not in (plan.inter.network_address,
                                                 plan.inter.broadcast_address)
            assert address_owner(plan, a) == (i, j)
            seen.add(a)
    assert plan.control_address(nodes).ip != plan.ca_address().ip


@pytest.mark.unit
def test_link_rules_accept_and_normalize():
    assert link_rules.check_new_link([], E(2, 1), E(1, 2)) == (E(1, 2), E(2, 1))
    assert link_rules.check_new_link([(E(1, 1), E(2, 1))], E(1, 2), E(3, 1)) == (E(1, 2),
                                                                                 E(3, 1))


@pytest.mark.unit
@pytest.mark.parametrize(("a", "b", "why"), [
    (E(1, 1), E(1, 2), "same node"),
    (E(2, 1), E(1, 1), "exists already"),
    (E(1, 1), E(3, 1), "busy"),
    (E(3, 2), E(2, 1), "busy"),
    (E(1, 2), E(2, 2), "linked already"),
])
def test_link_rules_refuse(a, b, why):
    with pytest.raises(UsageError, match=why):
        link_rules.check_new_link([(E(1, 1), E(2, 1))], a, b)


@pytest.mark.unit
def test_find_link():
    links = [(E(1, 1), E(2, 1))]
    assert link_rules.find_link(links, E(2, 1), E(1, 1)) == (E(1, 1), E(2, 1))
    with pytest.raises(UsageError, match="no link"):
        link_rules.find_link(links, E(1, 2), E(2, 2))
