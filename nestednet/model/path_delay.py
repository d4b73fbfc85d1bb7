"""Measured RTT against the configured path delay, from a run's events alone (pure).

The second half of the run's fidelity self-check (the first, model.fidelity, holds
each shaped port against its configuration). For every answered probe of a `ping`
action, the path its packets took is read from the events in effect when it was sent:

* routes: a GNAB's route to a node address (``route`` events: ``dst``) goes ``via``
  one of its own iPHYs' intra-node addresses (192.168.0.(10+j) is iPHY j);
* links: that iPHY's link (``link_up`` ... ``link_down``, the ``resumed`` event's
  adopted links) leads to the next node, and its properties (``link_up`` /
  ``link_update``; what they name as ``dropped``, a rate-only run's delay and
  jitter, counts as 0) give the one-way delay of that direction;
* hop by hop to the destination, then back along the destination's routes.

The configured path RTT is the sum of those one-way delays, forward and back. Only
GNABs' routes are watched; a node relays between its own iPHYs along the route its
GNAB holds (its iPHYs learn the same babel routes and reach each other, and the
GNAB, over the same intra-node switch), so that is the hop taken here.

Where they part is judged against a bound fixed in advance and returned with the
figures (BOUND): a probe agrees when its RTT lies within
[configured - jitter - BELOW_MS, configured + jitter + BASE_MS + PER_DIRECTION_MS x
link directions crossed]. Packets cannot beat the configured delay (netem never
fires early; jitter is uniform within +-jitter), while every crossing of a link
adds forwarding through userspace OVS and veths (PLATFORM.md: 0.3 ms for one
netdev bridge against 0.05 ms on a bare veth) and, in the emulated VM, netem's late
timers (PLATFORM.md: up to 1.1 ms per delayed direction). A step parts when more
than half of its compared probes lie outside their bound.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network
from typing import Any

from nestednet.model.addressing import INTRA_NET, IPHY_HOST_OFFSET, NODE_NET
from nestednet.model.events import (
    LINK_DOWN,
    LINK_UP,
    LINK_UPDATE,
    PING,
    PLAY,
    RESUMED,
    ROUTE,
    STEP,
    Event,
    apply_route,
    percentile,
    placed,
)

BASE_MS = 1.0
"""Allowed above the configured RTT whatever the path: the two GNAB-iPHY hops at each
end, ping's own timing."""
PER_DIRECTION_MS = 1.0
"""Allowed above the configured RTT per link direction crossed (forward and back)."""
BELOW_MS = 0.1
"""Allowed below the configured RTT (ping's rounding, netem's ticks)."""
BOUND = {"base_ms": BASE_MS, "per_direction_ms": PER_DIRECTION_MS, "below_ms": BELOW_MS,
         "rule": "configured - jitter - below_ms <= RTT <= configured + jitter + base_ms "
                 "+ per_direction_ms x directions; a step parts when over half its "
                 "compared probes are outside"}


@dataclass(frozen=True)
class Path:
    """One probe's way there and back, and what its links were configured with."""

    forward: tuple[str, ...]
    back: tuple[str, ...]
    delay_ms: float
    """The sum of the one-way delays of every direction crossed, there and back."""
    jitter_ms: float

    @property
    def directions(self) -> int:
        return len(self.forward) - 1 + len(self.back) - 1

    def bounds(self) -> tuple[float, float]:
        """The RTTs (ms) this path agrees with (see the module docstring)."""
        return (self.delay_ms - self.jitter_ms - BELOW_MS,
                self.delay_ms + self.jitter_ms + BASE_MS + PER_DIRECTION_MS * self.directions)


@dataclass(frozen=True)
class Probe:
    """One ping probe: when it was sent (scenario s), its RTT, the step, its path."""

    sent: float
    step: int | None
    rtt_ms: float | None
    path: Path | None

    @property
    def error_ms(self) -> float | None:
        """Measured minus configured RTT; None without an answer or a known path."""
        if self.rtt_ms is None or self.path is None:
            return None
        return self.rtt_ms - self.path.delay_ms

    @property
    def outside(self) -> bool:
        if self.rtt_ms is None or self.path is None:
            return False
        low, high = self.path.bounds()
        return not low <= self.rtt_ms <= high


