"""A host lost mid-run, as the CA and the host watch handle it (issue #32, item 3):
its nodes declared dead take their links down and stay out of later steps; the
watch declares a host lost only after enough missed probes in a row; the flows of a
lost host are never asked for again."""

from __future__ import annotations

import pytest
from test_ca_negotiation import _ca, _req

from nestednet.agent import protocol as p
from nestednet.ca.flows import HostsInstaller
from nestednet.errors import EnvironmentProblem
from nestednet.lab.host_watch import HostWatch, nodes_by_host

pytestmark = pytest.mark.unit


def _linked():
    """a-b, b-c and a-c linked (a and b on the host that will be lost: here only c stays)."""
    ca, wire, installer = _ca({"a": [1, 2], "b": [1, 2], "c": [1, 2]})
    ca.apply_step(0, 0.0, [("a", "b"), ("b", "c"), ("a", "c")])
    ca.on_messages([_req(1, "a", "b", 1), _req(2, "b", "c", 2, req_id=2),
                    _req(3, "c", "a", 1, req_id=3)])
    assert len(ca.table.links()) == 3
    return ca, wire, installer


def test_dead_nodes_lose_their_links_with_a_reason_and_stay_out_of_later_steps():
    ca, wire, installer = _linked()
    before = {k: len(v) for k, v in wire.sent.items()}
    gone = ca.declare_dead(["a"], "host h1 lost")
    assert sorted((lk.src, lk.dst) for lk in gone) == [("a", "b"), ("c", "a")]
    assert [(lk.src, lk.dst) for lk in ca.table.links()] == [("b", "c")]
    assert len(installer.installed) == 1
    downs = [e for e in ca.events.records if e.event == "link_down"]
    assert len(downs) == 2
    assert all(e.reason == "a dead: host h1 lost" for e in downs)
    # The living are told at once (a STEP without a), the dead one is not written to.
    assert wire.kinds(2)[before[2]:] == [p.STEP] and wire.kinds(3)[before[3]:] == [p.STEP]
    assert len(wire.sent[1]) == before[1]
    assert wire.sent[3][-1]["peers"] == ["b"]
    # A later step that sees a again does not give it back, nor a request of its own.
    ca.apply_step(1, 10.0, [("a", "b"), ("a", "c"), ("b", "c")])
    ca.on_messages([_req(1, "a", "c", 2, req_id=9)])
    assert [(lk.src, lk.dst) for lk in ca.table.links()] == [("b", "c")]
    assert wire.sent[1][-1]["type"] == p.LINK_FAIL
    assert ca.declare_dead(["a"], "again") == []  # once only


def test_declaring_dead_before_the_first_step_only_remembers():
    ca, _wire, _installer = _ca({"a": [1], "b": [1]})
    assert ca.declare_dead(["a", "unknown"], "host h1 lost") == []
    assert ca.dead == {"a": "host h1 lost"}
    ca.apply_step(0, 0.0, [("a", "b")])
    assert ca.visible == {"a": [], "b": []}


class FakeChannel:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_a_lost_hosts_part_of_a_batch_is_left_out(monkeypatch):
    installer = object.__new__(HostsInstaller)
    kept, lost = FakeChannel(), FakeChannel()
    installer._channels = {"h0": kept, "h1": lost}
    installer.lost, installer.timeout = set(), 10.0
    installer.done = lambda op, count, finished: None
    sent = {}

    def apply_all(channels, work, timeout):
        sent.update(work)
        return {h: 0.001 for h in work}, {}

    monkeypatch.setattr("nestednet.ca.flows.openflow.apply_all", apply_all)
    installer.lose("h1")
    assert lost.closed and "h1" not in installer._channels
    installer._apply("remove", 1, {"h0": ([], [5], []), "h1": ([], [5], [])})
    assert list(sent) == ["h0"]
    sent.clear()
    installer._apply("remove", 1, {"h1": ([], [5], [])})
    assert sent == {}


class Helper:
    def __init__(self, answers: list[bool]) -> None:
        self.answers = answers

    def call(self, op: str):
        assert op == "hello"
        if self.answers.pop(0):
            return {"version": 2}
        raise EnvironmentProblem("host h1: no helper at 10.0.0.2:6651 (timed out)")


def test_a_host_is_lost_after_misses_in_a_row_and_reported_once():
    watch = object.__new__(HostWatch)
    reported = []
    watch.on_lost = lambda host, nodes, error: reported.append((host, nodes, error))
    watch.misses, watch.lost, watch.missed = 3, {}, {}
    watch.nodes = {"h0": [1, 3], "h1": [2, 4]}
    # h1 misses twice, answers (the count starts again), then misses three times.
    watch._clients = {"h0": Helper([True] * 8),
                      "h1": Helper([False, False, True, False, False, False, False])}
    for _ in range(5):
        watch.check()
    assert reported == []
    watch.check()
    assert reported == [("h1", [2, 4], "host h1: no helper at 10.0.0.2:6651 (timed out)")]
    watch.check()
    assert len(reported) == 1 and watch.missed["h0"] == 0


def test_nodes_by_host_reads_the_placement_in_node_order():
    meta = {"placement": {"10": "h1", "2": "h0", "1": "h1", "3": "h0"}}
    assert nodes_by_host(meta) == {"h1": [1, 10], "h0": [2, 3]}


def test_a_removal_a_silent_host_holds_up_is_done_host_by_host(monkeypatch):
    """Before the watch declares a host lost, a step may take one of its links down: the
    batch times out on that host, and the others still drop the link's flows."""
    installer = object.__new__(HostsInstaller)
    installer.lost, installer.timeout = set(), 10.0
    channels = {"h0": FakeChannel(), "h1": FakeChannel()}
    installer._channels = dict(channels)
    opened = []

    def channel(host, timeout=None):
        opened.append((host, timeout))
        installer._channels[host] = FakeChannel()
        return installer._channels[host]

    installer._channel = channel
    reported = []
    installer.done = lambda op, count, finished: reported.append((op, count, finished))
    applied = []

    def apply_all(chs, work, timeout):
        if "h1" in work:
            raise EnvironmentProblem("no answer within 10 s from the bridge at tcp:h1:6653")
        applied.append((sorted(work), timeout))
        return {h: 0.002 for h in work}, {}

    monkeypatch.setattr("nestednet.ca.flows.openflow.apply_all", apply_all)
    work = {"h0": ([], [7], []), "h1": ([], [7], [])}
    installer._apply = lambda op, count, w: apply_all(None, w, 10.0)
    installer.dp = type("DP", (), {"hosts_of_link": lambda self, a, b: ["h0", "h1"]})()
    installer._ends = lambda link: link
    installer.links = type("L", (), {"cookie": lambda self, a, b: 7})()
    installer.remove([("a", "b")])
    assert all(c.closed for c in channels.values())  # their open bundles go with them
    assert opened == [("h0", 2.0), ("h1", 2.0)]
    assert applied == [(["h0"], 2.0)]
    assert reported == [("remove", 1, {"h0": 0.002})]
    assert work  # unchanged input
