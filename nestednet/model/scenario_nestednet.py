"""The NestedNet visibility format of the seed thesis (Fig. 3.11).

``{"MobilecomScnDef": {"simDuration": s, "MobileNodeDef": [entry, ...]}}`` with one
entry per node per time step: the node's name, ID, position and ``Time``, and its
``visibilityGraph``, a list of nodes each with ``LoS`` true or false. As printed in the
thesis, a node lists itself there too: that entry makes no link and is ignored, except
that its position, where given, must be the node's own.

How it maps onto the timeline model:

- Entries are grouped by ``Time``; each distinct time is one step, in time order
  (entry order in the file does not matter). Every node must have exactly one entry
  at every time.
- **Line of sight must hold both ways.** A pair is visible at a time only when each
  node's entry lists the other with ``"LoS": true``. A pair listed one way only, or
  not listed, is not visible. A link carries traffic both ways, so a one-sided sight
  line is not enough to build one (and the rule is symmetric by construction).
- The node's own PosX/PosY/PosZ are its position; the positions repeated inside
  visibilityGraph entries are checked to be numbers but not used.
- Names and IDs must be consistent: one name, one ID, everywhere in the file.
- The format has no iPHY count; the caller passes it (CLI ``--iphys``, default 4).
- Extra fields are tolerated, since tools that write this format may add some.
"""

from __future__ import annotations

import math
from typing import Any

from nestednet.errors import UsageError
from nestednet.model.limits import finite_number
from nestednet.model.line_of_sight import Pair, Position, pair
from nestednet.model.scenario import (
    DEFAULT_IPHYS,
    MAX_IPHYS,
    NodeSpec,
    Problems,
    Scenario,
    Step,
    check_against_schema,
    check_finite,
    check_node_name,
    check_steps_order,
    format_path,
    load_schema,
)

ROOT = "MobilecomScnDef"
SCHEMA_RESOURCE = "nestednet-visibility.schema.json"
_ENTRIES = [ROOT, "MobileNodeDef"]
# A node's self entry repeats its position; allow for writers that round differently.
SELF_POSITION_REL_TOL = 1e-9
SELF_POSITION_ABS_TOL = 1e-6


def is_nestednet(doc: Any) -> bool:
    return isinstance(doc, dict) and ROOT in doc


def parse_nestednet(doc: Any, source: str, *, iphys: int = DEFAULT_IPHYS) -> Scenario:
    """Validate a decoded NestedNet-format document; raise UsageError naming each problem."""
    if not 1 <= iphys <= MAX_IPHYS:
        raise UsageError(f"iPHYs per node must be 1..{MAX_IPHYS}, got {iphys}")
    problems = Problems(source)
    check_against_schema(doc, load_schema(SCHEMA_RESOURCE), problems)
    problems.raise_if_any(hint="the format is described in scenarios/README.md")

    root = doc[ROOT]
    duration_ok = check_finite(problems, [ROOT, "simDuration"], root["simDuration"])
    entries: list[dict[str, Any]] = root["MobileNodeDef"]

    ids: dict[str, int] = {}
    owners: dict[int, str] = {}
    first_seen: dict[str, list[str | int]] = {}
    for k, entry in enumerate(entries):
        _check_identity(problems, [*_ENTRIES, k], entry, ids, owners, first_seen)

    by_time: dict[float, dict[str, tuple[int, dict[str, Any]]]] = {}
    time_path: dict[float, list[str | int]] = {}
    for k, entry in enumerate(entries):
        path = [*_ENTRIES, k]
        if not check_finite(problems, [*path, "Time"], entry["Time"]):
            continue
        t = float(entry["Time"])
        time_path.setdefault(t, [*path, "Time"])
        at_t = by_time.setdefault(t, {})
        name = entry["nodeName"]
        if name in at_t:
            other = at_t[name][0]
            problems.add(path, f"second entry for node {name!r} at Time {t:g} "
                               f"(also MobileNodeDef[{other}])")
            continue
        at_t[name] = (k, entry)

    names = list(ids)
    steps: list[Step] = []
    for t in sorted(by_time):
        at_t = by_time[t]
        missing = [n for n in names if n not in at_t]
        if missing:
            listed = ", ".join(repr(m) for m in missing[:5]) + (" ..." if len(missing) > 5 else "")
            problems.add(time_path[t], f"no entry at Time {t:g} for node(s) {listed}")
        steps.append(_step(problems, t, at_t, ids))

    if duration_ok:
        times = [(time_path[t], t) for t in sorted(by_time)]
        check_steps_order(problems, times, float(root["simDuration"]))
    problems.raise_if_any()
    nodes = tuple(NodeSpec(name=n, node_id=ids[n], iphys=iphys) for n in names)
    return Scenario(nodes=nodes, duration=float(root["simDuration"]), steps=tuple(steps),
                    source_format="nestednet")


