"""The scenario timeline: the lab's shape and, over time, which nodes see each other.

Both scenario file formats (the NestedNet visibility format of the seed thesis and
the native format, see scenario_nestednet.py and scenario_native.py) parse into
this one model, and everything downstream (lab creation, the CA, the graph) reads
it. A step is in effect from its time until the next step's time (the last one
until the end of the scenario); before the first step nothing is visible.

Validation problems are collected with the exact place in the file where they sit
(``steps[3].visible[2]: unknown node 'n13'``) and raised together as one
UsageError, so a user fixes the file in one pass and nothing is ever started from
a half-valid file.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from importlib import resources
from typing import Any

import jsonschema

from nestednet.errors import UsageError
from nestednet.model import link_models
from nestednet.model.limits import describe_number, finite_number
from nestednet.model.line_of_sight import Pair, Position
from nestednet.model.link_properties import LinkProperties

NODE_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_-]{0,31}$"
"""Node names end up in container and port names: short, no spaces, no dots."""
NODE_NAME_RULE = "1-32 letters, digits, '-' or '_', starting with a letter"
MAX_IPHYS = 64
DEFAULT_IPHYS = 4
LENGTH_UNITS = {"m": 1.0, "km": 1000.0}
"""Metres per unit of a scenario's positions and range."""
NODE_KINDS = ("satellite", "ground")
LINK_CLASSES = ("isl", "gsl", "default")
"""isl: satellite-satellite; gsl: ground-satellite; default: any other pair."""
FRAMES = ("ITRS",)
"""Earth-centred, Earth-fixed (ITRS/ECEF): the frame of generated orbital positions."""


def link_class(a: NodeSpec, b: NodeSpec) -> str:
    """The class of the pair a-b: which of a scenario's link_classes models applies."""
    kinds = sorted((a.kind or "", b.kind or ""))
    if kinds == ["satellite", "satellite"]:
        return "isl"
    if kinds == ["ground", "satellite"]:
        return "gsl"
    return "default"

_NAME_RE = re.compile(NODE_NAME_PATTERN)
_IDENTIFIER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class NodeSpec:
    """One node of the lab: its name, its numeric ID and how many iPHYs it has."""

    name: str
    node_id: int
    iphys: int
    kind: str | None = None
    """"satellite", "ground" or None (unstated): decides a pair's link class."""


@dataclass(frozen=True)
class Step:
    """From ``time`` on, exactly the pairs in ``visible`` see each other.

    ``positions`` holds every node's (x, y, z) when the file gave them, else None.
    ``links`` holds the properties the file states explicitly, per direction
    (sender, receiver); link_resolver.py decides what the other links get.
    """

    time: float
    visible: frozenset[Pair]
    positions: Mapping[str, Position] | None = None
    links: Mapping[tuple[str, str], LinkProperties] = field(default_factory=dict)

    def peers_of(self, node: str) -> frozenset[str]:
        return frozenset(b if a == node else a for a, b in self.visible if node in (a, b))


