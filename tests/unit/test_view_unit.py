"""`nestednet view` without a browser: the bind/token/origin rules, the sources, the
state replayed from events (checked against hand-counted events) and the HTTP API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from nestednet.cli import main
from nestednet.errors import UsageError
from nestednet.model import events as ev
from nestednet.view import access, server, source, state

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "s3cret-token-0123456789"


# --- bind, token, origin ---------------------------------------------------------------


@pytest.mark.parametrize("bind", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_loopback_binds_need_no_token(bind: str):
    access.check_bind(bind, None)


@pytest.mark.parametrize("bind", ["0.0.0.0", "::", "192.168.1.5", "10.0.0.1"])
def test_other_binds_need_a_token(bind: str):
    with pytest.raises(UsageError, match="needs --token"):
        access.check_bind(bind, None)
    access.check_bind(bind, TOKEN)


def test_bad_bind_and_short_token_are_refused():
    with pytest.raises(UsageError, match="not an IP address"):
        access.check_bind("example.org", TOKEN)
    with pytest.raises(UsageError, match="at least 16"):
        access.check_bind("0.0.0.0", "short")


def test_host_origin_and_token_rules():
    assert access.host_ok("127.0.0.1:8080", "127.0.0.1")
    assert access.host_ok("localhost:8080", "127.0.0.1")
    assert access.host_ok("[::1]:8080", "::1")
    assert not access.host_ok("evil.example:8080", "127.0.0.1")  # DNS rebinding
    assert not access.host_ok(None, "127.0.0.1")
    assert access.host_ok("anything:8080", "0.0.0.0")  # the token guards it
    assert access.origin_ok(None, "127.0.0.1:8080")
    assert access.origin_ok("http://127.0.0.1:8080", "127.0.0.1:8080")
    assert not access.origin_ok("http://evil.example", "127.0.0.1:8080")
    assert not access.origin_ok("http://127.0.0.1:9999", "127.0.0.1:8080")
    assert access.token_ok(None, None)
    assert access.token_ok(TOKEN, TOKEN)
    assert not access.token_ok(None, TOKEN)
    assert not access.token_ok(TOKEN + "x", TOKEN)
    assert access.token_given({}, {"authorization": f"Bearer {TOKEN}"}, {}) == TOKEN
    assert access.token_given({}, {}, {access.COOKIE: TOKEN}) == TOKEN


def test_cli_refuses_a_public_bind_without_token_with_exit_2():
    done = subprocess.run([sys.executable, "-m", "nestednet.cli", "view", "--bind", "0.0.0.0",
                           str(ROOT / "scenarios" / "small-4x2.json"), "--port", "0"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert "--bind 0.0.0.0" in done.stderr and "--token" in done.stderr
    assert "Traceback" not in done.stderr


def test_cli_refuses_lab_and_target_together_and_a_missing_target():
    runner = CliRunner()
    both = runner.invoke(main, ["view", "--lab", "nn", str(ROOT / "scenarios")])
    assert both.exit_code == 2, both.output
    missing = runner.invoke(main, ["view", str(ROOT / "no-such-file.json")])
    assert missing.exit_code == 2, missing.output


# --- events, written by hand -------------------------------------------------------------


def _line(**fields) -> str:
    return json.dumps(fields)


RUN = [
    _line(event="hello", scenario_time=0.0, nodes=["a"]),
    _line(event="step", scenario_time=0.0, wall_time=100.0, step=0, nodes=["a", "b", "c"],
          visible=[["a", "b"], ["b", "c"]]),
    _line(event="link_request", scenario_time=0.0, step=0, nodes=["a", "b"], iphys=[1]),
    _line(event="link_up", scenario_time=0.0, wall_time=100.01, step=0, nodes=["a", "b"],
          iphys=[1, 2], latency_ms=10.0,
          properties={"a_to_b": {"rate_bps": 5_000_000, "delay_us": 2000, "jitter_us": 0,
                                 "loss_pct": 0.0},
                      "b_to_a": {"rate_bps": 8_000_000, "delay_us": 3000, "jitter_us": 0,
                                 "loss_pct": 0.0}}),
    _line(event="link_request", scenario_time=0.0, step=0, nodes=["c", "b"], iphys=[1]),
    _line(event="link_fail", scenario_time=0.0, step=0, nodes=["c", "b"], iphys=[1],
          reason="no_free_iphy"),
    _line(event="route", scenario_time=0.0, wall_time=100.5, step=0, nodes=["a"], op="add",
          dst="10.100.0.2/32", via="192.168.2.2"),
    _line(event="step", scenario_time=5.0, wall_time=105.0, step=1, nodes=["a", "b", "c"],
          visible=[["b", "c"], ["a", "c"]]),
    _line(event="link_down", scenario_time=5.0, step=1, nodes=["a", "b"], iphys=[1, 2]),
    _line(event="link_up", scenario_time=5.0, wall_time=105.03, step=1, nodes=["b", "c"],
          iphys=[1, 1], latency_ms=30.0),
    _line(event="link_up", scenario_time=5.0, wall_time=105.02, step=1, nodes=["a", "c"],
          iphys=[1, 2], latency_ms=20.0),
    _line(event="route", scenario_time=5.0, wall_time=105.75, step=1, nodes=["a"], op="del",
          dst="10.100.0.2/32", via="192.168.2.2"),
    _line(event="route", scenario_time=5.0, wall_time=106.25, step=1, nodes=["a"], op="add",
          dst="10.100.0.3/32", via="192.168.2.5"),
]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "lab1-20260101-120000"
    run.mkdir()
    (run / "events.jsonl").write_text("\n".join(RUN) + "\n")
    return run


def test_run_directory_replays_to_each_step(run_dir: Path):
    shown = source.RunDirSource(run_dir)
    events = shown.read_events()
    assert len(events) == len(RUN)
    assert shown.read_events() == []
    first = state.replay(events, 0, shown.make_state)
    assert sorted(first.links) == [("a", "b")]
    link = first.links[("a", "b")].as_dict()
    assert link["rate_mbps"] == 5.0 and link["delay_ms"] == 3.0  # the slower, the longer
    assert link["class"] == "run, shaped"
    last = state.replay(events, 1, shown.make_state)
    assert sorted(last.links) == [("a", "c"), ("b", "c")]
    summary = last.summary()
    assert summary["links"] == [1, 2]
    assert summary["requests"] == [2, 0]
    assert summary["refused"] == [1, 0]
    assert summary["links_up"] == [1, 2] and summary["links_down"] == [0, 1]
    assert summary["latency_p50_ms"] == [10.0, 20.0]  # nearest rank of {20, 30}
    assert summary["route_changes"] == [1, 2]
    assert summary["converged_s"] == [0.5, 1.25]
    snap = last.snapshot()
    assert [n["name"] for n in snap["nodes"]] == ["a", "b", "c"]
    assert snap["step"] == 1 and snap["time"] == 5.0
    assert {(v["a"], v["b"]) for v in snap["visible"]} == {("b", "c"), ("a", "c")}
    details = shown.node_details("a", last)
    assert details["routes"] == [{"dst": "10.100.0.3/32", "via": "192.168.2.5"}]
    assert [(x["a"], x["b"]) for x in details["links"]] == [("a", "c")]


def test_events_follower_reads_whole_lines_only(tmp_path: Path):
    path = tmp_path / "events.jsonl"
    half = len(RUN[1]) // 2
    path.write_text(RUN[0] + "\n" + RUN[1][:half])
    follower = source.follow(path)
    assert [e.event for e in follower.read()] == ["hello"]
    with path.open("a") as f:
        f.write(RUN[1][half:] + "\n")
    assert [e.event for e in follower.read()] == ["step"]


def test_scenario_source_gives_steps_and_resolved_links():
    shown = source.ScenarioSource(ROOT / "scenarios" / "small-4x2.json")
    events = shown.read_events()
    assert [e.step for e in events] == [0, 1, 2]
    assert shown.read_events() == []
    live = shown.make_state()
    live.apply(events)
    snap = live.snapshot()
    assert len(snap["nodes"]) == 4 and snap["links"] == []
    assert {(v["a"], v["b"]) for v in snap["visible"]} == {("n1", "n3"), ("n2", "n4")}
    assert snap["globe_radius"] is None


def test_globe_is_recognised_from_earth_centred_positions():
    orbit = {"s1": (6921.0, 0.0, 0.0), "s2": (0.0, 6921.0, 0.0), "g": (6371.0, 0.0, 0.0)}
    assert state.globe_radius(orbit, "km") == 6371.0
    metres = {k: tuple(v * 1000 for v in p) for k, p in orbit.items()}
    assert state.globe_radius(metres, "m") == 6_371_000.0
    assert state.globe_radius(orbit, None) == 6371.0
    assert state.globe_radius({"a": (0.0, 0.0, 0.0), "b": (150.0, 20.0, 10.0)}, "m") is None


def test_lab_runs_are_found_by_name_and_a_playing_run_is_followed(tmp_path: Path):
    labs, runs = tmp_path / "labs", tmp_path / "runs"
    (labs / "vw1").mkdir(parents=True)
    (labs / "vw1" / "lab.json").write_text(json.dumps({"status": "complete", "nodes": 3,
                                                       "iphys": 1}))
    old = runs / "vw1-20260101-120000"
    other = runs / "vw1x-20260101-130000"  # another lab whose name starts alike
    new = runs / "vw1-20260101-140000-2"
    for d, mtime in ((old, 1000), (other, 3000), (new, 2000)):
        d.mkdir(parents=True)
        (d / "events.jsonl").write_text(RUN[1] + "\n")
        os.utime(d, (mtime, mtime))
    assert source.run_dirs("vw1", runs) == [old, new]
    lab = source.LabSource("vw1", labs_dir=labs, runs_dir=runs)
    assert lab.initial_nodes() == ["n1", "n2", "n3"]
    assert lab.read_events() == []  # no run marker: no run playing
    (labs / "vw1.run").write_text("{}")
    os.utime(labs / "vw1.run", (1500, 1500))
    assert [e.event for e in lab.read_events()] == ["step"]
    assert lab.follower is not None and lab.follower.path == new / "events.jsonl"
    assert lab.generation == 1
    os.utime(labs / "vw1.run", (2500, 2500))  # a new run whose directory is not made yet
    lab.follower = None
    assert lab.read_events() == [] and lab.follower is None
    with pytest.raises(UsageError, match="no lab vw2"):
        source.LabSource("vw2", labs_dir=labs, runs_dir=runs)


# --- the HTTP API ------------------------------------------------------------------------


def _client(shown: source.Source, bind: str = "127.0.0.1", token: str | None = None
            ) -> TestClient:
    return TestClient(server.make_app(shown, bind=bind, token=token),
                      base_url="http://127.0.0.1:8080", follow_redirects=False)


def test_page_and_api_answer_on_loopback(run_dir: Path):
    with _client(source.RunDirSource(run_dir)) as client:
        page = client.get("/")
        assert page.status_code == 200 and "plotly.min.js" in page.text
        js = client.get("/static/plotly.min.js")
        assert js.status_code == 200 and len(js.content) > 1_000_000
        assert client.get("/static/view.js").status_code == 200
        assert client.get("/static/../server.py").status_code == 404
        deadline = time.monotonic() + 10
        while client.get("/api/info").json()["polls"] == 0:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        snap = client.get("/api/state").json()
        assert snap["step"] == 1 and len(snap["links"]) == 2
        assert [s["step"] for s in snap["steps_seen"]] == [0, 1]
        assert len(client.get("/api/state?step=0").json()["links"]) == 1
        assert client.get("/api/state?step=x").status_code == 400
        assert client.get("/api/link?a=c&b=a").json()["link"]["a"] == "a"
        refused = client.get("/api/info", headers={"Host": "evil.example:8080"})
        assert refused.status_code == 400
        assert client.get("/api/info", headers={"Origin": "http://evil.example"}
                          ).status_code == 403


def test_every_request_needs_the_token_when_one_is_set(run_dir: Path):
    with _client(source.RunDirSource(run_dir), bind="0.0.0.0", token=TOKEN) as client:
        for path in ("/", "/api/info", "/api/state", "/api/stream", "/static/view.js",
                     "/api/node?name=a"):
            assert client.get(path).status_code == 401, path
        assert client.get("/api/info?token=wrong-token-000000").status_code == 401
        assert client.get("/api/info", headers={"Authorization": f"Bearer {TOKEN}"}
                          ).status_code == 200
        first = client.get(f"/?token={TOKEN}")
        assert first.status_code == 303 and first.headers["location"] == "/"
        assert access.COOKIE in first.cookies
        assert "httponly" in first.headers["set-cookie"].lower()
        client.cookies.set(access.COOKIE, TOKEN)
        assert client.get("/").status_code == 200
        client.cookies.clear()
        assert client.get("/api/info", headers={"Authorization": f"Bearer {TOKEN}",
                                                "Origin": "http://evil.example"}
                          ).status_code == 403


def test_events_describe_themselves_for_the_feed():
    e = ev.parse_event(json.loads(RUN[3]), "x")
    assert state.describe_event(e) == "link up a:iphy1 ↔ b:iphy2 10.0 ms 5 Mbit/s, 2 ms"


# --- layering --------------------------------------------------------------------------

RUNTIME = ("docker", "ovs", "ovsdbapp", "pyroute2", "nestednet.lab", "nestednet.adapters",
           "nestednet.ca")


def _imports(path: Path, top_level_only: bool) -> set[str]:
    import ast

    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_the_web_layer_reads_the_lab_only_through_the_source_module():
    view = ROOT / "nestednet" / "view"
    for name in ("server.py", "access.py", "state.py"):
        bad = {m for m in _imports(view / name, top_level_only=False)
               if m.startswith(RUNTIME)}
        assert not bad, f"{name} imports {sorted(bad)}"
    bad = {m for m in _imports(view / "source.py", top_level_only=True) if m.startswith(RUNTIME)}
    assert not bad, f"source.py loads {sorted(bad)} at import (lazy imports only)"
    assert "nestednet.lab.nodes" in _imports(view / "source.py", top_level_only=False)


def test_a_route_replaced_before_its_old_hop_is_deleted_stays_in_the_table():
    """Babel adds the new route (via .7) before deleting the old one (via .5): the node's
    panel must keep the route via .7; a del naming the hop in use removes it."""
    def route(op: str, via: str, t: float) -> ev.Event:
        return ev.Event(ev.ROUTE, t, wall_time=100 + t, step=0, nodes=("a",),
                        extra={"op": op, "dst": "10.100.0.3/32", "via": via})

    events = [route("add", "192.168.2.5", 1), route("add", "192.168.2.7", 2),
              route("del", "192.168.2.5", 3)]
    assert source._routes_from_events("a", events) == [
        {"dst": "10.100.0.3/32", "via": "192.168.2.7"}]
    assert source._routes_from_events("a", [*events, route("del", "192.168.2.7", 4)]) == []
