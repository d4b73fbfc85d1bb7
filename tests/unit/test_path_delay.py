"""Measured RTT against the configured path delay (nestednet.model.path_delay), on
hand-written events whose path delays and verdicts are worked out by hand below."""

from __future__ import annotations

import json

import pytest

from nestednet.model import path_delay
from nestednet.model.events import parse_events
from nestednet.model.run_report import describe_path_delay

pytestmark = pytest.mark.unit

T0 = 1000.0
ADDRESSES = {"a": "10.100.0.1", "b": "10.100.0.2", "c": "10.100.0.3", "d": "10.100.0.4"}


def rec(kind: str, t: float, wall: float | None = None, **fields: object) -> str:
    out = {"event": kind, "scenario_time": t} | fields
    if wall is not None:
        out["wall_time"] = T0 + wall
    return json.dumps(out)


def props(ab_ms: float, ba_ms: float, jitter_ms: float = 0) -> dict:
    def one(ms: float) -> dict:
        return {"rate_bps": None, "delay_us": int(ms * 1000),
                "jitter_us": int(jitter_ms * 1000), "loss_pct": 0}
    return {"a_to_b": one(ab_ms), "b_to_a": one(ba_ms)}


def route(node: str, dst: str, iphy: int, t: float, op: str = "add",
          stamped: float | None = None) -> str:
    return rec("route", stamped if stamped is not None else t, wall=t, nodes=[node], op=op,
               dst=f"{ADDRESSES[dst]}/32", via=f"192.168.0.{10 + iphy}")


def ping(t: float, step: int, rtt: float | None, seq: int) -> str:
    return rec("ping", t, wall=t + 0.01, step=step, nodes=["a", "d"], index=0, seq=seq,
               rtt_ms=rtt)


# A line a-b-c-d (iPHY numbers on each side as written), then a short cut a-d at 20 s.
#   a-b: a iphy1 - b iphy1, a->b 5 ms, b->a 7 ms
#   b-c: b iphy2 - c iphy1, 10 ms each way, jitter 1 ms each way
#   c-d: c iphy2 - d iphy1, c->d 2 ms, d->c 3 ms
# Step 0: a>b>c>d costs 5 + 10 + 2 = 17 ms, d>c>b>a 3 + 10 + 7 = 20 ms: 37 ms; jitter
#   2 ms; 6 directions: agrees within [37 - 2 - 0.1, 37 + 2 + 1 + 6] = [34.9, 46].
#   Probes 38.0, 39.5, 50.0 (outside), lost: 3 compared, 1 outside, p50 39.5, error 2.5.
# Step 1 (10.5 s): a-b degraded, a->b 20 ms: forward 32, back 20: 52 ms, within
#   [49.9, 61]. Probes 52.5, 53.0: both inside; p50 of two is the lower (nearest rank).
# Step 2 (20 s): link a-d (a iphy2 - d iphy2), 1 ms each way; a and d route over it (a's
#   add comes before the del of its old route, which must not take the new one away).
#   Path a>d, d>a: 2 ms, 2 directions, no jitter: [1.9, 5.0]. Probes 52.0 and 51.0 are
#   both outside: the step parts (measured 51 ms p50, error +49 ms).
# Step 3 (30 s): a-d goes down, the routes stay: no path (answered, not compared).
EVENTS = [
    rec("play", 0, wall=0, t0_wall=T0, speed=1.0, addresses=ADDRESSES,
        intra="192.168.0.0/24"),
    rec("step", 0, wall=0, step=0, nodes=["a", "b", "c", "d"], visible=[]),
    rec("link_up", 0, wall=0.1, nodes=["a", "b"], iphys=[1, 1], properties=props(5, 7)),
    rec("link_up", 0, wall=0.1, nodes=["b", "c"], iphys=[2, 1], properties=props(10, 10, 1)),
    rec("link_up", 0, wall=0.1, nodes=["c", "d"], iphys=[2, 1], properties=props(2, 3)),
    route("a", "d", 1, 0.5), route("b", "d", 2, 0.5), route("c", "d", 2, 0.5),
    route("d", "a", 1, 0.5), route("c", "a", 1, 0.5), route("b", "a", 1, 0.5),
    ping(1, 0, 38.0, 1), ping(2, 0, 39.5, 2), ping(3, 0, 50.0, 3), ping(4, 0, None, 4),
    rec("link_update", 0, wall=10.5, nodes=["a", "b"], iphys=[1, 1],
        properties=props(20, 7)),
    ping(11, 1, 52.5, 11), ping(12, 1, 53.0, 12),
    rec("link_up", 20, wall=20.1, nodes=["a", "d"], iphys=[2, 2], properties=props(1, 1)),
    route("a", "d", 2, 20.5, stamped=20), route("a", "d", 1, 20.6, op="del", stamped=20),
    route("d", "a", 2, 20.5, stamped=20),
    ping(21, 2, 52.0, 21), ping(22, 2, 51.0, 22),
    rec("link_down", 30, wall=30.1, nodes=["a", "d"], iphys=[2, 2]),
    ping(31, 3, 50.0, 31),
]


