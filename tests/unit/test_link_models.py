"""Link properties and link models against hand-computed values, plus properties.

Hand computations (c = 299,792,458 m/s):
- 3,000 km: 3e6 / c = 10.0069 ms -> 10,007 us.
- FSPL(1 km, 2.4 GHz) = 20 log10(4 pi 1000 2.4e9 / c) = 60 + 187.604 - 147.552 = 100.05 dB.
- Free-space defaults at 1 km: noise floor -174 + 10 log10(20e6) + 7 = -93.99 dBm;
  received 20 - 100.05 = -80.05 dBm; SNR 13.94 dB = 24.77;
  rate 20e6 x log2(25.77) x 0.5 = 46.87 Mbit/s (under the 54 Mbit cap);
  loss 100 / (1 + e^((13.94 - 5) / 1)) = 0.0131 %.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nestednet.model import link_models as lm
from nestednet.model.link_properties import (
    IDEAL,
    LinkProperties,
    PropertyError,
    parse_properties,
    summarise,
)

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "nestednet/schemas/link-model.schema.json"
ORIGIN = (0.0, 0.0, 0.0)


def at(metres: float) -> tuple[float, float, float]:
    return (metres, 0.0, 0.0)


# -- LinkProperties ---------------------------------------------------------------------


@pytest.mark.unit
def test_properties_parse_linkemu_units_and_give_pyroute2_rates():
    p = parse_properties({"rate": "1.5Mbit", "delay": "10ms", "jitter": "500us", "loss": "0.5%"})
    assert p == LinkProperties(1_500_000, 10_000, 500, 0.5)
    assert p.tc_rate == "1500kbit"
    assert parse_properties({"rate": "20Mbit"}).tc_rate == "20mbit"
    assert parse_properties({"rate": "1Gbit"}).tc_rate == "1gbit"
    assert parse_properties({"rate": "1234bit"}).tc_rate == "1234bit"
    assert IDEAL.tc_rate is None


@pytest.mark.unit
def test_netem_properties_are_those_htb_cannot_do():
    assert LinkProperties(rate_bps=5_000_000).netem_properties == ()
    assert IDEAL.netem_properties == ()
    assert LinkProperties(delay_us=10).netem_properties == ("delay",)
    assert LinkProperties(5_000_000, 10, 5, 1.0).netem_properties == ("delay", "jitter", "loss")


@pytest.mark.unit
@pytest.mark.parametrize(("doc", "field", "text"), [
    ({"rate": "10"}, "rate", "needs a unit"),
    ({"rate": "0Mbit"}, "rate", "zero"),
    ({"delay": "five ms"}, "delay", "not a number with a unit"),
    ({"delay": "5parsec"}, "delay", "unknown unit"),
    ({"delay": "1ms", "jitter": "2ms"}, "jitter", "exceeds the delay"),
    ({"loss": "120%"}, "loss", "above 100"),
    ({"loss": "5dB"}, "loss", "unknown unit"),
])
def test_bad_properties_name_their_field(doc, field, text):
    with pytest.raises(PropertyError, match=text) as err:
        parse_properties(doc)
    assert err.value.field == field


@pytest.mark.unit
@given(st.builds(LinkProperties,
                 rate_bps=st.none() | st.integers(1, 34_000_000_000),
                 delay_us=st.integers(0, 1_000_000),
                 loss_pct=st.floats(0, 100)).filter(lambda p: p.jitter_us <= p.delay_us))
def test_document_form_reads_back_exactly(props):
    assert parse_properties(props.as_document()) == props


@pytest.mark.unit
def test_summary_of_a_step():
    props = [LinkProperties(10_000_000, 1000), LinkProperties(20_000_000, 3000),
             LinkProperties(None, 2000), None]
    s = summarise(props)
    assert s["directions"] == 4 and s["no_link"] == 1 and s["unshaped"] == 1
    assert s["delay_us"] == {"min": 1000, "median": 2000, "max": 3000}
    assert s["rate_bps"] == {"min": 10_000_000, "median": 15_000_000, "max": 20_000_000}
    assert s["needs_netem"] == ["delay"]
    empty = summarise([])
    assert empty["delay_us"] is None and empty["rate_bps"] is None


# -- hand-computed model values ------------------------------------------------------------


@pytest.mark.unit
def test_propagation_3000_km_is_10_007_ms():
    model = lm.build({"model": "propagation"})
    assert model.properties(ORIGIN, at(3e6)).delay_us == 10_007
    assert lm.propagation_delay_s(ORIGIN, at(3e6)) == pytest.approx(10.0069e-3, abs=1e-7)


@pytest.mark.unit
def test_fspl_at_2_4_ghz_and_1_km_is_100_db():
    assert lm.fspl_db(1000, 2.4e9) == pytest.approx(100.05, abs=0.01)
    assert lm.fspl_db(2000, 2.4e9) - lm.fspl_db(1000, 2.4e9) == pytest.approx(6.02, abs=0.01)
    assert lm.fspl_db(0.001, 2.4e9) == 0.0


@pytest.mark.unit
def test_free_space_link_budget_at_1_km():
    model = lm.build({"model": "free-space"})
    assert model.noise_floor_dbm == pytest.approx(-93.99, abs=0.01)
    assert model.snr_db(1000) == pytest.approx(13.94, abs=0.01)
    p = model.properties(ORIGIN, at(1000))
    assert p.rate_bps == pytest.approx(46.87e6, rel=1e-3)
    assert p.loss_pct == pytest.approx(0.0131, abs=1e-4)
    assert p.delay_us == 3  # 1 km / c = 3.34 us


@pytest.mark.unit
def test_free_space_caps_rate_and_loses_everything_far_away():
    model = lm.build({"model": "free-space", "params": {"rate": "10Mbit"}})
    assert model.properties(ORIGIN, at(10)).rate_bps == 10_000_000
    far = model.properties(ORIGIN, at(100_000))  # SNR -26.06 dB: Shannon x 0.5 = 35.7 kbit/s
    assert far.loss_pct > 99.99 and far.rate_bps == pytest.approx(35_700, rel=1e-2)
    assert model.properties(ORIGIN, at(1e7)).rate_bps == lm.MIN_RATE_BPS  # SNR -86 dB


@pytest.mark.unit
def test_free_space_noise_floor_given_replaces_the_derived_one():
    model = lm.build({"model": "free-space", "params": {"noise_floor_dbm": -90}})
    assert model.snr_db(1000) == pytest.approx(20 - 100.052 + 90, abs=0.01)


@pytest.mark.unit
def test_logistic_loss_curve():
    assert lm.logistic_loss_pct(5, 5, 1) == 50.0
    assert lm.logistic_loss_pct(6, 5, 1) == pytest.approx(100 / (1 + math.e))
    assert lm.logistic_loss_pct(1e6, 5, 1) == 0.0
    assert lm.logistic_loss_pct(-1e6, 5, 1) == 100.0


@pytest.mark.unit
def test_laser_fixed_rate_within_range_none_beyond():
    model = lm.build({"model": "laser", "params": {"rate": "1Gbit", "range_m": 4e6}})
    p = model.properties(ORIGIN, at(3e6))
    assert p == LinkProperties(1_000_000_000, 10_007, 0, 0.0)
    assert model.properties(ORIGIN, at(4e6)) is not None
    assert model.properties(ORIGIN, at(4e6 + 1)) is None


@pytest.mark.unit
def test_jitter_rides_on_top_of_the_propagation_delay():
    model = lm.build({"model": "propagation", "params": {"jitter": "1ms", "rate": "5Mbit"}})
    assert model.properties(ORIGIN, at(3e6)) == LinkProperties(5_000_000, 11_007, 1000)
    assert model.properties(ORIGIN, ORIGIN).delay_us == 1000


@pytest.mark.unit
def test_fixed_ignores_positions():
    model = lm.build({"model": "fixed", "params": {"rate": "20Mbit", "delay": "5ms"}})
    assert not model.USES_DISTANCE
    assert model.properties(ORIGIN, at(1)) == model.properties(ORIGIN, at(1e9))
    assert lm.build({"model": "fixed"}).properties(ORIGIN, ORIGIN) == IDEAL


@pytest.mark.unit
def test_bad_values_are_located_inside_params():
    with pytest.raises(lm.ModelError) as err:
        lm.build({"model": "laser", "params": {"rate": "fast"}})
    assert err.value.path == ["params", "rate"]
    with pytest.raises(lm.ModelError) as err:
        lm.build({"model": "warp-drive"})
    assert err.value.path == ["model"] and "choose one of fixed" in str(err.value)


# -- properties of the models ------------------------------------------------------------

DISTANCES = st.floats(0, 4e7, allow_nan=False)
FREE_SPACE_PARAMS = st.fixed_dictionaries({
    "frequency_hz": st.floats(1e6, 1e11),
    "tx_power_dbm": st.floats(-30, 50),
    "bandwidth_hz": st.floats(1e3, 1e9),
    "efficiency": st.floats(0.01, 1),
    "snr_threshold_db": st.floats(-10, 30),
    "snr_width_db": st.floats(0.1, 10),
    "rate": st.sampled_from(["1Mbit", "54Mbit", "1Gbit"]),
})


@pytest.mark.unit
@pytest.mark.parametrize("name", ["propagation", "free-space", "laser"])
@given(d1=DISTANCES, d2=DISTANCES)
def test_delay_is_monotonic_in_distance(name, d1, d2):
    model = lm.build({"model": name, "params": {"range_m": 1e8} if name == "laser" else {}})
    near, far = sorted((d1, d2))
    assert model.properties(ORIGIN, at(near)).delay_us <= model.properties(ORIGIN, at(far)).delay_us


@pytest.mark.unit
@given(params=FREE_SPACE_PARAMS, d1=DISTANCES, d2=DISTANCES)
def test_free_space_loss_in_range_rate_capped_and_worse_with_distance(params, d1, d2):
    model = lm.build({"model": "free-space", "params": params})
    near, far = sorted((d1, d2))
    pn, pf = model.properties(ORIGIN, at(near)), model.properties(ORIGIN, at(far))
    for p in (pn, pf):
        assert 0.0 <= p.loss_pct <= 100.0
        assert lm.MIN_RATE_BPS <= p.rate_bps <= model.max_rate_bps
    assert pf.rate_bps <= pn.rate_bps and pf.loss_pct >= pn.loss_pct


@pytest.mark.unit
@given(a=st.tuples(*[st.floats(-1e7, 1e7)] * 3), b=st.tuples(*[st.floats(-1e7, 1e7)] * 3))
def test_models_are_symmetric(a, b):
    for name in lm.REGISTRY:
        model = lm.build({"model": name})
        assert model.properties(a, b) == model.properties(b, a)


# -- the registry and its schema ----------------------------------------------------------


@pytest.mark.unit
def test_shipped_schema_is_the_one_built_from_the_registry():
    assert json.loads(SCHEMA_FILE.read_text()) == lm.schema()


@pytest.mark.unit
def test_every_parameter_is_documented_with_a_unit_or_unit_string():
    for cls in lm.REGISTRY.values():
        for p in cls.PARAMS:
            unitless = p.name in ("efficiency",)
            assert unitless or any(u in p.description or u in p.name for u in
                                   ("Hz", "dB", "bit", "ms", "%", "m/s", "metres")), p.name


@pytest.mark.unit
def test_a_user_model_registers_and_is_validated_like_a_built_in(monkeypatch):
    monkeypatch.setattr(lm, "REGISTRY", dict(lm.REGISTRY))

    @lm.register
    class Constant(lm.Fixed):
        NAME = "constant"

    assert "constant" in lm.schema()["properties"]["model"]["description"]
    assert isinstance(lm.build({"model": "constant"}), Constant)
