"""Requests are typed where they are made (issue #30): raw option text never reaches a
lab. `nestednet demo` once handed click's unconverted default "NET_ADMIN,NET_RAW" to
the lab, which asked Docker for the capabilities "N", "E", "T", ...; these tests fail
on that code."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from click.testing import CliRunner

from nestednet.ca.runner import RunRequest
from nestednet.errors import UsageError
from nestednet.lab.design import CreateRequest
from nestednet.model.component_spec import COMPONENT_CAPS

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "scenarios" / "small-4x2.json"


@pytest.mark.parametrize("caps", ["NET_ADMIN,NET_RAW", "NET_ADMIN", ""])
def test_a_bare_string_is_refused_as_capabilities(caps):
    with pytest.raises(TypeError, match="tuple of capability names"):
        CreateRequest(lab="t", nodes=1, iphys=1, component_caps=caps)
    with pytest.raises(TypeError, match="tuple of capability names"):
        RunRequest(scenario=SCENARIO, component_caps=caps)


def test_capability_names_are_checked_and_kept_as_a_tuple():
    assert CreateRequest(lab="t", nodes=1, iphys=1).component_caps == COMPONENT_CAPS
    assert CreateRequest(lab="t", nodes=1, iphys=1,
                         component_caps=["NET_ADMIN"]).component_caps == ("NET_ADMIN",)
    assert RunRequest(scenario=SCENARIO, component_caps=()).component_caps == ()
    with pytest.raises(UsageError, match="SYS_ADMIN"):
        CreateRequest(lab="t", nodes=1, iphys=1, component_caps=("SYS_ADMIN",))
    with pytest.raises(UsageError, match="'N'"):
        RunRequest(scenario=SCENARIO, component_caps=tuple("NET_ADMIN"))


def test_pins_and_images_refuse_bare_strings_too():
    with pytest.raises(TypeError, match="pins"):
        CreateRequest(lab="t", nodes=1, iphys=1, pins="n1=a")
    with pytest.raises(TypeError, match="images"):
        CreateRequest(lab="t", nodes=1, iphys=1, images="gnab=x")
    with pytest.raises(TypeError, match="images"):
        CreateRequest(lab="t", nodes=1, iphys=1, images=("gnab=x",))
    made = CreateRequest(lab="t", nodes=1, iphys=1, pins=["n1=a"], images=[("gnab", "x")])
    assert made.pins == ("n1=a",) and made.images == (("gnab", "x"),)


@pytest.mark.parametrize(("field", "value"), [
    ("speed", 0), ("speed", -1.0), ("speed", float("inf")), ("speed", "2"),
    ("until", -1), ("until", float("nan")), ("hello_timeout", 0.5), ("iphys", 0),
    ("iphys", True), ("iphys", 2.0), ("shaping_mode", "fast"), ("length_unit", "mile"),
    ("routing", "ospf")])
def test_a_run_request_refuses_values_out_of_range(field, value):
    with pytest.raises(UsageError, match=field):
        RunRequest(scenario=SCENARIO, **{field: value})


def test_a_run_request_takes_paths_as_text_too():
    request = RunRequest(scenario=str(SCENARIO), events="/tmp/e.jsonl")
    assert request.scenario == SCENARIO and request.events == Path("/tmp/e.jsonl")


def test_demo_and_run_hand_the_same_typed_request_to_one_function(monkeypatch):
    from nestednet.cli import demo as demo_cli
    from nestednet.cli import main
    from nestednet.cli import run as run_cli

    seen: list[RunRequest] = []
    monkeypatch.setattr(demo_cli, "execute", lambda request, as_json: seen.append(request))
    monkeypatch.setattr(run_cli, "execute", lambda request, as_json: seen.append(request))
    assert CliRunner().invoke(main, ["demo", "--speed", "4"]).exit_code == 0
    assert CliRunner().invoke(main, ["run", str(demo_cli.DEMO_SCENARIO), "--lab", "demo",
                                     "--speed", "4", "--rm"]).exit_code == 0
    demo, run = seen
    assert demo.component_caps is None or isinstance(demo.component_caps, tuple)
    assert run.component_caps == COMPONENT_CAPS
    assert (demo.scenario, demo.lab, demo.speed, demo.remove_lab, demo.routing) \
        == (run.scenario, run.lab, run.speed, run.remove_lab, run.routing)


def _cli_sources() -> list[Path]:
    return sorted([*(ROOT / "nestednet" / "cli").glob("*.py"),
                   *(ROOT / "linkemu").rglob("*.py")])


def test_no_command_calls_another_command():
    """ctx.invoke/ctx.forward skip click's conversion of the callee's defaults (and its
    option callbacks): commands share typed library functions instead."""
    found = []
    for path in _cli_sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in {"invoke", "forward"} \
                    and isinstance(node.value, ast.Name) and node.value.id == "ctx":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, found
