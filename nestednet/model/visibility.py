"""Synthetic mobility: node positions over time, turned into a visibility timeline.

Three models, all deterministic for a seed (one random.Random(seed) per call, never
the global generator), in a box of side ``area`` (metres, say) and height area/10:

- ``static``: nodes placed uniformly at random and left there.
- ``random-waypoint``: each node walks in a straight line to a random waypoint at a
  random speed, then picks the next one (no pause). Speeds are drawn so that a node
  crosses the area in about one to three scenario durations.
- ``orbit``: nodes circle the area's centre at their own radius, altitude, phase
  and angular speed (a quarter to one full turn per scenario, either direction).

Positions are rounded to centimetres *before* visibility is derived, with the same
line-of-sight rule the parser applies (line_of_sight.py: distance <= range), so a
written file re-parses to exactly the visibility computed here.

When no area is given it is chosen so that a node sees about three others on
average: side = range * sqrt(pi * (N - 1) / 3), at least the range.
"""

from __future__ import annotations

import math
import random

from nestednet.errors import UsageError
from nestednet.model.line_of_sight import Position, visible_pairs
from nestednet.model.scenario import MAX_IPHYS, NodeSpec, Scenario, Step

MODELS = ("static", "random-waypoint", "orbit")
TARGET_MEAN_DEGREE = 3.0


def default_area(nodes: int, range_: float) -> float:
    return max(range_, range_ * math.sqrt(math.pi * max(nodes - 1, 1) / TARGET_MEAN_DEGREE))


def step_times(duration: float, step: float) -> list[float]:
    """0, step, 2*step, ... strictly before the end of the scenario."""
    count = max(1, math.ceil(duration / step - 1e-9))
    return [round(k * step, 6) for k in range(count)]


def generate(*, nodes: int, duration: float, step: float, range_: float, model: str,
             seed: int = 0, iphys: int = 4, area: float | None = None,
             name: str = "") -> Scenario:
    """A scenario whose steps are positions under ``model`` and visibility by distance."""
    _check_arguments(nodes, duration, step, range_, model, iphys, area)
    side = area if area is not None else default_area(nodes, range_)
    if not math.isfinite(side):
        raise UsageError(f"--range {range_:g} is too large for {nodes} nodes: give --area")
    rng = random.Random(seed)
    times = step_times(duration, step)
    names = [f"n{i}" for i in range(1, nodes + 1)]
    tracks = {"static": _static, "random-waypoint": _random_waypoint, "orbit": _orbit}[model](
        rng, nodes, side, duration, times)
    steps = []
    for k, t in enumerate(times):
        positions = {n: _rounded(tracks[i][k]) for i, n in enumerate(names)}
        steps.append(Step(time=t, visible=visible_pairs(positions, range_), positions=positions))
    specs = tuple(NodeSpec(name=n, node_id=i + 1, iphys=iphys) for i, n in enumerate(names))
    return Scenario(nodes=specs, duration=float(duration), steps=tuple(steps),
                    name=name or f"{model}-{nodes}x{iphys}-seed{seed}",
                    source_format="native", range=float(range_))


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
