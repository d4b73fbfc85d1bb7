"""Both scenario formats: valid files load, write -> load round-trips, and every kind of
bad input is a UsageError (exit 2) naming the file and the exact place in it."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nestednet.cli import main
from nestednet.errors import UsageError
from nestednet.model import visibility as mobility
from nestednet.model.line_of_sight import pair, visible_pairs
from nestednet.model.scenario import NodeSpec, Scenario, Step, format_path
from nestednet.model.scenario_file import (
    decode_json,
    dumps_scenario,
    load_scenario,
    parse_scenario,
    write_scenario,
)
from nestednet.model.scenario_nestednet import parse_nestednet

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
SMALL = SCENARIOS / "small-4x2.json"
DEMO = SCENARIOS / "demo-12x4.json"
NESTEDNET_EXAMPLE = SCENARIOS / "nestednet-format-example.json"
THESIS_FIG_3_11 = SCENARIOS / "thesis-fig-3.11.json"


def load_doc(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def write_doc(tmp: Path, doc: Any, name: str = "bad.json") -> Path:
    path = tmp / name
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def problem(tmp: Path, doc: Any, name: str = "bad.json") -> str:
    """The UsageError message for a document written to a file and loaded."""
    path = write_doc(tmp, doc, name)
    with pytest.raises(UsageError) as caught:
        load_scenario(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: "), message
    return message


def run_cli(*args: str):
    return CliRunner().invoke(main, list(args))


# -- valid files ----------------------------------------------------------------------


@pytest.mark.unit
def test_small_4x2_loads():
    s = load_scenario(SMALL)
    assert s.name == "small-4x2" and s.source_format == "native"
    assert s.node_names == ("n1", "n2", "n3", "n4")
    assert [n.iphys for n in s.nodes] == [2, 2, 2, 2]
    assert [n.node_id for n in s.nodes] == [1, 2, 3, 4]
    assert s.duration == 30 and [st_.time for st_ in s.steps] == [0, 10, 20]
    assert s.steps[0].visible == {("n1", "n2"), ("n2", "n3"), ("n3", "n4")}
    assert s.steps[1].visible == {("n1", "n2"), ("n3", "n4"), ("n1", "n4"), ("n2", "n4")}
    assert s.steps[2].visible == {("n1", "n3"), ("n2", "n4")}
    assert not s.has_positions and s.range is None
    assert s.iphy_inventory() == {n: (1, 2) for n in s.node_names}


@pytest.mark.unit
def test_demo_12x4_loads_and_its_visibility_is_the_distance_rule():
    s = load_scenario(DEMO)
    assert len(s.nodes) == 12 and {n.iphys for n in s.nodes} == {4}
    assert s.range == 100 and s.has_positions and len(s.steps) == 10
    assert [st_.time for st_ in s.steps] == [6 * k for k in range(10)]
    for step in s.steps:
        assert step.visible == visible_pairs(step.positions, 100)
    assert any(step.visible for step in s.steps)


@pytest.mark.unit
def test_nestednet_example_loads_with_the_iphys_given():
    s = load_scenario(NESTEDNET_EXAMPLE, nestednet_iphys=3)
    assert s.source_format == "nestednet" and s.duration == 30
    assert s.node_names == ("n1", "n2", "n3", "n4", "n5")
    assert {n.iphys for n in s.nodes} == {3}
    assert [st_.time for st_ in s.steps] == [0, 10, 20]
    assert s.steps[0].visible == {("n1", "n2"), ("n1", "n4"), ("n3", "n4"), ("n3", "n5"),
                                  ("n4", "n5")}
    assert s.steps[0].positions["n1"] == (45, 78.88, 6.68)
    assert load_scenario(NESTEDNET_EXAMPLE).nodes[0].iphys == 4  # the default


@pytest.mark.unit
def test_native_files_ignore_the_nestednet_iphys_argument():
    assert {n.iphys for n in load_scenario(SMALL, nestednet_iphys=7).nodes} == {2}


@pytest.mark.unit
@pytest.mark.parametrize("path", [SMALL, DEMO, NESTEDNET_EXAMPLE], ids=lambda p: p.name)
def test_check_command_accepts_the_examples(path):
    result = run_cli("visibility", "check", str(path), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["file"] == str(path) and data["steps"]


@pytest.mark.unit
@pytest.mark.parametrize("model", mobility.MODELS)
@pytest.mark.parametrize("fmt", ["native", "nestednet"])
def test_generated_files_load(tmp_path, model, fmt):
    s = mobility.generate(nodes=6, duration=20, step=5, range_=50, model=model, seed=3, iphys=2)
    path = tmp_path / f"{model}.json"
    write_scenario(s, path, fmt)
    loaded = load_scenario(path, nestednet_iphys=2)
    assert loaded.steps == s.steps and loaded.nodes == s.nodes


@pytest.mark.unit
def test_integer_fields_written_as_floats_are_ints():
    """JSON Schema's "integer" admits 2.0; the model must still hold ints (range() uses them)."""
    doc = {"format": "nestednet-scenario/1", "duration": 10, "iphys": 2.0,
           "nodes": [{"name": "a", "id": 1.0}, {"name": "b", "iphys": 3.0}],
           "steps": [{"time": 0, "visible": [["a", "b"]]}]}
    s = parse_scenario(doc, "f.json")
    assert s.iphy_inventory() == {"a": (1, 2), "b": (1, 2, 3)}
    assert all(type(n.node_id) is int and type(n.iphys) is int for n in s.nodes)
    nested = load_doc(NESTEDNET_EXAMPLE)
    for entry in nested["MobilecomScnDef"]["MobileNodeDef"]:
        entry["nodeID"] = float(entry["nodeID"])
    assert all(type(n.node_id) is int for n in parse_scenario(nested, "f.json").nodes)


