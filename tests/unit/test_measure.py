"""Reading ping's output (linkemu/measure.py): what the kernel tests and bench judge by."""

from __future__ import annotations

import pytest

from linkemu import measure

PER_PACKET = """PING 198.19.0.2 (198.19.0.2) 56(84) bytes of data.
64 bytes from 198.19.0.2: icmp_seq=1 ttl=62 time=5.52 ms
64 bytes from 198.19.0.2: icmp_seq=3 ttl=62 time=5.61 ms
64 bytes from 198.19.0.2: icmp_seq=4 ttl=62 time=25.1 ms

--- 198.19.0.2 ping statistics ---
4 packets transmitted, 3 received, 25% packet loss, time 61ms
rtt min/avg/max/mdev = 5.520/12.076/25.100/9.211 ms
"""

ALL_LOST = """PING 198.19.0.2 (198.19.0.2) 56(84) bytes of data.

--- 198.19.0.2 ping statistics ---
2 packets transmitted, 0 received, +2 errors, 100% packet loss, time 1029ms
"""


@pytest.mark.unit
def test_per_packet_times_counts_and_statistics():
    result = measure.parse_ping(PER_PACKET)
    assert (result.sent, result.received) == (4, 3)
    assert result.rtts_ms == (5.52, 5.61, 25.1)
    assert result.loss_pct == 25.0
    assert result.median_ms == 5.61 and result.min_ms == 5.52
    assert result.p90_ms == 5.61  # the 90th percentile by rank of three samples
    assert result.summary()["median_ms"] == 5.61


@pytest.mark.unit
def test_nothing_received_has_no_rtts_and_full_loss():
    result = measure.parse_ping(ALL_LOST)
    assert (result.sent, result.received, result.rtts_ms) == (2, 0, ())
    assert result.loss_pct == 100.0
    assert result.summary()["median_ms"] is None


@pytest.mark.unit
def test_text_that_is_not_ping_output_is_refused():
    with pytest.raises(ValueError, match="not ping output"):
        measure.parse_ping("ping: connect: Network is unreachable\n")


@pytest.mark.unit
def test_head_of_line_rise_is_loaded_minus_idle_median():
    idle = measure.parse_ping(PER_PACKET)
    loaded = measure.PingResult(3, 3, (6.0, 7.0, 8.0))
    assert measure.HeadOfLine(idle, loaded).rise_ms == round(7.0 - 5.61, 3)
    assert measure.HeadOfLine(idle, measure.parse_ping(ALL_LOST)).rise_ms is None