class Network:
    """Routes and links as the events left them at some moment, replayed in order."""

    def __init__(self) -> None:
        self.routes: dict[str, dict[str, str | None]] = {}
        """node -> destination node address -> next hop (an intra-node address)."""
        self.ports: dict[tuple[str, int], tuple[str, int]] = {}
        """(node, iPHY) -> (peer node, peer iPHY) of the link on it."""
        self.delay: dict[tuple[str, str], tuple[float, float]] = {}
        """(from node, to node) -> (delay, jitter) in ms of that direction of their link."""
        self.node_address: dict[str, str] = {}
        self.intra: IPv4Network = INTRA_NET

    def apply(self, e: Event) -> None:
        if e.event == PLAY:
            addresses = e.extra.get("addresses")
            if isinstance(addresses, Mapping):
                self.node_address = {str(n): str(a) for n, a in addresses.items()}
            if isinstance(e.extra.get("intra"), str):
                self.intra = IPv4Network(e.extra["intra"])
        elif e.event == STEP and not self.node_address and e.nodes:
            # Runs before the play event named addresses: the k-th node of the
            # scenario is lab node k, whose node address is the k-th of the net.
            self.node_address = {name: str(NODE_NET.network_address + k)
                                 for k, name in enumerate(e.nodes, 1)}
        elif e.event in (LINK_UP, LINK_UPDATE) and len(e.nodes) >= 2 and len(e.iphys) >= 2:
            (a, b), (ai, bi) = e.nodes[:2], e.iphys[:2]
            if e.event == LINK_UP:
                self._unlink(a, ai)
                self._unlink(b, bi)
                self.ports[(a, ai)], self.ports[(b, bi)] = (b, bi), (a, ai)
            props = e.extra.get("properties")
            props = props if isinstance(props, Mapping) else {}
            # A rate-only run records the properties it was given and names what it
            # left out of the kernel: that delay is configured nowhere.
            dropped = props.get("dropped") or ()
            for key, ends in (("a_to_b", (a, b)), ("b_to_a", (b, a))):
                side = props.get(key) if isinstance(props.get(key), Mapping) else {}
                self.delay[ends] = (
                    0.0 if "delay" in dropped else (side.get("delay_us") or 0) / 1000,
                    0.0 if "jitter" in dropped else (side.get("jitter_us") or 0) / 1000)
        elif e.event == LINK_DOWN and len(e.nodes) >= 2 and len(e.iphys) >= 2:
            self._unlink(e.nodes[0], e.iphys[0])
            self._unlink(e.nodes[1], e.iphys[1])
        elif e.event == RESUMED:
            for link in e.extra.get("links") or []:
                a, ai, b, bi = link
                self.ports[(a, ai)], self.ports[(b, bi)] = (b, bi), (a, ai)
        elif e.event == ROUTE and e.nodes:
            table = self.routes.setdefault(e.nodes[0], {})
            apply_route(table, str(e.extra.get("dst", "")).split("/")[0], e)

    def _unlink(self, node: str, iphy: int) -> None:
        peer = self.ports.pop((node, iphy), None)
        if peer is not None:
            self.ports.pop(peer, None)

    def _next(self, node: str, dst: str) -> str | None:
        """The node ``node`` hands a packet for ``dst``'s node address to, or None."""
        address = self.node_address.get(dst)
        via = self.routes.get(node, {}).get(address) if address is not None else None
        if via is None:
            return None
        try:
            host = int(IPv4Address(via)) - int(self.intra.network_address)
        except ValueError:
            return None  # not an intra-node address: not a hop we can follow
        peer = self.ports.get((node, host - IPHY_HOST_OFFSET))
        return peer[0] if peer is not None else None

    def hops(self, src: str, dst: str) -> tuple[str, ...] | None:
        """The nodes from ``src`` to ``dst`` along the routes, or None (no route, a
        route into no link, or a loop)."""
        nodes = [src]
        while nodes[-1] != dst:
            nxt = self._next(nodes[-1], dst)
            if nxt is None or nxt in nodes:
                return None
            nodes.append(nxt)
        return tuple(nodes)

    def path(self, src: str, dst: str) -> Path | None:
        forward, back = self.hops(src, dst), self.hops(dst, src)
        if forward is None or back is None:
            return None
        crossed = [self.delay.get(d)
                   for way in (forward, back) for d in itertools.pairwise(way)]
        if any(c is None for c in crossed):
            return None  # a link adopted on resuming whose link_up the file lacks
        return Path(forward, back, round(sum(c[0] for c in crossed if c), 6),
                    round(sum(c[1] for c in crossed if c), 6))


