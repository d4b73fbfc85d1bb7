"""`nestednet report` (nestednet.report) on a hand-written events file."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from nestednet.cli import main
from nestednet.model.events import read_events
from nestednet.report import series

pytestmark = pytest.mark.unit


def line(kind: str, t: float, **fields: object) -> str:
    return json.dumps({"event": kind, "scenario_time": t} | fields)


EVENTS = [
    line("step", 0, step=0, nodes=["a", "b", "c"], visible=[["a", "b"], ["b", "c"]]),
    line("link_up", 0.1, nodes=["a", "b"], iphys=[1, 1],
         properties={"a_to_b": {"rate_bps": 20e6}, "b_to_a": {"rate_bps": 20e6}}),
    line("link_up", 0.2, nodes=["b", "c"], iphys=[2, 1]),
    line("route", 1.2, nodes=["a"], op="add", dst="10.0.0.3/32", via="x"),
    line("route", 1.4, nodes=["c"], op="add", dst="10.0.0.1/32", via="y"),
    line("action", 2, nodes=["a", "b"], action="link-down", op="cut", index=1, key="a1"),
    line("link_down", 2.01, nodes=["a", "b"], iphys=[1, 1]),
    line("action", 4, nodes=["a", "b"], action="link-up", op="uncut", index=2, key="a1"),
    line("action", 5, nodes=["c"], action="crash", op="crash", index=3, key="crash:c:",
         target="c"),
    line("action", 5, nodes=["c"], action="crash", op="cut", index=3, key="crash:c:"),
    *[line("ping", 0.5 * k, nodes=["a", "c"], index=0, seq=k,
           rtt_ms=None if 4 <= k < 8 else 0.4 + k / 100) for k in range(12)],
    line("iperf", 1, nodes=["a", "b"], index=4, protocol="tcp", interval=[0, 1], bps=9e6),
    line("iperf", 2, nodes=["a", "b"], index=4, protocol="tcp", interval=[1, 2], bps=1e6),
    line("iperf", 2, nodes=["a", "b"], index=4, protocol="tcp", interval=[0, 2], bps=5e6,
         summary="receiver"),
]


@pytest.fixture
def run_dir(tmp_path):
    (tmp_path / "events.jsonl").write_text("\n".join(EVENTS) + "\n")
    return tmp_path


def test_series_match_the_hand_counted_events(run_dir):
    events = read_events(run_dir / "events.jsonl")
    assert series.link_counts(events) == [(0.0, 0), (0.1, 1), (0.2, 2), (2.01, 1)]
    spans = series.fault_spans(events, end=6.0)
    assert [(s.label, s.start, s.end) for s in spans] == [("link-down a-b", 2, 4),
                                                          ("crash c", 5, 6.0)]
    assert series.route_changes(events) == [(1.0, 2)]
    (ping,) = series.pings(events)
    # probes at 0, 0.5, ... 5.5; those with k = 4..7 (t = 2.0 .. 3.5) got no answer
    assert series.answered_share(ping) == [(0.0, 1.0), (1.0, 1.0), (2.0, 0.0), (3.0, 0.0),
                                           (4.0, 1.0), (5.0, 1.0)]
    (iperf,) = series.iperfs(events)
    assert iperf.times == [1.0, 2.0] and iperf.values == [9e6, 1e6]
    assert series.link_rates(events) == [(0.1, 20e6), (0.1, 20e6)]


def test_report_html_embeds_its_figures(run_dir):
    result = CliRunner().invoke(main, ["report", str(run_dir), "--json"])
    assert result.exit_code == 0, result.output
    page = (run_dir / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 3  # timeline, ping, iperf
    assert "8/12 answered (33.3 % lost)" in page and "link-down a-b" in page


def test_report_md_writes_pngs_beside_it(run_dir, tmp_path):
    out = tmp_path / "r.md"
    result = CliRunner().invoke(main, ["report", str(run_dir / "events.jsonl"), "-o",
                                       str(out)])
    assert result.exit_code == 0, result.output
    pngs = sorted(p.name for p in (tmp_path / "r-files").iterdir())
    assert pngs == ["iperf-4.png", "ping-0.png", "timeline.png"]
    assert all((tmp_path / "r-files" / p).read_bytes()[:4] == b"\x89PNG" for p in pngs)
    assert "](r-files/ping-0.png)" in out.read_text()


def test_report_refuses_a_directory_without_events_and_a_bad_suffix(tmp_path, run_dir):
    result = CliRunner().invoke(main, ["report", str(tmp_path / "nothing")])
    assert result.exit_code == 2 and "no events.jsonl here" in result.output
    result = CliRunner().invoke(main, ["report", str(run_dir), "-o", "x.pdf"])
    assert result.exit_code == 2 and "the report is .md or .html" in result.output


def test_the_play_clock_places_ca_events_by_their_wall_time(tmp_path):
    # The CA stamps a link_down with its step's time (0); it happened at wall 1010.5,
    # 10.5 s after scenario time 0 (wall 1000) at speed 1 -> 10.5; at speed 2 -> 21.
    lines = [line("play", 0, t0_wall=1000.0, speed=2.0),
             json.dumps({"event": "link_down", "scenario_time": 0, "wall_time": 1010.5,
                         "nodes": ["a", "b"], "iphys": [1, 1]}),
             json.dumps({"event": "route", "scenario_time": 0, "wall_time": 1001.2,
                         "nodes": ["a"], "op": "del", "dst": "x", "via": None})]
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + "\n")
    events = read_events(tmp_path / "events.jsonl")
    assert series.link_counts(events) == [(0.0, 0), (21.0, -1)]
    assert series.route_changes(events) == [(2.0, 1)]


def test_report_takes_a_run_directory_whose_events_went_elsewhere(tmp_path):
    """`run --events FILE` still makes a run directory (its record names the file), and
    that directory is what `run` prints last: `report` must find the events from it."""
    events = tmp_path / "elsewhere" / "ev.jsonl"
    events.parent.mkdir()
    events.write_text("\n".join(EVENTS) + "\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"version": 1, "events": str(events)}))
    result = CliRunner().invoke(main, ["report", str(run), "-o", str(tmp_path / "r.md")])
    assert result.exit_code == 0, result.output
    assert "ping[0] a -> c: 8/12 answered" in (tmp_path / "r.md").read_text()
