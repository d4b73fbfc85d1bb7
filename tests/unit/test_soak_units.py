"""The soak's judgement (nestednet.bench.soak): growth per hour, step lateness, verdict.
Expected values are worked out by hand from the synthetic series, not by our code."""

from __future__ import annotations

import pytest

from nestednet.bench.soak import Sample, growth_per_hour, judge, plot, step_lateness
from nestednet.model.events import STEP, Event

pytestmark = pytest.mark.unit


def test_growth_per_hour_is_the_slope_over_the_second_half():
    # 10 MB for the first half hour (start-up), then +1 MB every 600 s: 6 MB an hour.
    samples = [Sample(t, {"cli_rss_mb": 10.0 if t < 1800 else 10.0 + (t - 1800) / 600})
               for t in range(0, 3601, 60)]
    assert growth_per_hour(samples, "cli_rss_mb") == pytest.approx(6.0)
    flat = [Sample(t, {"x": 5.0}) for t in range(0, 3601, 60)]
    assert growth_per_hour(flat, "x") == pytest.approx(0.0)
    assert growth_per_hour(samples[:2], "cli_rss_mb") is None
    assert growth_per_hour(samples, "absent") is None


def _step(k: int, scenario_time: float, wall: float) -> Event:
    return Event(STEP, scenario_time, wall_time=wall, step=k)


def test_lateness_is_against_the_first_steps_wall_time_and_speed():
    events = [_step(0, 0.0, 1000.0), _step(1, 1.0, 1000.5), _step(2, 2.0, 1001.3),
              Event("link_up", 2.0, wall_time=5000.0, step=2, nodes=("a", "b"),
                    iphys=(1, 1))]
    late = step_lateness(events, speed=2.0)
    assert [k for k, _ in late] == [0, 1, 2]
    assert [round(x, 3) for _, x in late] == [0.0, 0.0, 0.3]


def test_the_verdict_names_what_grew_and_which_steps_were_late(tmp_path):
    samples = [Sample(t, {"cli_rss_mb": 50 + t / 60, "links": 10, "flows": 20,
                          "tc_objects": 30, "cli_fds": 12}) for t in range(0, 3601, 60)]
    lateness = [(0, 0.0), (1, 0.2), (2, 1.5)]
    verdict = judge(samples, lateness, step_s=1.0, speed=1.0, events_bytes=3000)
    assert verdict.over_bound == ["cli_rss_mb: +60.00/h > 20/h"]
    assert verdict.late_steps == [(2, 1.5)] and not verdict.passed
    assert verdict.events_bytes_per_step == 1000
    assert verdict.flows_per_link == 2 and verdict.tc_per_link == 3
    steady = [Sample(s.wall, {**s.values, "cli_rss_mb": 50.0}) for s in samples]
    assert judge(steady, lateness[:2], step_s=1.0, speed=1.0).passed
    png = plot(samples, lateness, tmp_path / "soak.png", "t")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
