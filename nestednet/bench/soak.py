"""A long run, watched (issue #32): does anything grow that should not, and do steps
keep their time?

`scripts/bench/soak.py` plays a long scenario on a lab and samples, every interval,
what a run's pieces hold: the RSS of the CLI (which hosts the CA), of every GNAB agent,
of the host's ovs-vswitchd and dockerd; the CLI's open file descriptors; the flows on
the lab's main bridge against the links the events say are up; the tc objects on the
lab's ports; the events file's size. This module is the pure part: the samples, the
growth per hour of each series (least squares over the run's second half, once start-up
has settled), each step's lateness from the events, the verdict against stated bounds,
and the curves.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nestednet.model.events import STEP, Event

SERIES = ("cli_rss_mb", "agents_rss_mb", "agent_max_rss_mb", "ovs_rss_mb", "dockerd_rss_mb",
          "cli_fds", "flows", "links", "tc_objects", "events_mb", "load1")
"""Every sampled series, in the order they are plotted. ``load1`` (the host's 1-minute
load average) is shown beside the others and never judged: the machine is shared."""

DEFAULT_BOUNDS_PER_HOUR = {
    "cli_rss_mb": 20.0, "agents_rss_mb": 20.0, "agent_max_rss_mb": 2.0, "ovs_rss_mb": 50.0,
    "dockerd_rss_mb": 20.0,
    "cli_fds": 5.0, "flows_per_link": 0.1, "tc_per_link": 0.5,
}
"""Largest growth per hour that passes, per series, in its own unit. Flows and tc objects
follow the scenario's links, so they are judged per link up (a leaked flow or class shows
as a ratio that climbs). The events file grows by design (one record per step and per
change); it is bounded separately by its bytes per step. Each bound is far below what a
leak of one object per step would cost in an hour at 1 s steps (3,600 objects)."""


@dataclass(frozen=True)
class Sample:
    wall: float
    """Seconds since the run started."""
    values: Mapping[str, float] = field(default_factory=dict)


def growth_per_hour(samples: Sequence[Sample], series: str,
                    settle_share: float = 0.5) -> float | None:
    """Least-squares slope of ``series`` in units per hour over the samples after the
    first ``settle_share`` of the run (start-up fills caches that then stay); None with
    fewer than 3 samples there."""
    if not samples:
        return None
    start = samples[0].wall + settle_share * (samples[-1].wall - samples[0].wall)
    points = [(s.wall, s.values[series]) for s in samples
              if s.wall >= start and series in s.values]
    if len(points) < 3 or len({x for x, _ in points}) < 2:
        return None
    slope, _ = statistics.linear_regression([x for x, _ in points], [y for _, y in points])
    return slope * 3600.0


def step_lateness(events: Iterable[Event], speed: float) -> list[tuple[int, float]]:
    """(step, seconds late) for every step event with a wall time: how much later it
    took effect than the first step's wall time plus its scenario time / speed."""
    steps = [e for e in events if e.event == STEP and e.wall_time is not None]
    if not steps:
        return []
    origin = steps[0].wall_time - steps[0].scenario_time / speed
    return [(e.step if e.step is not None else -1,
             e.wall_time - (origin + e.scenario_time / speed)) for e in steps]


@dataclass
class Verdict:
    growth_per_hour: dict[str, float | None]
    bounds_per_hour: dict[str, float]
    over_bound: list[str]
    steps: int
    late_steps: list[tuple[int, float]]
    """Steps later than one step's own duration (the issue's bound)."""
    max_late_s: float | None
    events_bytes_per_step: float | None
    flows_per_link: float | None
    tc_per_link: float | None

    @property
    def passed(self) -> bool:
        return not self.over_bound and not self.late_steps and self.steps > 0

    def to_dict(self) -> dict:
        return {**asdict(self), "passed": self.passed}


def judge(samples: Sequence[Sample], lateness: Sequence[tuple[int, float]], step_s: float,
          speed: float, bounds: Mapping[str, float] = DEFAULT_BOUNDS_PER_HOUR,
          events_bytes: int | None = None) -> Verdict:
    samples = [Sample(s.wall, {**s.values, **_per_link(s.values)}) for s in samples]
    growth = {name: growth_per_hour(samples, name)
              for name in (*SERIES, "flows_per_link", "tc_per_link")}
    over = [f"{name}: +{growth[name]:.2f}/h > {bound:g}/h" for name, bound in bounds.items()
            if growth.get(name) is not None and growth[name] > bound]
    allowed = step_s / speed
    late = [(step, late_s) for step, late_s in lateness if late_s > allowed]
    with_links = [s for s in samples if s.values.get("links")]
    return Verdict(
        growth_per_hour=growth, bounds_per_hour=dict(bounds), over_bound=over,
        steps=len(lateness), late_steps=late,
        max_late_s=max((x for _, x in lateness), default=None),
        events_bytes_per_step=(events_bytes / len(lateness)
                               if events_bytes is not None and lateness else None),
        flows_per_link=_ratio(with_links, "flows"), tc_per_link=_ratio(with_links, "tc_objects"))


def _per_link(values: Mapping[str, float]) -> dict[str, float]:
    """Flows and tc objects per link up, where links are up."""
    links = values.get("links")
    return {f"{short}_per_link": values[name] / links
            for short, name in (("flows", "flows"), ("tc", "tc_objects"))
            if links and name in values}


def _ratio(samples: Sequence[Sample], series: str) -> float | None:
    ratios = [s.values[series] / s.values["links"] for s in samples if series in s.values]
    return statistics.median(ratios) if ratios else None


def plot(samples: Sequence[Sample], lateness: Sequence[tuple[int, float]], out: Path,
         title: str) -> Path:
    """One PNG: every series against time, and each step's lateness."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    shown = [name for name in SERIES if any(name in s.values for s in samples)]
    rows = len(shown) + 1
    fig, axes = plt.subplots(rows, 1, figsize=(9, 1.9 * rows), sharex=False)
    minutes = [s.wall / 60 for s in samples]
    for ax, name in zip(axes, shown, strict=False):
        ax.plot(minutes, [s.values.get(name, float("nan")) for s in samples], lw=1.2)
        ax.set_ylabel(name, fontsize=8)
        ax.grid(alpha=0.3)
    ax = axes[-1]
    if lateness:
        first = min(step for step, _ in lateness)
        ax.plot([step - first for step, _ in lateness], [x * 1000 for _, x in lateness],
                lw=0.8)
    ax.set_ylabel("step late (ms)", fontsize=8)
    ax.set_xlabel("step (lower panel); minutes since start (upper panels)")
    ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