@pytest.mark.unit
def test_native_two_dimensional_positions_have_z_zero():
    doc = {"format": "nestednet-scenario/1", "duration": 5, "line_of_sight": {"range": 5},
           "nodes": [{"name": "a"}, {"name": "b"}, {"name": "c"}],
           "steps": [{"time": 0, "positions": {"a": [0, 0], "b": [3, 4], "c": [3, 4, 0.001]}}]}
    s = parse_scenario(doc, "f.json")
    assert s.steps[0].positions["a"] == (0, 0, 0)
    # distance a-b is exactly the range: visible (inclusive); a-c is just beyond it
    assert s.steps[0].visible == {("a", "b"), ("b", "c")}


@pytest.mark.unit
def test_native_explicit_pairs_win_over_positions():
    doc = {"format": "nestednet-scenario/1", "duration": 5, "line_of_sight": {"range": 1},
           "nodes": [{"name": "a"}, {"name": "b"}],
           "steps": [{"time": 0, "positions": {"a": [0, 0], "b": [50, 0]},
                      "visible": [["b", "a"]]},
                     {"time": 1, "positions": {"a": [0, 0], "b": [0.5, 0]}, "visible": []}]}
    s = parse_scenario(doc, "f.json")
    assert [st_.visible for st_ in s.steps] == [{("a", "b")}, frozenset()]


# -- round trips ----------------------------------------------------------------------


@pytest.mark.unit
def test_round_trip_of_the_examples(tmp_path):
    for source, fmt in ((SMALL, "native"), (DEMO, "native"), (NESTEDNET_EXAMPLE, "nestednet"),
                        (NESTEDNET_EXAMPLE, "native"), (DEMO, "nestednet")):
        s = load_scenario(source, nestednet_iphys=4)
        out = tmp_path / f"{source.stem}.{fmt}.json"
        write_scenario(s, out, fmt)
        again = load_scenario(out, nestednet_iphys=4)
        assert (again.nodes, again.duration, again.steps) == (s.nodes, s.duration, s.steps)
        if fmt == "native":
            assert again == dataclasses.replace(s, source_format="native")


@pytest.mark.unit
def test_generated_and_nestednet_example_files_are_written_back_byte_for_byte():
    for path in (DEMO, NESTEDNET_EXAMPLE):
        s = load_scenario(path)
        assert dumps_scenario(s, s.source_format) == path.read_text(encoding="utf-8")


@pytest.mark.unit
def test_writing_a_pairs_only_scenario_as_nestednet_is_refused(tmp_path):
    with pytest.raises(UsageError, match="needs node positions"):
        write_scenario(load_scenario(SMALL), tmp_path / "x.json", "nestednet")
    assert not (tmp_path / "x.json").exists()
    with pytest.raises(UsageError, match="unknown scenario format"):
        dumps_scenario(load_scenario(SMALL), "yaml")


@pytest.mark.unit
def test_explicit_pairs_that_differ_from_the_range_survive_a_round_trip():
    doc = {"format": "nestednet-scenario/1", "duration": 10, "line_of_sight": {"range": 5},
           "nodes": [{"name": "a"}, {"name": "b"}],
           "steps": [{"time": 0, "positions": {"a": [0, 0], "b": [100, 0]},
                      "visible": [["a", "b"]]}]}
    s = parse_scenario(doc, "f.json")
    assert parse_scenario(decode_json(dumps_scenario(s), "g.json"), "g.json") == s


