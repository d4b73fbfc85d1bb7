"""Routing inside the nodes (issue 17): the pure parts."""

from __future__ import annotations

import json
import subprocess
from ipaddress import IPv4Address

import pytest
from click.testing import CliRunner
from pyroute2.netlink.rtnl.rtmsg import rtmsg

from nestednet.adapters.netlink import route_changes
from nestednet.agent import protocol as p
from nestednet.agent import routes
from nestednet.agent.gnab import Agent, AgentConfig
from nestednet.agent.routes import Peer, Route
from nestednet.bench import routing as bench_routing
from nestednet.bench.suite import names
from nestednet.cli import main as nestednet_main
from nestednet.errors import UsageError
from nestednet.lab.wiring import component_sysctls
from nestednet.model.addressing import AddressPlan, plan_from_dict
from nestednet.model.component_spec import COMPONENT_CAPS, parse_component_caps
from nestednet.model.events import ROUTE, STEP, Event, path_over_links, route_summary
from nestednet.model.topology import Shape
from nestednet.routing import babel, strategies

pytestmark = pytest.mark.unit


def plan(nodes: int = 5, iphys: int = 2) -> AddressPlan:
    return AddressPlan.for_shape(Shape(nodes, iphys))


def test_node_addresses_are_unique_and_clear_of_the_papers_nets() -> None:
    p = plan(300, 1)
    addresses = [p.node_address(i) for i in range(1, 301)]
    assert str(addresses[0]) == "10.100.0.1/32" and str(addresses[255]) == "10.100.1.0/32"
    assert len(set(addresses)) == 300
    for net in (p.intra, p.inter, p.control):
        assert not p.node.overlaps(net)
    assert p.node_of(IPv4Address("10.100.0.7")) == 7
    assert p.node_of(IPv4Address("10.100.2.0")) is None


def test_plans_recorded_before_node_addresses_still_load() -> None:
    data = plan().as_dict()
    old = {k: v for k, v in data.items() if k != "node"}
    assert plan_from_dict(Shape(5, 2), old) == plan_from_dict(Shape(5, 2), data)


def test_component_caps_parse_and_refuse() -> None:
    assert parse_component_caps("NET_ADMIN,NET_RAW") == COMPONENT_CAPS
    assert parse_component_caps("none") == ()
    assert parse_component_caps("cap_net_admin, net_admin") == ("NET_ADMIN",)
    with pytest.raises(UsageError, match="SYS_ADMIN"):
        parse_component_caps("NET_ADMIN,SYS_ADMIN")


def test_iphys_forward_and_nobody_follows_redirects() -> None:
    iphy, gnab = component_sysctls(1), component_sysctls(0)
    assert iphy["net/ipv4/ip_forward"] == "1" and "net/ipv4/ip_forward" not in gnab
    assert gnab["net/ipv4/ip_default_ttl"] == iphy["net/ipv4/ip_default_ttl"] == "255"
    assert gnab["net/ipv6/conf/all/hop_limit"] == "255"
    assert iphy["net/ipv4/conf/inter/rp_filter"] == "0"
    assert iphy["net/ipv4/conf/all/send_redirects"] == "0"
    assert gnab["net/ipv4/conf/intra/accept_redirects"] == "0"
    assert gnab["net/ipv6/conf/intra/disable_ipv6"] == "0"


def test_babel_announces_only_the_gnabs_node_address() -> None:
    p = plan()
    gnab, iphy = babel.statements(p, 3, 0), babel.statements(p, 3, 1)
    assert "redistribute local ip 10.100.0.3/32 allow" in gnab
    assert "install ip 10.100.0.0/16 ge 32 pref-src 10.100.0.3" in gnab
    assert not any("allow" in s and "redistribute" in s for s in iphy)
    assert "install ip 10.100.0.0/16 ge 32 pref-src 192.168.2.5" in iphy  # n3 iPHY1
    inter = [s for s in iphy if s.startswith("interface inter ")]
    # no split horizon (wireless), and hop count rather than ETX: no metric moves with a
    # hello that came late on a busy host
    assert len(inter) == 1 and " type wireless " in inter[0]
    assert inter[0].endswith(" link-quality false")
    assert not any(s.startswith("interface inter") for s in gnab)
    for lines in (gnab, iphy):
        assert lines[-2:] == ["redistribute local deny", "redistribute deny"]
        assert "in deny" in lines
        assert "smoothing-half-life 0" in lines  # no hysteresis: reconverges around a cut
    command = strategies.named("babel").daemon(p, 3, 1)
    assert command[0] == "babeld" and command.count("-C") == len(iphy)


