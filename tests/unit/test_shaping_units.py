"""Quantity parsing (linkemu/units.py): round-trips and rejections."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nestednet.model import units


@pytest.mark.unit
@pytest.mark.parametrize(("text", "bps"), [
    ("46Mbps", 46_000_000), ("1.5Mbit", 1_500_000), ("500kbit", 500_000), ("1Gbit", 10**9),
    ("10MBps", 80_000_000), ("64kbps", 64_000), ("2 Mbit", 2_000_000), ("34Gbit", 34 * 10**9),
    ("100bit", 100),
])
def test_rates(text, bps):
    assert units.parse_rate(text) == bps


@pytest.mark.unit
@pytest.mark.parametrize(("text", "us"), [
    ("11ms", 11_000), ("500us", 500), ("0", 0), ("0.2s", 200_000), ("1.5ms", 1500), ("0ms", 0),
])
def test_times(text, us):
    assert units.parse_time(text) == us


@pytest.mark.unit
@pytest.mark.parametrize(("text", "pct"), [("10%", 10.0), ("0", 0.0), ("0.5", 0.5), ("100%", 100)])
def test_loss(text, pct):
    assert units.parse_loss(text) == pct


@pytest.mark.unit
@pytest.mark.parametrize(("parse", "text", "words"), [
    (units.parse_rate, "-5Mbit", "negative"),
    (units.parse_rate, "5Mbix", "unknown unit"),
    (units.parse_rate, "46", "needs a unit"),
    (units.parse_rate, "0Mbit", "zero"),
    (units.parse_rate, "35Gbit", "HFSC"),
    (units.parse_rate, "fast", "not a number"),
    (units.parse_time, "11mx", "unknown unit 'mx'"),
    (units.parse_time, "-1ms", "negative"),
    (units.parse_time, "5", "needs a unit"),
    (units.parse_time, "0.5us", "finer than a microsecond"),
    (units.parse_loss, "101%", "above 100"),
    (units.parse_loss, "-1%", "negative"),
    (units.parse_loss, "5ms", "unknown unit"),
])
def test_rejections(parse, text, words):
    with pytest.raises(ValueError, match=words):
        parse(text)


@pytest.mark.unit
@given(st.integers(min_value=1, max_value=units.MAX_RATE_BPS))
def test_rate_round_trip(bps):
    assert units.parse_rate(units.format_rate(bps)) == bps


@pytest.mark.unit
@given(st.integers(min_value=0, max_value=units.MAX_DELAY_US))
def test_time_round_trip(us):
    assert units.parse_time(units.format_time(us)) == us


@pytest.mark.unit
@given(st.floats(min_value=0, max_value=100, allow_nan=False))
def test_loss_round_trip(pct):
    assert units.parse_loss(units.format_loss(pct)) == pct


@pytest.mark.unit
@given(st.integers(min_value=1, max_value=10**6), st.sampled_from(["kbit", "Mbit", "Gbit"]))
def test_rate_units_scale(n, unit):
    factor = {"kbit": 10**3, "Mbit": 10**6, "Gbit": 10**9}[unit]
    text = f"{n}{unit}"
    if n * factor > units.MAX_RATE_BPS:
        with pytest.raises(ValueError):
            units.parse_rate(text)
    else:
        assert units.parse_rate(text) == n * factor


@pytest.mark.unit
@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", min_size=1,
               max_size=5))
def test_unknown_time_units_rejected(unit):
    if unit in {"us", "usec", "ms", "msec", "s", "sec"}:
        return
    with pytest.raises(ValueError, match="unknown unit"):
        units.parse_time(f"5{unit}")
