"""The run's event record: one JSON object per line, written by the CA, read by `graph`.

Every record has ``event`` (a kind below), ``scenario_time`` (seconds on the
scenario clock) and, when the writer knows them, ``wall_time`` (Unix seconds) and
``step`` (index of the step in effect). By kind:

- ``step``: a step took effect. ``nodes``: every node of the lab; ``visible``: the
  visible pairs ``[[a, b], ...]``; ``positions`` (optional): ``{node: [x, y, z]}``.
- ``link_request``: ``nodes: [src, dst]``, ``iphys: [src_iphy]``; ``sent_wall``
  (optional): when the agent sent it (Unix seconds, the host's clock); ``agent_step``
  (optional): the step the agent had been told of when it asked; ``received_wall``
  (optional): when the CA read it; ``held_ms`` (optional): how long it waited there.
  Recorded when it is decided.
- ``link_up``: ``nodes: [a, b]``, ``iphys: [a_iphy, b_iphy]`` (a requested);
  ``latency_ms`` (optional): from the visibility change to the flows installed;
  ``flows_ms``/``flows_wall`` (optional): how long its batch's flow install took
  and when it was done; ``batch``: links installed in that batch;
  ``properties`` (when the run shapes links): ``{"a_to_b": P, "b_to_a": P}``,
  each P ``{rate_bps, delay_us, jitter_us, loss_pct}`` as applied (rate null:
  not limited), and ``dropped``: properties a rate-only run left out.
- ``link_update``: a link that stays up got new properties in place (tc change):
  ``nodes``, ``iphys`` and ``properties`` as for ``link_up``; ``latency_ms``: from
  the step's start to the change applied.
- ``shaping``: once, before the first step of a run that shapes links: ``mode``
  (``full`` or ``rate-only``), ``netem`` (whether netem leaves are used),
  ``shaper``, and ``dropped``: properties the scenario sets that this mode leaves
  out.
- ``link_fail``: ``nodes: [src, dst]``, ``iphys: [src_iphy]``, ``reason``.
- ``link_down``: ``nodes: [a, b]``, ``iphys: [a_iphy, b_iphy]``; ``latency_ms``
  (optional): from the visibility loss to the flows removed.
- ``route``: a route to a node address changed in a node's GNAB (seen from the host,
  whatever routes: `--routing direct|babel` or the user's code). ``nodes: [node]``;
  ``op`` add|del, ``dst``, ``via`` (the next hop, or null).
- ``host_flows`` (labs over several hosts only): a batch of the CA's flow changes is
  in on every host it touched. ``op`` add|remove; ``links``: links in the batch;
  ``hosts_ms``: ``{host: ms}`` from the batch's start until that host had applied its
  bundle; ``spread_ms``: the last host's time minus the first's (0 for one host), i.e.
  how far apart the hosts changed. The ``link_up``/``link_down`` events of that batch
  follow it (adds) or precede it (removes).

- ``resumed``: `nestednet run --resume` took over a run whose process died, at this
  scenario time. ``links``: the links it found and kept, ``[a, a_iphy, b, b_iphy]``
  each; ``pid``: the process that took over. The steps before it are the dead run's.
- ``play``: the scenario clock started: ``t0_wall`` (Unix seconds of scenario time 0)
  and ``speed``; an event's scenario time is then (wall_time - t0_wall) x speed, which
  the CA's own events (stamped with the time of the step or action cue they follow)
  only approximate.
- ``action``: a scenario action's cue was played (nestednet.model.actions). ``action``:
  its kind, ``op`` (cut, uncut, crash, restart, degrade, undegrade, start, stop),
  ``index`` in the scenario's ``actions``; per op ``visible_after`` (pairs left visible),
  ``target``, ``factor``, ``output``, ``exit_codes``; ``error`` when it failed.
- ``ping``: one probe of a ping action: ``nodes: [src, dst]``, ``index``, ``seq``,
  ``rtt_ms`` (null: no answer). ``scenario_time`` is when ping printed it.
- ``iperf``: one interval of an iperf action: ``nodes: [client, server]``, ``index``,
  ``protocol``, ``interval: [start, end]`` (scenario seconds), ``bps``; ``summary``
  (sender|receiver) on iperf3's totals; ``error`` when it could not run.

- ``fidelity``: at the end of step ``checked_step``, one shaped direction of a link:
  ``nodes``, ``port`` (the receiving port), ``direction``, ``configured`` (properties),
  ``kernel`` (what tc holds: rate, delay, jitter, loss, drops, backlog; null: no tree),
  ``matched`` and ``differences`` (text per property that differs).

- ``oom``: the kernel killed a process in a component that went past its memory limit
  (`create --memory`): ``nodes: [node]``, ``component``, ``kills`` (new since the last
  look, once a second), ``oom_kills`` (the component's count so far), ``memory_mb``
  (its limit; null: none, the kill came from the host's own memory) and ``links``: the
  node's links when it was seen, which the kill does not change.

- ``host_lost`` (labs over several hosts): a host's helper stopped answering during the
  run (nestednet.lab.host_watch), so its nodes are dead for the rest of it. ``nodes``:
  the dead nodes; ``host``; ``error``: the last probe's; ``links``: the links of theirs
  that come down now (a ``link_down`` each follows, its ``reason`` naming the host).

Fields not listed are kept in ``extra`` so writers can add more without breaking
readers; records of unknown kinds are kept too (callers ignore what they don't use).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nestednet.errors import UsageError
from nestednet.model.limits import finite_number
from nestednet.model.line_of_sight import Pair, Position, pair

STEP = "step"
LINK_REQUEST = "link_request"
LINK_UP = "link_up"
LINK_FAIL = "link_fail"
LINK_DOWN = "link_down"
LINK_UPDATE = "link_update"
SHAPING = "shaping"
ROUTE = "route"
HOST_FLOWS = "host_flows"
RESUMED = "resumed"
ACTION = "action"
PING = "ping"
IPERF = "iperf"
FIDELITY = "fidelity"
PLAY = "play"
OOM = "oom"
HOST_LOST = "host_lost"
KINDS = (STEP, LINK_REQUEST, LINK_UP, LINK_FAIL, LINK_DOWN, LINK_UPDATE, SHAPING, ROUTE,
         HOST_FLOWS, RESUMED, ACTION, PING, IPERF, FIDELITY, PLAY)

_KNOWN_FIELDS = {"event", "scenario_time", "wall_time", "step", "nodes", "iphys", "visible",
                 "positions", "reason", "latency_ms"}
_NODES_NEEDED = {LINK_REQUEST: 2, LINK_UP: 2, LINK_FAIL: 2, LINK_DOWN: 2, LINK_UPDATE: 2}
_IPHYS_NEEDED = {LINK_REQUEST: 1, LINK_UP: 2, LINK_FAIL: 1, LINK_DOWN: 2, LINK_UPDATE: 2}


@dataclass(frozen=True)
class Event:
    event: str
    scenario_time: float
    wall_time: float | None = None
    step: int | None = None
    nodes: tuple[str, ...] = ()
    iphys: tuple[int, ...] = ()
    visible: tuple[Pair, ...] = ()
    positions: Mapping[str, Position] | None = None
    reason: str | None = None
    latency_ms: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"event": self.event, "scenario_time": self.scenario_time}
        if self.wall_time is not None:
            out["wall_time"] = self.wall_time
        if self.step is not None:
            out["step"] = self.step
        if self.nodes:
            out["nodes"] = list(self.nodes)
        if self.iphys:
            out["iphys"] = list(self.iphys)
        if self.event == STEP:
            out["visible"] = [list(p) for p in self.visible]
        if self.positions is not None:
            out["positions"] = {n: list(p) for n, p in self.positions.items()}
        if self.reason is not None:
            out["reason"] = self.reason
        if self.latency_ms is not None:
            out["latency_ms"] = self.latency_ms
        out.update(self.extra)
        return out

    def to_line(self) -> str:
        """One line of the events file (no trailing newline)."""
        return json.dumps(self.to_dict(), separators=(",", ":"), allow_nan=False)


def parse_event(record: Any, where: str) -> Event:
    """One decoded record; UsageError naming ``where`` (e.g. 'events.jsonl line 7')."""
    def bad(message: str) -> UsageError:
        return UsageError(f"{where}: {message}")

    if not isinstance(record, dict):
        raise bad("expected a JSON object")
    kind = record.get("event")
    if not isinstance(kind, str):
        raise bad("'event' is missing or not a string")
    t = record.get("scenario_time")
    if not finite_number(t):
        raise bad("'scenario_time' is missing or not a finite number")
    wall = record.get("wall_time")
    if wall is not None and not finite_number(wall):
        raise bad("'wall_time' is not a finite number")
    step = record.get("step")
    if step is not None and (not isinstance(step, int) or isinstance(step, bool) or step < 0):
        raise bad("'step' is not a non-negative integer")
    nodes = record.get("nodes", [])
    if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
        raise bad("'nodes' is not a list of node names")
    iphys = record.get("iphys", [])
    if not isinstance(iphys, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in iphys):
        raise bad("'iphys' is not a list of integers")
    if len(nodes) < _NODES_NEEDED.get(kind, 0):
        raise bad(f"a {kind} record needs 'nodes': [{_placeholders(kind)}]")
    if len(iphys) < _IPHYS_NEEDED.get(kind, 0):
        raise bad(f"a {kind} record needs {_IPHYS_NEEDED[kind]} iPHY number(s) in 'iphys'")
    visible = _parse_visible(record.get("visible", []), bad)
    positions = _parse_positions(record.get("positions"), bad)
    reason = record.get("reason")
    latency = record.get("latency_ms")
    if latency is not None and not finite_number(latency):
        raise bad("'latency_ms' is not a finite number")
    return Event(event=kind, scenario_time=float(t),
                 wall_time=float(wall) if wall is not None else None, step=step,
                 nodes=tuple(nodes), iphys=tuple(iphys), visible=visible, positions=positions,
                 reason=str(reason) if reason is not None else None,
                 latency_ms=float(latency) if latency is not None else None,
                 extra={k: v for k, v in record.items() if k not in _KNOWN_FIELDS})


def parse_events(text: str, source: str) -> list[Event]:
    """Every record of an events file's text; blank lines are skipped."""
    events = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{source} line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{where}: not valid JSON: column {exc.colno}: {exc.msg}") from None
        events.append(parse_event(record, where))
    return events


