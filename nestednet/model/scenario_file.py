"""Reading and writing scenario files in either format.

Reading is pure apart from opening the file: decode JSON (a malformed file is
reported with line and column), recognise the format by its top-level shape, and
hand over to the format's parser, which raises UsageError with each problem's path.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from nestednet.errors import UsageError
from nestednet.model import link_models
from nestednet.model.limits import check_file_size, check_scenario_size
from nestednet.model.scenario import (
    DEFAULT_IPHYS,
    LENGTH_UNITS,
    Problems,
    Scenario,
    check_against_schema,
)
from nestednet.model.scenario_native import (
    FORMAT_ID,
    is_native,
    parse_model_declaration,
    parse_native,
    to_native,
)
from nestednet.model.scenario_nestednet import is_nestednet, parse_nestednet, to_nestednet

FORMATS = ("native", "nestednet")


def read_json(path: str | Path) -> Any:
    """Decode a JSON file; UsageError (exit 2) for a missing, unreadable or malformed file."""
    p = Path(path)
    try:
        check_file_size(p.stat().st_size, str(p))
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{p}: is a directory, expected a JSON file") from None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{p}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise UsageError(f"{p}: cannot read: {exc.strerror}") from None
    return decode_json(text, str(p))


def decode_json(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{source}: not valid JSON: line {exc.lineno}, column {exc.colno}: "
                         f"{exc.msg}") from None
    except RecursionError:
        raise UsageError(f"{source}: not valid JSON: nested too deeply") from None
    except ValueError as exc:  # an integer of more than 4,300 digits
        raise UsageError(f"{source}: not usable JSON: {str(exc).split(';')[0]}") from None


def parse_scenario(doc: Any, source: str, *, nestednet_iphys: int = DEFAULT_IPHYS) -> Scenario:
    """Recognise the format of a decoded document and parse it."""
    check_scenario_size(doc, source)
    if is_nestednet(doc):
        return parse_nestednet(doc, source, iphys=nestednet_iphys)
    if is_native(doc):
        return parse_native(doc, source)
    raise UsageError(
        f"{source}: not a scenario: expected a top-level 'MobilecomScnDef' (NestedNet format) "
        f"or a native scenario (\"format\": \"{FORMAT_ID}\" with 'steps')",
        hint="see scenarios/README.md for both formats")


def load_scenario(path: str | Path, *, nestednet_iphys: int = DEFAULT_IPHYS,
                  length_unit: str | None = None) -> Scenario:
    """Read and validate a scenario file of either format.

    ``nestednet_iphys`` is the iPHY count per node for NestedNet-format files, which
    carry none; native files set their own. ``length_unit`` ("m" or "km") states the
    unit of positions for a file that does not (the NestedNet format never does); a
    native file that states another unit is refused rather than silently rescaled.
    """
    scenario = parse_scenario(read_json(path), str(path), nestednet_iphys=nestednet_iphys)
    return with_length_unit(scenario, length_unit, str(path))


def with_length_unit(scenario: Scenario, length_unit: str | None, source: str) -> Scenario:
    """The scenario with the unit given on the command line, if it states none itself."""
    if length_unit is None or length_unit == scenario.length_unit:
        return scenario
    if length_unit not in LENGTH_UNITS:
        raise UsageError(f"unknown length unit {length_unit!r}: choose m or km")
    if scenario.length_unit is not None:
        raise UsageError(f"{source}: length_unit: the file says {scenario.length_unit!r}, "
                         f"--length-unit says {length_unit!r}")
    return dataclasses.replace(scenario, length_unit=length_unit)


def load_link_model(path: str | Path) -> link_models.LinkModel:
    """A link-model file ({"model": NAME, "params": {...}}), every problem located."""
    doc = read_json(path)
    problems = Problems(str(path))
    check_against_schema(doc, link_models.schema(), problems)
    problems.raise_if_any(hint="the format is described in scenarios/link-model.schema.json")
    model = parse_model_declaration(doc, [], problems)
    problems.raise_if_any()
    assert model is not None
    return model


def scenario_document(scenario: Scenario, fmt: str = "native") -> dict[str, Any]:
    if fmt == "native":
        return to_native(scenario)
    if fmt == "nestednet":
        return to_nestednet(scenario)
    raise UsageError(f"unknown scenario format {fmt!r}: choose one of {', '.join(FORMATS)}")


def dumps_scenario(scenario: Scenario, fmt: str = "native") -> str:
    """The file text: containers of plain values on one line, so files stay short and diffable."""
    return _dump(_plain_numbers(scenario_document(scenario, fmt)), 0) + "\n"


def write_scenario(scenario: Scenario, path: str | Path, fmt: str = "native") -> None:
    text = dumps_scenario(scenario, fmt)
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(p)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"{p}: cannot write: {exc.strerror}") from None


def _plain_numbers(value: Any) -> Any:
    """Whole floats as ints (60.0 -> 60) so written files look hand-written."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _plain_numbers(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain_numbers(v) for v in value]
    return value


def _dump(value: Any, level: int) -> str:
    flat = not isinstance(value, dict | list) or all(
        not isinstance(v, dict | list) for v in (value.values() if isinstance(value, dict)
                                                 else value))
    if flat:
        return json.dumps(value, allow_nan=False)
    pad, inner = "  " * level, "  " * (level + 1)
    if isinstance(value, dict):
        body = ",\n".join(f"{inner}{json.dumps(k)}: {_dump(v, level + 1)}"
                          for k, v in value.items())
        return f"{{\n{body}\n{pad}}}"
    body = ",\n".join(f"{inner}{_dump(v, level + 1)}" for v in value)
    return f"[\n{body}\n{pad}]"
