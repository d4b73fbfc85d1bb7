"""Real orbits (issue #26): TLE reading, Walker shells, ground stations, propagation.

Positions and elevations are checked against values computed once, independently of
our code, and stored here: skyfield's own ``EarthSatellite`` (its own SGP4 call) with
``.frame_xyz(itrs)`` for ITRS positions and ``(sat - wgs84.latlon(...)).at(t).altaz()``
for elevations (skyfield 1.55, sgp4 2.27, built-in timescale). Our path is different:
sgp4's SatrecArray, skyfield's TEME_to_ITRF (GMST 1982, no polar motion) and a fixed
ITRS-to-horizon rotation.
"""

from __future__ import annotations

import json
import math
import shlex
import socket
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from sgp4.io import compute_checksum, fix_checksum

from nestednet.cli import main
from nestednet.errors import UsageError
from nestednet.model.line_of_sight import segment_clears_sphere
from nestednet.model.link_resolver import LinkResolver
from nestednet.model.scenario_file import load_scenario, parse_scenario
from nestednet.model.scenario_native import to_native
from nestednet.orbits import constellation, propagate
from nestednet.orbits.stations import GroundStation, parse_ground_stations
from nestednet.orbits.tle import node_name, parse_tle_text, read_tle_file
from nestednet.orbits.walker import grid_neighbours, parse_walker, shell_tles

pytestmark = pytest.mark.unit

ISS = ("1 25544U 98067A   08264.51782528 -.00002182  00000-0 -11606-4 0  2927",
       "2 25544  51.6416 247.4627 0006703 130.5360 325.0288 15.72125391563537")
W1 = ("1 00001U          26330.00000000  .00000000  00000-0  00000+0 0    07",
      "2 00001  53.0000   0.0000 0000001   0.0000   0.0000 15.05491974    07")
W16 = ("1 00016U          26330.00000000  .00000000  00000-0  00000+0 0    03",
       "2 00016  53.0000  60.0000 0000001   0.0000 136.3636 15.05491974    07")
