"""Multi-host labs, the pure part: hosts files, placement, tunnels and cross-host flows."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nestednet.errors import UsageError
from nestednet.model import placement as pl
from nestednet.model import topology as topo
from nestednet.model import tunnels as tn
from nestednet.model.addressing import AddressPlan

E = topo.Endpoint


def hosts(*items: dict, vni: int | None = None) -> pl.HostSet:
    doc: dict = {"hosts": list(items)}
    if vni is not None:
        doc["vni"] = vni
    return pl.hosts_from_doc(doc)


TWO = [{"name": "hostA", "address": "10.0.0.1"}, {"name": "hostB", "address": "10.0.0.2"}]


@pytest.mark.unit
def test_hosts_file_is_read_with_its_optional_fields(tmp_path):
    path = tmp_path / "hosts.json"
    path.write_text(json.dumps({"hosts": [{**TWO[0], "engine": "tcp://10.0.0.1:2375",
                                           "capacity": 3}, TWO[1]], "vni": 7000}))
    got = pl.load_hosts(path)
    assert got.names() == ["hostA", "hostB"]
    assert got.hosts[0] == pl.Host("hostA", "10.0.0.1", "tcp://10.0.0.1:2375", None, 3)
    assert got.vni == 7000


@pytest.mark.unit
@pytest.mark.parametrize(("doc", "located"), [
    ({}, "(top level): 'hosts' is missing"),
    ({"hosts": []}, "hosts"),
    ({"hosts": [{"name": "a"}]}, "hosts[0]: 'address' is missing"),
    ({"hosts": [{"name": "a", "address": "10.0.0.300"}]}, "hosts[0].address"),
    ({"hosts": [{"name": "1a", "address": "10.0.0.1"}]}, "hosts[0].name"),
    ({"hosts": [{"name": "a", "address": "10.0.0.1", "capacity": 0}]}, "hosts[0].capacity"),
    ({"hosts": [{"name": "a", "address": "10.0.0.1", "cpus": 2}]}, "unknown field"),
    ({"hosts": [{"name": "a", "address": "10.0.0.1"}, {"name": "a", "address": "10.0.0.2"}]},
     "hosts[1].name: 'a' is also host #1's name"),
    ({"hosts": [{"name": "a", "address": "10.0.0.1"}, {"name": "b", "address": "10.0.0.1"}]},
     "hosts[1].address"),
])
def test_bad_hosts_files_are_refused_with_a_location(doc, located):
    with pytest.raises(UsageError) as caught:
        pl.hosts_from_doc(doc, "h.json")
    assert located in str(caught.value)
    assert caught.value.exit_code == 2


@pytest.mark.unit
def test_unreadable_or_broken_hosts_file(tmp_path):
    with pytest.raises(UsageError, match="cannot read"):
        pl.load_hosts(tmp_path / "absent.json")
    (tmp_path / "h.json").write_text("{\n  hosts: 1}")
    with pytest.raises(UsageError, match="line 2 column 3"):
        pl.load_hosts(tmp_path / "h.json")


@pytest.mark.unit
def test_spread_alternates_and_packed_fills_first_host_to_capacity():
    shape = topo.Shape(6, 2)
    two = hosts(*TWO)
    assert pl.place(shape, two, "spread") == {1: "hostA", 2: "hostB", 3: "hostA",
                                               4: "hostB", 5: "hostA", 6: "hostB"}
    assert set(pl.place(shape, two, "packed").values()) == {"hostA"}
    capped = hosts({**TWO[0], "capacity": 4}, TWO[1])
    packed = pl.place(shape, capped, "packed")
    assert pl.nodes_on(packed, "hostA") == [1, 2, 3, 4]
    assert pl.nodes_on(packed, "hostB") == [5, 6]


@pytest.mark.unit
def test_pins_come_first_and_spread_balances_around_them():
    shape = topo.Shape(4, 1)
    two = hosts(*TWO)
    pins = pl.parse_pins(["n1=hostB", "n2=hostB"], shape, two)
    assert pl.place(shape, two, "spread", pins) == {1: "hostB", 2: "hostB", 3: "hostA",
                                                     4: "hostA"}


@pytest.mark.unit
@pytest.mark.parametrize(("items", "message"), [
    (["n1"], "write NODE=HOST"),
    (["n1=hostC"], "no host named 'hostC'"),
    (["n9=hostA"], "n9"),
    (["n1=hostA", "n1=hostB"], "already placed on hostA"),
])
def test_bad_pins(items, message):
    with pytest.raises(UsageError, match=message):
        pl.parse_pins(items, topo.Shape(4, 1), hosts(*TWO))


@pytest.mark.unit
def test_capacity_too_small_and_pins_over_capacity_are_refused():
    small = hosts({**TWO[0], "capacity": 1}, {**TWO[1], "capacity": 2})
    with pytest.raises(UsageError, match=r"4 nodes do not fit these hosts \(capacity 3"):
        pl.place(topo.Shape(4, 1), small)
    with pytest.raises(UsageError, match="capacity is 1"):
        pl.place(topo.Shape(2, 1), small, pins={1: "hostA", 2: "hostA"})
    with pytest.raises(UsageError, match="unknown placement"):
        pl.place(topo.Shape(2, 1), small, "random")


@pytest.mark.unit
@given(nodes=st.integers(1, 60), n_hosts=st.integers(1, 6), packed=st.booleans())
def test_every_node_placed_once_and_spread_is_even(nodes, n_hosts, packed):
    hs = hosts(*({"name": f"h{i}", "address": f"10.0.0.{i + 1}"} for i in range(n_hosts)))
    got = pl.place(topo.Shape(nodes, 1), hs, "packed" if packed else "spread")
    assert sorted(got) == list(range(1, nodes + 1))
    if not packed:
        counts = Counter(got.values())
        assert max(counts.values()) - min(counts.values(), default=0) <= 1


def plane(nodes=6, iphys=2, **place_kw) -> tn.DataPlane:
    shape = topo.Shape(nodes, iphys)
    hs = hosts(*TWO, {"name": "hostC", "address": "10.0.0.3"}, vni=100)
    return tn.DataPlane.of("lab", AddressPlan.for_shape(shape), hs,
                           pl.place(shape, hs, **place_kw))


@pytest.mark.unit
def test_one_tunnel_per_host_pair_with_matching_ends():
    dp = plane()
    assert {h: [t.peer for t in ts] for h, ts in dp.tunnels.items()} == {
        "hostA": ["hostB", "hostC"], "hostB": ["hostA", "hostC"], "hostC": ["hostA", "hostB"]}
    ab, ba = dp.tunnel("hostA", "hostB"), dp.tunnel("hostB", "hostA")
    assert (ab.vni, ab.remote_ip, ba.remote_ip) == (ba.vni, "10.0.0.2", "10.0.0.1")
    assert ab.name == "lab-t1" and ba.name == "lab-t0"
    assert len({t.vni for ts in dp.tunnels.values() for t in ts}) == 3
    assert all(len(t.name) <= topo.IFNAME_MAX for ts in dp.tunnels.values() for t in ts)


@pytest.mark.unit
def test_hosts_without_nodes_get_no_tunnels():
    dp = plane(nodes=2)
    assert set(dp.tunnels) == {"hostA", "hostB"}
    assert [t.peer for t in dp.tunnels["hostA"]] == ["hostB"]


@pytest.mark.unit
def test_same_host_link_is_the_usual_flow_pair():
    dp = plane()  # spread: n1, n4 on hostA
    assert dp.link_flows(E(1, 1), E(4, 2)) == [tn.HostFlow("hostA", 1, 8),
                                               tn.HostFlow("hostA", 8, 1)]


@pytest.mark.unit
def test_cross_host_link_is_two_rules_per_host_tagged_with_the_receivers_slot():
    dp = plane()  # n1 on hostA (slots 1,2), n2 on hostB (slots 1,2), n5 on hostB (slots 3,4)
    flows = dp.link_flows(E(1, 2), E(5, 1))
    tab, tba = dp.tunnel("hostA", "hostB").ofport, dp.tunnel("hostB", "hostA").ofport
    pa, pb = 2, 9
    assert flows == [tn.HostFlow("hostA", pa, tab, push_tag=3),
                     tn.HostFlow("hostA", tab, pa, match_tag=2),
                     tn.HostFlow("hostB", pb, tba, push_tag=2),
                     tn.HostFlow("hostB", tba, pb, match_tag=3)]


@pytest.mark.unit
@given(st.data())
def test_tags_name_one_receiving_port_per_host(data):
    nodes = data.draw(st.integers(2, 30))
    iphys = data.draw(st.integers(1, 4))
    dp = plane(nodes, iphys, strategy=data.draw(st.sampled_from(pl.STRATEGIES)))
    for host in dp.tunnels:
        tags = [s for e, s in dp.slots.items() if dp.host_of(e) == host]
        assert len(tags) == len(set(tags))
        assert all(1 <= t <= tn.MAX_SLOT for t in tags)
    ports = {p for ts in dp.tunnels.values() for t in ts for p in [t.ofport]}
    assert min(ports, default=tn.TUNNEL_OFPORT_BASE) > dp.plan.port_number(nodes, iphys)


@pytest.mark.unit
def test_too_many_iphys_on_one_host_for_a_tag():
    shape = topo.Shape(50, 99)  # more than today's address plan takes; the tag's own limit
    with pytest.raises(UsageError, match="4950 iPHYs; a cross-host link tag names at most 4094"):
        tn.slots(shape, pl.place(shape, hosts(*TWO), "packed"))
    assert max(tn.slots(shape, pl.place(shape, hosts(*TWO), "spread")).values()) == 25 * 99


@pytest.mark.unit
def test_vni_from_the_lab_name_is_stable_and_in_range():
    hs = hosts(*TWO)
    assert tn.vni_base("lab", hs) == tn.vni_base("lab", hs)
    assert tn.vni_base("lab", hs) != tn.vni_base("lab2", hs)
    assert 1 <= tn.vni_base("zz", hs) <= 2**24 - tn.VNI_PAIRS
    assert tn.inner_mtu(1500) == 1446


@pytest.mark.unit
def test_hosts_plan_cli_prints_placement_and_tunnels(tmp_path):
    from click.testing import CliRunner

    from nestednet.cli import main

    path = tmp_path / "hosts.json"
    path.write_text(json.dumps({"hosts": TWO}))
    result = CliRunner().invoke(main, ["hosts", "plan", "--hosts", str(path), "-n", "3",
                                       "--place", "n1=hostB", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert [h["nodes"] for h in doc["hosts"]] == [["n2", "n3"], ["n1"]]
    assert doc["hosts"][0]["tunnels"][0]["peer"] == "hostB"
    bad = CliRunner().invoke(main, ["hosts", "plan", "--hosts", str(path), "-n", "3",
                                    "--place", "n1=hostC"])
    assert bad.exit_code == 2
    assert "--place 'n1=hostC': no host named 'hostC'" in bad.output


@pytest.mark.unit
def test_host_flow_lines_push_and_pop_the_tag():
    from nestednet.adapters import openflow

    assert openflow.host_flow_line(0x4E4E000001000002, 2, 65001, push_tag=3) == (
        "add cookie=0x4e4e000001000002,priority=100,in_port=2,"
        "actions=push_vlan:0x8100,set_field:4099->vlan_vid,output:65001")
    assert openflow.host_flow_line(0x4E4E000001000002, 65001, 2, match_tag=2) == (
        "add cookie=0x4e4e000001000002,priority=100,in_port=65001,dl_vlan=2,"
        "actions=pop_vlan,output:2")
    assert openflow.host_flow_line(1, 1, 8) == openflow.patch_lines(1, 1, 8)[0]


@pytest.mark.unit
def test_inner_runc_wrapper_adds_no_keyring_and_no_pivot_to_create_and_run_only(tmp_path):
    import os
    import subprocess
    from pathlib import Path

    wrapper = Path(__file__).parents[2] / "images" / "dind" / "runc-no-keyring"
    fake = tmp_path / "runc"
    fake.write_text('#!/bin/sh\necho "$@"\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}

    def run(*args: str) -> str:
        return subprocess.run(["sh", str(wrapper), *args], env=env, capture_output=True,
                              text=True, check=True).stdout.strip()

    assert run("--root", "/r", "--log-format", "json", "create", "--bundle", "b", "id") == (
        "--root /r --log-format json create --no-new-keyring --no-pivot --bundle b id")
    assert run("--root", "/r", "run", "x") == "--root /r run --no-new-keyring --no-pivot x"
    assert run("--root", "/r", "delete", "create") == "--root /r delete create"
    assert run("--root", "run", "--log", "create", "state", "x") == (
        "--root run --log create state x")


@pytest.mark.unit
def test_doctor_hosts_engine_checks_from_docker_info():
    from nestednet.capabilities.hosts import clock_skew, engine_checks

    host = pl.Host("hostA", "10.0.0.1")
    now = 1_700_000_000.0
    info = {"ServerVersion": "20.10.24", "Name": "hostA",
            "Swarm": {"LocalNodeState": "active", "NodeID": "abc", "NodeAddr": "10.0.0.1"},
            "SecurityOptions": ["name=seccomp,profile=default"],
            "SystemTime": "2023-11-14T22:13:20.250000000Z"}
    checks = {c.name: c for c in engine_checks(host, info, True, "img", now)}
    assert all(c.ok for c in checks.values())
    assert checks["hostA clock"].detail == "+250 ms from this machine"
    assert "--no-new-keyring" in checks["hostA seccomp"].detail
    info["Swarm"] = {"LocalNodeState": "active", "NodeAddr": "10.0.0.9"}
    info["SystemTime"] = "2023-11-14T22:13:22+00:00"
    bad = {c.name: c for c in engine_checks(host, info, False, "img", now)}
    assert not bad["hostA address"].ok and not bad["hostA parent image"].ok
    assert not bad["hostA clock"].ok and "chrony" in bad["hostA clock"].fix
    inactive = engine_checks(host, {"Swarm": {"LocalNodeState": "inactive"}}, True, "img", now)
    assert [c.name for c in inactive if not c.ok] == ["hostA swarm", "hostA clock"]
    assert clock_skew("garbage", now) is None


@pytest.mark.unit
def test_doctor_hosts_without_engine_or_ovsdb_says_what_to_add():
    from nestednet.capabilities.hosts import host_checks

    checks = host_checks(pl.Host("hostA", "10.0.0.1"), "img")
    assert [(c.name, c.ok) for c in checks] == [("hostA engine", False), ("hostA ovs", False)]
    assert '"engine"' in checks[0].fix and '"ovsdb"' in checks[1].fix


# --- the control net: one tunnel per host to the CA's machine ------------------------------


@pytest.mark.unit
def test_control_tunnels_one_per_host_with_nodes_above_every_pair_vni():
    dp = plane(nodes=2)  # spread: n1 on hostA, n2 on hostB; hostC holds nothing
    hs = hosts(*TWO, {"name": "hostC", "address": "10.0.0.3"}, vni=100)
    ctl = tn.control_tunnels("lab", hs, dp.placement, "10.0.0.254")
    assert [(t.host, t.host_ip, t.ca_ip) for t in ctl] == [
        ("hostA", "10.0.0.1", "10.0.0.254"), ("hostB", "10.0.0.2", "10.0.0.254")]
    assert [t.vni for t in ctl] == [100 + 4032, 100 + 4033]
    # Above every host pair's VNI even with 64 hosts (2016 pairs), inside the lab's range.
    assert min(t.vni for t in ctl) > 100 + 64 * 63 // 2 - 1
    assert max(t.vni for t in ctl) < 100 + tn.VNI_PAIRS
    assert not {t.vni for t in ctl} & {t.vni for ts in dp.tunnels.values() for t in ts}
    assert [t.host_device for t in ctl] == ["lab-tc", "lab-tc"]  # one per host namespace
    assert [t.ca_device for t in ctl] == ["lab-c0", "lab-c1"]  # all in one namespace here


@pytest.mark.unit
def test_control_tunnel_names_fit_and_differ_from_every_other_lab_interface():
    shape = topo.Shape(9, 3)
    hs = hosts(*({"name": f"h{i}", "address": f"10.1.0.{i + 1}"} for i in range(64)))
    placement = {n: f"h{n * 7}" for n in range(1, 10)}
    ctl = tn.control_tunnels("abcdefgh", hs, placement, "10.1.1.1")
    data = tn.tunnels("abcdefgh", hs, placement)
    veths = {topo.veth_name("abcdefgh", n, role, c) for n in shape.node_numbers()
             for role in topo.VETH_ROLES for c in range(shape.iphys + 1)}
    names = [t.ca_device for t in ctl] + [ctl[0].host_device]
    assert all(len(n) <= topo.IFNAME_MAX for n in names)
    assert len(set(names)) == len(names)
    assert not set(names) & (veths | {t.name for ts in data.values() for t in ts}
                             | {topo.control_bridge("abcdefgh"), topo.main_bridge("abcdefgh")})


@pytest.mark.unit
def test_control_tunnels_refuse_a_host_with_the_ca_machines_own_address():
    with pytest.raises(UsageError, match="host hostB has the CA machine's own address"):
        tn.control_tunnels("lab", hosts(*TWO), {1: "hostA", 2: "hostB"}, "10.0.0.2")


@pytest.mark.unit
def test_control_mtu_leaves_room_for_vxlan_only():
    assert tn.control_mtu() == 1450 and tn.control_mtu(9000) == 8950
    assert tn.inner_mtu() == tn.control_mtu() - tn.TAG_OVERHEAD
