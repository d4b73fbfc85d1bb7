"""What a run's report shows, computed from its events alone (no drawing here).

Each function takes the run's events (nestednet.model.events.Event, in file order) and
returns plain lists, so the figures and the tables read the same numbers and unit tests
can check them against hand-counted events.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from nestednet.model.events import Event, placed

_STARTS = {"cut": "cut", "crash": "crash", "degrade": "degrade"}
_ENDS = {"uncut": "cut", "restart": "crash", "undegrade": "degrade"}


@dataclass
class Span:
    """A fault in effect from ``start`` to ``end`` (scenario seconds)."""

    label: str
    kind: str
    start: float
    end: float


@dataclass
class Measurement:
    index: int
    nodes: list[str]
    times: list[float] = field(default_factory=list)
    values: list[float | None] = field(default_factory=list)


def steps(events: Sequence[Event]) -> list[tuple[int, float, int]]:
    """(step index, time, visible pairs) of each step event."""
    return [(e.step if e.step is not None else i, e.scenario_time, len(e.visible))
            for i, e in enumerate(ev for ev in events if ev.event == "step")]


def link_counts(events: Sequence[Event]) -> list[tuple[float, int]]:
    """Links up after each link_up / link_down, starting from (0, 0)."""
    count, out = 0, [(0.0, 0)]
    for t, e in placed(events):
        if e.event == "link_up":
            count += 1
        elif e.event == "link_down":
            count -= 1
        else:
            continue
        out.append((t, count))
    return sorted(out)


def fault_spans(events: Sequence[Event], end: float) -> list[Span]:
    """Each fault's window: a cut, crash or degrade from its start to its end cue (or
    ``end`` when the run stopped first); a crash's own cut is not listed twice."""
    open_: dict[str, Span] = {}
    out: list[Span] = []
    for e in events:
        if e.event != "action":
            continue
        op, key = e.extra.get("op"), e.extra.get("key", "")
        if op in _STARTS and key not in open_:
            target = e.extra.get("target") or "-".join(e.nodes)
            open_[key] = Span(f"{e.extra.get('action')} {target}".strip(),
                              e.extra.get("action", ""),
                              e.scenario_time, end)
        elif op in _ENDS and key in open_:
            span = open_.pop(key)
            span.end = e.scenario_time
            out.append(span)
    out.extend(open_.values())
    return sorted(out, key=lambda s: (s.start, s.label))


def route_changes(events: Sequence[Event], bin_s: float = 1.0) -> list[tuple[float, int]]:
    """Route events per ``bin_s`` seconds (bin start, count), empty bins left out."""
    bins: dict[int, int] = {}
    for t, e in placed(events):
        if e.event == "route":
            k = int(t // bin_s)
            bins[k] = bins.get(k, 0) + 1
    return [(k * bin_s, n) for k, n in sorted(bins.items())]


def pings(events: Sequence[Event]) -> list[Measurement]:
    """Per ping action: probe times and RTTs in ms (None: no answer)."""
    out: dict[int, Measurement] = {}
    for e in events:
        if e.event == "ping":
            m = out.setdefault(e.extra["index"], Measurement(e.extra["index"], list(e.nodes)))
            m.times.append(e.scenario_time)
            m.values.append(e.extra.get("rtt_ms"))
    return [out[k] for k in sorted(out)]


def answered_share(m: Measurement, bin_s: float = 1.0) -> list[tuple[float, float]]:
    """Share of a ping's probes answered per ``bin_s`` (bin start, 0..1)."""
    bins: dict[int, list[int]] = {}
    for t, v in zip(m.times, m.values, strict=True):
        counts = bins.setdefault(int(t // bin_s), [0, 0])
        counts[0] += v is not None
        counts[1] += 1
    return [(k * bin_s, a / n) for k, (a, n) in sorted(bins.items())]


def iperfs(events: Sequence[Event]) -> list[Measurement]:
    """Per iperf action: interval ends and throughput in bit/s (iperf3's totals left out)."""
    out: dict[int, Measurement] = {}
    for e in events:
        if e.event == "iperf" and "bps" in e.extra and "summary" not in e.extra:
            m = out.setdefault(e.extra["index"], Measurement(e.extra["index"], list(e.nodes)))
            m.times.append(float(e.extra["interval"][1]))
            m.values.append(float(e.extra["bps"]))
    return [out[k] for k in sorted(out)]


def link_rates(events: Sequence[Event]) -> list[tuple[float, float]]:
    """(time, rate bit/s) of every direction set by a link_up or link_update."""
    out = []
    for t, e in placed(events):
        if e.event in ("link_up", "link_update") and isinstance(e.extra.get("properties"),
                                                                 dict):
            for side in ("a_to_b", "b_to_a"):
                rate = (e.extra["properties"].get(side) or {}).get("rate_bps")
                if rate is not None:
                    out.append((t, float(rate)))
    return out


def fidelity(events: Sequence[Event]) -> list[dict[str, Any]]:
    """The fidelity checks' records (nestednet.ca.fidelity), as written."""
    return [e.extra | {"scenario_time": e.scenario_time, "nodes": list(e.nodes)}
            for e in events if e.event == "fidelity"]
