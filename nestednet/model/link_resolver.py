"""Which properties each direction of each visible link gets, step by step.

First match wins:

1. the step's explicit ``links`` entry for that direction (native format);
2. the model of the pair's link class (``link_classes``: ``isl`` satellite-satellite,
   ``gsl`` ground-satellite, ``default`` any other pair, from the nodes' kinds);
3. the link model: the one given with ``--link-model FILE`` if any, else the
   scenario's ``link_model``; models see the two positions converted to metres;
4. nothing: an ideal link (IDEAL, not shaped).

A model may also say a visible pair cannot link at all (a laser beyond its
range): ``properties_for`` then returns None and the pair must stay down.

Binding a model to a scenario is checked up front (LinkResolver's constructor):
a model that uses distances needs positions in every step and a stated length
unit, so a run never starts on a file whose links cannot be worked out.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from nestednet.errors import UsageError
from nestednet.model.line_of_sight import Position, pair
from nestednet.model.link_models import LinkModel
from nestednet.model.link_properties import IDEAL, LinkProperties, summarise
from nestednet.model.scenario import LENGTH_UNITS, Scenario, link_class


class LinkResolver:
    """A scenario with the model its links follow; answers per step and direction."""

    def __init__(self, scenario: Scenario, override: LinkModel | None = None,
                 source: str = "scenario") -> None:
        self.scenario = scenario
        self.model = override if override is not None else scenario.link_model
        self.classes = dict(scenario.link_classes)
        self._scale = LENGTH_UNITS.get(scenario.length_unit or "", 1.0)
        for model in (self.model, *self.classes.values()):
            if model is not None and model.USES_DISTANCE:
                self._check_binding(source, model.NAME)

    @property
    def has_models(self) -> bool:
        """Whether any link gets its properties from a model (the default or a class's)."""
        return self.model is not None or bool(self.classes)

    def link_class(self, a: str, b: str) -> str:
        return link_class(self.scenario.node(a), self.scenario.node(b))

    def _check_binding(self, source: str, name: str) -> None:
        if self.scenario.length_unit is None:
            raise UsageError(
                f"{source}: link model {name!r} needs distances, but the scenario states no "
                "length unit", hint="add \"length_unit\": \"m\" or \"km\" to a native file; "
                                    "for a NestedNet-format file pass --length-unit m|km")
        missing = [i for i, s in enumerate(self.scenario.steps) if s.positions is None]
        if missing:
            raise UsageError(f"{source}: steps[{missing[0]}]: link model {name!r} needs node "
                             "positions, and this step has none")

    def properties_for(self, step: int, a: str, b: str) -> LinkProperties | None:
        """Properties of the direction a -> b in step ``step``; None: not visible or no link."""
        return self.resolve(step, a, b)[0]

    def resolve(self, step: int, a: str, b: str) -> tuple[LinkProperties | None, str]:
        """Properties of a -> b and where they came from ("explicit", "class" (the pair's
        link class model), "model", "ideal")."""
        s = self.scenario.steps[step]
        if pair(a, b) not in s.visible:
            return None, "not-visible"
        explicit = s.links.get((a, b))
        if explicit is not None:
            return explicit, "explicit"
        model, origin = self.classes.get(self.link_class(a, b)), "class"
        if model is None:
            model, origin = self.model, "model"
        if model is None:
            return IDEAL, "ideal"
        positions = s.positions or {}
        zero: Position = (0.0, 0.0, 0.0)
        return (model.properties(self._metres(positions.get(a, zero)),
                                 self._metres(positions.get(b, zero))), origin)

    def pair_details(self, step: int) -> list[dict[str, Any]]:
        """Per visible pair of a step: class, distance (length unit), and per direction
        where the values came from, one-way delay (us) and rate (bit/s; None: unlimited)."""
        s = self.scenario.steps[step]
        out = []
        for a, b in sorted(s.visible):
            entry: dict[str, Any] = {"pair": [a, b], "class": self.link_class(a, b)}
            if s.positions is not None and a in s.positions and b in s.positions:
                entry["distance"] = round(math.dist(s.positions[a], s.positions[b]), 6)
            for src, dst in ((a, b), (b, a)):
                props, origin = self.resolve(step, src, dst)
                entry[f"{src}->{dst}"] = {"source": origin} | (
                    {"link": False} if props is None else
                    {"delay_us": props.delay_us, "rate_bps": props.rate_bps,
                     "loss_pct": props.loss_pct})
            out.append(entry)
        return out

    def _metres(self, p: Position) -> Position:
        k = self._scale
        return (p[0] * k, p[1] * k, p[2] * k)

    def directions(self, step: int) -> Iterator[tuple[str, str]]:
        """Both directions of every visible pair of a step, in a stable order."""
        for a, b in sorted(self.scenario.steps[step].visible):
            yield a, b
            yield b, a

    def step_properties(self, step: int) -> dict[tuple[str, str], LinkProperties | None]:
        return {(a, b): self.properties_for(step, a, b) for a, b in self.directions(step)}

    def summary(self) -> list[dict[str, Any]]:
        """Per step: min/median/max delay and rate, counts, what needs netem."""
        return [{"index": i, "time": s.time}
                | summarise(self.step_properties(i).values())
                for i, s in enumerate(self.scenario.steps)]