def events(lines: list[str] = EVENTS):
    return parse_events("\n".join(lines), "t")


def test_each_probe_gets_the_path_and_delay_in_effect_when_it_was_sent():
    (nodes, found), = path_delay.probes(events()).values()
    assert nodes == ("a", "d")
    first = found[0]
    assert first.sent == pytest.approx(1 - 0.038)
    assert first.path.forward == ("a", "b", "c", "d")
    assert first.path.back == ("d", "c", "b", "a")
    assert (first.path.delay_ms, first.path.jitter_ms, first.path.directions) == (37, 2, 6)
    assert first.path.bounds() == pytest.approx((34.9, 46.0))
    assert [p.outside for p in found[:4]] == [False, False, True, False]
    assert found[3].path is None and found[3].error_ms is None  # lost
    assert [p.path.delay_ms for p in found[4:6]] == [52, 52]
    assert found[6].path.forward == ("a", "d") and found[6].path.delay_ms == 2
    assert found[6].path.bounds() == pytest.approx((1.9, 5.0))
    assert found[8].rtt_ms == 50 and found[8].path is None  # a-d is gone, its route not


def test_steps_part_where_over_half_their_probes_leave_the_bound():
    result = path_delay.summary(events())
    (ping,) = result["pings"]
    assert (ping["probes"], ping["answered"], ping["compared"], ping["outside"]) == \
        (9, 8, 7, 3)
    rows = {r["step"]: r for r in ping["steps"]}
    assert {
        k: rows[0][k] for k in ("probes", "answered", "compared", "outside", "forward",
                                "back", "configured_ms", "measured_ms", "error_ms",
                                "bound_ms", "parts")} == {
        "probes": 4, "answered": 3, "compared": 3, "outside": 1, "forward": "a>b>c>d",
        "back": "d>c>b>a", "configured_ms": 37, "measured_ms": 39.5, "error_ms": 2.5,
        "bound_ms": [34.9, 46.0], "parts": False}
    assert (rows[1]["configured_ms"], rows[1]["measured_ms"], rows[1]["error_ms"],
            rows[1]["parts"]) == (52, 52.5, 0.5, False)
    assert (rows[2]["forward"], rows[2]["configured_ms"], rows[2]["measured_ms"],
            rows[2]["error_ms"], rows[2]["parts"]) == ("a>d", 2, 51.0, 49.0, True)
    assert (rows[3]["answered"], rows[3]["compared"], rows[3]["parts"]) == (1, 0, False)
    assert [(r["index"], r["step"]) for r in result["parted"]] == [(0, 2)]
    assert result["bound"]["per_direction_ms"] == path_delay.PER_DIRECTION_MS