START_2008 = datetime(2008, 9, 20, 12, 0, tzinfo=UTC)
START_2026 = datetime(2026, 11, 26, 0, 0, tzinfo=UTC)
OFFSETS = [0.0, 600.0, 3000.0]
EXPECTED_ITRS_KM = {
    "ISS": [[2906.044, 6054.9, -509.898], [229.84, 6050.992, 2933.14],
            [-3095.95, -5884.15, -1045.287]],
    "w1p1s1": [[2928.467, -6279.742, -9.54], [4450.902, -4094.87, 3372.192],
               [-2063.391, 6566.072, -807.346]],
    "w1p2s5": [[-4750.695, 3294.482, 3810.269], [-6777.696, 1320.622, 566.784],
               [4650.216, -4016.36, -3208.42]],
}
BERLIN = GroundStation("GSBerlin", 52.52, 13.405, 34.0, 25.0)
# Elevation (degrees) over Berlin of the 6x11 shell 550:53:6:11:1 with epoch and start
# 2026-11-26T00:00Z, every 300 s for an hour; satellites not listed stay below 0°.
EXPECTED_ELEVATION_DEG = {
    "w1p1s1": [-38.787, -28.692, -17.9, -5.113, 18.739, 29.195, -2.225, -15.766, -26.767,
               -36.944, -46.756, -56.377],
    "w1p1s2": [-20.023, -7.825, 11.667, 48.067, 1.09, -13.518, -24.786, -35.069, -44.932,
               -54.58, -64.107, -73.562],
    "w1p1s3": [6.472, 82.298, 4.959, -11.171, -22.773, -33.178, -43.099, -52.78, -62.325,
               -71.791, -81.21, -89.372],
    "w1p1s4": [9.718, -8.697, -20.718, -31.269, -41.257, -50.973, -60.54, -70.018, -79.444,
               -88.838, -81.751, -72.333],
    "w1p1s8": [-72.353, -81.777, -88.818, -79.413, -69.984, -60.506, -50.94, -41.224,
               -31.236, -20.685, -8.657, 9.795],
    "w1p1s9": [-89.391, -81.185, -71.762, -62.294, -52.747, -43.065, -33.142, -22.734,
               -11.126, 5.04, 79.94, 6.386],
    "w1p1s10": [-73.541, -64.082, -54.552, -44.901, -35.034, -24.747, -13.47, 1.169, 48.488,
                11.519, -7.87, -20.049],
    "w1p1s11": [-56.357, -46.732, -36.915, -26.731, -15.721, -2.153, 29.55, 18.507, -5.174,
                -17.937, -28.72, -38.807],
    "w1p2s1": [-19.77, -8.881, 2.955, 4.739, -6.755, -17.899, -28.153, -37.975, -47.562,
               -56.987, -66.243, -75.159],
    "w1p2s2": [-0.362, 4.871, -4.736, -15.84, -26.124, -35.957, -45.543, -54.963, -64.215,
               -73.16, -80.98, -82.434],
    "w1p2s7": [-71.444, -78.506, -80.193, -74.599, -66.402, -57.463, -48.184, -38.637,
               -28.754, -18.272, -6.363, 9.32],
    "w1p2s8": [-80.001, -75.785, -68.046, -59.297, -50.133, -40.687, -30.93, -20.673, -9.324,
               4.811, 11.74, -3.121],
    "w1p2s9": [-69.596, -61.088, -52.059, -42.719, -33.083, -23.019, -12.105, 0.845, 11.431,
               -0.644, -13.292, -24.129],
    "w1p2s10": [-53.954, -44.731, -35.214, -25.321, -14.754, -2.688, 9.371, 1.668, -11.086,
                -22.054, -32.213, -41.999],
    "w1p2s11": [-37.321, -27.585, -17.302, -5.901, 6.315, 3.573, -8.894, -19.974, -30.185,
                -39.99, -49.574, -59.003],
    "w1p6s1": [-42.644, -32.769, -22.47, -11.184, 3.047, 17.291, 0.66, -12.935, -23.987,
               -34.14, -43.863, -53.308],
    "w1p6s2": [-24.563, -13.501, 0.061, 18.95, 4.801, -10.237, -21.703, -32.029, -41.856,
               -51.39, -60.676, -69.614],
    "w1p6s3": [-2.832, 17.256, 9.765, -7.38, -19.374, -29.901, -39.837, -49.454, -58.834,
               -67.928, -76.384, -82.068],
    "w1p6s4": [15.944, -4.299, -16.992, -27.754, -37.807, -47.505, -56.965, -66.183,
               -74.941, -81.86, -80.838, -73.282],
    "w1p6s9": [-83.632, -82.841, -74.49, -65.305, -55.91, -46.374, -36.664, -26.662,
               -16.062, -4.002, 9.917, 4.541],
    "w1p6s10": [-76.454, -67.284, -57.89, -48.36, -38.669, -28.71, -18.217, -6.414, 8.464,
                8.81, -6.17, -18.003],
    "w1p6s11": [-59.858, -50.336, -40.662, -30.747, -20.354, -8.818, 5.971, 13.336, -2.938,
                -15.514, -26.236, -36.233],
}


def tle_text(*objects: tuple[str | None, tuple[str, str]]) -> str:
    out = []
    for name, (l1, l2) in objects:
        out += ([name] if name is not None else []) + [l1, l2]
    return "\n".join(out) + "\n"


def run_cli(*args: str):
    return CliRunner().invoke(main, [str(a) for a in args])


def walker_66(**kw) -> constellation.Scenario:
    shell = parse_walker("550:53:6:11:1")
    sats = shell_tles(shell, 1, START_2026, 1)
    options = constellation.Options(**({"start": START_2026, "duration": 3600.0,
                                         "step": 300.0} | kw))
    return constellation.build(constellation.Constellation(
        satellites=sats, stations=[BERLIN], shells=[shell]), options)


# -- positions and elevations against stored, independent values ----------------------