NAMES = st.from_regex(r"[A-Za-z][A-Za-z0-9_-]{0,5}", fullmatch=True)
COORD = st.floats(-1e4, 1e4, allow_nan=False, allow_infinity=False)


@st.composite
def scenarios(draw: st.DrawFn, *, positions_always: bool = False,
              common_iphys: int | None = None) -> Scenario:
    names = draw(st.lists(NAMES, min_size=1, max_size=6, unique=True))
    ids = draw(st.lists(st.integers(1, 10**6), min_size=len(names), max_size=len(names),
                        unique=True))
    if common_iphys is not None:
        iphys = [common_iphys] * len(names)
    elif draw(st.booleans()):
        iphys = [draw(st.integers(1, 64))] * len(names)
    else:
        iphys = draw(st.lists(st.integers(1, 64), min_size=len(names), max_size=len(names)))
    range_ = draw(st.none() | st.floats(0.01, 1e4))
    times = sorted(draw(st.sets(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=4)))
    duration = draw(st.floats(max(times[-1], 0.001), 2e4))
    all_pairs = [pair(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    any_pairs = (st.frozensets(st.sampled_from(all_pairs)) if all_pairs
                 else st.just(frozenset()))
    steps = []
    for t in times:
        positions = None
        if positions_always or draw(st.booleans()):
            positions = {n: (draw(COORD), draw(COORD), draw(COORD)) for n in names}
        if positions is not None and range_ is not None and draw(st.booleans()):
            visible = visible_pairs(positions, range_)
        else:
            visible = draw(any_pairs)
        steps.append(Step(time=t, visible=visible, positions=positions))
    nodes = tuple(NodeSpec(n, i, k) for n, i, k in zip(names, ids, iphys, strict=True))
    return Scenario(nodes=nodes, duration=duration, steps=tuple(steps),
                    name=draw(st.text(max_size=12)), range=range_)


@pytest.mark.unit
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios())
def test_native_round_trip(scenario):
    text = dumps_scenario(scenario, "native")
    assert parse_scenario(decode_json(text, "rt.json"), "rt.json") == scenario
    assert dumps_scenario(parse_scenario(json.loads(text), "rt.json")) == text


@pytest.mark.unit
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios(positions_always=True, common_iphys=3))
def test_nestednet_round_trip(scenario):
    """Everything the format can carry comes back (it has no name, range or iPHY count)."""
    text = dumps_scenario(scenario, "nestednet")
    again = parse_scenario(decode_json(text, "rt.json"), "rt.json", nestednet_iphys=3)
    assert again == dataclasses.replace(scenario, name="", range=None,
                                        source_format="nestednet")


# -- the NestedNet format's line-of-sight rule ----------------------------------------


def nestednet_doc(los: dict[tuple[str, str], bool], positions: dict[str, tuple] | None = None,
                  unlisted: set[tuple[str, str]] = frozenset()) -> dict[str, Any]:
    """One time step; ``los[(a, b)]`` is what a's entry says about b."""
    names = sorted({n for p in los for n in p})
    positions = positions or {n: (i * 1000.0, 0.0, 0.0) for i, n in enumerate(names)}
    entries = []
    for i, a in enumerate(names):
        graph = [{"nodeName": b, "nodeID": names.index(b) + 1, "LoS": los.get((a, b), False),
                  "PosX": 0, "PosY": 0, "PosZ": 0}
                 for b in names if b != a and (a, b) not in unlisted]
        x, y, z = positions[a]
        entries.append({"nodeName": a, "nodeID": i + 1, "PosX": x, "PosY": y, "PosZ": z,
                        "Time": 0, "visibilityGraph": graph})
    return {"MobilecomScnDef": {"simDuration": 10, "MobileNodeDef": entries}}


@pytest.mark.unit
def test_nestednet_los_must_hold_both_ways():
    doc = nestednet_doc({("a", "b"): True, ("b", "a"): True,   # both ways: visible
                         ("a", "c"): True, ("c", "a"): False,  # one way: not visible
                         ("b", "c"): False, ("c", "b"): True,  # the other way: not visible
                         ("c", "d"): False, ("d", "c"): False,
                         ("a", "d"): True, ("d", "a"): True,
                         ("b", "d"): True, ("d", "b"): True})
    s = parse_nestednet(doc, "f.json")
    assert s.steps[0].visible == {("a", "b"), ("a", "d"), ("b", "d")}