@dataclass(frozen=True)
class Scenario:
    """A validated scenario: nodes, duration (seconds) and time-ordered steps.

    ``length_unit`` ("m" or "km") is the unit of positions and range when the file
    states it; None when it does not (the NestedNet format never does), and then
    a link model that needs distances refuses the scenario rather than guess.
    ``link_model`` is the model the file declares for links it gives no values for.
    """

    nodes: tuple[NodeSpec, ...]
    duration: float
    steps: tuple[Step, ...]
    name: str = ""
    source_format: str = "native"
    range: float | None = None
    length_unit: str | None = None
    link_model: link_models.LinkModel | None = None
    link_classes: Mapping[str, link_models.LinkModel] = field(default_factory=dict)
    """A model per link class (LINK_CLASSES); it wins over ``link_model`` for its pairs."""
    clearance: float | None = None
    """Earth occlusion: sight lines must clear a sphere of this radius (length unit)."""
    start_time: str | None = None
    """ISO 8601 with a zone: the wall-clock time of scenario time 0, when it has one."""
    frame: str | None = None
    """The frame of the positions (FRAMES), when stated."""
    actions: tuple[Any, ...] = ()
    """nestednet.model.actions.Action entries, checked against this scenario."""
    _by_name: dict[str, NodeSpec] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {n.name: n for n in self.nodes})

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes)

    def node(self, name: str) -> NodeSpec:
        return self._by_name[name]

    def iphy_inventory(self) -> dict[str, tuple[int, ...]]:
        """Each node's iPHY numbers, 1-based (iPHY 1 .. iPHY n), as a link table wants them."""
        return {n.name: tuple(range(1, n.iphys + 1)) for n in self.nodes}

    def step_index_at(self, t: float) -> int | None:
        """Index of the step in effect at scenario time t (None before the first step)."""
        found = None
        for i, s in enumerate(self.steps):
            if s.time <= t:
                found = i
            else:
                break
        return found

    def step_end(self, index: int) -> float:
        """When step ``index`` stops being in effect."""
        return self.steps[index + 1].time if index + 1 < len(self.steps) else self.duration

    @property
    def has_positions(self) -> bool:
        return all(s.positions is not None for s in self.steps)


