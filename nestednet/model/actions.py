"""Scenario actions: faults, measurements, commands and captures at scenario times.

Pure model (schema: nestednet/schemas/actions.schema.json). `parse_actions` checks a
scenario's ``actions`` list against the nodes, components and duration and locates
every problem (``actions[3].between[1]: unknown node 'u13'``). `timeline` expands
the list into cues (flap into its down/up halves, churn into the crashes of the
nodes it picks, link-down/link-up into one cut), so the runtime
(nestednet.ca.actions) only plays cues in time order.

Link faults override visibility: a *cut* removes pairs from what a step makes
visible (`effective_visible`); the step's own visibility returns when the cut
ends. A partition's cut is computed on the visible pairs of each step: a pair is
cut when its two nodes are in different groups; a node named in no group keeps
all its links. A crashed node's cut is every pair it is in.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nestednet.model.line_of_sight import Pair, pair
from nestednet.model.link_properties import MAX_DELAY_US, MAX_RATE_BPS, LinkProperties
from nestednet.model.scenario import Problems, load_schema

SCHEMA_RESOURCE = "actions.schema.json"

LINK_FAULTS = ("link-down", "link-up", "flap", "partition", "degrade")
NODE_FAULTS = ("crash", "restart", "churn")
MEASUREMENTS = ("ping", "iperf")
KINDS = ("exec", *NODE_FAULTS, *LINK_FAULTS, *MEASUREMENTS, "capture")

# Which fields each kind takes (beyond action/time/from/until) and which it needs.
_FIELDS: dict[str, tuple[set[str], set[str]]] = {
    "exec": ({"node", "component", "command"}, {"node", "command"}),
    "crash": ({"node", "component"}, {"node"}),
    "restart": ({"node", "component"}, {"node"}),
    "churn": ({"percent", "seed"}, {"percent"}),
    "link-down": ({"between"}, {"between"}),
    "link-up": ({"between"}, {"between"}),
    "flap": ({"between", "period"}, {"between", "period"}),
    "partition": ({"groups"}, {"groups"}),
    "degrade": ({"between", "factor"}, {"between", "factor"}),
    "ping": ({"src", "dst", "interval"}, {"src", "dst"}),
    "iperf": ({"src", "dst", "duration", "protocol", "rate"}, {"src", "dst", "duration"}),
    "capture": ({"node", "component", "file"}, {"node", "component"}),
}
_INSTANT_ONLY = {"link-up", "restart"}
"""Kinds that happen at one instant: they take 'time', not 'from'/'until'."""
_INTERVAL_ONLY = {"flap", "degrade", "churn", "capture"}
"""Kinds that need a window: 'from' (and optionally 'until')."""

DEFAULT_PING_INTERVAL = 1.0
IPERF_BASE_PORT = 5201
IPERF_GRACE_S = 1.0
"""An iperf's stop cue comes this long after its duration (capped at the scenario's end):
its client starts a little after the cue and must be let finish."""


def schema() -> dict[str, Any]:
    return load_schema(SCHEMA_RESOURCE)


@dataclass(frozen=True)
class Action:
    """One entry of ``actions``, checked: when it starts, when it ends (None: an instant
    or, for iperf, its own duration), and its fields as written."""

    index: int
    kind: str
    start: float
    end: float | None
    params: Mapping[str, Any] = field(default_factory=dict, compare=False)
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def label(self) -> str:
        return f"actions[{self.index}] {self.kind}"

    def get(self, name: str, default: Any = None) -> Any:
        return self.params.get(name, default)


@dataclass(frozen=True)
class Cut:
    """Pairs a link fault takes away from the visible ones while it holds."""

    pairs: frozenset[Pair] = frozenset()
    nodes: frozenset[str] = frozenset()
    """Every pair touching one of these nodes (a crashed node)."""
    groups: tuple[frozenset[str], ...] = ()
    """A partition: pairs whose nodes sit in different groups."""

    def cuts(self, p: Pair) -> bool:
        a, b = p
        if p in self.pairs or a in self.nodes or b in self.nodes:
            return True
        if self.groups:
            ga = next((i for i, g in enumerate(self.groups) if a in g), None)
            gb = next((i for i, g in enumerate(self.groups) if b in g), None)
            return ga is not None and gb is not None and ga != gb
        return False


def effective_visible(visible: Iterable[Pair], cuts: Iterable[Cut]) -> frozenset[Pair]:
    """The pairs a step makes visible minus those any active cut takes away."""
    active = list(cuts)
    return frozenset(p for p in visible if not any(c.cuts(p) for c in active))


@dataclass(frozen=True, order=True)
class Cue:
    """One thing the runtime does at ``time``: ``op`` of action ``index``.

    ops: ``cut``/``uncut`` (link faults and crashes: ``key`` names the cut),
    ``crash``/``restart`` (freeze or thaw a node or component: ``target``),
    ``degrade``/``undegrade``, ``start``/``stop`` (exec, ping, iperf, capture).
    """

    time: float
    rank: int
    index: int
    op: str
    key: str = ""
    target: tuple[str, str | None] | None = field(default=None, compare=False)
    cut: Cut | None = field(default=None, compare=False)


_RANK = {"uncut": 0, "restart": 1, "undegrade": 2, "stop": 3, "crash": 4, "cut": 5,
         "degrade": 6, "start": 7}
"""At one instant, ends come before starts (a flap's up and the next down never meet)."""


def parse_actions(raw: Any, *, nodes: Mapping[str, int], duration: float,
                  shaped: bool, problems: Problems,
                  path: Sequence[str | int] = ("actions",)) -> tuple[Action, ...]:
    """Check a scenario's ``actions`` (schema-valid already) against its ``nodes``
    (name -> iPHY count) and ``duration``; problems are added, located.

    ``shaped``: whether the scenario's links get properties at all (degrade needs it).
    """
    if raw is None:
        return ()
    out: list[Action] = []
    for i, entry in enumerate(raw):
        where = [*path, i]
        action = _parse_one(i, entry, where, nodes, duration, shaped, problems)
        if action is not None:
            out.append(action)
    _check_overlaps(out, nodes, duration, path, problems)
    return tuple(out)


def _parse_one(i: int, entry: dict[str, Any], where: list[str | int],
               nodes: Mapping[str, int], duration: float, shaped: bool,
               problems: Problems) -> Action | None:
    kind = entry["action"]
    allowed, needed = _FIELDS[kind]
    bad = len(problems.items)
    for name in sorted(needed - entry.keys()):
        problems.add(where, f"{kind} needs {name!r}")
    for name in sorted(set(entry) - allowed - {"action", "time", "from", "until"}):
        problems.add([*where, name], f"{kind} takes no {name!r}")
    if kind in _INSTANT_ONLY and ("from" in entry or "until" in entry):
        problems.add(where, f"{kind} happens at one instant: give 'time', not 'from'/'until'")
    if kind in _INTERVAL_ONLY and "time" in entry:
        problems.add([*where, "time"], f"{kind} needs a window: give 'from' (and "
                                       "optionally 'until'), not 'time'")
    if "time" in entry and "until" in entry and kind != "exec":
        problems.add([*where, "until"], "'until' goes with 'from'; 'time' is an instant"
                                        + ("" if kind != "iperf" else
                                           " (iperf lasts its 'duration')"))
    start = float(entry.get("time", entry.get("from", 0.0)))
    end: float | None = entry.get("until")
    if end is None and "from" in entry:
        end = duration
    if end is not None:
        end = float(end)
    key = "time" if "time" in entry else "from"
    if start > duration:
        problems.add([*where, key], f"{start:g} is beyond the scenario's end ({duration:g} s)")
    if end is not None:
        if end > duration:
            problems.add([*where, "until"],
                         f"{end:g} is beyond the scenario's end ({duration:g} s)")
        if end <= start:
            problems.add([*where, "until"], f"{end:g} is not after the start ({start:g})")
    for name in ("node", "src", "dst"):
        if name in entry and entry[name] not in nodes:
            problems.add([*where, name], f"unknown node {entry[name]!r}")
    component = entry.get("component")
    if component is not None and entry.get("node") in nodes and component != "gnab":
        count = nodes[entry["node"]]
        if int(component.removeprefix("iphy")) > count:
            problems.add([*where, "component"],
                         f"no component {component} in {entry['node']} (it has gnab, "
                         f"iphy1..iphy{count})")
    if kind == "capture" and component == "gnab":
        problems.add([*where, "component"], "capture an iPHY: the GNAB has no port on the "
                                            "main bridge")
    if "between" in entry:
        a, b = entry["between"]
        for j, n in enumerate((a, b)):
            if n not in nodes:
                problems.add([*where, "between", j], f"unknown node {n!r}")
        if a == b:
            problems.add([*where, "between"], f"a node cannot be paired with itself ({a!r})")
    if kind == "partition":
        seen: dict[str, tuple[int, int]] = {}
        for g, group in enumerate(entry["groups"]):
            for j, n in enumerate(group):
                if n not in nodes:
                    problems.add([*where, "groups", g, j], f"unknown node {n!r}")
                elif n in seen:
                    problems.add([*where, "groups", g, j],
                                 f"node {n!r} is named twice (also groups[{seen[n][0]}]"
                                 f"[{seen[n][1]}])")
                else:
                    seen[n] = (g, j)
    if kind in ("ping", "iperf") and entry.get("src") == entry.get("dst") \
            and "src" in entry:
        problems.add([*where, "dst"], f"{kind} from a node to itself ({entry['src']!r})")
    if kind == "iperf":
        span = float(entry.get("duration", 0))
        if start + span > duration:
            problems.add([*where, "duration"], f"the iperf ends at {start + span:g} s, beyond "
                                               f"the scenario's end ({duration:g} s)")
        if "rate" in entry and entry.get("protocol", "tcp") != "udp":
            problems.add([*where, "rate"], "'rate' is for protocol udp")
    if kind == "flap" and end is not None and "period" in entry \
            and entry["period"] > end - start:
        problems.add([*where, "period"], f"a period of {entry['period']:g} s does not fit "
                                         f"in the window ({end - start:g} s)")
    if kind == "degrade" and not shaped:
        problems.add(where, "degrade changes link properties, but this scenario shapes no "
                            "link: give it a 'link_model' or step 'links'")
    if kind == "exec" and "until" in entry and "time" not in entry and "from" not in entry:
        problems.add(where, "exec needs a start time")
    if len(problems.items) > bad:
        return None
    params = {k: v for k, v in entry.items() if k not in ("action", "time", "from", "until")}
    if kind == "churn":
        params["nodes"] = churn_nodes(sorted(nodes), entry["percent"], entry.get("seed", 0))
    if kind == "exec":
        params.setdefault("component", "gnab")
    return Action(index=i, kind=kind, start=start, end=end, params=params, raw=dict(entry))


def churn_nodes(names: Sequence[str], percent: float, seed: int) -> tuple[str, ...]:
    """The nodes churn takes down: round(percent of them), at least one, chosen by ``seed``."""
    count = max(1, round(len(names) * percent / 100))
    return tuple(sorted(random.Random(seed).sample(list(names), min(count, len(names)))))


def crash_target(action: Action) -> tuple[str, str | None]:
    return action.get("node"), action.get("component")


def _check_overlaps(actions: list[Action], nodes: Mapping[str, int], duration: float,
                    path: Sequence[str | int], problems: Problems) -> None:
    """Faults on one pair (or one node) must not overlap: they could not be undone in
    order. A link-up needs a link-down of its pair before it; a restart a crash."""
    pair_busy: dict[Pair, list[tuple[float, float, Action]]] = {}
    degrade_busy: dict[Pair, list[tuple[float, float, Action]]] = {}
    down_open: dict[Pair, Action] = {}
    crashed: dict[tuple[str, str | None], Action] = {}
    crash_spans: dict[str, list[tuple[float, float, Action]]] = {}

    def claim(table: dict, key: Any, start: float, end: float, action: Action,
              what: str) -> None:
        for other_start, other_end, other in table.get(key, []):
            if start < other_end and other_start < end:
                problems.add([*path, action.index], f"{what} overlaps {other.label} "
                             f"({other_start:g}-{other_end:g} s): it cannot be played")
                return
        table.setdefault(key, []).append((start, end, action))

    ordered = sorted(actions, key=lambda a: (a.start, 0 if a.kind in ("link-up", "restart")
                                             else 1, a.index))
    for action in ordered:
        if action.kind in ("link-down", "link-up", "flap", "degrade"):
            p = pair(*action.get("between"))
        if action.kind == "link-down":
            if action.end is None:
                if p in down_open:
                    problems.add([*path, action.index], f"{p[0]}-{p[1]} is down already "
                                 f"({down_open[p].label})")
                    continue
                down_open[p] = action
            else:
                claim(pair_busy, p, action.start, action.end, action, "this link-down")
        elif action.kind == "link-up":
            opened = down_open.pop(p, None)
            if opened is None:
                problems.add([*path, action.index], f"link-up of {p[0]}-{p[1]} with no "
                             "link-down of that pair before it")
                continue
            claim(pair_busy, p, opened.start, action.start, opened, "this link-down")
        elif action.kind == "flap":
            claim(pair_busy, p, action.start, float(action.end or duration), action,
                  "this flap")
        elif action.kind == "degrade":
            claim(degrade_busy, p, action.start, float(action.end or duration), action,
                  "this degrade")
        elif action.kind in ("crash", "churn"):
            targets = ([(n, None) for n in action.get("nodes")] if action.kind == "churn"
                       else [crash_target(action)])
            for target in targets:
                if action.end is None:
                    already = crashed.get(target) or crashed.get((target[0], None))
                    if already is not None:
                        problems.add([*path, action.index], f"{_target(target)} is crashed "
                                     f"already ({already.label})")
                        continue
                    crashed[target] = action
                else:
                    claim(crash_spans, target[0], action.start, action.end, action,
                          f"this {action.kind} of {_target(target)}")
        elif action.kind == "restart":
            target = crash_target(action)
            opened = crashed.pop(target, None)
            if opened is None:
                problems.add([*path, action.index], f"restart of {_target(target)} with no "
                             "crash of it before")
                continue
            claim(crash_spans, target[0], opened.start, action.start, opened,
                  f"this crash of {_target(target)}")
    for p, opened in down_open.items():
        claim(pair_busy, p, opened.start, duration, opened, "this link-down")
    for target, opened in crashed.items():
        claim(crash_spans, target[0], opened.start, duration, opened,
              f"this crash of {_target(target)}")


def _target(target: tuple[str, str | None]) -> str:
    return target[0] if target[1] is None else f"{target[0]} {target[1]}"


def timeline(actions: Sequence[Action], duration: float) -> list[Cue]:
    """Every cue of ``actions`` in the order the runtime plays them."""
    cues: list[Cue] = []
    open_down: dict[Pair, Action] = {}
    open_crash: dict[tuple[str, str | None], Action] = {}

    def add(time: float, action: Action, op: str, **extra: Any) -> None:
        cues.append(Cue(time=time, rank=_RANK[op], index=action.index, op=op, **extra))

    for action in sorted(actions, key=lambda a: (a.start, a.index)):
        kind, end = action.kind, action.end
        key = f"a{action.index}"
        if kind == "link-down":
            p = pair(*action.get("between"))
            add(action.start, action, "cut", key=key, cut=Cut(pairs=frozenset({p})))
            if end is not None:
                add(end, action, "uncut", key=key)
            else:
                open_down[p] = action
        elif kind == "link-up":
            opened = open_down.pop(pair(*action.get("between")))
            add(action.start, action, "uncut", key=f"a{opened.index}")
        elif kind == "flap":
            p = pair(*action.get("between"))
            period = float(action.get("period"))
            t, stop = action.start, float(end if end is not None else duration)
            while t < stop:
                add(t, action, "cut", key=key, cut=Cut(pairs=frozenset({p})))
                add(min(t + period / 2, stop), action, "uncut", key=key)
                t += period
        elif kind == "partition":
            cut = Cut(groups=tuple(frozenset(g) for g in action.get("groups")))
            add(action.start, action, "cut", key=key, cut=cut)
            add(float(end if end is not None else duration), action, "uncut", key=key)
        elif kind == "degrade":
            add(action.start, action, "degrade", key=key)
            add(float(end if end is not None else duration), action, "undegrade", key=key)
        elif kind in ("crash", "churn"):
            targets = ([(n, None) for n in action.get("nodes")] if kind == "churn"
                       else [crash_target(action)])
            for target in targets:
                tkey = f"crash:{target[0]}:{target[1] or ''}"
                node_cut = Cut(nodes=frozenset({target[0]})) if target[1] is None else None
                add(action.start, action, "crash", key=tkey, target=target)
                if node_cut is not None:
                    add(action.start, action, "cut", key=tkey, cut=node_cut)
                if end is not None:
                    add(end, action, "restart", key=tkey, target=target)
                    if node_cut is not None:
                        add(end, action, "uncut", key=tkey)
                else:
                    open_crash[target] = action
        elif kind == "restart":
            target = crash_target(action)
            tkey = f"crash:{target[0]}:{target[1] or ''}"
            open_crash.pop(target, None)
            add(action.start, action, "restart", key=tkey, target=target)
            if target[1] is None:
                add(action.start, action, "uncut", key=tkey)
        else:  # exec, ping, iperf, capture
            add(action.start, action, "start", key=key)
            stop = end
            if kind == "iperf":
                stop = min(duration, action.start + float(action.get("duration"))
                           + IPERF_GRACE_S)
            if stop is not None:
                add(stop, action, "stop", key=key)
    return sorted(cues)


_ENDS = {"uncut": "cut", "restart": "crash", "undegrade": "degrade"}
"""Each ending op and the op whose fault it ends (under the same ``key``)."""


def in_effect(cues: Iterable[Cue], t: float) -> list[Cue]:
    """The fault cues played before scenario time ``t`` whose fault still holds at ``t``
    (a cut, crash or degrade whose end cue comes at ``t`` or later), in play order.

    A run resumed at ``t`` (`run --resume`) never plays the cues before ``t``, so these
    are what it must apply again before its first step: without them a link-down or a
    partition under way would be undone by the resumed step, and a crashed node never
    thawed (its restart cue would find nothing frozen).
    """
    holding: dict[tuple[str, str], Cue] = {}
    for cue in sorted(cues):
        if cue.time >= t:
            break
        if cue.op in _ENDS.values():
            holding[(cue.op, cue.key)] = cue
        elif cue.op in _ENDS:
            holding.pop((_ENDS[cue.op], cue.key), None)
    return sorted(holding.values())


def crashed_nodes(cues: Iterable[Cue], t: float) -> frozenset[str]:
    """Nodes frozen whole at scenario time ``t`` by a crash (or churn) still in effect:
    their agents cannot answer until their restart cue."""
    return frozenset(cue.target[0] for cue in in_effect(cues, t)
                     if cue.op == "crash" and cue.target is not None and cue.target[1] is None)


def document(actions: Sequence[Action]) -> list[dict[str, Any]]:
    """The actions as written (for saving a scenario made in code)."""
    return [dict(a.raw) for a in actions]


def degraded(props: LinkProperties, factor: float) -> LinkProperties:
    """One direction's properties under a degrade: delay, jitter and loss times
    ``factor``, rate divided by it (each kept within what tc can be given)."""
    rate = None if props.rate_bps is None else max(1, min(MAX_RATE_BPS,
                                                          round(props.rate_bps / factor)))
    delay = min(MAX_DELAY_US, round(props.delay_us * factor))
    return LinkProperties(rate_bps=rate, delay_us=delay,
                          jitter_us=min(delay, round(props.jitter_us * factor)),
                          loss_pct=min(100.0, props.loss_pct * factor))


def actions_summary(events: Iterable[Any]) -> dict[str, Any]:
    """What a run's actions did, from its events (nestednet.model.events.Event): cues
    played and failed; per ping its probes, answers, loss and RTT; per iperf its
    intervals and mean throughput (and iperf3's receiver total)."""
    played = failed = 0
    pings: dict[int, dict[str, Any]] = {}
    iperfs: dict[int, dict[str, Any]] = {}
    for event in events:
        extra = event.extra
        if event.event == "action":
            played += 1
            failed += "error" in extra
        elif event.event == "ping":
            entry = pings.setdefault(extra["index"], {"nodes": list(event.nodes), "rtts": [],
                                                       "probes": 0})
            entry["probes"] += 1
            if extra.get("rtt_ms") is not None:
                entry["rtts"].append(float(extra["rtt_ms"]))
        elif event.event == "iperf":
            entry = iperfs.setdefault(extra["index"], {"nodes": list(event.nodes), "bps": [],
                                                        "errors": 0})
            if "error" in extra:
                entry["errors"] += 1
            elif extra.get("summary") == "receiver":
                entry["receiver_bps"] = extra["bps"]
            elif "summary" not in extra:
                entry["bps"].append(float(extra["bps"]))
    out_pings = {}
    for index, entry in sorted(pings.items()):
        rtts = sorted(entry["rtts"])
        out_pings[index] = {
            "nodes": entry["nodes"], "probes": entry["probes"], "answered": len(rtts),
            "loss_pct": round(100 * (1 - len(rtts) / entry["probes"]), 1),
            "rtt_ms_p50": rtts[len(rtts) // 2] if rtts else None,
            "rtt_ms_max": rtts[-1] if rtts else None}
    out_iperfs = {}
    for index, entry in sorted(iperfs.items()):
        values = entry["bps"]
        out_iperfs[index] = {
            "nodes": entry["nodes"], "intervals": len(values), "errors": entry["errors"],
            "mean_bps": round(sum(values) / len(values)) if values else None,
            "receiver_bps": entry.get("receiver_bps")}
    return {"cues": played, "failed": failed, "ping": out_pings, "iperf": out_iperfs}