@pytest.mark.unit
def test_nestednet_pair_listed_by_one_side_only_is_not_visible():
    los = {("a", "b"): True, ("b", "a"): True, ("a", "c"): True, ("c", "a"): True,
           ("b", "c"): True, ("c", "b"): True}
    doc = nestednet_doc(los, unlisted={("c", "b")})
    assert parse_nestednet(doc, "f.json").steps[0].visible == {("a", "b"), ("a", "c")}


@pytest.mark.unit
def test_nestednet_los_is_taken_as_given_not_recomputed_from_positions():
    los = {("a", "b"): True, ("b", "a"): True, ("a", "c"): False, ("c", "a"): False,
           ("b", "c"): False, ("c", "b"): False}
    far = nestednet_doc(los, positions={"a": (0, 0, 0), "b": (1e6, 0, 0), "c": (1, 0, 0)})
    s = parse_nestednet(far, "f.json")
    assert s.steps[0].visible == {("a", "b")}
    assert s.steps[0].positions == {"a": (0, 0, 0), "b": (1e6, 0, 0), "c": (1, 0, 0)}
    # positions repeated inside visibilityGraph entries are not used
    for entry in far["MobilecomScnDef"]["MobileNodeDef"]:
        for peer in entry["visibilityGraph"]:
            peer.update(PosX=-5e5, PosY=123, PosZ=9)
    assert parse_nestednet(far, "f.json").steps == s.steps


@pytest.mark.unit
def test_nestednet_entry_order_does_not_matter_and_extra_fields_are_tolerated():
    doc = load_doc(NESTEDNET_EXAMPLE)
    before = parse_scenario(doc, "f.json")
    entries = doc["MobilecomScnDef"]["MobileNodeDef"]
    entries.reverse()
    entries[0]["speed"] = 3
    doc["MobilecomScnDef"]["comment"] = "written by another tool"
    after = parse_scenario(doc, "f.json")
    assert after.steps == before.steps
    assert sorted(after.nodes, key=lambda n: n.name) == sorted(before.nodes,
                                                             key=lambda n: n.name)


@pytest.mark.unit
@pytest.mark.parametrize("iphys", [0, 65, -1])
def test_nestednet_iphys_out_of_range(iphys):
    with pytest.raises(UsageError, match=r"iPHYs per node must be 1\.\.64"):
        parse_nestednet(load_doc(NESTEDNET_EXAMPLE), "f.json", iphys=iphys)


# -- invalid native files: every problem with its path --------------------------------


def small_doc() -> dict[str, Any]:
    return load_doc(SMALL)


def native_positions_doc() -> dict[str, Any]:
    s = mobility.generate(nodes=3, duration=10, step=5, range_=50, model="orbit", seed=1,
                          iphys=2)
    return json.loads(dumps_scenario(s))


NATIVE_CASES = {
    "unknown node in a visible pair": (
        lambda d: d["steps"][1]["visible"].__setitem__(0, ["n1", "n13"]),
        ["steps[1].visible[0]: unknown node 'n13'"]),
    "self pair": (
        lambda d: d["steps"][2]["visible"].append(["n3", "n3"]),
        ["steps[2].visible[2]: a node cannot be paired with itself ('n3')"]),
    "pair listed twice": (
        lambda d: d["steps"][0]["visible"].append(["n2", "n1"]),
        ["steps[0].visible[3]: pair n2-n1 listed twice (also visible[0])"]),
    "steps out of order": (
        lambda d: d["steps"][2].__setitem__("time", 5),
        ["steps[2].time: time 5 is not after the previous step's time 10"]),
    "same time twice": (
        lambda d: d["steps"][1].__setitem__("time", 0),
        ["steps[1].time: time 0 is not after the previous step's time 0"]),
    "step beyond the duration": (
        lambda d: d["steps"][2].__setitem__("time", 31),
        ["steps[2].time: time 31 is beyond the duration (30 s)"]),
    "negative time": (
        lambda d: d["steps"][0].__setitem__("time", -1),
        ["steps[0].time:"]),
    "duplicate node name": (
        lambda d: d["nodes"].append({"name": "n2", "id": 9}),
        ["nodes[4].name: duplicate node name 'n2' (also nodes[1])"]),
    "duplicate node id": (
        lambda d: d["nodes"][3].__setitem__("id", 2),
        ["nodes[3].id: duplicate node id 2 (also nodes[1])"]),
    "duplicate default id": (
        lambda d: [d["nodes"][0].pop("id"), d["nodes"][1].__setitem__("id", 1)],
        ["nodes[1].id: duplicate node id 1 (also nodes[0])"]),
    "bad node name": (
        lambda d: d["nodes"][0].__setitem__("name", "n 1"),
        ["nodes[0].name: bad node name"]),
    "unknown field": (
        lambda d: d["nodes"][0].__setitem__("colour", "red"),
        ["nodes[0]: unknown field(s) ('colour' was unexpected)"]),
    "missing required key": (
        lambda d: d["steps"][1].pop("time"),
        ["steps[1]: 'time' is missing"]),
    "step with neither positions nor visible": (
        lambda d: d["steps"][1].pop("visible"),
        ["steps[1]: a step needs 'positions' or 'visible'"]),
    "string as duration": (
        lambda d: d.__setitem__("duration", "30"),
        ["duration: expected a number, got the string '30'"]),
    "NaN duration": (
        lambda d: d.__setitem__("duration", math.nan),
        ["duration: expected a finite number, got nan"]),
    "wrong format id": (
        lambda d: d.__setitem__("format", "nestednet-scenario/2"),
        ['format: must be "nestednet-scenario/1"']),
    "iphys out of range": (
        lambda d: d.__setitem__("iphys", 65),
        ["iphys: 65 is greater than the maximum of 64"]),
}