def read_events(path: str | Path) -> list[Event]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{p}: cannot read: {exc}") from None
    return parse_events(text, str(p))


@dataclass(frozen=True)
class LinkState:
    """A link as the events describe it: the node pair and each side's iPHY."""

    a: str
    a_iphy: int
    b: str
    b_iphy: int

    @property
    def pair(self) -> Pair:
        return pair(self.a, self.b)


def links_before(events: Iterable[Event], t: float | None) -> dict[Pair, LinkState]:
    """Links up after replaying link_up/link_down with scenario_time < t (all when t is None)."""
    up: dict[Pair, LinkState] = {}
    for e in events:
        if t is not None and e.scenario_time >= t:
            continue
        if e.event == LINK_UP:
            state = LinkState(e.nodes[0], e.iphys[0], e.nodes[1], e.iphys[1])
            up[state.pair] = state
        elif e.event == LINK_DOWN:
            up.pop(pair(e.nodes[0], e.nodes[1]), None)
    return up


def placed(events: Iterable[Event]) -> list[tuple[float, Event]]:
    """Each event with its scenario time placed by its wall time on the run's clock: the
    latest ``play`` event before it (a resumed run starts a clock of its own). The CA
    stamps its own events with the time of the step or cue they follow; this is when
    they happened. Events before any clock, or without a wall time, keep their
    ``scenario_time``."""
    out = []
    clock: tuple[float, float] | None = None
    for e in events:
        if e.event == PLAY and finite_number(e.extra.get("t0_wall")):
            clock = (float(e.extra["t0_wall"]), float(e.extra.get("speed", 1.0)))
        if clock is None or e.wall_time is None:
            out.append((e.scenario_time, e))
        else:
            out.append((round((e.wall_time - clock[0]) * clock[1], 6), e))
    return out