def test_positions_agree_with_independent_sgp4_itrs_within_1_km():
    objects = parse_tle_text(tle_text(("ISS", ISS), ("w1p1s1", W1), ("w1p2s5", W16)), "t")
    for tle, start in zip(objects, (START_2008, START_2026, START_2026), strict=True):
        ours = propagate.itrs_positions_km([tle], start, OFFSETS)[0]
        error = np.linalg.norm(ours - np.array(EXPECTED_ITRS_KM[tle.name]), axis=1)
        assert error.max() < 1.0, (tle.name, error)


def test_station_elevations_and_visibility_agree_except_within_0_2_deg_of_the_mask():
    shell = parse_walker("550:53:6:11:1")
    sats = shell_tles(shell, 1, START_2026, 1)
    offsets = [300.0 * k for k in range(12)]
    positions = propagate.itrs_positions_km(sats, START_2026, offsets)
    elevation = propagate.elevations_deg(BERLIN, positions, START_2026)
    for i, sat in enumerate(sats):
        expected = EXPECTED_ELEVATION_DEG.get(sat.name)
        if expected is None:
            assert elevation[i].max() < 0.2, sat.name
        else:
            assert np.abs(elevation[i] - expected).max() < 0.05, sat.name
    scenario = walker_66()
    checked = 0
    for k, step in enumerate(scenario.steps):
        seen = {a if b == "GSBerlin" else b for a, b in step.visible if "GSBerlin" in (a, b)}
        for name, values in EXPECTED_ELEVATION_DEG.items():
            if abs(values[k] - 25.0) <= 0.2:
                continue
            assert (name in seen) == (values[k] > 25.0), (k, name, values[k])
            checked += 1
        assert seen <= set(EXPECTED_ELEVATION_DEG)
    assert checked > 200
    assert sum(len(step.visible) for step in scenario.steps) > 0


def test_nothing_is_downloaded_or_connected(monkeypatch, tmp_path):
    def refuse(*args, **kwargs):
        raise AssertionError("network access attempted")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.chdir(tmp_path)
    propagate.timescale.cache_clear()
    result = run_cli("visibility", "generate", "--walker", "550:53:2:3:1", "--start",
                     "2026-11-26T00:00:00Z", "--duration", "60", "--step", "30", "-o",
                     tmp_path / "s.json")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"]


# -- TLE files ------------------------------------------------------------------------


def test_tle_two_and_three_line_objects_names_and_defaults():
    text = tle_text(("0 ISS (ZARYA)", ISS), (None, W1), ("(***)", W16))
    objects = parse_tle_text(text.replace(W1[1], W1[1] + "\n\n"), "f.tle")
    assert [o.name for o in objects] == ["ISS-ZARYA", "s1", "s16"]
    assert [o.line_number for o in objects] == [1, 4, 8]
    assert node_name("STARLINK-1007", 44713) == "STARLINK-1007"
    assert node_name("2024 object (a)", 5) == "s2024-object-a"
    assert node_name("***", 99) == "s99"
    assert len(node_name("X" * 40, 1)) == 32


@pytest.mark.parametrize(("mutate", "where", "words"), [
    (lambda l1, l2: (l1[:68] + str((int(l1[68]) + 1) % 10), l2), ":2:", "checksum"),
    (lambda l1, l2: (l1, fix_checksum(l2[:20] + "X" + l2[21:])), ":3:", "format"),
    (lambda l1, l2: (l1[:60], l2), ":2:", "columns"),
    (lambda l1, l2: (l1, fix_checksum(l2[:2] + "25545" + l2[7:])), ":3:", "do not match"),
    (lambda l1, l2: (l1, "3" + l2[1:]), ":3:", "line 2"),
])
def test_bad_tle_lines_name_file_line_and_object(mutate, where, words):
    l1, l2 = mutate(*ISS)
    with pytest.raises(UsageError) as exc:
        parse_tle_text(f"ISS\n{l1}\n{l2}\n", "cat.tle")
    message = str(exc.value)
    assert message.startswith("cat.tle" + where) and "'ISS'" in message, message
    assert words in message, message


