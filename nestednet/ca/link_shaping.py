"""The CA's shaping hook: each link's properties per step (LinkResolver), made real on the
lab's iPHY ports (nestednet.lab.shaping.LabShaper).

The CA calls it at three moments, so the assistant itself stays about negotiation:

* ``up``: links the CA just granted, *before* their flows go in;
* ``update``: at every step, for the links that stay up: properties that changed
  are changed in place (tc change), the rest is not touched;
* ``down``: links taken down, *after* their flows are gone.

Before the run, ``check`` walks every step once: a property this kernel cannot
emulate stops the run with exit 2 (naming sch_netem) before anything is made,
unless the user chose rate-only; what that choice leaves out is reported for the
``shaping`` event. A pair a link model says cannot link (a laser beyond its range)
is not offered to the agents at all (``linkable``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from nestednet.ca.assistant import LinkEnds
from nestednet.lab.links import LabLinks
from nestednet.lab.shaping import Direction, LabShaper, direction, iphy_port
from nestednet.model import topology as topo
from nestednet.model.actions import degraded
from nestednet.model.link_properties import LinkProperties
from nestednet.model.link_resolver import LinkResolver

EndpointOf = Callable[[str, str], topo.Endpoint]
"""(scenario node, iPHY name) -> the lab endpoint."""


class RunShaping:
    """Shapes a run's links step by step; all calls come from the CA's server thread."""

    def __init__(self, resolver: LinkResolver, shaper: LabShaper, endpoint_of: EndpointOf,
                 lab: str, links: LabLinks | None = None) -> None:
        """``links``: where each iPHY's port is (a lab over several hosts shapes each
        direction on its receiving port's host); None: this machine."""
        self.resolver = resolver
        self.shaper = shaper
        self.endpoint_of = endpoint_of
        self.lab = lab
        self.links = links
        self.step = 0
        self.factors: dict[frozenset[str], float] = {}
        """Pairs under a degrade action: their properties scaled (model.actions.degraded)."""
        self.timings: list[dict[str, Any]] = []
        self.gone: set[str] = set()
        """Nodes whose host was lost mid-run: their ports' trees cannot be reached and
        are left to `delete` / `cleanup --hosts`."""

    def check(self) -> dict[str, Any]:
        """Refuse what the kernel cannot do (UsageError); the ``shaping`` event's fields."""
        dropped: set[str] = set()
        policy = self.shaper.policy
        for i in range(len(self.resolver.scenario.steps)):
            for (a, b), props in self.resolver.step_properties(i).items():
                if props is None:
                    continue
                policy.check(props, f"steps[{i}] {a}->{b}")
                dropped.update(policy.dropped(props))
        return {**policy.as_dict(), "dropped": sorted(dropped)}

    def linkable(self, step: int, pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """The visible pairs a link may join (both directions have properties)."""
        return [(a, b) for a, b in pairs
                if self.resolver.properties_for(step, a, b) is not None
                and self.resolver.properties_for(step, b, a) is not None]

    def set_step(self, step: int) -> None:
        self.step = step

    def _directions(self, link: LinkEnds) -> tuple[Direction, Direction]:
        a = self.endpoint_of(link.a, link.a_iphy)
        b = self.endpoint_of(link.b, link.b_iphy)
        forward = self.resolver.properties_for(self.step, link.a, link.b) or LinkProperties()
        backward = self.resolver.properties_for(self.step, link.b, link.a) or LinkProperties()
        factor = self.factors.get(frozenset((link.a, link.b)))
        if factor is not None:
            forward, backward = degraded(forward, factor), degraded(backward, factor)
        return (direction(self.lab, a, b, forward, self.links),
                direction(self.lab, b, a, backward, self.links))

    def directions(self, link: LinkEnds) -> tuple[Direction, Direction]:
        """Both directions of a link as they are shaped now (the fidelity check's
        configured side)."""
        return self._directions(link)

    def _payload(self, pair: tuple[Direction, Direction]) -> dict[str, Any]:
        policy = self.shaper.policy
        dropped = sorted(set(policy.dropped(pair[0].properties))
                         | set(policy.dropped(pair[1].properties)))
        return {"a_to_b": pair[0].properties.as_dict(), "b_to_a": pair[1].properties.as_dict(),
                "dropped": dropped}

    def up(self, links: list[LinkEnds]) -> dict[LinkEnds, dict[str, Any]]:
        """Shape new links (before their flows); their properties, for the link_up events."""
        pairs = {link: self._directions(link) for link in links}
        self.shaper.up([d for pair in pairs.values() for d in pair])
        return {link: self._payload(pair) for link, pair in pairs.items()}

    def update(self, links: Iterable[LinkEnds]) -> dict[LinkEnds, dict[str, Any]]:
        """Change links that stay up in place; the changed ones, for link_update events.

        Where the time goes is kept per step in ``timings`` (resolving the properties,
        then the tc changes and the state file).
        """
        began = time.perf_counter()
        pairs = {link: self._directions(link) for link in links}
        resolved = time.perf_counter()
        changed = {d.port for d in self.shaper.change([d for p in pairs.values() for d in p])}
        done = time.perf_counter()
        out = {link: self._payload(pair) for link, pair in pairs.items()
               if pair[0].port in changed or pair[1].port in changed}
        self.timings.append({"step": self.step, "links": len(pairs), "changed": len(out),
                             "resolve_ms": round((resolved - began) * 1000, 3),
                             "tc_ms": round((done - resolved) * 1000, 3)})
        return out

    def down(self, links: list[LinkEnds]) -> None:
        """Remove the trees of links taken down (after their flows)."""
        self.shaper.down([iphy_port(self.lab, self.endpoint_of(node, iphy)) for link in links
                          for node, iphy in ((link.a, link.a_iphy), (link.b, link.b_iphy))
                          if node not in self.gone])
