"""The testbed's names, addresses and links file, before anything is built."""

from __future__ import annotations

from ipaddress import IPv4Address

import pytest

from linkemu import router_plan, testbed
from nestednet.errors import UsageError


@pytest.mark.unit
@pytest.mark.parametrize("clients", [1, 2, 3, testbed.MAX_CLIENTS])
def test_names_fit_interface_limits_and_carry_the_prefix(clients: int) -> None:
    layout = testbed.Layout(clients=clients, prefix="ler")
    names = [*testbed.host_link_names(layout), layout.bridge, *layout.namespaces()]
    assert all(n.startswith("ler-") for n in names)
    assert max(len(n) for n in testbed.host_link_names(layout)) <= 15
    assert len(set(names)) == len(names)


@pytest.mark.unit
@pytest.mark.parametrize(("kwargs", "message"), [
    ({"clients": 0}, "between 1 and"),
    ({"clients": testbed.MAX_CLIENTS + 1}, "between 1 and"),
    ({"prefix": "x/y"}, "prefix"),
    ({"prefix": "toolong"}, "prefix"),
    ({"prefix": ""}, "prefix"),
])
def test_bad_layouts_are_usage_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        testbed.Layout(**kwargs)


@pytest.mark.unit
def test_links_document_describes_the_testbed_and_plans_to_the_same_router() -> None:
    layout = testbed.Layout(clients=3)
    doc = testbed.links_document(layout)
    assert doc["emulator"]["bridge"] == "le-br"
    assert [link["client_ip"] for link in doc["links"]] == ["198.18.1.2", "198.18.2.2",
                                                            "198.18.3.2"]
    assert {link["server_ip"] for link in doc["links"]} == {"198.19.0.2"}
    sides = [router_plan.side_from_native(doc["emulator"][k], k)
             for k in ("client_side", "server_side")]
    emulator = layout.emulator()
    assert sides == [emulator.client_side, emulator.server_side]
    plan = router_plan.plan(layout.link_table())
    assert {str(r.destination) for r in plan.routes} == {"198.18.1.0/24", "198.18.2.0/24",
                                                         "198.18.3.0/24"}
    assert all(r.gateway == IPv4Address("198.18.0.2") for r in plan.routes)


@pytest.mark.unit
def test_datapath_ids_are_fixed_per_bridge_name() -> None:
    a, b = testbed.Layout(prefix="le"), testbed.Layout(prefix="ler")
    assert a.datapath_id() == testbed.Layout(prefix="le", clients=5).datapath_id()
    assert a.datapath_id() != b.datapath_id()
    assert len(a.datapath_id()) == 16 and int(a.datapath_id(), 16) > 0
