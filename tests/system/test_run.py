"""The CA on a real lab: links follow visibility, packets follow links, agents rejoin.

A 4-node x 2-iPHY lab (real Docker-in-Docker nodes, real OVS, GNAB agents in their
children) with scenarios/small-4x2.json stepped by hand, so each step can be
checked once it has settled.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from ca_checks import check_table, play_checked, run_in, wait
from labs import module_lab

from nestednet.ca.session import CaSession
from nestednet.lab.nodes import Lab
from nestednet.model.scenario_file import load_scenario

pytestmark = pytest.mark.system

ROOT = Path(__file__).resolve().parents[2]
LAB = "tca"


@pytest.fixture(scope="module")
def lab():
    with module_lab(LAB, nodes=4, iphys=2):
        yield Lab.open(LAB)


def test_links_follow_visibility_and_carry_packets(lab: Lab, tmp_path: Path):
    scenario = load_scenario(ROOT / "scenarios" / "small-4x2.json")
    session, _links = play_checked(lab, scenario, tmp_path / "events.jsonl")
    assert session.events.counts["link_up"] >= 1
    assert session.events.counts["link_down"] >= 1
    assert session.links.links() == [], "the CA left flows behind"


def test_agent_restart_rejoins_with_consistent_table(lab: Lab, tmp_path: Path):
    scenario = load_scenario(ROOT / "scenarios" / "small-4x2.json")
    with CaSession(scenario, lab, tmp_path / "events.jsonl") as session:
        assert session.wait_for_hellos(120, threading.Event())
        session.apply_step(0)
        wait(session.settled, "step 0 to settle")
        before = session.table.links()
        victim = scenario.nodes[0].name
        lab_name = f"n{session.lab_node[victim]}"
        code, out = run_in(lab, lab_name, "gnab", "pkill", "-f", "nestednet.agent")
        assert code == 0, out
        wait(lambda: victim not in session.ca.sessions.by_node, "the agent to drop")
        wait(lambda: victim in session.ca.sessions.by_node, "the agent to come back", 60)
        wait(lambda: session.ca.events.counts["hello"] >= len(scenario.nodes) + 1,
              "its second HELLO")
        assert session.table.links() == before
        assert session.table.violations() == []
        if len(scenario.steps) > 1:
            session.apply_step(1)
            wait(session.settled, "step 1 to settle after the restart")
            check_table(session.table, scenario.steps[1].visible, session)