def test_tle_missing_line_and_duplicate_names_are_errors():
    with pytest.raises(UsageError, match=r"f:5: object 'B': line 2 is missing"):
        parse_tle_text(f"A\n{ISS[0]}\n{ISS[1]}\nB\n{W1[0]}\n", "f")
    with pytest.raises(UsageError, match=r"f:4: object 'SAT-A': name given twice "
                                         r"\(also line 1\)"):
        parse_tle_text(tle_text(("SAT A", ISS), ("SAT-A", W1)), "f")


def test_bad_tle_via_cli_exits_2_and_writes_nothing(tmp_path):
    bad = tmp_path / "bad.tle"
    bad.write_text(f"ISS\n{ISS[0][:68]}0\n{ISS[1]}\n")
    out = tmp_path / "s.json"
    result = run_cli("visibility", "generate", "--tle", bad, "--start",
                     "2008-09-20T12:00:00Z", "--duration", "60", "--step", "30", "-o", out)
    assert result.exit_code == 2 and f"{bad}:2: object 'ISS': checksum" in result.output
    assert not out.exists()


def test_sgp4_failure_names_satellite_step_and_code_and_writes_nothing(tmp_path):
    decaying = fix_checksum(ISS[0][:53] + " 99999-1" + ISS[0][61:])
    path = tmp_path / "decay.tle"
    path.write_text(f"DOOMED\n{decaying}\n{ISS[1]}\n")
    out = tmp_path / "s.json"
    result = run_cli("visibility", "generate", "--tle", path, "--start",
                     "2008-09-20T12:00:00Z", "--duration", str(3 * 86400), "--step", "3600",
                     "-o", out)
    assert result.exit_code == 2, result.output
    assert "satellite 'DOOMED': SGP4 error 6 at step" in result.output
    assert "decayed" in result.output and not out.exists()


@pytest.mark.parametrize("start", ["2026-11-26T00:00:00", "2026-11-26", "yesterday"])
def test_start_time_needs_a_zone(tmp_path, start):
    result = run_cli("visibility", "generate", "--walker", "550:53:2:3:1", "--start", start,
                     "--duration", "60", "--step", "30", "-o", tmp_path / "s.json")
    assert result.exit_code == 2 and "--start" in result.output
    if "T" in start:
        assert "no zone" in result.output


# -- Walker shells --------------------------------------------------------------------


def test_walker_elements_follow_the_walker_delta_rule():
    shell = parse_walker("550:53:6:11:1")
    sats = shell_tles(shell, 1, START_2026, 1)
    assert len(sats) == 66 and sats[15].name == "w1p2s5"
    for k, sat in enumerate(sats):
        plane, slot = divmod(k, 11)
        fields = sat.line2.split()
        assert float(fields[2]) == 53.0 and float(fields[3]) == pytest.approx(60.0 * plane)
        anomaly = (360.0 * (slot / 11 + plane / 66)) % 360
        assert float(fields[6]) == pytest.approx(anomaly, abs=1e-4)
        # mean motion from Kepler with WGS72 (a = 6378.135 + 550 km), in rev/day
        n = math.sqrt(398600.8 / 6928.135**3) * 86400 / (2 * math.pi)
        assert float(fields[7]) == pytest.approx(n, abs=1e-7)
        for line in (sat.line1, sat.line2):
            assert int(line[68]) == compute_checksum(line) and len(line) == 69


def test_write_tle_loads_back_with_the_same_orbits(tmp_path):
    tle = tmp_path / "w.tle"
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    common = ["--start", "2026-11-26T00:00:00Z", "--duration", "120", "--step", "60"]
    a = run_cli("visibility", "generate", "--walker", "550:53:3:4:1", "--walker",
                "1100:70:2:2:0", "--write-tle", tle, *common, "-o", first)
    assert a.exit_code == 0, a.output
    loaded = read_tle_file(tle)
    assert [o.name for o in loaded][:2] == ["w1p1s1", "w1p1s2"] and len(loaded) == 16
    b = run_cli("visibility", "generate", "--tle", tle, *common, "-o", second)
    assert b.exit_code == 0, b.output
    da, db = json.loads(first.read_text()), json.loads(second.read_text())
    assert [s["positions"] for s in da["steps"]] == [s["positions"] for s in db["steps"]]


