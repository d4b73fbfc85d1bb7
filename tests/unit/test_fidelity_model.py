"""The fidelity comparison (nestednet.model.fidelity) on hand-made kernel readings."""

from __future__ import annotations

import pytest

from nestednet.model.fidelity import differences, summary
from nestednet.model.tcplan import LinkShape

pytestmark = pytest.mark.unit


def test_a_rate_held_in_whole_bytes_matches():
    # 20 Mbit/s is 2,500,000 B/s exactly; 1,000,003 bit/s is held as 125,000 B/s.
    assert differences(LinkShape(20_000_000), {"rate_bps": 20_000_000}, netem=False) == []
    assert differences(LinkShape(1_000_003), {"rate_bps": 1_000_000}, netem=False) == []


def test_a_changed_rate_and_a_missing_tree_are_reported():
    assert differences(LinkShape(20_000_000), {"rate_bps": 1_000_000}, netem=False) == [
        "rate 1000000 bit/s, configured 20000000"]
    assert differences(LinkShape(20_000_000), None, netem=False) == [
        "no tree of ours on the port"]


def test_netem_properties_count_only_where_netem_is_used():
    shape = LinkShape(10_000_000, delay_us=5000, jitter_us=0, loss_pct=1.0)
    held = {"rate_bps": 10_000_000, "delay_us": 5001, "jitter_us": 0, "loss_pct": 1.0}
    assert differences(shape, held, netem=True) == []
    held_off = held | {"delay_us": 7000, "loss_pct": 0.5}
    assert differences(shape, held_off, netem=True) == ["delay 7000, configured 5000",
                                                        "loss 0.5, configured 1.0"]
    assert differences(LinkShape(10_000_000), held_off, netem=False) == []


def test_summary_counts_and_lists_mismatches():
    records = [{"matched": True, "port": "a"},
               {"matched": False, "port": "b", "checked_step": 1, "direction": "x->y",
                "differences": ["rate 1 bit/s, configured 2"]}]
    assert summary(records) == {"checks": 2, "matched": 1, "mismatched": [
        {"checked_step": 1, "port": "b", "direction": "x->y",
         "differences": ["rate 1 bit/s, configured 2"]}]}