def to_nestednet(scenario: Scenario) -> dict[str, Any]:
    """The NestedNet-format document; needs positions at every step (the format has them)."""
    if not scenario.has_positions:
        raise UsageError("the NestedNet format needs node positions at every step; "
                         "this scenario gives only visible pairs",
                         hint="write it in the native format instead (--format native)")
    entries: list[dict[str, Any]] = []
    for step in scenario.steps:
        assert step.positions is not None
        for node in scenario.nodes:
            x, y, z = step.positions[node.name]
            graph = []
            for other in scenario.nodes:
                if other.name == node.name:
                    continue
                ox, oy, oz = step.positions[other.name]
                graph.append({"nodeName": other.name, "nodeID": other.node_id,
                              "LoS": pair(node.name, other.name) in step.visible,
                              "PosX": ox, "PosY": oy, "PosZ": oz})
            entries.append({"nodeName": node.name, "nodeID": node.node_id,
                            "PosX": x, "PosY": y, "PosZ": z, "Time": step.time,
                            "visibilityGraph": graph})
    return {ROOT: {"simDuration": scenario.duration, "MobileNodeDef": entries}}


def _check_identity(problems: Problems, path: list[str | int], entry: dict[str, Any],
                    ids: dict[str, int], owners: dict[int, str],
                    first_seen: dict[str, list[str | int]]) -> None:
    """One name <-> one ID across the file; records the node on first sight."""
    name, node_id = entry["nodeName"], int(entry["nodeID"])  # the schema admits 2.0
    if not check_node_name(problems, [*path, "nodeName"], name):
        return
    if name in ids:
        if ids[name] != node_id:
            problems.add([*path, "nodeID"], f"node {name!r} has nodeID {ids[name]} elsewhere "
                                            f"({format_path(first_seen[name])}), here {node_id}")
        return
    if node_id in owners:
        problems.add([*path, "nodeID"], f"nodeID {node_id} is already node {owners[node_id]!r}")
        return
    ids[name] = node_id
    owners[node_id] = name
    first_seen[name] = [*path, "nodeID"]


def _check_self_entry(problems: Problems, where: list[str | int], peer: dict[str, Any],
                      own: Position | None) -> None:
    """The thesis's nodes list themselves (Fig. 3.11); no link, but the position must agree."""
    if own is None:
        return
    for axis, c in enumerate(("PosX", "PosY", "PosZ")):
        v = peer.get(c)
        if finite_number(v) and not math.isclose(
                v, own[axis], rel_tol=SELF_POSITION_REL_TOL, abs_tol=SELF_POSITION_ABS_TOL):
            problems.add([*where, c], f"the node's own entry lists {c} {v:g}, but its "
                                      f"position is {own[axis]:g}")


def _step(problems: Problems, t: float, at_t: dict[str, tuple[int, dict[str, Any]]],
          ids: dict[str, int]) -> Step:
    sees: dict[str, set[str]] = {}
    positions: dict[str, Position] = {}
    for name, (k, entry) in at_t.items():
        path: list[str | int] = [*_ENTRIES, k]
        coords = [entry[c] for c in ("PosX", "PosY", "PosZ")]
        if all(check_finite(problems, [*path, c], v)
               for c, v in zip(("PosX", "PosY", "PosZ"), coords, strict=True)):
            positions[name] = (float(coords[0]), float(coords[1]), float(coords[2]))
        sees[name] = set()
        listed: dict[str, int] = {}
        for j, peer in enumerate(entry["visibilityGraph"]):
            where = [*path, "visibilityGraph", j]
            peer_name, peer_id = peer["nodeName"], peer["nodeID"]
            for c in ("PosX", "PosY", "PosZ"):
                if c in peer:
                    check_finite(problems, [*where, c], peer[c])
            if peer_name not in ids:
                problems.add([*where, "nodeName"], f"unknown node {peer_name!r}")
                continue
            if peer_id != ids[peer_name]:
                problems.add([*where, "nodeID"],
                             f"node {peer_name!r} has nodeID {ids[peer_name]}, not {peer_id}")
                continue
            if peer_name == name:
                _check_self_entry(problems, where, peer, positions.get(name))
                continue
            if peer_name in listed:
                problems.add(where, f"node {peer_name!r} listed twice "
                                    f"(also visibilityGraph[{listed[peer_name]}])")
                continue
            listed[peer_name] = j
            if peer["LoS"]:
                sees[name].add(peer_name)
    visible: set[Pair] = {
        pair(a, b) for a, peers in sees.items() for b in peers if a in sees.get(b, ())
    }
    complete = len(positions) == len(at_t)
    return Step(time=t, visible=frozenset(visible), positions=positions if complete else None)