def test_starlink_shell_1_generates_with_its_counts_and_altitude():
    shell = parse_walker("550:53:72:22:1")
    sats = shell_tles(shell, 1, START_2026, 1)
    assert len(sats) == 1584 and len({s.name for s in sats}) == 1584
    assert len(grid_neighbours([shell])) == 2 * 1584
    scenario = constellation.build(
        constellation.Constellation(satellites=sats, shells=[shell]),
        constellation.Options(start=START_2026, duration=10.0, step=10.0))
    radii = np.linalg.norm(np.array(list(scenario.steps[0].positions.values())), axis=1)
    assert abs(radii.mean() - 6378.135 - 550) < 5 and np.ptp(radii) < 30
    degree = {}
    for a, b in scenario.steps[0].visible:
        degree[a] = degree.get(a, 0) + 1
        degree[b] = degree.get(b, 0) + 1
    assert max(degree.values()) <= 4 and sum(degree.values()) > 3 * 1584


@pytest.mark.parametrize(("text", "words"), [
    ("550:53:6:11", "5 parts"), ("550:53:6:11:6", "PHASE must be 0..PLANES-1"),
    ("50:53:6:11:1", "altitude"), ("550:200:6:11:1", "inclination"),
    ("550:53:0:11:0", "PLANES"), ("550:53:x:11:1", "whole numbers"),
])
def test_bad_walker_is_refused(text, words):
    with pytest.raises(UsageError, match=words):
        parse_walker(text)
    result = run_cli("visibility", "generate", "--walker", text, "--start",
                     "2026-11-26T00:00:00Z", "-o", "/nonexistent/s.json")
    assert result.exit_code == 2 and words in result.output


# -- ground stations ------------------------------------------------------------------


@pytest.mark.parametrize(("station", "words"), [
    ({"name": "A", "lat": 1, "lon": 2, "height": 3}, "unknown field"),
    ({"name": "A", "lat": 1, "lon": 2, "min_elevation_deg": 91}, "mask is 0..90"),
    ({"name": "A", "lat": 1, "lon": 2, "min_elevation_deg": -1}, "mask is 0..90"),
    ({"name": "A", "lat": 95, "lon": 2}, "latitude"),
    ({"name": "A", "lat": 1, "lon": 2, "policy": "best"}, "policy"),
    ({"name": "1A", "lat": 1, "lon": 2}, "bad node name"),
])
def test_bad_ground_stations_are_located(station, words):
    with pytest.raises(UsageError) as exc:
        parse_ground_stations({"ground_stations": [station]}, "gs.json")
    assert str(exc.value).startswith("gs.json: ground_stations[0]") and words in str(exc.value)


def test_ground_station_defaults_and_duplicates(tmp_path):
    (gs,) = parse_ground_stations({"ground_stations": [{"name": "A", "lat": 1, "lon": 2}]},
                                  "f")
    assert (gs.min_elevation_deg, gs.alt_m, gs.policy) == (25.0, 0.0, "all")
    with pytest.raises(UsageError, match=r"ground_stations\[1\].name: duplicate"):
        parse_ground_stations({"ground_stations": [{"name": "A", "lat": 1, "lon": 2},
                                                   {"name": "A", "lat": 3, "lon": 4}]}, "f")
    path = tmp_path / "gs.json"
    path.write_text(json.dumps({"ground_stations": [
        {"name": "A", "lat": 1, "lon": 2, "min_elevation_deg": 90.5}]}))
    result = run_cli("visibility", "generate", "--walker", "550:53:2:3:1", "--start",
                     "2026-11-26T00:00:00Z", "--ground-stations", path, "-o",
                     tmp_path / "s.json")
    assert result.exit_code == 2 and "min_elevation_deg" in result.output