POSITION_CASES = {
    "NaN position": (
        lambda d: d["steps"][1]["positions"]["n2"].__setitem__(0, math.nan),
        ["steps[1].positions.n2[0]: expected a finite number, got nan"]),
    "infinite position": (
        lambda d: d["steps"][0]["positions"]["n3"].__setitem__(2, -math.inf),
        ["steps[0].positions.n3[2]: expected a finite number, got -inf"]),
    "string as position": (
        lambda d: d["steps"][1]["positions"]["n1"].__setitem__(1, "12.5"),
        ["steps[1].positions.n1[1]: expected a number, got the string '12.5'"]),
    "position of an unknown node": (
        lambda d: d["steps"][0]["positions"].__setitem__("n9", [1, 2, 3]),
        ["steps[0].positions.n9: unknown node 'n9'"]),
    "position missing": (
        lambda d: d["steps"][1]["positions"].pop("n2"),
        ["steps[1].positions: no position for node(s) 'n2'"]),
    "one-coordinate position": (
        lambda d: d["steps"][0]["positions"].__setitem__("n1", [1]),
        ["steps[0].positions.n1: a position is [x, y] or [x, y, z]"]),
    "positions without a range": (
        lambda d: d.pop("line_of_sight"),
        ["steps[0]: positions without 'visible' need 'line_of_sight'",
         "steps[1]: positions without 'visible' need 'line_of_sight'"]),
    "NaN range": (
        lambda d: d["line_of_sight"].__setitem__("range", math.nan),
        ["line_of_sight.range: expected a finite number, got nan"]),
}


@pytest.mark.unit
@pytest.mark.parametrize("case", list(NATIVE_CASES))
def test_invalid_native_file(tmp_path, case):
    mutate, expected = NATIVE_CASES[case]
    doc = small_doc()
    mutate(doc)
    message = problem(tmp_path, doc)
    for text in expected:
        assert text in message, message


@pytest.mark.unit
@pytest.mark.parametrize("case", list(POSITION_CASES))
def test_invalid_native_positions(tmp_path, case):
    mutate, expected = POSITION_CASES[case]
    doc = native_positions_doc()
    mutate(doc)
    message = problem(tmp_path, doc)
    for text in expected:
        assert text in message, message


@pytest.mark.unit
def test_every_problem_is_reported_at_once_in_file_order(tmp_path):
    doc = small_doc()
    doc["steps"][2]["visible"].append(["n1", "zz"])
    doc["steps"][0]["visible"].append(["yy", "n1"])
    doc["steps"][1]["time"] = 40
    message = problem(tmp_path, doc)
    lines = message.splitlines()
    assert lines[0].endswith("4 problems:")  # time 40 is also not before step 2's 20
    assert [ln.split(":")[0].strip() for ln in lines[1:]] == [
        "steps[0].visible[3]", "steps[1].time", "steps[2].time", "steps[2].visible[2]"]


@pytest.mark.unit
def test_cli_check_exits_2_with_the_path_and_no_traceback(tmp_path):
    doc = small_doc()
    doc["steps"][1]["visible"][0] = ["n1", "n13"]
    path = write_doc(tmp_path, doc)
    result = run_cli("visibility", "check", str(path))
    assert result.exit_code == 2
    assert f"error: {path}: steps[1].visible[0]: unknown node 'n13'" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.unit
