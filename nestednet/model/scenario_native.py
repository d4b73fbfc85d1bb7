"""The native scenario format (schema: nestednet/schemas/scenario.schema.json).

Structure is checked with the JSON Schema, then the rules a schema cannot say
(unknown, duplicate or self-referencing nodes, step order, finite numbers) are
checked here. Every problem carries its path in the file.

A step gives positions, explicit visible pairs, or both. With both, the explicit
pairs win and the positions are only for display; with positions only, visibility
follows the line-of-sight rule (line_of_sight.py: distance <= range, inclusive).

A step's ``links`` give explicit properties of visible pairs, both directions
(``between``) or one (``from``/``to``, which wins over ``between`` for its
direction); the top-level ``link_model`` covers the rest (link_resolver.py).
"""

from __future__ import annotations

from typing import Any

from nestednet.model import actions as scenario_actions
from nestednet.model import link_models
from nestednet.model.line_of_sight import (
    ATMOSPHERE_KM,
    EARTH_RADIUS_KM,
    Pair,
    Position,
    pair,
    visible_pairs,
)
from nestednet.model.link_properties import LinkProperties, PropertyError, parse_properties
from nestednet.model.scenario import (
    DEFAULT_IPHYS,
    LENGTH_UNITS,
    NodeSpec,
    Problems,
    Scenario,
    Step,
    check_against_schema,
    check_finite,
    check_start_time,
    check_steps_order,
    load_schema,
)

FORMAT_ID = "nestednet-scenario/1"
SCHEMA_RESOURCE = "scenario.schema.json"


def schema() -> dict[str, Any]:
    """The native format's JSON Schema, shipped as package data.

    Its ``link_model`` refers to link-model.schema.json; that reference is replaced
    here by the schema built from the model registry, so a model a user registers
    is validated like a built-in (and no schema resolver is needed).
    """
    doc = load_schema(SCHEMA_RESOURCE)
    declared = doc["properties"]["link_model"]
    models = {k: v for k, v in link_models.schema().items() if k not in ("$schema", "$id")}
    classes = doc["properties"]["link_classes"]
    properties = doc["properties"] | {
        "link_model": models | {"description": declared["description"]},
        "link_classes": classes | {"properties": {k: models for k in classes["properties"]}},
        "actions": scenario_actions.schema()}
    return doc | {"properties": properties}


def is_native(doc: Any) -> bool:
    """A file saying "format" (or having "steps") is native: its problems get paths."""
    return (isinstance(doc, dict) and ("steps" in doc or "format" in doc)
            and "MobilecomScnDef" not in doc)


def parse_native(doc: Any, source: str) -> Scenario:
    """Validate a decoded native scenario document; raise UsageError naming each problem."""
    problems = Problems(source)
    check_against_schema(doc, schema(), problems)
    problems.raise_if_any(hint="the format is described in scenarios/scenario.schema.json")

    check_finite(problems, ["duration"], doc["duration"])
    default_iphys = doc.get("iphys", DEFAULT_IPHYS)
    nodes = _parse_nodes(doc["nodes"], default_iphys, problems)
    names = {n.name for n in nodes}

    los = doc.get("line_of_sight")
    range_: float | None = None
    if los is not None and check_finite(problems, ["line_of_sight", "range"], los["range"]):
        range_ = float(los["range"])
    clearance = _clearance(los, doc.get("length_unit"), problems)
    start_time = doc.get("start_time")
    if start_time is not None:
        check_start_time(problems, ["start_time"], start_time)

    model = parse_model_declaration(doc.get("link_model"), ["link_model"], problems)
    classes = {k: parse_model_declaration(v, ["link_classes", k], problems)
               for k, v in doc.get("link_classes", {}).items()}

    steps: list[Step] = []
    times: list[tuple[list[str | int], float]] = []
    for i, raw in enumerate(doc["steps"]):
        path: list[str | int] = ["steps", i]
        time = 0.0
        if check_finite(problems, [*path, "time"], raw["time"]):
            time = float(raw["time"])
            times.append(([*path, "time"], time))
        positions = _parse_positions(raw.get("positions"), names, path, problems)
        if "visible" in raw:
            visible = _parse_visible(raw["visible"], names, path, problems)
        elif los is None:
            problems.add(path, "positions without 'visible' need 'line_of_sight': "
                               "{\"range\": R} at the top level")
            visible = frozenset()
        elif positions is not None and range_ is not None:
            visible = visible_pairs(positions, range_, clearance)
        else:
            visible = frozenset()
        links = _parse_links(raw.get("links", []), names, visible, path, problems)
        steps.append(Step(time=time, visible=visible, positions=positions, links=links))

    duration = doc["duration"]
    check_steps_order(problems, times,
                      float(duration) if isinstance(duration, int | float) else None)
    problems.raise_if_any()
    actions = scenario_actions.parse_actions(
        doc.get("actions"), nodes={n.name: n.iphys for n in nodes}, duration=float(duration),
        shaped=model is not None or any(s.links for s in steps), problems=problems)
    problems.raise_if_any()
    return Scenario(nodes=tuple(nodes), duration=float(duration), steps=tuple(steps),
                    name=doc.get("name", ""), source_format="native", range=range_,
                    length_unit=doc.get("length_unit"), link_model=model,
                    link_classes={k: m for k, m in classes.items() if m is not None},
                    clearance=clearance, start_time=start_time, frame=doc.get("frame"),
                    actions=actions)


