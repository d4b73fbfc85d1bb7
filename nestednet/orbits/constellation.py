"""A constellation (TLE objects, Walker shells, ground stations) as a native scenario.

Every step has every node's ITRS position in km (rounded to the metre) and the
explicit visible pairs, ground-satellite ones included:

- inter-satellite: ``grid`` (the +Grid of Walker shells, as StarryNet and Hypatia,
  each link kept while its segment clears the Earth plus the atmosphere: with few
  planes, cross-plane neighbours are out of sight near the equator), ``los`` (within
  a range and clear of the Earth plus the atmosphere, line_of_sight.py's rule) or
  ``none``;
- ground-satellite: the satellite stands at least the station's mask above its
  horizon; with the ``nearest`` or ``highest`` policy only the closest or highest such
  satellite is kept (one ground link, with handover);
- ground-ground: never.

The scenario records its start time (UTC) and frame (ITRS), and the kind of every node,
so link classes (isl, gsl) can give lasers and radios different models.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np

from nestednet.errors import UsageError
from nestednet.model import limits
from nestednet.model.line_of_sight import ATMOSPHERE_KM, EARTH_RADIUS_KM, Pair, pair
from nestednet.model.link_models import LinkModel
from nestednet.model.scenario import DEFAULT_IPHYS, NodeSpec, Scenario, Step
from nestednet.model.visibility import step_times
from nestednet.orbits import propagate
from nestednet.orbits.stations import GroundStation
from nestednet.orbits.tle import Tle
from nestednet.orbits.walker import WalkerShell, grid_neighbours

ISL_MODES = ("grid", "los", "none")
MAX_POSITIONS = 1_000_000
"""Node positions over all steps: about 30 MB of JSON, under a scenario file's limit."""


@dataclass(frozen=True)
class Constellation:
    """What to propagate: satellites (Walker ones first, in shell order) and stations."""

    satellites: Sequence[Tle]
    stations: Sequence[GroundStation] = ()
    shells: Sequence[WalkerShell] = ()
    """The Walker shells the first satellites come from (for the +Grid)."""
    only_walker: bool = True


@dataclass(frozen=True)
class Options:
    start: datetime
    duration: float
    step: float
    isl: str = "grid"
    isl_range_km: float | None = None
    atmosphere_km: float = ATMOSPHERE_KM
    iphys: int = DEFAULT_IPHYS
    name: str = ""
    link_model: LinkModel | None = None
    link_classes: Mapping[str, LinkModel] = field(default_factory=dict)


def utc_text(when: datetime) -> str:
    """``2026-11-26T00:00:00Z``: a start time as the scenario records it."""
    utc = when.astimezone(UTC).replace(tzinfo=None)
    return utc.isoformat() + "Z"


def check(constellation: Constellation, options: Options) -> None:
    """Bad combinations, before anything is propagated."""
    if not constellation.satellites:
        raise UsageError("no satellites: give --tle FILE and/or --walker ...")
    if options.isl not in ISL_MODES:
        raise UsageError(f"--isl {options.isl!r}: choose one of {', '.join(ISL_MODES)}")
    if options.isl == "grid" and not constellation.only_walker:
        raise UsageError("--isl grid links the +Grid of Walker shells; TLE objects have no "
                         "plane structure", hint="use --isl los --isl-range-km KM, or none")
    if options.isl == "los" and options.isl_range_km is None:
        raise UsageError("--isl los needs --isl-range-km (e.g. 5000)")
    if options.isl_range_km is not None and not (options.isl_range_km > 0
                                                 and np.isfinite(options.isl_range_km)):
        raise UsageError(f"--isl-range-km must be > 0, got {options.isl_range_km:g}")
    if not (options.atmosphere_km >= 0 and np.isfinite(options.atmosphere_km)):
        raise UsageError(f"--atmosphere-km must be >= 0, got {options.atmosphere_km:g}")
    nodes = len(constellation.satellites) + len(constellation.stations)
    steps = len(step_times(options.duration, options.step))
    if nodes > limits.MAX_NODES:
        raise UsageError(f"{nodes} nodes (satellites and stations), more than the "
                         f"{limits.MAX_NODES} a scenario may have")
    if steps > limits.MAX_STEPS:
        raise UsageError(f"{steps} steps, more than the {limits.MAX_STEPS} a scenario may "
                         "have: use a longer --step")
    if nodes * steps > MAX_POSITIONS:
        raise UsageError(f"{nodes} nodes x {steps} steps = {nodes * steps} positions, more "
                         f"than {MAX_POSITIONS} (the file would pass the 32 MiB limit)",
                         hint="use a longer --step or a shorter --duration")
    seen: dict[str, str] = {}
    for s in constellation.satellites:
        where = f"{s.source}:{s.line_number}" if s.line_number else s.source
        if s.name in seen:
            raise UsageError(f"{where}: object {s.name!r}: name given twice (also "
                             f"{seen[s.name]}); node names must be unique")
        seen[s.name] = where
    names = set(seen)
    clash = [g.name for g in constellation.stations if g.name in names]
    if clash:
        raise UsageError(f"ground station {clash[0]!r} has the name of a satellite: node "
                         "names must be unique")


