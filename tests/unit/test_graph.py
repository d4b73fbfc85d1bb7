"""`nestednet graph`: PNG and GIF pictures from scenarios and run events; bad input exits 2."""

from __future__ import annotations

import json
from pathlib import Path

import agent_sim
import pytest
from click.testing import CliRunner
from PIL import Image

from nestednet import connectivity_plot as plot
from nestednet.cli import main
from nestednet.model import events as ev
from nestednet.model.scenario_file import load_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
SMALL = SCENARIOS / "small-4x2.json"
DEMO = SCENARIOS / "demo-12x4.json"


def run_cli(*args: str):
    return CliRunner().invoke(main, list(args))


def write_events(path: Path, events: list[ev.Event]) -> Path:
    path.write_text("".join(e.to_line() + "\n" for e in events), encoding="utf-8")
    return path


def settled_links_per_step(scenario) -> list[int]:
    table, _, _ = agent_sim.run(scenario)
    counts = []
    for i in range(len(scenario.steps)):
        partial = type(scenario)(nodes=scenario.nodes, duration=scenario.duration,
                                 steps=scenario.steps[: i + 1])
        counts.append(len(agent_sim.run(partial)[0].links()))
    assert counts[-1] == len(table.links())
    return counts


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    with Image.open(path) as image:
        assert image.size[0] > 300 and image.size[1] > 300


@pytest.mark.unit
def test_png_of_a_scenario_with_positions(tmp_path):
    out = tmp_path / "demo.png"
    result = run_cli("graph", str(DEMO), "--at", "31", "-o", str(out), "--json")
    assert result.exit_code == 0, result.output
    assert_png(out)
    drawn = json.loads(result.stdout)
    demo = load_scenario(DEMO)
    assert drawn["frames"] == [{"step": 5, "time": 30.0,
                                "visible_pairs": len(demo.steps[5].visible), "links": None}]


@pytest.mark.unit
def test_png_of_explicit_pairs_uses_a_circle_layout(tmp_path):
    scenario = load_scenario(SMALL)
    frames = plot.frames_from_scenario(scenario)
    assert all(f.laid_out for f in frames)
    assert all(f.positions == plot.circle_layout(scenario.node_names) for f in frames)
    assert [f.visible for f in frames] == [s.visible for s in scenario.steps]
    out = tmp_path / "small.png"
    result = run_cli("graph", str(SMALL), "-o", str(out))
    assert result.exit_code == 0, result.output
    assert_png(out)


@pytest.mark.unit
def test_gif_over_all_steps(tmp_path):
    out = tmp_path / "small.gif"
    result = run_cli("graph", str(SMALL), "-o", str(out), "--json")
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:6] in (b"GIF87a", b"GIF89a")
    with Image.open(out) as image:
        assert image.n_frames == 3
    assert [f["step"] for f in json.loads(result.stdout)["frames"]] == [0, 1, 2]


@pytest.mark.unit
def test_links_from_an_events_file_are_drawn(tmp_path):
    scenario = load_scenario(SMALL)
    _, events, violations = agent_sim.run(scenario)
    assert violations == [[], [], []]
    path = write_events(tmp_path / "events.jsonl", events)
    expected = settled_links_per_step(scenario)
    assert all(expected)

    frames = plot.frames_from_scenario(scenario, ev.read_events(path))
    assert [len(f.links) for f in frames] == expected

    out = tmp_path / "run.gif"
    result = run_cli("graph", str(SMALL), "--events", str(path), "-o", str(out), "--json")
    assert result.exit_code == 0, result.output
    assert [f["links"] for f in json.loads(result.stdout)["frames"]] == expected
    with Image.open(out) as image:
        assert image.n_frames == 3

    # the events file alone (its step records carry the visibility)
    out = tmp_path / "events.png"
    result = run_cli("graph", str(path), "--at", "10", "-o", str(out), "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["frames"][0]["links"] == expected[1]
    assert_png(out)


@pytest.mark.unit
def test_links_change_the_picture(tmp_path):
    """The drawing depends on the links: same step with and without events differs."""
    scenario = load_scenario(SMALL)
    _, events, _ = agent_sim.run(scenario)
    with_links = plot.frames_from_scenario(scenario, events)[0]
    without = plot.frames_from_scenario(scenario, [])[0]
    assert with_links.links and without.links == {}
    plot.render_png(with_links, tmp_path / "a.png", dpi=40)
    plot.render_png(without, tmp_path / "b.png", dpi=40)
    assert (tmp_path / "a.png").read_bytes() != (tmp_path / "b.png").read_bytes()


@pytest.mark.unit
def test_events_with_positions_keep_them(tmp_path):
    scenario = load_scenario(DEMO)
    short = type(scenario)(nodes=scenario.nodes, duration=12, steps=scenario.steps[:2],
                           range=scenario.range)
    _, events, _ = agent_sim.run(short)
    frames = plot.frames_from_events(events)
    assert [f.positions for f in frames] == [s.positions for s in short.steps]
    assert not any(f.laid_out for f in frames)


@pytest.mark.unit
@pytest.mark.parametrize(("lines", "line_no", "expected"), [
    (['{"event": "step", "scenario_time": 0, "nodes": ["n1"], "visible": []}',
      '{"event": "link_up", "scenario_time": 1,'], 2, "not valid JSON"),
    (['{"event": "step", "scenario_time": 0, "nodes": ["n1", "n2"], "visible": []}',
      "",
      '{"event": "link_up", "scenario_time": 1, "nodes": ["n1", "n2"], "iphys": [1]}'],
     3, "a link_up record needs 2 iPHY number(s)"),
    (['{"event": "step", "scenario_time": "0"}'], 1, "'scenario_time' is missing or not"),
    (['{"event": "step", "scenario_time": 0, "visible": [["n1"]]}'], 1, "'visible' is not"),
    (['{"event": "step", "scenario_time": 0, "positions": {"n1": [1]}}'], 1, "'positions'"),
])
def test_bad_events_file_exits_2_with_the_line_number(tmp_path, lines, line_no, expected):
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "x.png"
    for args in (["graph", str(path), "-o", str(out)],
                 ["graph", str(SMALL), "--events", str(path), "-o", str(out)]):
        result = run_cli(*args)
        assert result.exit_code == 2, result.output
        assert f"{path} line {line_no}: " in result.stderr and expected in result.stderr
        assert "Traceback" not in result.output
        assert not out.exists()


@pytest.mark.unit
@pytest.mark.parametrize(("args", "expected"), [
    (["-o", "x.jpg"], "must end in .png or .gif"),
    (["--at", "5", "-o", "x.gif"], "--at picks one step for a PNG"),
    (["--at", "-1", "-o", "x.png"], "before the first step"),
    (["--scenario", str(SMALL), "-o", "x.png"], "--scenario is for an events file"),
])
def test_bad_graph_arguments_exit_2(tmp_path, args, expected):
    args = [str(tmp_path / a) if a.startswith("x.") else a for a in args]
    result = run_cli("graph", str(SMALL), *args)
    assert result.exit_code == 2, result.output
    assert expected in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.unit
def test_events_without_step_records_exit_2(tmp_path):
    path = write_events(tmp_path / "events.jsonl", [
        ev.Event(ev.LINK_UP, 1.0, nodes=("n1", "n2"), iphys=(1, 1))])
    result = run_cli("graph", str(path), "-o", str(tmp_path / "x.png"))
    assert result.exit_code == 2 and "no 'step' records" in result.stderr