def format_path(path: Iterable[str | int]) -> str:
    """['steps', 3, 'visible', 2] -> 'steps[3].visible[2]'; the root is '(top level)'."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENTIFIER_RE.match(part):
            out += f".{part}" if out else part
        else:
            out += f"[{part!r}]"
    return out or "(top level)"


class Problems:
    """Collects path-precise validation problems; raises them as one UsageError.

    Problems are listed in file order (by path), whatever order they were found in.
    """

    LIMIT = 20

    def __init__(self, source: str) -> None:
        self.source = source
        self._found: list[tuple[list[tuple[int, int, str]], str]] = []

    def add(self, path: Sequence[str | int], message: str) -> None:
        self._found.append((_path_key(path), f"{format_path(path)}: {message}"))

    @property
    def items(self) -> list[str]:
        return [text for _, text in sorted(self._found, key=lambda found: found[0])]

    def __bool__(self) -> bool:
        return bool(self._found)

    def raise_if_any(self, hint: str | None = None) -> None:
        items = self.items
        if not items:
            return
        if len(items) == 1:
            raise UsageError(f"{self.source}: {items[0]}", hint=hint)
        shown = items[: self.LIMIT]
        more = len(items) - len(shown)
        lines = "\n".join(f"  {p}" for p in shown)
        tail = f"\n  ... and {more} more" if more else ""
        raise UsageError(f"{self.source}: {len(items)} problems:\n{lines}{tail}", hint=hint)


def _path_key(path: Iterable[str | int]) -> list[tuple[int, int, str]]:
    return [(0, p, "") if isinstance(p, int) else (1, 0, p) for p in path]


@cache
def load_schema(resource: str) -> dict[str, Any]:
    """A JSON Schema shipped in nestednet/schemas (package data)."""
    text = resources.files("nestednet.schemas").joinpath(resource).read_text("utf-8")
    return json.loads(text)


def check_against_schema(doc: Any, schema: dict[str, Any], problems: Problems) -> None:
    """Structural problems, each with its path, in file order."""
    validator = jsonschema.Draft202012Validator(schema)
    for error in validator.iter_errors(doc):
        problems.add(list(error.absolute_path), _schema_message(error))


def _schema_message(error: jsonschema.ValidationError) -> str:
    """jsonschema's message, made plainer; a schema's "x-error" text where it has one."""
    if error.validator == "type":
        wanted = error.validator_value
        wanted = " or ".join(wanted) if isinstance(wanted, list) else str(wanted)
        article = "an" if wanted[0] in "aeiou" else "a"
        return f"expected {article} {wanted}, got {describe(error.instance)}"
    custom = error.schema.get("x-error") if isinstance(error.schema, dict) else None
    if custom and error.validator not in ("required", "additionalProperties"):
        scalar = not isinstance(error.instance, dict | list)
        return f"{custom} (got {describe(error.instance)})" if scalar else str(custom)
    if error.validator == "additionalProperties":
        return error.message.replace("Additional properties are not allowed",
                                     "unknown field(s)")
    if error.validator == "required":
        return error.message.replace("is a required property", "is missing")
    return error.message


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_finite(problems: Problems, path: Sequence[str | int], value: Any) -> bool:
    """A JSON number that is a real, finite value (json accepts NaN and Infinity)."""
    if not is_number(value):
        problems.add(path, f"expected a number, got {describe(value)}")
        return False
    if not finite_number(value):
        problems.add(path, f"expected a finite number, got {describe_number(value)}")
        return False
    return True


def check_node_name(problems: Problems, path: Sequence[str | int], name: Any) -> bool:
    if not isinstance(name, str):
        problems.add(path, f"node name must be a string, got {describe(name)}")
        return False
    if not _NAME_RE.match(name):
        problems.add(path, f"bad node name {name!r}: use {NODE_NAME_RULE}")
        return False
    return True


def parse_start_time(text: str) -> datetime:
    """An ISO 8601 time that names its zone ("Z" or "+01:00"); ValueError otherwise."""
    when = datetime.fromisoformat(text)
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(f"start time {text!r} has no zone: add 'Z' (UTC) or an offset "
                         "such as '+01:00'")
    return when


def check_start_time(problems: Problems, path: Sequence[str | int], text: str) -> bool:
    try:
        parse_start_time(text)
    except ValueError as exc:
        message = str(exc) if "zone" in str(exc) else \
            f"not an ISO 8601 time ({text!r}): e.g. 2026-11-26T00:00:00Z"
        problems.add(path, message)
        return False
    return True


def check_steps_order(problems: Problems, times: Sequence[tuple[Sequence[str | int], float]],
                      duration: float | None) -> None:
    """Step times are >= 0, strictly increasing and not beyond the duration."""
    previous: float | None = None
    for path, t in times:
        if t < 0:
            problems.add(path, f"time {t:g} is negative")
        if duration is not None and t > duration:
            problems.add(path, f"time {t:g} is beyond the duration ({duration:g} s)")
        if previous is not None and t <= previous:
            problems.add(path, f"time {t:g} is not after the previous step's time {previous:g}")
        previous = t


def describe(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return repr(value)


def summary(scenario: Scenario) -> dict[str, Any]:
    """What `visibility check` reports: the lab shape and per step what changed."""
    steps = []
    previous: frozenset[Pair] = frozenset()
    for i, s in enumerate(scenario.steps):
        seen = {n for p in s.visible for n in p}
        steps.append({
            "index": i,
            "time": s.time,
            "until": scenario.step_end(i),
            "visible_pairs": len(s.visible),
            "appeared": len(s.visible - previous),
            "lost": len(previous - s.visible),
            "isolated": [n for n in scenario.node_names if n not in seen],
            "visible": [list(p) for p in sorted(s.visible)],
        })
        previous = s.visible
    out = {
        "name": scenario.name,
        "format": scenario.source_format,
        "duration": scenario.duration,
        "line_of_sight": ({"rule": "distance", "range": scenario.range}
                          if scenario.range is not None else None),
        "positions": scenario.has_positions,
        "length_unit": scenario.length_unit,
        "link_model": (scenario.link_model.document()
                       if scenario.link_model is not None else None),
        "nodes": [{"name": n.name, "id": n.node_id, "iphys": n.iphys}
                  | ({"kind": n.kind} if n.kind else {}) for n in scenario.nodes],
        "steps": steps,
    }
    if scenario.link_classes:
        out["link_classes"] = {k: m.document() for k, m in scenario.link_classes.items()}
    if scenario.start_time is not None:
        out["start_time"] = scenario.start_time
    if scenario.frame is not None:
        out["frame"] = scenario.frame
    if scenario.clearance is not None and out["line_of_sight"] is not None:
        out["line_of_sight"]["earth_occlusion"] = True
    return out