@pytest.mark.parametrize("policy", ["nearest", "highest"])
def test_single_link_policies_keep_the_nearest_or_highest_visible_satellite(policy):
    station = GroundStation("GSBerlin", 52.52, 13.405, 34.0, 10.0, policy)
    shell = parse_walker("550:53:6:11:1")
    sats = shell_tles(shell, 1, START_2026, 1)
    scenario = constellation.build(
        constellation.Constellation(satellites=sats, stations=[station], shells=[shell]),
        constellation.Options(start=START_2026, duration=3600.0, step=300.0, isl="none"))
    chosen = []
    for k, step in enumerate(scenario.steps):
        assert len(step.visible) <= 1
        above = {n: v[k] for n, v in EXPECTED_ELEVATION_DEG.items() if v[k] >= 10.2}
        if not above:
            continue
        ((a, b),) = step.visible
        sat = a if b == "GSBerlin" else b
        if policy == "highest":
            assert sat == max(above, key=above.get)
        else:  # the nearest is the highest for satellites of one shell
            assert sat == max(above, key=above.get)
        chosen.append(sat)
    assert len(set(chosen)) >= 3  # handovers happened


# -- inter-satellite visibility and Earth occlusion ------------------------------------


def test_segment_clearance_and_los_isls_respect_the_earth():
    r = 6378.137 + 550
    assert not segment_clears_sphere((r, 0, 0), (-r, 0, 0), 6458.137)
    c30, s30 = math.cos(math.radians(30)), math.sin(math.radians(30))
    # 30 degrees apart, the chord's midpoint is r*cos(15°) = 6692 km from the centre
    assert segment_clears_sphere((r, 0, 0), (r * c30, r * s30, 0), 6458.137)
    assert not segment_clears_sphere((r, 0, 0), (r * c30, r * s30, 0), 6700.0)
    assert not segment_clears_sphere((r, 0, 0), (0, r, 0), 6458.137)  # midpoint r/sqrt2
    shell = parse_walker("550:53:6:11:1")
    sats = shell_tles(shell, 1, START_2026, 1)
    scenario = constellation.build(
        constellation.Constellation(satellites=sats, shells=[shell], only_walker=True),
        constellation.Options(start=START_2026, duration=10.0, step=10.0, isl="los",
                              isl_range_km=20000.0))
    step = scenario.steps[0]
    for a, b in step.visible:
        pa, pb = step.positions[a], step.positions[b]
        d = np.subtract(pb, pa)
        s = np.clip(-np.dot(pa, d) / np.dot(d, d), 0, 1)
        assert np.linalg.norm(np.add(pa, s * d)) > 6458.137
    # the longest chord clear of 80 km at 550 km is 2*sqrt(6928.137^2 - 6458.137^2)
    longest = 2 * math.sqrt(6928.137**2 - 6458.137**2)
    distances = [math.dist(step.positions[a], step.positions[b]) for a, b in step.visible]
    assert max(distances) < longest + 30 and len(step.visible) > 66


def test_line_of_sight_earth_occlusion_in_native_files():
    doc = {"format": "nestednet-scenario/1", "duration": 10, "length_unit": "km",
           "line_of_sight": {"range": 20000, "earth_occlusion": True},
           "nodes": [{"name": "a"}, {"name": "b"}, {"name": "c"}],
           "steps": [{"time": 0, "positions": {"a": [7000, 0, 0], "b": [-7000, 0, 0],
                                               "c": [5362.311, 4499.513, 0]}}]}
    scenario = parse_scenario(doc, "f")  # c is 40° from a: midpoint 7000*cos(20°) = 6578 km
    assert scenario.steps[0].visible == {("a", "c")}
    doc["line_of_sight"]["atmosphere_km"] = 2000
    assert parse_scenario(doc, "f").steps[0].visible == frozenset()
    del doc["length_unit"]
    with pytest.raises(UsageError, match="earth_occlusion: Earth occlusion needs"):
        parse_scenario(doc, "f")


# -- link classes ---------------------------------------------------------------------