def test_strategies_by_name() -> None:
    assert strategies.named("none").daemon(plan(), 1, 0) is None
    assert strategies.named("none").needs_caps == frozenset()
    assert "NET_ADMIN" in strategies.named("direct").needs_caps
    env = strategies.named("direct").environment(plan(), 2, 1)
    assert env["NESTEDNET_ROUTING"] == "direct" and env["NESTEDNET_NODE_ADDRESS"] == "10.100.0.2"
    with pytest.raises(UsageError):
        strategies.named("ospf")


IPHYS = {"iphy1": "192.168.0.11", "iphy2": "192.168.0.12"}
DIRECTORY = {"b": Peer("10.100.0.2", {"iphy1": "192.168.2.3", "iphy2": "192.168.2.4"}),
             "c": Peer("10.100.0.3", {"iphy1": "192.168.2.5", "iphy2": "192.168.2.6"})}


def test_direct_routes_follow_the_link_in_every_component() -> None:
    got = routes.node_routes({"b": ("iphy2", "iphy1")}, DIRECTORY, IPHYS, "10.100.0.1",
                             "192.168.0.1")
    assert got["gnab"] == [Route("10.100.0.2/32", "192.168.0.12", "intra", "10.100.0.1")]
    own = Route("10.100.0.1/32", "192.168.0.1", "intra")
    assert got["iphy2"] == [own, Route("10.100.0.2/32", "192.168.2.3", "inter")]
    assert got["iphy1"] == [own, Route("10.100.0.2/32", "192.168.0.12", "intra")]


def test_direct_routes_skip_peers_it_cannot_place() -> None:
    got = routes.node_routes({"zz": ("iphy1", "iphy1"), "c": ("iphy1", "iphy9")}, DIRECTORY,
                             IPHYS, "10.100.0.1", "192.168.0.1")
    assert got["gnab"] == []


def test_batch_replaces_wanted_and_deletes_stale_routes() -> None:
    wanted = [Route("10.100.0.2/32", "192.168.0.12", "intra", "10.100.0.1")]
    text = routes.batch(["10.100.0.2", "10.100.0.3"], wanted)
    assert text.splitlines() == [
        f"route del 10.100.0.3 proto {routes.ROUTE_PROTO}",
        f"route replace 10.100.0.2/32 via 192.168.0.12 dev intra proto {routes.ROUTE_PROTO} "
        "src 10.100.0.1"]
    assert routes.decode(routes.encode(wanted)) == wanted


def test_route_sync_applies_on_change_and_resends_on_poll() -> None:
    calls, sent = [], []

    def run(command, **kwargs):
        calls.append((command, kwargs.get("input")))
        return subprocess.CompletedProcess(command, 0, stdout="[]", stderr="")

    sync = routes.RouteSync(IPHYS, "10.100.0.1", "192.168.0.1", run=run,
                            send=lambda data, to: sent.append(to))
    sync.directory = DIRECTORY
    sync.sync({"b": ("iphy1", "iphy1")})
    assert len(calls) == 2 and "10.100.0.2/32 via 192.168.0.11" in calls[1][1]
    assert sorted(sent) == sorted(IPHYS.values())
    sync.sync({"b": ("iphy1", "iphy1")})
    assert len(calls) == 2 and len(sent) == 2
    sync.sync({"b": ("iphy1", "iphy1")}, resend=True)
    assert len(calls) == 2 and len(sent) == 4
    sync.sync({})
    assert "route del" not in calls[-1][1]  # "ip route show" answered [] in this fake
    assert len(calls) == 4


def test_iphy_routes_prefer_their_unique_inter_address() -> None:
    got = routes.node_routes({"b": ("iphy1", "iphy2")}, DIRECTORY, IPHYS, "10.100.0.1",
                             "192.168.0.1", {"iphy1": "192.168.2.1", "iphy2": "192.168.2.2"})
    assert got["iphy1"][1] == Route("10.100.0.2/32", "192.168.2.4", "inter", "192.168.2.1")
    assert got["iphy2"][0] == Route("10.100.0.1/32", "192.168.0.1", "intra", "192.168.2.2")


def test_the_agent_learns_the_directory_and_routes_its_links() -> None:
    config = AgentConfig(node="n1", ca_host="10.99.0.1", ca_port=6100, iphys=IPHYS,
                         poll_interval=0, state_file=None, routing="direct",
                         node_address="10.100.0.1")
    agent = Agent(config)
    applied, sent = [], []
    agent.routes._run = lambda command, **kw: (applied.append(kw.get("input")) or
                                               subprocess.CompletedProcess(command, 0, "[]", ""))
    agent.routes._send = lambda data, to: sent.append((to, routes.decode(data)))
    directory = {"a": {"address": "10.100.0.1", "iphys": {"iphy1": "192.168.2.1",
                                                          "iphy2": "192.168.2.2"}},
                 "b": {"address": "10.100.0.2", "iphys": {"iphy1": "192.168.2.3",
                                                          "iphy2": "192.168.2.4"}}}
    agent.handle(p.decode(p.encode(p.ID, node="a", node_id=1, control_ip="10.99.0.2",
                                   links=[], directory=directory)))
    agent.handle({"type": p.LINK_UP, "peer": "b", "local_iphy": "iphy2", "peer_iphy": "iphy1"})
    agent._sync_routes()
    assert any("10.100.0.2/32 via 192.168.0.12 dev intra" in (text or "") for text in applied)
    to_iphy2 = dict(sent)["192.168.0.12"]
    assert Route("10.100.0.2/32", "192.168.2.3", "inter", "192.168.2.2") in to_iphy2


