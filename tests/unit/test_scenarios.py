from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nestednet.cli import main
from nestednet.errors import UsageError
from nestednet.model import events as ev
from nestednet.model.scenario_file import dumps_scenario, load_scenario, parse_scenario
from nestednet.model.visibility import generate

ROOT = Path(__file__).resolve().parents[2] / "scenarios"
SMALL = json.loads((ROOT / "small-4x2.json").read_text())


@pytest.mark.unit
@pytest.mark.parametrize("name", ["demo-12x4.json", "small-4x2.json",
                                  "nestednet-format-example.json"])
def test_shipped_scenarios_are_valid(name):
    s = load_scenario(ROOT / name)
    assert s.steps and s.nodes


@pytest.mark.unit
def test_demo_is_reproducible_from_readme_command():
    s = generate(nodes=12, duration=60, step=6, range_=100, model="random-waypoint", seed=7,
                 iphys=4, name="demo-12x4")
    assert dumps_scenario(s) == (ROOT / "demo-12x4.json").read_text()


@pytest.mark.unit
def test_unknown_node_path():
    doc = copy.deepcopy(SMALL)
    doc["steps"][2]["visible"].append(["n1", "n13"])
    with pytest.raises(UsageError, match=r"steps\[2\]\.visible\[2\]: unknown node 'n13'"):
        parse_scenario(doc, "f.json")


@pytest.mark.unit
def test_nestednet_los_needs_both_ways():
    doc = {"MobilecomScnDef": {"simDuration": 10, "MobileNodeDef": [
        {"nodeName": "a", "nodeID": 1, "PosX": 0, "PosY": 0, "PosZ": 0, "Time": 0,
         "visibilityGraph": [{"nodeName": "b", "nodeID": 2, "LoS": True},
                             {"nodeName": "c", "nodeID": 3, "LoS": True}]},
        {"nodeName": "b", "nodeID": 2, "PosX": 1, "PosY": 0, "PosZ": 0, "Time": 0,
         "visibilityGraph": [{"nodeName": "a", "nodeID": 1, "LoS": True}]},
        {"nodeName": "c", "nodeID": 3, "PosX": 2, "PosY": 0, "PosZ": 0, "Time": 0,
         "visibilityGraph": [{"nodeName": "a", "nodeID": 1, "LoS": False}]}]}}
    s = parse_scenario(doc, "x", nestednet_iphys=3)
    assert s.steps[0].visible == {("a", "b")}
    assert {n.iphys for n in s.nodes} == {3}


@pytest.mark.unit
@pytest.mark.parametrize("model", ["static", "random-waypoint", "orbit"])
@pytest.mark.parametrize("fmt", ["native", "nestednet"])
def test_generator_deterministic_and_round_trips(model, fmt, tmp_path):
    a = generate(nodes=6, duration=30, step=5, range_=50, model=model, seed=1)
    b = generate(nodes=6, duration=30, step=5, range_=50, model=model, seed=1)
    c = generate(nodes=6, duration=30, step=5, range_=50, model=model, seed=2)
    assert dumps_scenario(a, fmt) == dumps_scenario(b, fmt) != dumps_scenario(c, fmt)
    path = tmp_path / "s.json"
    path.write_text(dumps_scenario(a, fmt))
    back = load_scenario(path)
    assert [s.visible for s in back.steps] == [s.visible for s in a.steps]


def _mutations():
    def at(path, value):
        return ("set", path, value)
    return st.sampled_from([
        at(["duration"], -1), at(["duration"], "x"), at(["iphys"], 0),
        at(["nodes", 1, "name"], "n1"), at(["nodes", 2, "id"], 1), at(["nodes", 0, "name"], "a b"),
        at(["steps", 1, "time"], 0), at(["steps", 2, "time"], 99), at(["steps", 0, "time"], None),
        at(["steps", 1, "visible", 0], ["n1", "n1"]), at(["steps", 0, "visible", 1], ["n2", "n9"]),
        at(["steps", 2, "visible", 0], ["n1"]), at(["format"], "v2"), at(["steps"], []),
        at(["steps", 1], {"time": 10}), at(["nodes"], "n1"), at(["extra"], 1),
    ])


@pytest.mark.unit
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(_mutations(), min_size=1, max_size=3))
def test_mutated_files_exit_2_with_a_path(tmp_path, mutations):
    doc = copy.deepcopy(SMALL)
    for _, path, value in mutations:
        target = doc
        try:
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(doc))
    result = CliRunner().invoke(main, ["visibility", "check", str(f)])
    assert result.exit_code == 2, result.output  # every mutation alone breaks the file
    assert "bad.json" in result.output
    assert any(k in result.output for k in ("steps", "nodes", "duration", "iphys", "format",
                                            "top level", "extra"))


@pytest.mark.unit
def test_malformed_json_line_column(tmp_path):
    f = tmp_path / "m.json"
    f.write_text('{"a": 1\n "b": 2}')
    result = CliRunner().invoke(main, ["visibility", "check", str(f)])
    assert result.exit_code == 2 and "line 2, column 2" in result.output


@pytest.mark.unit
def test_graph_png_and_gif(tmp_path):
    import sys
    sys.path.insert(0, str(Path(__file__).parent))
    import agent_sim
    s = load_scenario(ROOT / "small-4x2.json")
    _, events, violations = agent_sim.run(s)
    assert all(v == [] for v in violations)
    ev_file = tmp_path / "events.jsonl"
    ev_file.write_text("\n".join(e.to_line() for e in events) + "\n")
    assert ev.links_before(ev.read_events(ev_file), None)
    runner = CliRunner()
    png, gif = tmp_path / "g.png", tmp_path / "g.gif"
    r = runner.invoke(main, ["graph", str(ROOT / "small-4x2.json"), "--events", str(ev_file),
                             "--at", "12", "-o", str(png)])
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = runner.invoke(main, ["graph", str(ev_file), "-o", str(gif)])
    assert r.exit_code == 0, r.output
    assert gif.read_bytes()[:6] in (b"GIF89a", b"GIF87a")
