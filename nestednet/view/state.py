"""What the live view shows, replayed from a run's events (pure: no I/O).

One `ViewState` is fed events in file order (and, for a lab, the links its flow
table holds) and answers `snapshot()`: the plain data the page draws. The page
holds no logic of its own beyond drawing, so every figure it shows is computed
here, where unit tests can check it against hand-counted events.

Replaying to a step is "every event stamped with that step or an earlier one, in
file order": the CA stamps each event with the step in effect when it happened
(nestednet.model.step_figures relies on the same), so the state after step k is
exact however the wall clock ran.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nestednet.model import events as ev
from nestednet.model.line_of_sight import Pair, Position, pair
from nestednet.model.scenario import LENGTH_UNITS, Scenario

EARTH_RADIUS_KM = 6371.0
FEED_LENGTH = 300
"""Events kept for the page's feed (the newest)."""


def circle_layout(names: Sequence[str]) -> dict[str, Position]:
    """Nodes without positions, evenly on a unit circle (as `nestednet graph` draws them)."""
    count = max(1, len(names))
    return {name: (round(math.cos(2 * math.pi * i / count), 6),
                   round(math.sin(2 * math.pi * i / count), 6), 0.0)
            for i, name in enumerate(names)}


def globe_radius(positions: Mapping[str, Position], length_unit: str | None) -> float | None:
    """The Earth's radius in the positions' unit when they look like orbits or ground
    stations around the Earth's centre (ECEF), else None (a flat or local scene).

    A stated unit is trusted; without one, kilometres are assumed when the median
    distance from the origin lies between the Earth's radius and 50,000 km, and metres
    when it lies between the same bounds times 1,000."""
    if not positions:
        return None
    norms = sorted(math.sqrt(x * x + y * y + z * z) for x, y, z in positions.values())
    median = norms[len(norms) // 2]
    units = [length_unit] if length_unit in LENGTH_UNITS else list(LENGTH_UNITS)
    for unit in units:
        radius = EARTH_RADIUS_KM * 1000 / LENGTH_UNITS[unit]
        if 0.98 * radius <= median <= radius * 50000 / EARTH_RADIUS_KM:
            return radius
    return None


@dataclass
class LinkView:
    """One link up now: its ends, its properties per direction, where it came from."""

    a: str
    a_iphy: int
    b: str
    b_iphy: int
    origin: str
    """"run" (the CA made it), "manual" (`link add`, read from the flow table)."""
    properties: dict[str, Any] | None = None
    """{"a_to_b": P, "b_to_a": P}, each P {rate_bps, delay_us, jitter_us, loss_pct} or
    None (unshaped); None when nothing is known."""
    since: float | None = None
    """Scenario time it came up (run links)."""
    latency_ms: float | None = None

    @property
    def key(self) -> Pair:
        return pair(self.a, self.b)

    def link_class(self) -> str:
        shaped = self.properties is not None and any(
            p is not None for p in self.properties.values())
        return f"{self.origin}, {'shaped' if shaped else 'unshaped'}"

    def as_dict(self) -> dict[str, Any]:
        return {"a": self.a, "a_iphy": self.a_iphy, "b": self.b, "b_iphy": self.b_iphy,
                "class": self.link_class(), "origin": self.origin,
                "properties": self.properties, "delay_ms": _worst(self.properties, "delay_us",
                                                                   1000.0),
                "rate_mbps": _worst(self.properties, "rate_bps", 1e6, lowest=True),
                "since": self.since, "latency_ms": self.latency_ms}


def _worst(properties: Mapping[str, Any] | None, key: str, scale: float,
           lowest: bool = False) -> float | None:
    """The larger (or, for rates, smaller) of the two directions' values, scaled."""
    values = [p[key] for p in (properties or {}).values()
              if isinstance(p, Mapping) and isinstance(p.get(key), int | float)]
    if not values:
        return None
    return round((min(values) if lowest else max(values)) / scale, 3)


@dataclass
class StepRow:
    step: int
    time: float
    requests: int = 0
    refused: int = 0
    links_up: int = 0
    links_down: int = 0
    links: int = 0
    latencies: list[float] = field(default_factory=list)
    route_changes: int = 0
    wall: float | None = None
    last_route_wall: float | None = None


def describe_event(e: ev.Event) -> str:
    """One line of the page's feed."""
    ends = " ↔ " if e.event in (ev.LINK_UP, ev.LINK_DOWN, ev.LINK_UPDATE) else " → "
    names = [f"{n}:iphy{i}" if i >= 0 else n for n, i in zip(e.nodes, e.iphys, strict=False)]
    names += list(e.nodes[len(names):])
    text = e.event.replace("_", " ")
    if e.event == ev.STEP:
        text += f" {e.step}: {len(e.visible)} visible pairs"
    elif e.event == ev.ROUTE:
        text += (f" {e.nodes[0] if e.nodes else '?'} {e.extra.get('op', '')} "
                 f"{e.extra.get('dst', '')} via {e.extra.get('via') or '-'}")
    elif names:
        text += " " + ends.join(names)
    if e.reason:
        text += f" ({e.reason})"
    if e.latency_ms is not None:
        text += f" {e.latency_ms:.1f} ms"
    props = e.extra.get("properties")
    if isinstance(props, Mapping):
        a_to_b = props.get("a_to_b")
        if isinstance(a_to_b, Mapping):
            text += " " + _short_properties(a_to_b)
    if e.event == ev.SHAPING:
        text += f" {e.extra.get('mode', '')}"
    return text


def _short_properties(p: Mapping[str, Any]) -> str:
    parts = []
    if p.get("rate_bps"):
        parts.append(f"{p['rate_bps'] / 1e6:g} Mbit/s")
    if p.get("delay_us"):
        parts.append(f"{p['delay_us'] / 1000:g} ms")
    if p.get("loss_pct"):
        parts.append(f"{p['loss_pct']:g} %")
    return ", ".join(parts) or "unshaped"


class ViewState:
    """The lab and its run as the page draws them; feed it events and link reads."""

    def __init__(self, nodes: Sequence[str], *, title: str = "", kind: str = "",
                 scenario: Scenario | None = None,
                 scenario_links: Mapping[int, Mapping[Pair, Mapping[str, Any]]] | None = None
                 ) -> None:
        self.title = title
        self.kind = kind
        self.scenario = scenario
        self.scenario_links = scenario_links or {}
        """Per step, visible pair -> the properties the scenario resolves for it (a
        scenario alone: there is no run to say what was applied)."""
        self.nodes: list[str] = list(nodes)
        self.time: float | None = None
        self.step: int | None = None
        self.visible: tuple[Pair, ...] = ()
        self.positions: dict[str, Position] = {}
        self.links: dict[Pair, LinkView] = {}
        self.feed: deque[dict[str, Any]] = deque(maxlen=FEED_LENGTH)
        self.steps: dict[int, StepRow] = {}
        self.counts: dict[str, int] = {}
        self.events_seen = 0
        self.version = 0
        """Bumped on every change: the server sends a snapshot when it moved."""
        self._pending_step_time: dict[int, float] = {}

    # --- feeding ------------------------------------------------------------------

    def apply(self, events: Iterable[ev.Event]) -> None:
        changed = False
        for e in events:
            changed = True
            self._apply_one(e)
        if changed:
            self.version += 1

    def _apply_one(self, e: ev.Event) -> None:
        self.events_seen += 1
        self.counts[e.event] = self.counts.get(e.event, 0) + 1
        if e.event != ev.LINK_REQUEST:
            self.feed.append({"t": e.scenario_time, "step": e.step, "event": e.event,
                              "text": describe_event(e)})
        if e.scenario_time is not None:
            self.time = e.scenario_time if self.time is None else max(self.time,
                                                                       e.scenario_time)
        row = self.steps.get(e.step) if e.step is not None else None
        if e.event == ev.STEP and e.step is not None:
            self.step = e.step
            self.time = e.scenario_time
            if e.nodes:
                self.nodes = list(e.nodes)
            self.visible = tuple(e.visible)
            if e.positions:
                self.positions = dict(e.positions)
            self.steps[e.step] = StepRow(e.step, e.scenario_time, links=len(self.links),
                                         wall=e.wall_time)
            return
        if e.event == ev.LINK_REQUEST and row is not None:
            row.requests += 1
        elif e.event == ev.LINK_FAIL and row is not None:
            row.refused += 1
        elif e.event in (ev.LINK_UP, ev.LINK_UPDATE):
            props = e.extra.get("properties")
            props = dict(props) if isinstance(props, Mapping) else None
            key = pair(e.nodes[0], e.nodes[1])
            if e.event == ev.LINK_UPDATE and key in self.links:
                self.links[key].properties = props
            else:
                self.links[key] = LinkView(e.nodes[0], e.iphys[0], e.nodes[1], e.iphys[1],
                                           "run", props, e.scenario_time, e.latency_ms)
            if e.event == ev.LINK_UP and row is not None:
                row.links_up += 1
                if e.latency_ms is not None:
                    row.latencies.append(e.latency_ms)
        elif e.event == ev.LINK_DOWN:
            self.links.pop(pair(e.nodes[0], e.nodes[1]), None)
            if row is not None:
                row.links_down += 1
        elif e.event == ev.ROUTE and row is not None:
            row.route_changes += 1
            if e.wall_time is not None:
                row.last_route_wall = max(row.last_route_wall or e.wall_time, e.wall_time)
        if row is not None:
            row.links = len(self.links)

    def set_links(self, links: Iterable[LinkView]) -> None:
        """The links a lab's flow table holds now: they replace what events said."""
        new = {link.key: link for link in links}
        for key, link in new.items():
            old = self.links.get(key)
            if old is not None and old.origin == "run":
                link.origin, link.since, link.latency_ms = "run", old.since, old.latency_ms
                link.properties = link.properties or old.properties
        if {k: v.as_dict() for k, v in new.items()} != \
                {k: v.as_dict() for k, v in self.links.items()}:
            self.links = new
            self.version += 1

    # --- reading ------------------------------------------------------------------

    def current_positions(self) -> dict[str, Position]:
        return self._positions()[0]

    def _positions(self) -> tuple[dict[str, Position], str]:
        """Positions in effect and where they come from: the step event's ("events"), else
        the scenario's at this step ("scenario"), else a circle ("circle")."""
        if self.positions:
            return self.positions, "events"
        s = self.scenario
        if s is not None and s.steps:
            index = self.step if self.step is not None and self.step < len(s.steps) else 0
            if s.steps[index].positions is not None:
                return dict(s.steps[index].positions), "scenario"
        return circle_layout(self.nodes), "circle"

    def summary(self) -> dict[str, Any]:
        """Per step: links standing, requests, refusals, link_up latency (median), route
        changes and convergence (last route change after the step began)."""
        rows = [self.steps[k] for k in sorted(self.steps)]
        latencies = [x for r in rows for x in r.latencies]
        return {
            "step": [r.step for r in rows],
            "time": [r.time for r in rows],
            "links": [r.links for r in rows],
            "requests": [r.requests for r in rows],
            "refused": [r.refused for r in rows],
            "links_up": [r.links_up for r in rows],
            "links_down": [r.links_down for r in rows],
            "latency_p50_ms": [ev.percentile(r.latencies, 50) for r in rows],
            "latency_max_ms": [max(r.latencies) if r.latencies else None for r in rows],
            "route_changes": [r.route_changes for r in rows],
            "converged_s": [round(r.last_route_wall - r.wall, 3)
                            if r.last_route_wall is not None and r.wall is not None else None
                            for r in rows],
            "totals": {"links": len(self.links), "events": self.events_seen,
                       "requests": self.counts.get(ev.LINK_REQUEST, 0),
                       "refused": self.counts.get(ev.LINK_FAIL, 0),
                       "links_up": self.counts.get(ev.LINK_UP, 0),
                       "links_down": self.counts.get(ev.LINK_DOWN, 0),
                       "routes": self.counts.get(ev.ROUTE, 0),
                       "latency_p50_ms": ev.percentile(latencies, 50),
                       "latency_p90_ms": ev.percentile(latencies, 90)},
        }

    def snapshot(self) -> dict[str, Any]:
        positions, origin = self._positions()
        unit = self.scenario.length_unit if self.scenario is not None else None
        resolved = self.scenario_links.get(self.step if self.step is not None else -1, {})
        return {
            "title": self.title, "kind": self.kind, "version": self.version,
            "time": self.time, "step": self.step,
            "steps_total": len(self.scenario.steps) if self.scenario is not None else None,
            "length_unit": unit, "positions_from": origin,
            "globe_radius": globe_radius(positions, unit) if origin != "circle" else None,
            "nodes": [{"name": n, "position": list(positions.get(n, (0.0, 0.0, 0.0)))}
                      for n in self.nodes],
            "visible": [{"a": a, "b": b, "properties": resolved.get((a, b)),
                         "delay_ms": _worst(resolved.get((a, b)), "delay_us", 1000.0),
                         "rate_mbps": _worst(resolved.get((a, b)), "rate_bps", 1e6,
                                             lowest=True)}
                        for a, b in self.visible],
            "links": [link.as_dict() for _, link in sorted(self.links.items())],
            "summary": self.summary(),
            "feed": list(self.feed)[-80:],
        }


def replay(events: Sequence[ev.Event], step: int | None, make: Any) -> ViewState:
    """A fresh state (``make()``) fed every event up to the end of ``step`` (None: all)."""
    state = make()
    if step is None:
        state.apply(events)
        return state
    upto = []
    for e in events:
        if e.step is not None and e.step > step:
            break
        upto.append(e)
    state.apply(upto)
    return state


def scenario_events(scenario: Scenario) -> list[ev.Event]:
    """A scenario's steps as the `step` events a run would record (no links: no run)."""
    return [ev.Event(ev.STEP, s.time, step=i, nodes=scenario.node_names,
                     visible=tuple(sorted(s.visible)), positions=s.positions)
            for i, s in enumerate(scenario.steps)]
