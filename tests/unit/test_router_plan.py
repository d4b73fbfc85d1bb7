"""The IP address constructor: router addresses, gateways and routes from a link table."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv4Interface, IPv4Network

import pytest
from hypothesis import given
from hypothesis import strategies as st

from linkemu.model import EmulatedLinks, Emulator, Link, LinkShape, RouterSide
from linkemu.router_plan import CLIENT, SERVER, plan
from nestednet.errors import UsageError

SHAPE = LinkShape(rate_bps=10_000_000)
PLAIN = Emulator()


def _table(clients: list[str], server: str = "198.19.0.2", *,
           emulator: Emulator = PLAIN) -> EmulatedLinks:
    return EmulatedLinks(tuple(
        Link("R1", f"C{i + 1}", IPv4Address(c), IPv4Address(server), SHAPE, SHAPE)
        for i, c in enumerate(clients)), emulator)


TESTBED = Emulator(client_side=RouterSide(IPv4Interface("198.18.0.1/24"),
                                          IPv4Address("198.18.0.2")),
                   server_side=RouterSide(IPv4Interface("198.19.0.1/24")))


@pytest.mark.unit
def test_testbed_layout_routes_each_client_network_via_the_edge_router() -> None:
    p = plan(_table(["198.18.1.2", "198.18.2.2"], emulator=TESTBED))
    assert p.requests() == [
        {"address": "198.18.0.1/24"},
        {"address": "198.19.0.1/24"},
        {"destination": "198.18.1.0/24", "gateway": "198.18.0.2"},
        {"destination": "198.18.2.0/24", "gateway": "198.18.0.2"},
    ]
    assert p.gateway_for(CLIENT) == IPv4Address("198.18.0.1")
    assert p.gateway_for(SERVER) == IPv4Address("198.19.0.1")
    assert p.bridge == "le-br"


@pytest.mark.unit
def test_clients_in_one_network_share_one_route() -> None:
    p = plan(_table(["198.18.1.2", "198.18.1.3", "198.18.1.4"], emulator=TESTBED))
    assert [r.destination for r in p.routes] == [IPv4Network("198.18.1.0/24")]


@pytest.mark.unit
def test_without_a_layout_the_constructor_gives_one_onlink_address_per_side() -> None:
    # The thesis's example: three clients and one server, all directly attached.
    p = plan(_table(["10.0.1.2", "10.0.1.3", "10.0.1.4"], server="10.0.2.2"))
    assert p.as_dict()["addresses"] == [
        {"side": "client", "address": "10.0.1.1/24"},
        {"side": "server", "address": "10.0.2.1/24"},
    ]
    assert p.routes == ()


@pytest.mark.unit
def test_constructor_skips_addresses_taken_by_hosts() -> None:
    p = plan(_table(["10.0.1.1", "10.0.1.2"], server="10.0.2.1"))
    assert [str(a.address) for a in p.addresses] == ["10.0.1.3/24", "10.0.2.2/24"]


@pytest.mark.unit
def test_constructor_gives_one_address_per_client_network() -> None:
    p = plan(_table(["10.0.1.2", "10.0.3.2"], server="10.0.2.2"))
    assert [(a.side, str(a.address)) for a in p.addresses] == [
        ("client", "10.0.1.1/24"), ("client", "10.0.3.1/24"), ("server", "10.0.2.1/24")]


@pytest.mark.unit
@pytest.mark.parametrize(("clients", "server", "emulator", "message"), [
    (["198.19.0.5"], "198.19.0.2", TESTBED, "used both|server-side network"),
    (["198.18.1.2"], "198.18.1.2", Emulator(), "same address"),
    (["10.0.0.2"], "198.19.0.2", Emulator(client_side=RouterSide(IPv4Interface("198.18.0.1/24"))),
     "no client-side gateway"),
    (["198.18.1.2"], "198.19.0.2", Emulator(
        client_side=RouterSide(IPv4Interface("198.18.0.1/24"), IPv4Address("198.20.0.2"))),
     "outside the router's client-side network"),
    (["198.18.0.1"], "198.19.0.2", TESTBED, "router's own"),
    (["198.18.1.2"], "198.18.0.9", Emulator(
        client_side=RouterSide(IPv4Interface("198.18.0.1/16"), IPv4Address("198.18.0.2"))),
     "lies in the router's client-side network|overlap"),
    (["198.18.1.0"], "198.19.0.2", Emulator(), "not a host address"),
    (["198.18.1.2"], "198.19.0.2", Emulator(
        client_side=RouterSide(IPv4Interface("198.18.0.0/24"), IPv4Address("198.18.0.2"))),
     "not a usable host address"),
])
def test_inconsistent_layouts_are_usage_errors(clients: list[str], server: str,
                                               emulator: Emulator, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        plan(_table(clients, server, emulator=emulator))


@pytest.mark.unit
def test_empty_table_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="no links"):
        plan(EmulatedLinks(()))


@pytest.mark.unit
@given(st.sets(st.integers(min_value=1, max_value=200), min_size=1, max_size=20),
       st.integers(min_value=2, max_value=254))
def test_every_testbed_client_is_reachable_and_nothing_overlaps(nets: set[int],
                                                                host: int) -> None:
    clients = [f"198.18.{n}.{host}" for n in sorted(nets)]
    p = plan(_table(clients, emulator=TESTBED))
    for c in clients:
        ip = IPv4Address(c)
        assert sum(ip in r.destination for r in p.routes) == 1
        assert all(ip not in a.address.network for a in p.addresses)
    assert len(p.routes) == len(nets)
    assert all(r.gateway == IPv4Address("198.18.0.2") for r in p.routes)


@pytest.mark.unit
def test_router_sides_round_trip_through_the_native_form() -> None:
    from linkemu.router_plan import side_from_native, side_to_native

    for side in (TESTBED.client_side, TESTBED.server_side):
        assert side is not None
        assert side_from_native(side_to_native(side), "emulator.client_side") == side


@pytest.mark.unit
@pytest.mark.parametrize(("value", "message"), [
    ({"address": "198.18.0.1"}, r"emulator.client_side.address.*prefix"),
    ({"address": "198.18.300.1/24"}, r"emulator.client_side.address"),
    ({"address": "198.18.0.1/24", "gateway": "x"}, r"emulator.client_side.gateway"),
    ({"gateway": "198.18.0.2"}, r"emulator.client_side: expected"),
    ({"address": "198.18.0.1/24", "via": "198.18.0.2"}, r"emulator.client_side: expected"),
])
def test_bad_router_sides_name_the_field(value: dict, message: str) -> None:
    from linkemu.router_plan import side_from_native

    with pytest.raises(UsageError, match=message):
        side_from_native(value, "emulator.client_side")