def test_link_classes_sit_between_explicit_values_and_the_default_model(tmp_path):
    laser = {"model": "laser", "params": {"rate": "1Gbit", "range_m": 1e7}}
    radio = {"model": "fixed", "params": {"rate": "50Mbit", "delay": "7ms"}}
    default = {"model": "fixed", "params": {"rate": "1Mbit"}}
    doc = {"format": "nestednet-scenario/1", "duration": 10, "length_unit": "km",
           "frame": "ITRS", "start_time": "2026-11-26T00:00:00Z",
           "link_model": default, "link_classes": {"isl": laser, "gsl": radio},
           "nodes": [{"name": "s1", "kind": "satellite"}, {"name": "s2", "kind": "satellite"},
                     {"name": "g1", "kind": "ground"}, {"name": "g2", "kind": "ground"},
                     {"name": "x"}],
           "steps": [{"time": 0, "positions": {"s1": [7000, 0, 0], "s2": [0, 7000, 0],
                                               "g1": [6378, 0, 0], "g2": [0, 6378, 0],
                                               "x": [0, 0, 0]},
                      "visible": [["s1", "s2"], ["g1", "s1"], ["g1", "g2"], ["s2", "x"]],
                      "links": [{"from": "s2", "to": "s1", "rate": "5Mbit"}]}]}
    scenario = parse_scenario(doc, "f")
    resolver = LinkResolver(scenario)
    props, origin = resolver.resolve(0, "s1", "s2")
    assert origin == "class" and props.rate_bps == 10**9
    assert props.delay_us == round(7000 * math.sqrt(2) * 1000 / 299792458 * 1e6)
    assert resolver.resolve(0, "s2", "s1")[1] == "explicit"
    assert resolver.resolve(0, "g1", "s1")[0].delay_us == 7000
    assert resolver.resolve(0, "g1", "g2") == (resolver.resolve(0, "g2", "g1")[0], "model")
    assert resolver.resolve(0, "g1", "g2")[0].rate_bps == 10**6
    assert resolver.link_class("s2", "x") == "default"
    path = tmp_path / "s.json"
    path.write_text(json.dumps(doc))
    result = run_cli("visibility", "check", path, "--json")
    assert result.exit_code == 0, result.output
    pairs = {tuple(p["pair"]): p for p in json.loads(result.output)["steps"][0]["pairs"]}
    assert pairs[("g1", "s1")]["class"] == "gsl" and pairs[("g1", "s1")]["distance"] == 622
    assert pairs[("s1", "s2")]["s2->s1"] == {"source": "explicit", "delay_us": 0,
                                             "rate_bps": 5 * 10**6, "loss_pct": 0.0}
    assert pairs[("g1", "g2")]["class"] == "default"
    assert load_scenario(path).start_time == "2026-11-26T00:00:00Z"
    doc["start_time"] = "2026-11-26T00:00:00"
    with pytest.raises(UsageError, match=r"start_time: start time .* has no zone"):
        parse_scenario(doc, "f")


def test_shipped_showcase_is_what_the_documented_command_writes(tmp_path, monkeypatch):
    root = Path(__file__).resolve().parents[2]
    readme = (root / "scenarios" / "README.md").read_text()
    start = readme.index("nestednet visibility generate --walker 1200:53:6:11:1")
    command = readme[start:readme.index("```", start)].replace("\\\n", " ")
    args = shlex.split(command)[1:]
    out = tmp_path / "leo.json"
    args[args.index("-o") + 1] = str(out)
    monkeypatch.chdir(root)
    result = run_cli(*args)
    assert result.exit_code == 0, result.output
    shipped = root / "scenarios" / "leo-walker-66-gs4.json"
    assert out.read_bytes() == shipped.read_bytes()
    scenario = load_scenario(shipped)
    kinds = [n.kind for n in scenario.nodes]
    assert kinds.count("satellite") == 66 and kinds.count("ground") == 4
    assert len(scenario.steps) == 60 and scenario.steps[-1].time == 590
    assert set(scenario.link_classes) == {"isl", "gsl"}


# -- graph: the Earth, stations, link classes -----------------------------------------


