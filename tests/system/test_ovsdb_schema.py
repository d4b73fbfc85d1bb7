"""An OVSDB connection made with another connection's schema (what a create does for
every node after the first) works on the real database like one that fetched it."""

from __future__ import annotations

import copy
import uuid

import pytest

from nestednet.adapters.ovsdb import Ovsdb
from nestednet.capabilities.nodes import ovs_datapath

pytestmark = pytest.mark.system


def test_a_connection_given_the_schema_sees_and_changes_the_same_database():
    name = f"nnt-sc{uuid.uuid4().hex[:4]}"
    with Ovsdb() as first:
        schema = first.schema
        kept = copy.deepcopy(schema)
        assert schema["name"] == "Open_vSwitch" and "Bridge" in schema["tables"]
        with Ovsdb(schema=schema) as second:
            assert second.schema is schema
            try:
                second.add_bridge(name, datapath_type=ovs_datapath(),
                                  external_ids={"org.nestednet.test": "schema"})
                second.add_ports(name, [(f"{name}p", {"external_ids": {"t": "1"},
                                                      "iface_type": "internal"})])
                assert first.bridges()[name] == {"org.nestednet.test": "schema"}
                assert first.ports()[f"{name}p"] == {"t": "1"}
            finally:
                second.del_bridge(name)
        assert name not in first.bridges()
    assert schema == kept  # reusable: neither connection changed it
