"""The iperf action's client waits for its server to listen (a CI run's client met
"Connection refused" after the fixed 0.3 s pause it had before). Jobs are stand-ins
here: what is checked is when the player starts which one, fed the lines iperf 3.12
prints (checked in nestednet/component: `iperf3 -s -1 ... --forceflush`)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest

from nestednet.ca import actions as ca_actions
from nestednet.model.scenario_file import parse_scenario

pytestmark = pytest.mark.unit

SERVER_BANNER = ["-----------------------------------------------------------",
                 "Server listening on 5203 (test #1)",
                 "-----------------------------------------------------------"]


class StandIn:
    """Records what the player started; `line` plays what the command would print."""

    started: ClassVar[list[StandIn]] = []

    def __init__(self, session, node, component, command, tag, on_line) -> None:
        self.node, self.command, self.on_line = node, command, on_line
        self.stopped = False
        self.exit_code, self.error = None, None
        StandIn.started.append(self)

    def line(self, text: str) -> None:
        self.on_line(text, 0.0)

    def stop(self, wait: float = 5.0) -> None:
        self.stopped = True


@pytest.fixture
def player(monkeypatch):
    StandIn.started = []
    monkeypatch.setattr(ca_actions, "Job", StandIn)
    doc = {"format": "nestednet-scenario/1", "name": "t", "duration": 20,
           "nodes": [{"name": "n1"}, {"name": "n2"}],
           "steps": [{"time": 0, "visible": [["n1", "n2"]]}],
           "actions": [{"action": "iperf", "time": 4, "src": "n1", "dst": "n2",
                        "duration": 5}]}
    scenario = parse_scenario(doc, "t")
    written: list[dict] = []
    session = SimpleNamespace(
        lab_node={"n1": 1, "n2": 2}, ca=SimpleNamespace(progress=SimpleNamespace(step=0)),
        events=SimpleNamespace(write=lambda event, **kw: written.append({"event": event,
                                                                          **kw})),
        directory=lambda: {"n1": {"address": "10.0.0.1"}, "n2": {"address": "10.0.0.2"}})
    play = ca_actions.ActionPlayer(scenario, session, Path("/nonexistent"))
    start, stop = sorted((c for c in play.cues), key=lambda c: c.time)
    return play, start, stop, written


def test_the_client_starts_once_the_server_listens_and_only_once(player):
    play, start, _stop, written = player
    play.play(start, 4.0)
    assert [j.node for j in StandIn.started] == ["n2"]
    assert StandIn.started[0].command[:2] == ["iperf3", "-s"]
    server = StandIn.started[0]
    server.line(SERVER_BANNER[0])
    assert len(StandIn.started) == 1
    server.line(SERVER_BANNER[1])
    assert [j.node for j in StandIn.started] == ["n2", "n1"]
    client = StandIn.started[1]
    assert client.command[:3] == ["iperf3", "-c", "10.0.0.2"]
    assert client.command[client.command.index("-B") + 1] == "10.0.0.1"
    server.line(SERVER_BANNER[1])
    server.line(SERVER_BANNER[2])
    assert len(StandIn.started) == 2
    assert [w for w in written if w["event"] == "iperf"] == []
    started = [w for w in written if w["event"] == "action" and w["op"] == "start"]
    assert len(started) == 1 and "error" not in started[0]


def test_a_stop_before_the_server_listens_leaves_no_client(player):
    play, start, stop, _written = player
    play.play(start, 4.0)
    server = StandIn.started[0]
    play.play(stop, 9.0)
    assert server.stopped
    server.line(SERVER_BANNER[1])
    assert len(StandIn.started) == 1


def test_close_stops_the_client_started_after_the_banner(player):
    play, start, _stop, _written = player
    play.play(start, 4.0)
    StandIn.started[0].line(SERVER_BANNER[1])
    play.close()
    assert [j.stopped for j in StandIn.started] == [True, True]