@pytest.mark.parametrize("name", ["[/x]", "[bold]zz", "[link=file:///etc]n", "a]b[c"])
def test_node_names_that_look_like_markup_are_printed_verbatim(tmp_path, name):
    doc = small_doc()
    doc["steps"][1]["visible"][0] = ["n1", name]
    result = run_cli("visibility", "check", str(write_doc(tmp_path, doc)))
    assert result.exit_code == 2, result.output
    assert f"steps[1].visible[0]: unknown node {name!r}" in result.stderr


# -- invalid NestedNet-format files ---------------------------------------------------

ROOT = "MobilecomScnDef.MobileNodeDef"


def entries(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return doc["MobilecomScnDef"]["MobileNodeDef"]


NESTEDNET_CASES = {
    "unknown node in a visibility graph": (
        lambda d: entries(d)[6]["visibilityGraph"][2].update(nodeName="n13"),
        [f"{ROOT}[6].visibilityGraph[2].nodeName: unknown node 'n13'"]),
    "self entry at another position": (
        lambda d: entries(d)[1]["visibilityGraph"][0].update(nodeName="n2", nodeID=2,
                                                             PosX=21.16),
        [f"{ROOT}[1].visibilityGraph[0].PosX: the node's own entry lists PosX 21.16, "
         "but its position is 20.16"]),
    "self entry with the wrong id": (
        lambda d: entries(d)[1]["visibilityGraph"][0].update(nodeName="n2", nodeID=5),
        [f"{ROOT}[1].visibilityGraph[0].nodeID: node 'n2' has nodeID 2, not 5"]),
    "peer with the wrong id": (
        lambda d: entries(d)[1]["visibilityGraph"][0].update(nodeID=7),
        [f"{ROOT}[1].visibilityGraph[0].nodeID: node 'n1' has nodeID 1, not 7"]),
    "one name, two ids": (
        lambda d: entries(d)[5].update(nodeID=9),
        [f"{ROOT}[5].nodeID: node 'n1' has nodeID 1 elsewhere ({ROOT}[0].nodeID), here 9"]),
    "duplicate id": (
        lambda d: [e.update(nodeID=1) for e in entries(d) if e["nodeName"] == "n2"],
        [f"{ROOT}[1].nodeID: nodeID 1 is already node 'n1'"]),
    "node missing at a time": (
        lambda d: entries(d).pop(7),
        [f"{ROOT}[5].Time: no entry at Time 10 for node(s) 'n3'"]),
    "two entries for a node at a time": (
        lambda d: entries(d).append(copy.deepcopy(entries(d)[0])),
        [f"{ROOT}[15]: second entry for node 'n1' at Time 0 (also MobileNodeDef[0])"]),
    "time beyond simDuration": (
        lambda d: [e.update(Time=40) for e in entries(d)[10:]],
        [f"{ROOT}[10].Time: time 40 is beyond the duration (30 s)"]),
    "NaN position": (
        lambda d: entries(d)[3].update(PosY=math.nan),
        [f"{ROOT}[3].PosY: expected a finite number, got nan"]),
    "string position": (
        lambda d: entries(d)[3].update(PosZ="3"),
        [f"{ROOT}[3].PosZ: expected a number, got the string '3'"]),
    "NaN position in a visibility graph": (
        lambda d: entries(d)[3]["visibilityGraph"][1].update(PosX=math.inf),
        [f"{ROOT}[3].visibilityGraph[1].PosX: expected a finite number, got inf"]),
    "LoS not a boolean": (
        lambda d: entries(d)[0]["visibilityGraph"][0].update(LoS="true"),
        [f"{ROOT}[0].visibilityGraph[0].LoS: expected a boolean, got the string 'true'"]),
    "LoS missing": (
        lambda d: entries(d)[0]["visibilityGraph"][0].pop("LoS"),
        [f"{ROOT}[0].visibilityGraph[0]: 'LoS' is missing"]),
    "NaN simDuration": (
        lambda d: d["MobilecomScnDef"].update(simDuration=math.nan),
        ["MobilecomScnDef.simDuration: expected a finite number, got nan"]),
    "no entries": (
        lambda d: d["MobilecomScnDef"].update(MobileNodeDef=[]),
        ["MobilecomScnDef.MobileNodeDef: [] should be non-empty"]),
}


@pytest.mark.unit
@pytest.mark.parametrize("case", list(NESTEDNET_CASES))
def test_invalid_nestednet_file(tmp_path, case):
    mutate, expected = NESTEDNET_CASES[case]
    doc = load_doc(NESTEDNET_EXAMPLE)
    mutate(doc)
    message = problem(tmp_path, doc)
    for text in expected:
        assert text in message, message


# -- the thesis's own example (Fig. 3.11) ---------------------------------------------


@pytest.mark.unit
def test_thesis_fig_3_11_loads_with_its_self_entries():
    """Each node lists itself (with LoS and position) as printed; that makes no link."""
    s = load_scenario(THESIS_FIG_3_11, nestednet_iphys=2)
    assert s.source_format == "nestednet" and s.node_names == ("BIIF-1", "BIIF-2")
    assert [n.node_id for n in s.nodes] == [36585, 37753]
    assert s.duration == 10.8 and [st_.time for st_ in s.steps] == [0.000008]
    assert s.steps[0].visible == {("BIIF-1", "BIIF-2")}
    assert s.steps[0].positions == {"BIIF-1": (-15777.7685, -4847.7022, -21031.0903),
                                    "BIIF-2": (6908.7847, 25485.215, -1440.555)}


@pytest.mark.unit
def test_a_self_entry_with_los_false_changes_nothing():
    doc = load_doc(THESIS_FIG_3_11)
    for entry in entries(doc):
        for peer in entry["visibilityGraph"]:
            if peer["nodeName"] == entry["nodeName"]:
                peer["LoS"] = False
    with tempfile.TemporaryDirectory() as tmp:
        s = load_scenario(write_doc(Path(tmp), doc, "fig.json"))
    assert s.steps[0].visible == {("BIIF-1", "BIIF-2")}


@pytest.mark.unit
def test_cli_checks_the_thesis_example():
    result = run_cli("visibility", "check", str(THESIS_FIG_3_11), "--json")
    assert result.exit_code == 0, result.output


# -- not JSON, not a scenario, not a file ---------------------------------------------


@pytest.mark.unit
def test_malformed_json_names_line_and_column(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{\n  "format": "nestednet-scenario/1",\n  "duration": ,\n}\n')
    with pytest.raises(UsageError) as caught:
        load_scenario(path)
    assert str(caught.value) == (f"{path}: not valid JSON: line 3, column 15: "
                                 "Expecting value")
    result = run_cli("visibility", "check", str(path))
    assert result.exit_code == 2 and "line 3, column 15" in result.stderr


@pytest.mark.unit
@pytest.mark.parametrize(("content", "expected"), [
    (b"", "not valid JSON: line 1, column 1"),
    (b"[1, 2", "not valid JSON: line 1, column 6"),
    (b"\xff\xfe{}", "not UTF-8 text (byte 0)"),
    (b"[" * 100_000, "not valid JSON"),
    (b"[]", "not a scenario"),
    (b'{"steps": []}', "(top level): 'duration' is missing"),
    (b'{"MobilecomScnDef": []}', "MobilecomScnDef: expected an object, got a list"),
    (b"{}", "not a scenario"),
])
def test_not_a_scenario(tmp_path, content, expected):
    path = tmp_path / "odd.json"
    path.write_bytes(content)
    result = run_cli("visibility", "check", str(path))
    assert result.exit_code == 2, result.output
    assert f"{path}: " in result.stderr and expected in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.unit
def test_missing_file_and_directory(tmp_path):
    for path, expected in ((tmp_path / "nope.json", "no such file"),
                           (tmp_path, "is a directory")):
        result = run_cli("visibility", "check", str(path))
        assert result.exit_code == 2 and f"{path}: {expected}" in result.stderr


# -- hypothesis: mutated documents always give exit 2 and a path ----------------------

BASES = {"small": load_doc(SMALL), "positions": native_positions_doc(),
         "nestednet": load_doc(NESTEDNET_EXAMPLE)}

REQUIRED = {
    "small": [r"format|duration|nodes|steps", r"nodes\[\d+\]\.name",
              r"steps\[\d+\]\.(time|visible)"],
    "positions": [r"format|duration|nodes|steps", r"nodes\[\d+\]\.name",
                  r"steps\[\d+\]\.(time|positions)"],
    "nestednet": [r"MobilecomScnDef\.(simDuration|MobileNodeDef)",
                  rf"{re.escape(ROOT)}\[\d+\]\.(nodeName|nodeID|PosX|PosY|PosZ|Time|"
                  r"visibilityGraph)",
                  rf"{re.escape(ROOT)}\[\d+\]\.visibilityGraph\[\d+\]\.(nodeName|nodeID|LoS)"],
}


def all_paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    found = []
    items = (doc.items() if isinstance(doc, dict)
             else enumerate(doc) if isinstance(doc, list) else ())
    for key, value in items:
        path = (*prefix, key)
        found.append(path)
        found.extend(all_paths(value, path))
    return found


def get(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def wrong_values(value: Any) -> st.SearchStrategy:
    """A value of a type the schema does not allow where ``value`` stands."""
    others = {
        "bool": st.one_of(st.integers(), st.text(max_size=3), st.none()),
        "number": st.one_of(st.booleans(), st.text(max_size=3), st.none(),
                            st.lists(st.integers(), max_size=2),
                            st.sampled_from([math.nan, math.inf, -math.inf])),
        "str": st.one_of(st.integers(), st.floats(allow_nan=False), st.booleans(), st.none(),
                         st.lists(st.text(max_size=2), max_size=2)),
        "list": st.one_of(st.integers(), st.text(max_size=3), st.none(),
                          st.dictionaries(st.text(max_size=2), st.integers(), max_size=2)),
        "dict": st.one_of(st.integers(), st.text(max_size=3), st.none(),
                          st.lists(st.integers(), max_size=2)),
    }
    kind = ("bool" if isinstance(value, bool) else "number" if isinstance(value, int | float)
            else "str" if isinstance(value, str) else "list" if isinstance(value, list)
            else "dict")
    return others[kind]


def name_references(base: str, doc: Any) -> list[tuple]:
    """Places that name a node (not where it is defined)."""
    paths = all_paths(doc)
    if base == "nestednet":
        return [p for p in paths if len(p) == 6 and p[-1] == "nodeName"]
    if base == "positions":
        return [p for p in paths if len(p) == 4 and p[2] == "positions"]
    return [p for p in paths if len(p) == 5 and p[2] == "visible"]


def check_cli(doc: Any) -> str:
    with tempfile.TemporaryDirectory(prefix="scentests-") as tmp:
        path = Path(tmp) / "mutated.json"
        path.write_text(json.dumps(doc), encoding="utf-8")
        result = CliRunner().invoke(main, ["visibility", "check", str(path)])
        assert result.exit_code == 2, (result.output, result.exception)
        assert isinstance(result.exception, SystemExit), result.exception
        assert "Traceback" not in result.output
        assert result.stderr.startswith(f"error: {path}: "), result.stderr
        return result.stderr


@pytest.mark.unit
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), base=st.sampled_from(sorted(BASES)))
def test_mutated_documents_fail_with_a_path(data, base):
    doc = copy.deepcopy(BASES[base])
    kind = data.draw(st.sampled_from(["drop", "retype", "unknown_node"]), label="mutation")
    if kind == "drop":
        required = [p for p in all_paths(doc)
                    if any(re.fullmatch(r, format_path(p)) for r in REQUIRED[base])]
        path = data.draw(st.sampled_from(required), label="dropped")
        del get(doc, path[:-1])[path[-1]]
        stderr = check_cli(doc)
        where = format_path(path[:-1])
        assert f"{where}: " in stderr and f"'{path[-1]}'" in stderr, stderr
    elif kind == "retype":
        path = data.draw(st.sampled_from(all_paths(doc)), label="replaced")
        value = data.draw(wrong_values(get(doc, path)), label="value")
        get(doc, path[:-1])[path[-1]] = value
        stderr = check_cli(doc)
        assert f"{format_path(path)}: " in stderr, stderr
    else:
        path = data.draw(st.sampled_from(name_references(base, doc)), label="reference")
        known = ({e["nodeName"] for e in entries(doc)} if base == "nestednet"
                 else {n["name"] for n in doc["nodes"]})
        name = data.draw(st.text(min_size=1, max_size=8).filter(lambda n: n not in known),
                         label="name")
        if base == "positions":  # a position given under an unknown node's name
            where = format_path((*path[:-1], name))
            get(doc, path[:-1])[name] = get(doc, path[:-1]).pop(path[-1])
        else:
            where = format_path(path[:-1] if base == "small" else path)
            get(doc, path[:-1])[path[-1]] = name
        stderr = check_cli(doc)
        assert f"{where}: unknown node {name!r}" in stderr, stderr


@pytest.mark.unit
def test_the_readme_examples_are_valid():
    text = (SCENARIOS / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```json\n(.*?)```", text, re.S)
    parsed = [parse_scenario(json.loads(b), "README.md") for b in blocks]
    assert [s.source_format for s in parsed] == ["native", "native", "nestednet"]
    native, with_links, nested = parsed
    assert with_links.steps[0].links[("b", "a")].rate_bps == 5_000_000
    assert [s.visible for s in native.steps] == [{("a", "b"), ("b", "c")}, {("a", "b")}]
    assert [n.iphys for n in native.nodes] == [2, 2, 4]
    assert nested.steps[0].visible == {("n1", "n2")}