def _clearance(los: dict[str, Any] | None, unit: str | None, problems: Problems) -> float | None:
    """The occlusion sphere's radius in the scenario's length unit, or None."""
    if los is None or not los.get("earth_occlusion", False):
        return None
    if unit not in LENGTH_UNITS:
        problems.add(["line_of_sight", "earth_occlusion"], "Earth occlusion needs the "
                     "positions' unit: add \"length_unit\": \"km\" (or \"m\")")
        return None
    atmosphere = los.get("atmosphere_km", ATMOSPHERE_KM)
    if not check_finite(problems, ["line_of_sight", "atmosphere_km"], atmosphere):
        return None
    return (EARTH_RADIUS_KM + float(atmosphere)) * 1000.0 / LENGTH_UNITS[unit]


def clearance_atmosphere_km(clearance: float, unit: str) -> float:
    """The atmosphere_km a clearance radius was made from (for writing it back)."""
    return round(clearance * LENGTH_UNITS[unit] / 1000.0 - EARTH_RADIUS_KM, 6)


def parse_model_declaration(raw: dict[str, Any] | None, path: list[str | int],
                            problems: Problems) -> link_models.LinkModel | None:
    """A schema-checked model declaration as a model; bad values located under ``path``."""
    if raw is None:
        return None
    try:
        return link_models.build(raw)
    except link_models.ModelError as exc:
        problems.add([*path, *exc.path], str(exc))
        return None


def to_native(scenario: Scenario, *, explicit_pairs: bool | None = None) -> dict[str, Any]:
    """The native document for a scenario.

    Steps with positions are written as positions only (visibility re-derives from
    the range, one source of truth) when the scenario has a range and the step's
    pairs are exactly what the range gives; otherwise (explicit pairs that differ
    from the rule), or with explicit_pairs=True, the visible pairs are written too.
    """
    iphys = {n.iphys for n in scenario.nodes}
    common = iphys.pop() if len(iphys) == 1 else None
    doc: dict[str, Any] = {"format": FORMAT_ID}
    if scenario.name:
        doc["name"] = scenario.name
    doc["duration"] = scenario.duration
    if common is not None:
        doc["iphys"] = common
    if scenario.length_unit is not None:
        doc["length_unit"] = scenario.length_unit
    if scenario.start_time is not None:
        doc["start_time"] = scenario.start_time
    if scenario.frame is not None:
        doc["frame"] = scenario.frame
    if scenario.link_model is not None:
        doc["link_model"] = scenario.link_model.document()
    if scenario.link_classes:
        doc["link_classes"] = {k: m.document() for k, m in scenario.link_classes.items()}
    if scenario.range is not None:
        doc["line_of_sight"] = {"rule": "distance", "range": scenario.range}
        if scenario.clearance is not None and scenario.length_unit is not None:
            doc["line_of_sight"] |= {"earth_occlusion": True, "atmosphere_km":
                                     clearance_atmosphere_km(scenario.clearance,
                                                             scenario.length_unit)}
    doc["nodes"] = [
        {"name": n.name, "id": n.node_id} | ({} if common is not None else {"iphys": n.iphys})
        | ({"kind": n.kind} if n.kind else {})
        for n in scenario.nodes
    ]
    steps = []
    for s in scenario.steps:
        out: dict[str, Any] = {"time": s.time}
        if s.positions is not None:
            out["positions"] = {name: list(s.positions[name]) for name in scenario.node_names}
        write_pairs = (explicit_pairs if explicit_pairs is not None
                       else s.positions is None or scenario.range is None
                       or s.visible != visible_pairs(s.positions, scenario.range,
                                                     scenario.clearance))
        if write_pairs:
            out["visible"] = [list(p) for p in sorted(s.visible)]
        if s.links:
            out["links"] = links_document(s.links)
        steps.append(out)
    doc["steps"] = steps
    if scenario.actions:
        doc["actions"] = scenario_actions.document(scenario.actions)
    return doc


