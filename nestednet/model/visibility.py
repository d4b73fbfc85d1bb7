"""Synthetic mobility: node positions over time, turned into a visibility timeline.

Three models, all deterministic for a seed (one random.Random(seed) per call, never
the global generator), in a box of side ``area`` (metres, say) and height area/10:

- ``static``: nodes placed uniformly at random and left there.
- ``random-waypoint``: each node walks in a straight line to a random waypoint at a
  random speed, then picks the next one (no pause). Speeds are drawn so that a node
  crosses the area in about one to three scenario durations.
- ``orbit``: nodes circle the area's centre at their own radius, altitude, phase
  and angular speed (a quarter to one full turn per scenario, either direction).
  With an ``altitude`` (and a length unit) it is instead a shell of satellites
  around the Earth: circular orbits of radius 6,371 km + altitude, ``planes``
  orbital planes at 53 degrees inclination spread evenly in right ascension
  (a Walker delta pattern, phasing 1), satellites evenly spaced in each plane,
  a seed-chosen phase offset, Kepler's angular speed sqrt(mu / r^3).

Positions are rounded to centimetres *before* visibility is derived, with the same
line-of-sight rule the parser applies (line_of_sight.py: distance <= range), so a
written file re-parses to exactly the visibility computed here.

When no area is given it is chosen so that a node sees about three others on
average: side = range * sqrt(pi * (N - 1) / 3), at least the range.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from nestednet.errors import UsageError
from nestednet.model.line_of_sight import Position, visible_pairs
from nestednet.model.link_models import LinkModel
from nestednet.model.scenario import LENGTH_UNITS, MAX_IPHYS, NodeSpec, Scenario, Step

MODELS = ("static", "random-waypoint", "orbit")
TARGET_MEAN_DEGREE = 3.0
EARTH_RADIUS_M = 6_371_000.0
EARTH_MU_M3_PER_S2 = 3.986004418e14
"""Earth's standard gravitational parameter GM."""
INCLINATION_DEG = 53.0
"""Starlink's first shell; any value gives a valid shell, this one a familiar one."""
ATMOSPHERE_M = 80_000.0
"""A laser sight line must pass above this height: the longest usable chord."""


def default_area(nodes: int, range_: float) -> float:
    return max(range_, range_ * math.sqrt(math.pi * max(nodes - 1, 1) / TARGET_MEAN_DEGREE))


def step_times(duration: float, step: float) -> list[float]:
    """0, step, 2*step, ... strictly before the end of the scenario."""
    count = max(1, math.ceil(duration / step - 1e-9))
    return [round(k * step, 6) for k in range(count)]


@dataclass(frozen=True)
class Shell:
    """A satellite shell for the ``orbit`` model: altitude above the Earth, planes."""

    altitude: float
    planes: int = 1


def generate(*, nodes: int, duration: float, step: float, range_: float, model: str,
             seed: int = 0, iphys: int = 4, area: float | None = None,
             name: str = "", length_unit: str | None = None,
             link_model: LinkModel | None = None, shell: Shell | None = None) -> Scenario:
    """A scenario whose steps are positions under ``model`` and visibility by distance.

    ``length_unit`` and ``link_model`` are written into the scenario as given.
    """
    _check_arguments(nodes, duration, step, range_, model, iphys, area)
    side = area if area is not None else default_area(nodes, range_)
    if not math.isfinite(side):
        raise UsageError(f"--range {range_:g} is too large for {nodes} nodes: give --area")
    rng = random.Random(seed)
    times = step_times(duration, step)
    names = [f"n{i}" for i in range(1, nodes + 1)]
    if shell is not None:
        tracks = _shell_tracks(rng, nodes, times, shell, range_, model, area, length_unit)
    else:
        tracks = {"static": _static, "random-waypoint": _random_waypoint, "orbit": _orbit}[
            model](rng, nodes, side, duration, times)
    steps = []
    for k, t in enumerate(times):
        positions = {n: _rounded(tracks[i][k]) for i, n in enumerate(names)}
        steps.append(Step(time=t, visible=visible_pairs(positions, range_), positions=positions))
    specs = tuple(NodeSpec(name=n, node_id=i + 1, iphys=iphys) for i, n in enumerate(names))
    return Scenario(nodes=specs, duration=float(duration), steps=tuple(steps),
                    name=name or f"{model}-{nodes}x{iphys}-seed{seed}",
                    source_format="native", range=float(range_), length_unit=length_unit,
                    link_model=link_model)


def _check_arguments(nodes: int, duration: float, step: float, range_: float, model: str,
                     iphys: int, area: float | None) -> None:
    checks = [
        (nodes >= 1, f"--nodes must be at least 1, got {nodes}"),
        (math.isfinite(duration) and duration > 0, f"--duration must be > 0, got {duration}"),
        (math.isfinite(step) and step > 0, f"--step must be > 0, got {step}"),
        (math.isfinite(range_) and range_ > 0, f"--range must be > 0, got {range_}"),
        (model in MODELS, f"unknown model {model!r}: choose one of {', '.join(MODELS)}"),
        (1 <= iphys <= MAX_IPHYS, f"--iphys must be 1..{MAX_IPHYS}, got {iphys}"),
        (area is None or (math.isfinite(area) and area > 0), f"--area must be > 0, got {area}"),
    ]
    for ok, message in checks:
        if not ok:
            raise UsageError(message)
    check_times(duration, step)