def build(constellation: Constellation, options: Options) -> Scenario:
    """The scenario; UsageError (nothing built) for bad input or an SGP4 failure."""
    check(constellation, options)
    offsets = step_times(options.duration, options.step)
    sats = list(constellation.satellites)
    sat_km = np.round(propagate.itrs_positions_km(sats, options.start, offsets), 3)
    station_km = {g.name: np.round(propagate.station_itrs_km(g), 3)
                  for g in constellation.stations}
    isl = _isl_pairs(constellation, options, sat_km, [s.name for s in sats])
    gsl = _gsl_pairs(constellation.stations, sats, sat_km, options.start)
    steps = []
    for k, t in enumerate(offsets):
        positions = {s.name: _xyz(sat_km[i, k]) for i, s in enumerate(sats)}
        positions |= {name: _xyz(xyz) for name, xyz in station_km.items()}
        steps.append(Step(time=t, visible=frozenset(isl[k] | gsl[k]), positions=positions))
    nodes = [NodeSpec(s.name, i + 1, options.iphys, "satellite") for i, s in enumerate(sats)]
    nodes += [NodeSpec(g.name, len(sats) + i + 1, options.iphys, "ground")
              for i, g in enumerate(constellation.stations)]
    return Scenario(nodes=tuple(nodes), duration=float(options.duration), steps=tuple(steps),
                    name=options.name or f"constellation-{len(sats)}sat-"
                                         f"{len(constellation.stations)}gs",
                    source_format="native", length_unit="km", link_model=options.link_model,
                    link_classes=dict(options.link_classes),
                    start_time=utc_text(options.start), frame="ITRS")


def _xyz(row: np.ndarray) -> tuple[float, float, float]:
    return (float(row[0]), float(row[1]), float(row[2]))


def _isl_pairs(constellation: Constellation, options: Options, sat_km: np.ndarray,
               names: list[str]) -> list[set[Pair]]:
    steps = sat_km.shape[1]
    if options.isl == "none":
        return [set() for _ in range(steps)]
    if options.isl == "grid":
        index = {n: k for k, n in enumerate(names)}
        grid = grid_neighbours(list(constellation.shells))
        i = np.array([index[a] for a, _ in grid], dtype=int)
        j = np.array([index[b] for _, b in grid], dtype=int)
        limit = np.inf
    else:
        assert options.isl_range_km is not None
        i, j = np.triu_indices(len(names), k=1)
        limit = options.isl_range_km
    radius = EARTH_RADIUS_KM + options.atmosphere_km
    out = []
    for k in range(steps):
        p, q = sat_km[i, k], sat_km[j, k]
        d = q - p
        length2 = np.einsum("ij,ij->i", d, d)
        s = np.clip(-np.einsum("ij,ij->i", p, d) / np.where(length2 > 0, length2, 1), 0, 1)
        closest = np.linalg.norm(p + s[:, None] * d, axis=1)
        ok = (np.sqrt(length2) <= limit) & (closest > radius)
        out.append({pair(names[a], names[b]) for a, b in zip(i[ok], j[ok], strict=True)})
    return out


def _gsl_pairs(stations: Sequence[GroundStation], sats: list[Tle], sat_km: np.ndarray,
               start: datetime) -> list[set[Pair]]:
    steps = sat_km.shape[1]
    out: list[set[Pair]] = [set() for _ in range(steps)]
    for g in stations:
        elevation = propagate.elevations_deg(g, sat_km, start)
        above = elevation >= g.min_elevation_deg
        distance = np.linalg.norm(sat_km - propagate.station_itrs_km(g), axis=2)
        for k in range(steps):
            seen = np.flatnonzero(above[:, k])
            if seen.size and g.policy == "nearest":
                seen = seen[[np.argmin(distance[seen, k])]]
            elif seen.size and g.policy == "highest":
                seen = seen[[np.argmax(elevation[seen, k])]]
            out[k].update(pair(g.name, sats[i].name) for i in seen)
    return out