def test_routes_are_placed_by_their_wall_time_not_their_stamp():
    """The route over a-d is stamped 20 (its step's time) but happened at 20.5 s: a probe
    sent at 20.2 s still went the long way (52 ms configured), one at 20.9 s the short."""
    early = rec("ping", 20.25, wall=20.26, step=2, nodes=["a", "d"], index=0, seq=99,
                rtt_ms=50.0)
    late = rec("ping", 20.95, wall=20.96, step=2, nodes=["a", "d"], index=0, seq=98,
               rtt_ms=50.0)
    (_, found), = path_delay.probes(events([*EVENTS, early, late])).values()
    by_seq = {round(p.sent, 2): p for p in found}
    assert by_seq[20.2].path.delay_ms == 52 and by_seq[20.9].path.delay_ms == 2


def test_without_addresses_the_kth_node_has_the_kth_node_address():
    lines = [line for line in EVENTS[:15] if '"play"' not in line]
    (_, found), = path_delay.probes(events(lines)).values()
    assert found[0].path.forward == ("a", "b", "c", "d") and found[0].path.delay_ms == 37


def test_a_link_known_only_from_a_resume_has_no_known_delay():
    """A run killed between a link's flows and its link_up event: the resumed run adopts
    the link (its `resumed` event names it) but no properties were ever written for it,
    so a path over it is not compared (rather than taken as 0 ms)."""
    before = EVENTS[:11]
    resumed = [rec("play", 0, wall=5, t0_wall=T0, speed=1.0, addresses=ADDRESSES),
               rec("resumed", 5, wall=5, links=[["a", 2, "d", 2]]),
               route("a", "d", 2, 5.5), route("d", "a", 2, 5.5), ping(6, 0, 40.0, 6)]
    (_, found), = path_delay.probes(events(before + resumed)).values()
    assert found[-1].rtt_ms == 40.0 and found[-1].path is None
    network = path_delay.Network()
    for e in events(before + resumed[:-1]):
        network.apply(e)
    assert network.hops("a", "d") == ("a", "d") and network.path("a", "d") is None
    network = path_delay.Network()
    for e in events(before + resumed[2:-1]):
        network.apply(e)
    assert network.hops("a", "d") is None  # without the resumed event: no link there


def test_a_run_without_pings_has_no_comparison_and_the_line_names_where_it_parts():
    assert path_delay.summary(events(EVENTS[:6])) == {}
    line = describe_path_delay(path_delay.summary(events()))
    assert line.startswith("path delay: ping[0] a-d: 4 of 7 compared probes")
    assert "parts at step 3 (from 20.9 s): measured 51.00 ms vs configured 2.00 ms " \
           "over a>d / d>a" in line


def test_report_shows_the_comparison_per_step(tmp_path):
    from click.testing import CliRunner

    from nestednet.cli import main

    (tmp_path / "events.jsonl").write_text("\n".join(EVENTS) + "\n")
    out = tmp_path / "r.md"
    result = CliRunner().invoke(main, ["report", str(tmp_path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    page = out.read_text()
    assert "## Fidelity: measured RTT against the configured path delay" in page
    assert "ping[0] a -> d: 4 of 7 compared probes within bound (8 answered, 9 sent)" in page
    assert ("| 3 | 20.9 | a>d / d>a | 2.00 ms | 51.00 ms | 49.00 ms | 1.9..5.0 | 2 | 2 | "
            "PARTS |") in page
    assert "| 1 | 1.0 | a>b>c>d / d>c>b>a | 37.00 ms | 39.50 ms | 2.50 ms | 34.9..46.0 | 3 | " \
           "1 | agrees |" in page


def test_a_rate_only_run_configures_no_delay():
    """Rate-only link_up events carry the scenario's delays and name them as dropped:
    the kernel holds none, so the configured path RTT is 0 ms (bound [-0.1, 7.0])."""
    rate_only = [line.replace('"properties": {', '"properties": {"dropped": ["delay", '
                              '"jitter"], ') for line in EVENTS[:15]]
    assert '"dropped"' in rate_only[2]
    (_, found), = path_delay.probes(events(rate_only)).values()
    assert (found[0].path.delay_ms, found[0].path.jitter_ms) == (0, 0)
    assert found[0].path.bounds() == pytest.approx((-0.1, 7.0))
