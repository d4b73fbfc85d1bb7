"""Checks of a CA playing a scenario on a real lab, shared by the one-host and the
multi-host tests: Algorithm 1's invariants against the table and the flows, and
packets across (or not across) links, sent between the lab's own iPHYs."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from nestednet.ca.session import CaSession
from nestednet.lab.components import exec_in
from nestednet.lab.nodes import Lab
from nestednet.model.link_table import InterNodeLinks, Link
from nestednet.model.scenario import Scenario


def wait(cond, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def run_in(lab: Lab, node: str, component: str, *cmd: str) -> tuple[int, str]:
    chunks: list[bytes] = []
    code = exec_in(lab, node, component, list(cmd), chunks.append, chunks.append)
    return code, b"".join(chunks).decode(errors="replace")


def pings(lab: Lab, session: CaSession, src: str, src_iphy: int, dst: str,
          dst_iphy: int) -> bool:
    plan = session.links.plan
    target = plan.inter_address(session.lab_node[dst], dst_iphy).ip
    code, _ = run_in(lab, f"n{session.lab_node[src]}", f"iphy{src_iphy}",
                     "ping", "-c", "2", "-W", "1", "-i", "0.3", str(target))
    return code == 0


def check_table(table: InterNodeLinks, visible: frozenset, session: CaSession) -> None:
    """Algorithm 1's invariants hold, every feasible pair is linked, only visible pairs
    are, and the flows (on every host) are exactly the table's links."""
    assert table.violations() == []
    assert table.unlinked_feasible_pairs() == []
    for link in table.links():
        assert link.pair in visible
    on_bridge = {frozenset((a.node, b.node)) for a, b in session.links.links()}
    in_table = {frozenset((session.lab_node[lk.src], session.lab_node[lk.dst]))
                for lk in table.links()}
    assert on_bridge == in_table


def play_checked(lab: Lab, scenario: Scenario, events: Path
                 ) -> tuple[CaSession, list[list[Link]]]:
    """Play ``scenario`` step by step, each once settled: the table's invariants
    (`check_table`), packets across every link, none across a link lost. Returns the
    closed session and each step's links."""
    per_step: list[list[Link]] = []
    seen: list[Link] = []
    with CaSession(scenario, lab, events) as session:
        assert session.wait_for_hellos(120, threading.Event())
        for index, step in enumerate(scenario.steps):
            session.apply_step(index)
            wait(session.settled, f"step {index} to settle")
            time.sleep(0.3)
            check_table(session.table, step.visible, session)
            for link in session.table.links():
                assert pings(lab, session, link.src, link.src_iphy, link.dst, link.dst_iphy), \
                    f"no packets across {link} at step {index}"
            for old in seen:
                if old.pair not in step.visible:
                    assert not pings(lab, session, old.src, old.src_iphy, old.dst,
                                     old.dst_iphy), f"{old} still carries packets at step {index}"
            seen = session.table.links()
            per_step.append(seen)
    return session, per_step
