"""The line-of-sight rule: which nodes see each other, given their positions.

One rule, used both by the scenario parser (native steps given as positions) and by
the generator, so a generated file re-parses to exactly the visibility it was written
with: two nodes see each other when their Euclidean distance is at most the range.

With Earth occlusion (a scenario's ``"earth_occlusion": true``, positions Earth-centred)
the straight segment between them must also stay outside a sphere round the origin:
the Earth plus an atmosphere a laser cannot cross (80 km, as Hypatia). A rule for
space segments: a node inside that sphere (a ground station) sees nothing by it, so
ground links are given as explicit pairs (the constellation generator writes them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

Position = tuple[float, float, float]
Pair = tuple[str, str]


def pair(a: str, b: str) -> Pair:
    """The canonical (sorted) form of an unordered node pair."""
    return (a, b) if a <= b else (b, a)


def distance(p: Position, q: Position) -> float:
    return math.dist(p, q)


EARTH_RADIUS_KM = 6378.137
"""WGS84 equatorial radius: the sphere that contains the whole ellipsoid."""
ATMOSPHERE_KM = 80.0
"""Hypatia's rule: an inter-satellite link may not pass below 80 km."""


def segment_clears_sphere(p: Position, q: Position, radius: float) -> bool:
    """Whether the segment p-q stays farther than ``radius`` from the origin."""
    d = (q[0] - p[0], q[1] - p[1], q[2] - p[2])
    dd = d[0] * d[0] + d[1] * d[1] + d[2] * d[2]
    s = 0.0 if dd == 0 else -(p[0] * d[0] + p[1] * d[1] + p[2] * d[2]) / dd
    s = min(1.0, max(0.0, s))
    closest = (p[0] + s * d[0], p[1] + s * d[1], p[2] + s * d[2])
    return math.hypot(*closest) > radius


def visible_pairs(positions: Mapping[str, Position], range_: float,
                  clearance: float | None = None) -> frozenset[Pair]:
    """Every pair of distinct nodes whose distance is <= range_ (inclusive) and, with a
    ``clearance`` radius, whose segment clears the sphere of that radius."""
    names = sorted(positions)
    found: set[Pair] = set()
    for i, a in enumerate(names):
        pa = positions[a]
        for b in names[i + 1:]:
            pb = positions[b]
            if math.dist(pa, pb) <= range_ and (
                    clearance is None or segment_clears_sphere(pa, pb, clearance)):
                found.add((a, b))
    return frozenset(found)