def test_graph_draws_orbital_scenarios_on_the_globe_and_the_map(tmp_path):
    from nestednet import connectivity_plot as plot

    root = Path(__file__).resolve().parents[2] / "scenarios"
    scenario = load_scenario(root / "leo-walker-66-gs4.json")
    frames = plot.frames_from_scenario(scenario)
    assert frames[0].earth and frames[0].kinds["GSBerlin"] == "ground"
    classes = {c for f in frames for c in f.classes.values()}
    assert classes == {"isl", "gsl"}
    for extra, name in (([], "globe.png"), (["--map"], "map.png")):
        out = tmp_path / name
        result = run_cli("graph", root / "leo-walker-66-gs4.json", "--at", "300", *extra,
                         "-o", out)
        assert result.exit_code == 0, result.output
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20000
    flat = run_cli("graph", root / "small-4x2.json", "--map", "-o", tmp_path / "x.png")
    assert flat.exit_code == 2 and "--map draws orbital scenarios" in flat.output


def test_map_coordinates_are_geodetic():
    # WGS84: a point on the ellipsoid at 52.52 N, 13.405 E (computed from the formulas
    # N = a / sqrt(1 - e² sin² lat), x = N cos lat cos lon, ...), and the north pole
    a, f = 6378.137, 1 / 298.257223563
    e2 = f * (2 - f)
    lat, lon = math.radians(52.52), math.radians(13.405)
    n = a / math.sqrt(1 - e2 * math.sin(lat) ** 2)
    point = (n * math.cos(lat) * math.cos(lon), n * math.cos(lat) * math.sin(lon),
             n * (1 - e2) * math.sin(lat))
    lats, lons = propagate.geodetic_latlon([point, (0.0, 0.0, 6356.752)])
    assert lats[0] == pytest.approx(52.52, abs=1e-6) and lons[0] == pytest.approx(13.405)
    assert lats[1] == pytest.approx(90.0)


def test_a_scenario_larger_than_a_lab_is_checked_but_never_run():
    from nestednet.ca.session import RunOptions, ensure_lab

    shell = parse_walker("550:53:72:22:1")
    sats = shell_tles(shell, 1, START_2026, 1)
    scenario = constellation.build(
        constellation.Constellation(satellites=sats, shells=[shell]),
        constellation.Options(start=START_2026, duration=10.0, step=10.0))
    assert len(parse_scenario(to_native(scenario), "starlink").nodes) == 1584
    with pytest.raises(UsageError, match="1584 nodes; a lab has at most 999"):
        ensure_lab(scenario, RunOptions(lab="orbnever"))


@pytest.mark.parametrize(("args", "words"), [
    (["--walker", "550:53:1000:1000:0"], "1000000 satellites, more than the 5000"),
    (["--walker", "550:53:10:10:0", "--duration", "100000", "--step", "1"],
     "100000 steps, more than the 10000"),
    (["--walker", "550:53:50:50:0", "--duration", "5000", "--step", "1"],
     "2500 nodes x 5000 steps"),
])
def test_constellations_too_big_for_a_scenario_file_are_refused_first(tmp_path, args, words):
    result = run_cli("visibility", "generate", "--start", "2026-11-26T00:00:00Z", *args,
                     "-o", tmp_path / "s.json")
    assert result.exit_code == 2 and words in result.output, result.output
    assert not (tmp_path / "s.json").exists()


def test_a_name_in_two_tle_files_or_a_station_named_like_a_satellite_is_refused(tmp_path):
    a, b = tmp_path / "a.tle", tmp_path / "b.tle"
    a.write_text(tle_text(("SAT", ISS)))
    b.write_text(tle_text(("OTHER", W1), ("SAT", W16)))
    common = ["--start", "2026-11-26T00:00:00Z", "--duration", "60", "--step", "30",
              "--isl", "none", "-o", tmp_path / "s.json"]
    result = run_cli("visibility", "generate", "--tle", a, "--tle", b, *common)
    assert result.exit_code == 2, result.output
    assert f"{b}:4: object 'SAT': name given twice (also {a}:1)" in result.output
    gs = tmp_path / "gs.json"
    gs.write_text(json.dumps({"ground_stations": [{"name": "SAT", "lat": 0, "lon": 0}]}))
    result = run_cli("visibility", "generate", "--tle", a, "--ground-stations", gs, *common)
    assert result.exit_code == 2 and "ground station 'SAT' has the name of a satellite" \
        in result.output
