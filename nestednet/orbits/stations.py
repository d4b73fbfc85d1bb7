"""Ground stations: a JSON file (schema nestednet/schemas/ground-stations.schema.json)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nestednet.model.scenario import Problems, check_against_schema, load_schema
from nestednet.model.scenario_file import read_json

SCHEMA_RESOURCE = "ground-stations.schema.json"
DEFAULT_MIN_ELEVATION_DEG = 25.0
"""StarryNet's and Hypatia's mask."""
POLICIES = ("all", "nearest", "highest")


@dataclass(frozen=True)
class GroundStation:
    name: str
    lat: float
    lon: float
    alt_m: float = 0.0
    min_elevation_deg: float = DEFAULT_MIN_ELEVATION_DEG
    policy: str = "all"


def parse_ground_stations(doc: Any, source: str) -> list[GroundStation]:
    """Stations from a decoded document; UsageError naming every problem and its place."""
    problems = Problems(source)
    check_against_schema(doc, load_schema(SCHEMA_RESOURCE), problems)
    problems.raise_if_any(hint="the format is described in "
                               "nestednet/schemas/ground-stations.schema.json")
    stations = []
    seen: dict[str, int] = {}
    for i, raw in enumerate(doc["ground_stations"]):
        if raw["name"] in seen:
            problems.add(["ground_stations", i, "name"], f"duplicate station name "
                         f"{raw['name']!r} (also ground_stations[{seen[raw['name']]}])")
        seen.setdefault(raw["name"], i)
        stations.append(GroundStation(
            name=raw["name"], lat=float(raw["lat"]), lon=float(raw["lon"]),
            alt_m=float(raw.get("alt_m", 0.0)),
            min_elevation_deg=float(raw.get("min_elevation_deg", DEFAULT_MIN_ELEVATION_DEG)),
            policy=raw.get("policy", "all")))
    problems.raise_if_any()
    return stations


def load_ground_stations(path: str | Path) -> list[GroundStation]:
    return parse_ground_stations(read_json(path), str(path))
