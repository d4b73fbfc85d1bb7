"""The line-of-sight rule: which nodes see each other, given their positions.

One rule, used both by the scenario parser (native steps given as positions) and by
the generator, so a generated file re-parses to exactly the visibility it was written
with: two nodes see each other when their Euclidean distance is at most the range.
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


def visible_pairs(positions: Mapping[str, Position], range_: float) -> frozenset[Pair]:
    """Every pair of distinct nodes whose distance is <= range_ (inclusive)."""
    names = sorted(positions)
    found: set[Pair] = set()
    for i, a in enumerate(names):
        pa = positions[a]
        for b in names[i + 1:]:
            if math.dist(pa, positions[b]) <= range_:
                found.add((a, b))
    return frozenset(found)
