"""How big a scenario may be, checked before anything else reads the file.

Validating a scenario costs time in proportion to its size (the JSON Schema pass
dominates: about 0.2 ms per step here), so a file far beyond what a lab can play is
refused by counting first, in one cheap pass, and never validated item by item.
`visibility check` and `run` load scenarios through the same code, so they accept
and refuse the same files, in the same words. scenarios/README.md lists these limits.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from nestednet.errors import UsageError

MAX_NODES = 5_000
"""Nodes per scenario: a lab has at most topology.MAX_NODES (999), but a constellation
(Starlink's first shell: 1,584 satellites; StarryNet's example: 4,408) may be
generated, checked and drawn even where it cannot run on one machine."""

MAX_FILE_BYTES = 32 * 1024 * 1024
"""A scenario file's size: decoding alone takes seconds beyond it."""
MAX_STEPS = 10_000
"""Time steps per scenario (native `steps`, or distinct `Time` values)."""
MAX_ENTRIES = 200_000
"""NestedNet format: `MobileNodeDef` entries (one per node per time step)."""
MAX_DURATION_S = 10_000_000.0
"""Scenario seconds (about 116 days)."""
MAX_NODE_ID = 2**31 - 1
"""Largest node id (`id`, `nodeID`): ids travel in the CA protocol as 32-bit numbers."""

_HINT = "scenarios/README.md (Limits) gives every limit"


def check_scenario_size(doc: Any, source: str) -> None:
    """UsageError for the first limit a decoded scenario document exceeds (any format);
    documents of unknown shape are left to the format checks."""
    if not isinstance(doc, dict):
        return
    root = doc.get("MobilecomScnDef")
    if isinstance(root, dict):
        _check_nestednet(root, source)
    else:
        _check_native(doc, source)


def _too_many(source: str, where: str, count: int, what: str, limit: int) -> UsageError:
    return UsageError(f"{source}: {where}: {count} {what}, more than the limit of {limit}",
                      hint=_HINT)


def _check_number(source: str, where: str, value: Any, limit: float, what: str) -> None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > limit:
        raise UsageError(f"{source}: {where}: {what} {_number(value)} is above the limit "
                         f"of {_number(limit)}", hint=_HINT)


def _number(value: float) -> str:
    if not finite_number(value):
        return describe_number(value)
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e12 else f"{value:g}"


def finite_number(value: Any) -> bool:
    """A JSON number (not a bool) that a float can hold: finite, and for an integer within
    the float range. JSON's and Python's integers have no size limit, floats do, so a
    huge integer must be refused as input rather than overflow where it is used."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, int):
        return abs(value) <= sys.float_info.max
    return math.isfinite(value)


def describe_number(value: int | float) -> str:
    """A number for an error message, also one no float can hold."""
    if isinstance(value, int) and not isinstance(value, bool) \
            and abs(value) > sys.float_info.max:
        digits = int(abs(value).bit_length() * math.log10(2)) + 1
        sign = "a negative" if value < 0 else "an"
        return f"{sign} integer of about {digits} digits (beyond ±1.8e308)"
    return repr(value)


def check_file_size(size: int, source: str) -> None:
    if size > MAX_FILE_BYTES:
        raise UsageError(f"{source}: {size} bytes, more than the limit of {MAX_FILE_BYTES} "
                         "for a scenario file", hint=_HINT)


def _check_native(doc: dict, source: str) -> None:
    _check_number(source, "duration", doc.get("duration"), MAX_DURATION_S, "duration (s)")
    nodes, steps = doc.get("nodes"), doc.get("steps")
    if isinstance(nodes, list):
        if len(nodes) > MAX_NODES:
            raise _too_many(source, "nodes", len(nodes), "nodes", MAX_NODES)
        for i, node in enumerate(nodes):
            if isinstance(node, dict):
                _check_number(source, f"nodes[{i}].id", node.get("id"), MAX_NODE_ID, "id")
    if isinstance(steps, list) and len(steps) > MAX_STEPS:
        raise _too_many(source, "steps", len(steps), "steps", MAX_STEPS)


def _check_nestednet(root: dict, source: str) -> None:
    where = "MobilecomScnDef"
    _check_number(source, f"{where}.simDuration", root.get("simDuration"), MAX_DURATION_S,
                  "simDuration (s)")
    entries = root.get("MobileNodeDef")
    if not isinstance(entries, list):
        return
    where += ".MobileNodeDef"
    if len(entries) > MAX_ENTRIES:
        raise _too_many(source, where, len(entries), "entries", MAX_ENTRIES)
    names, times = set(), set()
    for k, entry in enumerate(entries):
        if not isinstance(entry, dict):
            continue
        _check_number(source, f"{where}[{k}].nodeID", entry.get("nodeID"), MAX_NODE_ID,
                      "nodeID")
        if isinstance(entry.get("nodeName"), str):
            names.add(entry["nodeName"])
        if isinstance(entry.get("Time"), (int, float)):
            times.add(entry["Time"])
    if len(names) > MAX_NODES:
        raise _too_many(source, where, len(names), "distinct nodes", MAX_NODES)
    if len(times) > MAX_STEPS:
        raise _too_many(source, where, len(times), "distinct Times (steps)", MAX_STEPS)
