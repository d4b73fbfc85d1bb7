"""Scenario actions (nestednet.model.actions): parsing, located refusals, the timeline."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from nestednet.cli import main as cli
from nestednet.errors import UsageError
from nestednet.model.actions import (
    Cut,
    churn_nodes,
    crashed_nodes,
    effective_visible,
    in_effect,
    timeline,
)
from nestednet.model.scenario_file import parse_scenario
from nestednet.model.scenario_native import to_native

pytestmark = pytest.mark.unit


def doc(actions: list[dict], **extra: object) -> dict:
    return {"format": "nestednet-scenario/1", "duration": 30, "iphys": 2,
            "nodes": [{"name": f"n{i}"} for i in range(1, 5)],
            "steps": [{"time": 0, "visible": [["n1", "n2"], ["n2", "n3"], ["n3", "n4"],
                                              ["n1", "n4"]]}],
            "actions": actions} | extra


def refused(actions: list[dict], **extra: object) -> str:
    with pytest.raises(UsageError) as info:
        parse_scenario(doc(actions, **extra), "s.json")
    return str(info.value)


def test_every_kind_parses_and_survives_a_round_trip():
    actions = [
        {"action": "exec", "time": 1, "until": 5, "node": "n1", "command": ["sleep", "9"]},
        {"action": "crash", "time": 2, "node": "n2", "component": "iphy1"},
        {"action": "restart", "time": 4, "node": "n2", "component": "iphy1"},
        {"action": "link-down", "time": 3, "between": ["n1", "n2"]},
        {"action": "link-up", "time": 6, "between": ["n2", "n1"]},
        {"action": "flap", "from": 10, "until": 14, "between": ["n3", "n4"], "period": 2},
        {"action": "partition", "from": 20, "until": 25, "groups": [["n1", "n2"], ["n3"]]},
        {"action": "churn", "from": 26, "until": 28, "percent": 50, "seed": 3},
        {"action": "ping", "from": 0, "src": "n1", "dst": "n3", "interval": 0.5},
        {"action": "iperf", "time": 1, "src": "n1", "dst": "n4", "duration": 5,
         "protocol": "udp", "rate": "5M"},
        {"action": "capture", "from": 1, "until": 3, "node": "n1", "component": "iphy2"},
    ]
    scenario = parse_scenario(doc(actions), "s.json")
    assert [a.kind for a in scenario.actions] == [a["action"] for a in actions]
    assert scenario.actions[8].end == 30  # 'from' without 'until': to the end
    again = parse_scenario(to_native(scenario), "again")
    assert [a.raw for a in again.actions] == actions


def test_bad_input_is_located():
    text = refused([
        {"action": "exec", "time": 1, "node": "n9", "command": ["true"]},
        {"action": "crash", "time": 1, "node": "n1", "component": "iphy3"},
        {"action": "ping", "from": 5, "until": 40, "src": "n1", "dst": "n2"},
        {"action": "partition", "from": 1, "groups": [["n1", "n2"], ["n3", "n1"]]},
        {"action": "iperf", "time": 1, "src": "n2", "dst": "n2", "duration": 3},
        {"action": "iperf", "time": 28, "src": "n1", "dst": "n2", "duration": 5},
        {"action": "flap", "from": 1, "until": 2, "between": ["n1", "x"], "period": 1},
    ])
    for line in ("actions[0].node: unknown node 'n9'",
                 "actions[1].component: no component iphy3 in n1",
                 "actions[2].until: 40 is beyond the scenario's end (30 s)",
                 "actions[3].groups[1][1]: node 'n1' is named twice (also groups[0][0])",
                 "actions[4].dst: iperf from a node to itself ('n2')",
                 "actions[5].duration: the iperf ends at 33 s",
                 "actions[6].between[1]: unknown node 'x'"):
        assert line in text, text


def test_schema_errors_are_located():
    text = refused([{"action": "explode", "time": 1},
                    {"action": "crash", "node": "n1"},
                    {"action": "ping", "time": 1, "src": "n1", "dst": "n2", "colour": 1}])
    assert "actions[0].action: the action is one of" in text
    assert "actions[1]: an action has either 'time'" in text
    assert "actions[2]: unknown field(s)" in text


@pytest.mark.parametrize(("actions", "expected"), [
    ([{"action": "link-down", "from": 1, "until": 9, "between": ["n1", "n2"]},
      {"action": "flap", "from": 5, "until": 12, "between": ["n2", "n1"], "period": 2}],
     "actions[1]: this flap overlaps actions[0] link-down (1-9 s)"),
    ([{"action": "link-up", "time": 3, "between": ["n1", "n2"]}],
     "actions[0]: link-up of n1-n2 with no link-down of that pair before it"),
    ([{"action": "restart", "time": 3, "node": "n1"}],
     "actions[0]: restart of n1 with no crash of it before"),
    ([{"action": "crash", "time": 3, "node": "n1"}, {"action": "crash", "time": 5,
                                                     "node": "n1"}],
     "actions[1]: n1 is crashed already (actions[0] crash)"),
    ([{"action": "degrade", "from": 1, "until": 9, "between": ["n1", "n2"], "factor": 2},
      {"action": "degrade", "from": 8, "between": ["n1", "n2"], "factor": 3}],
     "actions[1]: this degrade overlaps actions[0] degrade (1-9 s)"),
])
def test_overlaps_that_cannot_be_played(actions, expected):
    extra = {"link_model": {"model": "fixed", "params": {"delay": "5ms"}}}
    assert expected in refused(actions, **extra)


def test_degrade_needs_shaped_links():
    assert "this scenario shapes no link" in refused(
        [{"action": "degrade", "from": 1, "between": ["n1", "n2"], "factor": 2}])


def test_cuts_remove_pairs_from_visibility():
    visible = {("n1", "n2"), ("n2", "n3"), ("n3", "n4"), ("n1", "n4")}
    assert effective_visible(visible, [Cut(pairs=frozenset({("n1", "n2")}))]) == \
        visible - {("n1", "n2")}
    # a partition {n1,n2} | {n3}: n2-n3 crosses; n4 is in no group and keeps its links
    part = Cut(groups=(frozenset({"n1", "n2"}), frozenset({"n3"})))
    assert effective_visible(visible, [part]) == visible - {("n2", "n3")}
    assert effective_visible(visible, [Cut(nodes=frozenset({"n4"}))]) == \
        {("n1", "n2"), ("n2", "n3")}


def test_flap_expands_into_halves_and_link_down_pairs_with_link_up():
    scenario = parse_scenario(doc([
        {"action": "flap", "from": 10, "until": 14, "between": ["n3", "n4"], "period": 2},
        {"action": "link-down", "time": 3, "between": ["n1", "n2"]},
        {"action": "link-up", "time": 6, "between": ["n1", "n2"]}]), "s")
    cues = [(c.time, c.op, c.key) for c in timeline(scenario.actions, scenario.duration)]
    assert cues == [(3, "cut", "a1"), (6, "uncut", "a1"),
                    (10, "cut", "a0"), (11, "uncut", "a0"), (12, "cut", "a0"),
                    (13, "uncut", "a0")]


def test_crash_of_a_node_freezes_it_and_cuts_its_links_until_restart():
    scenario = parse_scenario(doc([{"action": "crash", "time": 5, "node": "n2"},
                                   {"action": "restart", "time": 8, "node": "n2"}]), "s")
    cues = timeline(scenario.actions, scenario.duration)
    assert [(c.time, c.op) for c in cues] == [(5, "crash"), (5, "cut"), (8, "uncut"),
                                              (8, "restart")]
    assert cues[1].cut == Cut(nodes=frozenset({"n2"}))


def test_faults_in_effect_at_a_resume_time_are_those_begun_and_not_yet_ended():
    """Worked by hand from the cues: a flap 10-14 (period 2: down 10-11, 12-13), a
    link-down 3 until its link-up at 6, n2 crashed 5-20, a partition from 8 to the end,
    a degrade 2-4, a ping (a measurement: never a fault)."""
    scenario = parse_scenario(doc([
        {"action": "flap", "from": 10, "until": 14, "between": ["n3", "n4"], "period": 2},
        {"action": "link-down", "time": 3, "between": ["n1", "n2"]},
        {"action": "link-up", "time": 6, "between": ["n1", "n2"]},
        {"action": "crash", "from": 5, "until": 20, "node": "n2"},
        {"action": "partition", "from": 8, "groups": [["n1"], ["n3"]]},
        {"action": "degrade", "from": 2, "until": 4, "between": ["n1", "n4"], "factor": 2},
        {"action": "ping", "from": 1, "src": "n1", "dst": "n3"}],
        link_model={"model": "fixed", "params": {"delay": "5ms"}}), "s")
    cues = timeline(scenario.actions, scenario.duration)

    def held(t: float) -> list[tuple[str, str]]:
        return [(c.op, c.key) for c in in_effect(cues, t)]

    assert held(0) == [] and held(2) == []  # a cue at t itself is played by the run
    assert held(3.5) == [("degrade", "a5"), ("cut", "a1")]
    assert held(5.5) == [("cut", "a1"), ("crash", "crash:n2:"), ("cut", "crash:n2:")]
    # the link-up at 6 is a cue the resumed run plays itself: the cut holds until then
    assert held(6) == held(5.5)
    assert held(6.5) == [("crash", "crash:n2:"), ("cut", "crash:n2:")]
    assert held(10.5) == [("crash", "crash:n2:"), ("cut", "crash:n2:"), ("cut", "a4"),
                          ("cut", "a0")]
    assert held(11.5) == [("crash", "crash:n2:"), ("cut", "crash:n2:"), ("cut", "a4")]
    assert held(25) == [("cut", "a4")]
    assert crashed_nodes(cues, 5.5) == {"n2"} and crashed_nodes(cues, 20.5) == frozenset()
    component = parse_scenario(doc([{"action": "crash", "from": 1, "until": 9,
                                     "node": "n2", "component": "iphy1"}]), "s")
    assert [c.op for c in in_effect(timeline(component.actions, 30), 2)] == ["crash"]
    assert crashed_nodes(timeline(component.actions, 30), 2) == frozenset()


def test_churn_picks_a_seeded_share():
    names = [f"u{i}" for i in range(1, 13)]
    picked = churn_nodes(names, 25, 7)
    assert len(picked) == 3 and set(picked) <= set(names)
    assert churn_nodes(names, 25, 7) == picked
    assert len(churn_nodes(names, 1, 0)) == 1


def test_visibility_check_exits_2_on_a_bad_action(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc([{"action": "iperf", "time": 1, "src": "n1", "dst": "n1",
                                     "duration": 2}])))
    result = CliRunner().invoke(cli, ["visibility", "check", str(path)])
    assert result.exit_code == 2
    assert "actions[0].dst: iperf from a node to itself" in result.output


def test_ping_and_iperf_lines_as_the_tools_print_them():
    """Lines copied from iputils ping -D -O and iperf3 3.12 -f k on this machine."""
    from nestednet.ca.actions import _IPERF_LINE, _PING_LOST, _PING_REPLY

    reply = _PING_REPLY.match("[1795708855.796126] 64 bytes from 127.0.0.1: icmp_seq=1 "
                              "ttl=64 time=0.043 ms")
    assert reply and reply.groups() == ("1795708855.796126", "1", "0.043")
    lost = _PING_LOST.match("[1795708856.100000] no answer yet for icmp_seq=7")
    assert lost and lost.group(2) == "7"
    unreachable = _PING_LOST.match("[1795708856.2] From 10.255.0.1 icmp_seq=9 Destination "
                                   "Host Unreachable")
    assert unreachable and unreachable.group(2) == "9"
    interval = _IPERF_LINE.match("[  5]   1.00-2.00   sec  2.14 GBytes  18370162 "
                                 "Kbits/sec                  ")
    assert interval and interval.group(1, 2, 3, 4) == ("1.00", "2.00", "18370162", "K")
    total = _IPERF_LINE.match("[  5]   0.00-2.00   sec  4.33 GBytes  18589185 Kbits/sec"
                              "                  receiver")
    assert total and "receiver" in total.group(5)
    assert _IPERF_LINE.match("[ ID] Interval           Transfer     Bitrate") is None