def _parse_nodes(raw_nodes: list[dict[str, Any]], default_iphys: int,
                 problems: Problems) -> list[NodeSpec]:
    nodes: list[NodeSpec] = []
    seen_names: dict[str, int] = {}
    seen_ids: dict[int, int] = {}
    for i, raw in enumerate(raw_nodes):
        name = raw["name"]
        # JSON Schema's "integer" admits 2.0: store ints, since counts and IDs feed range()
        node_id = int(raw.get("id", i + 1))
        if name in seen_names:
            problems.add(["nodes", i, "name"],
                         f"duplicate node name {name!r} (also nodes[{seen_names[name]}])")
        else:
            seen_names[name] = i
        if node_id in seen_ids:
            where = "id" if "id" in raw else "id (default: its position)"
            problems.add(["nodes", i, "id"] if "id" in raw else ["nodes", i],
                         f"duplicate node {where} {node_id} (also nodes[{seen_ids[node_id]}])")
        else:
            seen_ids[node_id] = i
        nodes.append(NodeSpec(name=name, node_id=node_id,
                              iphys=int(raw.get("iphys", default_iphys)), kind=raw.get("kind")))
    return nodes


def _parse_positions(raw: dict[str, list[Any]] | None, names: set[str],
                     path: list[str | int], problems: Problems) -> dict[str, Position] | None:
    if raw is None:
        return None
    positions: dict[str, Position] = {}
    for name, coords in raw.items():
        where = [*path, "positions", name]
        if name not in names:
            problems.add(where, f"unknown node {name!r}")
            continue
        ok = all(check_finite(problems, [*where, k], v) for k, v in enumerate(coords))
        if ok:
            xyz = [float(v) for v in coords] + [0.0] * (3 - len(coords))
            positions[name] = (xyz[0], xyz[1], xyz[2])
    missing = sorted(names - raw.keys())
    if missing:
        listed = ", ".join(repr(m) for m in missing[:5]) + (" ..." if len(missing) > 5 else "")
        problems.add([*path, "positions"], f"no position for node(s) {listed}")
    return positions


def _parse_visible(raw: list[list[str]], names: set[str], path: list[str | int],
                   problems: Problems) -> frozenset[Pair]:
    found: dict[Pair, int] = {}
    for j, (a, b) in enumerate(raw):
        where = [*path, "visible", j]
        unknown = [n for n in (a, b) if n not in names]
        if unknown:
            problems.add(where, f"unknown node {unknown[0]!r}")
            continue
        if a == b:
            problems.add(where, f"a node cannot be paired with itself ({a!r})")
            continue
        p = pair(a, b)
        if p in found:
            problems.add(where, f"pair {a}-{b} listed twice (also visible[{found[p]}])")
            continue
        found[p] = j
    return frozenset(found)


def links_document(links: dict[tuple[str, str], LinkProperties]) -> list[dict[str, Any]]:
    """Explicit links as written: one 'between' entry where both directions agree."""
    out: list[dict[str, Any]] = []
    for a, b in sorted(links):
        back = links.get((b, a))
        if back == links[(a, b)] and a < b:
            out.append({"between": [a, b]} | links[(a, b)].as_document())
        elif back != links[(a, b)]:
            out.append({"from": a, "to": b} | links[(a, b)].as_document())
    return out


def _parse_links(raw: list[dict[str, Any]], names: set[str], visible: frozenset[Pair],
                 path: list[str | int], problems: Problems
                 ) -> dict[tuple[str, str], LinkProperties]:
    both: dict[tuple[str, str], LinkProperties] = {}
    one: dict[tuple[str, str], LinkProperties] = {}
    seen: dict[tuple[str, str, bool], int] = {}
    for j, entry in enumerate(raw):
        where = [*path, "links", j]
        a, b = entry["between"] if "between" in entry else (entry["from"], entry["to"])
        key = "between" if "between" in entry else "from"
        unknown = [n for n in (a, b) if n not in names]
        if unknown:
            problems.add([*where, key], f"unknown node {unknown[0]!r}")
            continue
        if pair(a, b) not in visible:
            problems.add(where, f"{a}-{b} is not visible in this step: a link needs "
                                "line of sight")
            continue
        directed = "between" not in entry
        ident = (a, b, True) if directed else (*pair(a, b), False)
        if ident in seen:
            problems.add(where, f"{a}-{b} given twice (also links[{seen[ident]}])")
            continue
        seen[ident] = j
        try:
            props = parse_properties(entry)
        except PropertyError as exc:
            problems.add([*where, exc.field], str(exc))
            continue
        if directed:
            one[(a, b)] = props
        else:
            both[(a, b)] = both[(b, a)] = props
    return both | one