def test_routing_bench_reads_the_first_answer_and_builds_lines() -> None:
    out = ("PING 10.100.0.5 (10.100.0.5) 56(84) bytes of data.\n"
           "[1700000000.100000] From 192.168.2.1 icmp_seq=3 Destination Host Unreachable\n"
           "[1700000001.250000] 64 bytes from 10.100.0.5: icmp_seq=12 ttl=56 time=3.1 ms\n")
    assert bench_routing.first_answer(out) == 1700000001.25
    assert bench_routing.first_answer("no answers\n") is None
    chain = bench_routing.line_links(3)
    assert [(str(a), str(b)) for a, b in chain] == [("n1:iphy2", "n2:iphy1"),
                                                    ("n2:iphy2", "n3:iphy1")]
    quick = bench_routing.params(True)
    assert max(quick["hops"]) + 1 <= 5 and max(quick["nodes"]) <= 8
    only = bench_routing.params(False, nodes=(48, 24, 48), repeats=5)
    assert only["hops"] == [] and only["nodes"] == [24, 48] and only["repeats"] == 5
    assert "routing" not in names("all") and names("routing") == ["routing"]


def test_route_summary_counts_changes_and_convergence_per_step() -> None:
    events = [Event(STEP, 0.0, wall_time=100.0, step=0),
              Event(ROUTE, 0.5, wall_time=100.5, step=0, nodes=("a",)),
              Event(ROUTE, 1.5, wall_time=101.75, step=0, nodes=("b",)),
              Event(ROUTE, 1.6, wall_time=101.5, step=0, nodes=("a",)),
              Event(STEP, 10.0, wall_time=110.0, step=1)]
    assert route_summary(events) == [
        {"step": 0, "changes": 3, "nodes": {"a": 2, "b": 1}, "converged_s": 1.75},
        {"step": 1, "changes": 0, "nodes": {}, "converged_s": None}]


def test_route_messages_from_netlink_are_read_as_changes() -> None:
    msg = rtmsg()
    msg["family"], msg["dst_len"], msg["table"], msg["proto"] = 2, 32, 254, 42
    msg["header"]["type"] = 24  # RTM_NEWROUTE
    msg["attrs"] = [("RTA_DST", "10.100.0.5"), ("RTA_GATEWAY", "192.168.0.12")]
    msg.encode()
    assert route_changes(msg.data) == [{"op": "add", "dst": "10.100.0.5/32",
                                        "via": "192.168.0.12", "proto": 42}]


def test_graph_path_takes_fewest_hops_over_links(tmp_path) -> None:
    ring = [("n1", "n2"), ("n2", "n3"), ("n3", "n4"), ("n4", "n5"), ("n1", "n5")]
    assert path_over_links(ring, "n1", "n4") == ["n1", "n5", "n4"]
    assert path_over_links(ring, "n1", "n3") == ["n1", "n2", "n3"]
    assert path_over_links(ring[:2], "n1", "n5") is None
    events = tmp_path / "events.jsonl"
    lines = [{"event": "step", "scenario_time": 0, "step": 0, "nodes": ["a", "b", "c"],
              "visible": [["a", "b"], ["b", "c"]]},
             {"event": "link_up", "scenario_time": 0.1, "step": 0, "nodes": ["a", "b"],
              "iphys": [1, 1]},
             {"event": "link_up", "scenario_time": 0.2, "step": 0, "nodes": ["b", "c"],
              "iphys": [2, 1]}]
    events.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = CliRunner().invoke(nestednet_main, ["graph", str(events), "--path", "a", "c",
                                                "-o", str(tmp_path / "p.png"), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["frames"][0]["path"] == ["a", "b", "c"]
    bad = CliRunner().invoke(nestednet_main, ["graph", str(events), "--path", "a", "zz",
                                             "-o", str(tmp_path / "q.png")])
    assert bad.exit_code == 2


def test_component_macs_are_fixed_and_distinct() -> None:
    p = plan()
    macs = {p.mac_address(n, c, i) for n in (1, 2, 300) for c in (0, 1, 2) for i in (1, 2)}
    assert len(macs) == 18
    assert p.mac_address(2, 1, 2) == "02:4e:00:02:01:02"  # locally administered, unicast
    assert p.mac_address(300, 0, 1) == "02:4e:01:2c:00:01"
