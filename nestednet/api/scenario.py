"""`Scenario`: a visibility scenario to load, generate or build in code, and save.

It is the scenario model every part of NestedNet reads (nestednet.model.scenario), with
the ways to get one added: `load` reads either file format, `generate` places nodes
under a mobility model as `nestednet visibility generate` does, `build` takes steps
written in Python. Whatever the way, the scenario is checked as a file would be, and a
problem raises `InputError` saying where it sits (``steps[2].visible[0]: unknown node``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nestednet.errors import InputError
from nestednet.model import scenario as model
from nestednet.model import scenario_file, scenario_native, visibility
from nestednet.model.line_of_sight import Position
from nestednet.model.link_models import LinkModel

StepSpec = Mapping[str, Any] | tuple[float, Iterable[Sequence[str]]]
"""A step for `Scenario.build`: ``(time, [("a", "b"), ...])``, or a native step document
(``{"time": 0, "visible": [["a", "b"]], "links": [...]}``, scenarios/scenario.schema.json)."""


class Scenario(model.Scenario):
    """Nodes, a duration and time-ordered steps saying which nodes see each other.

    ``nodes`` (NodeSpec: name, node_id, iphys), ``duration`` (s), ``steps`` (Step: time,
    visible pairs, positions, explicit link properties), ``name``, ``range``,
    ``length_unit``, ``link_model``.
    """

    @classmethod
    def of(cls, scenario: model.Scenario) -> Scenario:
        """The same scenario as this class (from the model's own)."""
        if isinstance(scenario, cls):
            return scenario
        return cls(**{f.name: getattr(scenario, f.name)
                      for f in dataclasses.fields(model.Scenario) if f.init})

    @classmethod
    def load(cls, path: str | Path, *, iphys: int = model.DEFAULT_IPHYS,
             length_unit: str | None = None) -> Scenario:
        """Read a scenario file of either format (native, or the thesis's NestedNet
        format, whose files carry no iPHY count: ``iphys`` gives it)."""
        return cls.of(scenario_file.load_scenario(path, nestednet_iphys=iphys,
                                                  length_unit=length_unit))

    @classmethod
    def from_document(cls, doc: Any, source: str = "<document>", *,
                      iphys: int = model.DEFAULT_IPHYS) -> Scenario:
        """A decoded scenario document (either format), checked like a file."""
        return cls.of(scenario_file.parse_scenario(doc, source, nestednet_iphys=iphys))

    @classmethod
    def generate(cls, *, nodes: int, duration: float, step: float, range: float,
                 model: str = "random-waypoint", seed: int = 0, iphys: int = 4,
                 area: float | None = None, name: str = "", length_unit: str | None = "m",
                 link_model: LinkModel | None = None) -> Scenario:
        """Nodes moving under ``model`` (static, random-waypoint, orbit) in a square of
        side ``area`` (default: sized for about 4 neighbours each), seeing each other
        within ``range``; a step every ``step`` s. Same seed, same scenario."""
        return cls.of(visibility.generate(nodes=nodes, duration=duration, step=step,
                                          range_=range, model=model, seed=seed, iphys=iphys,
                                          area=area, name=name, length_unit=length_unit,
                                          link_model=link_model))

    @classmethod
    def build(cls, *, nodes: Sequence[str] | Mapping[str, int], duration: float,
              steps: Iterable[StepSpec], iphys: int = model.DEFAULT_IPHYS, name: str = "",
              link_model: Mapping[str, Any] | None = None) -> Scenario:
        """A scenario written in code: ``nodes`` as names (``iphys`` each) or
        ``{name: iphys}``, ``steps`` as ``(time, pairs)`` or native step documents,
        ``link_model`` as a model document (``{"model": "fixed", "params": {...}}``)."""
        if isinstance(nodes, str):
            raise InputError(f"nodes={nodes!r}: give a list of names or {{name: iphys}}")
        node_docs = ([{"name": n, "iphys": k} for n, k in nodes.items()]
                     if isinstance(nodes, Mapping) else [{"name": n} for n in nodes])
        doc: dict[str, Any] = {"format": scenario_native.FORMAT_ID, "duration": duration,
                               "iphys": iphys, "nodes": node_docs,
                               "steps": [_step_document(s) for s in steps]}
        if name:
            doc["name"] = name
        if link_model is not None:
            doc["link_model"] = dict(link_model)
        return cls.of(scenario_native.parse_native(doc, name or "<scenario>"))

    def save(self, path: str | Path, *, format: str = "native") -> Path:
        """Write it as a file (``native`` or ``nestednet``); returns the path."""
        scenario_file.write_scenario(self, path, format)
        return Path(path)

    def dumps(self, *, format: str = "native") -> str:
        """The file text `save` writes."""
        return scenario_file.dumps_scenario(self, format)

    def positions_at(self, index: int) -> Mapping[str, Position] | None:
        """Every node's position in step ``index`` (None when the scenario gives none)."""
        return self.steps[index].positions


def _step_document(step: StepSpec) -> dict[str, Any]:
    if isinstance(step, Mapping):
        return dict(step)
    if isinstance(step, tuple) and len(step) == 2:
        time, pairs = step
        return {"time": time, "visible": [list(p) for p in pairs]}
    raise InputError(f"bad step {step!r}: give (time, [(a, b), ...]) or a step document")