def probes(events: Iterable[Event]) -> dict[int, tuple[tuple[str, str], list[Probe]]]:
    """Per ping action (its index): its two nodes and every probe with the path in
    effect when it was sent (its answer's time less its RTT)."""
    timed = placed(events)
    changes = sorted(((t, n, e) for n, (t, e) in enumerate(timed) if e.event != PING),
                     key=lambda item: item[:2])
    pings = sorted((e.scenario_time - (e.extra.get("rtt_ms") or 0) / 1000, n, e)
                   for n, (_, e) in enumerate(timed) if e.event == PING and len(e.nodes) >= 2)
    network, k = Network(), 0
    out: dict[int, tuple[tuple[str, str], list[Probe]]] = {}
    for sent, _, e in pings:
        while k < len(changes) and changes[k][0] <= sent:
            network.apply(changes[k][2])
            k += 1
        src, dst = e.nodes[0], e.nodes[1]
        rtt = e.extra.get("rtt_ms")
        entry = out.setdefault(int(e.extra.get("index", 0)), ((src, dst), []))
        entry[1].append(Probe(round(sent, 6), e.step, None if rtt is None else float(rtt),
                              network.path(src, dst) if rtt is not None else None))
    return dict(sorted(out.items()))


def _way(nodes: tuple[str, ...]) -> str:
    return ">".join(nodes)


def step_rows(found: list[Probe]) -> list[dict[str, Any]]:
    """One row per step of one ping's probes (see summary)."""
    by_step: dict[int | None, list[Probe]] = {}
    for p in found:
        by_step.setdefault(p.step, []).append(p)
    rows = []
    for step in sorted(by_step, key=lambda s: -1 if s is None else s):
        group = by_step[step]
        compared = [p for p in group if p.error_ms is not None]
        outside = sum(p.outside for p in compared)
        paths = Counter((p.path.forward, p.path.back) for p in compared if p.path)
        common = paths.most_common(1)[0][0] if paths else None
        bounds = [p.path.bounds() for p in compared if p.path is not None and
                  (p.path.forward, p.path.back) == common]

        def p50(values: list[float]) -> float | None:
            value = percentile(values, 50)
            return None if value is None else round(value, 3)

        rows.append({
            "step": step, "from_s": round(min(p.sent for p in group), 3),
            "probes": len(group), "answered": sum(p.rtt_ms is not None for p in group),
            "compared": len(compared), "outside": outside,
            "forward": _way(common[0]) if common else None,
            "back": _way(common[1]) if common else None,
            "paths": len(paths),
            "configured_ms": p50([p.path.delay_ms for p in compared if p.path]),
            "measured_ms": p50([p.rtt_ms for p in compared if p.rtt_ms is not None]),
            "error_ms": p50([p.error_ms for p in compared if p.error_ms is not None]),
            "bound_ms": [round(bounds[0][0], 3), round(bounds[0][1], 3)] if bounds else None,
            "parts": bool(compared) and outside * 2 > len(compared)})
    return rows


def summary(events: Iterable[Event]) -> dict[str, Any]:
    """Per ping action: probes, answered, compared (answered with a path known both
    ways), outside their bound, and one row per step (``step_rows``: the most common
    path, configured and measured RTT and their difference, p50, and whether the step
    parts); ``parted``: the rows that part, with their ping. Empty without pings."""
    pings = []
    parted = []
    for index, ((src, dst), found) in probes(events).items():
        rows = step_rows(found)
        compared = [p for p in found if p.error_ms is not None]
        pings.append({"index": index, "nodes": [src, dst], "probes": len(found),
                      "answered": sum(p.rtt_ms is not None for p in found),
                      "compared": len(compared),
                      "outside": sum(p.outside for p in compared), "steps": rows})
        parted += [{"index": index, "nodes": [src, dst], **row} for row in rows
                   if row["parts"]]
    if not pings:
        return {}
    return {"bound": BOUND, "pings": pings, "parted": parted}
