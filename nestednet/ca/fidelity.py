"""The run's fidelity self-check: at the end of every step, for every shaped link
direction, what the kernel holds (tc over netlink, nestednet.lab.shaping) against what
was configured (model.fidelity), with the leaf's drops and backlog; one `fidelity`
event per direction. A tree changed behind NestedNet's back shows as a mismatch."""

from __future__ import annotations

from typing import Any

from nestednet.ca.assistant import ends_of
from nestednet.model import events as ev
from nestednet.model.fidelity import differences


class FidelityCheck:
    """Checks one run's shaped links; `step_done` is the player's on_step_done."""

    def __init__(self, session: Any) -> None:
        """``session``: nestednet.ca.session.CaSession (which imports this module)."""
        self.session = session

    def step_done(self, index: int) -> None:
        shaping = self.session.shaping
        if shaping is None:
            return
        self.session.server.call(lambda: self._check(index), 30)

    def _check(self, index: int) -> None:
        """On the CA thread: the links and their configured shapes cannot move meanwhile."""
        session, shaping = self.session, self.session.shaping
        policy = shaping.shaper.policy
        directions = [(link, d) for link in (ends_of(x) for x in session.table.links())
                      for d in shaping.directions(link)]
        if not directions:
            return
        kernel = shaping.shaper.read([d.port for _, d in directions])
        progress = session.ca.progress
        for link, d in directions:
            held = kernel.get(d.port)
            found = differences(policy.shape(d.properties), held, policy.netem)
            session.events.write(
                ev.FIDELITY, scenario_time=progress.scenario_time, step=index,
                nodes=[link.a, link.b], port=d.port, direction=d.name,
                configured=d.properties.as_dict(), kernel=held, matched=not found,
                differences=found, checked_step=index)
