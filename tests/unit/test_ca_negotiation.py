"""CA and GNAB agents negotiating over real TCP on loopback, with the real link table.

The flow installer here only records what it is asked: this test is about the
protocol and Algorithm 1 as the agents drive it. Real flows on a real bridge are
checked by the system tests of `nestednet run`.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from nestednet.agent import protocol as p
from nestednet.agent.gnab import Agent, AgentConfig
from nestednet.ca.assistant import CommunicationAssistant, EventLog, LinkEnds
from nestednet.ca.server import ControlServer, listen
from nestednet.model.events import read_events
from nestednet.model.link_table import InterNodeLinks

pytestmark = pytest.mark.unit

NODES = ["n1", "n2", "n3", "n4"]
IPHYS = 2


class RecordingInstaller:
    def __init__(self) -> None:
        self.installed: set[LinkEnds] = set()
        self.batches: list[int] = []

    def install(self, links: list[LinkEnds]) -> None:
        self.batches.append(len(links))
        self.installed |= set(links)

    def remove(self, links: list[LinkEnds]) -> None:
        self.installed -= set(links)


@pytest.fixture
def lab(tmp_path):
    table = InterNodeLinks({n: range(1, IPHYS + 1) for n in NODES})
    server = ControlServer(listen("127.0.0.1", 0))
    installer = RecordingInstaller()
    ca = CommunicationAssistant(server, table, installer,
                                node_ids={n: i for i, n in enumerate(NODES, 1)},
                                control_ips={n: f"10.0.0.{i}" for i, n in enumerate(NODES, 2)},
                                events=EventLog(tmp_path / "events.jsonl"))
    server.start(ca)
    port = server.address[1]
    agents, threads = {}, []
    for n in NODES:
        agent = Agent(AgentConfig(node=n, ca_host="127.0.0.1", ca_port=port,
                                  iphys={f"iphy{j}": f"192.168.0.{10 + j}"
                                         for j in range(1, IPHYS + 1)}, poll_interval=0))
        agents[n] = agent
        thread = threading.Thread(target=agent.run, daemon=True)
        thread.start()
        threads.append(thread)
    _wait(lambda: ca.hello_seen == set(NODES), "every HELLO")
    yield server, ca, table, installer, agents
    for agent in agents.values():
        agent.stop()
    for thread in threads:
        thread.join(timeout=5)
    server.stop()


def _wait(cond, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _play(server, ca, pairs) -> None:
    server.call(lambda: ca.apply_step(ca.progress.step + 1, 0.0, pairs), 5)


def _settled(table, agents) -> bool:
    with table.lock:
        quiet = all(not a.state.pending for a in agents.values())
        return quiet and not table.unlinked_feasible_pairs()


def _agent_views_match(table, agents) -> None:
    for node, agent in agents.items():
        believed = {peer: mine for peer, (mine, _) in agent.state.links.items()}
        actual = {lk.peer_of(node): f"iphy{lk.iphy_of(node)}" for lk in table.links_of(node)}
        assert believed == actual, node


def test_steps_settle_with_invariants(lab):
    server, ca, table, installer, agents = lab
    steps = [
        [("n1", "n2"), ("n2", "n3"), ("n3", "n4"), ("n1", "n4"), ("n1", "n3")],
        [("n1", "n2"), ("n3", "n4")],
        [("n1", "n3"), ("n2", "n4"), ("n1", "n2")],
    ]
    for pairs in steps:
        _play(server, ca, pairs)
        _wait(lambda: _settled(table, agents), "the step to settle")
        time.sleep(0.2)
        assert table.violations() == []
        assert table.unlinked_feasible_pairs() == []
        linked = {frozenset((lk.src, lk.dst)) for lk in table.links()}
        assert linked <= {frozenset(pair) for pair in pairs}
        assert {frozenset((e.a, e.b)) for e in installer.installed} == linked
        _wait(lambda: _agent_views_match_bool(table, agents), "agents to agree")
        _agent_views_match(table, agents)
    recorded = read_events(ca.events.path)
    kinds = {e.event for e in recorded}
    assert {"step", "link_request", "link_up", "link_down"} <= kinds
    assert sum(e.event == "step" for e in recorded) == len(steps)
    ups = [e for e in recorded if e.event == "link_up"]
    assert all(len(e.iphys) == 2 and min(e.iphys) >= 1 for e in ups)


def _agent_views_match_bool(table, agents) -> bool:
    try:
        _agent_views_match(table, agents)
    except AssertionError:
        return False
    return True


def test_agent_restart_rejoins_and_reconciles(lab):
    server, ca, table, _installer, agents = lab
    _play(server, ca, [("n1", "n2"), ("n3", "n4")])
    _wait(lambda: _settled(table, agents), "first settle")
    before = table.links()
    old = agents["n1"]
    old.stop()
    _wait(lambda: "n1" not in ca.sessions.by_node, "n1 to disconnect")
    fresh = Agent(AgentConfig(node="n1", ca_host="127.0.0.1", ca_port=server.address[1],
                              iphys={"iphy1": "x", "iphy2": "y"}, poll_interval=0))
    thread = threading.Thread(target=fresh.run, daemon=True)
    thread.start()
    agents["n1"] = fresh
    try:
        _wait(lambda: "n1" in ca.sessions.by_node and fresh.state.node_id == 1, "re-HELLO")
        _wait(lambda: _agent_views_match_bool(table, agents), "reconciled view")
        assert table.links() == before
        assert table.violations() == []
    finally:
        fresh.stop()
        thread.join(timeout=5)


def test_hostile_messages_never_crash_the_ca(lab):
    server, ca, table, _installer, agents = lab
    with socket.create_connection(server.address, timeout=5) as sock:
        sock.sendall(b"not json\n{\"type\": \"LINK_REQ\"}\n[1,2]\n")
        sock.sendall(p.encode(p.HELLO, node="n1", iphys=[]).replace(b"n1", b"n1\"x"))
        sock.sendall(b'{"type":"LINK_REQ","req_id":1,"src_node":"n2","dst_node":"n1",'
                     b'"src_iphy":"iphy1"}\n')
        reader = p.LineReader()
        replies: list[dict] = []
        deadline = time.monotonic() + 5
        while len(replies) < 5 and time.monotonic() < deadline:
            replies += [p.decode(line) for line in reader.feed(sock.recv(65536))]
        assert [r["type"] for r in replies] == [p.ERROR] * 5
        assert "another node's session" in replies[-1]["error"]
        sock.sendall(b"x" * (p.MAX_LINE + 10))
        time.sleep(0.2)
    _play(server, ca, [("n1", "n2")])
    _wait(lambda: _settled(table, agents), "settle after abuse")
    assert [(lk.src, lk.dst) for lk in table.links()] in ([("n1", "n2")], [("n2", "n1")])


def test_mutual_requests_make_exactly_one_link(lab):
    server, ca, table, _installer, agents = lab
    for _ in range(5):
        _play(server, ca, [])
        _wait(lambda: not table.links(), "links down")
        _play(server, ca, [("n1", "n2")])
        _wait(lambda: _settled(table, agents), "settle")
        assert len(table.links()) == 1
        assert table.violations() == []


def test_agents_with_more_iphys_than_the_scenario_do_not_storm(tmp_path):
    """Agents of 4-iPHY nodes in a 2-iPHY scenario: only iphy1/iphy2 are offered."""
    table = InterNodeLinks({n: range(1, 3) for n in ("n1", "n2", "n3")})
    server = ControlServer(listen("127.0.0.1", 0))
    ca = CommunicationAssistant(server, table, RecordingInstaller(),
                                node_ids={"n1": 1, "n2": 2, "n3": 3},
                                control_ips=dict.fromkeys(("n1", "n2", "n3"), "10.0.0.9"),
                                events=EventLog(tmp_path / "events.jsonl"))
    server.start(ca)
    agents = {n: Agent(AgentConfig(node=n, ca_host="127.0.0.1", ca_port=server.address[1],
                                   iphys={f"iphy{j}": "x" for j in range(1, 5)},
                                   poll_interval=0)) for n in ("n1", "n2", "n3")}
    threads = [threading.Thread(target=a.run, daemon=True) for a in agents.values()]
    for thread in threads:
        thread.start()
    try:
        _wait(lambda: ca.hello_seen == {"n1", "n2", "n3"}, "every HELLO")
        _play(server, ca, [("n1", "n2"), ("n2", "n3"), ("n1", "n3")])
        _wait(lambda: _settled(table, agents), "settle")
        time.sleep(0.5)
        assert table.violations() == []
        assert len(table.links()) == 3
        # First wave: each node asks both peers (6). A request refused because an incoming
        # link took its iPHY meanwhile may be retried once with another iPHY. Before the
        # fix, agents re-asked from iphy3/iphy4 without end (2605 requests in 3 s).
        assert ca.events.counts["link_request"] <= 12, ca.events.counts
    finally:
        for agent in agents.values():
            agent.stop()
        for thread in threads:
            thread.join(timeout=5)
        server.stop()


def test_player_reports_each_step_and_pictures_are_written(tmp_path):
    """Player.play calls on_step_done once per played step, in order; StepPictures draws
    one PNG for each from this run's own events."""
    from pathlib import Path
    from types import SimpleNamespace

    from nestednet.ca.player import Player
    from nestednet.ca.session import StepPictures
    from nestednet.model.scenario_file import load_scenario

    scenario = load_scenario(Path(__file__).resolve().parents[2] / "scenarios" / "small-4x2.json")
    table = InterNodeLinks(scenario.iphy_inventory())
    server = ControlServer(listen("127.0.0.1", 0))
    ca = CommunicationAssistant(server, table, RecordingInstaller(),
                                node_ids={n.name: n.node_id for n in scenario.nodes},
                                control_ips=dict.fromkeys(scenario.node_names, "10.0.0.9"),
                                events=EventLog(None))
    server.start(ca)
    done: list[int] = []
    try:
        session = SimpleNamespace(server=server, events=ca.events)
        with StepPictures(scenario, session, tmp_path / "plots") as pictures:
            def step_done(index: int) -> None:
                done.append(index)
                pictures.step_done(index)

            result = Player(scenario, server, ca, speed=300).play(threading.Event(),
                                                                 on_step_done=step_done)
    finally:
        server.stop()
    assert result.steps_played == len(scenario.steps) and not result.interrupted
    assert done == list(range(len(scenario.steps)))
    pngs = sorted((tmp_path / "plots").glob("step-*.png"))
    assert [p.name for p in pngs] == [f"step-{i:03d}.png" for i in range(1, 4)]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