def check_times(duration: float, step: float) -> None:
    """A duration and step that make between 1 and 100,000 steps."""
    if not (math.isfinite(duration) and duration > 0):
        raise UsageError(f"--duration must be > 0, got {duration}")
    if not (math.isfinite(step) and step > 0):
        raise UsageError(f"--step must be > 0, got {step}")
    if step > duration:
        raise UsageError(f"--step ({step:g}) is longer than --duration ({duration:g})")
    if duration / step - 1e-9 > 100_000:  # the count step_times() would make, without the list
        raise UsageError("more than 100000 steps: use a longer --step")


def _rounded(p: Position) -> Position:
    return (round(p[0], 2), round(p[1], 2), round(p[2], 2))


def _random_point(rng: random.Random, side: float) -> Position:
    return (rng.uniform(0, side), rng.uniform(0, side), rng.uniform(0, side / 10))


def _static(rng: random.Random, nodes: int, side: float, duration: float,
            times: list[float]) -> list[list[Position]]:
    return [[p] * len(times) for p in (_random_point(rng, side) for _ in range(nodes))]


def _random_waypoint(rng: random.Random, nodes: int, side: float, duration: float,
                     times: list[float]) -> list[list[Position]]:
    fastest = side / duration
    tracks = []
    for _ in range(nodes):
        pos = _random_point(rng, side)
        target = _random_point(rng, side)
        speed = rng.uniform(fastest / 3, fastest)
        track = []
        now = 0.0
        for t in times:
            left = t - now
            for _guard in range(10_000):
                gap = math.dist(pos, target)
                if speed * left < gap:
                    f = speed * left / gap
                    pos = tuple(a + (b - a) * f for a, b in zip(pos, target, strict=True))
                    break
                pos, left = target, left - gap / speed
                target = _random_point(rng, side)
                speed = rng.uniform(fastest / 3, fastest)
            now = t
            track.append(pos)
        tracks.append(track)
    return tracks


def _orbit(rng: random.Random, nodes: int, side: float, duration: float,
           times: list[float]) -> list[list[Position]]:
    centre = side / 2
    tracks = []
    for _ in range(nodes):
        radius = rng.uniform(0.1, 0.5) * side
        altitude = rng.uniform(0, side / 10)
        phase = rng.uniform(0, 2 * math.pi)
        turns = rng.uniform(0.25, 1.0) * rng.choice((-1, 1))
        omega = 2 * math.pi * turns / duration
        tracks.append([(centre + radius * math.cos(phase + omega * t),
                        centre + radius * math.sin(phase + omega * t), altitude)
                       for t in times])
    return tracks


def longest_clear_chord(radius: float, clearance: float) -> float:
    """The longest straight line between two points at ``radius`` that stays above
    ``clearance`` from the centre: links longer than this would cross the Earth."""
    return 2 * math.sqrt(max(radius**2 - clearance**2, 0.0))


def _shell_tracks(rng: random.Random, nodes: int, times: list[float], shell: Shell,
                  range_: float, model: str, area: float | None,
                  length_unit: str | None) -> list[list[Position]]:
    if model != "orbit" or area is not None or length_unit is None:
        raise UsageError("--altitude makes a satellite shell: it needs --model orbit and "
                         "--length-unit m|km, and takes no --area")
    if not (math.isfinite(shell.altitude) and shell.altitude > 0):
        raise UsageError(f"--altitude must be > 0, got {shell.altitude:g}")
    if not 1 <= shell.planes <= nodes:
        raise UsageError(f"--planes must be 1..{nodes} (the node count), got {shell.planes}")
    per_m = 1 / LENGTH_UNITS[length_unit]
    radius = (EARTH_RADIUS_M * per_m) + shell.altitude
    chord = longest_clear_chord(radius, (EARTH_RADIUS_M + ATMOSPHERE_M) * per_m)
    if range_ > chord:
        raise UsageError(f"--range {range_:g} {length_unit} would let links cross the Earth: "
                         f"at altitude {shell.altitude:g} {length_unit} the longest line of "
                         f"sight above {ATMOSPHERE_M / 1000:g} km is {chord:.0f} {length_unit}")
    omega = math.sqrt(EARTH_MU_M3_PER_S2 * per_m**3 / radius**3)
    incl = math.radians(INCLINATION_DEG)
    offset = rng.uniform(0, 2 * math.pi)
    per_plane = math.ceil(nodes / shell.planes)
    tracks = []
    for i in range(nodes):
        plane, slot = divmod(i, per_plane)
        raan = 2 * math.pi * plane / shell.planes
        phase = offset + 2 * math.pi * (slot / per_plane + plane / nodes)
        tracks.append([_on_orbit(radius, raan, incl, phase + omega * t) for t in times])
    return tracks


def _on_orbit(radius: float, raan: float, incl: float, u: float) -> Position:
    """Earth-centred position on a circular orbit (argument of latitude ``u``)."""
    cu, su = math.cos(u), math.sin(u)
    return (radius * (math.cos(raan) * cu - math.sin(raan) * su * math.cos(incl)),
            radius * (math.sin(raan) * cu + math.cos(raan) * su * math.cos(incl)),
            radius * su * math.sin(incl))
