"""Link properties in scenarios: explicit per-step values, link_model declarations,
--link-model files, the length unit, first-match-wins resolution, the examples."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nestednet.cli import main
from nestednet.errors import UsageError
from nestednet.model import visibility as mobility
from nestednet.model.link_properties import IDEAL, LinkProperties
from nestednet.model.link_resolver import LinkResolver
from nestednet.model.scenario_file import (
    dumps_scenario,
    load_link_model,
    load_scenario,
    parse_scenario,
)

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
UAV = SCENARIOS / "uav-swarm-2g4.json"
LEO = SCENARIOS / "leo-laser-20.json"
WIFI = SCENARIOS / "models/wifi-2g4.json"
LASER = SCENARIOS / "models/laser-isl.json"
NESTEDNET_EXAMPLE = SCENARIOS / "nestednet-format-example.json"

BASE: dict[str, Any] = {
    "format": "nestednet-scenario/1",
    "duration": 20,
    "length_unit": "km",
    "nodes": [{"name": "a"}, {"name": "b"}, {"name": "c"}],
    "steps": [
        {"time": 0, "positions": {"a": [0, 0], "b": [3000, 0], "c": [0, 4000]},
         "visible": [["a", "b"], ["a", "c"]],
         "links": [{"between": ["a", "b"], "rate": "20Mbit", "delay": "5ms"},
                   {"from": "b", "to": "a", "rate": "5Mbit"}]},
        {"time": 10, "positions": {"a": [0, 0], "b": [6000, 0], "c": [0, 4000]},
         "visible": [["a", "b"], ["a", "c"]]},
    ],
}


def doc(**changes: Any) -> dict[str, Any]:
    out = copy.deepcopy(BASE)
    out.update(changes)
    return out


def problems_of(document: dict[str, Any]) -> str:
    with pytest.raises(UsageError) as err:
        parse_scenario(document, "f.json")
    return str(err.value)


def run_cli(*args: str):
    return CliRunner().invoke(main, list(args))


# -- the native format ----------------------------------------------------------------------


@pytest.mark.unit
def test_explicit_links_both_directions_and_one_direction_wins():
    s = parse_scenario(doc(), "f.json")
    links = s.steps[0].links
    assert links[("a", "b")] == LinkProperties(20_000_000, 5000)
    assert links[("b", "a")] == LinkProperties(5_000_000)
    assert ("a", "c") not in links and s.steps[1].links == {}
    assert s.length_unit == "km"


@pytest.mark.unit
def test_write_and_read_back_keeps_links_unit_and_model():
    d = doc(link_model={"model": "laser", "params": {"range_m": 5e6}})
    s = parse_scenario(d, "f.json")
    again = parse_scenario(json.loads(dumps_scenario(s)), "again.json")
    assert again == s
    assert again.steps[0].links == s.steps[0].links
    assert again.link_model.document() == s.link_model.document()


@pytest.mark.unit
@pytest.mark.parametrize(("change", "expected"), [
    ({"length_unit": "miles"}, 'length_unit: the length unit is "m" or "km"'),
    ({"link_model": {"model": "laser", "params": {"range_km": 5}}},
     "link_model.params: unknown field(s) ('range_km' was unexpected)"),
    ({"link_model": {"model": "free-space", "params": {"efficiency": 2}}},
     "link_model.params.efficiency: 2 is greater than the maximum of 1"),
    ({"link_model": {"model": "laser", "params": {"rate": "10 furlongs"}}},
     "link_model.params.rate: unknown unit 'furlongs'"),
    ({"link_model": {"model": "warp"}}, "link_model.model: unknown link model 'warp'"),
    ({"link_model": {"params": {}}}, "link_model: 'model' is missing"),
])
def test_bad_model_declarations_are_located(change, expected):
    assert expected in problems_of(doc(**change))


@pytest.mark.unit
@pytest.mark.parametrize(("entry", "expected"), [
    ({"between": ["a", "zz"]}, "steps[0].links[2].between: unknown node 'zz'"),
    ({"between": ["b", "c"]}, "steps[0].links[2]: b-c is not visible in this step"),
    ({"between": ["b", "a"], "delay": "1ms"}, "steps[0].links[2]: b-a given twice (also "
                                              "links[0])"),
    ({"between": ["a", "c"], "delay": "1ms", "jitter": "3ms"},
     "steps[0].links[2].jitter: jitter 3ms exceeds the delay 1ms"),
    ({"between": ["a", "c"], "rate": "20"}, "steps[0].links[2].rate: rate '20' needs a unit"),
    ({"from": "a"}, "steps[0].links[2]: a links entry has either 'between'"),
    ({"between": ["a", "c"], "from": "a", "to": "c"}, "steps[0].links[2]: a links entry"),
    ({"between": ["a", "c"], "bandwidth": "1Mbit"}, "steps[0].links[2]: unknown field(s)"),
])
def test_bad_explicit_links_are_located(entry, expected):
    d = doc()
    d["steps"][0]["links"].append(entry)
    assert expected in problems_of(d)


# -- first match wins -------------------------------------------------------------------------


@pytest.mark.unit
def test_explicit_then_model_then_ideal():
    s = parse_scenario(doc(link_model={"model": "propagation"}), "f.json")
    r = LinkResolver(s)
    assert r.resolve(0, "a", "b") == (LinkProperties(20_000_000, 5000), "explicit")
    assert r.resolve(0, "b", "a") == (LinkProperties(5_000_000), "explicit")
    # a-c: 4,000 km in km units -> 4e6 m / c = 13.3426 ms
    assert r.resolve(0, "a", "c") == (LinkProperties(delay_us=13_343), "model")
    assert r.properties_for(1, "a", "b") == LinkProperties(delay_us=20_014)  # 6,000 km
    assert r.properties_for(0, "b", "c") is None  # not visible
    plain = LinkResolver(parse_scenario(doc(), "f.json"))
    assert plain.resolve(0, "a", "c") == (IDEAL, "ideal")


@pytest.mark.unit
def test_override_replaces_the_scenario_model_and_laser_range_cuts_links():
    s = parse_scenario(doc(link_model={"model": "propagation"}), "f.json")
    r = LinkResolver(s, load_link_model(LASER))
    assert r.properties_for(0, "a", "c") == LinkProperties(1_000_000_000, 13_343)
    assert r.properties_for(1, "a", "b") is None  # 6,000 km > 5,000 km range
    assert r.properties_for(0, "a", "b") == LinkProperties(20_000_000, 5000)  # explicit wins
    steps = r.summary()
    assert steps[1]["no_link"] == 2 and steps[1]["delay_us"]["max"] == 13_343


@pytest.mark.unit
def test_a_distance_model_needs_a_length_unit_and_positions():
    no_unit = doc(link_model={"model": "propagation"})
    del no_unit["length_unit"]
    with pytest.raises(UsageError, match="states no length unit"):
        LinkResolver(parse_scenario(no_unit, "f.json"))
    no_pos = doc(link_model={"model": "propagation"})
    del no_pos["steps"][1]["positions"]
    with pytest.raises(UsageError, match=r"steps\[1\]: link model 'propagation' needs node"):
        LinkResolver(parse_scenario(no_pos, "f.json"))
    fixed = parse_scenario(doc(link_model={"model": "fixed"}) | {"steps": no_pos["steps"]},
                           "f.json")
    assert LinkResolver(fixed).properties_for(1, "a", "c") == IDEAL


@pytest.mark.unit
def test_nestednet_format_gets_a_model_with_a_length_unit():
    scenario = load_scenario(NESTEDNET_EXAMPLE, length_unit="m")
    r = LinkResolver(scenario, load_link_model(WIFI))
    a, b = sorted(scenario.steps[0].visible)[0]
    p = r.properties_for(0, a, b)
    pos = scenario.steps[0].positions
    assert p.delay_us == round(math.dist(pos[a], pos[b]) / 299_792_458 * 1e6)
    with pytest.raises(UsageError, match="states no length unit"):
        LinkResolver(load_scenario(NESTEDNET_EXAMPLE), load_link_model(WIFI))


@pytest.mark.unit
def test_length_unit_override_never_rescales_a_stated_unit(tmp_path):
    f = tmp_path / "s.json"
    f.write_text(json.dumps(doc()))
    assert load_scenario(f, length_unit="km").length_unit == "km"
    with pytest.raises(UsageError, match="the file says 'km', --length-unit says 'm'"):
        load_scenario(f, length_unit="m")


@pytest.mark.unit
def test_link_model_file_problems_are_located(tmp_path):
    f = tmp_path / "m.json"
    f.write_text(json.dumps({"model": "free-space", "params": {"frequency_hz": "2.4GHz"}}))
    with pytest.raises(UsageError, match=r"m.json: params.frequency_hz: expected a number"):
        load_link_model(f)
    f.write_text(json.dumps({"model": "fixed", "params": {"delay": "1ms", "jitter": "2ms"}}))
    with pytest.raises(UsageError, match=r"m.json: params.jitter: jitter 2ms exceeds"):
        load_link_model(f)


# -- the generator's satellite shell --------------------------------------------------------


@pytest.mark.unit
def test_shell_satellites_stay_at_their_altitude_and_orbit_at_kepler_speed():
    s = mobility.generate(nodes=6, duration=600, step=60, range_=5000, model="orbit",
                          length_unit="km", shell=mobility.Shell(550, 2))
    for step in s.steps:
        for p in step.positions.values():
            assert math.dist(p, (0, 0, 0)) == pytest.approx(6921, abs=0.02)
    # 2*pi*sqrt(r^3/mu) with r = 6921 km: 5,729.6 s per orbit -> 60 s is 3.770 degrees
    p0, p1 = s.steps[0].positions["n1"], s.steps[1].positions["n1"]
    angle = math.degrees(math.acos(sum(x * y for x, y in zip(p0, p1, strict=True))
                                   / 6921**2))
    assert angle == pytest.approx(3.770, abs=0.01)


@pytest.mark.unit
def test_shell_refuses_a_range_through_the_earth():
    # at 550 km the longest chord above 80 km: 2*sqrt(6921^2 - 6451^2) = 5,014 km
    assert mobility.longest_clear_chord(6921, 6451) == pytest.approx(5014, abs=1)
    with pytest.raises(UsageError, match="longest line of sight above 80 km is 5014 km"):
        mobility.generate(nodes=4, duration=60, step=60, range_=6000, model="orbit",
                          length_unit="km", shell=mobility.Shell(550))
    with pytest.raises(UsageError, match="needs --model orbit and --length-unit"):
        mobility.generate(nodes=4, duration=60, step=60, range_=5000, model="orbit",
                          shell=mobility.Shell(550))


# -- the examples and `visibility check` ----------------------------------------------------

UAV_COMMAND = ("visibility", "generate", "--nodes", "12", "--duration", "60", "--step", "6",
               "--range", "800", "--model", "random-waypoint", "--seed", "5", "--iphys", "4",
               "--length-unit", "m", "--link-model", str(WIFI), "--name", "uav-swarm-2g4")
LEO_COMMAND = ("visibility", "generate", "--nodes", "20", "--duration", "600", "--step", "60",
               "--range", "5000", "--model", "orbit", "--altitude", "550", "--planes", "2",
               "--seed", "1", "--iphys", "4", "--length-unit", "km", "--link-model", str(LASER),
               "--name", "leo-laser-20")


@pytest.mark.unit
@pytest.mark.parametrize(("command", "example"), [(UAV_COMMAND, UAV), (LEO_COMMAND, LEO)])
def test_examples_are_reproduced_byte_for_byte(tmp_path, command, example):
    """The commands scenarios/README.md gives for the link-model examples."""
    out = tmp_path / "out.json"
    result = run_cli(*command, "-o", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == example.read_bytes()


@pytest.mark.unit
def test_leo_example_has_ms_scale_laser_delays():
    r = LinkResolver(load_scenario(LEO))
    for step in r.summary():
        assert step["no_link"] == 0 and step["unshaped"] == 0
        assert 1_000 < step["delay_us"]["min"] <= step["delay_us"]["max"] <= 16_679  # 5,000 km
        assert step["rate_bps"] == {"min": 10**9, "median": 10**9, "max": 10**9}


@pytest.mark.unit
def test_uav_example_has_varied_radio_links():
    r = LinkResolver(load_scenario(UAV))
    rates = [s["rate_bps"] for s in r.summary() if s["rate_bps"]]
    assert min(x["min"] for x in rates) < 35e6 and max(x["max"] for x in rates) == 54e6
    assert all(s["max_loss_pct"] < 10 for s in r.summary())


@pytest.mark.unit
def test_check_prints_link_properties_per_step():
    result = run_cli("visibility", "check", str(LEO))
    assert result.exit_code == 0, result.output
    assert "link model: laser" in result.output
    assert "link properties per step (one-way)" in result.output
    data = json.loads(run_cli("visibility", "check", str(LEO), "--json").output)
    assert data["length_unit"] == "km" and data["link_model"]["model"] == "laser"
    assert data["steps"][0]["links"]["rate_bps"]["max"] == 10**9


@pytest.mark.unit
def test_check_with_an_override_and_without_unit_exits_2():
    result = run_cli("visibility", "check", str(NESTEDNET_EXAMPLE), "--link-model", str(WIFI))
    assert result.exit_code == 2 and "states no length unit" in result.output
    result = run_cli("visibility", "check", str(NESTEDNET_EXAMPLE), "--link-model", str(WIFI),
                     "--length-unit", "m", "--json")
    assert result.exit_code == 0
    assert json.loads(result.output)["link_model"]["model"] == "free-space"


@pytest.mark.unit
def test_check_of_an_unshaped_file_prints_no_link_table():
    result = run_cli("visibility", "check", str(SCENARIOS / "small-4x2.json"))
    assert result.exit_code == 0 and "link properties" not in result.output


# -- graph --label ------------------------------------------------------------------------


@pytest.mark.unit
def test_pair_labels_show_both_directions_when_they_differ():
    from nestednet import connectivity_plot as plot

    s = parse_scenario(doc(link_model={"model": "propagation"}), "f.json")
    r = LinkResolver(s)
    delay = plot.pair_labels(r, 0, "delay")
    assert delay[("a", "b")] == plot.PairLabel(5.0, "5/0")  # a->b explicit 5 ms, b->a 0
    assert delay[("a", "c")] == plot.PairLabel(13.343, "13.3")
    rate = plot.pair_labels(r, 0, "rate")
    assert rate[("a", "b")] == plot.PairLabel(20.0, "20/5")
    assert rate[("a", "c")] == plot.PairLabel(None, "-")  # not limited
    frames = plot.frames_from_scenario(s, resolver=r, label="delay")
    assert plot.value_range(frames) == (5.0, 20.014)  # step 1: a-b 6,000 km


@pytest.mark.unit
def test_graph_label_cli(tmp_path):
    out = tmp_path / "leo.png"
    result = run_cli("graph", str(LEO), "--label", "delay", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    result = run_cli("graph", str(NESTEDNET_EXAMPLE), "--label", "rate", "--link-model",
                     str(WIFI), "-o", str(tmp_path / "x.png"))
    assert result.exit_code == 2 and "states no length unit" in result.output


@pytest.mark.unit
def test_shipped_scenario_schema_refers_to_the_link_model_schema():
    """Editors follow the $ref; the parser substitutes the registry-built schema for it."""
    from urllib.parse import urljoin

    from nestednet.model import link_models
    from nestednet.model.scenario import load_schema
    from nestednet.model.scenario_native import schema

    shipped = load_schema("scenario.schema.json")
    ref = shipped["properties"]["link_model"]["$ref"]
    assert urljoin(shipped["$id"], ref) == link_models.SCHEMA_ID
    assert schema()["properties"]["link_model"]["allOf"] == link_models.schema()["allOf"]
