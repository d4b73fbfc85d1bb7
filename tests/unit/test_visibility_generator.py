"""`nestednet visibility generate`: deterministic per seed, visibility by the distance rule,
bad arguments exit 2 and write nothing, and both output formats re-load."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from nestednet.cli import main
from nestednet.errors import UsageError
from nestednet.model import visibility as mobility
from nestednet.model.line_of_sight import pair, visible_pairs
from nestednet.model.scenario_file import dumps_scenario, load_scenario, parse_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def gen(model: str, seed: int = 0, **kw) -> mobility.Scenario:
    args = {"nodes": 8, "duration": 30.0, "step": 3.0, "range_": 40.0, "iphys": 2} | kw
    return mobility.generate(model=model, seed=seed, **args)


def brute_force_visibility(positions, range_):
    """Distance <= range, written out independently of line_of_sight.visible_pairs."""
    names = list(positions)
    found = set()
    for a in names:
        for b in names:
            if a < b:
                d = math.sqrt(sum((positions[a][k] - positions[b][k]) ** 2 for k in range(3)))
                if d <= range_:
                    found.add((a, b))
    return found


def run_cli(*args: str):
    return CliRunner().invoke(main, list(args))


# -- the line-of-sight rule -----------------------------------------------------------


@pytest.mark.unit
def test_distance_rule_is_inclusive_and_three_dimensional():
    positions = {"a": (0.0, 0.0, 0.0), "b": (3.0, 4.0, 0.0), "c": (3.0, 4.0, 0.5),
                 "d": (0.0, 0.0, 5.0)}
    assert visible_pairs(positions, 5.0) == {("a", "b"), ("a", "d"), ("b", "c")}
    assert visible_pairs(positions, 4.999) == {("b", "c")}
    assert visible_pairs({"x": (0, 0, 0)}, 1e9) == frozenset()
    assert pair("n2", "n10") == ("n10", "n2") == pair("n10", "n2")


# -- determinism ----------------------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize("model", mobility.MODELS)
def test_same_seed_same_scenario_and_bytes(model):
    first, second = gen(model, seed=11), gen(model, seed=11)
    assert first == second
    for fmt in ("native", "nestednet"):
        assert dumps_scenario(first, fmt) == dumps_scenario(second, fmt)


@pytest.mark.unit
@pytest.mark.parametrize("model", mobility.MODELS)
def test_different_seeds_differ(model):
    scenarios = [gen(model, seed=s) for s in range(4)]
    texts = {dumps_scenario(s) for s in scenarios}
    assert len(texts) == 4
    for a, b in itertools.pairwise(scenarios):
        assert a.steps[0].positions != b.steps[0].positions


@pytest.mark.unit
def test_the_global_random_generator_is_not_used():
    import random

    random.seed(1)
    a = gen("random-waypoint", seed=5)
    random.seed(2)
    b = gen("random-waypoint", seed=5)
    state = random.getstate()
    gen("orbit", seed=5)
    assert a == b and random.getstate() == state


@pytest.mark.unit
@pytest.mark.parametrize("model", mobility.MODELS)
@pytest.mark.parametrize("fmt", ["native", "nestednet"])
def test_cli_writes_identical_bytes_for_a_seed(tmp_path, model, fmt):
    outputs = []
    for k in range(2):
        out = tmp_path / f"{k}.json"
        result = run_cli("visibility", "generate", "--nodes", "5", "--duration", "20",
                         "--step", "5", "--range", "50", "--model", model, "--seed", "3",
                         "--format", fmt, "-o", str(out))
        assert result.exit_code == 0, result.output
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1] and outputs[0]
    result = run_cli("visibility", "generate", "--nodes", "5", "--duration", "20",
                     "--step", "5", "--range", "50", "--model", model, "--seed", "4",
                     "--format", fmt, "-o", str(tmp_path / "other.json"))
    assert result.exit_code == 0
    assert (tmp_path / "other.json").read_bytes() != outputs[0]


@pytest.mark.unit
def test_demo_12x4_is_reproduced_byte_for_byte(tmp_path):
    """The command scenarios/README.md gives for the demo scenario."""
    out = tmp_path / "demo.json"
    result = run_cli("visibility", "generate", "--nodes", "12", "--duration", "60",
                     "--step", "6", "--range", "100", "--model", "random-waypoint",
                     "--seed", "7", "--iphys", "4", "--name", "demo-12x4", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == (SCENARIOS / "demo-12x4.json").read_bytes()


@pytest.mark.unit
def test_nestednet_example_is_reproduced_byte_for_byte(tmp_path):
    out = tmp_path / "example.json"
    result = run_cli("visibility", "generate", "--nodes", "5", "--duration", "30",
                     "--step", "10", "--range", "60", "--model", "orbit", "--seed", "3",
                     "--format", "nestednet", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == (SCENARIOS / "nestednet-format-example.json").read_bytes()


# -- what the models produce ----------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize("model", mobility.MODELS)
def test_visibility_is_the_distance_rule_on_the_written_positions(model):
    s = gen(model, seed=2)
    assert s.range == 40 and s.has_positions
    for step in s.steps:
        assert set(step.positions) == set(s.node_names)
        assert step.visible == brute_force_visibility(step.positions, 40.0)
        for p in step.positions.values():
            assert all(round(c, 2) == c for c in p)  # centimetres, before visibility
    assert any(step.visible for step in s.steps)
    assert any(len(step.visible) < len(s.nodes) * (len(s.nodes) - 1) // 2 for step in s.steps)


@pytest.mark.unit
@settings(max_examples=40, deadline=None)
@given(model=st.sampled_from(mobility.MODELS), seed=st.integers(0, 2**32),
       nodes=st.integers(1, 10), range_=st.floats(1, 500), step=st.floats(0.5, 10))
def test_generated_scenarios_reload_to_the_same_visibility(model, seed, nodes, range_, step):
    s = mobility.generate(nodes=nodes, duration=20, step=step, range_=range_, model=model,
                          seed=seed)
    for k in s.steps:
        assert k.visible == brute_force_visibility(k.positions, range_)
    again = parse_scenario(json.loads(dumps_scenario(s)), "g.json")
    assert again == s


@pytest.mark.unit
def test_step_times():
    assert mobility.step_times(60, 6) == [0, 6, 12, 18, 24, 30, 36, 42, 48, 54]
    assert mobility.step_times(10, 3) == [0, 3, 6, 9]
    assert mobility.step_times(10, 10) == [0]
    assert mobility.step_times(1, 0.1) == [round(k * 0.1, 6) for k in range(10)]
    s = gen("static", duration=10, step=4)
    assert [k.time for k in s.steps] == [0, 4, 8] and s.duration == 10


@pytest.mark.unit
def test_static_nodes_do_not_move_and_stay_in_the_box():
    s = gen("static", seed=4, area=200.0)
    first = s.steps[0].positions
    assert all(step.positions == first for step in s.steps)
    for x, y, z in first.values():
        assert 0 <= x <= 200 and 0 <= y <= 200 and 0 <= z <= 20


@pytest.mark.unit
def test_random_waypoint_moves_within_the_box_at_bounded_speed():
    area, duration, step = 300.0, 60.0, 2.0
    s = gen("random-waypoint", seed=9, area=area, duration=duration, step=step)
    fastest = area / duration
    moved = 0
    for before, after in itertools.pairwise(s.steps):
        for n in s.node_names:
            p, q = before.positions[n], after.positions[n]
            assert all(0 <= c <= area for c in q[:2]) and 0 <= q[2] <= area / 10
            assert math.dist(p, q) <= fastest * step + 0.05  # rounding to centimetres
            moved += p != q
    assert moved > 0


@pytest.mark.unit
def test_orbit_nodes_keep_their_radius_and_altitude():
    area = 400.0
    s = gen("orbit", seed=6, area=area)
    centre = area / 2
    for n in s.node_names:
        radii = {round(math.hypot(k.positions[n][0] - centre, k.positions[n][1] - centre))
                 for k in s.steps}
        heights = {k.positions[n][2] for k in s.steps}
        assert len(heights) == 1
        assert max(radii) - min(radii) <= 1
        assert 0.1 * area - 1 <= min(radii) and max(radii) <= 0.5 * area + 1
    assert s.steps[0].positions != s.steps[-1].positions


@pytest.mark.unit
def test_default_area_gives_about_three_neighbours():
    for n in range(1, 40):
        assert mobility.default_area(n, 50) >= 50  # never smaller than the range
    assert mobility.default_area(1, 100) == mobility.default_area(2, 100)
    assert mobility.default_area(13, 100) == pytest.approx(100 * math.sqrt(math.pi * 4))
    s = gen("static", seed=1, nodes=60, range_=100.0, duration=6, step=6)
    degree = 2 * len(s.steps[0].visible) / 60
    assert 1 <= degree <= 6


@pytest.mark.unit
def test_names_ids_and_iphys():
    s = gen("orbit", seed=0, nodes=3, iphys=5)
    assert s.node_names == ("n1", "n2", "n3")
    assert [n.node_id for n in s.nodes] == [1, 2, 3]
    assert {n.iphys for n in s.nodes} == {5}
    assert s.name == "orbit-3x5-seed0"
    assert gen("orbit", name="mine").name == "mine"


# -- argument validation --------------------------------------------------------------

BAD_ARGUMENTS = [
    (["--nodes", "0"], "Invalid value for '--nodes'"),
    (["--nodes", "3", "--duration", "0"], "--duration must be > 0"),
    (["--nodes", "3", "--duration", "-5"], "--duration must be > 0"),
    (["--nodes", "3", "--duration", "nan"], "--duration must be > 0"),
    (["--nodes", "3", "--step", "0"], "--step must be > 0"),
    (["--nodes", "3", "--step", "inf"], "--step must be > 0"),
    (["--nodes", "3", "--step", "61"], "--step (61) is longer than --duration (60)"),
    (["--nodes", "3", "--range", "-1"], "--range must be > 0"),
    (["--nodes", "3", "--range", "0"], "--range must be > 0"),
    (["--nodes", "3", "--range", "1.7e308"], "is too large for 3 nodes: give --area"),
    (["--nodes", "3", "--model", "walk"], "Invalid value for '--model'"),
    (["--nodes", "3", "--iphys", "0"], "Invalid value for '--iphys'"),
    (["--nodes", "3", "--iphys", "65"], "Invalid value for '--iphys'"),
    (["--nodes", "3", "--area", "0"], "--area must be > 0"),
    (["--nodes", "3", "--area", "nan"], "--area must be > 0"),
    (["--nodes", "3", "--format", "yaml"], "Invalid value for '--format'"),
    (["--nodes", "3", "--duration", "100001", "--step", "1"], "more than 100000 steps"),
    (["--nodes", "3", "--duration", "1e300", "--step", "1e-300"], "more than 100000 steps"),
    (["--nodes", "x"], "Invalid value for '--nodes'"),
    ([], "give --nodes N"),
]


@pytest.mark.unit
@pytest.mark.parametrize(("args", "expected"), BAD_ARGUMENTS,
                         ids=[" ".join(a) or "none" for a, _ in BAD_ARGUMENTS])
def test_bad_arguments_exit_2_and_write_nothing(tmp_path, args, expected):
    out = tmp_path / "out.json"
    result = run_cli("visibility", "generate", *args, "-o", str(out))
    assert result.exit_code == 2, result.output
    assert expected in result.stderr
    assert "Traceback" not in result.output
    assert not out.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.unit
def test_missing_output_option_exits_2():
    result = run_cli("visibility", "generate", "--nodes", "3")
    assert result.exit_code == 2 and "Missing option '-o'" in result.stderr


@pytest.mark.unit
def test_generate_function_validates_its_arguments():
    with pytest.raises(UsageError, match="unknown model 'walk'"):
        mobility.generate(nodes=3, duration=10, step=1, range_=5, model="walk")
    with pytest.raises(UsageError, match=r"--iphys must be 1\.\.64"):
        mobility.generate(nodes=3, duration=10, step=1, range_=5, model="orbit", iphys=0)
    with pytest.raises(UsageError, match="--nodes must be at least 1"):
        mobility.generate(nodes=0, duration=10, step=1, range_=5, model="orbit")


@pytest.mark.unit
def test_unwritable_output_exits_2(tmp_path):
    out = tmp_path / "missing-dir" / "x.json"
    result = run_cli("visibility", "generate", "--nodes", "3", "-o", str(out))
    assert result.exit_code == 2 and "cannot write" in result.stderr


# -- both output formats re-load ------------------------------------------------------


@pytest.mark.unit
@pytest.mark.parametrize("model", mobility.MODELS)
def test_generate_native_and_nestednet_files_reload(tmp_path, model):
    native, nested = tmp_path / "native.json", tmp_path / "nested.json"
    common = ["--nodes", "6", "--duration", "24", "--step", "4", "--range", "70",
              "--model", model, "--seed", "21", "--iphys", "3"]
    result = run_cli("visibility", "generate", *common, "-o", str(native), "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["file"] == str(native) and summary["format"] == "native"
    assert len(summary["steps"]) == 6 and len(summary["nodes"]) == 6
    result = run_cli("visibility", "generate", *common, "--format", "nestednet",
                     "-o", str(nested))
    assert result.exit_code == 0, result.output

    expected = mobility.generate(nodes=6, duration=24, step=4, range_=70, model=model,
                                 seed=21, iphys=3)
    assert load_scenario(native) == expected
    assert "MobilecomScnDef" in json.loads(nested.read_text())
    again = load_scenario(nested, nestednet_iphys=3)
    assert again.source_format == "nestednet"
    assert (again.nodes, again.duration, again.steps) == (expected.nodes, expected.duration,
                                                          expected.steps)
    for path in (native, nested):
        check = run_cli("visibility", "check", str(path), "--iphys", "3", "--json")
        assert check.exit_code == 0, check.output
        assert [s["visible_pairs"] for s in json.loads(check.stdout)["steps"]] == [
            len(s.visible) for s in expected.steps]