def path_over_links(links: Iterable[Pair], a: str, b: str) -> list[str] | None:
    """A fewest-hops path from ``a`` to ``b`` over ``links`` (the nodes along it, ends
    included), or None; ties go to the alphabetically first neighbour. This is the path
    a hop-count routing takes; babel's metric may prefer another of the same length."""
    neighbours: dict[str, set[str]] = {}
    for x, y in links:
        neighbours.setdefault(x, set()).add(y)
        neighbours.setdefault(y, set()).add(x)
    previous: dict[str, str | None] = {a: None}
    frontier = [a]
    while frontier and b not in previous:
        nxt = []
        for node in frontier:
            for other in sorted(neighbours.get(node, ())):
                if other not in previous:
                    previous[other] = node
                    nxt.append(other)
        frontier = nxt
    if b not in previous:
        return None
    path = [b]
    while previous[path[-1]] is not None:
        path.append(previous[path[-1]])  # type: ignore[arg-type]
    return path[::-1]


def percentile(values: Iterable[float], q: float) -> float | None:
    """Nearest-rank percentile ``q`` (0-100] of ``values``; None when there are none."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def negotiation_summary(events: Iterable[Event]) -> dict[str, Any]:
    """A run's link negotiation in figures: requests, refusals by reason, link_up latency.

    ``link_up_latency_ms`` is request -> flows in: from a link_request (its
    ``sent_wall`` when the agent stamped it, else when the CA logged it) to the
    link_up that the same request made (the next link_up of that ordered pair);
    ``at_ca_ms`` is the same from when the request reached the CA (when it logged
    it, less ``held_ms``, the time it waited there), i.e. without the time it spent
    on its way to the CA. ``stale_requests`` counts requests made on
    a step older than the CA's, i.e. that crossed a new step on the way.
    ``latency_breakdown_ms`` splits request -> flows in where the events carry the
    stamps (see latency_phases), with ``slowest``: the phases of the slowest link.
    """
    requests = 0
    stale = 0
    refusals: dict[str, int] = {}
    asked: dict[tuple[str, str], tuple[float, float, Event]] = {}
    latencies: dict[str, list[float]] = {"link_up_latency_ms": [], "at_ca_ms": []}
    phases: dict[str, list[float]] = {name: [] for name in LATENCY_PHASES}
    slowest: tuple[float, dict[str, float]] | None = None
    for e in events:
        ends = tuple(e.nodes[:2])
        if e.event == LINK_REQUEST:
            requests += 1
            agent_step = e.extra.get("agent_step")
            if isinstance(agent_step, int) and e.step is not None and agent_step < e.step:
                stale += 1
            sent = e.extra.get("sent_wall", e.wall_time)
            if finite_number(sent) and e.wall_time is not None:
                held = e.extra.get("held_ms", 0)
                received = e.wall_time - (held / 1000 if finite_number(held) else 0)
                asked[ends] = (float(sent), received, e)
        elif e.event == LINK_FAIL:
            reason = (e.reason or "unknown").split(":", 1)[0]
            refusals[reason] = refusals.get(reason, 0) + 1
            asked.pop(ends, None)
        elif e.event == LINK_UP and e.wall_time is not None and ends in asked:
            sent, logged, request = asked.pop(ends)
            total = max(0.0, (e.wall_time - sent) * 1000)
            latencies["link_up_latency_ms"].append(total)
            latencies["at_ca_ms"].append(max(0.0, (e.wall_time - logged) * 1000))
            split = latency_phases(request, e)
            if split is not None:
                for name, value in split.items():
                    phases[name].append(value)
                if slowest is None or total > slowest[0]:
                    slowest = (total, split)

    def figures(values: list[float]) -> dict[str, Any]:
        out: dict[str, Any] = {"count": len(values)}
        for q in (50, 90, 99):
            value = percentile(values, q)
            out[f"p{q}"] = None if value is None else round(value, 3)
        return out

    refused = sum(refusals.values())
    return {"requests": requests, "refused": refused,
            "refused_share": round(refused / requests, 4) if requests else 0.0,
            "refusals": dict(sorted(refusals.items(), key=lambda kv: (-kv[1], kv[0]))),
            "stale_requests": stale,
            "link_up_latency_ms": figures(latencies["link_up_latency_ms"]),
            "link_up_latency_at_ca_ms": figures(latencies["at_ca_ms"]),
            "latency_breakdown_ms": {
                **{name: figures(values) for name, values in phases.items() if values},
                **({"slowest": {"total": round(slowest[0], 3),
                                **{k: round(v, 3) for k, v in slowest[1].items()}}}
                   if slowest is not None else {})}}


LATENCY_PHASES = ("to_ca", "at_ca", "to_install", "install", "after_install")
"""Where request -> flows in goes, in order: agent send -> CA read (``to_ca``), read ->
decided (``at_ca``: held, or behind the batch's earlier requests), decided -> its
batch's flow install starts (``to_install``: the batch's later decisions, shaping),
the install itself (``install``: flow-mods and barrier), install done -> link_up
recorded (``after_install``)."""


def latency_phases(request: Event, link_up: Event) -> dict[str, float] | None:
    """The phases (LATENCY_PHASES, ms) of one link's request -> flows in; None unless
    the request carries ``sent_wall`` and ``received_wall`` and the link_up
    ``flows_ms`` and ``flows_wall`` (CAs before these stamps wrote none)."""
    sent, received = request.extra.get("sent_wall"), request.extra.get("received_wall")
    flows_ms, flows_wall = link_up.extra.get("flows_ms"), link_up.extra.get("flows_wall")
    stamps = (sent, received, flows_ms, flows_wall, request.wall_time, link_up.wall_time)
    if not all(finite_number(value) for value in stamps):
        return None
    decided, started = float(request.wall_time), float(flows_wall) - float(flows_ms) / 1000
    return {"to_ca": (float(received) - float(sent)) * 1000,
            "at_ca": (decided - float(received)) * 1000,
            "to_install": (started - decided) * 1000,
            "install": float(flows_ms),
            "after_install": (float(link_up.wall_time) - float(flows_wall)) * 1000}


def host_flows_fields(op: str, links: int, per_host: Mapping[str, float]) -> dict[str, Any]:
    """A ``host_flows`` event's fields from each host's done time (seconds from the start)."""
    ms = {host: round(seconds * 1000, 3) for host, seconds in sorted(per_host.items())}
    return {"op": op, "links": links, "hosts_ms": ms,
            "spread_ms": round(max(ms.values()) - min(ms.values()), 3) if ms else 0.0}


def host_flows_summary(events: Iterable[Event]) -> dict[str, Any]:
    """Per op (add, remove): batches, and p50/p90/max of the last host's time (``all_ms``:
    the batch's flows in everywhere) and of the spread between hosts, over batches that
    touched two hosts or more (``several_hosts``: a cross-host link, or same-host links
    on different hosts decided together) and those that touched one (``one_host``)."""
    out: dict[str, Any] = {}
    for e in events:
        if e.event != HOST_FLOWS:
            continue
        hosts = e.extra.get("hosts_ms") or {}
        if not hosts:
            continue
        group = out.setdefault(str(e.extra.get("op")), {}).setdefault(
            "several_hosts" if len(hosts) > 1 else "one_host", {"all_ms": [], "spread_ms": []})
        group["all_ms"].append(max(hosts.values()))
        group["spread_ms"].append(float(e.extra.get("spread_ms", 0.0)))
    return {op: {kind: {"batches": len(values["all_ms"]),
                        **{name: {q: percentile(values[name], n)
                                  for q, n in (("p50", 50), ("p90", 90), ("max", 100))}
                           for name in ("all_ms", "spread_ms")}}
                 for kind, values in groups.items()}
            for op, groups in sorted(out.items())}


def apply_route(table: dict[str, Any], dst: str, e: Event) -> None:
    """One ``route`` event onto a node's table (destination -> next hop). Babel may delete
    a replaced route after adding its successor through another hop, so a ``del`` removes
    the route only while it still goes via the hop the event names."""
    via = e.extra.get("via")
    if e.extra.get("op") == "del":
        if dst in table and table[dst] == via:
            del table[dst]
    else:
        table[dst] = via


def route_summary(events: Iterable[Event]) -> list[dict[str, Any]]:
    """Route changes per step: how many, per node, and ``converged_s``, the time from
    the step taking effect to its last route change (null when nothing changed)."""
    steps: dict[int, dict[str, Any]] = {}
    started: dict[int, float] = {}
    for e in events:
        if e.step is None:
            continue
        if e.event == STEP and e.wall_time is not None:
            started.setdefault(e.step, e.wall_time)
        elif e.event == ROUTE and e.nodes:
            row = steps.setdefault(e.step, {"step": e.step, "changes": 0, "nodes": {},
                                            "last": None})
            row["changes"] += 1
            row["nodes"][e.nodes[0]] = row["nodes"].get(e.nodes[0], 0) + 1
            if e.wall_time is not None:
                row["last"] = max(row["last"] or e.wall_time, e.wall_time)
    out = []
    for step in sorted(set(steps) | set(started)):
        row = steps.get(step, {"step": step, "changes": 0, "nodes": {}, "last": None})
        last = row.pop("last")
        row["converged_s"] = round(last - started[step], 3) \
            if last is not None and step in started else None
        row["nodes"] = dict(sorted(row["nodes"].items()))
        out.append(row)
    return out


def _placeholders(kind: str) -> str:
    return "src, dst" if kind in (LINK_REQUEST, LINK_FAIL) else "a, b"


def _parse_visible(raw: Any, bad: Any) -> tuple[Pair, ...]:
    if not isinstance(raw, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(n, str) for n in p)
            for p in raw):
        raise bad("'visible' is not a list of [nodeA, nodeB] pairs")
    return tuple(sorted({pair(a, b) for a, b in raw}))


def _parse_positions(raw: Any, bad: Any) -> dict[str, Position] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise bad("'positions' is not an object of node -> [x, y, z]")
    out: dict[str, Position] = {}
    for name, p in raw.items():
        if not isinstance(p, list) or len(p) not in (2, 3) or not all(finite_number(v) for v in p):
            raise bad(f"'positions'.{name} is not [x, y] or [x, y, z] (finite numbers)")
        xyz = [float(v) for v in p] + [0.0] * (3 - len(p))
        out[name] = (xyz[0], xyz[1], xyz[2])
    return out
