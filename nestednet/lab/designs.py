"""The node designs a lab can be built with, by name: the one place that picks one.

Each is one module implementing `nestednet.lab.design.NodeDesign`, listed here; `swarm`
(nodes spread over several hosts) is the third.
"""

from __future__ import annotations

from nestednet.errors import UsageError
from nestednet.lab.design import DEFAULT_DESIGN, NodeDesign
from nestednet.lab.flat import FlatDesign
from nestednet.lab.nested import NestedDesign
from nestednet.lab.swarm import SwarmDesign

DESIGNS: dict[str, type[NodeDesign]] = {d.kind: d for d in (NestedDesign, FlatDesign,
                                                            SwarmDesign)}


def named(kind: str) -> NodeDesign:
    """A fresh design (it may hold per-create state, such as the nested image template)."""
    try:
        return DESIGNS[kind]()
    except KeyError:
        raise UsageError(f"unknown node design {kind!r}",
                         hint=f"one of {', '.join(DESIGNS)}") from None


def of(meta: dict) -> NodeDesign:
    """The design a lab was built with, from its record (labs from before the record
    named its design are nested)."""
    return named(meta.get("kind", DEFAULT_DESIGN))
