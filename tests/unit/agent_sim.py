"""A sequential stand-in for the GNAB agents, for tests: settle every step of a scenario
with the link table and requests_to_send, recording the events the CA would write."""

from __future__ import annotations

from nestednet.model import events as ev
from nestednet.model.link_table import InterNodeLinks, LinkFail, LinkOk, requests_to_send
from nestednet.model.scenario import Scenario

PEER_REASONS = {"no_free_iphy", "not_visible", "link_exists", "mutual_already_won"}


def settle(table: InterNodeLinks, t: float, step: int, out: list[ev.Event]) -> None:
    """Every node asks until nobody can ask any more (round-robin, one request at a time)."""
    failed: dict[str, set[str]] = {n: set() for n in table.nodes}
    progress = True
    while progress:
        progress = False
        for node in table.nodes:
            linked = [lk.peer_of(node) for lk in table.links_of(node)]
            wanted = requests_to_send(table.free_iphys(node), table.visible_peers(node),
                                      linked, failed[node])
            if not wanted:
                continue
            peer, iphy = wanted[0]
            progress = True
            out.append(ev.Event(ev.LINK_REQUEST, t, step=step, nodes=(node, peer),
                                iphys=(iphy,)))
            answer = table.request(node, peer, iphy)
            if isinstance(answer, LinkOk):
                lk = answer.link
                out.append(ev.Event(ev.LINK_UP, t, step=step, nodes=(lk.src, lk.dst),
                                    iphys=(lk.src_iphy, lk.dst_iphy)))
            else:
                assert isinstance(answer, LinkFail)
                if answer.reason in PEER_REASONS:
                    failed[node].add(peer)
                out.append(ev.Event(ev.LINK_FAIL, t, step=step, nodes=(node, peer),
                                    iphys=(iphy,), reason=answer.reason.value))


def run(scenario: Scenario) -> tuple[InterNodeLinks, list[ev.Event], list[list[str]]]:
    """Play every step; returns the table, the events and the violations after each step."""
    table = InterNodeLinks(scenario.iphy_inventory())
    out: list[ev.Event] = []
    violations = []
    for i, step in enumerate(scenario.steps):
        out.append(ev.Event(ev.STEP, step.time, step=i, nodes=scenario.node_names,
                            visible=tuple(sorted(step.visible)), positions=step.positions))
        for lk in table.set_visibility(step.visible):
            out.append(ev.Event(ev.LINK_DOWN, step.time, step=i, nodes=(lk.src, lk.dst),
                                iphys=(lk.src_iphy, lk.dst_iphy)))
        settle(table, step.time, i, out)
        violations.append(table.violations() + [
            f"unlinked feasible pair {p}" for p in table.unlinked_feasible_pairs()])
    return table, out, violations
